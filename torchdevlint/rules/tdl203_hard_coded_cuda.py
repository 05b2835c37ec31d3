"""TDL203 hard-coded-cuda."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.cuda_uses import DEVICE_VARIABLE, CudaProgram, CudaUse, UnavoidableCudaUse, UseKind
from torchdevlint.analysis.names import module_bound_names
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.project import TorchVersionOptions
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.shared_fixes import route_through

_DEVICE_NAME = DEVICE_VARIABLE


class HardCodedCuda(Rule):
    """
    ## What it does
    Finds CUDA hard-coded in a program that has no CPU mode at all: `.cuda()`, `"cuda"`
    handed to something that allocates there (`.to("cuda")`, `device="cuda"`,
    `map_location="cuda"`), a device variable bound to CUDA (`device =
    torch.device("cuda")`, `device = "cuda"`), legacy `torch.cuda.FloatTensor(...)` constructors (also through
    another name) and the `torch.cuda` calls that fail without a GPU (`synchronize`,
    `set_device`, `Event` ...). A program has a CPU mode when it checks for a GPU, picks a
    device with a CPU fallback or has a setting or option for the CPU, or when a file of the
    project imports it along with a file defining such an option (`--gpu_ids` offering -1
    for the CPU in an options module); in such a program the same uses are correctness
    bugs, reported by TDL007 instead. Not reported either: uses the
    flow model shows the program never reaches (after `assert torch.cuda.is_available()`, or
    in a branch a module constant rules out: `if FusedNorm is not None:` after `FusedNorm =
    None`),
    code kept for the GPU as TDL007 reads it (a test about the device, a function named for
    the GPU or decorated with a GPU condition such as `@RunIf(min_cuda_gpus=1)`, a `try` with
    a handler, decorators and defaults), and distributed programs (they import
    `torch.distributed` or Horovod), which run one process per GPU.

    It is a portability rule, off by default: a GPU-only notebook, a benchmark or utilities
    ported from an old code base are right as they are on the machine they were written
    for. Turn it on where code must also run on CPU-only CI machines, on Apple `mps` or on
    other accelerators.

    ## Why is this bad?
    Each hard-coded use fails where there is no CUDA GPU: "AssertionError: Torch not
    compiled with CUDA enabled" on a CPU-only build or a Mac, "RuntimeError: Found no NVIDIA
    driver on your system" elsewhere. One device variable chosen by availability runs the
    same code everywhere.

    ## Fix safety
    Unsafe. The fix adds one device variable after the imports, chosen by availability
    (`torch.accelerator.current_accelerator()` if `torch.accelerator.is_available()`, else
    the CPU; `torch.cuda.is_available()` when `torch-version` is older than 2.6), and routes
    every hard-coded use it can through it: `.cuda()` becomes `.to(device)`, `"cuda"`
    becomes `device`, `torch.cuda.FloatTensor(...)` becomes `torch.FloatTensor(...).to(device)`.
    A device variable the file binds to CUDA is chosen by availability where it is bound
    instead (a string stays a string: `"cuda" if torch.cuda.is_available() else "cpu"`).
    The program then runs on the CPU or another accelerator where it failed, which changes
    what it does there. `.cuda(n)`, `"cuda:n"`, the `torch.cuda` calls, uses where the name
    `device` means something else, and (but for its own binding) files that already bind
    `device` get no fix.

    ## Options
    - `torch-version`: the oldest PyTorch the code must run on; the fix uses
      `torch.accelerator` from 2.6 on. Unset, it is the lower bound the project declares for
      torch (`torch>=2.2` in `pyproject.toml`, `setup.cfg`, `setup.py` or a
      `requirements*.txt` beside the configuration), else `"2.6"`.
    """

    code = "TDL203"
    slug = "hard-coded-cuda"
    reads_the_project = True
    message = "CUDA is hard-coded: this program has no CPU mode and fails where there is no CUDA GPU"
    fix_title = "Use one device variable chosen by availability"
    default_enabled = False
    requires_any_text = ("cuda",)
    Options = TorchVersionOptions
    options: TorchVersionOptions

    VALID = [
        Valid(
            """
            import torch

            FusedNorm = None

            def norm(dim):
                if FusedNorm is not None:
                    return FusedNorm(dim).cuda()
                return torch.nn.LayerNorm(dim)
            """,
            name="branch-a-module-constant-rules-out",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(2, 2).cuda()
            """,
            name="a-program-with-a-cpu-mode-is-tdl007s",
        ),
        Valid(
            """
            import torch
            device = torch.accelerator.current_accelerator()
            model = torch.nn.Linear(2, 2).to(device)
            with torch.autocast("cuda"):
                pass
            if device.type == "cuda":
                torch.backends.cudnn.benchmark = True
            """,
            name="device-neutral-code",
        ),
        Valid(
            """
            import torch
            import horovod.torch as hvd
            hvd.init()
            torch.cuda.set_device(hvd.local_rank())
            model = torch.nn.Linear(8, 2).cuda()
            """,
            name="a-horovod-program-one-process-per-gpu",
        ),
        Valid(
            """
            import torch
            import torch.distributed
            model = torch.nn.Linear(8, 2).cuda()
            if torch.distributed.is_initialized():
                model = torch.nn.parallel.DistributedDataParallel(model)
            """,
            name="a-distributed-program-importing-the-package-by-its-full-name",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            device = torch.device("cuda")
            gpu_device = "cuda"
            model = torch.nn.Linear(4, 2).to(device)
            batch = torch.randn(8, 4).to(gpu_device)
            """,
            fixed="""
            import torch

            device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
            gpu_device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(4, 2).to(device)
            batch = torch.randn(8, 4).to(gpu_device)
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="device-variables-bound-to-cuda",
        ),
        Invalid(
            """
            import torch

            model = torch.nn.Linear(4, 2).cuda()
            inputs = torch.randn(8, 4).to("cuda")
            mask = torch.ones(8, device="cuda")
            """,
            fixed="""
            import torch
            device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

            model = torch.nn.Linear(4, 2).to(device)
            inputs = torch.randn(8, 4).to(device)
            mask = torch.ones(8, device=device)
            """,
            applicability=Applicability.UNSAFE,
            count=3,
            name="documented-gpu-only-script",
            in_docs=True,
        ),
        Invalid(
            """
            import time
            import torch as T

            def benchmark(model, batch):
                model = model.cuda(1)
                batch = T.cuda.FloatTensor(batch)
                T.cuda.synchronize()
                start = time.time()
                model(batch.cuda(non_blocking=True))
                return time.time() - start
            """,
            fixed="""
            import time
            import torch as T
            device = T.accelerator.current_accelerator() if T.accelerator.is_available() else T.device("cpu")

            def benchmark(model, batch):
                model = model.cuda(1)
                batch = T.FloatTensor(batch).to(device)
                T.cuda.synchronize()
                start = time.time()
                model(batch.to(device, non_blocking=True))
                return time.time() - start
            """,
            applicability=Applicability.UNSAFE,
            count=4,
            name="an-alias-and-what-gets-no-fix",
        ),
    ]

    def setup(self) -> None:
        self._program = self.context.shared(CudaProgram)

    def leave_Module(self, node: cst.Module) -> None:
        reported = self._program.hard_coded_cuda()
        if not reported:
            return
        fix = self._fix(node, reported)
        for found in reported:
            self.report(found.use.node, fix=fix)

    # ---- the fix: one device variable, every use through it -----------------------------------

    def _fix(self, module: cst.Module, reported: list[UnavoidableCudaUse]) -> PendingFix | None:
        torch = self.context.names.local_name_for("torch")
        last_import = self._last_import(module)
        if torch is None or last_import is None:
            return None
        if self.options.has_accelerator_api:
            choice = (f"{torch}.accelerator.current_accelerator() if {torch}.accelerator.is_available() "
                      f'else {torch}.device("cpu")')
        else:
            choice = f'{torch}.device("cuda" if {torch}.cuda.is_available() else "cpu")'
        # The file's own CUDA device variables are chosen by availability where they are bound.
        chosen = [self._choose_by_availability(found.use, choice, torch) for found in reported
                  if found.use.kind is UseKind.DEVICE_VARIABLE and found.use.index is None]
        routed: list[NodeEdit] = []
        if _DEVICE_NAME not in module_bound_names(module):
            routed = [edit for found in reported if not found.device_shadowed
                      for edit in route_through(found.use, _DEVICE_NAME, self.context.code_for_node)]
        if routed:
            routed.insert(0, NodeEdit.insert_line_after(last_import, f"{_DEVICE_NAME} = {choice}"))
        if not chosen and not routed:
            return None
        return self.make_fix(*chosen, *routed, applicability=Applicability.UNSAFE)

    @staticmethod
    def _choose_by_availability(use: CudaUse, choice: str, torch: str) -> NodeEdit:
        if isinstance(use.node, cst.Call):
            return NodeEdit(use.node, choice)
        # A string stays a string: the code may compare it (`if device == "cuda":`).
        return NodeEdit(use.node, f'"cuda" if {torch}.cuda.is_available() else "cpu"')

    @staticmethod
    def _last_import(module: cst.Module) -> cst.SimpleStatementLine | None:
        """The last import of the leading block of imports (a docstring may come first)."""
        last: cst.SimpleStatementLine | None = None
        for statement in module.body:
            if isinstance(statement, cst.SimpleStatementLine) and all(
                    isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
                last = statement
            elif isinstance(statement, cst.SimpleStatementLine) and last is None and all(
                    isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
                    for small in statement.body):
                continue
            else:
                break
        return last

