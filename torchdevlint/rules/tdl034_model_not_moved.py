"""TDL034 model-not-moved."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from torchdevlint.analysis.flow.results import HostMeeting, MeetingKind
from torchdevlint.analysis.flow.values import HOST_PLACE, MODULE_DEVICE_PLACE, Value
from torchdevlint.analysis.helper_calls import HelperCalls
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import descendants
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DEVICE_MISMATCH, RuntimeProof


class ModelNotMoved(Rule):
    """
    ## What it does
    Finds a model left on the CPU that is called on data on the device (`model(x)`, or
    `model.forward(x)`): the data was moved (`x = x.to(device)`, `images.cuda()`) and the
    model never was. The model is one the file
    makes with parameters or buffers of its own: a `torch.nn` layer (`nn.Linear(...)`), an
    instance of the file's own `nn.Module` class whose `__init__` makes such parts, or one of
    such a class in another file of the project (`from src.model import handpose_model`, whose
    `__init__` makes layers directly or through a helper of its file, or `from models import
    TinyVAE` re-exported by a package from the one file that defines a class so named; the
    project is read as for TDL003).

    ## Why is this bad?
    A model's parameters stay where the model was made until it is moved; `x.to(device)`
    moves only `x`. On a GPU the first forward pass fails with "Expected all tensors to be on
    the same device, but found at least two devices, cuda:0 and cpu!" (or "Input type
    (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same"). On a
    CPU-only machine both are on the CPU and it runs, so the bug ships.

    Also a layer made inside a model's own method and called there on its inputs
    (`nn.LayerNorm(d)(x)` in `forward`): it is not one of the model's parts, so it stays on the
    CPU when the model moves (and is not trained: a new one is made each call).

    Also a model kept as an attribute of a class of its own (no base but `object`, a process
    or a thread: an agent, a trainer, a worker), made in its `__init__` and called by its methods on data they move, where no
    method of the class moves it (`self.critic.to(...)`): one finding for the attribute, at its
    first call.

    Also such a model handed to a function of the file that calls it on data it moves to the
    device (`evaluate(model_1, loader)` beside `evaluate(model_0, loader)` with `model_0` moved):
    the function is read with each call's arguments, and the call is reported.

    ## Not reported
    Modules without state of their own: losses and activations (`nn.MSELoss()`, `nn.ReLU()`),
    a file's module class that only combines modules it is handed
    (`GreedySearchDecoder(encoder, decoder)`), containers of modules moved elsewhere. Models
    moved on some paths (`if use_cuda: model.cuda()` with the data moved under the same test),
    models the file cannot see made (a parameter, a builder function of another file), and
    data whose device is not known. A model moved in place by a function of the file it is
    handed to (`train_model(model, ...)` calling `model.cuda()`), or by a chain of its own
    methods (`model.cuda().half()`), is where they left it. A model handed to a class of the
    file, or a function or class of another file of the project, whose code moves what it is
    handed or an attribute of its own (`Trainer(model)` whose `__init__` does
    `self.model.to(self.device)`), may be anywhere afterwards, and is not reported.

    ## Fix safety
    Where the model is a name bound earlier in the same block, the fix moves it right after
    that line to the device the data was moved to (`model.to(device)`, or `model.cuda()` for
    data moved with `.cuda()`), where that device is named by then. Unsafe: the model's
    parameters then live on the device for the rest of the program, which also changes what
    code between the two lines sees (an optimizer made there keeps working: `Module.to` moves
    the parameters in place). No fix where the device is not named before the model is made.

    ## Options
    None.
    """

    code = "TDL034"
    reads_the_project = True
    slug = "model-not-moved"
    message = "Model left on the CPU is called on data on the device: move the model too"
    fix_title = "Move the model where the data is"
    proof = RuntimeProof(DEVICE_MISMATCH)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            device = "cuda" if torch.cuda.is_available() else "cpu"

            class Trainer:
                def __init__(self, model, loss_fn):
                    self.model, self.loss_fn = model, loss_fn
                    self.device = device
                    self.model.to(self.device)

            model = nn.Linear(4, 2)
            trainer = Trainer(model, nn.MSELoss())
            batch = torch.randn(3, 4)
            print(model(batch.to(device)))
            """,
            name="a-trainer-class-moves-the-model-it-is-handed",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            def project(layer, points):
                device = list(layer.parameters())[0].device.type
                return layer(torch.as_tensor(points).float().to(device)).detach().cpu().numpy()

            def unpack(rnn):
                layer = nn.Linear(rnn.input_size, rnn.hidden_size)
                layer.load_state_dict({"weight": rnn.weight_ih_l0.cpu(), "bias": rnn.bias_ih_l0.cpu()})
                return layer

            corners = project(unpack(nn.RNN(2, 2)), [[-1, -1], [1, 1]])
            """,
            name="data-moved-to-the-type-of-the-models-own-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
            criterion = nn.CrossEntropyLoss()
            x = torch.randn(16, 4).to(device)
            y = torch.randint(0, 2, (16,)).to(device)
            loss = criterion(model(x), y)
            """,
            name="model-moved-with-its-data-and-a-stateless-loss",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Searcher(nn.Module):
                def __init__(self, encoder, decoder):
                    super().__init__()
                    self.encoder = encoder
                    self.decoder = decoder

                def forward(self, tokens):
                    return self.decoder(self.encoder(tokens))

            use_cuda = torch.cuda.is_available()
            encoder, decoder = nn.Embedding(10, 4), nn.Linear(4, 10)
            if use_cuda:
                encoder, decoder = encoder.cuda(), decoder.cuda()
            searcher = Searcher(encoder, decoder)
            tokens = torch.tensor([[1, 2, 3]])
            if use_cuda:
                tokens = tokens.cuda()
            print(searcher(tokens))
            """,
            name="a-module-of-modules-moved-elsewhere",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            from transformers import AutoModelForCausalLM

            device = "cuda" if torch.cuda.is_available() else "cpu"

            class Stack(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.first = nn.Linear(4, 4)
                    self.rest = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
                    self.blocks = [self.first, *self.rest]

                def forward(self, x):
                    chain = nn.Sequential(self.first, *self.rest)
                    for block in self.blocks:
                        x = block(x)
                    return chain(x)

            model = Stack().to(device)
            print(model(torch.randn(2, 4).to(device)))
            weighted = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([2.0], device=device))
            print(weighted(torch.randn(3, device=device), torch.ones(3, device=device)))
            lm = AutoModelForCausalLM.from_pretrained("gpt2", device_map="auto")
            print(lm(torch.tensor([[1, 2]]).to(device)))
            """,
            name="parts-read-in-forward-a-loss-holding-device-weights-and-a-library-placed-model",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Trainer:
                def __init__(self):
                    self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.model = nn.Linear(4, 2)

                def prepare(self):
                    self.model.to(self.device)

                def step(self, batch):
                    return self.model(batch.to(self.device))
            """,
            name="an-attribute-moved-by-another-method",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Vocoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(4, 8, batch_first=True)
                def generate(self, x):
                    device = next(self.parameters()).device
                    cell = self.gru_cell(self.rnn)
                    h = torch.zeros(x.size(0), 8, device=device)
                    return cell(x.to(device), h)
                def gru_cell(self, gru):
                    cell = nn.GRUCell(gru.input_size, gru.hidden_size)
                    cell.weight_hh.data = gru.weight_hh_l0.data
                    cell.weight_ih.data = gru.weight_ih_l0.data
                    cell.bias_hh.data = gru.bias_hh_l0.data
                    cell.bias_ih.data = gru.bias_ih_l0.data
                    return cell
            """,
            name="a-layer-given-the-models-own-tensors",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

                def forward(self, x):
                    return self.body(x.flatten(1))

            model = Classifier()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            images = torch.rand(32, 1, 28, 28).to(device)
            labels = torch.randint(0, 10, (32,)).to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

                def forward(self, x):
                    return self.body(x.flatten(1))

            model = Classifier()
            model.to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            images = torch.rand(32, 1, 28, 28).to(device)
            labels = torch.randint(0, 10, (32,)).to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-model-never-moved",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class TwoHeads(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.policy = nn.Linear(4, 2)
                    self.value = nn.Linear(4, 1)

                def forward(self, state):
                    return self.policy(state), self.value(state)

            def act(observation):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                net = TwoHeads()
                state = torch.as_tensor(observation, dtype=torch.float32).to(device)
                logits, value = net.forward(state)
                return logits.argmax().item(), value
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class TwoHeads(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.policy = nn.Linear(4, 2)
                    self.value = nn.Linear(4, 1)

                def forward(self, state):
                    return self.policy(state), self.value(state)

            def act(observation):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                net = TwoHeads()
                net.to(device)
                state = torch.as_tensor(observation, dtype=torch.float32).to(device)
                logits, value = net.forward(state)
                return logits.argmax().item(), value
            """,
            applicability=Applicability.UNSAFE,
            name="forward-called-by-name",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Critic(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(4, 1)

                def forward(self, state):
                    return self.body(state)

            class Agent:
                def __init__(self):
                    self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.critic = Critic()

                def value(self, observation):
                    return self.critic(torch.as_tensor(observation).to(self.device))

                def values(self, observations):
                    return self.critic(torch.stack(observations).to(self.device))
            """,
            name="an-agents-model-never-moved-one-finding",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            probe = nn.Linear(512, 10)
            features = torch.randn(8, 512).cuda()
            scores = probe(features)

            def evaluate(loader, device):
                head = nn.Linear(512, 10)
                for batch in loader:
                    head(batch.to(device))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            probe = nn.Linear(512, 10)
            probe.cuda()
            features = torch.randn(8, 512).cuda()
            scores = probe(features)

            def evaluate(loader, device):
                head = nn.Linear(512, 10)
                head.to(device)
                for batch in loader:
                    head(batch.to(device))
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-layer-on-features-moved-with-cuda",
        ),
        Invalid(
            """
            import torch.nn as nn

            class Attention(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.width = width
                    self.query = nn.Linear(width, width)

                def forward(self, x):
                    return nn.LayerNorm(self.width)(self.query(x) + x)
            """,
            name="a-layer-made-inside-forward",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = "cuda" if torch.cuda.is_available() else "cpu"

            def evaluate(model, batches):
                correct = 0
                for X, y in batches:
                    X, y = X.to(device), y.to(device)
                    correct += (model(X).argmax(1) == y).sum().item()
                return correct

            batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))]
            baseline = nn.Linear(4, 2).to(device)
            candidate = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
            print(evaluate(baseline, batches), evaluate(candidate, batches))
            """,
            name="a-model-left-on-the-cpu-handed-to-a-helper",
        ),
    ]

    def setup(self) -> None:
        self._helper_calls = self.context.shared(HelperCalls)
        # A plain class's source, written once however many of its calls are asked about.
        self._class_code: dict[int, str] = {}

    def leave_Module(self, node: cst.Module) -> None:
        self._report_meetings()
        self._report_calls()

    def _report_calls(self) -> None:
        """`evaluate(model_1, loader)`: a model left on the CPU handed to a function of the
        file that calls it on data on the device, run with this call's arguments."""
        flow = self.context.flow
        reported: set[int] = set()
        for call, meeting, model in self._helper_calls.model_calls(flow, self._stateful_on_the_host,
                                                                   self._stateful_on_the_host):
            if id(call) in reported:
                continue  # one report a call
            if not isinstance(model.node, cst.Name) or not any(
                    host.node is model.node for host, _ in meeting.host_operands_meeting_device()):
                continue
            argument = next(arg.value for arg in call.args if self._stateful_on_the_host(flow.value_of(arg.value)))
            function = self.context.code_for_node(call.func)
            reported.add(id(call))
            self.report(call, message=(
                f"{self.context.code_for_node(argument)} is on the CPU, and {function} calls it on data on the "
                f"device ({self.context.code_for_node(meeting.node)}): move the model to that device first"))

    def _stateful_on_the_host(self, value: Value) -> bool:
        if not value.is_module_like or value.places != frozenset({HOST_PLACE}):
            return False
        return value.instance_of is None or self.context.flow.module_owns_state(value.instance_of)

    def _report_meetings(self) -> None:
        flow = self.context.flow
        seen: set[int] = set()
        attributes_reported: set[tuple[int, str]] = set()
        for found in flow.host_meetings():
            if not self._model_left_behind(found) or id(found.meeting.node) in seen:
                continue
            seen.add(id(found.meeting.node))
            written = self.context.code_for_node(found.host.node)
            if self._read_through_self(found):
                # An agent's model: one finding for the attribute of its class, at its first call.
                block = self.context.parents.get(id(found.flow.node))
                key = (id(self.context.parents.get(id(block))), written)
                if key in attributes_reported:
                    continue
                attributes_reported.add(key)
            if found.device.value.places == frozenset({MODULE_DEVICE_PLACE}):
                # Inside a model's own code, on its inputs: a layer made there is not one of its parts.
                message = (f"{written} is made on the CPU and called on the model's inputs: it stays on the CPU "
                           f"when the model moves; make it in __init__")
                self.report(found.meeting.node, message=message)
                continue
            self.report(found.meeting.node, message=(
                f"{written} is on the CPU and is called on data on the device: move the model to that device too"),
                fix=self._fix(found))

    def _fix(self, found: HostMeeting) -> PendingFix | None:
        """`model.to(<what moved the data>)` after the line that binds `model`, in the block of
        the call or a block around it."""
        name = found.host.node
        statement = self._statement_of(found.meeting.node)
        if not isinstance(name, cst.Name) or statement is None:
            return None
        levels = list(self._levels(statement))
        if not levels:
            return None
        innermost, call_line = levels[0]
        move = self._data_move(found.device.node, [*innermost, call_line])
        if move is None:
            return None
        for earlier, _ in levels:
            for line in reversed(earlier):
                if not isinstance(line, cst.SimpleStatementLine) or not _binds(line, name.value):
                    continue
                after = found.flow.after.get(id(line))
                if after is None or after.get(name.value) != found.host.value:
                    return None
                method, device = move
                if device and not _QUOTED.fullmatch(device) and device.split(".")[0] not in after:
                    return None  # the device is named only later
                return self.make_fix(NodeEdit.insert_line_after(line, f"{name.value}.{method}({device})"),
                                     applicability=Applicability.UNSAFE)
        return None

    def _statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, cst.BaseStatement):
            current = self.context.parents.get(id(current))
        return current

    def _levels(self, statement: cst.BaseStatement) -> Iterator[tuple[list[cst.BaseStatement], cst.BaseStatement]]:
        """For the statement and each compound statement around it, up to its function or
        module: the lines before it in its block, and itself."""
        current: cst.CSTNode | None = statement
        while isinstance(current, cst.BaseStatement):
            block = self.context.parents.get(id(current))
            body = block.body if isinstance(block, (cst.IndentedBlock, cst.Module)) else None
            if body is None or current not in body:
                return
            yield list(body[: body.index(current)]), current
            if isinstance(block, cst.Module):
                return
            owner = self.context.parents.get(id(block))
            while owner is not None and not isinstance(owner, cst.BaseStatement):
                owner = self.context.parents.get(id(owner))
            if isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
                return
            current = owner

    def _data_move(self, data: cst.CSTNode, lines: list[cst.BaseStatement]) -> tuple[str, str] | None:
        """How the data was moved: ("to", "device") for `x.to(device)`, ("cuda", "") for
        `x.cuda()`; in the expression itself, or in the line of the block that binds it."""
        places: list[cst.CSTNode] = [data]
        if isinstance(data, cst.Name):
            places.extend(line for line in reversed(lines[:-1])
                          if isinstance(line, cst.SimpleStatementLine) and _binds(line, data.value))
        for place in places[:2]:
            for node in descendants(place):
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                    method = node.func.attr.value
                    positional = [arg for arg in node.args if arg.keyword is None]
                    if method == "cuda" and not node.args:
                        return "cuda", ""
                    if method == "to" and len(positional) == 1 and len(node.args) <= 2:
                        return "to", self.context.code_for_node(positional[0].value)
        return None

    def _model_left_behind(self, found: HostMeeting) -> bool:
        meeting, host = found.meeting, found.host
        if meeting.kind != MeetingKind.MODULE_CALL or not isinstance(meeting.node, cst.Call):
            return False
        func = meeting.node.func
        # `model(x)`, or `model.forward(x)`, whose operand is the model itself.
        called = func.value if isinstance(func, cst.Attribute) and func.attr.value == "forward" else func
        if host.node is not called or not host.value.is_module_like:
            return False
        if host.value.places != frozenset({HOST_PLACE}) or (
                self._read_through_self(found) and not self._unmoved_attribute_of_a_plain_class(found)):
            return False
        class_id = host.value.instance_of
        return class_id is None or self.context.flow.module_owns_state(class_id)

    def _unmoved_attribute_of_a_plain_class(self, found: HostMeeting) -> bool:
        """`self.model(x)` in a method of a class that is no `nn.Module` (an agent, a trainer),
        where no method of the class moves `self.model`: nothing moves it with the object."""
        function = found.flow.node
        block = self.context.parents.get(id(function))
        owner = self.context.parents.get(id(block)) if block is not None else None
        if not isinstance(owner, cst.ClassDef) or any(
                self.context.names.qualified_name(base.value, among=_PLAIN_BASES) is None for base in owner.bases):
            return False  # a base of another kind may be a Module (a LightningModule)
        written = dotted_name(found.host.node) if isinstance(found.host.node, cst.BaseExpression) else None
        if written is None or written.count(".") != 1:
            return False
        attribute = re.escape(written.split(".", 1)[1])
        moved = re.compile(rf"\.{attribute}\s*\.\s*(?:to|cuda|xpu|mps|apply)\s*\(|\.{attribute}\s*=\s*[^\n]*\.(?:to|cuda)\s*\(")
        if id(owner) not in self._class_code:
            self._class_code[id(owner)] = self.context.code_for_node(owner)
        return moved.search(self._class_code[id(owner)]) is None

    @staticmethod
    def _read_through_self(found: HostMeeting) -> bool:
        """`self.head(z)` in a method: a part of the object the method runs on, which moves
        with it (or is the class's own affair) wherever the file cannot see it made."""
        function = found.flow.node
        if not isinstance(function, cst.FunctionDef):
            return False
        params = [*function.params.posonly_params, *function.params.params]
        written = dotted_name(found.host.node) if isinstance(found.host.node, cst.BaseExpression) else None
        return bool(params) and written is not None and written.startswith(params[0].name.value + ".")


# Bases that make a class no `nn.Module`: an agent's, a worker process's, a thread's.
_PLAIN_BASES = frozenset({"builtins.object", "object", "multiprocessing.Process", "torch.multiprocessing.Process",
                          "multiprocessing.context.Process", "threading.Thread", "abc.ABC"})

# A device written as a string literal (`"cuda:0"`).
_QUOTED = re.compile(r"""(['"])[\w:]+\1""")


def _binds(line: cst.SimpleStatementLine, name: str) -> bool:
    """`name = ...`, `a, name = ...`."""
    for small in line.body:
        if not isinstance(small, cst.Assign):
            continue
        for target in small.targets:
            names = [element.value for element in target.target.elements] \
                if isinstance(target.target, (cst.Tuple, cst.List)) else [target.target]
            if any(isinstance(bound, cst.Name) and bound.value == name for bound in names):
                return True
    return False
