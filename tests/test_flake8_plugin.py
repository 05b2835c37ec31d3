"""The flake8 plugin, run through the real `flake8` executable: same findings as the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, child_environment, computed_once, run_cli, write_checkpoint_writer

FIXTURE_FILES = sorted(FIXTURES.glob("*.py"))
# One finding per line, fields separated by a character no message contains.
FORMAT = "--format=%(path)s\x1f%(row)d\x1f%(col)d\x1f%(code)s\x1f%(text)s"


def flake8_command() -> list[str]:
    script = shutil.which("flake8", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "flake8"]


def run_flake8(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*flake8_command(), "--isolated", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env=child_environment(),
    )


def flake8_findings(*args: str, cwd: Path | None = None) -> list[tuple[str, int, int, str, str]]:
    result = run_flake8(FORMAT, *args, cwd=cwd)
    assert "Traceback" not in result.stderr, result.stderr
    findings = []
    for line in result.stdout.splitlines():
        path, row, col, code, text = line.split("\x1f")
        findings.append((Path(path).name, int(row), int(col), code, text))
    return findings


def cli_findings(*args: str, cwd: Path | None = None) -> list[tuple[str, int, int, str, str]]:
    result = run_cli("check", "--format", "json", "--no-cache", *args, cwd=cwd)
    return [
        (Path(item["path"]).name, item["line"], item["column"], item["code"], item["message"])
        for item in json.loads(result.stdout)
    ]


def test_plugin_is_registered_with_flake8() -> None:
    result = run_flake8("--version")
    assert "torchdevlint" in result.stdout, (
        "flake8 does not see the plugin; install the package (pip install -e .) so its "
        "flake8.extension entry point is registered"
    )


@pytest.fixture(scope="module")
def both_on_fixtures(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[str, int, int, str, str]],
                                                                          list[tuple[str, int, int, str, str]]]:
    both = computed_once(tmp_path_factory, "flake8-and-cli-on-fixtures",
                         lambda: (flake8_findings("--select", "TDL", str(FIXTURES)), cli_findings(str(FIXTURES))))
    return [tuple(f) for f in both[0]], [tuple(f) for f in both[1]]  # JSON gives lists back


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_flake8_reports_what_the_cli_reports(path: Path, both_on_fixtures) -> None:  # type: ignore[no-untyped-def]
    from_flake8, from_cli = both_on_fixtures
    mine = sorted(f for f in from_flake8 if f[0] == path.name)
    expected = sorted(f for f in from_cli if f[0] == path.name)
    if not _compiles(path.read_text()):
        # flake8 reports a file Python cannot compile as E999 and runs no plugin on it (the
        # CLI reads PyTorch 0.3's `async=` as meant: TDL038 and the rest come from it alone).
        expected = []
    assert mine == expected
    assert from_cli, "the fixtures hold findings"


def test_columns_follow_flake8s_convention(tmp_path: Path) -> None:
    """flake8 adds 1 to the offset a plugin yields, as it does to pyflakes'."""
    (tmp_path / "a.py").write_text(
        "import torch\n\n\ndef f(x: torch.Tensor):\n    x.cuda(undefined)\n"
    )
    found = {(code, row, col) for _, row, col, code, _ in flake8_findings("--select", "TDL,F821", "a.py", cwd=tmp_path)}
    # pyflakes' offset of `undefined` is 11 and TDL001's of `x` is 4: both shown one more.
    assert found == {("F821", 5, 12), ("TDL001", 5, 5)}
    assert [(row, col) for _, row, col, _, _ in cli_findings("a.py", cwd=tmp_path)] == [(5, 5)]


def test_flake8_does_the_noqa(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "import torch\nx = torch.zeros(3)\n"
        "x.cuda()  # noqa: TDL001\n"
        "x.cpu()  # noqa:E501\n"
        "x.half()  # noqa\n"
    )
    assert [row for _, row, *_ in flake8_findings("--select", "TDL", "a.py", cwd=tmp_path)] == [4]
    # The plugin itself keeps every finding: flake8 drops them, and can be told not to.
    disabled = flake8_findings("--select", "TDL", "--disable-noqa", "a.py", cwd=tmp_path)
    assert [row for _, row, *_ in disabled] == [3, 4, 5]


