"""PyTorch 0.3's `async=` argument: the file is read as meant, each one reported and renamed."""

from __future__ import annotations

import textwrap

import pytest

from torchdevlint.engine import InvalidSource, lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.legacy_syntax import repaired
from torchdevlint.registry import all_rules, rule_by_code

# The discarded move after the legacy argument, on the same line: its column and its fix's
# offsets are the original text's, not the renamed one's.
OLD_SCRIPT = textwrap.dedent("""\
    import torch
    for images, labels in loader:
        labels = labels.cuda(async=True); images.cuda()
        model(images, labels)
    """)


def _default_rules() -> list[type]:
    return [rule for rule in all_rules() if rule.default_enabled]


def test_every_device_finding_of_a_file_with_async_arguments_is_placed_in_its_text() -> None:
    found = lint_source(OLD_SCRIPT, "train.py", _default_rules())
    assert [(d.code, d.start.line, d.start.column) for d in found] == [("TDL038", 3, 26), ("TDL001", 3, 39)]
    line = OLD_SCRIPT.splitlines()[2]
    assert line[25:30] == "async" and line[38:49] == "images.cuda"
    fixed = fix_source(OLD_SCRIPT, "train.py", _default_rules(), unsafe=True).text
    assert "labels = labels.cuda(non_blocking=True); images = images.cuda()" in fixed
    assert "async" not in fixed


def test_only_the_rename_is_applied_where_the_other_fix_is_unsafe() -> None:
    fixed = fix_source(OLD_SCRIPT, "train.py", _default_rules(), unsafe=False).text
    assert fixed == OLD_SCRIPT.replace("async=True", "non_blocking=True")


def test_a_file_with_another_syntax_error_is_still_one() -> None:
    with pytest.raises(InvalidSource):
        lint_source(OLD_SCRIPT + "print 'done'\n", "train.py", _default_rules())


def test_without_the_rule_the_file_is_a_syntax_error() -> None:
    rules = [rule for rule in _default_rules() if rule.code != "TDL038"]
    with pytest.raises(InvalidSource):
        lint_source(OLD_SCRIPT, "train.py", rules)


def test_noqa_turns_the_finding_off_and_leaves_the_others() -> None:
    source = OLD_SCRIPT.replace("images.cuda()\n", "images.cuda()  # noqa: TDL038\n")
    assert [d.code for d in lint_source(source, "train.py", _default_rules())] == ["TDL001"]


def test_a_parameter_named_async_is_no_call_argument() -> None:
    assert repaired("def copy(x, async=False):\n    return x.cuda(async=async)\n") is not None
    found = repaired("def copy(x, async=False):\n    pass\n")
    assert found is None
    rule = rule_by_code("TDL038")
    assert rule is not None
    with pytest.raises(InvalidSource):
        lint_source("import torch\ndef copy(x, async=False):\n    return x\n", "copy.py", [rule])


def test_offsets_and_columns_map_back_across_several_renames() -> None:
    text = "a(async=1, async=2); b\n"
    repair = repaired(text)
    assert repair is not None
    assert repair.text == "a(non_blocking=1, non_blocking=2); b\n"
    b_in_repaired = repair.text.index("; b") + 2
    assert repair.original_offset(b_in_repaired) == text.index("; b") + 2
    assert repair.original_column(1, b_in_repaired + 1) == text.index("; b") + 3
    # Inside a renamed word: its start in the original.
    assert repair.original_offset(repair.text.index("non_blocking") + 8) == text.index("async") + 5


def test_another_functions_async_argument_is_reported_without_a_fix() -> None:
    rule = rule_by_code("TDL038")
    assert rule is not None
    found = lint_source("import torch\nbatch = torch.zeros(3)\nsend(batch, async=True)\n", "send.py", [rule])
    assert [(d.code, d.start.line, d.fix) for d in found] == [("TDL038", 3, None)]
    assert "PyTorch" not in found[0].message
