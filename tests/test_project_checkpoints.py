"""TDL003 reads the project a load belongs to: a checkpoint loaded without `map_location` is
reported where some file of the project saves what may hold GPU tensors, not where every file
loaded comes from elsewhere (released weights, a conversion of another framework's)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import run_cli

from torchdevlint.project_checkpoints import checkpoint_writing, forget, project_root

PREDICT = """
import torch
import torch.nn as nn
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model.load_state_dict(torch.load("weights/classifier.pth"))
model.to(device)
"""

GPU_TRAINING = """
import torch
import torch.nn as nn
model = nn.Linear(8, 2).cuda()
for step in range(10):
    model(torch.randn(4, 8).cuda()).sum().backward()
torch.save(model.state_dict(), "weights/classifier.pth")
"""

# Converts another framework's arrays: nothing in it runs on a GPU.
CONVERSION = """
import numpy as np
import torch
import torch.nn as nn
def convert(arrays_file, out_file):
    arrays = np.load(arrays_file)
    model = nn.Linear(8, 2)
    model.weight.data = torch.from_numpy(arrays["w"])
    torch.save(model.state_dict(), out_file)
"""

# A trainer class that saves the model it was handed; the device is chosen elsewhere.
TRAINER = """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
    def save(self, epoch, path):
        state = {"epoch": epoch, "model": self.model.state_dict()}
        torch.save(state, path)
"""

MAIN_ON_THE_DEVICE = """
import torch
from trainer import Trainer
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = build().to(device)
Trainer(model, None).save(0, "weights/classifier.pth")
"""


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def _codes(root: Path, *paths: str) -> list[tuple[str, str]]:
    found = json.loads(run_cli("check", "--format", "json", *(paths or (".",)), cwd=root).stdout)
    return sorted((Path(item["path"]).name, item["code"]) for item in found)


def test_a_load_is_reported_where_the_project_trains_on_a_gpu_and_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "train.py": GPU_TRAINING})
    assert _codes(root) == [("predict.py", "TDL003")]
    # Linting the one file (pre-commit, an editor) reads the same project.
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]


def test_released_weights_are_not_reported_where_nothing_in_the_project_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    assert _codes(root) == []


def test_a_conversion_that_saves_host_tensors_writes_no_gpu_checkpoint(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "tools/convert.py": CONVERSION})
    assert _codes(root) == []
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and not writing.writes_device_checkpoints


def test_a_trainer_saving_the_model_it_was_handed_in_a_project_on_the_gpu(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "trainer.py": TRAINER, "main.py": MAIN_ON_THE_DEVICE})
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and ("trainer.py", 8) in writing.device_saves


def test_a_tests_own_round_trip_writes_no_project_checkpoint(tmp_path: Path) -> None:
    test = """
    import torch
    def test_round_trip(tmp_path):
        torch.save(torch.ones(2, device="cuda"), tmp_path / "t.pt")
    """
    root = _project(tmp_path, {"predict.py": PREDICT, "tests/test_io.py": test})
    assert _codes(root, "predict.py") == []


def test_the_cached_result_follows_a_save_added_in_another_file(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    assert _codes(root, "predict.py") == []
    (root / "train.py").write_text(textwrap.dedent(GPU_TRAINING))
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]
    (root / "train.py").unlink()
    assert _codes(root, "predict.py") == []


def test_a_notebook_that_trains_on_the_gpu_and_saves_is_a_writer(tmp_path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": textwrap.dedent(GPU_TRAINING).splitlines(keepends=True)},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["!nvidia-smi\n", "%matplotlib inline\n"]}]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    root = _project(tmp_path, {"predict.py": PREDICT, "train.ipynb": json.dumps(notebook)})
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]


def test_the_project_is_the_folder_with_a_marker_or_the_code_folders_above_the_file(tmp_path: Path) -> None:
    # A folder of projects holds no Python file itself: each project is its own.
    collection = _project(tmp_path, {"gan/train.py": GPU_TRAINING, "classifier/predict.py": PREDICT,
                                     "classifier/models/net.py": "import torch\n"})
    assert project_root(str(collection / "classifier/models/net.py")) == collection / "classifier"
    assert _codes(collection) == []
    (collection / "pyproject.toml").write_text("[project]\nname = 'collection'\n")
    forget()  # what a new run does
    assert project_root(str(collection / "classifier/models/net.py")) == collection
    assert _codes(collection) == [("predict.py", "TDL003")]
    assert project_root(str(tmp_path / "no-such-file.py")) is None


def test_the_option_reports_loads_of_files_from_outside_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    (root / "pyproject.toml").write_text("[tool.torchdevlint.TDL003]\ninclude-outside-checkpoints = true\n")
    assert _codes(root) == [("predict.py", "TDL003")]


def test_show_settings_says_what_the_project_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    shown = run_cli("check", "--show-settings", "predict.py", cwd=root).stdout
    assert f"project: {root}" in shown
    assert "writes no checkpoint that may hold GPU tensors" in shown
    (root / "train.py").write_text(textwrap.dedent(GPU_TRAINING).lstrip())
    shown = run_cli("check", "--show-settings", "predict.py", cwd=root).stdout
    assert "may hold GPU tensors, e.g. train.py:6" in shown


def test_a_save_of_a_host_copy_writes_no_gpu_checkpoint(tmp_path: Path) -> None:
    saver = """
    import torch
    def save_network(net, path, gpu_ids):
        torch.save(net.cpu().state_dict(), path)
        if gpu_ids and torch.cuda.is_available():
            net.cuda()
    """
    root = _project(tmp_path, {"predict.py": PREDICT, "util.py": saver})
    assert _codes(root) == []
