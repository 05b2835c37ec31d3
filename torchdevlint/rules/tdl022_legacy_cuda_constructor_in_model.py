"""TDL022 legacy-cuda-constructor-in-model."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.cuda_uses import CudaProgram
from torchdevlint.analysis.devices import LEGACY_CUDA_TENSOR_TYPES, LEGACY_TENSOR_DTYPES
from torchdevlint.analysis.names import dotted_name
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.shared_fixes import legacy_constructor_factory, model_data_device


class LegacyCudaConstructorInModel(Rule):
    """
    ## What it does
    Finds the legacy CUDA tensor types called as constructors (`torch.cuda.FloatTensor(b, n)`,
    `torch.cuda.LongTensor([0, 1])`, …) in the methods of an `nn.Module` other than
    `__init__`: `forward`, mask and state builders, and lambdas or comprehensions in them.

    ## Why is this bad?
    Such a tensor is made on the *current* CUDA device, whatever device the model and its
    inputs are on. With the model on a second GPU (`model.to("cuda:1")`, one process per GPU
    without `torch.cuda.set_device`) the tensor lands on `cuda:0` and the next operation
    fails with "Expected all tensors to be on the same device"; on a machine without a GPU,
    or with the model on the CPU, the constructor fails outright ("type torch.cuda.FloatTensor
    not available"). The legacy types are also deprecated: PyTorch asks for factories with a
    `dtype=` and a `device=`.

    ## Not reported
    Not reported: `__init__` (a tensor made there is a parameter or attribute that `.to()`
    moves or TDL010 reports), functions outside a module, the CPU types
    (`torch.FloatTensor`, see TDL018), a constructor under a CUDA test
    (`if torch.cuda.is_available():`, whose other side is the CPU's), and a file whose program
    cannot run without a GPU anyway (other CUDA uses it reaches unguarded, no CPU mode): there
    the current GPU is the model's, on one GPU and in each DataParallel replica. A module with no
    other CUDA use (a layer of a library) is reported: whoever uses it may run it on the CPU or
    on another GPU.

    ## Fix safety
    The constructor becomes the factory it stands for on the device of the model's data:
    sizes become `torch.empty(..., dtype=..., device=...)`, a list or tuple of values
    `torch.tensor(..., dtype=..., device=...)`. The device is a parameter of the method that
    holds the model's data there: safe when it is annotated as a Tensor, unsafe otherwise.
    With no such input it is `next(self.parameters()).device`, unsafe: a module without
    parameters has none, and neither has a DataParallel replica. A single argument
    that may be either a size or data (a plain name) gets no fix.

    ## Options
    None.
    """

    code = "TDL022"
    slug = "legacy-cuda-constructor-in-model"
    message = "A legacy CUDA tensor made in a model lands on the current GPU, not on the model's"
    fix_title = "Make the tensor on the device of the model's data"
    requires_any_text = ("Tensor(",)
    requires_also_any_text = ("cuda",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            class Dropout2d(nn.Module):
                def __init__(self, p):
                    super().__init__()
                    self.p = p
                    self.scale = nn.Parameter(torch.cuda.FloatTensor([1.0]))
                def forward(self, x):
                    return x * torch.empty(x.size(0), x.size(1), 1, 1, device=x.device).bernoulli_(1 - self.p)
            def make_noise(n):
                return torch.cuda.FloatTensor(n).normal_()
            """,
            name="in-init-outside-a-module-and-the-factory",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Sampler(nn.Module):
                def forward(self, mu, logvar):
                    std = logvar.mul(0.5).exp_()
                    if torch.cuda.is_available():
                        eps = torch.cuda.FloatTensor(std.size()).normal_()
                    else:
                        eps = torch.FloatTensor(std.size()).normal_()
                    return eps.mul(std).add_(mu)
            """,
            name="under-a-cuda-test-beside-the-cpu-type",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Linear(8, 8)
                def encode(self, label_map):
                    edges = torch.cuda.ByteTensor(label_map.size()).zero_()
                    return self.net(label_map.cuda()), edges
            model = nn.DataParallel(Encoder()).cuda()
            """,
            name="a-program-that-runs-only-on-a-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            class SpatialDropout(nn.Module):
                def __init__(self, p):
                    super().__init__()
                    self.p = p
                def forward(self, x: torch.Tensor):
                    keep = torch.cuda.FloatTensor(x.size(0), x.size(1), 1, 1).bernoulli_(1 - self.p)
                    return x * keep / (1 - self.p)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class SpatialDropout(nn.Module):
                def __init__(self, p):
                    super().__init__()
                    self.p = p
                def forward(self, x: torch.Tensor):
                    keep = torch.empty(x.size(0), x.size(1), 1, 1, dtype=torch.float32, device=x.device).bernoulli_(1 - self.p)
                    return x * keep / (1 - self.p)
            """,
            applicability=Applicability.SAFE,
            name="dropout-mask-on-the-current-gpu",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Pointer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.score = nn.Linear(8, 1)
                def forward(self, states, lengths):
                    order = torch.cuda.LongTensor([0, 2, 1])
                    empty = torch.cuda.FloatTensor()
                    picked = torch.cuda.ByteTensor(states.size()).zero_()
                    scale = torch.cuda.FloatTensor(lengths)
                    return self.score(states[order]), empty, picked, scale
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Pointer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.score = nn.Linear(8, 1)
                def forward(self, states, lengths):
                    order = torch.tensor([0, 2, 1], dtype=torch.int64, device=states.device)
                    empty = torch.empty(0, dtype=torch.float32, device=states.device)
                    picked = torch.empty(states.size(), dtype=torch.uint8, device=states.device).zero_()
                    scale = torch.cuda.FloatTensor(lengths)
                    return self.score(states[order]), empty, picked, scale
            """,
            applicability=Applicability.UNSAFE,
            count=4,
            name="data-no-arguments-a-size-and-a-name",
        ),
    ]

    def setup(self) -> None:
        self._program = self.context.shared(CudaProgram)
        self._found: list[tuple[cst.Call, PendingFix | None]] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        qualified = self.context.names.qualified_name(func, among=LEGACY_CUDA_TENSOR_TYPES)
        if qualified is None:
            return
        method = self._program.model_method_here()
        if method is None:
            return
        if not self.context.flow.reached_in_cpu_mode(node, self.context.ancestors(node)):
            return  # under a CUDA test (`if torch.cuda.is_available():`): its other side is the CPU's
        self._found.append((node, self._fix(node, method, qualified)))

    def leave_Module(self, node: cst.Module) -> None:
        ours = {id(call) for call, _ in self._found}
        if any(id(unavoidable.use.node) not in ours for unavoidable in self._program.hard_coded_cuda()):
            # A GPU-only program (other CUDA uses it cannot run without, no CPU mode): there the
            # current GPU is the model's, one GPU or a DataParallel replica's.
            return
        for call, fix in self._found:
            self.report(call, fix=fix)

    def _fix(self, call: cst.Call, method: cst.FunctionDef, qualified: str) -> PendingFix | None:
        written = dotted_name(call.func) or ""
        if not written.endswith(".cuda." + qualified.rsplit(".", 1)[-1]) or any(arg.keyword or arg.star for arg in call.args):
            return None  # `from torch.cuda import FloatTensor`, keywords: rewrite by hand
        torch_name = written[: -len(".cuda." + qualified.rsplit(".", 1)[-1])]
        factory = legacy_constructor_factory(call.args)
        chosen = model_data_device(self, call, method)
        if factory is None or chosen is None:
            return None
        device, applicability = chosen
        dtype = LEGACY_TENSOR_DTYPES[qualified.rsplit(".", 1)[-1].removesuffix("Tensor")]
        arguments = ", ".join(self.context.code_for_node(arg.value) for arg in call.args) or "0"
        replacement = f"{torch_name}.{factory}({arguments}, dtype={torch_name}.{dtype}, device={device})"
        return self.make_fix(NodeEdit(call, replacement), applicability=applicability)
