"""The runtime error each finding predicts, and where it can surface: read from each rule's
`proof` (torchdevlint.runtime_proof), which lives beside the rule's code and docs.

A program reproduces its bug only when the original fails with an error a finding predicts;
any other failure (a typo, a missing file) is not the bug.
"""

from __future__ import annotations

from collections.abc import Iterable

from torchdevlint.registry import rule_by_code
from torchdevlint.runtime_proof import RuntimeProof
from torchdevlint.verify.protocol import ErrorInfo

# What an unknown (future) rule is taken to predict: a device mismatch on one GPU.
_DEFAULT_PROOF = RuntimeProof()


def proof_of(code: str) -> RuntimeProof:
    rule = rule_by_code(code)
    return rule.proof if rule is not None else _DEFAULT_PROOF


def predicted_by(codes: Iterable[str], error: ErrorInfo) -> bool:
    """Does one of the findings' rules predict this error?"""
    text = f"{error.type}: {error.message}"
    return any(proof_of(code).error.search(text) for code in set(codes))


def surfaces_away(code: str) -> bool:
    """Can this rule's error be raised anywhere in the program, not only through the finding's lines?"""
    return proof_of(code).surfaces_away


def fix_agrees_on(code: str) -> tuple[str, ...]:
    """The machines where this rule's fix must run and agree with the original, besides
    the one that proves the bug."""
    return proof_of(code).fix_agrees_on


def not_emulated(code: str) -> str | None:
    """What this rule's bug needs that verify does not emulate ("its bug needs …"), or None."""
    return proof_of(code).not_emulated
