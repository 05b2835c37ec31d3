"""Which files a run lints and how each is configured, through the real command line: git's
ignore files, default excludes that `exclude` replaces, configuration found per file (as
ruff finds it), `per-file-ignores`, and the `--show-files`/`--show-settings` views."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, write_checkpoint_writer

from torchdevlint.gitignore import GitIgnores, compile_pattern

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device='cuda')\n"
FIXED = "import torch\nx = torch.zeros(3)\nx = x.cuda()\ny = x + torch.ones(3, device='cuda')\n"
# A TDL003 finding (torch.load without map_location) besides the TDL001 one.
TWO_RULES = BUGGY + "state = torch.load('model.pt')\nimport torch.distributed as dist\n"


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def shown_files(root: Path, *args: str, cwd: Path | None = None) -> list[str]:
    result = run_cli("check", "--show-files", *args, cwd=cwd or root)
    assert result.returncode == 0, result.stderr
    return [Path(line).as_posix() for line in result.stdout.splitlines()]


# ---- git's ignore files ------------------------------------------------------------------

def test_a_walk_skips_what_gitignore_ignores_and_fix_leaves_it_alone(tmp_path: Path) -> None:
    tree(tmp_path, {
        ".gitignore": "# experiment tracking\nwandb/\n*.tmp.py\n",
        "train.py": BUGGY,
        # wandb's code snapshot of an earlier run: not the user's code to lint or fix.
        "wandb/run-20261124_101010-abc/files/code/train.py": BUGGY,
        "scratch.tmp.py": BUGGY,
    })
    assert shown_files(tmp_path, ".") == ["train.py"]
    result = run_cli("check", "--fix", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "train.py").read_text() == FIXED
    assert (tmp_path / "wandb/run-20261124_101010-abc/files/code/train.py").read_text() == BUGGY


def test_negation_nested_ignore_files_and_the_repository_exclude_file(tmp_path: Path) -> None:
    tree(tmp_path, {
        ".git/info/exclude": "local_only.py\n",
        ".gitignore": "generated/*\n!generated/keep.py\n",
        "generated/keep.py": BUGGY,
        "generated/drop.py": BUGGY,
        "local_only.py": BUGGY,
        "pkg/.gitignore": "/vendored/\n",
        "pkg/vendored/copy.py": BUGGY,
        # Anchored to pkg/: a vendored/ folder elsewhere is linted.
        "pkg/sub/vendored/mine.py": BUGGY,
    })
    assert shown_files(tmp_path, ".") == ["generated/keep.py", "pkg/sub/vendored/mine.py"]


def test_ignore_files_above_the_walked_folder_apply_inside_a_repository(tmp_path: Path) -> None:
    tree(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", ".gitignore": "src/gen/\n",
                    "src/model.py": BUGGY, "src/gen/model.py": BUGGY})
    assert shown_files(tmp_path / "src", ".", cwd=tmp_path / "src") == ["model.py"]


def test_gitignore_can_be_turned_off_and_never_hides_a_file_named_explicitly(tmp_path: Path) -> None:
    tree(tmp_path, {".gitignore": "wandb/\n", "wandb/files/train.py": BUGGY})
    assert shown_files(tmp_path, ".") == []
    assert shown_files(tmp_path, "--no-respect-gitignore", ".") == ["wandb/files/train.py"]
    assert shown_files(tmp_path, "wandb/files/train.py") == ["wandb/files/train.py"]
    (tmp_path / "pyproject.toml").write_text("[tool.torchdevlint]\nrespect-gitignore = false\n")
    assert shown_files(tmp_path, ".") == ["wandb/files/train.py"]


@pytest.mark.parametrize(
    ("pattern", "path", "is_folder", "ignored"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("/c.py", "a/c.py", False, False),
        ("/c.py", "c.py", False, True),
        ("build/", "x/build", True, True),
        ("build/", "x/build", False, False),
        ("a/*.py", "a/b/c.py", False, False),
        ("a/**/c.py", "a/b/d/c.py", False, True),
        ("a/**/c.py", "a/c.py", False, True),
        ("**/logs", "deep/er/logs", True, True),
        ("logs/**", "logs/x/y.py", False, True),
        ("run-[0-9]*", "run-7b", True, True),
        ("run-[!0-9]*", "run-7b", True, False),
        ("\\#notes.py", "#notes.py", False, True),
        ("# a comment", "# a comment", False, False),
        ("name?.py", "name1.py", False, True),
        ("name?.py", "name/.py", False, False),
    ],
)
def test_ignore_patterns_mean_what_they_mean_to_git(pattern: str, path: str, is_folder: bool, ignored: bool) -> None:
    compiled = compile_pattern(pattern)
    matched = compiled is not None and (not compiled.directories_only or is_folder) and bool(compiled.regex.match(path))
    assert matched == ignored


def test_ignore_decisions_agree_with_git_check_ignore(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    tree(tmp_path, {
        ".gitignore": "*.log.py\n/top.py\nout/\ndata/**/cache.py\n!important.log.py\nsub/*/x.py\n",
        "sub/.gitignore": "local.py\n!/top.py\n",
    })
    paths = ["a.log.py", "important.log.py", "top.py", "sub/top.py", "sub/top2.py", "out/a.py", "k/out/b.py",
             "data/cache.py", "data/1/2/cache.py", "sub/local.py", "local.py", "sub/q/x.py", "sub/q/r/x.py"]
    tree(tmp_path, dict.fromkeys(paths, ""))
    git_says = subprocess.run([git, "check-ignore", *paths], cwd=tmp_path, capture_output=True, text=True)
    ignored_by_git = set(git_says.stdout.split())
    ignores = GitIgnores()

    def ignored_here(path: str) -> bool:
        # As a walk meets it: a path is out when it or any folder above it is ignored.
        parts = Path(path).parts
        return any(ignores.is_ignored(str(tmp_path.joinpath(*parts[:depth])), depth < len(parts))
                   for depth in range(1, len(parts) + 1))

    assert {path for path in paths if ignored_here(path)} == ignored_by_git


# ---- exclude and extend-exclude ---------------------------------------------------------

def test_default_excludes_apply_at_any_depth_and_exclude_replaces_them(tmp_path: Path) -> None:
    tree(tmp_path, {"agents/env/cartpole.py": BUGGY, "build/lib/model.py": BUGGY,
                    "pkg/.venv/lib/site.py": BUGGY, "legacy/old.py": BUGGY})
    # Reinforcement-learning code keeps environments in `env` packages: linted.
    assert shown_files(tmp_path, ".") == ["agents/env/cartpole.py", "legacy/old.py"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nextend-exclude = ["legacy/"]\n')
    assert shown_files(tmp_path, ".") == ["agents/env/cartpole.py"]
    (tmp_path / "pyproject.toml").write_text("[tool.torchdevlint]\nexclude = []\n")
    assert shown_files(tmp_path, ".") == ["agents/env/cartpole.py", "build/lib/model.py", "legacy/old.py",
                                          "pkg/.venv/lib/site.py"]


# ---- configuration found per file --------------------------------------------------------

def test_a_project_checked_from_elsewhere_uses_its_own_configuration(tmp_path: Path) -> None:
    project = tree(tmp_path / "proj", {"pyproject.toml": '[tool.torchdevlint]\nignore = ["TDL001"]\n',
                                       "train.py": BUGGY})
    (tmp_path / "elsewhere").mkdir()
    result = run_cli("check", "--no-cache", "../proj", cwd=tmp_path / "elsewhere")
    assert result.returncode == 0, result.stdout
    assert "TDL001" not in result.stdout
    assert (project / "train.py").read_text() == BUGGY


def test_the_closest_configuration_decides_for_each_file(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    tree(tmp_path, {
        "pyproject.toml": '[tool.torchdevlint]\nignore = ["TDL003"]\n',
        "app/train.py": TWO_RULES,
        # A pyproject.toml without our table does not count: the one above applies.
        "lib/pyproject.toml": "[project]\nname = 'lib'\n",
        "lib/model.py": TWO_RULES,
        "research/torchdevlint.toml": 'ignore = ["TDL001"]\n',
        "research/notebook_port.py": TWO_RULES,
    })
    result = run_cli("check", "--no-cache", "--format", "concise", ".", cwd=tmp_path)
    found = {(Path(line.split(":")[0]).as_posix(), line.split()[1]) for line in result.stdout.splitlines()
             if line.count(":") >= 3}
    assert found == {("app/train.py", "TDL001"), ("lib/model.py", "TDL001"),
                     ("research/notebook_port.py", "TDL003")}


def test_a_dotted_config_file_wins_over_pyproject_and_config_names_one_for_all(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    tree(tmp_path, {"pyproject.toml": '[tool.torchdevlint]\nignore = ["TDL001"]\n',
                    ".torchdevlint.toml": 'ignore = ["TDL003"]\n',
                    "train.py": TWO_RULES, "other.toml": 'select = ["TDL003"]\n'})
    settings = run_cli("check", "--show-settings", "train.py", cwd=tmp_path).stdout
    assert f"configuration file: {tmp_path / '.torchdevlint.toml'}" in settings
    assert "TDL001" in settings.split("rules:")[1].splitlines()[0]
    result = run_cli("check", "--no-cache", "--config", "other.toml", "train.py", cwd=tmp_path)
    assert "TDL003" in result.stdout and "TDL001" not in result.stdout


def test_a_broken_nested_configuration_is_an_error_naming_it(tmp_path: Path) -> None:
    tree(tmp_path, {"sub/torchdevlint.toml": 'selct = ["TDL0"]\n', "sub/train.py": BUGGY})
    result = run_cli("check", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "torchdevlint.toml" in result.stderr and "'selct'" in result.stderr
    assert "Traceback" not in result.stderr


# ---- per-file-ignores ---------------------------------------------------------------------

def test_per_file_ignores_turn_rules_off_for_matching_files_and_fixes_follow(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    tree(tmp_path, {
        "pyproject.toml": ('[tool.torchdevlint.per-file-ignores]\n"tests/*" = ["TDL001"]\n'
                           '"scratch_*.py" = ["TDL0"]\n'),
        "tests/test_model.py": TWO_RULES,
        "src/scratch_try.py": TWO_RULES,
        "src/train.py": TWO_RULES,
    })
    result = run_cli("check", "--fix", "--no-cache", "--format", "concise", ".", cwd=tmp_path)
    remaining = {(Path(line.split(":")[0]).as_posix(), line.split()[1]) for line in result.stdout.splitlines()
                 if line.count(":") >= 3}
    assert remaining == {("tests/test_model.py", "TDL003"), ("src/train.py", "TDL003")}
    assert (tmp_path / "tests/test_model.py").read_text() == TWO_RULES
    assert (tmp_path / "src/scratch_try.py").read_text() == TWO_RULES
    assert (tmp_path / "src/train.py").read_text().startswith(FIXED)
    settings = run_cli("check", "--show-settings", "tests/test_model.py", cwd=tmp_path).stdout
    assert "not run on this file (per-file-ignores): TDL001" in settings


def test_per_file_ignores_name_real_codes(tmp_path: Path) -> None:
    tree(tmp_path, {"pyproject.toml": '[tool.torchdevlint.per-file-ignores]\n"tests/*" = ["TDL8"]\n',
                    "a.py": BUGGY})
    result = run_cli("check", "a.py", cwd=tmp_path)
    assert result.returncode == 2 and "per-file-ignores 'tests/*'" in result.stderr


# ---- views and exit codes --------------------------------------------------------------

def test_show_files_lists_what_a_run_would_lint_without_linting(tmp_path: Path) -> None:
    tree(tmp_path, {"a.py": BUGGY, "nb/b.ipynb": "{}", "notes.txt": "", "venv/lib/c.py": BUGGY})
    result = run_cli("check", "--show-files", ".", cwd=tmp_path)
    assert result.returncode == 0
    assert [Path(line).as_posix() for line in result.stdout.splitlines()] == ["a.py", "nb/b.ipynb"]


@pytest.mark.skipif(sys.platform != "linux", reason="file names of any bytes are Linux's")
def test_show_files_quotes_names_that_would_break_the_one_name_a_line_listing(tmp_path: Path) -> None:
    for name in ("plain.py", "line\nbreak.py", os.fsdecode(b"caf\xe9.py"), "café.py"):
        (tmp_path / name).write_text(BUGGY)
    result = run_cli("check", "--show-files", ".", cwd=tmp_path)
    assert sorted(result.stdout.splitlines()) == sorted(
        ["café.py", "plain.py", "'line\\nbreak.py'", "'caf\\xe9.py'"])


def test_show_settings_names_the_configuration_and_rules(tmp_path: Path) -> None:
    tree(tmp_path, {"pyproject.toml": '[tool.torchdevlint]\nextend-select = ["TDL103"]\n'
                                      '[tool.torchdevlint.load-without-map-location]\nmap-location = "cuda:0"\n',
                    "a.py": BUGGY})
    result = run_cli("check", "--show-settings", "a.py", cwd=tmp_path)
    assert result.returncode == 0
    assert f"configuration file: {tmp_path / 'pyproject.toml'}" in result.stdout
    assert "TDL103" in result.stdout and "cuda:0" in result.stdout


def test_exit_non_zero_on_fix(tmp_path: Path) -> None:
    tree(tmp_path, {"a.py": BUGGY})
    result = run_cli("check", "--fix", "--no-cache", "--exit-non-zero-on-fix", "a.py", cwd=tmp_path)
    assert result.returncode == 1 and (tmp_path / "a.py").read_text() == FIXED
    again = run_cli("check", "--fix", "--no-cache", "--exit-non-zero-on-fix", "a.py", cwd=tmp_path)
    assert again.returncode == 0
