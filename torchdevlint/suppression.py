"""`# noqa` and `# noqa: TDL001, TDL004` comments, as flake8 and ruff read them."""

from __future__ import annotations

import re

_NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?",
    re.IGNORECASE,
)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def is_suppressed(line_text: str, code: str) -> bool:
    """True when the physical line carries a bare `# noqa` or one naming `code` (or a prefix)."""
    if "noqa" not in line_text.lower():
        return False
    for match in _NOQA.finditer(line_text):
        codes = match.group("codes")
        if codes is None:
            return True
        for named in _CODE.findall(codes):
            if code.upper().startswith(named.upper()):
                return True
    return False
