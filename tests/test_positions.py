"""Statement-level positions agree with LibCST's whole-module PositionProvider, node for node."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from torchdevlint.engine import analyse_module
from torchdevlint.positions import StatementPositions

TRICKY = '''\
import torch  # a comment
x = torch.zeros(3); y = x.cuda()


@decorator
@other(1,
       2)
def f(a,
      b=torch.ones(2)):
    """Doc."""
    if a:
        return a.cuda()
    elif b:
        pass
    else:
        with torch.no_grad():
            z = (a +
                 b)
    try:
        a.to("cuda")
    except (ValueError, TypeError) as error:
        raise
    else:
        pass
    finally:
        b.cpu()
    for i in range(3):
        while i:
            i -= 1
    else:
        a.float()
    match a:
        case 1:
            a.half()
        case _:
            pass


class Net(torch.nn.Module):
\tdef forward(self, x):
\t\treturn torch.zeros(
\t\t\t3,
\t\t)
if x: y.cuda()
'''


def _all_positions(source: str) -> tuple[dict[int, CodeRange], dict[int, CodeRange]]:
    module = cst.parse_module(source)
    context = analyse_module(module, "t.py").context
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    fast = StatementPositions(module, source, context.parents, ast.parse(source))
    nodes = [module.body[0]] + [node for node in expected if id(node) in context.parents]
    result = {id(n): expected[n] for n in nodes}, {id(n): fast[n] for n in nodes}
    # Every node sits in some statement here: the whole-module fallback must not be needed.
    assert not fast.used_whole_module
    return result


def _parses(path: Path) -> bool:
    try:
        compile(path.read_text(), str(path), "exec")
    except SyntaxError:
        return False  # PyTorch 0.3's `async=` (TDL038's fixture): linted from a renamed copy
    return True


_PARSING_FIXTURES = [path for path in sorted(FIXTURES.glob("*.py")) if _parses(path)]


@pytest.mark.parametrize(
    "source",
    [TRICKY, TRICKY.replace("\n", "\r\n"), *(p.read_text() for p in _PARSING_FIXTURES)],
    ids=["tricky", "tricky-crlf", *(p.stem for p in _PARSING_FIXTURES)],
)
def test_every_walked_node_has_the_providers_position(source: str) -> None:
    expected, fast = _all_positions(source)
    assert fast == expected
