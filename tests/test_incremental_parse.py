"""IncrementalParser builds exactly the tree libcst.parse_module builds, and reparses little.

Targeted cases for each context the splice must respect, then random typing-like edits of the
project's own files, every version compared with a fresh parse.
"""

from __future__ import annotations

import copy
import functools
import random
from collections.abc import Sequence
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES, ROOT

from torchdevlint.incremental_parse import IncrementalParser

MODULE_FIELDS = ("default_indent", "default_newline", "has_trailing_newline", "encoding")


def outcome(parser: IncrementalParser, source: str) -> cst.Module | BaseException:
    try:
        return parser.parse(source)
    except Exception as error:  # noqa: BLE001 - compared with the fresh parse's
        return error


def mismatch(parser: IncrementalParser, source: str) -> str | None:
    """Parses `source` with `parser` and with parse_module; says how they differ, None if they do not."""
    return difference(outcome(parser, source), source)


@functools.lru_cache(maxsize=8)
def fresh_parse(source: str) -> cst.Module | BaseException:
    """parse_module's outcome (trees are immutable: the exhaustive edit tests compare each
    version with the same base again and again, and parse it once)."""
    try:
        return cst.parse_module(source)
    except Exception as error:  # noqa: BLE001
        return error


def difference(got: cst.Module | BaseException, source: str) -> str | None:
    """How `got` differs from parse_module's outcome for `source`; None if it does not."""
    expected = fresh_parse(source)
    if isinstance(expected, BaseException) or isinstance(got, BaseException):
        if type(got) is not type(expected) or str(got) != str(expected):
            return f"outcome: got {got!r:.200}, expected {expected!r:.200}"
        return None
    assert isinstance(got, cst.Module)
    for field in MODULE_FIELDS:
        if getattr(got, field) != getattr(expected, field):
            return f"{field}: got {getattr(got, field)!r}, expected {getattr(expected, field)!r}"
    # Equal trees render the same code: the rendering (a third of a check's time) is only
    # needed to say how unequal ones differ.
    if not got.deep_equals(expected):
        return "code differs" if got.code != expected.code else "trees differ"
    return None


def assert_same(parser: IncrementalParser, source: str) -> cst.Module:
    got = outcome(parser, source)
    problem = difference(got, source)
    assert problem is None, problem
    assert isinstance(got, cst.Module)
    return got


def assert_spliced(
    old: str, new: str, *, most: int | None = None, depth: int | None = None, top_level_too: bool = True
) -> IncrementalParser:
    """Parses `old` then `new`, reusing statements of bodies too, and (`top_level_too`) of the top level only.

    Either way the second equals a fresh parse, renders as `new`, and was spliced; with bodies,
    at `depth` (when given), reparsing at most `most` characters (when given). Returns that parser.
    """
    for inside_bodies in (False, True) if top_level_too else (True,):
        parser = IncrementalParser(inside_bodies=inside_bodies)
        assert_same(parser, old)
        module = assert_same(parser, new)
        assert module.code == new
        assert parser.last_fallback is None, (inside_bodies, parser.last_fallback)
    if most is not None:
        assert parser.last_reparsed_chars <= most, parser.last_reparsed_chars
    if depth is not None:
        assert parser.last_splice_depth == depth
    return parser


def assert_whole(old: str, new: str) -> IncrementalParser:
    """Parses `old` then `new`: the second equals a fresh parse, and parsed the whole text."""
    for inside_bodies in (False, True):
        parser = IncrementalParser(inside_bodies=inside_bodies)
        assert_same(parser, old)
        assert_same(parser, new)
        assert parser.last_fallback is not None
        assert parser.last_reparsed_chars == len(new)
    return parser


def assert_same_sequence(sources: Sequence[str]) -> None:
    """Each of `sources`, parsed in turn by one parser (each kind), equals a fresh parse."""
    for inside_bodies in (False, True):
        parser = IncrementalParser(inside_bodies=inside_bodies)
        for source in sources:
            problem = mismatch(parser, source)
            assert problem is None, problem


def functions(count: int, indent: str = "    ") -> str:
    return "".join(
        f"\n\ndef f{i}(x):\n{indent}y = x + {i}\n{indent}if y:\n{indent * 2}return y\n{indent}return -y\n"
        for i in range(count)
    )


BASE = '"""Doc."""\nimport torch\n' + functions(30)


