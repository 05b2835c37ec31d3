"""The pre-commit hooks, run by the real `pre-commit` in a throw-away repository.

The user's `.pre-commit-config.yaml` is each of the two snippets of docs/pre-commit.md: the local
hook, which runs the `torchdevlint` installed beside these tests, and the remote one, pointed at a
snapshot of this working tree (committed into its own repository, since pre-commit installs hooks
from a git revision, and this checkout's changes may not be committed yet).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

# Whole module: real pre-commit/git runs or property-based fuzzing; `-m "not slow"` skips it.
pytestmark = pytest.mark.slow

BUGGY = "import torch\n\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
FIXED = "import torch\n\nx = torch.zeros(3)\nx = x.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "torchdevlint tests",
    "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "torchdevlint tests",
    "GIT_COMMITTER_EMAIL": "tests@example.invalid",
}
# The page users copy their `.pre-commit-config.yaml` from (the README links it).
PRE_COMMIT_DOC = ROOT / "docs" / "pre-commit.md"


def test_hooks_file_declares_check_and_fix_hooks() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML (a pre-commit dependency) is not installed")
    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"torchdevlint", "torchdevlint-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["types_or"] == ["python", "jupyter"]
        assert hook["entry"].split()[:2] == ["torchdevlint", "check"]
        assert hook.get("pass_filenames", True)
    assert "--fix" in hooks["torchdevlint-fix"]["entry"].split()
    assert "--fix" not in hooks["torchdevlint"]["entry"].split()


def test_force_exclude_applies_exclude_to_named_files(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nexclude = ["legacy/"]\n')
    (tmp_path / "legacy" / "deep").mkdir(parents=True)
    (tmp_path / "legacy" / "deep" / "old.py").write_text(BUGGY)
    (tmp_path / "train.py").write_text(BUGGY)
    named = ["legacy/deep/old.py", "train.py"]
    assert run_cli("check", "--no-cache", *named, cwd=tmp_path).stdout.count("TDL001") == 2
    result = run_cli("check", "--no-cache", "--force-exclude", *named, cwd=tmp_path)
    assert result.stdout.count("TDL001") == 1 and "train.py:4:1" in result.stdout


def buggy_notebook() -> str:
    """BUGGY split over notebook cells, with an output and a magic, as nbformat writes it."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]')")
    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_markdown_cell("# Exploring"),
        nbformat.v4.new_code_cell("%matplotlib inline\nimport torch", execution_count=1),
        nbformat.v4.new_code_cell(BUGGY.split("\n", 2)[2].strip(), execution_count=2, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="done\n")]),
    ]
    return nbformat.writes(book) + "\n"


def doc_yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", PRE_COMMIT_DOC.read_text(), flags=re.DOTALL)


def doc_snippet(*, local: bool) -> str:
    """The page's `.pre-commit-config.yaml` for the local hook, or for the remote one."""
    snippets = [
        block for block in doc_yaml_blocks()
        if "repos:" in block and "id: torchdevlint" in block and ("repo: local" in block) == local
    ]
    assert len(snippets) == 1, f"docs/pre-commit.md must show one {'local' if local else 'remote'} .pre-commit-config.yaml snippet"
    return snippets[0]


def doc_local_fix_hook() -> str:
    """The page's fixing variant of the local hook: a hook list item, not a whole config."""
    items = [block for block in doc_yaml_blocks() if "id: torchdevlint-fix" in block and "repos:" not in block]
    assert len(items) == 1, "docs/pre-commit.md must show the local torchdevlint-fix hook"
    return items[0]


