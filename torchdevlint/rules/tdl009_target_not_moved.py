"""TDL009 target-not-moved."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.flow.results import FunctionFlow, HostMeeting, MeetingKind, place_key
from torchdevlint.analysis.flow.values import HOST_PLACE, Value
from torchdevlint.analysis.helper_calls import HelperCalls
from torchdevlint.analysis.names import dotted_name
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid


def _device_move(expression: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.Call] | None:
    """`x.to(device)` / `x.cuda()`, possibly chained with dtype moves: (receiver root, move call)."""
    move: cst.Call | None = None
    while isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        method = expression.func.attr.value
        if method not in torch_api.MOVE_METHODS:
            return None
        if method in torch_api.DEVICE_MOVES and expression.args or method == "cuda":
            move = expression
        expression = expression.func.value
    return (expression, move) if move is not None else None


class TargetNotMoved(Rule):
    """
    ## What it does
    Finds a tensor left on the CPU that meets data on the device: in a loss, a comparison,
    a metric, arithmetic or a model call. Typically a batch target from a `DataLoader` while
    the inputs were moved (`inputs = inputs.to(device)`), or the target of a full-batch
    training loop that moves only `x`. Reported where the CPU tensor meets the device data.

    Where the batch comes from is often out of sight (a loader passed in): moving one of its
    items on its own (`x, y = batch; x = x.to(device)`, `batch["x"].to(device)`) shows that
    the batch is on the host, so its other items are taken for host tensors. Those items are
    not reported where they go into a model with parameters (a model may well take a host
    list such as `lengths`).

    Code that moves the model and its data under separate tests of the device choice (`if
    torch.cuda.is_available(): model.cuda()`, and later `if torch.cuda.is_available(): x =
    x.cuda()`) is also read as a GPU machine runs it, every such test true together: a target
    none of them moves meets the model's output there. That holds for conditional expressions
    (`x = x.cuda() if use_cuda else x`) and across bodies: a model moved under a module-level
    test meets the inputs a training function moves under its own.

    Host data indexed with indices on the device (`captions[order]` where `order` came from
    the model's output) is reported too: the reverse, device data indexed from the host, is
    allowed.

    A name that the two sides of a test not about the device bind to a tensor moved to the
    device on one side and made on the host on the other (`if prompt is None: x =
    torch.zeros(1, 4)`, `else: x = encode(prompt).to(device)`) is read as the host side: on a
    GPU machine that side still runs, and the author moved the tensor only where they thought of it.

    A model on the device handed to a function of the file that feeds it batches it never
    moves (`eval_model(model_1, test_loader)`, where the file also hands it a model left on the
    CPU, so its own reading joins both) is reported at the call: the function is read with
    that call's arguments.

    ## Why is this bad?
    The model's output is on the GPU and the target is not: the loss fails with "Expected all
    tensors to be on the same device, but found at least two devices, cuda:0 and cpu!". On a
    CPU-only machine the code runs, so the bug ships.

    ## Not reported
    Not reported: values brought back on purpose (`.cpu()`, `.item()`, NumPy), non-tensors,
    inputs of `DataParallel`/`DistributedDataParallel` models (they move their inputs), tensors
    made inside a model (TDL002, TDL010), targets whose `.to()` result is thrown away
    (TDL001), and code in the branch an availability check takes where there is no GPU (the
    `else` of `if torch.cuda.is_available():`), where nothing is on a GPU. Nor host lengths
    given to a model of the file whose `forward` hands them to `pack_padded_sequence`, which
    wants them on the CPU (lengths moved to the device are TDL026's), nor lengths (`src_len`,
    `lengths`) given to a model whose class is not the file's, whose `forward` may pack them.
    Nor the parts of a batch a loop writes back under its keys (`batch[k] = to_var(v)`):
    each may be on the device by then.

    ## Fix safety
    The fix moves the target right after the inputs, with the same arguments. It is unsafe:
    the target may be meant to stay on the CPU (a list of labels for logging, say), and the
    move costs a host-to-device copy.

    ## Options
    None.
    """

    code = "TDL009"
    slug = "target-not-moved"
    message = "Tensor left on the CPU is used with data on the device"
    fix_title = "Move the target with the inputs"
    requires_any_text = (".to", ".cuda")

    VALID = [
        Valid(
            """
            import torch

            def orthogonality_penalty(trans):
                identity = torch.eye(trans.size(1))[None, :, :]
                if trans.is_cuda:
                    identity = identity.cuda()
                return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - identity, dim=(1, 2)))

            if __name__ == "__main__":
                print(orthogonality_penalty(torch.rand(4, 3, 3)))
            """,
            name="a-helper-following-its-inputs-device-tried-on-the-cpu",
        ),
        Valid(
            """
            import torch
            from models import Matcher

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Matcher(vocab_size=5000).to(device)
            for questions, answers, question_len, answer_len, labels in loader:
                questions, answers, labels = questions.to(device), answers.to(device), labels.to(device)
                # The model (another file's) packs its inputs: the lengths stay on the host.
                scores = model(questions, answers, question_len, answer_len)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(scores, labels)
            """,
            name="lengths-for-a-model-of-another-file",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            use_cuda = torch.cuda.is_available()
            device = torch.device("cuda" if use_cuda else "cpu")
            decoder = nn.Embedding(100, 16).to(device)

            def sample(prompt_ids, on_gpu=use_cuda):
                if on_gpu:
                    start = torch.tensor([prompt_ids]).to(device)
                else:
                    start = torch.tensor([prompt_ids])
                return decoder(start)

            def greedy(prompt_ids=None):
                if prompt_ids is None:
                    start = torch.zeros(1, 1, dtype=torch.long, device=device)
                else:
                    start = torch.tensor([prompt_ids]).to(device)
                return decoder(start)
            """,
            name="sides-that-test-the-device-or-both-place",
        ),
        Valid(
            """
            import torch
            from tinylm import TinyLM

            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = TinyLM.load("checkpoints/tiny").to(device)
            start = torch.zeros((1, 1), dtype=torch.long, device=device)
            tokens = model.generate(start, max_new_tokens=50)
            words = [model.vocab[i] for i in model.decode(tokens)]
            """,
            name="model-method-handed-a-prompt-on-its-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class GanTrainer:
                def __init__(self, args):
                    self.gpu_mode = args.gpu_mode
                    self.G = nn.Linear(4, 4)
                    if self.gpu_mode:
                        self.G.cuda()

                def train(self, loader):
                    for real, _ in loader:
                        noise = torch.rand(8, 4)
                        if self.gpu_mode:
                            real, noise = real.cuda(), noise.cuda()
                        fake = self.G(noise)
                        alpha = torch.rand(8, 1)
                        if self.gpu_mode:
                            alpha = alpha.cuda()
                        mixed = alpha * real.data + (1 - alpha) * fake.data
            """,
            name="generator-moved-in-place-under-the-same-setting-in-init",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.chars = nn.LSTM(4, 4)

                def forward(self, words):
                    ids = torch.LongTensor(words)
                    if torch.cuda.is_available():
                        out = self.chars(ids.cuda())
                    else:
                        out = self.chars(ids)  # no GPU at all on this path
                    return out
            """,
            name="host-data-where-an-availability-check-found-no-gpu",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            for inputs, targets in loader:
                inputs, targets = inputs.to("cuda"), targets.to("cuda")
                loss = criterion(model(inputs), targets)
            for inputs, targets in loader:
                inputs = inputs.to("cuda")
                loss = criterion(model(inputs), targets.to("cuda"))
            """,
            name="both-moved",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for inputs, targets in DataLoader([]):
                loss = criterion(model(inputs), targets)
            """,
            name="nothing-moved-cpu-loop",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda")
                print(labels)
                history.append(labels.tolist())
            """,
            name="target-used-on-host-only",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda")
                preds = model(images).argmax(1).cpu()
                correct = (preds == labels).sum().item()
                hits = (model(images).to("cpu") == labels).sum()
            """,
            name="predictions-brought-back-to-the-cpu",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(1, 1).to(device)
            x = torch.randn(100, 1)
            y = 3 * x + 1
            x, y = x.to(device), y.to(device)
            for epoch in range(10):
                loss = nn.functional.mse_loss(model(x), y)
                history = [loss.item()]
                preds = model(x).detach().cpu()
                error = (preds - torch.randn(100, 1)).abs().mean()
            """,
            name="full-batch-both-moved-and-values-brought-back",
        ),
        Valid(
            """
            import torch

            def train(encoder, decoder, criterion, loader, device):
                for images, captions, lengths in loader:
                    images = images.to(device)
                    captions = captions.to(device)
                    outputs = decoder(encoder(images), captions, lengths)
                    loss = criterion(outputs, captions)
                    loss.backward()

            def prefetch(loader, device):
                for inputs, target in loader:
                    for key in inputs:
                        inputs[key] = inputs[key].to(device)
                    target = target.to(device)
                    yield inputs["patches"] * 2 + target.float().mean(), target
            """,
            name="a-model-given-host-lengths-and-a-dict-moved-key-by-key",
        ),
        Valid(
            """
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
            torch.set_default_device(device)
            net = torch.nn.Linear(8, 8).to(device)
            targets = [torch.randn(4, 8) for _ in range(10)]
            loss_fn = torch.nn.MSELoss()
            for target in targets:
                loss = loss_fn(net(torch.randn(4, 8)), target)
            """,
            name="factories-on-the-default-device-the-program-sets",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            features = torch.randn(64, 13)
            prices = torch.randn(64, 1)
            model = nn.Linear(13, 1)
            if torch.cuda.is_available():
                model.cuda()
            criterion = nn.MSELoss()
            for epoch in range(5):
                inputs, targets = features, prices
                if torch.cuda.is_available():
                    inputs, targets = inputs.cuda(), targets.cuda()
                loss = criterion(model(inputs), targets)
            """,
            name="model-and-all-data-moved-under-the-same-guard",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            use_cuda = torch.cuda.is_available()
            model = nn.Linear(13, 1)
            model = model.cuda() if use_cuda else model
            criterion = nn.MSELoss()
            def train(features, prices):
                for epoch in range(5):
                    x = features.cuda() if use_cuda else features
                    y = prices.cuda() if use_cuda else prices
                    loss = criterion(model(x), y)
                    loss.backward()
            train(torch.randn(64, 13), torch.randn(64, 1))
            """,
            name="conditional-moves-of-model-inputs-and-targets-across-functions",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            recogniser = nn.GRU(32, 40, batch_first=True).to(device)
            ctc = nn.CTCLoss(blank=0).to(device)
            def step(frames, transcript, transcript_length):
                scores, _ = recogniser(frames.to(device))
                log_probs = scores.log_softmax(2).permute(1, 0, 2)
                frame_counts = torch.full((frames.size(0),), log_probs.size(0), dtype=torch.long)
                return ctc(log_probs, transcript.to(device), frame_counts, transcript_length)
            """,
            name="ctc-lengths-left-on-the-host",
        ),
        Valid(
            """
            import torch
            from warpctc_pytorch import CTCLoss
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            head = torch.nn.Linear(64, 37).to(device)
            criterion = CTCLoss()
            for features, labels, label_sizes in []:
                acts = head(features.to(device)).permute(1, 0, 2)
                act_sizes = torch.IntTensor([acts.size(0)] * acts.size(1))
                cost = criterion(acts, labels, act_sizes, label_sizes)
            """,
            name="warp-ctc-labels-and-lengths-on-the-host",
        ),
        Valid(
            """
            import numpy as np
            import torch
            import torch.nn as nn

            if torch.cuda.is_available():
                torch.set_default_tensor_type("torch.cuda.FloatTensor")
            else:
                torch.set_default_tensor_type("torch.FloatTensor")


            def to_pixels(net, pixels, width, height, on_gpu):
                features = torch.from_numpy(pixels).float()
                if on_gpu:
                    features = features.cuda()
                corners = net(features).data
                scale = torch.Tensor([width, height, width, height])
                return (corners[0, 1:] * scale).cpu()


            if __name__ == "__main__":
                model = nn.Linear(16, 5)
                if torch.cuda.is_available():
                    model = model.cuda()
                print(to_pixels(model, np.random.rand(2, 16), 640, 480, torch.cuda.is_available()))
            """,
            name="a-legacy-tensor-on-the-default-tensor-type-the-program-sets",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embedding = nn.Embedding(1000, 32)
                    self.rnn = nn.GRU(32, 32, batch_first=True)
                    self.head = nn.Linear(32, 2)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(
                        self.embedding(tokens), lengths.to("cpu"), batch_first=True, enforce_sorted=False)
                    _, hidden = self.rnn(packed)
                    return self.head(hidden[-1])

            def classify(model, tokens, device):
                lengths = torch.tensor([len(tokens)])
                batch = torch.tensor([tokens]).to(device)
                return model(batch, lengths).argmax(-1)

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            print(classify(Classifier().to(device), [4, 8, 15], device))
            """,
            name="lengths-a-model-packs-stay-on-the-host",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader
            from helpers import to_var

            model = nn.Linear(8, 3)
            if torch.cuda.is_available():
                model = model.cuda()
            criterion = nn.CrossEntropyLoss()
            data = [{"features": torch.randn(8), "label": torch.tensor(1)} for _ in range(32)]
            for batch in DataLoader(data, batch_size=4):
                for key, value in batch.items():
                    if torch.is_tensor(value):
                        batch[key] = to_var(value)
                loss = criterion(model(batch["features"]), batch["label"])
                loss.backward()
            """,
            name="each-tensor-of-a-batch-moved-by-another-files-helper",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = "cuda" if torch.cuda.is_available() else "cpu"

            def eval_model(model, batches, loss_fn):
                loss = 0.0
                for X, y in batches:
                    loss += loss_fn(model(X), y).item()
                return loss / len(batches)

            batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))]
            model_0 = nn.Linear(4, 2)
            model_1 = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
            print(eval_model(model_0, batches, nn.CrossEntropyLoss()))
            print(eval_model(model_1, batches, nn.CrossEntropyLoss()))
            """,
            name="a-model-on-the-device-handed-to-a-helper-that-never-moves-its-batches",
        ),
        Invalid(
            """
            import torch
            from torch import nn
            from torchvision import datasets
            from torchvision.transforms import ToTensor

            device = "cuda" if torch.cuda.is_available() else "cpu"
            test_data = datasets.MNIST(root="data", train=False, download=True, transform=ToTensor())
            model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).to(device)
            test_x = (test_data.data[:2000].float() / 255.0).to(device)
            test_y = test_data.targets[:2000]
            predicted = model(test_x).argmax(dim=1)
            accuracy = (predicted == test_y).float().mean()
            """,
            name="labels-read-from-the-dataset-split",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            decoder = nn.Embedding(100, 16).to(device)

            def sample(prompt_ids=None):
                if prompt_ids is None:
                    start = torch.zeros(1, 1, dtype=torch.long)
                else:
                    start = torch.tensor([prompt_ids]).to(device)
                return decoder(start)
            """,
            name="moved-on-one-side-of-a-test-only",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            features = torch.randn(64, 13)
            prices = torch.randn(64, 1)
            model = nn.Linear(13, 1)
            if torch.cuda.is_available():
                model.cuda()
            criterion = nn.MSELoss()
            for epoch in range(5):
                inputs = features
                if torch.cuda.is_available():
                    inputs = inputs.cuda()
                loss = criterion(model(inputs), prices)
            """,
            name="targets-left-behind-by-the-guards-a-gpu-takes-together",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            use_cuda = torch.cuda.is_available()
            model = nn.Linear(13, 1)
            model = model.cuda() if use_cuda else model
            criterion = nn.MSELoss()
            features = torch.randn(64, 13)
            prices = torch.randn(64, 1)
            for epoch in range(5):
                x = features.cuda() if use_cuda else features
                loss = criterion(model(x), prices)
            """,
            name="targets-left-behind-by-conditional-expressions",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            use_cuda = torch.cuda.is_available()
            model = nn.Linear(13, 1)
            if use_cuda:
                model.cuda()
            criterion = nn.MSELoss()
            def train(features, prices):
                for epoch in range(5):
                    x = features
                    if use_cuda:
                        x = x.cuda()
                    loss = criterion(model(x), prices)
                    loss.backward()
            train(torch.randn(64, 13), torch.randn(64, 1))
            """,
            name="model-moved-at-module-level-targets-left-behind-in-a-training-function",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def initial_state(batch):
                return torch.zeros(1, batch, 16)
            def predict(rnn: nn.GRU, sequence):
                sequence = sequence.to(device)
                state = initial_state(sequence.size(1))
                return rnn(sequence, state)
            """,
            name="helper-state-beside-an-input-of-unknown-kind-moved-to-the-device",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(8, 1).to(device)
            def rank(loader):
                for images, captions in loader:
                    images = images.to(device)
                    scores, order = model(images).squeeze(1).sort(dim=0, descending=True)
                    captions = captions[order]
            """,
            name="host-batch-indexed-by-an-order-computed-on-the-device",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(1, 1)
            model.to(device)
            criterion = nn.MSELoss()
            x = torch.linspace(-1, 1, 100).unsqueeze(1)
            y = 2 * x + 0.1 * torch.randn(100, 1)
            for epoch in range(100):
                x = x.to(device)
                loss = criterion(y, model(x))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(1, 1)
            model.to(device)
            criterion = nn.MSELoss()
            x = torch.linspace(-1, 1, 100).unsqueeze(1)
            y = 2 * x + 0.1 * torch.randn(100, 1)
            for epoch in range(100):
                x = x.to(device)
                y = y.to(device)
                loss = criterion(y, model(x))
            """,
            applicability=Applicability.UNSAFE,
            name="full-batch-regression-target-left-behind",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            loader = DataLoader(TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,))))
            for batch in loader:
                inputs = batch[0].cuda()
                hits = (net(inputs).argmax(1) == batch[1]).float().mean()
            """,
            name="indexed-batch-compared-with-predictions",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs = inputs.to(device)
                loss = criterion(model(inputs), targets)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs = inputs.to(device)
                targets = targets.to(device)
                loss = criterion(model(inputs), targets)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-target-left-on-the-cpu",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            device = torch.device("cuda")
            for inputs, targets in loader:
                inputs = inputs.to(device, non_blocking=True)  # to the GPU
                loss = criterion(model(inputs), targets)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            device = torch.device("cuda")
            for inputs, targets in loader:
                inputs = inputs.to(device, non_blocking=True)  # to the GPU
                targets = targets.to(device, non_blocking=True)
                loss = criterion(model(inputs), targets)
            """,
            applicability=Applicability.UNSAFE,
            name="regression-loss",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for step, (images, labels) in enumerate(DataLoader([])):
                images = images.cuda()
                logits = model(images)
                correct = (logits.argmax(1) == labels).sum()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for step, (images, labels) in enumerate(DataLoader([])):
                images = images.cuda()
                labels = labels.cuda()
                logits = model(images)
                correct = (logits.argmax(1) == labels).sum()
            """,
            applicability=Applicability.UNSAFE,
            name="accuracy-comparison",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def evaluate(model, loader, device):
                correct = 0
                for inputs, labels in loader:
                    inputs = inputs.to(device)
                    correct += (model(inputs).argmax(1) == labels).sum().item()
                return correct

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 3).to(device)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8)))
            evaluate(model, loader, device)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def evaluate(model, loader, device):
                correct = 0
                for inputs, labels in loader:
                    inputs = inputs.to(device)
                    labels = labels.to(device)
                    correct += (model(inputs).argmax(1) == labels).sum().item()
                return correct

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 3).to(device)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8)))
            evaluate(model, loader, device)
            """,
            applicability=Applicability.UNSAFE,
            name="helper-called-with-the-moved-model-and-a-host-loader",
        ),
        Invalid(
            """
            import torch

            def train_step(model, batch, criterion, device):
                inputs, targets = batch
                inputs = inputs.to(device)
                return criterion(model(inputs), targets)

            def accuracy(model, loader, device):
                correct = 0
                for batch in loader:
                    predictions = model(batch["pixels"].to(device)).argmax(1)
                    correct += (predictions == batch["label"]).sum().item()
                return correct
            """,
            count=2,
            name="batch-items-moved-one-by-one-target-left-behind",
        ),
        Invalid(
            """
            import unittest
            import torch
            from models import Autoencoder

            class TestAutoencoder(unittest.TestCase):
                def setUp(self):
                    self.model = Autoencoder(in_channels=3).cuda()

                def test_reconstruction_shape(self):
                    images = torch.randn(2, 3, 32, 32)
                    self.assertEqual(self.model(images).shape, images.shape)
            """,
            name="model-from-another-file-moved-then-called-on-host-data",
        ),
        Invalid(
            """
            import torch
            from tinylm import TinyLM

            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = TinyLM.load("checkpoints/tiny").to(device)
            start = torch.zeros((1, 1), dtype=torch.long)
            tokens = model.generate(start, max_new_tokens=50)
            """,
            name="model-method-handed-a-host-prompt",
        ),
    ]

    def setup(self) -> None:
        self._helper_calls = self.context.shared(HelperCalls)

    def leave_Module(self, node: cst.Module) -> None:
        self._report_meetings()
        self._report_calls()

    def _report_calls(self) -> None:
        """`eval_model(model_1, loader)`: a model on the device handed to a function of the
        file that feeds it batches it never moves, run with this call's arguments (its own
        flow joins the calls that hand it a model on the CPU)."""
        flow = self.context.flow
        reported: set[int] = set()
        for call, meeting, model in self._helper_calls.model_calls(flow, _model_on_the_device, _model_on_the_device):
            if id(call) in reported:
                continue  # one report a call
            left = [host for host, _ in meeting.host_operands_meeting_device()
                    if host.value.is_tensor and host.node is not model.node]
            if not left:
                continue
            reported.add(id(call))
            self.report(call, message=(
                f"{self.context.code_for_node(call.func)} feeds the model handed here, on the device, "
                f"{self.context.code_for_node(left[0].node)} left on the CPU "
                f"({self.context.code_for_node(meeting.node)}): move it to the model's device in "
                f"{self.context.code_for_node(call.func)}"))

    def _report_meetings(self) -> None:
        flow = self.context.flow
        seen: set[tuple[int, str]] = set()
        for found in flow.host_meetings():
            host = found.host
            if not host.value.is_tensor or found.meeting.kind == MeetingKind.RETURN or self._belongs_elsewhere(found):
                continue
            key = (id(found.flow.node), self.context.code_for_node(host.node))
            if key in seen:
                continue
            seen.add(key)
            self.report(found.meeting.node, fix=self._fix(found))

    def _belongs_elsewhere(self, found: HostMeeting) -> bool:
        """Values brought back on purpose, tensors made in a Module (TDL002, TDL010), moves
        thrown away (TDL001), lengths for a model whose `forward` the file cannot read."""
        if self._lengths_for_an_unseen_model(found):
            return True
        key = place_key(found.host.node) if isinstance(found.host.node, cst.BaseExpression) else None
        if key is not None and key in found.flow.discarded_moves:
            return True
        flow = self.context.flow
        for origin_id in found.host.value.origins:
            site = flow.origin_site(origin_id)
            if site is None or not site.is_factory or site.module_class is not None:
                return True
            if not site.in_method and isinstance(found.flow.node, cst.FunctionDef):
                owner = flow.class_of_method(found.flow.node)
                if owner is not None and flow.is_module_class(owner):
                    return True
        return False

    @staticmethod
    def _lengths_for_an_unseen_model(found: HostMeeting) -> bool:
        """`model(src, src_len)` where `src_len` stays on the host and `model`'s class is not
        the file's: packing (`pack_padded_sequence`) wants the lengths there, and only the
        model's `forward` could say whether it packs (the file's own models are asked)."""
        if found.meeting.kind != MeetingKind.MODULE_CALL or not isinstance(found.host.node, cst.BaseExpression):
            return False
        name = dotted_name(found.host.node)
        if name is None or not set(naming.words(name.rpartition(".")[2])) & naming.LENGTH_WORDS:
            return False
        modules = [operand.value for operand in found.meeting.operands if operand.value.is_module_like]
        return bool(modules) and all(module.instance_of is None for module in modules)

    def _statement_of(self, node: cst.CSTNode, flow: FunctionFlow) -> cst.CSTNode | None:
        current: cst.CSTNode | None = node
        while current is not None and id(current) not in flow.statements:
            current = self.context.parents.get(id(current))
        return current

    def _fix(self, found: HostMeeting) -> PendingFix | None:
        """`y = y.to(<what moved the inputs>)` after the last such move before the meeting."""
        host_node = found.host.node
        if not isinstance(host_node, cst.Name):
            return None
        name = host_node.value
        flow = found.flow
        statement = self._statement_of(found.meeting.node, flow)
        block = self.context.parents.get(id(statement)) if statement is not None else None
        body = block.body if isinstance(block, (cst.IndentedBlock, cst.Module)) else None
        if statement is None or not isinstance(body, (list, tuple)) or statement not in body:
            return None
        for line in reversed(body[: body.index(statement)]):
            if not isinstance(line, cst.SimpleStatementLine):
                return None
            after = flow.after.get(id(line))
            if after is None or after.get(name) != found.host.value:
                return None
            move = self._input_move(line, flow)
            if move is None:
                continue
            assert isinstance(move.func, cst.Attribute)
            call = move.with_changes(func=move.func.with_changes(value=cst.Name(name)))
            return self.make_fix(
                NodeEdit.insert_line_after(line, f"{name} = {self.context.code_for_node(call)}"),
                applicability=Applicability.UNSAFE,
            )
        return None

    @staticmethod
    def _input_move(line: cst.SimpleStatementLine, flow: FunctionFlow) -> cst.Call | None:
        """`x = x.to(device)` (or `.cuda()`) that put a tensor on an accelerator."""
        if len(line.body) != 1 or not isinstance(line.body[0], cst.Assign):
            return None
        assign = line.body[0]
        moved = _device_move(assign.value)
        if moved is None:
            return None
        value = flow.values.get(id(assign.value))
        return moved[1] if value is not None and value.is_tensor and value.on_accelerator else None


def _model_on_the_device(value: Value) -> bool:
    return value.is_module_like and value.places is not None and value.on_accelerator \
        and HOST_PLACE not in value.places
