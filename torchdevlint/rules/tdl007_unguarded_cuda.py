"""TDL007 unguarded-cuda."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.cuda_uses import (
    CudaProgram,
    CudaUse,
    UseKind,
    cuda_uses,
    device_variable_use,
    kept_for_the_gpu,
)
from torchdevlint.analysis.devices import LEGACY_CUDA_TENSOR_TYPES
from torchdevlint.analysis.flow.values import ANYWHERE_PLACE, Off
from torchdevlint.analysis.tree import descendants, top_level_definition, under_main_guard
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof
from torchdevlint.shared_fixes import route_through

if TYPE_CHECKING:
    from torchdevlint.project_scan import CpuModeOption

_ANYWHERE_ONLY = frozenset({ANYWHERE_PLACE})


@dataclass(frozen=True)
class _Site:
    node: cst.CSTNode
    # The node visited when it was found (its ancestors are the path to it, nearest first).
    visited: cst.CSTNode
    ancestors: tuple[cst.CSTNode, ...]
    fix: PendingFix | None
    # A call of a name that may hold a legacy CUDA constructor.
    alias: bool = False
    # For `x.cuda()` / `x.to("cuda")`: what is moved.
    moved: cst.BaseExpression | None = None


class UnguardedCuda(Rule):
    """
    ## What it does
    In a program that offers a CPU mode, finds CUDA used where that mode goes. A program
    offers one when it checks for a GPU (`torch.cuda.is_available()` other than as a
    requirement), picks a device with a CPU fallback (`"cuda" if opt.use_gpu else "cpu"`),
    tests a setting that names the CPU (`args.no_cuda`, `args.cpu`, `device.type == "cpu"`),
    has a command-line option for it (`--cpu`, `--no-cuda`, a `--cuda` switch, a `--device`
    option offering `cpu`, a `--gpu_ids` option whose help offers `-1` for the CPU), or tests
    a GPU setting (`if opt.use_gpu: model = model.cuda()`). The option may be defined in
    another file of the project: a file is in a program with a CPU mode when some file of
    the project imports both it and the file defining the option, directly or not (a
    training script importing `options/base_options.py` and the models that call
    `.cuda()`); the message then names that script and the option. So may the fallback: a
    module a script imports, directly or not, runs in that script's CPU mode where the script
    picks its device with a CPU fallback (`device = torch.device("cuda:0" if
    torch.cuda.is_available() else "cpu")`, the policy networks an RL script builds); a
    fallback at a module's top level reaches the scripts importing that module too, one in a
    function or under a main guard only what its own file imports. So does a script that
    moves its model or data under `if torch.cuda.is_available():` (its own run reaches what
    it imports; an unguarded `.cuda()` of its own is reported in it, and the modules' fail
    that CPU run once it is mended). The CPU mode of a script
    that imports a module does not reach the module's own demo under its main guard, which
    runs only when the module is the script. Nor a module-level class or function of the
    module that no file of that script's program names (a GPU prefetcher class only the
    training script builds, where the inference script brings the CPU mode): only a program
    that uses it runs its code. A file that looks definitions up by a computed name
    (`getattr(models, config["arch"])` on the module or one taking its names with `import *`,
    `globals()`, the `eval` builtin, `importlib`) may use any of them, and a decorated one may be
    registered where such a name finds it.
    In a distributed program (it imports `torch.distributed`) a GPU setting alone is not
    enough: there `--use_cuda` may say where to keep features, on a run that needs GPUs. Nor
    is a GPU count compared so that no GPU and one GPU answer alike (`if num_gpus > 1:`
    chooses between one GPU and several, not between a GPU and the CPU), nor a GPU setting
    whose side without the GPU calls `.cuda()` itself (`if n_gpu > 1 and gpu_train: net =
    DataParallel(net).cuda()` / `else: net = net.cuda()`: both sides run on the GPU), nor one
    whose only side hands the setting on or reports it (`if args.gpus: config.GPUS =
    args.gpus`, `if args.gpu is not None: print(...)`), nor a test whether one GPU index was
    given (`if args.gpu is not None:`, as in PyTorch's ImageNet example: the other way is the
    default GPU, or all of them through DataParallel). Nor a GPU setting
    tested in a method of a model class (`if self.cuda:` of a layer built with `cuda=True`,
    `if next(self.parameters()).is_cuda:`): that is the model working wherever it is put, not
    the program choosing the CPU; a demo under `if __name__ == "__main__":` of such a module
    that calls `.cuda()` is a GPU-only script. A class that is a Module only through a base
    class of another file of the project (`class Pix2PixHDModel(BaseModel)`) is the program's
    model wrapper, built from its options: its `if len(self.gpu_ids) > 0:` is the program
    choosing.

    The CPU mode is the run with no GPU in which every setting chooses the CPU: availability
    checks are false, `use_cuda`/`opt.use_gpu`/`args.gpu` are off, `args.no_cuda` is on, a
    device setting is `"cpu"`, `x.is_cuda` is false. A function's parameter that every call
    in the file leaves at a literal default keeps it (`def one_hot(i, n, cuda=True)` called
    as `one_hot(i, n)` moves to the GPU in the CPU mode too). The flow model follows those answers
    through assignments, attributes, parameters and calls, function by function: a use is
    reported when the CPU mode reaches it. Uses are `.cuda()`, `"cuda"` handed to something
    that allocates there (`.to("cuda")`, `device="cuda"` of a torch function,
    `map_location="cuda"`), legacy `torch.cuda.FloatTensor(...)` constructors (also through a
    name such as `Tensor = torch.cuda.FloatTensor`), and the `torch.cuda` calls that fail
    without a GPU (`set_device`, `synchronize`, `get_device_name`, `Event`, `Stream`,
    `torch.cuda.device(n)`; seeding, `empty_cache` and memory counters do not fail), and
    `x.pin_memory()`, which a CPU-only build refuses ("Cannot access accelerator device when
    none is available"; a batch class's own `pin_memory()` method is called only where the
    DataLoader pins). So is a function's own device variable bound to CUDA in its body and
    handed to its factories or moves (`device = torch.device("cuda")`, then
    `torch.arange(n, device=device)`), reported where it is bound; not a device parameter the
    function replaces (`if device.type == "cpu": device = torch.device("cuda:0")`).

    Not reached by the CPU mode: a branch its tests do not take (`if use_cuda:`, the
    `else` of `if args.cpu:`, `x.cuda() if use_cuda else x`, `use_cuda and x.cuda()`), code
    after `assert torch.cuda.is_available()` or `if not torch.cuda.is_available():
    sys.exit(...)`, code after a call of a function of the file that raises on every way out
    without a GPU (`else: raise NotImplementedError("needs a GPU")`), a function the file
    calls only from such code, a function named for the
    GPU (`def to_cuda(x)`) that the file does not call where the CPU mode goes, or a function
    decorated with a GPU condition (`@pytest.mark.skipif(not torch.cuda.is_available(),
    ...)`). A test about the device whose answer the model cannot
    tell, and distributed-only code (`if dist.is_initialized():`, which NCCL runs on GPUs),
    guard both ways; so does a `try` with a handler. Comparisons, `autocast` and `GradScaler`
    device types, devices merely stored, default values and docstrings are not uses, nor is
    a call of another module's function named `cuda` (`utils.cuda(inputs)`, a helper that may
    well ask for a GPU itself). A script's `if torch.cuda.is_available():` moves whose `else:`
    raises or exits give the files it imports no CPU mode: the program stops there.
    Programs with no CPU mode are GPU-only by design and are not reported (the off-by-default
    portability rule TDL203 is for those). So are programs that set up an NCCL process group
    whatever their settings (`dist.init_process_group("nccl")` in no `if`): NCCL runs only
    on CUDA devices, so such a program has no CPU mode, even where it prints
    `torch.cuda.is_available()`.

    A test in a top-level function that a script (a file with a main guard or a loop at its
    top level) never calls, passes on or decorates is no CPU mode: the program never runs it.

    A `--cuda` option that cannot be switched off (`type=bool` with a true default, where
    `bool("False")` is `True`, or `store_true` with a true default) still guards what its
    tests hold: TDL014 reports the option, once, with its fix; the `.cuda()` calls under
    `if args.cuda:` are right once the switch switches.

    A guard that names `torch.cuda.is_available` without calling it is TDL017's, and a
    legacy CUDA constructor in a model's methods TDL022's (its fix makes the tensor where the
    model's data is, which serves the CPU mode too).

    ## Why is this bad?
    Without a GPU, `.cuda()` and a `"cuda"` device fail with "AssertionError: Torch not
    compiled with CUDA enabled" or "RuntimeError: Found no NVIDIA driver on your system",
    although the program was written to run on the CPU too.

    ## Fix safety
    Unsafe. Where a device variable with a CPU fallback is in scope, `.cuda()` becomes
    `.to(device)`, the `"cuda"` string becomes that variable, and `torch.cuda.FloatTensor(...)`
    becomes `torch.FloatTensor(...).to(device)`: on a machine without a GPU the program now
    runs on the CPU instead of failing, which changes what it does there. `.cuda(n)`,
    `"cuda:n"`, constructors through another name and the `torch.cuda` calls get no fix.

    ## Options
    None.
    """

    code = "TDL007"
    slug = "unguarded-cuda"
    reads_the_project = True
    message = "CUDA is used unguarded in a program that falls back to the CPU; it fails without a GPU"
    fix_title = "Use the device variable"
    proof = RuntimeProof(NO_GPU, host="cpu")
    requires_any_text = ("cuda", "is_available")

    VALID = [
        Valid(
            """
            import torch
            import utils

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            for inputs, targets in loader:
                inputs = utils.cuda(inputs)
            """,
            name="a-helper-of-another-module-named-cuda",
        ),
        Valid(
            """
            import argparse
            import torch

            class Config:
                GPUS = "0"

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpus", type=str)
            args = parser.parse_args()
            if args.gpus:
                Config.GPUS = args.gpus
            gpus = [int(index) for index in Config.GPUS.split(",")]
            model = torch.nn.DataParallel(torch.nn.Linear(4, 2), device_ids=gpus).cuda()
            """,
            name="a-gpu-setting-only-handed-on-is-no-cpu-mode",
        ),
        Valid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", type=bool, default=True, help="use CUDA")
            args = parser.parse_args()
            model = torch.nn.Linear(2, 2)
            if args.cuda:
                model = model.cuda()
            """,
            name="a-switch-that-cannot-be-switched-off-is-tdl014s",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            def to_var(x):
                # A helper the script never calls: no choice the program makes.
                return x.cuda() if torch.cuda.is_available() else x

            generator = nn.Linear(100, 784)
            generator.cuda()
            for step in range(100):
                noise = torch.randn(64, 100).cuda()
                images = generator(noise)
            """,
            name="a-cpu-fallback-only-in-a-helper-the-script-never-calls",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Tiler(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = nn.Conv2d(3, 8, 3)

                def predict(self, image):
                    # The model follows where it was put, on either device.
                    if next(self.parameters()).is_cuda:
                        image = image.cuda()
                    return self.head(image)

            if __name__ == "__main__":
                net = Tiler()
                net.cuda()
                print(net.predict(torch.rand(1, 3, 32, 32)).shape)
            """,
            name="a-model-that-follows-its-device-and-a-gpu-only-demo",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            # A loss without a class weight holds no tensors: moving it touches no GPU.
            criterion = nn.CrossEntropyLoss().cuda()
            """,
            name="a-loss-without-tensors-moved",
        ),
        Valid(
            """
            import argparse
            import torch
            import torch.distributed as dist
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", type=int, default=None)
            parser.add_argument("--multiprocessing-distributed", action="store_true")
            args = parser.parse_args()
            model = torch.nn.Linear(4, 2)
            if args.gpu is not None:
                model = model.cuda(args.gpu)
            else:
                # No GPU chosen: every GPU (a distributed switch off is no CPU mode).
                model = torch.nn.DataParallel(model).cuda()
            """,
            name="a-distributed-switch-off-and-no-gpu-index",
        ),
        Valid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu-index", type=int, default=0)
            args = parser.parse_args()
            if torch.cuda.is_available():
                args.device = torch.device("cuda")
            else:
                args.device = torch.device("cpu")
                args.gpu_index = -1
            with torch.cuda.device(args.gpu_index):
                model = torch.nn.Linear(2, 2).to(args.device)
            """,
            name="a-device-context-given-minus-one-in-the-cpu-mode",
        ),
        Valid(
            """
            import os
            import torch
            import torch.distributed as dist

            def main():
                print("CUDA available:", torch.cuda.is_available())
                dist.init_process_group("nccl")
                rank = int(os.environ["LOCAL_RANK"])
                torch.cuda.set_device(rank)
                model = build().cuda(rank)
                if args.use_cuda:
                    features = features.cuda()
            """,
            name="nccl-program-needs-gpus-whatever-it-prints",
        ),
        Valid(
            """
            import torch
            use_cuda = torch.cuda.is_available()
            device = torch.device("cuda" if use_cuda else "cpu")
            model = torch.nn.Linear(2, 2)
            if use_cuda:
                model.cuda()
            x = torch.zeros(2).cuda() if torch.cuda.is_available() else torch.zeros(2)
            if device.type == "cuda":
                torch.backends.cudnn.benchmark = True
            with torch.autocast("cuda"):
                pass
            """,
            name="guarded-uses-comparisons-autocast",
        ),
        Valid(
            """
            import sys
            import torch
            print(torch.cuda.is_available())
            if not torch.cuda.is_available():
                sys.exit("this script needs a GPU")
            model = torch.nn.Linear(2, 2).cuda()
            """,
            name="earlier-exit",
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(2, 2).cuda()
            batch = torch.zeros(2, device="cuda")
            """,
            name="gpu-only-program-never-checks",
        ),
        Valid(
            '''
            import pytest
            import torch
            DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
            @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
            def test_on_gpu():
                """Runs on "cuda"."""
                assert torch.ones(1, device="cuda").is_cuda
            def to_cuda(batch):
                return [t.cuda() for t in batch]
            def run(device="cuda"):
                try:
                    return torch.ones(1).to("cuda")
                except RuntimeError:
                    return None
            ''',
            name="decorated-helper-default-try",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            from lightning.fabric.plugins import MixedPrecision
            HAS_GPU = torch.cuda.is_available()
            precision = MixedPrecision(precision="16-mixed", device="cuda")
            devices = [torch.device("cuda", 0)]
            def all_reduce_mean(value):
                if not dist.is_initialized():
                    return value
                t = torch.tensor([value], device="cuda")
                dist.all_reduce(t)
                return t.item() / dist.get_world_size()
            """,
            name="stored-devices-and-distributed-only-code",
        ),
        Valid(
            """
            import argparse
            import torch

            class Config:
                use_gpu = True

            opt = Config()
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", type=int, default=None)
            args = parser.parse_args()
            device = torch.device("cuda" if opt.use_gpu else "cpu")

            def to_gpu(batch):
                return [t.cuda() for t in batch]

            def step(model, x):
                return model(x.cuda())

            def train(model, x, use_cuda):
                if not use_cuda:
                    return model(x)
                torch.cuda.synchronize()
                return step(model, x)

            if args.gpu is not None:
                torch.cuda.set_device(args.gpu)
            if opt.use_gpu:
                model = torch.nn.Linear(2, 2).cuda()
                train(model, torch.zeros(2), True)
            Tensor = torch.cuda.FloatTensor if opt.use_gpu else torch.FloatTensor
            weights = Tensor([1.0, 2.0])
            if next(model.parameters()).is_cuda:
                weights = weights.cuda()
            """,
            name="settings-keep-the-cpu-mode-out",
        ),
        Valid(
            """
            import argparse
            import torch
            import torch.distributed as dist

            parser = argparse.ArgumentParser()
            parser.add_argument("--use_cuda", default=True, type=str2bool,
                                help="keep the extracted features on the GPU")
            args = parser.parse_args()
            model = torch.nn.Linear(2, 2).cuda()
            features = torch.zeros(4, 2)
            if args.use_cuda:
                features = features.cuda()
            torch.cuda.synchronize()
            """,
            name="a-gpu-setting-in-a-distributed-program-is-no-cpu-mode",
        ),
        Valid(
            """
            import torch

            def train(rank, num_gpus, model):
                device = torch.device("cuda", rank)
                model = model.to(device)
                if num_gpus > 1:
                    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
                torch.cuda.synchronize()
                return model
            """,
            name="one-gpu-or-several-is-no-cpu-mode",
        ),
        Valid(
            """
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            gpus = torch.cuda.device_count()
            for index in range(gpus):
                print(index, torch.cuda.get_device_name(index))
            """,
            name="a-loop-over-the-gpus-that-a-cpu-only-machine-never-enters",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            def build(width):
                net = nn.Linear(width, 2)
                if torch.cuda.is_available():
                    net = net.cuda()
                else:
                    raise NotImplementedError("training needs a GPU")
                return net

            def evaluate(net, batches):
                for x in batches:
                    print(net(x.cuda()).argmax(1))

            def main():
                net = build(8)
                evaluate(net, [torch.randn(4, 8)])

            main()
            """,
            name="a-helper-that-raises-without-a-gpu-before-the-rest-runs",
        ),
        Valid(
            """
            import torch
            from torch import nn
            from settings import config

            use_gpu = config["use_gpu"]
            gpus = config["gpus"]
            net = nn.Linear(8, 2)
            if gpus > 1 and use_gpu:
                net = nn.DataParallel(net).cuda()
            else:
                net = net.cuda()
            anchors = torch.rand(16, 4).cuda()
            out = net(torch.rand(4, 8).cuda())
            """,
            name="a-gpu-setting-whose-both-sides-use-cuda-chooses-no-cpu-mode",
        ),
        Valid(
            """
            import torch
            from torch import nn

            net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
            if torch.cuda.device_count() > 1:
                net = nn.DataParallel(net)
            net.cuda()
            features = torch.rand(4, 8).cuda()
            print(net(features).argmax(1))
            """,
            name="counting-the-gpus-chooses-how-many-not-the-cpu",
        ),
        Valid(
            """
            import torch

            def load_engine(path, device):
                if device.type == "cpu":
                    device = torch.device("cuda:0")  # the engine runs on a GPU only
                return torch.zeros(1, device=device), path

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            """,
            name="a-device-handed-in-and-replaced",
        ),
        Valid(
            """
            import argparse
            import torch
            import torch.nn as nn

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", default=None, type=int, help="GPU id to use.")
            args = parser.parse_args()
            if args.gpu is not None:
                print("Use GPU: {} for training".format(args.gpu))
            model = nn.DataParallel(nn.Linear(8, 2)).cuda()
            for images, target in [(torch.randn(4, 8), torch.zeros(4, dtype=torch.long))]:
                if args.gpu is not None:
                    images = images.cuda(args.gpu, non_blocking=True)
                target = target.cuda(args.gpu, non_blocking=True)
                loss = nn.functional.cross_entropy(model(images), target)
            """,
            name="a-gpu-index-chosen-or-all-gpus-used",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import numpy as np
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action="store_true")
            args = parser.parse_args()

            def one_hot(index, size, cuda=True):
                row = np.zeros((1, size), np.float32)
                row[0][index] = 1
                encoded = torch.from_numpy(row)
                if cuda:
                    encoded = encoded.cuda()
                return encoded

            history = torch.cat([one_hot(word, 100) for word in (3, 7)])
            """,
            name="a-gpu-default-the-caller-leaves-in-place",
        ),
        Invalid(
            """
            import torch

            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            scores = torch.zeros(4, 3)
            scores = scores.to(0)  # a GPU by its number: cuda:0
            """,
            name="a-gpu-by-its-number",
        ),
        Invalid(
            """
            import numpy as np
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            def get_batch(rows):
                x = torch.stack([torch.from_numpy(np.asarray(row)) for row in rows])
                return x.pin_memory().to(device, non_blocking=True)
            def get_batch_pinned_on_the_gpu(rows):
                x = torch.stack([torch.from_numpy(np.asarray(row)) for row in rows])
                if device == "cuda":
                    x = x.pin_memory().to(device, non_blocking=True)
                return x
            class Batch:
                def __init__(self, x):
                    self.x = x
                def pin_memory(self):
                    self.x = self.x.pin_memory()
                    return self
            """,
            name="pinned-memory-in-the-cpu-mode",
        ),
        Invalid(
            """
            import torch

            def gpu_name():
                return torch.cuda.get_device_name(0)

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            print(f"training on {device} ({gpu_name()})")
            """,
            name="helper-named-for-the-gpu-called-in-cpu-mode",
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist

            def main(args):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                if args.distributed:
                    dist.init_process_group("nccl")
                torch.cuda.synchronize()
            """,
            name="nccl-only-when-distributed",
        ),
        Invalid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            for images, labels in loader:
                images, labels = images.cuda(), labels.to("cuda")
            """,
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="documented-cuda-beside-a-cpu-fallback",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            inputs = torch.randn(8, 4).cuda()
            targets = torch.zeros(8, dtype=torch.long).to("cuda")
            mask = torch.ones(8, device="cuda", dtype=torch.bool)
            weights = torch.cuda.FloatTensor([1.0, 2.0])
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            inputs = torch.randn(8, 4).to(device)
            targets = torch.zeros(8, dtype=torch.long).to(device)
            mask = torch.ones(8, device=device, dtype=torch.bool)
            weights = torch.FloatTensor([1.0, 2.0]).to(device)
            """,
            applicability=Applicability.UNSAFE,
            count=4,
            name="routed-through-device-variable",
        ),
        Invalid(
            """
            import torch
            def train(model, loader):
                for x, y in loader:
                    x, y = x.cuda(non_blocking=True), y.cuda(0)
            if torch.cuda.is_available():
                print("training on", torch.cuda.get_device_name())
            """,
            count=2,
            name="no-device-variable-no-fix",
        ),
        Invalid(
            """
            import torch

            class Config:
                use_gpu = True

            opt = Config()
            device = torch.device("cuda" if opt.use_gpu else "cpu")
            Tensor = torch.cuda.FloatTensor

            def attention_mask(lengths, width):
                positions = torch.arange(width).cuda()
                return positions[None, :] < lengths[:, None]

            def sample_noise(n):
                return Tensor(n, 16).normal_()

            torch.cuda.set_device(0)
            model = torch.nn.Linear(16, 2).to(device)
            """,
            fixed="""
            import torch

            class Config:
                use_gpu = True

            opt = Config()
            device = torch.device("cuda" if opt.use_gpu else "cpu")
            Tensor = torch.cuda.FloatTensor

            def attention_mask(lengths, width):
                positions = torch.arange(width).to(device)
                return positions[None, :] < lengths[:, None]

            def sample_noise(n):
                return Tensor(n, 16).normal_()

            torch.cuda.set_device(0)
            model = torch.nn.Linear(16, 2).to(device)
            """,
            applicability=Applicability.UNSAFE,
            count=3,
            name="cpu-mode-from-a-config-class",
        ),
        Invalid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--no-cuda", action="store_true")
            args = parser.parse_args()
            use_cuda = not args.no_cuda
            model = torch.nn.Linear(2, 2)
            if use_cuda:
                model = model.cuda()
            else:
                model = model.to("cuda")
            inputs = torch.zeros(8, 2)
            inputs = inputs.cuda() if use_cuda else inputs
            start = torch.cuda.Event(enable_timing=True)
            """,
            count=2,
            name="no-cuda-option-and-the-wrong-branch",
        ),
        Invalid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu_ids", type=str, default="0", help="e.g. 0 or 0,1; -1 for the CPU")
            opt = parser.parse_args()
            gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
            net = torch.nn.Linear(2, 2)
            if len(gpu_ids) > 0:
                net.cuda(gpu_ids[0])
            batch = torch.zeros(8, 2).cuda()
            """,
            name="gpu-ids-option-with-a-cpu-value",
        ),
        Invalid(
            """
            import torch
            from config import opt

            def train(**kwargs):
                opt.parse(kwargs)
                torch.cuda.set_device(opt.ctx)
                model = torch.nn.LSTM(8, 8)
                if opt.use_gpu:
                    model = model.cuda()
                hidden = torch.zeros(1, 1, 8).cuda()
            """,
            count=2,
            name="a-gpu-setting-from-a-config-module",
        ),
        Invalid(
            """
            import argparse
            import torch

            def neighbour_index(x, k):
                batch = x.size(0)
                idx = x.topk(k, dim=-1)[1]
                device = torch.device("cuda")
                base = torch.arange(0, batch, device=device).view(-1, 1, 1) * x.size(1)
                return (idx + base).view(-1)

            parser = argparse.ArgumentParser()
            parser.add_argument("--no_cuda", action="store_true")
            args = parser.parse_args()
            device = torch.device("cuda" if not args.no_cuda and torch.cuda.is_available() else "cpu")
            print(neighbour_index(torch.randn(2, 8, 8).to(device), 3))
            """,
            name="a-helper-hard-codes-its-own-device",
        ),
    ]

    def setup(self) -> None:
        self._sites: list[_Site] = []
        self._program = self.context.shared(CudaProgram)
        # Module-level definitions (by id) the file names outside their own code.
        self._used_here: dict[int, bool] = {}

    # ---- reached in the CPU mode ---------------------------------------------------------

    def _reached_in_cpu_mode(self, site: _Site) -> bool:
        """Whether the program's CPU mode reaches the use, as the flow model sees the tests
        around it; a test about the device whose answer it cannot tell guards both ways."""
        if self._program.exits_without_gpu(site.ancestors):
            return False
        if not self.context.flow.reached_in_cpu_mode(site.visited, site.ancestors):
            return False
        return not kept_for_the_gpu(site.visited, site.ancestors, self.context.names, self.context.flow)

    # ---- sites -------------------------------------------------------------------------------

    def _add(self, node: cst.CSTNode, fix: PendingFix | None, visited: cst.CSTNode, *,
             alias: bool = False, moved: cst.BaseExpression | None = None) -> None:
        """Collect a use; `visited` is the node being visited (on the path), `node` is reported."""
        self._sites.append(_Site(node, visited, tuple(self.context.ancestors(visited)), fix, alias, moved))

    def visit_Call(self, node: cst.Call) -> None:
        for use in cuda_uses(node, self.context.names, self._program.constructor_aliases, self.context.flow,
                             self.context.ancestors(node)):
            if use.kind is UseKind.LEGACY_CONSTRUCTOR and self._program.model_method_here() is not None:
                continue  # made on the current GPU, not the model's: TDL022 reports it with its fix
            moved = node.func.value if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("cuda", "to") \
                else None
            self._add(use.node, self._fix(use), node, alias=use.kind is UseKind.ALIAS_CALL, moved=moved)

    def visit_Assign(self, node: cst.Assign) -> None:
        """`device = torch.device("cuda")` inside a function whose factories or moves then use
        it (`torch.arange(n, device=device)`): CUDA hard-coded where the program chose its
        device elsewhere."""
        if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
            return
        use = device_variable_use(node, self.context.names)
        if use is None:
            return
        ancestors = self.context.ancestors(node)
        # A statement of the function's own body (line, block, function), on every path through it.
        function = ancestors[2] if len(ancestors) > 2 and type(ancestors[2]) is cst.FunctionDef else None
        if function is None:
            return
        name = node.targets[0].target.value
        if any(param.name.value == name for param in (*function.params.posonly_params, *function.params.params,
                                                      *function.params.kwonly_params)):
            return  # a device handed in, replaced (`if device.type == "cpu": device = ...` for TensorRT)
        if _places_with(function, name):
            self._add(use.node, None, node)

    def _fix(self, use: CudaUse) -> PendingFix | None:
        device = self._program.fallback_device_variable()
        edits = route_through(use, device, self.context.code_for_node) if device is not None else ()
        return self.make_fix(*edits, applicability=Applicability.UNSAFE) if edits else None

    def leave_Module(self, node: cst.Module) -> None:
        if not self._sites or self._program.declares_gpu_only:
            return
        flow = self.context.flow
        distributed = self.context.names.imports_from("torch.distributed")
        elsewhere = None
        if not (self._program.shows_cpu_mode or flow.offers_cpu_mode(by_gpu_settings=not distributed)):
            elsewhere = self._program.cpu_mode_elsewhere
            if elsewhere is None:
                return
        for site in self._sites:
            if site.alias:
                assert isinstance(site.node, cst.Call)
                # A name bound to a type (`Tensor = torch.cuda.FloatTensor`): the exact answer.
                if self.context.names.qualified_name(site.node.func) not in LEGACY_CUDA_TENSOR_TYPES:
                    continue
            if self._device_switched_off(site.node):
                continue
            if elsewhere is not None and under_main_guard(site.visited, site.ancestors):
                continue  # a module's own demo: it runs when the file is the script, not when imported
            if site.moved is not None and flow.value_of(site.moved).places == _ANYWHERE_ONLY:
                continue  # a module without parameters or buffers (a loss): moving it touches no GPU
            reaching = elsewhere
            if elsewhere is not None:
                definition = top_level_definition(self.context.module, reversed(site.ancestors))
                if definition is not None and not self._used_in_this_file(definition):
                    # Only a program that uses the class or function runs its code.
                    reaching = self.context.project_cpu_mode_using(definition.name.value)
                    if reaching is None:
                        continue
            if self._reached_in_cpu_mode(site):
                self.report(site.node, fix=site.fix, message=None if reaching is None else self._elsewhere_message(reaching))

    @staticmethod
    def _elsewhere_message(elsewhere: CpuModeOption) -> str:
        runs = f"{elsewhere.program} runs this file, and its" if elsewhere.program else "its"
        chooses = "device choice at {}:{} falls back to the CPU" if elsewhere.falls_back \
            else "option at {}:{} chooses the CPU"
        return (f"CUDA is used unguarded in a program that falls back to the CPU ({runs} "
                f"{chooses.format(elsewhere.file, elsewhere.line)}); it fails without a GPU")

    def _used_in_this_file(self, definition: cst.FunctionDef | cst.ClassDef) -> bool:
        """The file names the definition outside its own code: then what runs it here may be
        what the program uses. Asked once per definition (its code is rendered to count)."""
        known = self._used_here.get(id(definition))
        if known is None:
            word = re.compile(rf"\b{re.escape(definition.name.value)}\b")
            known = self._used_here[id(definition)] = \
                len(word.findall(self.context.source)) > len(word.findall(self.context.code_for_node(definition)))
        return known

    def _device_switched_off(self, node: cst.CSTNode) -> bool:
        """`with torch.cuda.device(args.gpu_index):` where the CPU mode sets the index to -1
        (or None): a no-op there."""
        if not (isinstance(node, cst.Call) and node.args and node.args[0].keyword is None):
            return False
        if self.context.names.qualified_name(node.func, among=(torch_api.CUDA_DEVICE_CONTEXT,)) is None:
            return False
        return isinstance(self.context.flow.value_of(node.args[0].value).in_cpu_mode, Off)


def _places_with(function: cst.FunctionDef, name: str) -> bool:
    """The function makes or moves tensors with the device `name` (`device=name`, `.to(name)`)."""
    for node in descendants(function.body, into_definitions=False):
        if type(node) is not cst.Call:
            continue
        for position, arg in enumerate(node.args):
            if type(arg.value) is not cst.Name or arg.value.value != name:
                continue
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "device" or keyword is None and position == 0 and type(node.func) is cst.Attribute \
                    and node.func.attr.value in ("to", "cuda"):
                return True
    return False
