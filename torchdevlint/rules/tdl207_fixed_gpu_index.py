"""TDL207 fixed-gpu-index."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains.naming import GPU_COUNT_WORDS
from torchdevlint.analysis.devices import TORCH_DEVICE, device_literal, integer_value, mentions_any, string_value
from torchdevlint.analysis.test_code import is_test_code
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

# Calls whose first argument (or `device=`) is the index of the GPU to use.
_INDEX_CALLS = frozenset({"torch.cuda.set_device", "torch.cuda.device"})
# Wrappers whose `device_ids` list the GPUs a model is replicated on.
_REPLICATING = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                          "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.data_parallel"})
_NAMED_CALLS = TORCH_DEVICE | _INDEX_CALLS | _REPLICATING


@dataclass(frozen=True)
class GpuIndexOptions:
    # Tests hold devices as data (`torch.device("cuda", 1)` in a parametrize list, a mocked
    # `set_device`) and run where the project's CI has the GPUs: not reported by default.
    include_tests: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.include_tests, bool):
            raise ValueError("include-tests must be true or false")


@dataclass(frozen=True)
class _Site:
    node: cst.CSTNode
    indices: tuple[int, ...]
    fix: PendingFix | None


class FixedGpuIndex(Rule):
    """
    ## What it does
    Finds a GPU other than the first written into the program: `"cuda:1"`,
    `torch.device("cuda", 2)`, `.cuda(1)`, `.to(1)`, `torch.cuda.set_device(1)`,
    `with torch.cuda.device(1):` and `device_ids=[1, 2]`, where the program names no GPU
    0 beside it.

    ## Why is this bad?
    The index is the author's machine: on a machine with fewer GPUs (a laptop, a Colab
    runtime, a one-GPU cloud instance, a job given one GPU by its scheduler) the first use
    fails with "CUDA error: invalid device ordinal" (DataParallel: "Invalid device id").
    Which GPU a run uses is the user's choice: `CUDA_VISIBLE_DEVICES=1 python train.py`
    makes GPU 1 the program's `cuda:0`, and a `--gpu` setting can say it too.

    ## Not reported
    Not reported: programs that name GPU 0 as well as another (model parallelism,
    `device_ids=[0, 1]`: several GPUs by design), indices under a test of how many GPUs
    there are (`if torch.cuda.device_count() > 1:`), after an early exit on it (`if
    torch.cuda.device_count() < 2: pytest.skip(...)`) or in a test whose decorator asks for
    several (`@pytest.mark.skipif(torch.cuda.device_count() < 2, ...)`,
    `@RunIf(min_cuda_gpus=2)`), settings (`add_argument("--device",
    default="cuda:1")` can be changed without editing the code), comparisons
    (`if device == "cuda:1":`), and indices held in variables.

    ## Fix safety
    Unsafe: `"cuda:1"` becomes `"cuda"` and `.cuda(1)` becomes `.cuda()`, the current GPU,
    which is the first unless the program or `CUDA_VISIBLE_DEVICES` says otherwise. On a
    machine with several GPUs the program then runs on another one than before. Other
    forms are not fixed.

    Test code (a `test_*.py`, `*_test.py` or `conftest.py` file, or a module that imports
    pytest or unittest) is not reported unless `include-tests` is set.

    ## Options
    - `include-tests` (default `false`): also report indices in test code.
    """

    Options = GpuIndexOptions
    options: GpuIndexOptions

    code = "TDL207"
    slug = "fixed-gpu-index"
    message = "A GPU other than the first is hard-coded: with fewer GPUs this fails (invalid device ordinal)"
    fix_title = "Use the current GPU"
    requires_any_text = ("cuda",)

    VALID = [
        Valid(
            """
            import sys

            import torch
            from bench_tools import requires_multi_gpu

            if torch.cuda.device_count() < 2:
                sys.exit("this benchmark copies between two GPUs")
            source = torch.ones(1024, device="cuda:1")

            @requires_multi_gpu
            def copy_back():
                return torch.ones(1024).cuda(1)
            """,
            name="after-an-exit-on-the-gpu-count-or-in-a-function-that-requires-several",
        ),
        Valid(
            """
            import pytest
            import torch

            @pytest.mark.parametrize("device", [torch.device("cuda", 1), torch.device("cuda", 3)])
            def test_strategy_keeps_its_root_device(device):
                assert make_strategy(device).root_device == device
            """,
            name="test-code-holds-devices-as-data",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class TwoStage(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.first = nn.Linear(8, 8).to("cuda:0")
                    self.second = nn.Linear(8, 2).to("cuda:1")

                def forward(self, x):
                    return self.second(self.first(x.to("cuda:0")).to("cuda:1"))
            """,
            name="model-parallelism-names-gpu-zero-too",
        ),
        Valid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda:1", choices=["cpu", "cuda:0", "cuda:1"])
            args = parser.parse_args()
            device = torch.device(args.device)
            if args.device == "cuda:1":
                print("second GPU")
            spare = torch.device("cuda:1") if torch.cuda.device_count() > 1 else torch.device("cuda")
            """,
            name="settings-comparisons-counted-and-gpu-zero",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            device = torch.device("cuda:1" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            """,
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-second-gpu-device",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            torch.cuda.set_device(2)
            net = nn.DataParallel(nn.Linear(4, 2).cuda(2), device_ids=[2, 3])
            with torch.cuda.device(2):
                x = torch.randn(8, 4).cuda(2)
                y = torch.zeros(8, device=torch.device("cuda", 2))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            torch.cuda.set_device(2)
            net = nn.DataParallel(nn.Linear(4, 2).cuda(), device_ids=[2, 3])
            with torch.cuda.device(2):
                x = torch.randn(8, 4).cuda()
                y = torch.zeros(8, device=torch.device("cuda", 2))
            """,
            applicability=Applicability.UNSAFE,
            count=6,
            name="the-same-fixed-gpu-in-every-form",
        ),
    ]

    def setup(self) -> None:
        self._sites: list[_Site] = []
        self._names_gpu_zero = False

    def leave_Module(self, node: cst.Module) -> None:
        if self._names_gpu_zero:
            return  # several GPUs by design
        if not self.options.include_tests and is_test_code(self.context.path, node, self.context.names.imports_from):
            return
        for site in self._sites:
            highest = max(site.indices)
            message = (f"GPU {highest} is hard-coded: on a machine with {highest} GPU{'s' if highest > 1 else ''} "
                       "or fewer this fails with 'invalid device ordinal'; choose the GPU with "
                       "CUDA_VISIBLE_DEVICES or a setting")
            self.report(site.node, message=message, fix=site.fix)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is None or not value.startswith("cuda:"):
            return
        literal = device_literal(node, self.context.names)
        if literal is None or literal.index is None or self._configurable_or_compared(node):
            return
        fix = self.make_fix(NodeEdit(node, node.value.replace(value, "cuda")), applicability=Applicability.UNSAFE)
        self._note(node, (literal.index,), fix)

    def visit_Call(self, node: cst.Call) -> None:
        # Named only among the calls this rule reads: every call of every file comes here.
        qualified = self.context.names.qualified_name(node.func, among=_NAMED_CALLS.__contains__)
        if qualified in TORCH_DEVICE:
            literal = device_literal(node, self.context.names)
            if literal is not None and literal.type == "cuda" and literal.index is not None \
                    and string_value(node.args[0].value) == "cuda":
                self._note(node, (literal.index,), None)
            return
        if qualified in _INDEX_CALLS:
            given = keyword_argument(node, "device")
            argument = node.args[0].value if node.args and node.args[0].keyword is None else \
                given.value if given is not None else None
            index = integer_value(argument) if argument is not None else None
            if index is not None:
                self._note(argument or node, (index,), None)
            return
        if qualified in _REPLICATING:
            self._device_ids(node)
            return
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("cuda", "to") and qualified is None:
            self._moved_to_index(node, node.func.attr.value)

    def _moved_to_index(self, node: cst.Call, method: str) -> None:
        """`.cuda(1)`, `.cuda(device=1)`, `.to(1)`: an integer is a CUDA device's index."""
        argument = node.args[0] if node.args else None
        if argument is None or argument.star:
            return
        if argument.keyword is not None and argument.keyword.value != "device":
            return
        index = integer_value(argument.value)
        if index is None or index < 0:
            return
        fix = None
        if method == "cuda" and len(node.args) == 1:
            fix = self.make_fix(NodeEdit(node, self.context.code_for_node(node.func) + "()"),
                                applicability=Applicability.UNSAFE)
        self._note(argument.value, (index,), fix)

    def _device_ids(self, node: cst.Call) -> None:
        given = keyword_argument(node, "device_ids")
        ids = given.value if given is not None else None
        if ids is None and len(node.args) > 1 and node.args[1].keyword is None:
            ids = node.args[1].value
        if not isinstance(ids, (cst.List, cst.Tuple)) or not ids.elements:
            return
        indices = [integer_value(element.value) for element in ids.elements]
        if any(index is None for index in indices):
            return
        self._note(ids, tuple(index for index in indices if index is not None), None)

    def _note(self, node: cst.CSTNode, indices: tuple[int, ...], fix: PendingFix | None) -> None:
        if 0 in indices:
            self._names_gpu_zero = True
            return
        if not indices or self._counted(node):
            return
        self._sites.append(_Site(node, indices, fix))

    def _counted(self, node: cst.CSTNode) -> bool:
        """Where the program has asked how many GPUs there are: under a test of it (`x if
        torch.cuda.device_count() > 1 else y`), after an early exit on it (`if
        torch.cuda.device_count() < 2: pytest.skip(...)`), or in a test that a decorator
        keeps to machines with several (`@skipif(torch.cuda.device_count() < 2, ...)`)."""
        inner: cst.CSTNode = node
        # An argument of the call being visited is not on the walk's path yet: the call is.
        path = self.context.ancestors(node) or list(reversed(self.context.stack))
        for ancestor in path:
            test = ancestor.test if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) else None
            if test is not None and mentions_any(test, GPU_COUNT_WORDS):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)) and any(
                    mentions_any(decorator.decorator, GPU_COUNT_WORDS) for decorator in ancestor.decorators):
                return True
            if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
                position = next((index for index, statement in enumerate(ancestor.body) if statement is inner), 0)
                if any(_exits_when_counted(statement) for statement in ancestor.body[:position]):
                    return True
            inner = ancestor
        return False

    def _configurable_or_compared(self, node: cst.SimpleString) -> bool:
        """A setting's default or choices (`add_argument(..., default="cuda:1")`), or a value
        compared with (`device == "cuda:1"`): not where the program runs."""
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, cst.Comparison):
                return True
            if isinstance(ancestor, cst.Call) and isinstance(ancestor.func, cst.Attribute) \
                    and ancestor.func.attr.value in ("add_argument", "get", "getenv", "setdefault"):
                return True
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.FunctionDef)):
                return False
        return False


def _exits_when_counted(statement: cst.CSTNode) -> bool:
    """`if torch.cuda.device_count() < 2: return` (or `raise`, `continue`, `pytest.skip(...)`,
    `self.skipTest(...)`, `sys.exit(...)`)."""
    if not isinstance(statement, cst.If) or not mentions_any(statement.test, GPU_COUNT_WORDS):
        return False
    last = statement.body.body[-1] if statement.body.body else None
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        small = last.body[-1]
        if isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
            return True
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            func = small.value.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            return name in ("skip", "skipTest", "exit")
    return False
