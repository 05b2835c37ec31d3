"""TDL008 cuda-visible-devices-late."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import libcst as cst

from torchdevlint.analysis.brains.argparse_options import read_option
from torchdevlint.analysis.devices import (
    CUDA_INITIALISING_FUNCTIONS,
    device_literal,
    integer_value,
    string_value,
)
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

_VARIABLE = "CUDA_VISIBLE_DEVICES"
_ENVIRON = "os.environ"
_PUTENV = "os.putenv"
# Builtins that never return a str.
_NON_STRING_BUILTINS = frozenset({"int", "len", "float", "bool", "range", "list", "tuple", "set", "sum", "abs", "round"})
_NON_STRING_CALLS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})
# Calls that start another process, which inherits os.environ: a late setting may be for it.
_SPAWNERS = (
    "subprocess.", "os.system", "os.exec", "os.spawn", "os.popen", "os.fork", "multiprocessing.",
    "torch.multiprocessing.", "torch.distributed.launch", "torch.distributed.run", "torch.distributed.elastic",
)
# `parser.parse_args()`, `parse_known_args()[0]`, or the script's own `args = get_args()`:
# the namespace whose attributes are the options (matched by dest, so a guess costs little).
_NAMESPACE_CALL = re.compile(r"(^|\.)(parse_(known_)?args|get_args|parse_arguments|parse_opts?|get_options)$")
_LATE = "CUDA_VISIBLE_DEVICES is set after CUDA was initialised in this process; it has no effect here"
_NOT_STRING = "CUDA_VISIBLE_DEVICES is set to a non-string; os.environ takes only str values"
_BAD_SETDEFAULT = "os.environ.setdefault(\"CUDA_VISIBLE_DEVICES\") needs exactly one string value"


class _OptionKind(Enum):
    INT = "int"
    NON_STRING = "non-string"
    STRING = "string"


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
      `torch.cuda.get_device_name()`, `torch.cuda.set_device()`, a `.cuda()` call or a tensor
      created on `"cuda"`, earlier in the same function, or at module level before the
      function that sets it (importing torch and `torch.cuda.device_count()` do not
      initialise CUDA);
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
        # Scopes (function, lambda, class or module, by id of their node) where CUDA was
        # initialised so far.
        self._initialised_in: set[int] = set()
        # Whether module-level code initialised CUDA before the current top-level def/class.
        self._module_initialised_before: bool = False
        self._depth = 0
        # argparse options: dest -> what it holds (None: unknown, or parsers disagree).
        self._options: dict[str, _OptionKind | None] = {}
        self._namespaces: set[str] = set()
        # Late settings waiting for the end of their scope, and scopes that start processes.
        self._late: dict[int, list[cst.CSTNode]] = {}
        self._spawning: set[int] = set()

    # ---- where CUDA is initialised -----------------------------------------------------

    def _owner(self) -> int:
        for scope in reversed(self.context.scopes()):
            if isinstance(scope, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Module)):
                return id(scope)
        return 0

    def _top_level_entered(self) -> None:
        if self._depth == 0:
            self._module_initialised_before = id(self.context.module) in self._initialised_in
        self._depth += 1

    def _top_level_left(self) -> None:
        self._depth -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._top_level_entered()

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._flush(node)
        self._top_level_left()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._top_level_entered()

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._flush(node)
        self._top_level_left()

    def _initialises_cuda(self, call: cst.Call) -> bool:
        imports = self.context.imports
        if imports.qualified_name(call.func) in CUDA_INITIALISING_FUNCTIONS:
            return True
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            receiver = func.value
            return not (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super")
        device = keyword_argument(call, "device")
        candidates = [device.value] if device is not None else []
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and call.args and call.args[0].keyword is None:
            candidates.append(call.args[0].value)
        for candidate in candidates:
            literal = device_literal(candidate, imports)
            if literal is not None and literal.type == "cuda":
                return True
        return False

    # ---- argparse options ------------------------------------------------------------------

    def _record_option(self, call: cst.Call) -> None:
        option = read_option(call)
        dest = option.dest if option is not None else None
        if dest is None:
            return
        kind = self._option_kind(call)
        previous = self._options.get(dest, kind)
        self._options[dest] = kind if previous == kind else None

    @staticmethod
    def _option_kind(call: cst.Call) -> _OptionKind | None:
        """What `args.<dest>` holds: an int, another non-string, a string, or unknown (None)."""
        type_arg = keyword_argument(call, "type")
        nargs = keyword_argument(call, "nargs")
        action = keyword_argument(call, "action")
        default = keyword_argument(call, "default")
        type_name = type_arg.value.value if type_arg is not None and isinstance(type_arg.value, cst.Name) else None
        action_value = string_value(action.value) if action is not None else None
        if action_value in ("store_true", "store_false", "count"):
            return _OptionKind.NON_STRING
        if action is not None:
            return None
        if nargs is not None:
            many = string_value(nargs.value) in ("+", "*") or integer_value(nargs.value) is not None
            return _OptionKind.NON_STRING if many else None
        if type_name == "int":
            return _OptionKind.INT
        if type_name == "float":
            return _OptionKind.NON_STRING
        if type_arg is None and default is not None and isinstance(default.value, cst.Integer):
            return _OptionKind.INT  # the default is used as is when the option is not given
        if type_arg is None or type_name == "str":
            return _OptionKind.STRING
        return None

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
            qualified = self.context.imports.qualified_name(node.func)
            func = node.func
            builtin = func.value if isinstance(func, cst.Name) and self.context.binding_scope(func.value) is None else None
            if qualified in _NON_STRING_CALLS or builtin in ("int", "len"):
                return _Value(True, wrap=True)
            if builtin in _NON_STRING_BUILTINS:
                return _Value(True)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value in self._namespaces:
            kind = self._options.get(node.attr.value)
            if kind is _OptionKind.INT:
                return _Value(True, wrap=True)
            if kind is _OptionKind.NON_STRING:
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
        return self.context.imports.qualified_name(node) == _ENVIRON

    def _is_late(self) -> bool:
        return self._owner() in self._initialised_in or self._depth > 0 and self._module_initialised_before

    def _check(self, site: cst.CSTNode, value: cst.BaseExpression | None) -> None:
        info = self._value(value) if value is not None else _Value(False)
        if info.non_string:
            self.report(site, message=_NOT_STRING, fix=self._string_fix(value, info) if value is not None else None)
        elif self._is_late():
            # Reported when the scope ends, unless it starts a process that inherits the setting.
            self._late.setdefault(self._owner(), []).append(site)

    def _flush(self, scope: cst.CSTNode) -> None:
        sites = self._late.pop(id(scope), [])
        if id(scope) not in self._spawning:
            for site in sites:
                self.report(site, message=_LATE)

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
        value = node.value
        if isinstance(value, cst.Subscript):
            value = value.value  # `args = parser.parse_known_args()[0]`
        if isinstance(value, cst.Call) and _NAMESPACE_CALL.search(dotted_name(value.func) or ""):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._namespaces.add(target.target.value)

    def leave_Call(self, node: cst.Call) -> None:
        func = node.func
        if read_option(node) is not None:
            self._record_option(node)
        qualified = self.context.imports.qualified_name(func)
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
        # Record after checking: the call's own arguments ran first.
        if self._initialises_cuda(node):
            self._initialised_in.add(self._owner())
        if qualified is not None and qualified.startswith(_SPAWNERS):
            self._spawning.add(self._owner())

    def _check_update(self, call: cst.Call) -> None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == _VARIABLE:
                self._check(call, arg.value)
            elif arg.keyword is None and isinstance(arg.value, cst.Dict):
                for element in arg.value.elements:
                    if isinstance(element, cst.DictElement) and string_value(element.key) == _VARIABLE:
                        self._check(call, element.value)
