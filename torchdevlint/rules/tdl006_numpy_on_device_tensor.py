"""TDL006 numpy-on-device-tensor."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.devices import under_placement_test
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid


class NumpyOnDeviceTensor(Rule):
    """
    ## What it does
    Finds `.numpy()` called on a tensor that the device-flow model places on an accelerator
    on every path: the output of a model moved to the device, a tensor moved with
    `.to(<device>)` or `.cuda()` or created with `device=`, and anything computed from them
    (arithmetic, tensor methods, `torch` functions, values returned by the file's own
    helpers, batches of a loader over device tensors), with no `.cpu()` on the way.

    ## Why is this bad?
    NumPy arrays live in host memory. On a GPU, `tensor.numpy()` fails with "TypeError: can't
    convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
    memory first." On a CPU-only machine the same line works, so the bug ships. A model's
    output also requires grad, and `.numpy()` then fails even on the CPU with "Can't call
    numpy() on Tensor that requires grad".

    Not reported: tensors that never left the CPU, tensors brought back with `.cpu()` or
    `.to("cpu")` anywhere on their path, values that are on the device only on some paths,
    calls inside a conditional on `is_cuda` or `.device` (or the CPU branch of a GPU test),
    `.numpy(force=True)`, and `.numpy()` of anything the model cannot show is a torch tensor
    on a device.

    ## Fix safety
    Safe: the fix inserts `.cpu()` before `.numpy()`, and `.detach()` too when the value may
    require grad (a model's output computed outside `torch.no_grad()` and not yet reduced to
    indices or booleans). On the CPU both return the tensor itself, so the array still shares
    its memory as before; on a GPU the line now works.

    ## Options
    None.
    """

    code = "TDL006"
    slug = "numpy-on-device-tensor"
    message = "numpy() on a tensor that is on a GPU; copy it to the host with .cpu() first"
    fix_title = "Insert .cpu() before .numpy()"
    requires_any_text = (".numpy()",)

    VALID = [
        Valid(
            """
            import torch
            x = torch.randn(3)
            a = x.numpy()
            y = x.to("cuda")
            b = y.cpu().numpy()
            z = y.to("cpu")
            c = z.numpy()
            """,
            name="never-left-cpu-or-brought-back",
        ),
        Valid(
            """
            import torch
            def to_array(t, device):
                t = t.to(device)
                return t.cpu().numpy() if t.is_cuda else t.numpy()
            x = torch.ones(2).cuda()
            if x.is_cuda:
                x = x.cpu()
            x.numpy()
            """,
            name="is-cuda-conditional-and-unknown-device",
        ),
        Valid(
            """
            import numpy as np
            import torch
            frame = np.zeros(3)
            table = load_table()
            table.numpy()
            """,
            name="not-a-torch-tensor",
        ),
        Valid(
            """
            import torch
            t = torch.ones(2, device="cuda")
            t.numpy(force=True)
            """,
            name="numpy-force",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda")
            model = torch.nn.Linear(4, 2).to(device)
            scores = model(torch.randn(3, 4, device=device)).detach()
            kept = scores.cpu()
            shown = kept.argmax(1).numpy()
            if torch.rand(1).item() > 0.5:
                scores = scores.cpu()
            maybe = scores.numpy()  # on the device on one path only: not evidence
            """,
            name="brought-back-earlier-or-on-one-path-only",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torchvision.models import resnet18

            model = resnet18().to("cuda")
            logits = model(images)
            predictions = logits.argmax(dim=1).numpy()
            """,
            fixed="""
            import torch
            from torchvision.models import resnet18

            model = resnet18().to("cuda")
            logits = model(images)
            predictions = logits.argmax(dim=1).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="documented-predictions-of-a-gpu-model",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            with torch.no_grad():
                logits = model(torch.randn(8, 4).to(device))
            predictions = logits.argmax(dim=1).numpy()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            with torch.no_grad():
                logits = model(torch.randn(8, 4).to(device))
            predictions = logits.argmax(dim=1).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="model-output-under-no-grad",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            net = nn.Linear(4, 1)
            net.cuda()
            out = net(torch.randn(8, 4).cuda())
            curve = out.numpy()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            net = nn.Linear(4, 1)
            net.cuda()
            out = net(torch.randn(8, 4).cuda())
            curve = out.detach().cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="model-output-requires-grad",
        ),
        Invalid(
            """
            import torch
            x = torch.randn(3)
            y = x.cuda().mul(2).numpy()
            z = torch.sigmoid(x.to("cuda:0")).data.numpy()
            """,
            fixed="""
            import torch
            x = torch.randn(3)
            y = x.cuda().mul(2).cpu().numpy()
            z = torch.sigmoid(x.to("cuda:0")).data.cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="moved-in-the-chain",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda", non_blocking=True)
                batch_mean = images.mean(0).numpy()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda", non_blocking=True)
                batch_mean = images.mean(0).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="batch-moved-earlier",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def predict(model, batch, device):
                with torch.no_grad():
                    logits = model(batch.to(device))
                preds = logits.argmax(dim=1)
                return preds.numpy()

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            classifier = nn.Linear(8, 3).to(device)
            print(predict(classifier, torch.randn(4, 8), device))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def predict(model, batch, device):
                with torch.no_grad():
                    logits = model(batch.to(device))
                preds = logits.argmax(dim=1)
                return preds.cpu().numpy()

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            classifier = nn.Linear(8, 3).to(device)
            print(predict(classifier, torch.randn(4, 8), device))
            """,
            applicability=Applicability.SAFE,
            name="helper-predicting-with-the-files-device-model",
        ),
        Invalid(
            """
            import numpy as np
            import torch

            def make_mask(lengths: torch.Tensor, device) -> torch.Tensor:
                steps = torch.arange(int(lengths.max()), device=device)
                return steps[None, :] < lengths.to(device)[:, None]

            device = torch.device("cuda")
            weights = torch.from_numpy(np.ones(4)).float().to(device)
            scaled = weights.sum() / (2 * weights)
            ratio = scaled.numpy()
            mask = make_mask(torch.tensor([2, 3]), device)
            shown = mask.int().numpy()
            """,
            fixed="""
            import numpy as np
            import torch

            def make_mask(lengths: torch.Tensor, device) -> torch.Tensor:
                steps = torch.arange(int(lengths.max()), device=device)
                return steps[None, :] < lengths.to(device)[:, None]

            device = torch.device("cuda")
            weights = torch.from_numpy(np.ones(4)).float().to(device)
            scaled = weights.sum() / (2 * weights)
            ratio = scaled.cpu().numpy()
            mask = make_mask(torch.tensor([2, 3]), device)
            shown = mask.int().cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="arithmetic-conversions-and-a-helpers-return",
        ),
        Invalid(
            """
            import torch

            def evaluate(model, loader, device):
                predictions = []
                with torch.no_grad():
                    for images, labels in loader:
                        logits = model(images.to(device))
                        predictions.append(logits.argmax(dim=1).numpy())
                return predictions
            """,
            fixed="""
            import torch

            def evaluate(model, loader, device):
                predictions = []
                with torch.no_grad():
                    for images, labels in loader:
                        logits = model(images.to(device))
                        predictions.append(logits.argmax(dim=1).cpu().numpy())
                return predictions
            """,
            applicability=Applicability.SAFE,
            name="outputs-of-a-model-passed-in-on-inputs-moved-to-the-device",
        ),
        Invalid(
            """
            import torch

            def make_batch(n, device=None):
                return torch.randn(n, 3, device=device), torch.zeros(n, device=device)

            inputs, labels = make_batch(8, device="cuda")
            shown = inputs.numpy()
            reference, expected = make_batch(8)
            fine = reference.numpy() + expected.numpy()
            """,
            fixed="""
            import torch

            def make_batch(n, device=None):
                return torch.randn(n, 3, device=device), torch.zeros(n, device=device)

            inputs, labels = make_batch(8, device="cuda")
            shown = inputs.cpu().numpy()
            reference, expected = make_batch(8)
            fine = reference.numpy() + expected.numpy()
            """,
            applicability=Applicability.SAFE,
            name="a-helper-makes-tensors-on-the-device-each-call-asks-for",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "numpy") or node.args:
            return
        receiver = node.func.value
        value = self.context.flow.value_of(receiver)
        if not (value.is_tensor_like and value.on_accelerator):
            return
        if under_placement_test(node, self.context.ancestors(node)):
            return
        insertion = ".detach().cpu()" if value.grad else ".cpu()"
        self.report(node, fix=self.make_fix(NodeEdit.insert_after(receiver, insertion)))
