"""The findings cache: same results cached or not, invalidated by content and configuration."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli, write_checkpoint_writer

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"


def test_cached_and_uncached_output_agree(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = ("check", "--format", "json", "--cache-dir", str(cache), str(FIXTURES))
    cold = run_cli(*args)
    warm = run_cli(*args)
    uncached = run_cli("check", "--format", "json", "--no-cache", str(FIXTURES))
    assert cold.stdout == warm.stdout == uncached.stdout
    assert json.loads(cold.stdout)
    assert any(cache.rglob("*.json")), "nothing was cached"


def test_cache_follows_content_and_configuration(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    first = json.loads(run_cli("check", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert [item["code"] for item in first] == ["TDL001"]
    path.write_text(BUGGY.replace("x.cuda()", "x = x.cuda()"))
    assert json.loads(run_cli("check", "--format", "json", "train.py", cwd=tmp_path).stdout) == []
    path.write_text(BUGGY)
    ignored = run_cli("check", "--format", "json", "--ignore", "TDL001", "train.py", cwd=tmp_path)
    assert json.loads(ignored.stdout) == []


def test_fix_is_not_fooled_by_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    run_cli("check", "train.py", cwd=tmp_path)  # fills the cache
    run_cli("check", "--fix", "train.py", cwd=tmp_path)
    assert path.read_text() == BUGGY.replace("x.cuda()", "x = x.cuda()")
    assert run_cli("check", "train.py", cwd=tmp_path).returncode == 0


def test_cache_folder_is_ignored_by_git(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train.py").write_text(BUGGY)
    run_cli("check", "train.py", cwd=tmp_path)
    assert (tmp_path / ".torchdevlint_cache").is_dir()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert ".torchdevlint_cache" not in status


@pytest.mark.parametrize("entry", ["{not json", "{}", "[1]"], ids=["damaged", "an-object", "not-findings"])
def test_an_entry_that_is_not_a_list_of_findings_is_a_miss(tmp_path: Path, entry: str) -> None:
    # `{}` must not read as "no findings".
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    run_cli("check", "train.py", cwd=tmp_path)
    for written in (tmp_path / ".torchdevlint_cache").rglob("*.json"):
        written.write_text(entry)
    result = run_cli("check", "--format", "json", "train.py", cwd=tmp_path)
    assert [item["code"] for item in json.loads(result.stdout)] == ["TDL001"]


def test_the_same_bytes_under_another_name_or_kind_are_another_entry(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    loads = "import torch\nweights = torch.load('model.pt')\n"
    (tmp_path / "conftest.py").write_text(loads)
    (tmp_path / "serve.py").write_text(loads)
    # Test code loads its own fixtures: TDL003 leaves conftest.py alone, not serve.py.
    for order in (["conftest.py", "serve.py"], ["serve.py", "conftest.py"]):
        for name in order:
            found = json.loads(run_cli("check", "--format", "json", name, cwd=tmp_path).stdout)
            assert [item["code"] for item in found] == ([] if name == "conftest.py" else ["TDL003"]), name
