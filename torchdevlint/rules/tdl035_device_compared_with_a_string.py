"""TDL035 device-compared-with-a-string."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.devices import parse_device_string, string_value
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DEVICE_MISMATCH, RuntimeProof

_EQUALITY = (cst.Equal, cst.NotEqual)
_MEMBERSHIP = (cst.In, cst.NotIn)
# What a fix may put `.type` or `str(...)` after without parentheses.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


class DeviceComparedWithAString(Rule):
    """
    ## What it does
    Finds a `torch.device` compared with a device string: `device == "cuda"`,
    `device != "cpu"`, `x.device == "cuda:0"`, `device in ("cuda", "mps")`, where the flow
    model knows the value is a `torch.device` (made by `torch.device(...)`, or a tensor's or
    parameter's `.device`).

    ## Why is this bad?
    A `torch.device` never equals a string: `torch.device("cuda") == "cuda"` is `False`, and
    so is membership in a tuple of strings. The test has the same answer on every machine,
    so the branch written for the GPU never runs (no pinned memory, no synchronise, autocast
    on the CPU, a batch that is never moved), or the one for the CPU always does. Nothing
    fails where the comparison is; the program trains slower, differently, or meets a device
    mismatch later.

    ## Not reported
    Not reported: a device string compared with a string (`args.device == "cuda"`), a device
    compared with a device (`device == torch.device("cuda")`), its type or its text
    (`device.type == "cuda"`, `str(device) == "cuda:0"`), and values that may be either a
    string or a device (a parameter the file calls with both).

    ## Fix safety
    The fix compares what the string names: the device's type for a type (`device.type ==
    "cuda"`), its text for a device with an index (`str(device) == "cuda:0"`). It is unsafe:
    the test then gives the answer it was written to give, so the branch that never ran
    runs, and the program trains or saves differently (autocast turned on, another loss).

    ## Options
    None.
    """

    code = "TDL035"
    slug = "device-compared-with-a-string"
    message = "A torch.device never equals a string: this test has the same answer on every machine"
    fix_title = "Compare the device's type (or its text)"
    # The branch that never runs on the GPU often was the one that moved data there.
    proof = RuntimeProof(DEVICE_MISMATCH, surfaces_away=True)
    requires_any_text = ("device",)

    VALID = [
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            pin = device.type == "cuda"
            exact = str(device) == "cuda:0"
            same = device == torch.device("cuda")
            """,
            name="type-text-and-device",
        ),
        Valid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda")
            args = parser.parse_args()
            if args.device == "cuda":
                torch.backends.cudnn.benchmark = True
            device = "cuda" if torch.cuda.is_available() else "cpu"
            use_amp = device == "cuda"
            """,
            name="device-strings",
        ),
        Valid(
            """
            import torch
            def loader_options(device):
                return {"pin_memory": device == "cuda"}
            loader_options("cuda")
            loader_options(torch.device("cpu"))
            """,
            name="a-parameter-that-is-a-string-or-a-device",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            scaler = torch.amp.GradScaler(enabled=device == "cuda")
            if device != "cpu":
                torch.backends.cudnn.benchmark = True
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            scaler = torch.amp.GradScaler(enabled=device.type == "cuda")
            if device.type != "cpu":
                torch.backends.cudnn.benchmark = True
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-device-from-torch-device",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            def step(model, batch):
                weight = next(model.parameters())
                if weight.device in ("cuda", "mps"):
                    torch.cuda.synchronize()
                if "cuda:0" == weight.device:
                    print("on the first GPU")
                return model(batch)
            """,
            fixed="""
            import torch
            def step(model, batch):
                weight = next(model.parameters())
                if weight.device.type in ("cuda", "mps"):
                    torch.cuda.synchronize()
                if "cuda:0" == str(weight.device):
                    print("on the first GPU")
                return model(batch)
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-tensors-device-in-a-tuple-and-with-an-index",
        ),
    ]

    def visit_Comparison(self, node: cst.Comparison) -> None:
        left = node.left
        single = len(node.comparisons) == 1
        for target in node.comparisons:
            right = target.comparator
            operator = target.operator
            if isinstance(operator, _EQUALITY):
                for device, text in ((left, right), (right, left)):
                    named = _device_string(text)
                    if named is not None and self._is_a_device(device):
                        self._report(node, operator, device, [named] if single else None)
                        break
            elif isinstance(operator, _MEMBERSHIP):
                named_all = _device_strings(right)
                if named_all is not None and self._is_a_device(left):
                    self._report(node, operator, left, named_all if single else None)
            left = right

    def _is_a_device(self, node: cst.BaseExpression) -> bool:
        if string_value(node) is not None:
            return False
        return self.context.flow.value_of(node).is_device

    def _report(self, node: cst.Comparison, operator: cst.BaseCompOp, device: cst.BaseExpression,
                named: list[str] | None) -> None:
        answer = "True" if isinstance(operator, (cst.NotEqual, cst.NotIn)) else "False"
        self.report(node, message=f"A torch.device never equals a string: this test is always {answer}",
                    fix=self._fix(device, named))

    def _fix(self, device: cst.BaseExpression, named: list[str] | None) -> PendingFix | None:
        if not named:
            return None
        indexed = [":" in text for text in named]
        text = self.context.code_for_node(device)
        if not any(indexed):
            receiver = text if isinstance(device, _ATOMS) else f"({text})"
            replacement = f"{receiver}.type"
        elif all(indexed):
            replacement = f"str({text})"
        else:
            return None  # `device in ("cuda", "cuda:1")`: neither its type nor its text alone
        return self.make_fix(NodeEdit(device, replacement), applicability=Applicability.UNSAFE)


def _device_string(node: cst.BaseExpression) -> str | None:
    """`"cuda"`, `"cuda:1"`, `"cpu"`: a string literal that names a device."""
    text = string_value(node)
    return text if text is not None and parse_device_string(text) is not None else None


def _device_strings(node: cst.BaseExpression) -> list[str] | None:
    """The device strings of a literal tuple, list or set of them (`("cuda", "mps")`)."""
    if not isinstance(node, (cst.Tuple, cst.List, cst.Set)) or not node.elements:
        return None
    named: list[str] = []
    for element in node.elements:
        if isinstance(element, cst.StarredElement):
            return None
        text = _device_string(element.value)
        if text is None:
            return None
        named.append(text)
    return named
