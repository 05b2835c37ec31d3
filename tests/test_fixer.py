"""Fixing keeps every byte it does not mean to change: encodings, BOMs, line endings, comments."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()  # keep me\ny = x + torch.ones(3, device=\"cuda\")\n"
FIXED = "import torch\nx = torch.zeros(3)\nx = x.cuda()  # keep me\ny = x + torch.ones(3, device=\"cuda\")\n"


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("crlf", lambda text: text.replace("\n", "\r\n").encode()),
        ("bom", lambda text: b"\xef\xbb\xbf" + text.encode()),
        ("latin1-cookie", lambda text: ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + text).encode("latin-1")),
        ("tabs", lambda text: text.replace("x.cuda()", "if True:\n\tx.cuda()").replace("\ny = ", "\n\ty = ").encode()),
    ],
)
def test_fix_preserves_encoding_and_line_endings(tmp_path: Path, name: str, encode) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "train.py"
    path.write_bytes(encode(BUGGY))
    result = run_cli("check", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = encode(FIXED) if name != "tabs" else encode(BUGGY).replace(b"\tx.cuda()", b"\tx = x.cuda()")
    assert path.read_bytes() == expected


def test_file_without_fix_is_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "clean.py"
    path.write_text("import torch\n")
    before = path.stat().st_mtime_ns
    run_cli("check", "--fix", "clean.py", cwd=tmp_path)
    assert path.stat().st_mtime_ns == before


def test_fix_keeps_permissions(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    path.chmod(0o751)
    run_cli("check", "--fix", "train.py", cwd=tmp_path)
    assert path.stat().st_mode & 0o777 == 0o751
    assert path.read_text() == FIXED
    # No temporary file is left behind (the findings cache has its own folder).
    assert [p.name for p in tmp_path.iterdir() if p.name != ".torchdevlint_cache"] == ["train.py"]


def test_second_fix_run_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(BUGGY + "s = torch.load('a.pt')\n")
    run_cli("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    once = path.read_bytes()
    run_cli("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert path.read_bytes() == once


def test_fix_of_a_hard_linked_file_is_seen_through_every_name(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BUGGY)
    os.link(tmp_path / "a.py", tmp_path / "b.py")
    run_cli("check", "--no-cache", "--fix", "a.py", cwd=tmp_path)
    assert (tmp_path / "b.py").read_text() == FIXED
    assert (tmp_path / "a.py").stat().st_ino == (tmp_path / "b.py").stat().st_ino
    assert not list(tmp_path.glob("*.tdl-tmp"))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_fix_run_by_root_keeps_the_files_owner_and_group(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(BUGGY)
    os.chown(program, 65534, 65534)  # nobody
    tmp_path.chmod(0o777)
    run_cli("check", "--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert program.read_text() == FIXED
    assert (program.stat().st_uid, program.stat().st_gid) == (65534, 65534)


def test_fix_writes_through_a_symlink_and_lints_its_target_once(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text(BUGGY)
    (tmp_path / "link.py").symlink_to(target)
    listing = run_cli("check", "--no-cache", "--format", "json", ".", cwd=tmp_path)
    import json

    assert len(json.loads(listing.stdout)) == 1
    run_cli("check", "--no-cache", "--fix", "link.py", cwd=tmp_path)
    assert (tmp_path / "link.py").is_symlink()
    assert target.read_text() == FIXED