def test_unused_noqa_is_left_to_flake8(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nextend-select = ["TDL900"]\n')
    (tmp_path / "a.py").write_text("import torch\nx = torch.zeros(3)  # noqa: TDL001\n")
    assert [code for *_, code, _ in cli_findings("a.py", cwd=tmp_path)] == ["TDL900"]
    assert flake8_findings("--select", "TDL", "a.py", cwd=tmp_path) == []


def test_flake8_reads_tool_torchdevlint(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchdevlint]\nignore = ["TDL001"]\nexclude = ["legacy/"]\n'
    )
    # With no CPU mode, a load is reported only where several processes run the program (TDL003).
    source = "import torch\nx = torch.zeros(3)\nx.cuda()\nstate = torch.load('a.pt')\nimport torch.distributed as dist\n"
    (tmp_path / "train.py").write_text(source)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_text(source)
    found = flake8_findings("--select", "TDL", ".", cwd=tmp_path)
    assert [(name, row, code) for name, row, _, code, _ in found] == [("train.py", 4, "TDL003")]
    assert [(name, row, code) for name, row, _, code, _ in cli_findings(".", cwd=tmp_path)] == [("train.py", 4, "TDL003")]


def test_broken_config_is_reported_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nselekt = ["TDL001"]\n')
    (tmp_path / "a.py").write_text("import torch\n")
    result = run_flake8("--select", "TDL", "a.py", cwd=tmp_path)
    assert result.returncode != 0
    assert "selekt" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_flake8_never_fixes_and_never_imports_torch(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n")
    code = (
        "import sys\n"
        "from flake8.main.application import Application\n"
        "app = Application()\n"
        "app.run(['--isolated', '--select', 'TDL', 'a.py'])\n"
        "assert app.result_count == 1, app.result_count\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_text() == "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"


def test_rules_off_by_default_run_only_when_their_code_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchdevlint import flake8_plugin, registry
    from torchdevlint.rule import Rule
    from torchdevlint.rule_index import RuleEntry

    class OffByDefault(Rule):
        code = "TDL199"
        slug = "off-by-default-example"
        message = "An example"
        default_enabled = False

    rules = (*registry.all_rules(), OffByDefault)
    monkeypatch.setattr(registry, "all_rules", lambda: rules)
    # Selection reads the rule index; the example rule is entered there as ruledocs would.
    index = (*registry.RULE_INDEX, RuleEntry(OffByDefault.code, OffByDefault.slug, False, None))
    monkeypatch.setattr(registry, "RULE_INDEX", index)
    monkeypatch.setattr(flake8_plugin, "RULE_INDEX", index)

    def chosen(flake8_selected: list[str], config: str = "") -> set[str]:
        (tmp_path / "pyproject.toml").write_text(config)
        return {rule.code for rule in flake8_plugin.plugin_settings(tmp_path, flake8_selected).rules}

    assert "TDL199" not in chosen([])
    assert "TDL199" not in chosen(["TDL", "TDL1"])
    assert "TDL199" in chosen(["E", "TDL199"])
    assert "TDL199" in chosen([], '[tool.torchdevlint]\nextend-select = ["TDL199"]\n')
    assert "TDL199" not in chosen(["TDL199"], '[tool.torchdevlint]\nignore = ["TDL199"]\n')
    assert chosen([]) == {rule.code for rule in registry.select_rules()}


def test_same_positions_with_bom_crlf_tabs_and_non_ascii(tmp_path: Path) -> None:
    (tmp_path / "bom.py").write_bytes("\ufeffimport torch; torch.zeros(3).cuda()\n".encode())
    (tmp_path / "crlf.py").write_bytes('import torch\r\nx = torch.zeros(3)\r\ns = "café"; x.cuda()\r\n'.encode())
    (tmp_path / "tabs.py").write_bytes(b"import torch\nx = torch.zeros(3)\nif x.sum():\n\tx.cuda()\n")
    from_flake8 = sorted(flake8_findings("--select", "TDL", ".", cwd=tmp_path))
    assert from_flake8 == sorted(cli_findings(".", cwd=tmp_path))
    assert [(name, row, col) for name, row, col, _, _ in from_flake8] == [
        ("bom.py", 1, 15), ("crlf.py", 3, 13), ("tabs.py", 4, 2),
    ]


def _compiles(source: str) -> bool:
    try:
        compile(source, "<fixture>", "exec")
    except SyntaxError:
        return False
    return True
