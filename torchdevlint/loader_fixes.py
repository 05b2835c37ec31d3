"""The fix two rules share: `pin_memory=True` given to the DataLoaders they report (TDL101 for
the loader, TDL102 where `non_blocking=True` copies its batches). Rules never import each
other, so it lives here, beside `edits.py`."""

from __future__ import annotations

from torchdevlint.analysis.loader_flow import LoaderCall
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Rule


def pin_memory_fix(rule: Rule, *loaders: LoaderCall) -> PendingFix | None:
    """`pin_memory=True` added to each loader; safe when every dataset yields CPU tensors."""
    edits = [NodeEdit.insert_after(loader.call.args[-1], ", pin_memory=True") for loader in loaders if loader.call.args]
    if not edits:
        return None
    safe = all(loader.host_dataset for loader in loaders)
    return rule.make_fix(
        *edits,
        applicability=Applicability.SAFE if safe else Applicability.UNSAFE,
        title="Pass pin_memory=True",
    )