# The common case: an edit inside one function parses that function only.


def test_edit_inside_a_function_parses_only_that_function() -> None:
    new = BASE.replace("y = x + 17", "y = x + 170")
    parser = assert_spliced(BASE, new, most=20)  # the statement `y = x + 170` only
    # 31 top-level statements, and the function's other two
    assert parser.last_reused_statements == 31 + 2


def test_successive_edits_keep_splicing() -> None:
    parser = IncrementalParser()
    source = BASE
    assert_same(parser, source)
    for i in range(30):
        source = source.replace(f"y = x + {i}\n", f"y = x + {i} * 2\n")
        assert_same(parser, source)
        assert parser.last_fallback is None
        assert parser.last_reparsed_chars < 80


def test_unchanged_text_returns_the_same_tree() -> None:
    parser = IncrementalParser()
    first = parser.parse(BASE)
    assert parser.parse(BASE) is first
    assert parser.last_reparsed_chars == 0


def test_first_statement_and_header_reparse() -> None:
    assert_spliced("# header\n\nimport os\nx = 1\n", "# header!\n\nimport os\nx = 1\n", most=30)
    assert_spliced("import os\nx = 1\ny = 2\n", "import sys\nimport os\nx = 1\ny = 2\n", most=30)


def test_footer_and_last_statement_reparse() -> None:
    assert_spliced("x = 1\ny = 2\n# end\n", "x = 1\ny = 3\n# the end\n\n")
    assert_spliced("x = 1\ndef f():\n    pass\n    # kept\n", "x = 1\ndef f():\n    pass\n    # kept\n\n# more\n")


# The region must start and end at line starts.


def test_last_statement_without_newline_then_more_text() -> None:
    assert_spliced("x = 1\ny = 2", "x = 1\ny = 2\nz = 3")
    assert_spliced("x = 1\ny = 2", "x = 1\ny = 2\n")
    assert_spliced("x = 1\ny = 2\n", "x = 1\ny = 2")
    assert_spliced("x = 1\ndef f():\n    pass", "x = 1\ndef f():\n    pass\n    # c")


def test_joining_a_line_onto_the_next_statement() -> None:
    # "x = a" + "pass" would parse as "x = apass": the region must end with its own newline.
    assert_same_sequence(["x = 1\ny = a\nz = 2\n", "x = 1\ny = az = 2\n", "x = 1\ny = a\nz = 2\n"])
    assert_same_sequence(["x = 1\ny = a\nz = 2\n", "x = 1\ny = a \\\nz = 2\n"])


def test_a_line_holding_only_a_backslash() -> None:
    # LibCST drops such a line, so the statements cannot be cut there; parsing stays exact.
    parser = IncrementalParser()
    for source in ["x = 1\n\\\ny = 2\nz = 3\n", "x = 1\n\\\ny = 2\nz = 4\n", "x = 1\ny = 2\nz = 4\n"]:
        outcome_ = mismatch(parser, source)
        assert outcome_ is None, outcome_


# Header and footer ownership.


def test_comment_lines_moving_between_header_and_first_statement() -> None:
    assert_spliced("# a\nimport os\nx = 1\n", "import os\nx = 1\n")
    assert_spliced("import os\nx = 1\n", "# a\n\nimport os\nx = 1\n")
    assert_spliced("# a\n\nimport os\nx = 1\n", "# a\n\n# b\nx = 1\n")


def test_comment_lines_before_a_reused_statement() -> None:
    # Parsed alone the new comment would be the region's footer; in the file it leads `def g`.
    old = "x = 1\ny = 2\n\ndef g():\n    pass\n"
    assert_spliced(old, "x = 1\ny = 2\n# about g\n\ndef g():\n    pass\n")
    assert_spliced(old, "x = 1\ny = 2\n\n\ndef g():\n    pass\n")
    assert_spliced("x = 1\ny = 2\n# about g\ndef g():\n    pass\n", old)


def test_trailing_comments_become_the_module_footer() -> None:
    assert_spliced("x = 1\ny = 2\n", "x = 1\ny = 2\n# end\n")
    assert_spliced("x = 1\ny = 2\n# end\n", "x = 1\ny = 2\n")


# Comment lines indented after a compound statement belong to its block's footer.


