"""Which names a function binds itself (the fact TDL001's fix relies on)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdevlint.analysis.local_names import function_bindings


def bindings_of(source: str) -> tuple[frozenset[str], frozenset[str]]:
    module = cst.parse_module(textwrap.dedent(source))
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef)
    found = function_bindings(function)
    return found.local, found.declared_outer


def test_parameters_and_every_binding_form_are_local() -> None:
    local, _ = bindings_of(
        """
        def f(a, /, b, *args, c, **kwargs):
            d = e, [g, *h] = 1, (2, 3)
            i: int
            j += 1
            for k in []: pass
            with open("x") as l: pass
            try: pass
            except ValueError as m: pass
            import n.sub
            from o import p as q
            del r
            def s(): pass
            class t: pass
            if (u := 1): pass
            match v:
                case [w, *rest] | {"k": w, **rest}: pass
        """
    )
    assert local >= {"a", "b", "args", "c", "kwargs", "d", "e", "g", "h", "i", "j", "k", "l", "m", "n",
                     "q", "r", "s", "t", "u", "w", "rest"}
    assert "o" not in local and "p" not in local and "v" not in local


def test_what_belongs_to_nested_scopes_is_not_local() -> None:
    local, _ = bindings_of(
        """
        def f():
            squares = [y * y for y in range(3) if (kept := y)]
            def inner():
                hidden = 1
            total = lambda z: z
        """
    )
    assert local == {"squares", "kept", "inner", "total"}


@pytest.mark.parametrize("keyword", ["global", "nonlocal"])
def test_declared_names_rebind_the_outer_variable(keyword: str) -> None:
    local, declared = bindings_of(f"def f():\n    {keyword} x\n    x = 1\n")
    assert "x" not in local and declared == {"x"}
