"""The server's syntax check gives, for every version of a buffer, what Python's whole parse
gives (the same tree, line numbers included, or the same error), while parsing again only the
top-level statements an edit touches."""

from __future__ import annotations

import ast
import random

import pytest
from conftest import FIXTURES, ROOT
from test_incremental_parse import edit

from torchdevlint import incremental_syntax
from torchdevlint.engine import InvalidSource, check_syntax
from torchdevlint.incremental_syntax import IncrementalSyntaxCheck


def outcome(check: IncrementalSyntaxCheck | None, source: str) -> str:
    """The tree (every position included) or the error, as text to compare."""
    try:
        tree = check(source, "buffer.py") if check is not None else check_syntax(source, "buffer.py")
    except InvalidSource as error:
        return f"InvalidSource({error.message!r}, {error.line}, {error.column})"
    return "None" if tree is None else ast.dump(tree, include_attributes=True)


def assert_same_sequence(versions: list[str]) -> IncrementalSyntaxCheck:
    check = IncrementalSyntaxCheck()
    for number, version in enumerate(versions):
        assert outcome(check, version) == outcome(None, version), f"version {number}:\n{version}"
    return check


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text Python's parser is given from here on."""
    lengths: list[int] = []
    real_parse = ast.parse

    def parse(source: str, *args: object, **kwargs: object) -> ast.Module:
        lengths.append(len(source.strip("\n")))
        return real_parse(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast, "parse", parse)
    return lengths


def functions(count: int) -> str:
    return "".join(f"def f{n}(x):\n    y = x + {n}\n    return y\n\n\n" for n in range(count))


def test_typing_inside_a_function_parses_only_that_function(monkeypatch: pytest.MonkeyPatch) -> None:
    base = "import torch\n\n\n" + functions(40)
    check = IncrementalSyntaxCheck()
    check(base, "buffer.py")
    parsed = counting_parses(monkeypatch)
    typed = base.replace("    y = x + 20\n", "    y = x + 20  # a comment\n")
    assert outcome(check, typed) == outcome(None, typed)
    assert parsed[0] < 80  # one function, not the 2,000-character file


@pytest.mark.parametrize(
    "new",
    [
        # lines added and removed before reused statements: their line numbers move
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    z = 1\n    return y\n", 1),
        "import torch\n\n\n" + functions(3).replace("    y = x + 0\n", "", 1),
        # statements joined, split, decorated, continued
        "import torch\n\n\n" + functions(3).replace("def f1", "@decorator\ndef f1"),
        "import torch\n\n\n" + functions(3).replace("\n\ndef f1", "\nelse:\n    pass\ndef f1"),
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    return y; x = 1\n", 1),
        "import torch; import os\n\n\n" + functions(3),
        # a header above a first line of two statements, edited on that line
        "# header\n\nimport torch; import os\n\n\n" + functions(3),
        "import torch\n\n\n" + functions(3).replace("def f2(x):", "    def f2(x):"),
        "import torch\n\n\n" + functions(3).replace("def f2(x):", "def f2(x:"),
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    return (y\n", 1),
        "import torch\n\n\n" + functions(3).replace("    return y\n", '    return """y\n', 1),
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    return y \\\n", 1),
        # every statement gone, comments only, nothing at all
        "# only a comment\n",
        "",
        # CRLF line ends, a lone carriage return, no final line end
        ("import torch\n\n\n" + functions(3)).replace("\n", "\r\n"),
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    return y\r", 1),
        ("import torch\n\n\n" + functions(3)).rstrip("\n"),
        # syntax only a newer Python reads, and a syntax error
        "import torch\n\n\n" + functions(3).replace("    return y\n", "    return 1 +\n", 1),
    ],
)
def test_edits_give_what_a_whole_parse_gives(new: str) -> None:
    old = "import torch\n\n\n" + functions(3)
    assert_same_sequence([old, new, old, new])


def test_statements_sharing_the_first_line_below_a_header_stay_one_unit() -> None:
    old = "# header\n\nimport torch; import os\n\n\n" + functions(3)
    assert_same_sequence([old, old.replace("import os", "import sys"), old.replace("import torch;", "import re;"),
                          old, old.replace("import os\n\n", "import os\n# typed\n"), old])


def test_unchanged_text_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import torch\n" + functions(3)
    check = IncrementalSyntaxCheck()
    first = check(source, "buffer.py")
    parsed = counting_parses(monkeypatch)
    assert check(source, "buffer.py") is first
    assert parsed == []


def test_an_error_then_the_fix_splices_again(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import torch\n\n\n" + functions(30)
    check = IncrementalSyntaxCheck()
    check(source, "buffer.py")
    broken = source.replace("    y = x + 7\n", "    y = x + (7\n")
    with pytest.raises(InvalidSource):
        check(broken, "buffer.py")
    check(source, "buffer.py")  # parsed whole: the kept tree was dropped with the error
    parsed = counting_parses(monkeypatch)
    fixed = source.replace("    y = x + 7\n", "    y = x + (7)\n")
    assert outcome(check, fixed) == outcome(None, fixed)
    assert parsed[0] < 80


# Random typing-like edits of real files, each version compared with a whole parse.


def check_random_edits(source: str, seed: int, count: int, whole: list[str]) -> tuple[list[str], int, int]:
    """`count` random edits of `source`: the versions where the check and a whole parse differ,
    the versions Python accepts, and how many of those the check parsed whole (it appends every
    text it parses whole to `whole`)."""
    rng = random.Random(seed)
    check = IncrementalSyntaxCheck()
    problems: list[str] = []
    valid = valid_parsed_whole = 0
    good, version, cursor = source, source, rng.randrange(len(source) + 1)
    for number in range(count + 1):
        if number:
            version, cursor = edit(version, rng, cursor)
        expected = outcome(None, version)
        before = len(whole)
        if outcome(check, version) != expected:
            problems.append(f"seed {seed} version {number}")
        if expected.startswith("InvalidSource"):
            if rng.random() < 0.5:
                version = good  # the user fixes the error (else keeps typing into it)
        else:
            good = version
            valid += 1
            valid_parsed_whole += len(whole) > before
    return problems, valid, valid_parsed_whole


@pytest.mark.slow
def test_random_edits_of_project_files_match_a_whole_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    whole: list[str] = []

    def whole_parse(source: str, path: str, *, newer_syntax: bool | None = None) -> ast.Module | None:
        whole.append(source)
        return check_syntax(source, path, newer_syntax=newer_syntax)

    monkeypatch.setattr(incremental_syntax, "check_syntax", whole_parse)
    paths = [*sorted(FIXTURES.glob("*.py"))[:20], ROOT / "torchdevlint" / "engine.py",
             ROOT / "torchdevlint" / "incremental_syntax.py"]
    problems: list[str] = []
    valid = valid_parsed_whole = 0
    for seed, path in enumerate(paths):
        found, accepted, parsed_whole = check_random_edits(path.read_text(encoding="utf-8"), seed, 30, whole)
        problems.extend(f"{path.name}: {problem}" for problem in found)
        valid += accepted
        valid_parsed_whole += parsed_whole
    assert not problems, problems[:5]
    # Not a correctness property, a speed one: most versions Python accepts reuse most of the
    # last good tree (the first version of each file is parsed whole).
    assert valid > 200
    assert valid_parsed_whole < 0.2 * valid


def test_the_grammar_changing_future_import_is_parsed_whole() -> None:
    source = "from __future__ import barry_as_FLUFL\n" + functions(3)
    assert not incremental_syntax._splices_safely(source)
    assert_same_sequence([source, source.replace("y = x + 1", "y = x <> 1")])