def test_indented_comment_after_a_block_belongs_to_the_block() -> None:
    old = "def f():\n    pass\n\nx = 1\ny = 2\n"
    new = "def f():\n    pass\n\n    # still f\nx = 1\ny = 2\n"
    parser = assert_spliced(old, new)
    tree = parser.parse(new)
    assert isinstance(tree.body[0], cst.FunctionDef)
    assert isinstance(tree.body[0].body, cst.IndentedBlock)
    assert [line.comment.value for line in tree.body[0].body.footer if line.comment] == ["# still f"]


def test_deleting_a_column_0_comment_hands_indented_lines_to_the_block() -> None:
    old = "x = 0\ndef f():\n    pass\n# c\n    # d\nx = 1\ny = 2\n"
    assert_spliced(old, "x = 0\ndef f():\n    pass\n    # d\nx = 1\ny = 2\n")
    assert_spliced(old, "x = 0\ndef f():\n    pass\n# c\n  # d\nx = 1\ny = 2\n")
    assert_spliced(old, "x = 0\ndef f():\n    pass\n# c\nx = 1\ny = 2\n")


def test_edit_after_a_block_footer_keeps_ownership() -> None:
    old = "def f():\n    pass\n    # f's\n\n# g's\ndef g():\n    pass\nz = 1\n"
    assert_spliced(old, old.replace("def g():\n    pass", "def g():\n    return 1"))
    assert_spliced(old, old.replace("# g's\n", "  # g's\n"))
    assert_spliced(old, old.replace("    # f's\n", "# f's\n"))


def test_indented_comment_before_a_reused_statement() -> None:
    old = "x = 1\ny = 2\n    # odd\nz = 3\nw = 4\n"
    assert_spliced(old, "x = 1\nif y:\n    pass\n    # odd\nz = 3\nw = 4\n")
    assert_spliced(old.replace("y = 2", "if y:\n    pass"), old)


# Regions that only parse in context.


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # an indented line continuing the previous function's body
        ("def f():\n    a = 1\nx = 1\ny = 2\n", "def f():\n    a = 1\n    b = 2\nx = 1\ny = 2\n"),
        # else, elif, except, finally after a reused statement
        ("if a:\n    b\nx = 1\ny = 2\n", "if a:\n    b\nelse:\n    c\nx = 1\ny = 2\n"),
        ("if a:\n    b\nx = 1\ny = 2\n", "if a:\n    b\nelif c:\n    d\nx = 1\ny = 2\n"),
        ("try:\n    b\nexcept E:\n    c\nx = 1\ny = 2\n", "try:\n    b\nexcept E:\n    c\nfinally:\n    d\nx = 1\ny = 2\n"),
        ("try:\n    b\nfinally:\n    c\nx = 1\ny = 2\n", "try:\n    b\nexcept E:\n    d\nfinally:\n    c\nx = 1\ny = 2\n"),
        # a decorator typed above a reused function
        ("x = 1\ndef f():\n    pass\ny = 2\n", "x = 1\n@dec\ndef f():\n    pass\ny = 2\n"),
        ("x = 1\n@dec\ndef f():\n    pass\ny = 2\n", "x = 1\n@dec\n@dec2\ndef f():\n    pass\ny = 2\n"),
        # the previous statement's block grows into a reused line
        ("for a in b:\n    c\nx = 1\ny = 2\n", "for a in b:\n    c\n    x = 1\ny = 2\n"),
        # the same one level down, in a class body
        ("class A:\n    def f(self):\n        a\n    x = 1\n    y = 2\nz = 3\n",
         "class A:\n    def f(self):\n        a\n        x = 1\n    y = 2\nz = 3\n"),
        ("class A:\n    if a:\n        b\n    x = 1\n    y = 2\nz = 3\n",
         "class A:\n    if a:\n        b\n    else:\n        c\n    x = 1\n    y = 2\nz = 3\n"),
        ("class A:\n    x = 1\n    def f(self):\n        pass\n    y = 2\nz = 3\n",
         "class A:\n    x = 1\n    @property\n    def f(self):\n        pass\n    y = 2\nz = 3\n"),
        # a line dedented out of the body: the statement ends there
        ("class A:\n    x = 1\n    y = 2\n    z = 3\nw = 4\n", "class A:\n    x = 1\ny = 2\n    z = 3\nw = 4\n"),
        ("class A:\n    x = 1\n    y = 2\n    z = 3\nw = 4\n", "class A:\n    x = 1\n    y = 2\nz = 3\nw = 4\n"),
        ("class A:\n    x = 1\n    y = 2\n    z = 3\nw = 4\n", "class A:\n    x = 1\n    y = 2\n  z = 3\nw = 4\n"),
    ],
)
def test_context_dependent_regions(old: str, new: str) -> None:
    assert_same_sequence([old, new, old])


