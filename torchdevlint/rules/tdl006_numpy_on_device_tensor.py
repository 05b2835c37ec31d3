"""TDL006 numpy-on-device-tensor."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import subnodes, under_placement_test
from torchdevlint.analysis.flow.values import MODULE_DEVICE_PLACE, Kind, Value
from torchdevlint.analysis.tree import argument_for
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NUMPY_ON_DEVICE, RuntimeProof


def _converts_to_numpy(qualified: str) -> bool:
    """`np.array(x)`, `np.transpose(x, (1, 2, 0))`, `plt.plot(x)`: a call that makes NumPy arrays
    of its arguments."""
    return torch_api.numpy_converted_arguments(qualified) is not None \
        or qualified.startswith(torch_api.CONVERTS_ARGUMENTS_TO_NUMPY)


_MAKES_AXES = torch_api.MATPLOTLIB_AXES | torch_api.MATPLOTLIB_FIGURE_AND_AXES


class NumpyOnDeviceTensor(Rule):
    """
    ## What it does
    Finds `.numpy()` called on a tensor that the device-flow model places on an accelerator
    on every path: the output of a model moved to the device, a tensor moved with
    `.to(<device>)` or `.cuda()` or created with `device=`, and anything computed from them
    (arithmetic, tensor methods, `torch` functions, values returned by the file's own
    helpers, batches of a loader over device tensors), with no `.cpu()` on the way. Also
    finds the implicit conversions that fail the same way: such a tensor passed to
    `np.array`, `np.asarray`, `np.transpose` and the other NumPy functions that make arrays of
    their arguments (but not those that call the tensor's own method, such as `np.squeeze`), or
    to a matplotlib function or Axes method (`plt.scatter(x[:, 0], x[:, 1])`, `plt.imshow(image)`,
    `ax.plot(...)` on the Axes of `fig, ax = plt.subplots()`), also as an item of a list or tuple
    written there (`plt.plot([x_min, x_max], [y_min, y_max])` of 0-dim tensors), and `.numpy()` in a
    module's `forward` of data where the module is (`h.data.numpy()`), which fails once the
    model is on a GPU. Also finds a list of such tensors handed to those conversions: the
    accuracy curve of an evaluation helper that adds up `(predictions == labels).sum()` from
    0, or losses appended without `.item()`, passed to `plt.plot`. And such a tensor handed to
    a function of another file of the project that calls `.numpy()` on that parameter as it is
    (`show_scatterplot(X, colors)` of a course's `plot_lib.py`, whose first line is `X =
    X.numpy()`), reported at the call. Tensors and collections moved
    under `if train_on_gpu:` tests count as on the GPU where a machine with a GPU takes those
    tests together and the data meets the model there.

    ## Why is this bad?
    NumPy arrays live in host memory. On a GPU, `tensor.numpy()` fails with "TypeError: can't
    convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
    memory first." On a CPU-only machine the same line works, so the bug ships. A model's
    output also requires grad, and `.numpy()` then fails even on the CPU with "Can't call
    numpy() on Tensor that requires grad".

    ## Not reported
    Not reported: tensors that never left the CPU, tensors brought back with `.cpu()` or
    `.to("cpu")` anywhere on their path, values that are on the device only on some paths,
    calls inside a conditional on `is_cuda` or `.device` (or the CPU branch of a GPU test),
    `.numpy(force=True)`, `.numpy()` of anything the model cannot show is a torch tensor
    on a device, and data where a module is, outside its `forward`, in a file that names no
    GPU, device or move anywhere (an agent's own update step in a CPU-only program).

    ## Fix safety
    Safe: the fix inserts `.cpu()` before `.numpy()`, and `.detach()` too when the value may
    require grad (a model's output computed outside `torch.no_grad()` and not yet reduced to
    indices or booleans). On the CPU both return the tensor itself, so the array still shares
    its memory as before; on a GPU the line now works.

    Unsafe for a collection: the fix copies each element to the host in a list
    comprehension (`[t.cpu() for t in accuracies]`), which is right for a list or tuple of
    tensors, but the analysis does not tell those from a dict, whose iteration gives its keys.
    Appending numbers (`accuracy.item()`) is usually the better change.

    Unsafe for a tensor handed to a helper of another file: the fix hands it `X.cpu()`, which
    is what its `.numpy()` needs, but the helper may also use the tensor with data on the
    GPU, and the fix cannot see that file.

    ## Options
    None.
    """

    code = "TDL006"
    slug = "numpy-on-device-tensor"
    message = "numpy() on a tensor that is on a GPU; copy it to the host with .cpu() first"
    fix_title = "Insert .cpu() before .numpy()"
    proof = RuntimeProof(NUMPY_ON_DEVICE)
    # NumPy and matplotlib, or the names that the project's helpers calling `.numpy()` on what
    # they are handed mostly have (plotting and drawing ones): a file with none is not read.
    requires_any_text = (".numpy()", "numpy", "matplotlib", "plot", "visuali", "draw")

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
        Valid(
            """
            import matplotlib.pyplot as plt
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            losses, rates, counts = [], [], [0]
            for step in range(5):
                batch = torch.randn(8, 4, device=device)
                loss = model(batch).pow(2).mean()
                losses.append(loss.item())
                rates.append((model(batch).argmax(1) == 0).float().mean().cpu())
                counts.append(step)
            plt.plot(losses)
            plt.plot(rates)
            plt.plot(counts)
            """,
            name="curves-of-numbers-or-host-tensors",
        ),
        Valid(
            """
            import matplotlib.pyplot as plt
            import numpy as np
            import torch

            on_gpu = torch.cuda.is_available()
            net = torch.nn.Conv2d(3, 3, 1)
            if on_gpu:
                net.cuda()
            pictures = torch.randn(4, 3, 8, 8)
            if on_gpu:
                pictures = pictures.cuda()
            scores = net(pictures)
            for i in range(4):
                plt.imshow(np.transpose(pictures[i].cpu(), (1, 2, 0)))
                squeezed = np.squeeze(scores[i])  # calls Tensor.squeeze: stays a tensor
            if not on_gpu:
                shown = np.transpose(pictures[0], (1, 2, 0))
            """,
            name="copied-back-or-a-numpy-function-that-calls-the-tensors-method",
        ),
        Valid(
            """
            import numpy as np
            import torch
            import torch.nn as nn

            class Critic(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.value = nn.Linear(4, 1)
                def train_step(self, states, rewards):
                    errors = rewards - self.value(states)
                    errors = errors.detach().numpy()
                    return np.abs(errors).mean()

            critic = Critic()
            print(critic.train_step(torch.randn(8, 4), torch.randn(8, 1)))
            """,
            name="an-agents-own-update-in-a-program-that-never-names-a-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import matplotlib.pyplot as plt
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            weights = torch.randn(2, device=device)
            x_min, x_max = -2, 2
            y_min = -(weights[0] * x_min) / weights[1]
            y_max = -(weights[0] * x_max) / weights[1]
            fig, ax = plt.subplots(1, 2)
            ax[0].plot([x_min, x_max], [y_min, y_max])
            """,
            fixed="""
            import matplotlib.pyplot as plt
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            weights = torch.randn(2, device=device)
            x_min, x_max = -2, 2
            y_min = -(weights[0] * x_min) / weights[1]
            y_max = -(weights[0] * x_max) / weights[1]
            fig, ax = plt.subplots(1, 2)
            ax[0].plot([x_min, x_max], [y_min.cpu(), y_max.cpu()])
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="a-decision-boundary-drawn-from-device-weights-on-axes",
        ),
        Invalid(
            """
            import numpy as np
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(16, 4).to(device)
            loss = model(torch.randn(8, 16, device=device)).pow(2).mean()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if np.isnan(grad_norm):
                print("grad norm was NaN - skipping")
            """,
            fixed="""
            import numpy as np
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(16, 4).to(device)
            loss = model(torch.randn(8, 16, device=device)).pow(2).mean()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if np.isnan(grad_norm.cpu()):
                print("grad norm was NaN - skipping")
            """,
            applicability=Applicability.SAFE,
            name="the-gradient-norm-clipping-returns-is-on-the-models-device",
        ),
        Invalid(
            """
            import matplotlib.pyplot as plt
            import numpy as np
            import torch

            on_gpu = torch.cuda.is_available()
            net = torch.nn.Conv2d(3, 3, 1)
            if on_gpu:
                net.cuda()
            pictures = torch.randn(4, 3, 8, 8)
            if on_gpu:
                pictures = pictures.cuda()
            scores = net(pictures)
            for i in range(4):
                plt.imshow(np.transpose(pictures[i], (1, 2, 0)))
            """,
            fixed="""
            import matplotlib.pyplot as plt
            import numpy as np
            import torch

            on_gpu = torch.cuda.is_available()
            net = torch.nn.Conv2d(3, 3, 1)
            if on_gpu:
                net.cuda()
            pictures = torch.randn(4, 3, 8, 8)
            if on_gpu:
                pictures = pictures.cuda()
            scores = net(pictures)
            for i in range(4):
                plt.imshow(np.transpose(pictures[i].cpu(), (1, 2, 0)))
            """,
            applicability=Applicability.SAFE,
            name="a-numpy-function-of-a-batch-moved-under-a-gpu-guard",
        ),
        Invalid(
            """
            import matplotlib.pyplot as plt
            import numpy as np
            import torch
            import torch.nn as nn

            class Probe(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    h = self.fc(x)
                    self.last = h.data.numpy()
                    return h

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            points = torch.randn(100, 2).to(device)
            plt.scatter(points[:, 0], points[:, 1])
            table = np.asarray(points)
            kept = np.array(points.cpu())
            """,
            fixed="""
            import matplotlib.pyplot as plt
            import numpy as np
            import torch
            import torch.nn as nn

            class Probe(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    h = self.fc(x)
                    self.last = h.data.cpu().numpy()
                    return h

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            points = torch.randn(100, 2).to(device)
            plt.scatter(points[:, 0].cpu(), points[:, 1].cpu())
            table = np.asarray(points.cpu())
            kept = np.array(points.cpu())
            """,
            applicability=Applicability.SAFE,
            count=4,
            name="implicit-conversions-and-numpy-in-forward",
        ),
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
        Invalid(
            """
            import matplotlib.pyplot as plt
            import torch

            def accuracy(model, loader, device):
                correct, seen = 0, 0
                with torch.no_grad():
                    for images, labels in loader:
                        images, labels = images.to(device), labels.to(device)
                        correct += (model(images).argmax(1) == labels).sum()
                        seen += labels.size(0)
                return correct.float() / seen * 100

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            loader = [(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))]
            history = []
            for epoch in range(3):
                history.append(accuracy(model, loader, device))
            plt.plot(range(3), history)
            """,
            fixed="""
            import matplotlib.pyplot as plt
            import torch

            def accuracy(model, loader, device):
                correct, seen = 0, 0
                with torch.no_grad():
                    for images, labels in loader:
                        images, labels = images.to(device), labels.to(device)
                        correct += (model(images).argmax(1) == labels).sum()
                        seen += labels.size(0)
                return correct.float() / seen * 100

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            loader = [(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))]
            history = []
            for epoch in range(3):
                history.append(accuracy(model, loader, device))
            plt.plot(range(3), [t.cpu() for t in history])
            """,
            applicability=Applicability.UNSAFE,
            name="accuracy-curve-of-device-tensors",
        ),
        Invalid(
            """
            import matplotlib.pyplot as plt
            import torch
            import torch.nn as nn

            model = nn.Linear(4, 2)
            on_gpu = torch.cuda.is_available()
            if on_gpu:
                model = model.cuda()
            batches = [(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))]
            rates, losses = [], []
            for epoch in range(3):
                correct = 0
                for inputs, labels in batches:
                    if on_gpu:
                        inputs, labels = inputs.cuda(), labels.cuda()
                    outputs = model(inputs)
                    losses.append(nn.functional.cross_entropy(outputs, labels).item())
                    correct += (outputs.argmax(1) == labels).sum()
                rates.append(100 * correct / 8)
            plt.plot(losses)
            plt.plot(rates)
            """,
            fixed="""
            import matplotlib.pyplot as plt
            import torch
            import torch.nn as nn

            model = nn.Linear(4, 2)
            on_gpu = torch.cuda.is_available()
            if on_gpu:
                model = model.cuda()
            batches = [(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))]
            rates, losses = [], []
            for epoch in range(3):
                correct = 0
                for inputs, labels in batches:
                    if on_gpu:
                        inputs, labels = inputs.cuda(), labels.cuda()
                    outputs = model(inputs)
                    losses.append(nn.functional.cross_entropy(outputs, labels).item())
                    correct += (outputs.argmax(1) == labels).sum()
                rates.append(100 * correct / 8)
            plt.plot(losses)
            plt.plot([t.cpu() for t in rates])
            """,
            applicability=Applicability.UNSAFE,
            name="a-curve-filled-under-gpu-guards-is-on-the-gpu-where-there-is-one",
        ),
    ]

    def setup(self) -> None:
        # The project's helpers that call `.numpy()` on a parameter, by their last name (read
        # once, where a call's name matches one).
        self._numpy_helpers: dict[str, tuple[tuple[int, str], ...]] | None = None
        # Names the file binds to matplotlib Axes (see `visit_Assign`).
        self._axes: set[str] = set()
        self._numpy_helper_names: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "numpy" and not node.args:
            self._check(node, node.func.value, None)
            return
        if not node.args:
            return
        if self._check_helper_call(node):
            return
        qualified = self.context.names.qualified_name(node.func, among=_converts_to_numpy)
        axes_method = qualified is None
        if axes_method:
            qualified = self._axes_method(node)
        if qualified is None:
            return
        positional: list[cst.Arg] = []
        for arg in node.args:
            if arg.star:  # positions after `*args` are not known
                break
            if arg.keyword is None:
                positional.append(arg)
        positions = torch_api.numpy_converted_arguments(qualified)
        converted = positional if positions is None else [positional[index] for index in positions
                                                           if index < len(positional)]
        name = self.context.code_for_node(node.func) if axes_method else \
            qualified.replace("numpy.", "np.").replace("matplotlib.pyplot.", "plt.")
        for arg in converted:
            if isinstance(arg.value, (cst.List, cst.Tuple)):
                # `plt.plot([x_min, x_max], [y_min, y_max])`: each item is converted.
                for element in arg.value.elements:
                    if not isinstance(element, cst.StarredElement):
                        self._check(element.value, element.value, f"{name}() converts a tensor that is on a GPU to "
                                                                  "NumPy; copy it to the host with .cpu() first")
                continue
            if self._check_collection(arg.value, name):
                continue
            self._check(arg.value, arg.value, f"{name}() converts a tensor that is on a GPU to NumPy; "
                                              "copy it to the host with .cpu() first")

    def visit_Assign(self, node: cst.Assign) -> None:
        # `fig, ax = plt.subplots(...)`, `ax = plt.gca()`: names of Axes (see `_axes_method`).
        if not isinstance(node.value, cst.Call) or len(node.targets) != 1:
            return
        made = self.context.names.qualified_name(node.value.func, among=_MAKES_AXES)
        target = node.targets[0].target
        if made in torch_api.MATPLOTLIB_AXES and isinstance(target, cst.Name):
            self._axes.add(target.value)
        elif made in torch_api.MATPLOTLIB_FIGURE_AND_AXES and isinstance(target, (cst.Tuple, cst.List)) \
                and len(target.elements) == 2 and isinstance(target.elements[1].value, cst.Name):
            self._axes.add(target.elements[1].value.value)

    def _axes_method(self, call: cst.Call) -> str | None:
        """`ax.plot(...)`, `axes[0, 1].imshow(...)` on Axes the file made with pyplot: the
        pyplot function of the same name, which converts its arguments alike."""
        func = call.func
        if not self._axes or not isinstance(func, cst.Attribute):
            return None
        root = func.value
        while isinstance(root, cst.Subscript):
            root = root.value
        if not isinstance(root, cst.Name) or root.value not in self._axes:
            return None
        qualified = f"matplotlib.pyplot.{func.attr.value}"
        return qualified if _converts_to_numpy(qualified) else None

    def _check_helper_call(self, call: cst.Call) -> bool:
        """`show_scatterplot(X, colors)`, a function of another file of the project that calls
        `X.numpy()` as it is: the tensor handed over from a GPU fails there."""
        if self._numpy_helpers is None:
            self._numpy_helpers = self.context.project_numpy_parameters()
            self._numpy_helper_names = {key.rsplit(".", 1)[-1] for key in self._numpy_helpers}
        if not self._numpy_helpers:
            return False
        func = call.func
        last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if last not in self._numpy_helper_names:
            return False
        qualified = self.context.names.qualified_name(func)
        if qualified is None or qualified.count(".") < 1:
            return False
        parameters = self._numpy_helpers.get(".".join(qualified.split(".")[-2:]))
        if parameters is None:
            return False
        for position, name in parameters:
            arg = argument_for(call, position, name)
            if arg is not None:
                self._check(arg.value, arg.value,
                            f"{last}() calls .numpy() on this tensor, which is on a GPU; copy it to the host with "
                            ".cpu() first", applicability=Applicability.UNSAFE)
        return True

    def _check_collection(self, collection: cst.BaseExpression, name: str) -> bool:
        """`plt.plot(losses)` where the loop appended device tensors to `losses`: NumPy converts
        each element, and the first one on a GPU fails."""
        value = self.context.flow.value_of(collection)
        if value.kinds == {Kind.CONTAINER} and not value.on_accelerator:
            # Filled under `if train_on_gpu:` moves: on a GPU machine they all take place.
            value = self.context.flow.value_on_a_gpu_machine(collection)
        if value.kinds != {Kind.CONTAINER} or not value.on_accelerator:
            return False
        if under_placement_test(collection, self.context.ancestors(collection)):
            return True
        taken = {node.value for node in subnodes(collection) if isinstance(node, cst.Name)}
        element = next(candidate for candidate in ("t", "item", "tensor_item") if candidate not in taken)
        moved = f"{element}.detach().cpu()" if value.grad else f"{element}.cpu()"
        # Unsafe: the analysis does not tell a list from a dict, whose iteration gives its keys.
        fix = self.make_fix(NodeEdit.insert_before(collection, f"[{moved} for {element} in "),
                            NodeEdit.insert_after(collection, "]"),
                            applicability=Applicability.UNSAFE, title="Copy each tensor to the host")
        self.report(collection, message=f"{name}() converts a collection of tensors that are on a GPU to NumPy; "
                                        "keep numbers (`.item()`) or copy each tensor to the host with .cpu()",
                    fix=fix)
        return True

    def _check(self, node: cst.CSTNode, tensor: cst.BaseExpression, message: str | None,
               applicability: Applicability = Applicability.SAFE) -> None:
        value = self.context.flow.value_of(tensor)
        if value.places == frozenset({MODULE_DEVICE_PLACE}) and self.context.flow.names_no_accelerator() \
                and not self._on_module_device_in_forward(value):
            return  # an agent's `train_net` in a program that never names a GPU: its model stays on the CPU
        if not value.is_tensor_like or not (value.on_accelerator or self._on_module_device_in_forward(value)):
            # Moved under `if train_on_gpu:`: on a machine with a GPU that branch is taken.
            value = self.context.flow.value_on_a_gpu_machine(tensor)
            if not value.is_tensor_like or not value.on_accelerator:
                return
        if under_placement_test(node, self.context.ancestors(node)):
            return
        insertion = ".detach().cpu()" if value.grad else ".cpu()"
        self.report(node, message=message,
                    fix=self.make_fix(NodeEdit.insert_after(tensor, insertion), applicability=applicability))

    def _on_module_device_in_forward(self, value: Value) -> bool:
        """In a module's `forward`, data where the module is: on a GPU once the model is moved."""
        if value.places != frozenset({MODULE_DEVICE_PLACE}):
            return False
        method = self.context.enclosing_method()
        return method is not None and method.function.name.value == "forward" \
            and self.context.flow.is_module_class(method.owner)
