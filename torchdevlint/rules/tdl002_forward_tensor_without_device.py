"""TDL002 forward-tensor-without-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.flow.results import OriginSite
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.shared_fixes import model_data_device


class ForwardTensorWithoutDevice(Rule):
    """
    ## What it does
    Finds tensor factories (`torch.zeros`, `ones`, `empty`, `full`, `rand`, `randn`,
    `randint`, `arange`, `linspace`, `eye`, `tensor`, …, and legacy constructors such as
    `torch.LongTensor([[0, 1, 2]])`) called without `device=` in the
    methods of an `nn.Module` (`forward`, `init_hidden` whether `forward` or a training loop
    calls it on a model passed in, mask builders), in lambdas and
    comprehensions there, or in same-file helper functions, whose CPU result then meets the
    model's data: its inputs, submodules, parameters or buffers (an LSTM's `(h0, c0)`, a
    causal mask in `scores.masked_fill(mask == 0, ...)` beside the parts of a `split`), or is
    returned from `forward`. Which torch calls check their tensors' devices, and what they
    return, comes from torch's own operator schemas.

    ## Why is this bad?
    Such a tensor is always created on the CPU. Once the model is moved to a GPU, its inputs
    are on the GPU and the new tensor is not: an RNN fails with "Input and hidden tensors are
    not at the same device", arithmetic with "Expected all tensors to be on the same device".
    The model works in a CPU-only test and fails on the first GPU run.

    ## Not reported
    Not reported: tensors moved before they meet the model's data (`h = h.to(device)`, a
    factory moved at the end of its chain, `if use_gpu: h = h.cuda()`), `*_like` factories
    and `Tensor.new_*`, tensors used only as indices, for their shape or dtype, or as the
    CPU lengths of `pack_padded_sequence`, 0-dimensional tensors in arithmetic (also after
    element-wise math and full reductions: `torch.sqrt(torch.tensor(2.0 / math.pi)) * x`), and tensors
    made in `__init__` (TDL010 covers attributes) or in a method only `__init__` calls (a
    dummy input measuring a layer's output size, while the module is still on the CPU).
    Nor is anything in a program that trains its model itself (it calls `.backward()`) and
    never names an accelerator: no `cuda`, `device`, `gpu`, `mps`, `.to(`, parallel wrapper or
    `pin_memory` anywhere in its text, comments included. Such a script (a CPU tutorial)
    cannot put its model on a GPU; a file of models that other programs import, or a script
    that mentions a device even in a comment, is reported. Nor, in a program that trains its
    models itself and moves some to a GPU, in a class whose every instance it keeps on the
    host (a notebook's CPU-only LSTM, beside the GPU version of its next cells). `torchdevlint debug flow FILE` shows where
    the analysis puts each value.

    ## Fix safety
    The fix adds `device=<input>.device`, using a parameter of the method that holds the
    model's data where the tensor is made (even if it is rebound later), never one the method
    uses as a dict or a list (`fields.items()`, `**batch`, `for x in xs`). It is safe when that
    parameter is annotated as a Tensor, unsafe otherwise (it may be a list or a dict). With no
    such input at hand it uses `next(self.parameters()).device`, unsafe (a module without
    parameters has none). Factories in helper functions get no fix, nor do legacy
    constructors, which take no `device=`.

    ## Options
    None.
    """

    code = "TDL002"
    slug = "forward-tensor-without-device"
    message = "Tensor created in a model without device=; it stays on the CPU when the model moves"
    fix_title = "Create the tensor on the input's device"
    requires_any_text = ("forward",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            class CpuLSTM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(28, 100, batch_first=True)
                def forward(self, x):
                    h0 = torch.zeros(1, x.size(0), 100)
                    c0 = torch.zeros(1, x.size(0), 100)
                    return self.lstm(x, (h0, c0))[0]

            class GpuLSTM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(28, 100, batch_first=True)
                def forward(self, x):
                    h0 = torch.zeros(1, x.size(0), 100, device=x.device)
                    c0 = torch.zeros(1, x.size(0), 100, device=x.device)
                    return self.lstm(x, (h0, c0))[0]

            # A notebook's first model stays on the CPU; the next one runs on the GPU.
            cpu_model = CpuLSTM()
            cpu_model(torch.randn(4, 28, 28)).sum().backward()
            gpu_model = GpuLSTM().cuda()
            gpu_model(torch.randn(4, 28, 28).cuda()).sum().backward()
            """,
            name="a-class-the-program-keeps-on-the-cpu-beside-one-it-moves",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Critic(nn.Module):
                def __init__(self, frames=(4, 84, 84), actions=6):
                    super().__init__()
                    self.frames = frames
                    self.convs = nn.Sequential(nn.Conv2d(frames[0], 16, 8, stride=4), nn.ReLU())
                    self.head = nn.Linear(self._flat_size(), actions)

                def _flat_size(self):
                    # Runs only while __init__ builds the module, still on the CPU.
                    return self.convs(torch.zeros(1, *self.frames)).view(1, -1).size(1)

                def forward(self, x):
                    return self.head(self.convs(x).flatten(1))

            critic = Critic().cuda()
            """,
            name="a-dummy-input-in-a-helper-only-init-calls",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("scale", torch.ones(4))
                def forward(self, x):
                    h = torch.zeros(2, x.size(0), 8, device=x.device)
                    mask = torch.ones_like(x)
                    pad = x.new_zeros(3)
                    pos = torch.arange(x.size(1)).to(x.device)
                    eps = torch.tensor(1e-6)
                    return x * mask + h.sum() + pad.sum() + pos.sum() + eps
            """,
            name="device-given-like-new-and-moved",
        ),
        Valid(
            """
            import torch
            class Helper:
                def forward(self, x):
                    return torch.zeros(3)
            """,
            name="class-not-a-module",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self, x, **kwargs):
                    return torch.zeros(3, **kwargs)
            """,
            name="keyword-splat-may-carry-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Shuffle(nn.Module):
                def forward(self, x):
                    order = torch.randperm(x.size(1))
                    assert torch.tensor([0.0]).dtype == torch.float32
                    return x[:, order] + x[:, torch.arange(x.size(1))]
            """,
            name="used-only-as-index-or-for-its-dtype",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class MultiCrop(nn.Module):
                def forward(self, crops):
                    ends = torch.cumsum(torch.unique_consecutive(
                        torch.tensor([c.shape[-1] for c in crops]), return_counts=True,
                    )[1], 0)
                    start, outputs = 0, []
                    for end in ends:
                        outputs.append(self.backbone(torch.cat(crops[start:end])))
                        start = end
                    return torch.cat(outputs)
            """,
            name="host-bookkeeping-through-torch-ops",
        ),
        Valid(
            """
            import torch
            from torch import nn
            from torch.nn.utils.rnn import pack_padded_sequence
            class Encoder(nn.Module):
                def forward(self, x: torch.Tensor, lens):
                    lengths = torch.tensor(lens, dtype=torch.int64)
                    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                    again = pack_padded_sequence(x, torch.tensor(lens), batch_first=True)
                    return self.rnn(packed), again
            """,
            name="sequence-lengths-must-stay-on-the-cpu",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class CharRNN(nn.Module):
                def __init__(self, use_gpu):
                    super().__init__()
                    self.use_gpu = use_gpu
                    self.rnn = nn.LSTM(16, 32)
                def forward(self, x):
                    hidden = torch.zeros(1, x.size(1), 32)
                    hidden = hidden.to(device)
                    cell = torch.zeros(1, x.size(1), 32)
                    if self.use_gpu:
                        cell = cell.cuda()
                    return self.rnn(x, (hidden, cell))
            """,
            name="moved-later-as-the-tutorials-teach",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Embed(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.device = device
                    self.pos = nn.Embedding(512, 64)
                def forward(self, tokens):
                    b, n = tokens.shape
                    ids = torch.arange(n).unsqueeze(0).repeat(b, 1).to(self.device)
                    return tokens + self.pos(ids)
            """,
            name="moved-at-the-end-of-its-chain",
        ),
        Valid(
            """
            import math
            import torch
            import torch.nn as nn
            class NewGELU(nn.Module):
                def forward(self, x):
                    inner = torch.sqrt(torch.tensor(2.0 / math.pi)) * (x + 0.044715 * torch.pow(x, 3.0))
                    return 0.5 * x * (1.0 + torch.tanh(inner))
            class Scaled(nn.Module):
                def forward(self, x):
                    return x / torch.tensor(64.0).sqrt().float() + torch.exp(torch.tensor(torch.pi)).abs()
            """,
            name="zero-dim-constants-through-math",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class CharRNN(nn.Module):
                def __init__(self, vocab, hidden):
                    super().__init__()
                    self.hidden = hidden
                    self.embed = nn.Embedding(vocab, hidden)
                    self.rnn = nn.GRU(hidden, hidden, batch_first=True)
                def init_hidden(self, batch):
                    return torch.zeros(1, batch, self.hidden, device=self.embed.weight.device)
                def forward(self, x, h):
                    return self.rnn(self.embed(x), h)
            def train(model, loader):
                model.to(device)
                for x, y in loader:
                    x = x.to(device)
                    h = model.init_hidden(x.size(0))
                    out, h = model(x, h)
            """,
            name="hidden-state-made-where-the-model-is",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.RNN(8, 16, batch_first=True)
                def forward(self, x):
                    h0 = torch.zeros(1, x.size(0), 16)
                    return self.rnn(x, h0)[0]
            model = Tagger()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(100):
                optimizer.zero_grad()
                model(torch.randn(4, 5, 8)).pow(2).mean().backward()
                optimizer.step()
            """,
            name="script-that-trains-only-on-the-host",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.words = nn.Embedding(100, 16)
                    self.positions = nn.Embedding(8, 16)

                def forward(self, tokens):
                    steps = torch.LongTensor([[0, 1, 2, 3]])
                    return self.words(tokens) + self.positions(steps)
            """,
            name="a-legacy-constructor-in-forward-has-no-device-argument-so-no-fix",
        ),
        Invalid(
            """
            import torch
            from torch import nn


            class Encoder(nn.Module):
                def forward(self, x):
                    h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size)
                    return self.rnn(x, h0)
            """,
            fixed="""
            import torch
            from torch import nn


            class Encoder(nn.Module):
                def forward(self, x):
                    h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size, device=x.device)
                    return self.rnn(x, h0)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-rnn-hidden-state",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(4, 8, batch_first=True)
                def forward(self, x: torch.Tensor):
                    h0 = torch.zeros(1, x.size(0), 8)
                    return self.rnn(x, h0)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(4, 8, batch_first=True)
                def forward(self, x: torch.Tensor):
                    h0 = torch.zeros(1, x.size(0), 8, device=x.device)
                    return self.rnn(x, h0)
            """,
            applicability=Applicability.SAFE,
            name="rnn-hidden-state-annotated-input",
        ),
        Invalid(
            """
            import torch as T
            from torch import nn, arange
            class Block(nn.Module):
                pass
            class Positional(Block):
                def forward(self, tokens):
                    positions = arange(tokens.size(1))
                    noise = [T.randn(
                        4,
                        4,
                    ) for _ in range(2)]
                    return tokens + positions + noise[0]
            """,
            fixed="""
            import torch as T
            from torch import nn, arange
            class Block(nn.Module):
                pass
            class Positional(Block):
                def forward(self, tokens):
                    positions = arange(tokens.size(1), device=tokens.device)
                    noise = [T.randn(
                        4,
                        4, device=tokens.device,
                    ) for _ in range(2)]
                    return tokens + positions + noise[0]
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="aliases-local-base-and-comprehension",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(8, 16)
                def init_hidden(self, batch):
                    return (torch.zeros(1, batch, 16), torch.zeros(1, batch, 16))
                def forward(self, x):
                    return self.lstm(x, self.init_hidden(x.size(1)))
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(8, 16)
                def init_hidden(self, batch):
                    return (torch.zeros(1, batch, 16, device=next(self.parameters()).device), torch.zeros(1, batch, 16, device=next(self.parameters()).device))
                def forward(self, x):
                    return self.lstm(x, self.init_hidden(x.size(1)))
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="hidden-state-from-a-helper-method",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class SelfAttention(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.qkv = nn.Linear(width, 3 * width)
                    self.width = width
                def forward(self, x: torch.Tensor):
                    q, k, v = self.qkv(x).split(self.width, dim=2)
                    scores = q @ k.transpose(1, 2)
                    mask = torch.ones(x.size(1), x.size(1)).tril()
                    return scores.masked_fill(mask == 0, float("-inf")).softmax(-1) @ v
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class SelfAttention(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.qkv = nn.Linear(width, 3 * width)
                    self.width = width
                def forward(self, x: torch.Tensor):
                    q, k, v = self.qkv(x).split(self.width, dim=2)
                    scores = q @ k.transpose(1, 2)
                    mask = torch.ones(x.size(1), x.size(1), device=x.device).tril()
                    return scores.masked_fill(mask == 0, float("-inf")).softmax(-1) @ v
            """,
            applicability=Applicability.SAFE,
            name="causal-mask-beside-parts-of-a-split",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Padder(nn.Module):
                def forward(self, x: torch.Tensor):
                    blank = lambda n: torch.zeros(n, x.size(1))
                    return torch.cat([x, blank(2)])
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Padder(nn.Module):
                def forward(self, x: torch.Tensor):
                    blank = lambda n: torch.zeros(n, x.size(1), device=x.device)
                    return torch.cat([x, blank(2)])
            """,
            applicability=Applicability.SAFE,
            name="factory-in-a-lambda-in-forward",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class FieldEncoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.encode = nn.Linear(4, 4)
                def forward(self, fields):
                    encoded = {name: self.encode(value) for name, value in fields.items()}
                    position = torch.arange(4)
                    return {name: feature + position for name, feature in encoded.items()}
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class FieldEncoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.encode = nn.Linear(4, 4)
                def forward(self, fields):
                    encoded = {name: self.encode(value) for name, value in fields.items()}
                    position = torch.arange(4, device=next(self.parameters()).device)
                    return {name: feature + position for name, feature in encoded.items()}
            """,
            applicability=Applicability.UNSAFE,
            name="positions-beside-a-dict-of-encoded-fields",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class CharRNN(nn.Module):
                def __init__(self, vocab, hidden):
                    super().__init__()
                    self.hidden = hidden
                    self.embed = nn.Embedding(vocab, hidden)
                    self.rnn = nn.GRU(hidden, hidden, batch_first=True)
                def init_hidden(self, batch):
                    return torch.zeros(1, batch, self.hidden)
                def forward(self, x, h):
                    return self.rnn(self.embed(x), h)
            def train(model, loader):
                model.to(device)
                for x, y in loader:
                    x = x.to(device)
                    h = model.init_hidden(x.size(0))
                    out, h = model(x, h)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class CharRNN(nn.Module):
                def __init__(self, vocab, hidden):
                    super().__init__()
                    self.hidden = hidden
                    self.embed = nn.Embedding(vocab, hidden)
                    self.rnn = nn.GRU(hidden, hidden, batch_first=True)
                def init_hidden(self, batch):
                    return torch.zeros(1, batch, self.hidden, device=next(self.parameters()).device)
                def forward(self, x, h):
                    return self.rnn(self.embed(x), h)
            def train(model, loader):
                model.to(device)
                for x, y in loader:
                    x = x.to(device)
                    h = model.init_hidden(x.size(0))
                    out, h = model(x, h)
            """,
            applicability=Applicability.UNSAFE,
            name="hidden-state-a-training-loop-asks-the-model-for",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Dropout(nn.Module):
                def forward(self, x: torch.Tensor):
                    keep = torch.rand(x.shape) > 0.5
                    return x * keep
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Dropout(nn.Module):
                def forward(self, x: torch.Tensor):
                    keep = torch.rand(x.shape, device=x.device) > 0.5
                    return x * keep
            """,
            applicability=Applicability.SAFE,
            name="comparison-of-a-random-tensor",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            def causal_mask(n):
                return torch.triu(torch.ones(n, n), diagonal=1).bool()
            class Decoder(nn.Module):
                def forward(self, x):
                    scores = x @ x.transpose(1, 2)
                    return scores.masked_fill(causal_mask(x.size(1)), float("-inf"))
            """,
            name="mask-from-a-helper-function",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.pos = nn.Embedding(512, 64)
                def forward(self, x: torch.Tensor):
                    positions = torch.arange(x.size(1))
                    x = x + self.pos(positions)
                    return x
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.pos = nn.Embedding(512, 64)
                def forward(self, x: torch.Tensor):
                    positions = torch.arange(x.size(1), device=x.device)
                    x = x + self.pos(positions)
                    return x
            """,
            applicability=Applicability.SAFE,
            name="input-rebound-after-the-factory",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self):
                    return torch.ones(3)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self):
                    return torch.ones(3, device=next(self.parameters()).device)
            """,
            applicability=Applicability.UNSAFE,
            name="no-input-uses-the-module-device",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.RNN(8, 16, batch_first=True)
                def forward(self, x):
                    h0 = torch.zeros(1, x.size(0), 16)
                    return self.rnn(x, h0)[0]
            model = Tagger()  # later: model.to(device) for the GPU
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(100):
                optimizer.zero_grad()
                model(torch.randn(4, 5, 8)).pow(2).mean().backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.RNN(8, 16, batch_first=True)
                def forward(self, x):
                    h0 = torch.zeros(1, x.size(0), 16, device=x.device)
                    return self.rnn(x, h0)[0]
            model = Tagger()  # later: model.to(device) for the GPU
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(100):
                optimizer.zero_grad()
                model(torch.randn(4, 5, 8)).pow(2).mean().backward()
                optimizer.step()
            """,
            applicability=Applicability.UNSAFE,
            name="script-that-names-a-device-in-a-comment",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self, x: torch.Tensor):
                    x = x.tolist()
                    return torch.tensor(x)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self, x: torch.Tensor):
                    x = x.tolist()
                    return torch.tensor(x, device=next(self.parameters()).device)
            """,
            applicability=Applicability.UNSAFE,
            name="input-rebound-before-uses-the-module-device",
        ),
    ]

    def leave_Module(self, node: cst.Module) -> None:
        flow = self.context.flow
        if flow.trains_only_on_the_host():
            return  # a CPU-only tutorial script: its model never sees GPU data
        reported: set[int] = set()
        for found in flow.host_meetings():
            meeting_class = self._module_class_of(found.flow.node)
            for origin_id in sorted(found.host.value.origins):
                site = flow.origin_site(origin_id)
                if site is None or id(site.call) in reported or not self._owns(site, meeting_class):
                    continue
                if site.module_class is not None and flow.instances_stay_on_the_host(site.module_class):
                    continue  # every model of the class this program makes stays on the CPU
                reported.add(id(site.call))
                self.report(site.call, fix=self._fix(site))

    def _module_class_of(self, scope: cst.CSTNode) -> cst.ClassDef | None:
        if not isinstance(scope, cst.FunctionDef):
            return None
        owner = self.context.flow.class_of_method(scope)
        return owner if owner is not None and self.context.flow.is_module_class(owner) else None

    def _owns(self, site: OriginSite, meeting_class: cst.ClassDef | None) -> bool:
        """Factories in a Module's methods (its `__init__` aside: TDL010 covers attributes, and
        what only `__init__` calls runs while the module is still on the host), and in plain
        helper functions whose result meets the data inside a Module's method."""
        if not site.is_factory:
            return False
        if site.module_class is not None:
            return site.function_name != "__init__" and not (
                isinstance(site.scope, cst.FunctionDef) and self.context.flow.runs_only_while_constructing(site.scope))
        return not site.in_method and meeting_class is not None

    def _fix(self, site: OriginSite) -> PendingFix | None:
        scope = site.scope
        if site.module_class is None or not isinstance(scope, cst.FunctionDef) or site.legacy_constructor:
            # A legacy constructor (`torch.LongTensor(...)`) takes no `device=`.
            return None
        chosen = model_data_device(self, site.call, scope)
        if chosen is None:
            return None
        device, applicability = chosen
        call = site.call
        if call.args:
            edit = NodeEdit.insert_after(call.args[-1].value, f", device={device}")
        else:
            edit = NodeEdit(call, f"{self.context.code_for_node(call.func)}(device={device})")
        return self.make_fix(edit, applicability=applicability)