@pytest.mark.parametrize(
    "opening",
    ["(", "[", "{", '"""', "'''", "f'''{", "\\"],
)
def test_unclosed_bracket_or_string_is_the_full_parse_error(opening: str) -> None:
    broken = BASE.replace("y = x + 5\n", f"y = x + 5 {opening}\n")
    assert_same_sequence([BASE, broken, BASE])
    with pytest.raises(cst.ParserSyntaxError):
        IncrementalParser().parse(broken)


def test_an_opened_string_closed_by_a_reused_statement() -> None:
    # The region's triple quote ends in a later statement: parsed alone it is unterminated.
    old = 'x = 1\ny = 2\nz = """a"""\nw = 3\n'
    assert_same_sequence([old, 'x = 1\ny = """\nz = """a"""\nw = 3\n'])


def test_errors_keep_the_last_good_version() -> None:
    parser = IncrementalParser()
    assert_same(parser, BASE)
    broken = BASE.replace("y = x + 5\n", "y = x + (5\n")
    with pytest.raises(cst.ParserSyntaxError):
        parser.parse(broken)
    with pytest.raises(cst.ParserSyntaxError):
        parser.parse(broken.replace("(5", "(5 +"))
    fixed = BASE.replace("y = x + 5\n", "y = x + (5)\n")
    assert_same(parser, fixed)
    assert parser.last_fallback is None
    assert parser.last_reparsed_chars < 80


# Module fields parse_module reads from the whole text.


def test_default_indent_comes_from_the_first_block() -> None:
    two = "x = 1\ndef f():\n  return 1\ndef g():\n  return 2\n"
    # the first block's indent changes: every block's `indent` field changes with it
    assert_whole(two, two.replace("  return 1", "    return 1"))
    # a new first block, indented unlike the rest
    assert_whole(two, "def e():\n    pass\n" + two)
    # a region with a differently indented block after the first block
    assert_whole(two, two.replace("  return 2", "    return 2"))
    # a first block appears where there was none
    assert_spliced("x = 1\ny = 2\nz = 3\n", "x = 1\nif y:\n    y = 2\nz = 3\n")
    assert_whole("x = 1\ny = 2\nz = 3\n", "x = 1\nif y:\n  y = 2\nz = 3\n")
    # the first block disappears, the next one has another indent
    assert_whole("x = 1\nif y:\n    pass\nz = 3\nif z:\n  pass\n", "x = 1\ny = 1\nz = 3\nif z:\n  pass\n")
    # the region has no block, the first is further down
    assert_spliced("x = 1\ny = 2\nif z:\n  pass\n", "x = 1\ny = 3\nif z:\n  pass\n")


def test_first_indent_found_in_later_clauses() -> None:
    old = "x = 1\nif a: pass\nelse:\n  b\ny = 2\nif c:\n  pass\n"
    assert_spliced(old, old.replace("y = 2", "y = 3"))
    old = "x = 1\ntry: pass\nexcept E: pass\nfinally:\n\tb\ny = 2\nmatch v:\n\tcase 1:\n\t\tpass\n"
    assert_spliced(old, old.replace("y = 2", "y = 3"))


def test_default_newline_comes_from_the_first_line() -> None:
    crlf = "x = 1\r\ny = 2\r\nz = 3\r\n"
    assert_spliced(crlf, crlf.replace("y = 2", "y = 22"))
    assert_whole(crlf, crlf.replace("x = 1\r\n", "x = 1\n"))
    assert_whole("x = 1\ny = 2\r\nz = 3\n", "x = 1\r\ny = 2\r\nz = 3\n")
    mixed = "x = 1\ny = 2\r\nz = 3\n"
    assert_spliced(mixed, mixed.replace("z = 3", "z = 4"))
    # a lone carriage return is a newline to LibCST only: always parsed whole
    assert_whole("x = 1\ny = 2\n", "x = 1\ny = 2\rz = 3\n")


def test_trailing_newline_and_byte_order_mark() -> None:
    assert_spliced("x = 1\ny = 2\n", "x = 1\ny = 2 ")
    parser = assert_whole("x = 1\ny = 2\n", "\ufeffx = 1\ny = 2\n")
    assert_same(parser, "\ufeffx = 1\ny = 3\n")


