"""TDL025 device-fallback-misses-cpu-build."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.devices import calls_in, mentions_any
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof

# What a handler must catch to see a CPU-only build's complaint too.
_BROAD = frozenset({"AssertionError", "Exception", "BaseException"})


class DeviceFallbackMissesCpuBuild(Rule):
    """
    ## What it does
    Finds a `try:` that moves a model or tensor to a device (`model.to(device)`,
    `x.cuda()`) with an `except RuntimeError:` that falls back to another device (it moves
    again, or sets a device variable), and catches nothing a CPU-only build of PyTorch raises.

    ## Why is this bad?
    Where CUDA is missing, PyTorch says so in two ways. A CUDA build on a machine without a
    GPU raises `RuntimeError` ("Found no NVIDIA driver", "No CUDA GPUs are available"). A
    build without CUDA, which is what `pip install torch` gives on macOS and what the CPU
    wheels are, raises `AssertionError: Torch not compiled with CUDA enabled`. The fallback
    never runs there: the program stops on the machines the fallback was written for.

    ## Not reported
    Not reported: handlers that also catch `AssertionError` (or `Exception`), and `try`
    blocks that move nothing.

    ## Fix safety
    Safe: the fix catches `(RuntimeError, AssertionError)`. The same fallback then runs on
    both kinds of build; where the move works nothing changes.

    ## Options
    None.
    """

    code = "TDL025"
    slug = "device-fallback-misses-cpu-build"
    message = "This fallback catches RuntimeError, but a CPU-only build of PyTorch raises AssertionError here"
    fix_title = "Catch AssertionError too"
    # The error comes from the move the handler was meant to catch, in the `try` body.
    proof = RuntimeProof(NO_GPU, host="cpu", surfaces_away=True)
    requires_any_text = ("RuntimeError",)

    VALID = [
        Valid(
            """
            import torch
            def place(model, device):
                try:
                    model.to(device)
                except (RuntimeError, AssertionError):
                    device = "cpu"
                    model.to(device)
                return device
            def parse(text):
                try:
                    return torch.tensor(float(text))
                except RuntimeError:
                    return torch.tensor(0.0)
            """,
            name="a-fallback-for-both-builds-and-a-handler-without-a-move",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.device = "cpu"
                def to(self, device):
                    try:
                        self.device = device
                        self.model.to(self.device)
                    except RuntimeError:
                        self.device = "cuda" if torch.cuda.is_available() else "cpu"
                        print(f"Could not use {device}; using {self.device}")
                        self.model.to(self.device)
            """,
            fixed="""
            import torch
            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.device = "cpu"
                def to(self, device):
                    try:
                        self.device = device
                        self.model.to(self.device)
                    except (RuntimeError, AssertionError):
                        self.device = "cuda" if torch.cuda.is_available() else "cpu"
                        print(f"Could not use {device}; using {self.device}")
                        self.model.to(self.device)
            """,
            applicability=Applicability.SAFE,
            name="a-trainer-that-falls-back-to-what-there-is",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            net = torch.nn.Linear(4, 2)
            try:
                net = net.cuda()
                on_gpu = True
            except (RuntimeError, ValueError):
                on_gpu = False
                net = net.cpu()
            """,
            fixed="""
            import torch
            net = torch.nn.Linear(4, 2)
            try:
                net = net.cuda()
                on_gpu = True
            except (RuntimeError, ValueError, AssertionError):
                on_gpu = False
                net = net.cpu()
            """,
            applicability=Applicability.SAFE,
            name="a-script-that-tries-the-gpu-first",
        ),
    ]

    def visit_Try(self, node: cst.Try) -> None:
        if not any(self._moves(call) for call in calls_in(node.body)):
            return
        for handler in node.handlers:
            caught = handler.type
            if caught is None or not self._catches_only_cuda_build_errors(caught):
                continue
            if self._falls_back(handler):
                self.report(caught, fix=self._fix(caught))

    def _moves(self, call: cst.Call) -> bool:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in torch_api.DEVICE_MOVES):
            return False
        if func.attr.value == "cuda" or self.context.flow.move_destination(call) is not None:
            return True
        # `model.to(self.device)`, where the model cannot tell what `self.device` holds.
        return bool(call.args) and mentions_any(call.args[0].value, naming.DEVICE_VARIABLE_WORDS, strings=True)

    @staticmethod
    def _catches_only_cuda_build_errors(caught: cst.BaseExpression) -> bool:
        names = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
        written = {name.value for name in names if isinstance(name, cst.Name)}
        return "RuntimeError" in written and not written & _BROAD and len(written) == len(names)

    def _falls_back(self, handler: cst.ExceptHandler) -> bool:
        if any(isinstance(call.func, cst.Attribute) and call.func.attr.value in (*torch_api.DEVICE_MOVES, "cpu")
               for call in calls_in(handler.body)):
            return True
        stack: list[cst.CSTNode] = [handler.body]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Assign) and any(
                    mentions_any(target.target, ("device",)) for target in current.targets):
                return True
            stack.extend(current.children)
        return False

    def _fix(self, caught: cst.BaseExpression) -> PendingFix:
        added = cst.Element(cst.Name("AssertionError"))
        if isinstance(caught, cst.Tuple):
            *first, last = caught.elements
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            # The edit spans the elements, not the parentheses around them.
            replacement: cst.BaseExpression = caught.with_changes(
                elements=[*first, last.with_changes(comma=comma), added], lpar=[], rpar=[])
        else:
            replacement = cst.Tuple([cst.Element(caught, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                                     added])
        return self.make_fix(NodeEdit(caught, replacement), applicability=Applicability.SAFE)
