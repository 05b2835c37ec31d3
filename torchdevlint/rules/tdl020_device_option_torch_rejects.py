"""TDL020 device-option-torch-rejects."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.command_line import CommandLine
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DEVICE_STRING_REJECTED, RuntimeProof


@dataclass(frozen=True)
class _Use:
    # `args.device` where it is handed to torch as a device.
    argument: cst.Attribute
    # The device variable a fix may choose by availability with: `torch`'s local name.
    torch: str | None


class DeviceOptionTorchRejects(Rule):
    """
    ## What it does
    Finds a command-line option handed straight to PyTorch as a device
    (`torch.device(args.device)`, `model.to(args.device)`, `device=args.device`) whose
    default or choices offer a string `torch.device` does not accept: `"auto"`, `"gpu"`,
    `"0"`, `""`. The options are read where `parse_args()` binds them, and through the names
    parsed options usually go by (`args`, `opt`, `cfg`). Not reported where the program compares or assigns the option anywhere
    (`if args.device == "auto": ...`), which may map such values to real devices first.

    ## Why is this bad?
    `torch.device("auto")` raises "Expected one of cpu, cuda, ... device type at start of
    device string: auto", and `"gpu"` or `"0"` the same way: the documented default, or a
    value the help text offers, fails on every machine before training starts.

    ## Fix safety
    Unsafe. Where the only such value is `"auto"`, the fix chooses a device by availability
    for it: `("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else
    args.device`. Other values (`"gpu"`, `"0"`) get no fix: what they meant is the author's
    to say.

    ## Options
    None.
    """

    code = "TDL020"
    slug = "device-option-torch-rejects"
    message = "This device option offers a value torch.device rejects; the program fails with it"
    fix_title = "Choose a device for \"auto\""
    proof = RuntimeProof(DEVICE_STRING_REJECTED)
    requires_any_text = ("add_argument",)

    VALID = [
        Valid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda", choices=["cpu", "cuda", "mps", "cuda:1"])
            parser.add_argument("--accelerator", default="auto", choices=["auto", "gpu", "cpu"])
            args = parser.parse_args()
            device = torch.device(args.device)
            """,
            name="values-torch-accepts-and-an-option-not-used-as-a-device",
        ),
        Valid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
            args = parser.parse_args()
            if args.device == "auto":
                args.device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(2, 2).to(args.device)
            """,
            name="auto-mapped-before-use",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
            args = parser.parse_args()
            device = torch.device(args.device)
            """,
            fixed="""
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
            args = parser.parse_args()
            device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-auto-default",
            in_docs=True,
        ),
        Invalid(
            """
            import argparse
            import torch
            def train(opt):
                model = torch.nn.Linear(4, 1).to(opt.device)
                return torch.zeros(4, device=opt.device)
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", type=str, default="gpu", choices=["gpu", "cpu"])
            train(parser.parse_args())
            """,
            count=2,
            name="gpu-used-before-the-option-is-declared",
        ),
    ]

    def setup(self) -> None:
        self._command_line = self.context.shared(CommandLine)
        self._uses: list[_Use] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        names = self.context.names
        candidates: list[cst.BaseExpression] = []
        takes_a_device_first = names.qualified_name(func, among=(torch_api.TORCH_DEVICE,)) is not None \
            or type(func) is cst.Attribute and func.attr.value == "to"
        if takes_a_device_first and node.args and node.args[0].keyword is None:
            candidates.append(node.args[0].value)
        candidates.extend(arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value == "device")
        for candidate in candidates:
            if type(candidate) is cst.Attribute and type(candidate.value) is cst.Name:
                self._uses.append(_Use(candidate, names.local_name_for("torch")))

    def leave_Module(self, node: cst.Module) -> None:
        for use in self._uses:
            namespace = use.argument.value
            assert isinstance(namespace, cst.Name)
            if not self._command_line.is_namespace(namespace.value):
                continue
            dest = use.argument.attr.value
            rejected = {text for text in self._command_line.offered_strings(dest)
                        if not torch_api.torch_device_accepts(text)}
            if rejected and not self._command_line.handled(dest):
                self.report(use.argument, fix=self._fix(use) if rejected == {"auto"} else None)

    def _fix(self, use: _Use) -> PendingFix | None:
        if use.torch is None:
            return None
        option = self.context.code_for_node(use.argument)
        chosen = f'("cuda" if {use.torch}.cuda.is_available() else "cpu") if {option} == "auto" else {option}'
        return self.make_fix(NodeEdit(use.argument, chosen), applicability=Applicability.UNSAFE)
