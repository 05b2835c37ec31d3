"""Keeping a verified program, and every process it starts, from writing outside verify's scratch.

The copy-on-write mirror (`workspace`) protects the user's files from the program's own Python
process. A subprocess (`sh -c 'echo x >> data.txt'`), an `mp.spawn` rank or a C extension
writes past it, and so does anything aimed outside the program's folder. On Linux, Landlock
(kernel 5.13 and later, no privileges needed) closes all of that: the run's process restricts
itself before the program starts, the restriction is inherited by every process it starts and
cannot be lifted, and from then on files may be created, written, truncated, renamed or removed
only beneath the paths allowed here (the run's scratch folder, devices, `/proc`). Reads of the
user's tree and of everything else still work, so `../data` and absolute dataset paths load.

A write elsewhere fails with "Permission denied" (EACCES) instead of reaching the user's file.
Where Landlock is missing (another OS, an older kernel), `verify` says so before running and
runs only with `--allow-writes`.

The parent side (`landlock_abi`) never imports torch.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

# Linux's system call numbers for Landlock: the same on every architecture (asm-generic).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (include/uapi/linux/landlock.h), by the ABI version that introduced them.
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2: linking or renaming a file into another folder
_TRUNCATE = 1 << 14  # ABI 3
# Every right that changes the filesystem (reading and executing stay unrestricted).
_WRITES_ABI_1 = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
                 | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
# What a path that is a file (not a folder) may be allowed.
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE

# Beside the scratch folder, what programs write that is no one's file: devices (`/dev/null`,
# `/dev/shm` for DataLoader workers' shared memory, a GPU's device files) and `/proc`.
SYSTEM_WRITABLE = ("/dev", "/proc")


class IsolationError(Exception):
    pass


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers; 0 where there is none."""
    libc = _libc()
    if libc is None:
        return 0
    version = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _handled(abi: int) -> int:
    rights = _WRITES_ABI_1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


def restrict_writes(writable: Iterable[str]) -> None:
    """From now on, this process and every process it starts may change files only beneath
    `writable` (and `SYSTEM_WRITABLE`). Call it with one thread running: Landlock restricts the
    calling thread (a process just forked has one)."""
    libc = _libc()
    abi = landlock_abi()
    if libc is None or abi < 1:
        raise IsolationError("Landlock is not available")
    handled = _handled(abi)
    attr = _RulesetAttr(handled)
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise IsolationError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for path in (*writable, *SYSTEM_WRITABLE):
            _allow(libc, ruleset, path, handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise IsolationError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise IsolationError(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, handled: int) -> None:
    try:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this machine (no /proc in a container, say): nothing to allow
    try:
        rights = handled if os.path.isdir(path) else handled & _FILE_RIGHTS
        beneath = _PathBeneathAttr(rights, descriptor)
        if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(beneath), ctypes.c_uint32(0)) != 0:
            raise IsolationError(f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(descriptor)
