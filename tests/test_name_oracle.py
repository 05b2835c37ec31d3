"""`context.names`: the one question rules ask about what a name refers to."""

from __future__ import annotations

import textwrap

import libcst as cst

from torchdevlint.engine import lint_source
from torchdevlint.rule import Rule

_LOADS = frozenset({"torch.load"})


def _answers(source: str, among: frozenset[str] | None = None) -> dict[str, str | None]:
    """What the oracle says each call's callee is, by the callee's source text, as a rule
    visiting the call would be told."""
    answers: dict[str, str | None] = {}

    class Probe(Rule):
        """Asks the oracle about every callee."""

        code = "TDL989"
        slug = "probe-names"
        message = "probe"

        def visit_Call(self, node: cst.Call) -> None:
            answers[self.context.code_for_node(node.func)] = self.context.names.qualified_name(node.func, among=among)

        def visit_Decorator(self, node: cst.Decorator) -> None:
            decorator = node.decorator
            if isinstance(decorator, cst.Call):
                answers["@" + self.context.code_for_node(decorator.func)] = self.context.names.qualified_name(
                    decorator.func, among=among)

    lint_source(textwrap.dedent(source), "probe.py", [Probe])
    return answers


def test_an_import_names_what_it_imports_under_any_alias() -> None:
    answers = _answers("""
        import torch as T
        from torch import load as read
        T.zeros(1)
        read("m.pt")
    """)
    assert answers == {"T.zeros": "torch.zeros", "read": "torch.load"}


def test_a_parameter_or_local_of_the_same_name_shadows_the_import() -> None:
    answers = _answers("""
        import torch
        from torch import load

        def restore(load):
            return load("m.pt")

        def build():
            torch = make_backend()
            return torch.zeros(1)
    """)
    assert answers["load"] is None
    assert answers["torch.zeros"] is None


def test_a_function_may_use_an_import_written_below_it() -> None:
    source = """
        def restore():
            return load("m.pt")

        from torch import load
    """
    assert _answers(source)["load"] == "torch.load"
    assert _answers(source, among=_LOADS)["load"] == "torch.load"


def test_among_says_what_the_rule_looks_for_and_nothing_else() -> None:
    source = """
        import json
        import torch
        json.load(open("settings.json"))
        torch.load("m.pt")
    """
    assert _answers(source) == {"json.load": "json.load", "open": None, "torch.load": "torch.load"}
    assert _answers(source, among=_LOADS) == {"json.load": None, "open": None, "torch.load": "torch.load"}


def test_a_name_bound_to_an_import_is_followed() -> None:
    source = """
        import torch
        T = torch
        T.load("m.pt")
        Tensor = torch.cuda.FloatTensor
        Tensor(2)
    """
    exact = _answers(source)
    assert exact["T.load"] == "torch.load"
    assert exact["Tensor"] == "torch.cuda.FloatTensor"
    # Spelt as what the rule looks for, the alias is followed at the price of a lookup only.
    assert _answers(source, among=_LOADS)["T.load"] == "torch.load"


def test_a_decorator_the_flow_model_does_not_evaluate_keeps_the_import_s_meaning() -> None:
    answers = _answers("""
        import torch

        @torch.no_grad()
        def predict(model, x):
            return model(x)
    """)
    assert answers["@torch.no_grad"] == "torch.no_grad"
