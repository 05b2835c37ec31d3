"""TDL019 cuda-default-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.cuda_uses import CudaProgram, is_device_test
from torchdevlint.analysis.devices import device_literal, mentions_any
from torchdevlint.analysis.flow.values import PlaceKind
from torchdevlint.analysis.test_code import is_test_code
from torchdevlint.analysis.tree import descendants
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof

_GPU_WORDS = tuple(sorted(naming.GPU_WORDS))


class CudaDefaultDevice(Rule):
    """
    ## What it does
    Finds a function that takes a model and gives its device parameter a CUDA default:
    `def summary(model, input_size, device=torch.device("cuda:0"))`, `device="cuda"`. A
    parameter takes a model when its name says so (`model`, `net`, `encoder` …).

    ## Why is this bad?
    Every caller that leaves the argument out gets CUDA, wherever the model is: on a machine
    without a GPU the function fails with "Torch not compiled with CUDA enabled" or "Found
    no NVIDIA driver on your system", and with the model on the CPU or on another GPU the
    inputs it makes meet the model on the wrong device. Helpers like this are written once
    and called from other files, so the default is where the bug lives.

    Also finds calls that leave such a default in place in a library helper, where the model
    may be on the CPU: `torchsummary.summary(model, (3, 32, 32))` (1.5.1, the release on PyPI)
    makes its dummy inputs on CUDA wherever there is a GPU, so a model left on the CPU (never
    moved, or moved to `"cpu"`) fails on a machine with a GPU. A model placed on a device the
    program chooses (`"cuda" if torch.cuda.is_available() else "cpu"`) is where the inputs
    are, and is not reported.

    ## Not reported
    Not reported: functions named for the GPU (`to_cuda`, `gpu_benchmark`) or decorated with
    a GPU condition, programs that need GPUs by design (a process group on NCCL, see TDL007),
    test code (`test_*.py` with tests, `conftest.py`, modules importing pytest or unittest),
    whose helpers' callers and skips say where they run, and functions with no model parameter (TDL203 reports CUDA hard-coded in a program with
    no CPU mode). A parameter named for a model whose default is a number, a string or a
    truth value is none (`d_model=512` is a width); nor is a device parameter the function
    never reads (its default goes nowhere).

    ## Fix safety
    Unsafe. The default becomes `None`, and the function starts by taking the model's
    device: `device = next(model.parameters()).device if device is None else device` (its
    `.type` for a parameter named for a device type, so that `device_type == "cuda"` still
    compares strings). Callers that relied on the default now
    work where the model is; a model without parameters would need the device passed. No fix
    where the model parameter is named for a class or its maker (`cls_model`, `model_fn`),
    which has no parameters. A library call gets the model's device type:
    `summary(model, (3, 32, 32), device=next(model.parameters()).device.type)` (only where the
    model is a name, which is then read twice).

    ## Options
    None.
    """

    code = "TDL019"
    slug = "cuda-default-device"
    message = "A CUDA default device ignores where the model is and fails without a GPU"
    fix_title = "Default to the model's device"
    # The default device fails wherever CUDA is then used.
    proof = RuntimeProof(NO_GPU, host="cpu", surfaces_away=True)
    requires_any_text = ("cuda", "torchsummary")

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            class Forecaster(nn.Module):
                def __init__(self, enc_in, d_model=512, n_heads=8, dropout=0.0,
                             device=torch.device("cuda:0")):
                    super().__init__()
                    self.embed = nn.Linear(enc_in, d_model)
                    self.attention = nn.MultiheadAttention(d_model, n_heads, dropout=dropout)
            """,
            name="a-width-named-for-the-model-and-a-device-never-read",
        ),
        Valid(
            """
            import torch
            def summary(model, input_size, device=None):
                if device is None:
                    device = next(model.parameters()).device
                return model(torch.rand(2, *input_size, device=device))
            def to_cuda(model, device="cuda"):
                return model.to(device)
            def noise(shape, device="cuda"):
                return torch.randn(shape, device=device)
            """,
            name="the-models-device-named-for-the-gpu-and-no-model",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            def evaluate(model, loader, device=torch.device("cuda")):
                return [model(x.to(device)) for x in loader]
            """,
            name="a-program-that-needs-gpus",
        ),
        Valid(
            """
            import torch
            from torchsummary import summary

            from detector.models import load_model

            model = load_model("yolov3.cfg")
            summary(model, input_size=(3, 416, 416))
            """,
            name="torchsummary-on-a-model-placed-elsewhere",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torchsummary import summary

            model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
            summary(model, (3, 32, 32))
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = model.to(device)
            summary(model, (3, 32, 32))
            """,
            fixed="""
            import torch
            import torch.nn as nn
            from torchsummary import summary

            model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
            summary(model, (3, 32, 32), device=next(model.parameters()).device.type)
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = model.to(device)
            summary(model, (3, 32, 32))
            """,
            applicability=Applicability.UNSAFE,
            name="torchsummary-before-the-model-is-moved",
        ),
        Invalid(
            """
            import torch
            def summary(model, input_size, batch_size=2, device=torch.device("cuda:0")):
                x = torch.rand(batch_size, *input_size).to(device)
                return model(x).shape
            """,
            fixed="""
            import torch
            def summary(model, input_size, batch_size=2, device=None):
                device = next(model.parameters()).device if device is None else device
                x = torch.rand(batch_size, *input_size).to(device)
                return model(x).shape
            """,
            applicability=Applicability.UNSAFE,
            name="documented-summary-helper",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            def evaluate(model, loader, device_type: str = "cuda"):
                return [model(x.to(device_type)) for x in loader]
            def run_loop(cls_model, steps, device="cuda"):
                model = cls_model().to(device)
                return [model(torch.rand(2, 4, device=device)) for _ in range(steps)]
            """,
            fixed="""
            import torch
            def evaluate(model, loader, device_type: str = None):
                device_type = next(model.parameters()).device.type if device_type is None else device_type
                return [model(x.to(device_type)) for x in loader]
            def run_loop(cls_model, steps, device="cuda"):
                model = cls_model().to(device)
                return [model(torch.rand(2, 4, device=device)) for _ in range(steps)]
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-device-type-and-a-model-class",
        ),
        Invalid(
            """
            import torch
            def predict(net, images, *, device="cuda"):
                \"\"\"Class indices for a batch of images.\"\"\"
                return net(images.to(device)).argmax(1)
            def embed(encoder, tokens, device: str = "cuda:1"): return encoder(tokens.to(device))
            """,
            fixed="""
            import torch
            def predict(net, images, *, device=None):
                \"\"\"Class indices for a batch of images.\"\"\"
                device = next(net.parameters()).device if device is None else device
                return net(images.to(device)).argmax(1)
            def embed(encoder, tokens, device: str = "cuda:1"): return encoder(tokens.to(device))
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="keyword-only-after-a-docstring-and-a-one-line-body",
        ),
    ]

    def setup(self) -> None:
        self._program = self.context.shared(CudaProgram)
        self._found: list[tuple[cst.Param, PendingFix | None]] = []
        self._calls: list[tuple[cst.Call, PendingFix | None]] = []

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.context.names.qualified_name(node.func, among=torch_api.CUDA_DEFAULT_DEVICE_CALLS.__contains__)
        if qualified is None or not node.args or any(arg.star for arg in node.args):
            return
        position, keyword = torch_api.CUDA_DEFAULT_DEVICE_CALLS[qualified]
        positional = [arg for arg in node.args if arg.keyword is None]
        if len(positional) > position or any(arg.keyword is not None and arg.keyword.value == keyword for arg in node.args):
            return  # the device is given
        model = positional[0].value if positional else None
        if model is None:
            return
        placed = self.context.flow.value_of(model)
        if not any(place.kind is PlaceKind.HOST for place in placed.places or ()):
            # On a GPU on every path, on a device chosen elsewhere, or of unknown place: the
            # helper makes its inputs on the GPU only where there is one, as such code does.
            return
        fix = None
        if isinstance(model, (cst.Name, cst.Attribute)):
            text = self.context.code_for_node(model)
            given = cst.Arg(cst.parse_expression(f"next({text}.parameters()).device.type"), keyword=cst.Name(keyword),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            last = node.args[-1]
            if isinstance(last.comma, cst.Comma):  # a trailing comma stays last
                given = given.with_changes(comma=last.comma)
            last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            called = node.with_changes(args=[*node.args[:-1], last, given])
            fix = self.make_fix(NodeEdit(node, called), applicability=Applicability.UNSAFE,
                                title="Pass the model's device type")
        self._calls.append((node, fix))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if mentions_any(node.name, _GPU_WORDS) or any(
                is_device_test(d.decorator, self.context.names) for d in node.decorators):
            return
        params = node.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        models = [p.name.value for p in every if any(word in p.name.value.lower() for word in naming.MODEL_NAME_WORDS)
                  and not _holds_a_literal(p.default)]  # `d_model=512` is a width, not a model
        if not models:
            return
        for param in every:
            if param.default is None or not any(word in param.name.value.lower() for word in naming.DEVICE_SETTING_WORDS):
                continue
            if not _reads(node, param.name.value):
                continue  # a parameter the function never reads: its default goes nowhere
            literal = device_literal(param.default, self.context.names)
            if literal is not None and literal.type == "cuda":
                instances = [model for model in models if not _names_a_class(model)]
                self._found.append((param, self._fix(node, param, instances[0]) if instances else None))

    def _fix(self, function: cst.FunctionDef, param: cst.Param, model: str) -> PendingFix | None:
        assert param.default is not None
        body = function.body
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return None  # `def f(...): return ...` on one line: no place for a statement
        first = body.body[0]
        statements = list(body.body)
        if isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1 and isinstance(first.body[0], cst.Expr) \
                and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            statements = statements[1:]  # after the docstring
        if not statements:
            return None
        name = param.name.value
        # A device type stays a string (`device_type == "cuda"`); a device keeps its GPU's index.
        device = f"next({model}.parameters()).device" + (".type" if "type" in name.lower() else "")
        guard = f"{name} = {device} if {name} is None else {name}"
        return self.make_fix(NodeEdit(param.default, "None"), NodeEdit.insert_line_before(statements[0], guard),
                             applicability=Applicability.UNSAFE)

    def leave_Module(self, node: cst.Module) -> None:
        if self._program.declares_gpu_only:
            return
        if is_test_code(self.context.path, node, self.context.names.imports_from):
            return  # a test's helpers: its callers (and its skips) say where they run
        for param, fix in self._found:
            assert param.default is not None
            self.report(param.default, fix=fix)
        for call, fix in self._calls:
            self.report(call, fix=fix, message="This helper makes its inputs on the GPU wherever there is one: "
                                               "with the model left on the CPU it fails on a machine with a GPU")


def _names_a_class(name: str) -> bool:
    """A parameter named for a model's class or its maker (`cls_model`, `model_class`,
    `model_fn`), which has no parameters of its own."""
    lowered = name.lower()
    return lowered.startswith(("cls", "class")) or lowered.endswith(
        ("cls", "class", "_type", "_fn", "factory", "builder", "ctor"))


def _holds_a_literal(default: cst.BaseExpression | None) -> bool:
    """A default that is a number, a string or a truth value: no model's."""
    if isinstance(default, cst.UnaryOperation):
        default = default.expression
    return isinstance(default, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString,
                                cst.FormattedString)) or isinstance(default, cst.Name) and default.value in ("True", "False")


def _reads(function: cst.FunctionDef, name: str) -> bool:
    """Whether the function's body reads the parameter (nested functions and lambdas included)."""
    return any(type(node) is cst.Name and node.value == name for node in descendants(function.body))