def test_whole_file_replaced() -> None:
    assert_whole("x = 1\ny = 2\n", "a = 1\nb = 2\n")
    assert_whole("x = 1\n", "x = 2\n")


# One level down: the body of a top-level class, function, if, for, while or with.

CLASS = (
    "import torch\n\n\n"
    "class Net(torch.nn.Module):\n"
    '    """A net."""\n\n'
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.linear = torch.nn.Linear(3, 4)\n\n"
    "    def forward(self, x):\n"
    "        x = self.linear(x)\n"
    "        return x.relu()\n"
    "        # end of forward\n\n"
    "    # about g\n"
    "    def g(self):\n"
    "        return 1\n"
    "    # the class's\n\n"
    "# the next's\n"
    "net = Net()\n"
)


def test_edit_inside_a_method_parses_only_that_method() -> None:
    new = CLASS.replace("x.relu()", "x.sigmoid()")
    parser = assert_spliced(CLASS, new, depth=1, most=140)  # forward, and the lines after it
    assert parser.last_reused_statements == 2 + 3


@pytest.mark.parametrize(
    "new",
    [
        # the first statement of the body, and lines between it and the header
        CLASS.replace('    """A net."""', '    """A better net."""'),
        CLASS.replace('    """A net."""\n', '    # comment\n    """A net."""\n'),
        CLASS.replace('    """A net."""\n\n', "    x = 1\n\n"),
        # a new first statement, before the reused first one
        CLASS.replace('    """A net."""\n', '    """A net."""\n    x = 1\n'),
        # the last statement of the body, the class's footer and the next statement's leading lines
        CLASS.replace("        return 1\n", "        return 2\n"),
        CLASS.replace("    # the class's\n", ""),
        CLASS.replace("    # the class's\n", "    # the class's\n        # g's\n"),
        CLASS.replace("# the next's\n", "    # the class's too\n"),
        CLASS.replace("# the next's\n", "# the next's\n\n"),
        CLASS.replace("        return 1\n", "        return 1\n\n    def h(self):\n        pass\n"),
        # the forward's footer
        CLASS.replace("        # end of forward\n", ""),
        CLASS.replace("        # end of forward\n", "    # end of forward\n"),
        CLASS.replace("        # end of forward\n", "# end of forward\n"),
        CLASS.replace("    # about g\n", "        # about g\n"),
        CLASS.replace("    # about g\n", "# about g\n"),
        # a method added, removed, decorated, renamed
        CLASS.replace("    # about g\n", "    def h(self):\n        pass\n\n    # about g\n"),
        CLASS.replace("    def forward(self, x):\n        x = self.linear(x)\n        return x.relu()\n", ""),
        CLASS.replace("    def g(self):", "    @property\n    def g(self):"),
        CLASS.replace("    def g(self):", "    def h(self):"),
    ],
)
def test_edits_in_a_class_body(new: str) -> None:
    assert_spliced(CLASS, new)
    assert_same_sequence([CLASS, new, CLASS])


@pytest.mark.parametrize(
    "new",
    [
        CLASS.replace("class Net(torch.nn.Module):", "class Net(torch.nn.Module, Base):"),  # the head
        CLASS.replace("    def g(self):\n        return 1\n", "    def g(self):\n      return 1\n"),
        CLASS.replace("        super().__init__()\n", "\tsuper().__init__()\n"),
        CLASS.replace("    def g(self):\n", "def g(self):\n"),  # out of the class
        CLASS.replace("        return 1\n", "        return 1\nx = 1\n"),
        CLASS.replace("net = Net()\n", "net = Net()"),
        CLASS.replace("net = Net()\n", ""),
        CLASS + "    # indented, at the end\n",
    ],
)
def test_edits_that_leave_or_reshape_a_class_body(new: str) -> None:
    assert_same_sequence([CLASS, new, CLASS])


def test_a_class_at_the_end_of_the_text() -> None:
    last = CLASS.replace("# the next's\nnet = Net()\n", "")
    for new in [
        last.replace("return 1", "return 2"),
        last.replace("    # the class's\n\n", "    # the class's"),
        last.rstrip("\n"),
        last + "        # deep\n",
        last + "# top\n",
    ]:
        assert_same_sequence([last, new, last])
        assert_spliced(last, new)
    # LibCST drops the blank line before a comment indented less than the block at the end of a
    # file (parse_module(text).code != text): the spliced tree drops it the same way.
    shallow = last + "  # shallow\n"
    assert cst.parse_module(shallow).code != shallow
    assert_same_sequence([last, shallow, last])


