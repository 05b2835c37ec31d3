"""TDL205 deprecated-cuda-amp."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.devices import mentions_any
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.project import TorchVersionOptions
from torchdevlint.rule import Invalid, Mark, Rule, Valid

# The deprecated spellings, by what the device-generic API calls them.
_DEPRECATED = {
    "torch.cuda.amp.autocast": "autocast",
    "torch.cuda.amp.autocast_mode.autocast": "autocast",
    "torch.cuda.amp.GradScaler": "GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "GradScaler",
}
# Names in a test that chooses by PyTorch's version (`_TORCH_GREATER_EQUAL_2_4`,
# `version.parse(torch.__version__)`): the old spelling is kept for old releases on purpose.
_VERSION_WORDS = ("version", "greater", "less")
# `torch.cuda.amp.autocast(enabled, dtype, cache_enabled)`: positional arguments that would
# land on other parameters once `"cuda"` comes first.
_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")


class DeprecatedCudaAmp(Rule):
    """
    ## What it does
    Finds `torch.cuda.amp.autocast(...)` and `torch.cuda.amp.GradScaler(...)`, also through
    `from torch.cuda.amp import autocast, GradScaler`. Not reported: the old spelling kept
    for old releases, in a branch of a test of PyTorch's version (`torch.amp.GradScaler(...)
    if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()`).

    ## Why is this bad?
    Since PyTorch 2.4 both warn "`torch.cuda.amp.autocast(args...)` is deprecated. Please
    use `torch.amp.autocast('cuda', args...)` instead." (and the same for `GradScaler`), once
    per call site, in every training run's log. The device-generic spelling also carries
    over to other accelerators by changing one string. It is a maintenance rule: it is off by
    default.

    ## Fix safety
    Where the call is spelled `torch.cuda.amp.…` the fix writes `torch.amp.autocast("cuda",
    ...)` / `torch.amp.GradScaler("cuda", ...)`, with positional arguments of `autocast`
    given their names (`enabled=`, `dtype=`, `cache_enabled=`), since `"cuda"` takes the
    first place. Both have the same defaults. The fix is safe where the oldest PyTorch the
    code must run on, as configured (`torch-version`) or declared by the project, is 2.3 or
    later, where `torch.amp.GradScaler` exists; unsafe otherwise, and unsafe where neither
    says (the code may support an older torch). Calls through a name imported from `torch.cuda.amp` get no fix: the
    import would need to change with them.

    ## Options
    - `torch-version`: the oldest PyTorch the code must run on. Unset, it is the lower bound
      the project declares for torch (`torch>=2.2` in `pyproject.toml`, `setup.cfg`,
      `setup.py` or a `requirements*.txt` beside the configuration); with neither, `"2.6"` is
      assumed for what the fix writes, and the fix is unsafe.
    """

    code = "TDL205"
    slug = "deprecated-cuda-amp"
    message = "torch.cuda.amp is deprecated: use torch.amp with the device type \"cuda\""
    fix_title = "Use torch.amp with \"cuda\""
    default_enabled = False
    marks = frozenset({Mark.DEPRECATED})
    requires_any_text = ("cuda.amp", "cuda import amp")
    Options = TorchVersionOptions
    options: TorchVersionOptions

    VALID = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.amp.autocast("cuda", dtype=torch.bfloat16):
                pass
            with torch.autocast(device_type="cuda"):
                pass
            old = torch.amp.GradScaler("cuda") if TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()
            """,
            name="the-device-generic-api-and-a-version-gate",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            with torch.cuda.amp.autocast():
                loss = model(batch).mean()
            scaler.scale(loss).backward()
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.amp.autocast("cuda"):
                loss = model(batch).mean()
            scaler.scale(loss).backward()
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="documented-scaler-and-autocast",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch.cuda.amp import autocast
            scaler = torch.cuda.amp.GradScaler(2.0**14, enabled=use_amp)
            with torch.cuda.amp.autocast(use_amp, torch.bfloat16):
                pass
            with autocast(enabled=use_amp):
                pass
            """,
            fixed="""
            import torch
            from torch.cuda.amp import autocast
            scaler = torch.amp.GradScaler("cuda", 2.0**14, enabled=use_amp)
            with torch.amp.autocast("cuda", enabled=use_amp, dtype=torch.bfloat16):
                pass
            with autocast(enabled=use_amp):
                pass
            """,
            applicability=Applicability.UNSAFE,
            count=3,
            name="positional-arguments-and-an-imported-name",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        replacement = _DEPRECATED.get(self.context.names.qualified_name(node.func, among=_DEPRECATED) or "")
        if replacement is not None and not self._kept_for_old_releases(node):
            self.report(node.func, fix=self._fix(node, replacement))

    def _kept_for_old_releases(self, node: cst.Call) -> bool:
        child: cst.CSTNode = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test \
                    and mentions_any(ancestor.test, _VERSION_WORDS):
                return True
            child = ancestor
        return False

    def _fix(self, call: cst.Call, replacement: str) -> PendingFix | None:
        func = call.func
        # Only `<torch>.cuda.amp.<name>`: the name the fix writes must mean torch here.
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Attribute)
                and isinstance(func.value.value, cst.Attribute) and isinstance(func.value.value.value, cst.Name)):
            return None
        torch = func.value.value.value.value
        if self.context.names.qualified_name(func.value.value.value, among=("torch",)) is None:
            return None
        if any(arg.star for arg in call.args):
            return None
        arguments = []
        for position, arg in enumerate(call.args):
            text = self.context.code_for_node(arg.value)
            if arg.keyword is not None:
                arguments.append(f"{arg.keyword.value}={text}")
            elif replacement == "autocast":
                if position >= len(_AUTOCAST_PARAMETERS):
                    return None
                arguments.append(f"{_AUTOCAST_PARAMETERS[position]}={text}")
            else:
                arguments.append(text)
        written = ", ".join(['"cuda"', *arguments])
        # Safe only where the declared floor has torch.amp.GradScaler (2.3): an assumed one is no promise.
        safe = self.options.declared and self.options.at_least(2, 3)
        applicability = Applicability.SAFE if safe else Applicability.UNSAFE
        return self.make_fix(NodeEdit(call, f"{torch}.amp.{replacement}({written})"), applicability=applicability)
