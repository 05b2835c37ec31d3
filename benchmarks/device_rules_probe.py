"""Which mixes of GPU and CPU tensors each common operation accepts: on a real GPU or on the
emulated one, with the same calls, to compare the emulation's device rules with CUDA's.

    python benchmarks/device_rules_probe.py real > real.json            # on a machine with CUDA
    python benchmarks/device_rules_probe.py emulated --against real.json   # here: the disagreements

Prints, as JSON, {operation: {mix: "ok" | "<error type>: <first line>"}} for about fifty
operations (element-wise, comparisons, where/masked_fill/clamp, losses, matrix products, cat,
indexing and gathering) and six mixes of a GPU tensor with a CPU one (0-dim or not), or four
for indices; for about thirty whole steps with one part on the CPU (a layer's input or
parameter, a norm's running statistics, an RNN's state, a loss weight, a gradient); and the
dtype `torch.autocast("cuda")` gives some twenty operations. `benchmarks/data/device_rules_h200.json` holds the answers of an H200 (torch
2.11.0+cu130, 2026-11-26); `tests/test_verify.py` checks the emulation against them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
Operation = Callable[[Tensor, Tensor], object]
RECORDED = Path(__file__).resolve().parent / "data" / "device_rules_h200.json"


def _gpu(*shape: int) -> Tensor:
    return (torch.rand(*shape) if shape else torch.tensor(0.5)).to("cuda")


def _cpu(*shape: int) -> Tensor:
    return torch.rand(*shape) if shape else torch.tensor(0.5)


ELEMENTWISE: dict[str, Operation] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b, "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "fmod": torch.fmod, "remainder": torch.remainder, "eq": lambda a, b: a == b, "lt": lambda a, b: a < b,
    "lt_scalar_first": lambda a, b: b < a, "logical_and": torch.logical_and, "copysign": torch.copysign,
    "hypot": torch.hypot, "logaddexp": torch.logaddexp, "nextafter": torch.nextafter, "xlogy": torch.xlogy,
    "floor_divide": torch.floor_divide, "lerp_w": lambda a, b: torch.lerp(a, a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b), "clamp_min": lambda a, b: torch.clamp(a, min=b),
    "where_other": lambda a, b: torch.where(a > 0.3, a, b), "where_cond": lambda a, b: torch.where(b > 0.3, a, a),
    "masked_fill_value": lambda a, b: a.masked_fill(a > 0.3, b), "masked_fill_mask": lambda a, b: a.masked_fill(b > 0.3, 1.0),
    "mse_loss": F.mse_loss, "l1_loss": F.l1_loss,
    "bce": lambda a, b: F.binary_cross_entropy(a.clamp(0.1, 0.9), b.clamp(0.1, 0.9)), "dist": torch.dist,
    "dot": lambda a, b: torch.dot(a.flatten(), b.flatten().expand(a.numel()) if b.dim() == 0 else b.flatten()),
    "matmul": lambda a, b: a @ b, "mm_dim": lambda a, b: torch.mm(a.reshape(-1, 1), b.reshape(1, -1)),
    "cat": lambda a, b: torch.cat([a, b.reshape(-1)]), "stack": lambda a, b: torch.stack([a, b.expand_as(a)]),
    "mul_inplace": lambda a, b: a.mul_(b), "add_inplace_host": lambda a, b: b.add_(a),
    "copy_": lambda a, b: a.copy_(b.expand_as(a)), "index_put": lambda a, b: a.__setitem__(0, b),
    "sum_dot": lambda a, b: (a * b).sum(),
}
MIXES: dict[str, Callable[[], tuple[Tensor, Tensor]]] = {
    "gpu,cpu0": lambda: (_gpu(3), _cpu()), "cpu0,gpu": lambda: (_cpu(), _gpu(3)), "gpu,cpu3": lambda: (_gpu(3), _cpu(3)),
    "gpu0,cpu3": lambda: (_gpu(), _cpu(3)), "gpu,gpu0": lambda: (_gpu(3), _gpu()), "cpu3,cpu0": lambda: (_cpu(3), _cpu()),
}
INDEXING: dict[str, Operation] = {
    "index_select": lambda a, i: torch.index_select(a, 0, i), "gather": lambda a, i: torch.gather(a, 0, i),
    "take": torch.take, "getitem": lambda a, i: a[i],
    "embedding": lambda a, i: F.embedding(i, a.reshape(3, 1)),
    "index_add": lambda a, i: a.index_add(0, i, a[: i.numel()]), "scatter": lambda a, i: a.scatter(0, i, a[: i.numel()]),
    "nll_loss": lambda a, i: F.nll_loss(a.reshape(1, 3), i[:1]),
    "cross_entropy": lambda a, i: F.cross_entropy(a.reshape(1, 3), i[:1]),
    "bucketize": lambda a, i: torch.bucketize(a, i.float().sort().values), "one_hot": lambda a, i: F.one_hot(i, 3) * a[0],
}
INDEX_MIXES: dict[str, Callable[[], tuple[Tensor, Tensor]]] = {
    "gpu,idx_cpu": lambda: (_gpu(3), torch.tensor([0, 2])), "gpu,idx_cpu0": lambda: (_gpu(3), torch.tensor(1)),
    "cpu,idx_gpu": lambda: (_cpu(3), torch.tensor([0, 2]).to("cuda")),
    "gpu,idx_gpu": lambda: (_gpu(3), torch.tensor([0, 2]).to("cuda")),
}


# Whole steps with one part on the CPU: a module's input, a parameter, a buffer, an RNN state,
# a loss weight, a gradient, an optimizer's state; and results of GPU work indexing CPU data.
def _module_cases() -> dict[str, Callable[[], object]]:
    nn = torch.nn

    def linear_cpu_input() -> object:
        return nn.Linear(3, 2).to("cuda")(torch.rand(4, 3))

    def linear_cpu_bias() -> object:
        return F.linear(_gpu(4, 3), _gpu(2, 3), torch.rand(2))

    def layer_norm_cpu_weight() -> object:
        return F.layer_norm(_gpu(4, 3), (3,), torch.rand(3), None)

    def batch_norm_cpu_running_stats() -> object:
        return F.batch_norm(_gpu(4, 3), torch.zeros(3), torch.ones(3), training=False)

    def batch_norm_cpu_running_stats_training() -> object:
        return F.batch_norm(_gpu(4, 3), torch.zeros(3), torch.ones(3), training=True)

    def conv_cpu_input() -> object:
        return nn.Conv2d(1, 2, 3).to("cuda")(torch.rand(1, 1, 5, 5))

    def conv_cpu_bias() -> object:
        return F.conv2d(_gpu(1, 1, 5, 5), _gpu(2, 1, 3, 3), torch.rand(2))

    def lstm_cpu_hidden() -> object:
        return nn.LSTM(3, 4).to("cuda")(_gpu(2, 1, 3), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)))

    def gru_cpu_hidden() -> object:
        return nn.GRU(3, 4).to("cuda")(_gpu(2, 1, 3), torch.zeros(1, 1, 4))

    def rnn_cpu_hidden_0dim_batch() -> object:
        return nn.RNN(3, 4).to("cuda")(_gpu(2, 3), torch.zeros(1, 4))

    def embedding_bag_cpu_offsets() -> object:
        return F.embedding_bag(torch.tensor([1, 2]).to("cuda"), _gpu(10, 4), torch.tensor([0]))

    def softmax_then_cpu_mul() -> object:
        return F.softmax(_gpu(3), 0) * torch.rand(3)

    def prelu_cpu_weight() -> object:
        return F.prelu(_gpu(4, 3), torch.rand(1))

    def cross_entropy_cpu_weight() -> object:
        return F.cross_entropy(_gpu(4, 3), torch.tensor([0, 1, 2, 0]).to("cuda"), weight=torch.rand(3))

    def bce_logits_cpu_pos_weight() -> object:
        return F.binary_cross_entropy_with_logits(_gpu(4), _gpu(4), pos_weight=torch.rand(4))

    def bce_logits_cpu_pos_weight_0dim() -> object:
        return F.binary_cross_entropy_with_logits(_gpu(4), _gpu(4), pos_weight=torch.tensor(2.0))

    def cosine_similarity_cpu() -> object:
        return F.cosine_similarity(_gpu(4, 3), torch.rand(4, 3))

    def pairwise_distance_cpu() -> object:
        return F.pairwise_distance(_gpu(4, 3), torch.rand(4, 3))

    def interpolate_then_add_cpu0() -> object:
        return F.interpolate(_gpu(1, 1, 4), scale_factor=2) + torch.tensor(1.0)

    def topk_then_index_cpu() -> object:
        values, indices = _gpu(5).topk(2)
        return torch.rand(5)[indices]

    def argmax_eq_cpu_labels() -> object:
        return (_gpu(4, 3).argmax(1) == torch.tensor([0, 1, 2, 0])).float().mean()

    def sum_of_eq_cpu0() -> object:
        return (_gpu(4, 3).argmax(1) == torch.tensor(1)).sum()

    def cumsum_cpu_add() -> object:
        return _gpu(3).cumsum(0) + torch.rand(3)

    def tensor_of_gpu_scalars() -> object:
        return torch.tensor([_gpu().item(), 1.0]) + _gpu(2)

    def stack_of_gpu_0dims_cpu() -> object:
        return torch.stack([_gpu(), torch.tensor(0.5)])

    def cat_gpu_and_empty_cpu() -> object:
        return torch.cat([_gpu(3), torch.empty(0)])

    def matmul_cpu0() -> object:
        return _gpu(3) @ torch.rand(3)

    def outer_cpu() -> object:
        return torch.outer(_gpu(3), torch.rand(2))

    def einsum_cpu0() -> object:
        return torch.einsum("i,->i", _gpu(3), torch.tensor(2.0))

    def multinomial_then_cpu_index() -> object:
        return torch.rand(4)[torch.multinomial(_gpu(4), 1)]

    def clip_grad_norm_mixed() -> object:
        model = torch.nn.Linear(2, 2)
        model.weight.grad = torch.rand(2, 2).to("cuda")
        model.bias.grad = torch.rand(2)
        return torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    def sgd_step_cpu_grad_on_gpu_param() -> object:
        weight = torch.nn.Parameter(_gpu(2))
        weight.grad = torch.rand(2)
        torch.optim.SGD([weight], lr=0.1).step()
        return weight

    def adam_step_state_on_cpu() -> object:
        weight = torch.nn.Parameter(torch.rand(2))
        optimizer = torch.optim.Adam([weight], lr=0.1)
        weight.sum().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        weight.data = weight.data.to("cuda")
        weight.grad = torch.rand(2).to("cuda")
        optimizer.step()
        return weight

    return {name: case for name, case in locals().items() if callable(case) and not name.startswith("_")}


# What autocast makes of each operation on the GPU: the result's dtype (or the error).
AUTOCAST: dict[str, Callable[[], object]] = {
    "matmul": lambda: _gpu(4, 4) @ _gpu(4, 4),
    "linear": lambda: F.linear(_gpu(2, 4), _gpu(3, 4), _gpu(3)),
    "conv2d": lambda: F.conv2d(_gpu(1, 1, 5, 5), _gpu(2, 1, 3, 3)),
    "bmm": lambda: torch.bmm(_gpu(1, 2, 3), _gpu(1, 3, 2)),
    "addmm": lambda: torch.addmm(_gpu(2, 2), _gpu(2, 3), _gpu(3, 2)),
    "softmax": lambda: F.softmax(_gpu(2, 3) @ _gpu(3, 3), dim=-1),
    "log_softmax": lambda: F.log_softmax(_gpu(2, 3) @ _gpu(3, 3), dim=-1),
    "layer_norm": lambda: F.layer_norm(_gpu(2, 3) @ _gpu(3, 3), (3,)),
    "cross_entropy": lambda: F.cross_entropy(_gpu(2, 3) @ _gpu(3, 3), torch.tensor([0, 1]).to("cuda")),
    "mse_loss": lambda: F.mse_loss(_gpu(2, 3) @ _gpu(3, 3), _gpu(2, 3)),
    "add_half_float": lambda: (_gpu(2, 3) @ _gpu(3, 3)) + _gpu(2, 3),
    "sum": lambda: torch.sum(_gpu(2, 3) @ _gpu(3, 3)),
    "relu": lambda: F.relu(_gpu(2, 3) @ _gpu(3, 3)),
    "sigmoid": lambda: torch.sigmoid(_gpu(2, 3) @ _gpu(3, 3)),
    "exp": lambda: torch.exp(_gpu(2, 3) @ _gpu(3, 3)),
    "masked_fill_minus_1e9": lambda: (_gpu(2, 2) @ _gpu(2, 2)).masked_fill(_gpu(2, 2) > 0.5, -1e9),
    "masked_fill_minus_inf": lambda: (_gpu(2, 2) @ _gpu(2, 2)).masked_fill(_gpu(2, 2) > 0.5, float("-inf")),
    "sdpa": lambda: F.scaled_dot_product_attention(_gpu(1, 2, 4, 8), _gpu(1, 2, 4, 8), _gpu(1, 2, 4, 8)),
    "embedding": lambda: F.embedding(torch.tensor([1, 2]).to("cuda"), _gpu(5, 3)),
    "batch_norm": lambda: F.batch_norm(_gpu(4, 3) @ _gpu(3, 3), None, None, training=True),
    "cat_half_float": lambda: torch.cat([_gpu(2, 3) @ _gpu(3, 3), _gpu(2, 3)]),
    "lstm": lambda: torch.nn.LSTM(3, 4).to("cuda")(_gpu(2, 1, 3))[0],
}


def _autocast_outcome(case: Callable[[], object]) -> str:
    try:
        with torch.autocast("cuda"):
            result = case()
        if isinstance(result, Tensor):
            result.float().sum().item()
            return str(result.dtype)
    except Exception as error:  # noqa: BLE001 - the error is the answer
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    return "ok"


def _outcome(operation: Callable[..., object], make: Callable[[], tuple[Tensor, ...]]) -> str:
    try:
        result = operation(*make())
        if isinstance(result, tuple):
            result = result[0]
        if isinstance(result, Tensor):
            (result.any() if result.dtype == torch.bool else result.sum()).item()  # errors surface here on CUDA
    except Exception as error:  # noqa: BLE001 - the error is the answer
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    return "ok"


def probe() -> dict[str, dict[str, str]]:
    answers: dict[str, dict[str, str]] = {}
    for operations, mixes in ((ELEMENTWISE, MIXES), (INDEXING, INDEX_MIXES)):
        for name, operation in operations.items():
            answers[name] = {mix: _outcome(operation, make) for mix, make in mixes.items()}
    for name, case in _module_cases().items():
        answers[name] = {"as written": _outcome(case, tuple)}
    for name, case in AUTOCAST.items():
        answers[f"autocast {name}"] = {"dtype": _autocast_outcome(case)}
    return answers


@contextmanager
def _emulated() -> Iterator[None]:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        yield


def disagreements(answers: dict[str, dict[str, str]], against: dict[str, dict[str, str]]) -> list[str]:
    """Where one side runs and the other fails (the error's words may differ), or autocast
    gives another dtype."""
    def same(there: str, here: str | None) -> bool:
        if here is None:
            return False
        if there.startswith("torch.") or here.startswith("torch."):
            return there == here  # a dtype
        return (there == "ok") == (here == "ok")

    return [f"{name} {mix}: {against[name][mix]!r} there, {answers.get(name, {}).get(mix)!r} here"
            for name in sorted(against) for mix in sorted(against[name])
            if not same(against[name][mix], answers.get(name, {}).get(mix))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("device", choices=["real", "emulated"])
    parser.add_argument("--against", type=Path, help="answers of another run (JSON) to compare with")
    args = parser.parse_args()
    where: AbstractContextManager[None] = _emulated() if args.device == "emulated" else nullcontext()
    with where:
        answers = probe()
    if args.against is None:
        print(json.dumps(answers, indent=1, sort_keys=True))
        return
    against = json.loads(args.against.read_text())
    differ = disagreements(answers, against)
    total = sum(len(row) for row in against.values())
    print(f"{total - len(differ)} of {total} mixes agree")
    for line in differ:
        print(line)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
