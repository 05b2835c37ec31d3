"""Pathological files: every analysis stays linear, deep nesting is analysed, and a file that
still takes too long is reported as not analysed instead of hanging the run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import libcst as cst
import pytest
from conftest import run_cli

from torchdevlint.analysis.flow.interpreter import Interpreter
from torchdevlint.analysis.flow.values import Value
from torchdevlint.engine import analyse_module, lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.registry import all_rules

RULES = list(all_rules())


def string_chain(terms: int) -> str:
    return "import torch\nmsg = " + " + ".join(f'"part {i} "' for i in range(terms)) + "\n"


def tensor_chain(terms: int) -> str:
    return "import torch\nx = torch.zeros(3)\ny = " + " + ".join("x" for _ in range(terms)) + "\ny.cuda()\n"


def expressions_evaluated(source: str, monkeypatch: pytest.MonkeyPatch) -> int:
    evaluated = 0
    original = Interpreter._evaluate

    def counting(self: Interpreter, node: cst.BaseExpression, env: dict[str, Value]) -> Value:
        nonlocal evaluated
        evaluated += 1
        return original(self, node, env)

    with monkeypatch.context() as patch:
        patch.setattr(Interpreter, "_evaluate", counting)
        analyse_module(cst.parse_module(source), "chain.py", RULES)
    return evaluated


@pytest.mark.parametrize("chain", [string_chain, tensor_chain], ids=["strings", "tensors"])
def test_the_flow_model_does_linear_work_on_a_plus_chain(chain: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # However often the rules ask about an operand, each is evaluated a bounded number of
    # times: an analysis that asked up to three times per level once doubled its work with
    # every term.
    assert callable(chain)
    small = expressions_evaluated(chain(100), monkeypatch)
    large = expressions_evaluated(chain(1000), monkeypatch)
    assert small > 0 and large <= 12 * small


def test_a_thousand_term_chain_is_linted_with_its_finding_and_without_a_hang() -> None:
    started = time.perf_counter()
    diagnostics = lint_source(tensor_chain(1000), "chain.py", RULES)
    fixed = fix_source(tensor_chain(1000), "chain.py", RULES, unsafe=True)
    # Before: 44 s for 24 string terms, hours for 1,000. A generous bound, not a benchmark.
    assert time.perf_counter() - started < 20
    assert [d.code for d in diagnostics] == ["TDL001", "TDL203"]
    # TDL203's fix (all rules run here) routes the move through one device variable.
    assert "y = y.to(device)" in fixed.text


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A program with no CPU mode: its "cuda" is hard-coded (TDL203, a rule off by default).
        ("import torch\nx = torch.zeros(3)\nx" + ".float()" * 800 + '.to("cuda")\n', ["TDL001", "TDL203"]),
        ("import torch\nx = torch.zeros(3)\nx" + '.to("cuda")' * 800 + "\n", ["TDL001", *["TDL203"] * 800]),
        ("import torch\nx = torch.zeros(3)\ny = " + " if c else ".join("x" for _ in range(800)) + "\n", []),
    ],
    ids=["method-chain", "move-chain", "nested-conditional"],
)
def test_deeply_nested_expressions_are_analysed(source: str, expected: list[str]) -> None:
    limit = sys.getrecursionlimit()
    assert [d.code for d in lint_source(source, "deep.py", RULES)] == expected
    # The engine raises its own allowance while it works, and gives it back.
    assert sys.getrecursionlimit() == limit


def test_the_cli_analyses_a_deep_chain_instead_of_calling_it_too_nested(tmp_path: Path) -> None:
    (tmp_path / "chain.py").write_text(tensor_chain(1000))
    result = run_cli("check", "--no-cache", "chain.py", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "chain.py:4:1: TDL001" in result.stdout
    assert "too deeply nested" not in result.stdout + result.stderr


def _long_file(statements: int) -> str:
    body = "".join(f"y{i} = x + {i}\ny{i}.cuda()\n" for i in range(statements))
    return "import torch\nx = torch.zeros(3)\n" + body


def test_a_file_over_its_time_budget_is_reported_as_not_analysed(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(_long_file(3000))
    (tmp_path / "fine.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n")
    result = run_cli("check", "--no-cache", "--jobs", "1", "--file-timeout", "0.001", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "slow.py: error: not analysed: took longer than 0.001 s" in result.stdout + result.stderr
    # The other files are still linted: this one is small enough to finish in time.
    assert "fine.py:3:1: TDL001" in result.stdout


def test_exit_zero_covers_a_file_over_its_budget(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(_long_file(3000))
    result = run_cli("check", "--no-cache", "--exit-zero", "--file-timeout", "0.001", "slow.py", cwd=tmp_path)
    assert result.returncode == 0
    assert "not analysed" in result.stdout + result.stderr


def test_fixing_a_file_over_its_budget_leaves_it_untouched(tmp_path: Path) -> None:
    path = tmp_path / "slow.py"
    original = _long_file(3000)
    path.write_text(original)
    result = run_cli("check", "--no-cache", "--fix", "--file-timeout", "0.001", "slow.py", cwd=tmp_path)
    assert result.returncode == 2
    assert path.read_text() == original


def test_a_non_positive_file_timeout_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import torch\n")
    result = run_cli("check", "--file-timeout", "0", "a.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "--file-timeout must be a positive number" in result.stderr


def test_judging_the_fixes_of_many_moves_in_one_body_interprets_a_bounded_number_of_statements(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torchdevlint.analysis.flow.model import FIX_JUDGEMENT_STATEMENTS

    moves = 1000
    source = "import torch\n\ndef body(device):\n" + "".join(
        f"    t{i} = torch.zeros(3)\n    t{i}.to(device)\n" for i in range(moves))
    interpreted = 0
    original = Interpreter._statement

    def counting(self: Interpreter, node: cst.CSTNode, env: dict[str, Value]) -> object:
        nonlocal interpreted
        interpreted += 1
        return original(self, node, env)

    monkeypatch.setattr(Interpreter, "_statement", counting)
    diagnostics = lint_source(source, "many_moves.py", RULES)
    assert [d.code for d in diagnostics].count("TDL001") == moves
    # The module and the body once each, and judgements within their budget.
    assert interpreted <= 2 * (2 * moves + 3) + FIX_JUDGEMENT_STATEMENTS
