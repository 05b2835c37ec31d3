"""TDL014 argparse-bool-device-flag."""

from __future__ import annotations

import re

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.brains.argparse_options import ArgparseOption, read_option
from torchdevlint.analysis.devices import AVAILABILITY_CHECKS
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes, descendants, keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof

# Keywords `store_true` and `BooleanOptionalAction` accept as they are.
_KEPT_KEYWORDS = frozenset({"type", "default", "help", "dest", "required"})


_STUCK_ON_MESSAGE = 'argparse action="store_true" with default=True is always True: this device flag cannot be switched off'
_STUCK_OFF_MESSAGE = 'argparse action="store_false" with default=False is always False: this device flag cannot be switched on'
_ON_WITHOUT_A_GPU_MESSAGE = ("this GPU switch is on by default and nothing turns it off where there is no GPU: "
                             "the program checks for one, but fails on a machine without one unless switched off by hand")
_INVERTED_MESSAGE = ('argparse action="store_false" turns the GPU off when this flag is given: it is on by default, '
                     'the reverse of what its name says, so a machine without a GPU fails unless the flag is passed')


class ArgparseBoolDeviceFlag(Rule):
    """
    ## What it does
    Finds argparse options that choose the device (`--cuda`, `--use-gpu`, `--no-cuda`,
    `--cpu`, `--device-...`), in files that import argparse, declared so that they do not
    switch as their name says:
    - `type=bool`: any value given on the command line is true;
    - `action="store_true"` with `default=True` (always true) or `action="store_false"`
      with `default=False` (always false);
    - `action="store_false"` on a switch named for the GPU (`--cuda`, `--use-gpu`): the GPU
      is on unless the flag is given, and giving it turns the GPU off;
    - a GPU switch that does switch (`type=str2bool`, `BooleanOptionalAction`) on by default,
      in a program that asks whether there is a GPU (`torch.cuda.is_available()`) but never
      lets the answer change the switch: no test reads the two together
      (`args.cuda and torch.cuda.is_available()`) and nothing assigns it (`args.cuda = False`).

    ## Why is this bad?
    argparse calls `bool` on the text given on the command line, and `bool` of any non-empty
    string is `True`: `--cuda False` and `--cuda 0` both turn CUDA *on*. With
    `default=True`, CUDA cannot be switched off at all, so a program that offers a CPU mode
    fails on a machine without a GPU however it is started: "Torch not compiled with CUDA
    enabled", "Found no NVIDIA driver on your system". A `store_true` switch whose default
    is already `True` can only set what is set, with the same result. The flag also looks
    like a guard to a reader (and to TDL007) while guarding nothing.

    A GPU switch on by default in a program that checks for a GPU elsewhere (to set a
    default tensor type, to print a warning) has a CPU mode its author meant to reach, and
    does not reach it: on a machine without a GPU it fails at the first `.cuda()` until the
    user finds the switch.

    `--cuda` declared `store_false` works, backwards: the program uses the GPU when run
    without flags, fails on a machine without one, and `--cuda`, given by someone who
    wants the GPU, trains on the CPU instead.

    ## Fix safety
    The fix declares the flag as a switch: `action=argparse.BooleanOptionalAction` where the
    default is `True` (giving `--cuda`/`--no-cuda`), `action="store_true"` where it is
    `False` or absent.
    - For `type=bool` it is unsafe: command lines that pass a value (`--cuda False`) stop
      parsing, and scripts that launch the program must change with it. Options with other
      settings (`nargs`, `choices`, `metavar`, a computed default) get no fix.
    - For `store_true` with `default=True` it is safe: every command line that parsed before
      gives the same value, and `--no-cuda` is new.
    - For a `store_false` GPU switch it is unsafe: the program still uses the GPU when run
      without flags, but `--cuda` now means the GPU, and the CPU is `--no-cuda`. Where the
      program asks whether there is a GPU and never lets the answer change the switch (it
      only warns), the default becomes `torch.cuda.is_available()`, as below.
    - For a switch on by default where there may be no GPU, the fix makes the default
      `torch.cuda.is_available()`: the same on a machine with a GPU, off without one.
      Unsafe: asking initialises CUDA's device count when the parser is built, so a
      `CUDA_VISIBLE_DEVICES` the program sets later no longer applies.
    No fix where the program already has an option named `--no-...` (argparse would refuse
    the second), or for `store_false` with `default=False`, whose intent the code does not show.

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
        Valid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser(description="sample from a trained model")
            parser.add_argument("--no-cuda", dest="cuda", action="store_false", help="run on the CPU")
            parser.add_argument("--cpu", action="store_true", default=False)
            parser.add_argument("--distributed", action="store_false")
            args = parser.parse_args()
            device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
            """,
            name="store-false-named-for-the-cpu",
        ),
        Valid(
            """
            import argparse

            import torch

            def str2bool(text):
                return text.lower() in ("yes", "true", "1")

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", type=str2bool, default=True)
            parser.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=True)
            args = parser.parse_args()
            args.cuda = args.cuda and torch.cuda.is_available()
            device = torch.device("cuda" if args.gpu and torch.cuda.is_available() else "cpu")
            """,
            name="switches-on-by-default-that-availability-turns-off",
        ),
        Valid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", type=lambda text: text == "true", default=True)
            args = parser.parse_args()
            model = torch.nn.Linear(4, 2)
            if args.cuda:
                model.cuda()
            """,
            name="gpu-by-default-in-a-program-that-never-asks",
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
        Invalid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser(description="language model")
            parser.add_argument("--epochs", type=int, default=40)
            parser.add_argument("--cuda", action="store_true", default=True, help="use CUDA")
            args = parser.parse_args()
            device = torch.device("cuda" if args.cuda else "cpu")
            """,
            fixed="""
            import argparse

            import torch

            parser = argparse.ArgumentParser(description="language model")
            parser.add_argument("--epochs", type=int, default=40)
            parser.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use CUDA")
            args = parser.parse_args()
            device = torch.device("cuda" if args.cuda else "cpu")
            """,
            applicability=Applicability.SAFE,
            name="store-true-already-true",
        ),
        Invalid(
            """
            from argparse import ArgumentParser

            import torch

            def get_args():
                parser = ArgumentParser()
                parser.add_argument("--data", type=str, default="data/penn")
                parser.add_argument("--cuda", action="store_false", help="use CUDA")
                return parser.parse_args()

            args = get_args()
            model = torch.nn.LSTM(400, 1150)
            if args.cuda:
                model.cuda()
            """,
            fixed="""
            from argparse import ArgumentParser

            import torch
            import argparse

            def get_args():
                parser = ArgumentParser()
                parser.add_argument("--data", type=str, default="data/penn")
                parser.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use CUDA")
                return parser.parse_args()

            args = get_args()
            model = torch.nn.LSTM(400, 1150)
            if args.cuda:
                model.cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="store-false-gpu-switch",
        ),
        Invalid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action="store_false", help="use CUDA (default: True)")
            args = parser.parse_args()
            if torch.cuda.is_available():
                if not args.cuda:
                    print("You have a CUDA device: you should probably run with --cuda")
            model = torch.nn.GRU(8, 8)
            if args.cuda:
                model.cuda()
            """,
            fixed="""
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=torch.cuda.is_available(), help="use CUDA (default: True)")
            args = parser.parse_args()
            if torch.cuda.is_available():
                if not args.cuda:
                    print("You have a CUDA device: you should probably run with --cuda")
            model = torch.nn.GRU(8, 8)
            if args.cuda:
                model.cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="store-false-gpu-switch-beside-an-availability-warning",
        ),
        Invalid(
            """
            import argparse

            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", action="store_true", default=True)
            parser.add_argument("--no-gpu", action="store_true")
            parser.add_argument("--use-cpu", action="store_false", default=False)
            """,
            count=2,
            name="stuck-switches-with-no-fix",
        ),
        Invalid(
            """
            import argparse

            import torch

            def str2bool(text):
                return text.lower() in ("yes", "true", "t", "1")

            parser = argparse.ArgumentParser(description="evaluate a detector")
            parser.add_argument("--cuda", default=True, type=str2bool, help="use CUDA")
            args = parser.parse_args()
            if torch.cuda.is_available():
                torch.backends.cudnn.benchmark = args.cuda
            net = build_detector()
            if args.cuda:
                net = net.cuda()
            """,
            fixed="""
            import argparse

            import torch

            def str2bool(text):
                return text.lower() in ("yes", "true", "t", "1")

            parser = argparse.ArgumentParser(description="evaluate a detector")
            parser.add_argument("--cuda", default=torch.cuda.is_available(), type=str2bool, help="use CUDA")
            args = parser.parse_args()
            if torch.cuda.is_available():
                torch.backends.cudnn.benchmark = args.cuda
            net = build_detector()
            if args.cuda:
                net = net.cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="on-by-default-beside-an-availability-check",
        ),
    ]

    def setup(self) -> None:
        self._availability_facts: tuple[bool, frozenset[str], frozenset[str]] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        option = read_option(node)
        if option is None or not self.context.names.imports_from("argparse") or not self._is_device_flag(option):
            return
        kind = keyword_argument(node, "type")
        if kind is not None and option.type_name == "bool":
            if self.context.binding_scope("bool") is None:
                self.report(node, fix=self._fix(node, kind))
        elif kind is None and option.action == "store_true" and option.written_default is True:
            self.report(node, message=_STUCK_ON_MESSAGE, fix=self._switch_fix(option, Applicability.SAFE))
        elif kind is None and option.action == "store_false" and option.written_default is False:
            self.report(node, message=_STUCK_OFF_MESSAGE)
        elif kind is None and option.action == "store_false" and option.written_default is not False \
                and naming.turns_the_gpu_on(option.name_words):
            self.report(node, message=_INVERTED_MESSAGE, fix=self._switch_fix(
                option, Applicability.UNSAFE, on_by_default=not self._asks_for_a_gpu_beside(option)))
        elif self._on_where_there_is_no_gpu(option, kind):
            self.report(node, message=_ON_WITHOUT_A_GPU_MESSAGE, fix=self._default_fix(option))

    def _asks_for_a_gpu_beside(self, option: ArgparseOption) -> bool:
        """The program asks whether there is a GPU, reads the switch, and never lets the answer
        change it (see `_on_where_there_is_no_gpu`): a switch on by default would be reported
        again, so its default follows the answer instead."""
        dest = option.dest
        checks, tied, read = self._availability()
        return dest is not None and checks and dest in read and dest not in tied

    def _on_where_there_is_no_gpu(self, option: ArgparseOption, kind: cst.Arg | None) -> bool:
        """A GPU switch that can be switched (`type=str2bool`, `BooleanOptionalAction`), on
        by default, in a program that asks whether there is a GPU but never lets the answer
        change the switch: no test reads the two together, and nothing assigns the switch."""
        switchable = kind is not None or _names_boolean_optional_action(option.keywords.get("action"))
        if not switchable or option.written_default is not True or not naming.turns_the_gpu_on(option.name_words):
            return False
        return self._asks_for_a_gpu_beside(option)

    def _availability(self) -> tuple[bool, frozenset[str], frozenset[str]]:
        """Whether the file asks if there is a GPU (`torch.cuda.is_available()`,
        `device_count()`: the brain's availability checks); the attributes it reads in one test
        with that answer (`args.cuda and torch.cuda.is_available()`) or assigns (`args.cuda = ...`);
        the attributes it names at all."""
        if self._availability_facts is None:
            checks: set[int] = set()
            tied: set[str] = set()
            read: set[str] = set()
            for node in descendants(self.context.module):
                if type(node) is cst.Attribute:
                    read.add(node.attr.value)
                elif type(node) is cst.Call and self._asks_for_a_gpu(node):
                    checks.add(id(node))
                elif isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                    tied.update(target.attr.value for target in targets if isinstance(target, cst.Attribute))
            if checks:
                for node in descendants(self.context.module):
                    if isinstance(node, (cst.BooleanOperation, cst.IfExp)):
                        tied.update(_attributes_read_beside(node, checks))
            self._availability_facts = (bool(checks), frozenset(tied), frozenset(read))
        return self._availability_facts

    def _asks_for_a_gpu(self, call: cst.Call) -> bool:
        return self.context.names.qualified_name(call.func, among=AVAILABILITY_CHECKS) is not None

    def _default_fix(self, option: ArgparseOption) -> PendingFix | None:
        """`default=torch.cuda.is_available()`: the same on a machine with a GPU, off without."""
        default = option.keywords.get("default")
        torch = self.context.names.local_name_for("torch")
        words = option.name_words
        if default is None or torch is None or not words & {"cuda", "gpu", "gpus"}:
            return None
        return self.make_fix(NodeEdit(default, f"{torch}.cuda.is_available()"), applicability=Applicability.UNSAFE,
                             title="Default to whether there is a GPU")

    @staticmethod
    def _is_device_flag(option: ArgparseOption) -> bool:
        names = [*option.names, option.dest]
        return any(name is not None and any(word in name.lower() for word in naming.DEVICE_FLAG_WORDS) for name in names)

    def _switch_fix(self, option: ArgparseOption, applicability: Applicability, *,
                    on_by_default: bool = True) -> PendingFix | None:
        """`action=argparse.BooleanOptionalAction`, on by default as before: `--cuda` turns
        the GPU on and `--no-cuda` off; or, not `on_by_default`, on where there is a GPU
        (`default=torch.cuda.is_available()`). None where another option already has the
        `--no-` name argparse would add, or settings a switch does not take."""
        action = option.keywords.get("action")
        if action is None or any(arg.star or arg.keyword is not None and arg.keyword.value not in _KEPT_KEYWORDS | {"action"}
                                 for arg in option.call.args):
            return None
        long_names = [name for name in option.names if name is not None and name.startswith("--")]
        if not long_names or any(re.search(rf"""(['"])--no-{re.escape(name[2:])}\1""", self.context.source) for name in long_names):
            return None
        module = self.context.names.local_name_for("argparse")
        imports: tuple[tuple[str, str | None], ...] = ()
        if module is None:
            module, imports = "argparse", (("argparse", None),)
        # BooleanOptionalAction has no default of its own: a switch that was on without the flag stays on.
        default = "" if "default" in option.keywords else ", default=True"
        if not on_by_default:
            torch = self.context.names.local_name_for("torch")
            if torch is None or "default" in option.keywords:
                return None
            default = f", default={torch}.cuda.is_available()"
        return self.make_fix(NodeEdit(action, f"{module}.BooleanOptionalAction{default}"),
                             applicability=applicability, required_imports=imports)

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


def _names_boolean_optional_action(action: cst.BaseExpression | None) -> bool:
    """`action=argparse.BooleanOptionalAction` (or the name imported alone)."""
    name = dotted_name(action) if action is not None else None
    return name is not None and name.rpartition(".")[2] == "BooleanOptionalAction"


def _attributes_read_beside(test: cst.CSTNode, checks: set[int]) -> set[str]:
    """`args.cuda and torch.cuda.is_available()` -> {"cuda"}: the attributes a test reads
    outside the availability checks in it (`checks`, by id); none where it holds none."""
    found: set[str] = set()
    asks = False
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if id(node) in checks:
            asks = True
            continue
        if type(node) is cst.Attribute:
            found.add(node.attr.value)
        stack.extend(child_nodes(node))
    return found if asks else set()
