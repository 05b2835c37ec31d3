"""What each command-line option holds once parsed, as the walk has read the parser so far.

`parser.add_argument("--gpu", type=int)` and `args = parser.parse_args()`: `args.gpu` is an
int. A shared analysis (`context.shared(CommandLine)`), fed by the engine's walk, so every
rule that asks what `args.<dest>` holds reads the same answer, and the reading of each
option is the argparse brain's (`read_option`).
"""

from __future__ import annotations

import re
from enum import Enum

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.brains.argparse_options import read_option
from torchdevlint.analysis.devices import integer_value, string_value
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import keyword_argument

# `parser.parse_args()`, `parse_known_args()[0]`, or the script's own `args = get_args()`:
# the namespace whose attributes are the options (matched by dest, so a guess costs little).
_NAMESPACE_CALL = re.compile(r"(^|\.)(parse_(known_)?args|get_args|parse_arguments|parse_opts?|get_options)$")


class OptionKind(Enum):
    INT = "int"
    NON_STRING = "non-string"
    STRING = "string"


class CommandLine:
    def __init__(self, context: object) -> None:
        # dest -> what it holds (None: unknown, or parsers disagree).
        self._options: dict[str, OptionKind | None] = {}
        self._namespaces: set[str] = set()
        # dest -> its integer default (None: not an integer, or parsers disagree).
        self._integer_defaults: dict[str, int | None] = {}
        # dest -> the strings its default and choices offer.
        self._offered: dict[str, set[str]] = {}
        # Attribute names the program compares or assigns (`args.device == "auto"`,
        # `args.device = ...`): an option so handled may be remapped before it is used.
        self._handled: set[str] = set()

    def option_kind(self, node: cst.BaseExpression) -> OptionKind | None:
        """What `args.<dest>` holds, where `node` reads an option of a parsed namespace."""
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value in self._namespaces:
            return self._options.get(node.attr.value)
        return None

    def integer_default(self, node: cst.BaseExpression) -> int | None:
        """The integer default of the option `args.<dest>` reads, if it has one."""
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) \
                and self.is_namespace(node.value.value):
            return self._integer_defaults.get(node.attr.value)
        return None

    def offered_strings(self, dest: str) -> frozenset[str]:
        """The strings an option's default and choices offer; empty for no such option.
        Complete once the walk is over."""
        return frozenset(self._offered.get(dest, ()))

    def is_namespace(self, name: str) -> bool:
        """Whether a name holds the parsed options: bound by `parse_args()` here, or named as
        parsed options are passed around (`args`, `opt`, `cfg`)."""
        return name in self._namespaces or name in naming.OPTION_NAMESPACE_NAMES

    def handled(self, dest: str) -> bool:
        """Whether the program compares or assigns an attribute of that name anywhere (known
        once the walk is over)."""
        return dest in self._handled

    # ---- the walk --------------------------------------------------------------------------

    def leave_Call(self, node: cst.Call) -> None:
        option = read_option(node)
        dest = option.dest if option is not None else None
        if option is None or dest is None:
            return
        kind = _option_kind(node)
        previous = self._options.get(dest, kind)
        self._options[dest] = kind if previous == kind else None
        offered = self._offered.setdefault(dest, set())
        default = option.keywords.get("default")
        default_text = string_value(default) if default is not None else None
        number = integer_value(default) if default is not None else None
        self._integer_defaults[dest] = number if self._integer_defaults.get(dest, number) == number else None
        if default_text is not None:
            offered.add(default_text)
        choices = option.keywords.get("choices")
        if isinstance(choices, (cst.List, cst.Tuple, cst.Set)):
            offered.update(text for text in (string_value(e.value) for e in choices.elements) if text is not None)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for side in (node.left, *(target.comparator for target in node.comparisons)):
            if isinstance(side, cst.Attribute):
                self._handled.add(side.attr.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Attribute):
            self._handled.add(node.target.attr.value)

    def leave_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Subscript):
            value = value.value  # `args = parser.parse_known_args()[0]`
        if isinstance(value, cst.Call) and _NAMESPACE_CALL.search(dotted_name(value.func) or ""):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._namespaces.add(target.target.value)


def _option_kind(call: cst.Call) -> OptionKind | None:
    """What an option holds: an int, another non-string, a string, or unknown (None)."""
    type_arg = keyword_argument(call, "type")
    nargs = keyword_argument(call, "nargs")
    action = keyword_argument(call, "action")
    default = keyword_argument(call, "default")
    type_name = type_arg.value.value if type_arg is not None and isinstance(type_arg.value, cst.Name) else None
    action_value = string_value(action.value) if action is not None else None
    if action_value in ("store_true", "store_false", "count"):
        return OptionKind.NON_STRING
    if action is not None:
        return None
    if nargs is not None:
        many = string_value(nargs.value) in ("+", "*") or integer_value(nargs.value) is not None
        return OptionKind.NON_STRING if many else None
    if type_name == "int":
        return OptionKind.INT
    if type_name == "float":
        return OptionKind.NON_STRING
    if type_arg is None and default is not None and isinstance(default.value, cst.Integer):
        return OptionKind.INT  # the default is used as is when the option is not given
    if type_arg is None or type_name == "str":
        return OptionKind.STRING
    return None
