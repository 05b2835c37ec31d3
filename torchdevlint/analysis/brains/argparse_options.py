"""argparse, as device settings are written with it: one reader of `add_argument(...)` calls,
for every rule and analysis that asks what an option is called, where it is stored and what it
holds."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.devices import string_value


@dataclass(frozen=True)
class ArgparseOption:
    """One `parser.add_argument(...)` (or a group's) as written."""

    call: cst.Call
    # The option strings given positionally (`"--no-cuda"`, `"-g"`), None where not a literal.
    names: tuple[str | None, ...]
    keywords: dict[str, cst.BaseExpression]

    @property
    def dest(self) -> str | None:
        """Where argparse stores it: `dest=`, else its first long name (dashes as `_`)."""
        written = self.keywords.get("dest")
        if written is not None:
            return string_value(written)
        long_names = [name for name in self.names if name is not None and name.startswith("--")]
        chosen = long_names[0] if long_names else next((name for name in self.names if name is not None), None)
        return None if chosen is None else chosen.lstrip("-").replace("-", "_")

    @property
    def type_name(self) -> str | None:
        """`type=bool` -> "bool"; None for no type, or one that is not a plain name."""
        kind = self.keywords.get("type")
        return kind.value if type(kind) is cst.Name else None

    @property
    def action(self) -> str | None:
        action = self.keywords.get("action")
        return string_value(action) if action is not None else None

    @property
    def written_default(self) -> bool | None:
        """`default=True` -> True, `default=False` -> False; None where absent or anything else."""
        default = self.keywords.get("default")
        if type(default) is cst.Name and default.value in ("True", "False"):
            return default.value == "True"
        return None

    @property
    def name_words(self) -> set[str]:
        """The words of its option strings and `dest=` (`--use-gpu`, dest `gpu`: use, gpu)."""
        found: set[str] = set()
        for name in [*self.names, self.dest]:
            if name is not None:
                found.update(naming.words(name))
        return found


def read_option(call: cst.Call) -> ArgparseOption | None:
    """The option an `add_argument` call declares; None for any other call."""
    func = call.func
    if not (type(func) is cst.Attribute and func.attr.value == "add_argument"):
        return None
    names = tuple(string_value(arg.value) for arg in call.args if arg.keyword is None and not arg.star)
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    return ArgparseOption(call, names, keywords)