def test_a_single_statement_file() -> None:
    only = CLASS[CLASS.index("class Net") : CLASS.index("# the next's")]
    assert_spliced(only, only.replace("x.relu()", "x.tanh()"), depth=1, top_level_too=False)
    main = "if __name__ == '__main__':\n    import sys\n    main(sys.argv)\n"
    assert_spliced(main, main.replace("sys.argv", "sys.argv[1:]"), depth=1, top_level_too=False)


def test_a_body_indented_unlike_the_default() -> None:
    # the first block sets the default indent: the class's body is wrapped at another indent
    old = "def f():\n  pass\nclass A:\n    x = 1\n    y = 2\nz = 3\n"
    parser = assert_whole(old, old.replace("y = 2", "y = 3"))
    assert parser.last_fallback == "changed region's indent differs"
    tabs = "class A:\n\tdef f(self):\n\t\treturn 1\n\tdef g(self):\n\t\treturn 2\n"
    assert_spliced(tabs, tabs.replace("return 2", "return 3"), depth=1, top_level_too=False)


def test_crlf_in_a_body() -> None:
    crlf = CLASS.replace("\n", "\r\n")
    assert_spliced(crlf, crlf.replace("x.relu()", "x.sigmoid()"), depth=1)
    assert_same_sequence([crlf, crlf.replace("x.relu()\r\n", "x.sigmoid()\n")])


# Random typing-like edits of real files, each version compared with a fresh parse.

_TYPED = [*"abcxyz_0123456789 .,:;=+-*/()[]{}'\"#\\@\t\n", "\r\n", "\r", "\f"]
_LINES = ["pass", "x = 1", "else:", "elif x:", "try:", "except Exception:", "finally:", "@decorator",
          "def g(self):", "class C:", "return x", "# comment", "    # indented comment", '"""', "'''",
          "if x:", "for i in range(3):", "with open(p) as f:", "match x:", "case 1:", "\\", ""]


def edit(source: str, rng: random.Random, cursor: int) -> tuple[str, int]:
    """One typing-like edit of `source` near `cursor` (or elsewhere); the new text and cursor."""
    if rng.random() < 0.3:
        cursor = rng.randrange(len(source) + 1)  # jump elsewhere; otherwise edit near the last edit
    cursor = max(0, min(len(source), cursor + rng.randint(-40, 40)))
    line_start = source.rfind("\n", 0, cursor) + 1
    line_end = source.find("\n", cursor)
    line_end = len(source) if line_end < 0 else line_end + 1
    line = source[line_start:line_end]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    kind = rng.randrange(13)
    if kind == 0:  # type a character
        source = source[:cursor] + rng.choice(_TYPED) + source[cursor:]
        cursor += 1
    elif kind == 1:  # delete a character
        source = source[: max(0, cursor - 1)] + source[cursor:]
        cursor = max(0, cursor - 1)
    elif kind == 2:  # insert a line
        new = rng.choice(_LINES)
        source = source[:line_start] + rng.choice(["", indent, indent + "    "]) + new + "\n" + source[line_start:]
    elif kind == 3:  # delete a line
        source = source[:line_start] + source[line_end:]
    elif kind == 4:  # duplicate a line
        source = source[:line_end] + (line if line.endswith("\n") else "\n" + line) + source[line_end:]
    elif kind == 5:  # indent a line
        source = source[:line_start] + rng.choice(["    ", " ", "\t"]) + source[line_start:]
    elif kind == 6:  # dedent a line
        cut = min(len(indent), rng.choice([1, 4, 8]))
        source = source[:line_start] + source[line_start + cut :]
    elif kind == 7:  # open a bracket or a quote
        source = source[:cursor] + rng.choice(["(", "[", "{", "'", '"', '"""', "f'{"]) + source[cursor:]
    elif kind == 8:  # insert a comment line
        comment = rng.choice(["", " ", "  ", "    ", "        ", "\t"]) + "# note\n"
        source = source[:line_start] + comment + source[line_start:]
    elif kind == 9:  # join two lines
        if line_end > line_start and source[line_end - 1 : line_end] == "\n":
            source = source[: line_end - 1] + source[line_end:]
    elif kind == 10:  # insert a blank line
        source = source[:line_start] + rng.choice(["\n", "    \n", " \n"]) + source[line_start:]
    elif kind == 11:  # type at the end of a line (a continuation, a colon, a comment)
        at = line_end - 1 if line.endswith("\n") else line_end
        source = source[:at] + rng.choice([":", " \\", "  # c", ",", " ("]) + source[at:]
    else:  # undo the trailing newline, or add text at the very end
        if source.endswith("\n") and rng.random() < 0.5:
            source = source[:-1]
        else:
            source = source + rng.choice(["\n", "x = 1", "# end", "\n\n", "    # end\n"])
    return source, cursor


