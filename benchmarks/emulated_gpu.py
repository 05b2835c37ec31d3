"""Times training steps on the emulated GPU against the same steps on the CPU.

    python benchmarks/emulated_gpu.py            # needs torch
    python benchmarks/emulated_gpu.py --steps 10

Each workload runs the same seeded steps (forward, backward, optimizer) on the CPU and then,
inside `emulated_gpu()`, on `cuda`. Prints the median step time of each and their ratio (and
the ratio of the fastest steps, steadier on a busy machine): the cost of the emulation's
per-operation checks, which matters most where operations are tiny.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from torchdevlint.verify.emulation import emulated_gpu

Workload = tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]


def _first(output: object) -> torch.Tensor:
    first = output[0] if isinstance(output, tuple) else output
    assert isinstance(first, torch.Tensor)
    return first


WORKLOADS: dict[str, Workload] = {
    "MLP 784-128-10, batch 64": (
        lambda: nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)),
        lambda: torch.randn(64, 784),
    ),
    "CNN 2 conv + linear, 32x3x32x32": (
        lambda: nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Flatten(),
                              nn.Linear(64 * 28 * 28, 10)),
        lambda: torch.randn(32, 3, 32, 32),
    ),
    "LSTM 256->512 x2, 35 steps, batch 32": (lambda: nn.LSTM(256, 512, 2), lambda: torch.randn(35, 32, 256)),
    "LSTM 64->128, 20 steps, batch 16": (lambda: nn.LSTM(64, 128), lambda: torch.randn(20, 16, 64)),
}


def _step_times(workload: Workload, device: str, steps: int) -> list[float]:
    torch.manual_seed(0)
    make_model, make_input = workload
    model = make_model().to(device)
    inputs = make_input().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps + 1):  # the first step warms up
        started = time.perf_counter()
        optimizer.zero_grad()
        _first(model(inputs)).sum().backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'workload':40} {'CPU ms':>9} {'emulated ms':>12} {'ratio':>6} {'fastest steps ratio':>20}")
    for name, workload in WORKLOADS.items():
        cpu_steps = _step_times(workload, "cpu", args.steps)
        with emulated_gpu():
            emulated_steps = _step_times(workload, "cuda", args.steps)
        cpu, emulated = statistics.median(cpu_steps), statistics.median(emulated_steps)
        # The fastest steps are the least disturbed by the rest of a busy machine.
        print(f"{name:40} {cpu * 1e3:9.1f} {emulated * 1e3:12.1f} {emulated / cpu:6.2f} "
              f"{min(emulated_steps) / min(cpu_steps):20.2f}")


if __name__ == "__main__":
    main()
