"""TDL008 cuda-visible-devices-late."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.command_line import CommandLine, OptionKind
from torchdevlint.analysis.cuda_initialisation import CudaInitialisation
from torchdevlint.analysis.devices import integer_value, string_value
from torchdevlint.analysis.tree import top_level_definition
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import ENVIRONMENT_NOT_A_STRING, RuntimeProof

_VARIABLE = "CUDA_VISIBLE_DEVICES"
_ENVIRON = "os.environ"
_PUTENV = "os.putenv"
# Builtins that never return a str.
_NON_STRING_BUILTINS = frozenset({"int", "len", "float", "bool", "range", "list", "tuple", "set", "sum", "abs", "round"})
_NON_STRING_CALLS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})
_LATE = "CUDA_VISIBLE_DEVICES is set after CUDA was initialised in this process; it has no effect here"
_NOT_STRING = "CUDA_VISIBLE_DEVICES is set to a non-string; os.environ takes only str values"
_BAD_SETDEFAULT = "os.environ.setdefault(\"CUDA_VISIBLE_DEVICES\") needs exactly one string value"


@dataclass(frozen=True)
class _Value:
    """What a value assigned to the variable is known to be."""

    non_string: bool
    # How to make it the string it stands for: wrap it in `str(...)` (an int), or replace it
    # with a literal (a list of ints); neither where no mechanical conversion exists.
    wrap: bool = False
    literal: str | None = None


class CudaVisibleDevicesLate(Rule):
    """
    ## What it does
    Finds `CUDA_VISIBLE_DEVICES` set in `os.environ` (item assignment, `setdefault`,
    `update`) or with `os.putenv`:

    - after CUDA was initialised earlier in the same process: by `torch.cuda.is_available()`,
      `torch.cuda.get_device_name()`, `torch.cuda.set_device()`, a `.cuda()` call, a tensor
      created on `"cuda"`, or a `torch.load` without `map_location` of a file the project
      saves from GPU tensors (a checkpoint read for its config restores its weights on the
      GPU too), earlier in the same function, or at module level before the
      function that sets it (importing torch and `torch.cuda.device_count()` do not
      initialise CUDA); or in a module-level function or class of a file that a program
      imports and uses after its own module-level code initialised CUDA (`args.use_gpu =
      torch.cuda.is_available()` in `main.py`, then `Exp(args)`, whose base class sets the
      variable), where no call of the program's own functions or of the project's comes
      before that check;
    - to a value that is not a string: an int, a list, `len(...)`, an argparse option
      declared with `type=int`;
    - with `setdefault` and no value, or with more than two arguments.

    An `env=` dict for a child process is not the current process and is never reported;
    nor is a late setting in a function (or module) that then starts a process with
    `subprocess`, `os.system` or `multiprocessing`, which inherits it.

    ## Why is this bad?
    The CUDA runtime reads `CUDA_VISIBLE_DEVICES` once, when it initialises. Setting it later
    changes nothing in this process: the program silently keeps using every GPU (or GPU 0
    instead of the one chosen), and a following `torch.cuda.device_count()` disagrees with
    the setting. `os.environ` accepts only strings: `os.environ["CUDA_VISIBLE_DEVICES"] = 0`
    raises "TypeError: str expected, not int", and so does `setdefault` without a value when
    the variable is unset.

    ## Fix safety
    A non-string value that is an integer is wrapped in `str(...)`, and a list or tuple of
    integer literals becomes the comma-separated string: safe, the line failed before and now
    sets what it meant to. A late assignment has no fix: set the variable before anything
    touches CUDA (first thing in the entry point, or in the shell that launches it).

    ## Options
    None.
    """

    code = "TDL008"
    slug = "cuda-visible-devices-late"
    message = "CUDA_VISIBLE_DEVICES is set after CUDA initialisation or to a non-string"
    fix_title = "Convert the value to a string"
    # Set too late, the variable can only fail where it is set to something not a string.
    proof = RuntimeProof(ENVIRONMENT_NOT_A_STRING, gpus=2)
    requires_any_text = (_VARIABLE,)

    VALID = [
        Valid(
            """
            import os

            import torch

            os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu
            print("GPU:", torch.cuda.is_available())
            """,
            name="documented-set-before-cuda-initialises",
            in_docs=True,
        ),
        Valid(
            """
            import os
            import torch
            os.environ["CUDA_VISIBLE_DEVICES"] = "1"
            print(torch.cuda.device_count())
            model = torch.nn.Linear(2, 2).cuda()
            """,
            name="set-before-initialisation",
        ),
        Valid(
            """
            import os
            import subprocess
            import torch
            print(torch.cuda.is_available())
            env = dict(os.environ, CUDA_VISIBLE_DEVICES="1")
            env["CUDA_VISIBLE_DEVICES"] = "1"
            subprocess.run(["python", "worker.py"], env=env)
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
            """,
            name="child-environment-and-reads",
        ),
        Valid(
            """
            import os
            import subprocess
            import torch
            for rank in range(torch.cuda.device_count()):
                print(torch.cuda.get_device_name(rank))
                os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
                subprocess.Popen(["python", "train.py"])
            """,
            name="launcher-sets-it-for-children",
        ),
        Valid(
            """
            import argparse
            import os
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpus", type=str, default="0")
            def main():
                args = parser.parse_args()
                os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus
                os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(2)))
            def report():
                print(torch.cuda.get_device_name())
            """,
            name="string-option-and-later-function",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import os

            import torch

            print("GPU:", torch.cuda.is_available())
            os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu
            """,
            name="documented-set-after-is-available",
            in_docs=True,
        ),
        Invalid(
            """
            import os
            import torch
            os.environ["CUDA_VISIBLE_DEVICES"] = -1
            """,
            fixed="""
            import os
            import torch
            os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
            """,
            applicability=Applicability.SAFE,
            name="negative-number-hides-every-gpu",
        ),
        Invalid(
            """
            import os
            import torch
            if torch.cuda.is_available():
                print("found", torch.cuda.get_device_name(0))
            os.environ["CUDA_VISIBLE_DEVICES"] = "1"
            """,
            name="after-is-available",
        ),
        Invalid(
            """
            import os
            import torch
            DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def main(rank):
                os.putenv("CUDA_VISIBLE_DEVICES", str(rank))
            """,
            name="module-level-initialisation-before-function",
        ),
        Invalid(
            """
            import argparse
            import os
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", type=int, default=0)
            args = parser.parse_args()
            os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu
            os.environ["CUDA_VISIBLE_DEVICES"] = [0, 1]
            """,
            fixed="""
            import argparse
            import os
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", type=int, default=0)
            args = parser.parse_args()
            os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
            os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="non-string-values",
        ),
        Invalid(
            """
            import os
            import torch
            os.environ.setdefault("CUDA_VISIBLE_DEVICES")
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0", "1")
            """,
            count=2,
            name="setdefault-arguments",
        ),
    ]

    def setup(self) -> None:
        self._command_line = self.context.shared(CommandLine)
        self._cuda = self.context.shared(CudaInitialisation)
        # Late settings waiting for the end of their scope (by id of its node).
        self._late: dict[int, list[tuple[cst.CSTNode, str]]] = {}

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._flush(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._flush(node)

    # ---- values ----------------------------------------------------------------------------

    def _value(self, node: cst.BaseExpression) -> _Value:
        if isinstance(node, cst.Integer):
            return _Value(True, literal=f'"{integer_value(node)}"')
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(
            node.expression, cst.Integer
        ):
            # `= -1` (hide every GPU) is the same TypeError as any int; "-1" is what it means.
            number = integer_value(node.expression)
            return _Value(True, literal=f'"-{number}"' if number is not None else None)
        if isinstance(node, (cst.List, cst.Tuple)):
            numbers = [integer_value(e.value) for e in node.elements]
            known = bool(numbers) and all(n is not None for n in numbers)
            return _Value(True, literal='"' + ",".join(str(n) for n in numbers) + '"' if known else None)
        if isinstance(node, (cst.Float, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp, cst.Comparison)):
            return _Value(True)
        if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
            return _Value(True)
        if isinstance(node, cst.Call):
            qualified = self.context.names.qualified_name(node.func, among=_NON_STRING_CALLS)
            func = node.func
            builtin = func.value if isinstance(func, cst.Name) and self.context.binding_scope(func.value) is None else None
            if qualified in _NON_STRING_CALLS or builtin in ("int", "len"):
                return _Value(True, wrap=True)
            if builtin in _NON_STRING_BUILTINS:
                return _Value(True)
        kind = self._command_line.option_kind(node)
        if kind is OptionKind.INT:
            return _Value(True, wrap=True)
        if kind is OptionKind.NON_STRING:
            return _Value(True)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.left, cst.Integer) and isinstance(node.right, cst.Integer):
            return _Value(True, wrap=True)
        return _Value(False)

    def _string_fix(self, value: cst.BaseExpression, info: _Value) -> PendingFix | None:
        if info.wrap:
            return self.make_fix(NodeEdit.insert_before(value, "str("), NodeEdit.insert_after(value, ")"))
        if info.literal is not None:
            return self.make_fix(NodeEdit(value, info.literal))
        return None

    # ---- sites -----------------------------------------------------------------------------

    def _is_environ(self, node: cst.BaseExpression) -> bool:
        return self.context.names.qualified_name(node, among=(_ENVIRON,)) is not None

    def _check(self, site: cst.CSTNode, value: cst.BaseExpression | None) -> None:
        info = self._value(value) if value is not None else _Value(False)
        if info.non_string:
            self.report(site, message=_NOT_STRING, fix=self._string_fix(value, info) if value is not None else None)
        elif self._cuda.initialised_here():
            # Reported when the scope ends, unless it starts a process that inherits the setting.
            self._late.setdefault(id(self._cuda.owner()), []).append((site, _LATE))
        else:
            definition = top_level_definition(self.context.module, self.context.scopes())
            elsewhere = None if definition is None else \
                self.context.project_cuda_initialised_before_using(definition.name.value)
            if elsewhere is not None:
                where, line, program = elsewhere
                runs = f"{program}, which imports {where}," if program else where
                message = (f"CUDA_VISIBLE_DEVICES is set after CUDA was initialised: {where}:{line} initialises it "
                           f"at module level, and {runs} runs this code later; it has no effect there")
                self._late.setdefault(id(self._cuda.owner()), []).append((site, message))

    def _flush(self, scope: cst.CSTNode) -> None:
        sites = self._late.pop(id(scope), [])
        if not self._cuda.starts_processes(scope):
            for site, message in sites:
                self.report(site, message=message)

    def leave_Module(self, node: cst.Module) -> None:
        self._flush(node)

    def leave_Lambda(self, node: cst.Lambda) -> None:
        self._flush(node)

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            item = target.target
            if (
                isinstance(item, cst.Subscript)
                and self._is_environ(item.value)
                and len(item.slice) == 1
                and isinstance(item.slice[0].slice, cst.Index)
                and string_value(item.slice[0].slice.value) == _VARIABLE
            ):
                self._check(node, node.value)

    def leave_Call(self, node: cst.Call) -> None:
        func = node.func
        qualified = self.context.names.qualified_name(func, among=(_PUTENV,))
        key = string_value(node.args[0].value) if node.args and node.args[0].keyword is None else None
        if isinstance(func, cst.Attribute) and self._is_environ(func.value):
            method = func.attr.value
            if method == "setdefault" and key == _VARIABLE:
                if len(node.args) != 2:
                    self.report(node, message=_BAD_SETDEFAULT)
                else:
                    self._check(node, node.args[1].value)
            elif method == "update":
                self._check_update(node)
        elif qualified == _PUTENV and key == _VARIABLE and len(node.args) == 2:
            self._check(node, node.args[1].value)

    def _check_update(self, call: cst.Call) -> None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == _VARIABLE:
                self._check(call, arg.value)
            elif arg.keyword is None and isinstance(arg.value, cst.Dict):
                for element in arg.value.elements:
                    if isinstance(element, cst.DictElement) and string_value(element.key) == _VARIABLE:
                        self._check(call, element.value)
