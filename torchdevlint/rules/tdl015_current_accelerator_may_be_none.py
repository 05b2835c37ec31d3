"""TDL015 current-accelerator-may-be-none."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.flow.values import Off
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_ACCELERATOR_DEVICE, RuntimeProof

# What a device has that None has not.
_DEVICE_ATTRIBUTES = frozenset({"type", "index"})


@dataclass(frozen=True)
class _Read:
    node: cst.Attribute
    ancestors: tuple[cst.CSTNode, ...]


class CurrentAcceleratorMayBeNone(Rule):
    """
    ## What it does
    Finds `.type` or `.index` read from what `torch.accelerator.current_accelerator()`
    returned, where the program's CPU mode gets there: directly
    (`torch.accelerator.current_accelerator().type`), or through a variable, an attribute or
    a helper's return value that the flow model traces to the call, with no test on the way
    that rules out None (`if acc is not None:`, `acc.type if acc else "cpu"`, `if
    torch.accelerator.is_available():`) and no fallback joined in (`acc = ... or
    torch.device("cpu")`). Distributed programs (they import `torch.distributed`) are
    reported only where they offer a CPU mode (see TDL007): a tensor-parallel script
    launched with `torchrun` on GPUs has no CPU-only run to break.

    ## Why is this bad?
    `current_accelerator()` (PyTorch 2.6+) returns the accelerator the build supports, and
    `None` on a CPU-only build (the default `pip install torch` on many CI images and
    servers); with `check_available=True` it is `None` wherever no device is present. The
    device-neutral line written to run anywhere then fails where there is no accelerator:
    "AttributeError: 'NoneType' object has no attribute 'type'".

    ## Fix safety
    Unsafe. Where the read is on the call itself, the fix falls back to the CPU:
    `(torch.accelerator.current_accelerator() or torch.device("cpu")).type`. The program then
    runs on the CPU where it failed, which changes what it does there. Reads through a
    variable get no fix: the fallback belongs where the variable is bound.

    ## Options
    None.
    """

    code = "TDL015"
    slug = "current-accelerator-may-be-none"
    message = "torch.accelerator.current_accelerator() is None on a CPU-only build; this read fails there"
    fix_title = "Fall back to the CPU device"
    proof = RuntimeProof(NO_ACCELERATOR_DEVICE, host="cpu")
    requires_any_text = ("current_accelerator",)

    VALID = [
        Valid(
            """
            import torch

            acc = torch.accelerator.current_accelerator()
            device = acc.type if acc is not None else "cpu"
            if torch.accelerator.is_available():
                name = torch.accelerator.current_accelerator().type
            fallback = torch.accelerator.current_accelerator() or torch.device("cpu")
            kind = fallback.type
            """,
            name="tested-or-given-a-fallback",
        ),
        Valid(
            """
            import torch

            def accelerator_type():
                acc = torch.accelerator.current_accelerator(check_available=True)
                if acc is None:
                    return "cpu"
                return acc.type
            """,
            name="early-return-on-none",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            from torch.distributed.device_mesh import init_device_mesh

            device_type = torch.accelerator.current_accelerator().type
            mesh = init_device_mesh(device_type, (dist.get_world_size(),))
            """,
            name="distributed-program-without-a-cpu-mode",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            device = torch.accelerator.current_accelerator().type
            model = torch.nn.Linear(4, 2).to(device)
            """,
            fixed="""
            import torch

            device = (torch.accelerator.current_accelerator() or torch.device("cpu")).type
            model = torch.nn.Linear(4, 2).to(device)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-type-of-the-current-accelerator",
            in_docs=True,
        ),
        Invalid(
            """
            from torch.accelerator import current_accelerator

            class Trainer:
                def __init__(self):
                    self.accelerator = current_accelerator(check_available=True)

                def autocast_type(self):
                    return self.accelerator.type

            def device_index():
                acc = current_accelerator()
                print("device", acc)
                return acc.index
            """,
            count=2,
            name="through-an-attribute-and-a-variable",
        ),
    ]

    def setup(self) -> None:
        self._reads: list[_Read] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _DEVICE_ATTRIBUTES:
            self._reads.append(_Read(node, tuple(self.context.ancestors(node))))

    def leave_Module(self, node: cst.Module) -> None:
        if not self._reads:
            return
        flow = self.context.flow
        if self.context.names.imports_from("torch.distributed") and not flow.offers_cpu_mode():
            # Written for several accelerator processes (NCCL, a device mesh): no CPU-only run.
            return
        for read in self._reads:
            value = flow.value_of(read.node.value)
            if not isinstance(value.in_cpu_mode, Off) or not flow.held_calls(value, Held.CURRENT_ACCELERATOR):
                continue
            if flow.reached_in_cpu_mode(read.node, read.ancestors):
                self.report(read.node, fix=self._fix(read.node))

    def _fix(self, read: cst.Attribute) -> PendingFix | None:
        call = read.value
        if not isinstance(call, cst.Call) or "\n" in self.context.code_for_node(call):
            return None
        torch = self.context.names.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch is None:
            torch, imports = "torch", (("torch", None),)
        return self.make_fix(
            NodeEdit(call, f'({self.context.code_for_node(call)} or {torch}.device("cpu"))'),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
