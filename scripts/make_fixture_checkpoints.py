"""Write the checkpoints the TDL003 fixtures load: files a first run on a GPU box left behind.

    python scripts/make_fixture_checkpoints.py

Each is saved from the CPU, as any checkpoint is here; `verify`'s CPU-only host loads a file
its run did not write as one a GPU wrote (`torchdevlint.verify.host.gpu_trained_checkpoints`).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def convnet_weights() -> None:
    fixture = FIXTURES / "tdl003_gpu_checkpoint_on_cpu_host.py"
    names = runpy.run_path(str(fixture), run_name="fixture")
    torch.manual_seed(1)
    model = names["SmallConvNet"]()
    torch.save(model.state_dict(), fixture.with_suffix(".pt"))


def first_run_of_the_regressor(epochs: int = 2) -> None:
    fixture = FIXTURES / "tdl003_resume_training_checkpoint.py"
    names = runpy.run_path(str(fixture), run_name="fixture")
    torch.manual_seed(1)
    x = torch.randn(160, 8)
    y = x[:, :1] * 2.0 - x[:, 1:2] + 0.1 * torch.randn(160, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    device = torch.device("cpu")
    model, optimizer = names["build"](device)
    for _ in range(epochs):
        names["train_epoch"](model, optimizer, loader, device)
    checkpoint = {"epoch": epochs - 1, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(checkpoint, fixture.with_suffix(".pt"))


if __name__ == "__main__":
    convnet_weights()
    first_run_of_the_regressor()
