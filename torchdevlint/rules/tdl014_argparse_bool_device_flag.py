"""TDL014 argparse-bool-device-flag."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.brains.argparse_options import read_option
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof

# Keywords `store_true` and `BooleanOptionalAction` accept as they are.
_KEPT_KEYWORDS = frozenset({"type", "default", "help", "dest", "required"})


class ArgparseBoolDeviceFlag(Rule):
    """
    ## What it does
    Finds argparse options that choose the device (`--cuda`, `--use-gpu`, `--no-cuda`,
    `--cpu`, `--device-...`) declared with `type=bool`, in files that import argparse.

    ## Why is this bad?
    argparse calls `bool` on the text given on the command line, and `bool` of any non-empty
    string is `True`: `--cuda False` and `--cuda 0` both turn CUDA *on*. With
    `default=True`, CUDA cannot be switched off at all, so a program that offers a CPU mode
    fails on a machine without a GPU however it is started: "Torch not compiled with CUDA
    enabled", "Found no NVIDIA driver on your system". The flag also looks like a guard to a
    reader (and to TDL007) while guarding nothing.

    ## Fix safety
    The fix declares the flag as a switch: `action=argparse.BooleanOptionalAction` where the
    default is `True` (giving `--cuda`/`--no-cuda`), `action="store_true"` where it is
    `False` or absent. Unsafe: command lines that pass a value (`--cuda False`) stop
    parsing, and scripts that launch the program must change with it. Options with other
    settings (`nargs`, `choices`, `metavar`, a computed default) get no fix.

    ## Options
    None.
    """

    code = "TDL014"
    slug = "argparse-bool-device-flag"
    message = 'argparse type=bool makes any given value, "False" included, True: this device flag cannot be switched off'
    fix_title = "Declare the flag as a switch"
    # The flag fails wherever CUDA is then used.
    proof = RuntimeProof(NO_GPU, host="cpu", surfaces_away=True)
    requires_any_text = ("argparse",)

    VALID = [
        Valid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True)
            parser.add_argument("--cpu", action="store_true")
            parser.add_argument("--verbose", type=bool, default=False)
            parser.add_argument("--gpu", type=int, default=0)
            parser.add_argument("--use-gpu", type=str2bool, default=True)
            """,
            name="switches-and-other-options",
        ),
        Valid(
            """
            import torch
            from jsonargparse import ArgumentParser

            parser = ArgumentParser()
            parser.add_argument("--cuda", type=bool, default=True)
            """,
            name="another-parser-library-that-reads-booleans",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", type=bool, default=True, help="use CUDA")
            args = parser.parse_args()
            """,
            fixed="""
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use CUDA")
            args = parser.parse_args()
            """,
            applicability=Applicability.UNSAFE,
            name="documented-cuda-on-by-default",
            in_docs=True,
        ),
        Invalid(
            """
            from argparse import ArgumentParser

            import torch

            def options():
                parser = ArgumentParser(description="train")
                group = parser.add_argument_group("hardware")
                group.add_argument("--no_cuda", type=bool, help="disable CUDA")
                group.add_argument("--use-gpu", dest="gpu", type=bool, default=False)
                group.add_argument("--cpu-only", type=bool, nargs="?", const=True)
                return parser.parse_args()
            """,
            fixed="""
            from argparse import ArgumentParser

            import torch

            def options():
                parser = ArgumentParser(description="train")
                group = parser.add_argument_group("hardware")
                group.add_argument("--no_cuda", action="store_true", help="disable CUDA")
                group.add_argument("--use-gpu", dest="gpu", action="store_true", default=False)
                group.add_argument("--cpu-only", type=bool, nargs="?", const=True)
                return parser.parse_args()
            """,
            applicability=Applicability.UNSAFE,
            count=3,
            name="off-by-default-flags-in-a-group",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        option = read_option(node)
        kind = keyword_argument(node, "type")
        if option is None or kind is None or option.type_name != "bool":
            return
        if self.context.binding_scope("bool") is not None or not self.context.names.imports_from("argparse"):
            return
        if not self._is_device_flag(node):
            return
        self.report(node, fix=self._fix(node, kind))

    def _is_device_flag(self, call: cst.Call) -> bool:
        option = read_option(call)
        if option is None:
            return False
        names = list(option.names)
        dest = option.keywords.get("dest")
        if dest is not None:
            names.append(string_value(dest))
        return any(name is not None and any(word in name.lower() for word in naming.DEVICE_FLAG_WORDS) for name in names)

    def _fix(self, call: cst.Call, kind: cst.Arg) -> PendingFix | None:
        if any(arg.star or arg.keyword is not None and arg.keyword.value not in _KEPT_KEYWORDS for arg in call.args):
            return None
        default = keyword_argument(call, "default")
        default_text = default.value.value if default is not None and isinstance(default.value, cst.Name) else None
        imports: tuple[tuple[str, str | None], ...] = ()
        if default is None or default_text == "False":
            action = '"store_true"'
        elif default_text == "True":
            module = self.context.names.local_name_for("argparse")
            if module is None:
                module, imports = "argparse", (("argparse", None),)
            action = f"{module}.BooleanOptionalAction"
        else:
            return None
        assert kind.keyword is not None
        return self.make_fix(
            NodeEdit(kind.keyword, "action"),
            NodeEdit(kind.value, action),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