def local_configs() -> tuple[str, str]:
    """The local snippet as the page shows it, and with its hook swapped for the fixing one."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (a pre-commit dependency) is not installed")
    config = doc_snippet(local=True)
    fixing = yaml.safe_load(config)
    fixing["repos"][0]["hooks"] = yaml.safe_load(doc_local_fix_hook())
    return config, yaml.safe_dump(fixing, sort_keys=False)


def test_documented_local_hooks_run_what_the_published_hooks_run() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML (a pre-commit dependency) is not installed")
    published = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    for config in local_configs():
        (repo,) = yaml.safe_load(config)["repos"]
        (hook,) = repo["hooks"]
        assert repo["repo"] == "local" and hook["language"] == "system"
        assert hook["entry"] == published[hook["id"]]["entry"]
        assert hook["types_or"] == published[hook["id"]]["types_or"]


def test_documented_remote_snippet_marks_its_placeholders() -> None:
    # The remote form names no real repository or tag: a copied snippet must not look ready to use.
    snippet = doc_snippet(local=False)
    for key in ("repo", "rev"):
        (line,) = re.findall(rf"^\s*(?:- )?{key}: .*$", snippet, flags=re.MULTILINE)
        assert "placeholder" in line, f"the remote snippet's {key}: is not marked as a placeholder: {line}"


def git(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
        cwd=cwd, capture_output=True, text=True, check=check, env={**os.environ, **GIT_IDENTITY},
    )


def snapshot_of_this_checkout(destination: Path) -> str:
    """Commit the working tree as it is (tracked and new files git does not ignore)."""
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git("init", "-q", cwd=destination)
    git("add", "-A", cwd=destination)
    git("commit", "-q", "-m", "snapshot", cwd=destination)
    return git("rev-parse", "HEAD", cwd=destination).stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.skipif(
    importlib.util.find_spec("pre_commit") is None,
    reason="pre-commit is not installed (pip install -e '.[test]')",
)
@pytest.mark.parametrize("form", ["local", "remote"])
def test_documented_snippet_blocks_a_buggy_commit_and_the_fix_hook_fixes_it(tmp_path: Path, form: str) -> None:
    env = {**os.environ, **GIT_IDENTITY, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "NO_COLOR": "1"}
    env.pop("PRE_COMMIT_ALLOW_NO_CONFIG", None)
    if form == "local":
        # `language: system` runs whatever `torchdevlint` is on PATH: the one installed beside
        # these tests, as a project's activated dev environment would provide it.
        scripts = Path(sys.executable).parent
        if shutil.which("torchdevlint", path=str(scripts)) is None:
            pytest.skip(f"the torchdevlint command is not installed in {scripts} (pip install -e .)")
        env["PATH"] = os.pathsep.join([str(scripts), env.get("PATH", "")])
        config, fix_config = local_configs()
    else:
        hooks_repo = tmp_path / "torchdevlint"
        hooks_repo.mkdir()
        revision = snapshot_of_this_checkout(hooks_repo)
        config = doc_snippet(local=False)
        config = re.sub(r"repo: \S+", f"repo: {hooks_repo.as_posix()}", config, count=1)
        config = re.sub(r"rev: \S+", f"rev: {revision}", config, count=1)
        fix_config = config.replace("id: torchdevlint ", "id: torchdevlint-fix ").replace(
            "id: torchdevlint\n", "id: torchdevlint-fix\n")
        assert "id: torchdevlint-fix" in fix_config

    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", cwd=project)
    (project / ".pre-commit-config.yaml").write_text(config)
    (project / "train.py").write_text(BUGGY)
    notebook = buggy_notebook()
    (project / "explore.ipynb").write_text(notebook)
    git("add", "-A", cwd=project)

    def pre_commit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", *args],
            cwd=project, capture_output=True, text=True, env=env, timeout=600,
        )

    def commit() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-c", "commit.gpgsign=false", "commit", "-m", "train"],
            cwd=project, capture_output=True, text=True, env=env, timeout=600,
        )

    installed = pre_commit("install")
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # The check hook blocks the commit and names the finding.
    blocked = commit()
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0, output
    assert "train.py:4:1: TDL001 Tensor move result is discarded" in output
    assert "explore.ipynb:cell 3:2:1: TDL001 Tensor move result is discarded" in output
    assert git("rev-parse", "--verify", "HEAD", cwd=project, check=False).returncode != 0, "nothing was committed"
    assert (project / "train.py").read_text() == BUGGY
    assert (project / "explore.ipynb").read_text() == notebook

    # The page's alternative: the fix hook rewrites the file (and so stops this run) ...
    (project / ".pre-commit-config.yaml").write_text(fix_config)
    fixing = pre_commit("run", "--files", "train.py", "explore.ipynb")
    assert fixing.returncode != 0, fixing.stdout + fixing.stderr
    assert "torchdevlint (fix)" in fixing.stdout
    assert "files were modified by this hook" in fixing.stdout
    assert (project / "train.py").read_text() == FIXED
    assert (project / "explore.ipynb").read_text() == notebook.replace('"x.cuda()\\n"', '"x = x.cuda()\\n"')
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.read(str(project / "explore.ipynb"), as_version=nbformat.NO_CONVERT))

    # ... and the next run, and the commit, pass.
    again = pre_commit("run", "--files", "train.py", "explore.ipynb")
    assert again.returncode == 0, again.stdout + again.stderr
    git("add", "-A", cwd=project)
    committed = commit()
    assert committed.returncode == 0, committed.stdout + committed.stderr
