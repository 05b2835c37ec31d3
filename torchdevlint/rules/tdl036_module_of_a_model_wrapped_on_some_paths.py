"""TDL036 module-of-a-model-wrapped-on-some-paths."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import is_written
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import MODULE_OF_A_BARE_MODEL, RuntimeProof


class ModuleOfAModelWrappedOnSomePaths(Rule):
    """
    ## What it does
    Finds `model.module` read where the model is wrapped in `nn.DataParallel` or
    `DistributedDataParallel` on some paths only, and the read is reached on a path where it
    is not: wrapped under `if args.cuda:` and unwrapped unconditionally afterwards
    (`model.module.load_state_dict(...)`, `torch.save(model.module.state_dict(), ...)`), or
    wrapped only where there are several GPUs (`if torch.cuda.device_count() > 1:`). The flow
    model knows where a name holds a wrapper, through assignments, branches and the file's
    calls of its functions; it knows which tests the program's CPU mode takes, and takes a
    test of the same text as the one that wrapped the model (`if args.cuda:` in `main` and in
    `train`) to take the same side.

    ## Why is this bad?
    `module` is the wrapper's attribute: the model it wraps has none. Where the wrapping
    test fails (`--no-cuda`, a machine without a GPU, or with one GPU), the name holds the
    bare model and the read fails with "AttributeError: 'Net' object has no attribute
    'module'", typically at the first checkpoint, after an epoch of training.

    ## Not reported
    Reads under a test that rules the wrapper in (`if isinstance(model, nn.DataParallel):`,
    `if hasattr(model, "module"):`, the wrapping test itself), one side of a two-way test
    whose other side reads the model itself (`model.module if args.distributed else model`),
    reads where the model is wrapped on every path, and reads the CPU mode never reaches
    where the model is wrapped on every GPU machine.

    ## Fix safety
    The fix reads the wrapped model where there is one and the model itself where there is
    none: `getattr(model, "module", model)`. It is unsafe: a bare model with a sub-module of
    its own named `module` would give that instead. No fix where the model is not read from a
    name (`wrap(model).module`).

    ## Options
    None.
    """

    code = "TDL036"
    slug = "module-of-a-model-wrapped-on-some-paths"
    message = "`.module` read on a model that is wrapped in DataParallel/DDP on some paths only (AttributeError elsewhere)"
    fix_title = "Read the wrapped model where there is a wrapper: `getattr(model, \"module\", model)`"
    proof = RuntimeProof(MODULE_OF_A_BARE_MODEL, host="cpu", fix_agrees_on=("gpu",))
    requires_any_text = (".module",)
    requires_also_any_text = ("DataParallel",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            use_cuda = torch.cuda.is_available()
            model = Classifier()
            if use_cuda:
                model = nn.DataParallel(model.cuda())

            def save(model, path):
                if use_cuda:
                    torch.save(model.module.state_dict(), path)
                else:
                    torch.save(model.state_dict(), path)

            def export(model):
                bare = model.module if isinstance(model, nn.DataParallel) else model
                return bare.state_dict()

            train(model)
            save(model, "classifier.pt")
            """,
            name="unwrapped-under-the-same-test",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 2)

            model = nn.DataParallel(Classifier()).cuda()
            if hasattr(model, "module"):
                print(model.module.fc)
            torch.save(model.module.state_dict(), "classifier.pt")
            """,
            name="wrapped-on-every-path",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            def run(args):
                model = Classifier()
                if args.cuda:
                    model = nn.DataParallel(model).cuda()
                train(model)
                if args.cuda:
                    model = model.module
                torch.save(model.state_dict(), "classifier.pt")
            """,
            name="unwrapped-under-the-wrapping-test",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import argparse
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 2)

            parser = argparse.ArgumentParser()
            parser.add_argument("--no-cuda", action="store_true")
            args = parser.parse_args()
            args.cuda = not args.no_cuda and torch.cuda.is_available()

            model = Classifier()
            if args.cuda:
                model.cuda()
                model = nn.DataParallel(model)
            train(model)
            torch.save(model.module.state_dict(), "classifier.pt")
            """,
            fixed="""
            import argparse
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 2)

            parser = argparse.ArgumentParser()
            parser.add_argument("--no-cuda", action="store_true")
            args = parser.parse_args()
            args.cuda = not args.no_cuda and torch.cuda.is_available()

            model = Classifier()
            if args.cuda:
                model.cuda()
                model = nn.DataParallel(model)
            train(model)
            torch.save(getattr(model, "module", model).state_dict(), "classifier.pt")
            """,
            applicability=Applicability.UNSAFE,
            name="wrapped-only-with-cuda",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Detector(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = nn.Linear(16, 4)

            model = Detector().to("cuda")
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            for epoch in range(10):
                train_one_epoch(model)
                torch.save({"epoch": epoch, "model": model.module.state_dict()}, "detector.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class Detector(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = nn.Linear(16, 4)

            model = Detector().to("cuda")
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            for epoch in range(10):
                train_one_epoch(model)
                torch.save({"epoch": epoch, "model": getattr(model, "module", model).state_dict()}, "detector.pt")
            """,
            applicability=Applicability.UNSAFE,
            name="wrapped-only-on-several-gpus",
        ),
    ]

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "module" or is_written(node, self.context.parent):
            return
        flow = self.context.flow
        value = flow.value_of(node.value)
        if value.wrapping is not Wrapping.MAYBE:
            return
        test = value.wrapped_when
        if test is None:
            return  # wrapped on paths the flow cannot name: not reported
        if test.bare_in_cpu_mode:
            # Bare in the CPU mode (and maybe elsewhere): reported where that mode reaches the read.
            if not flow.reached_in_cpu_mode(node, self.context.ancestors(node)):
                return
        base = self.context.code_for_node(node.value)
        self.report(
            node,
            message=(f"`{base}.module` is read where `{base}` may be the bare model: it is wrapped in "
                     f"DataParallel/DDP only where `{test.describe()}`, and has no `module` elsewhere "
                     f"(AttributeError)"),
            fix=self._fix(node, base),
        )

    def _fix(self, node: cst.Attribute, base: str) -> PendingFix | None:
        if dotted_name(node.value) is None:
            return None  # read twice by the fix: only a plain name or attribute chain
        return self.make_fix(NodeEdit(node, f'getattr({base}, "module", {base})'), applicability=Applicability.UNSAFE)