def check_random_edits(source: str, seed: int, count: int, *, inside_bodies: bool = True) -> tuple[int, list[str]]:
    """Feeds `count` random edits of `source` to one parser; returns the versions checked and the mismatches."""
    rng = random.Random(seed)
    parser = IncrementalParser(inside_bodies=inside_bodies)
    problems: list[str] = []
    good, version, cursor = source, source, rng.randrange(len(source) + 1)
    for checked in range(count + 1):
        if checked:
            version, cursor = edit(version, rng, cursor)
        got = outcome(parser, version)
        problem = difference(got, version)
        if problem is None and (parser.last_fallback or "").startswith("internal error"):
            problem = parser.last_fallback
        if problem is not None:
            problems.append(f"seed {seed} version {checked}: {problem}")
        if isinstance(got, cst.Module):
            good = version
        elif rng.random() < 0.5:
            version = good  # the user fixes the error (else keeps typing into it)
    return count + 1, problems


# The fast tier edits the shipped programs and one module of the package; the slow test below
# edits every module, the interpreter's 115 kB included.
PROJECT_FILES = [
    *sorted(FIXTURES.glob("*.py")),
    ROOT / "torchdevlint" / "engine.py",
]


def _sources(paths: Sequence[Path]) -> list[tuple[str, str]]:
    return [(path.name, path.read_text(encoding="utf-8")) for path in paths if path.exists()]


@pytest.mark.slow
def test_random_edits_of_project_files_match_a_fresh_parse() -> None:
    problems: list[str] = []
    checked = 0
    for seed, (name, source) in enumerate(_sources(PROJECT_FILES)):
        # Each version is checked against a fresh parse, which costs far more than the splice.
        count = 12 if len(source) > 10_000 else 10
        versions, found = check_random_edits(source, seed, count, inside_bodies=seed % 3 != 0)
        checked += versions
        problems.extend(f"{name}: {problem}" for problem in found)
    assert not problems, problems[:5]
    assert checked > 400


# Characters all files' versions may cost the fresh parses that check them, shared among the
# files: the suite's time stays bounded as the package grows (5 million: about 45 s of a
# 2-core machine, the slowest test of the suite; every file still gets at least 4 edits).
_PARSED_IN_ALL = 5_000_000


