"""Property-based tests: linting never raises on generated modules, fixing always yields
parseable code, and fixing is idempotent. Plus mutations of the shipped fixtures."""

from __future__ import annotations

import random
import warnings

import libcst as cst
import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdevlint.engine import InvalidSource, lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.registry import all_rules

# Whole module: property-based fuzzing; `-m "not slow"` skips it.
pytestmark = pytest.mark.slow

RULES = list(all_rules())


def _compiles(text: str, name: str) -> None:
    """Raises on invalid code; the generated code's own warnings are not our subject (an invalid
    escape is a SyntaxWarning on Python 3.12+, a DeprecationWarning before)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(text, name, "exec")
FIXTURE_SOURCES = [path.read_text() for path in sorted(FIXTURES.glob("*.py"))]

# Fragments that exercise the rules, combined at random into modules that parse.
_FRAGMENTS = [
    "import torch\n",
    "import torch as T\n",
    "import torch.nn as nn\n",
    "from torch.utils.data import DataLoader\n",
    "x = torch.zeros(3)\n",
    "x.to('cuda')\n",
    "x.cuda().float()\n",
    "[t.cuda() for t in (x, x)]\n",
    "model = nn.Linear(2, 2)\n",
    "model = nn.DataParallel(model)\n",
    "if torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\n",
    "torch.save(model.state_dict(), 'm.pt')\n",
    "state = {'model': model.state_dict()}\ntorch.save(state, 'c.pt')\n",
    "model.load_state_dict(torch.load('m.pt'))\n",
    "ckpt = torch.load('c.pt', map_location=None)\n",
    "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.h = torch.zeros(2)\n"
    "        self.blocks = [nn.Linear(2, 2) for _ in range(2)]\n"
    "    def forward(self, x):\n        h = torch.zeros(1, x.size(0))\n        return x + self.h + h\n",
    "for inputs, targets in DataLoader([]):\n    inputs = inputs.to('cuda')\n    loss = crit(model(inputs), targets)\n",
    "def f(a: torch.Tensor):\n    a.half()  # noqa: TDL002\n    return a\n",
    "\n",
    "# comment with torch\n",
]


@st.composite
def torch_modules(draw) -> str:  # type: ignore[no-untyped-def]
    parts = draw(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=12))
    indent_into_function = draw(st.booleans())
    text = "".join(parts)
    if indent_into_function:
        text = "import torch\ndef wrapper():\n" + "".join("    " + line + "\n" for line in text.splitlines()) + "    pass\n"
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(torch_modules())
def test_combined_fragments_lint_and_fix_soundly(source: str) -> None:
    lint_source(source, "gen.py", RULES)
    once = fix_source(source, "gen.py", RULES, unsafe=True).text
    cst.parse_module(once)
    _compiles(once, "gen.py")
    assert fix_source(once, "gen.py", RULES, unsafe=True).text == once


try:
    import hypothesmith
except ImportError:  # pragma: no cover
    hypothesmith = None


@pytest.mark.skipif(hypothesmith is None, reason="hypothesmith is not installed")
# hypothesmith compiles each program it generates (as "<string>") to keep only valid ones; Python
# warns about that random code ("'int' object is not callable; perhaps you missed a comma?"). Not
# our code and not the linter's output (the linter's own silence is tested in test_bad_input).
@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore:invalid escape sequence:DeprecationWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.builds(lambda code: "import torch\n" + code, hypothesmith.from_grammar() if hypothesmith else st.just("")))
def test_generated_python_never_crashes_the_linter(source: str) -> None:
    try:
        lint_source(source, "gen.py", RULES)
        fixed = fix_source(source, "gen.py", RULES, unsafe=True).text
    except InvalidSource:
        return  # reported as a syntax error, not a crash
    _compiles(fixed, "gen.py")


def _mutate(source: str, rng: random.Random) -> str:
    lines = source.splitlines(keepends=True)
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        index = rng.randrange(len(lines))
        operation = rng.choice(["delete", "duplicate", "swap", "garbage"])
        if operation == "delete":
            del lines[index]
        elif operation == "duplicate":
            lines.insert(index, lines[index])
        elif operation == "swap":
            other = rng.randrange(len(lines))
            lines[index], lines[other] = lines[other], lines[index]
        else:
            lines.insert(index, rng.choice(["}{\n", "def (:\n", "\x00\n", "    return\n", "'''\n", "\tx = 1\n"]))
    return "".join(lines)


@pytest.mark.parametrize("seed", range(40))
def test_mutated_fixtures_never_crash(seed: int) -> None:
    rng = random.Random(seed)
    source = _mutate(rng.choice(FIXTURE_SOURCES), rng)
    try:
        lint_source(source, "mutant.py", RULES)
        fixed = fix_source(source, "mutant.py", RULES, unsafe=True).text
    except InvalidSource:
        return
    _compiles(fixed, "mutant.py")
