"""TDL038 async-keyword-argument."""

from __future__ import annotations

from torchdevlint.diagnostics import Applicability
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import ASYNC_KEYWORD, RuntimeProof


class AsyncKeywordArgument(Rule):
    """
    ## What it does
    Finds the argument PyTorch before 0.4 called `async` (`x.cuda(async=True)`,
    `t.to(device, async=True)`, `dst.copy_(src, async=True)`), which stops the file from
    parsing on Python 3.7 and later, where `async` is a keyword. The rest of the file is
    linted as if the argument had its new name, so its device bugs are found too, not only
    this one.

    ## Why is this bad?
    The file is a syntax error on every Python PyTorch still supports: nothing in it runs,
    and a linter that stops at the syntax error says nothing about the rest.

    ## Not reported
    Not reported: a file that fails to parse for another reason stays a syntax error. Only a
    file whose `async=` arguments are all that stops it is read this way.

    ## Fix safety
    Safe: PyTorch 0.4 renamed the argument `non_blocking`, with the same meaning, for
    `.cuda()`, `.to()`, `.copy_()` and `.type()`. An `async=` given to any other function is
    reported without a fix (what that function now calls it is not known here).

    ## Options
    None.
    """

    code = "TDL038"
    slug = "async-keyword-argument"
    message = "`async=` is a syntax error since Python 3.7: PyTorch calls this argument `non_blocking`"
    fix_title = "Rename the argument `non_blocking`"
    reads_legacy_syntax = True
    # The file fails to compile on any machine: the CPU host shows it.
    proof = RuntimeProof(error=ASYNC_KEYWORD, host="cpu")
    requires_any_text = ("async",)

    VALID = [
        Valid(
            """
            import torch
            x = torch.zeros(3).pin_memory()
            y = x.cuda(non_blocking=True)
            """,
            name="non-blocking",
        ),
        Valid(
            """
            import asyncio
            import torch
            async def fetch(x):
                return x.cuda(non_blocking=True)
            """,
            name="async-functions-parse",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([], pin_memory=True):
                images = images.cuda(async=True)
                labels = labels.cuda(async=True)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([], pin_memory=True):
                images = images.cuda(non_blocking=True)
                labels = labels.cuda(non_blocking=True)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="pytorch-0-3-copies",
            in_docs=True,
        ),
    ]