@pytest.mark.slow
def test_many_random_edits_of_project_files_match_a_fresh_parse() -> None:
    paths = sorted((ROOT / "torchdevlint").rglob("*.py")) + sorted(FIXTURES.glob("*.py"))
    problems: list[str] = []
    per_file = _PARSED_IN_ALL // len(paths)
    for seed, (name, source) in enumerate(_sources(paths)):
        # Every file of the package and the fixtures, each edited at random; each version is
        # checked against a fresh parse, so the edits per file fall with its size (a small
        # file 40, the interpreter 4) and with the number of files.
        count = max(4, min(40, per_file // max(1, len(source))))
        _, found = check_random_edits(source, 1000 + seed, count, inside_bodies=seed % 3 != 0)
        problems.extend(f"{name}: {problem}" for problem in found)
    assert not problems, problems[:5]


def test_random_edits_mostly_splice() -> None:
    # Not a correctness property, a speed one: typing in a big file rarely parses all of it.
    source = (ROOT / "torchdevlint" / "analysis" / "flow" / "interpreter.py").read_text(encoding="utf-8")
    parser = IncrementalParser()
    parser.parse(source)
    spliced = 0
    lines = source.splitlines(keepends=True)
    rng = random.Random(7)
    for _ in range(40):
        index = rng.randrange(len(lines))
        if not lines[index].strip() or lines[index].lstrip().startswith(("#", '"', "'")):
            continue
        lines[index] = lines[index].rstrip("\n") + "  # edited\n"
        try:
            parser.parse("".join(lines))
        except cst.ParserSyntaxError:
            lines[index] = lines[index].replace("  # edited\n", "\n")
            continue
        spliced += parser.last_fallback is None
    assert spliced >= 20


def test_an_internal_failure_parses_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rendering a statement can hit Python's recursion limit where the native parser does not.
    import torchdevlint.incremental_parse as incremental

    def deep(*args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    parser = IncrementalParser()
    assert_same(parser, BASE)
    monkeypatch.setattr(incremental, "_cut", deep)
    new = BASE.replace("y = x + 17", "y = x + 170")
    assert_same(parser, new)
    assert (parser.last_fallback or "").startswith("internal error")
    monkeypatch.undo()
    assert_same(parser, BASE)
    assert parser.last_fallback is None


# Every single-line edit of small programs holding each kind of context, compared with a fresh parse.

MIXED = '''#!/usr/bin/env python
# header comment

"""Doc."""
import os
@decorator
def f(a):
    if a:
        return 1
    else:
        return 2
    # f's comment
  # odd comment
# top comment

class A(Base):
    x = 1

    @property
    def g(self):
        try:
            pass
        except E:
            pass
        # g's
    # A's
if __name__ == "__main__":
    f(1)
# tail'''

_POOL = ["", "    ", "# c", "  # c", "    # c", "        # c", "x = 1", "    x = 1", "        x = 1", "\tx = 1",
         "@d", "    @d", "def h():", "    def h(self):", "else:", "    else:", "pass", "    pass", "        pass",
         '"""', "\\", "class K:", "(", ")"]


def single_line_edits(source: str) -> list[str]:
    """`source` with one line inserted (from a pool), deleted, duplicated, indented, dedented, joined or continued."""
    lines = source.splitlines(keepends=True)
    versions = []
    for i in range(len(lines) + 1):
        before, after = "".join(lines[:i]), "".join(lines[i:])
        versions += [before + new + "\n" + after for new in _POOL]
        if i == len(lines):
            break
        line, rest = lines[i], "".join(lines[i + 1 :])
        bare = line.rstrip("\n")
        dedent = min(4, len(line) - len(line.lstrip(" ")))
        versions += [
            before + rest,
            before + line + bare + "\n" + rest,
            before + "    " + line + rest,
            before + line[dedent:] + rest,
            before + bare + rest,
            before + bare + " \\" + line[len(bare) :] + rest,
        ]
    return versions


def check_single_line_edits(base: str, *, inside_bodies: bool, both_ways: bool) -> list[str]:
    problems = []
    # Every edit of `base` starts from the same parser state: parsed once, then copied (the
    # copies share the previous version, whose cuts are worked out once, on first use).
    from_base = IncrementalParser(inside_bodies=inside_bodies)
    base_parses = not isinstance(outcome(from_base, base), BaseException)
    for new in single_line_edits(base):
        pairs = [(base, new), (new, base)] if both_ways else [(base, new)]
        for old, text in pairs:
            if old is base:
                if not base_parses:
                    continue
                parser = copy.copy(from_base)
            else:
                parser = IncrementalParser(inside_bodies=inside_bodies)
                if isinstance(outcome(parser, old), BaseException):
                    continue
            problem = mismatch(parser, text)
            if problem is None and (parser.last_fallback or "").startswith("internal error"):
                problem = parser.last_fallback
            if problem is not None:
                problems.append(f"{problem}: {old!r} -> {text!r}")
    return problems


def test_single_line_edits_of_a_mixed_program() -> None:
    problems = check_single_line_edits(MIXED, inside_bodies=True, both_ways=False)
    assert not problems, problems[:3]


@pytest.mark.slow
@pytest.mark.parametrize("base", [MIXED, MIXED + "\n", CLASS, CLASS.rstrip("\n"), CLASS.replace("\n", "\r\n"),
                                  CLASS.replace("    ", "\t"), BASE[:300]])
@pytest.mark.parametrize("inside_bodies", [False, True])
def test_single_line_edits_both_ways(base: str, inside_bodies: bool) -> None:
    problems = check_single_line_edits(base, inside_bodies=inside_bodies, both_ways=True)
    assert not problems, problems[:3]
