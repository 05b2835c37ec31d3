"""What `verify` needs from a rule to prove its findings by running the program: the error its
bug raises, as PyTorch words it (on CUDA and on the emulated GPU), and the machine where that
bug shows. Each rule declares it (`Rule.proof`) beside its code, docs and examples; `verify`
reads it. Plain data: nothing here imports torch.

A program reproduces its bug only when the original fails with an error a finding predicts;
any other failure (a typo, a missing file) is not the bug.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# Mixed devices, as CUDA kernels, the RNN checks, convolution, indexing and DataParallel report
# them (the emulated GPU raises them in the same words).
DEVICE_MISMATCH = re.compile(
    "|".join(
        (
            r"Expected all tensors to be on the same device",
            r"found at least two devices",
            r"is not on the expected device",
            r"are not at the same device",
            r"to be on the same device",
            r"expected to be in the same device",
            r"have the same device",
            r"same device as the indexed tensor",
            r"expected device \S+ but got device \S+",
            r"Expected tensor to have \w+ Device, but got tensor with \w+ Device",
            r"Input type \(.*\) and (?:weight|bias) type \(.*\) should be the same",
            r"attempting to assign a gradient with device type",
            r"Expected object of device type",
            r"module must have its parameters and buffers on device",
            r"Trying to pass too many CPU scalars to non-CPU kernel",
        )
    )
)
CUDA_CHECKPOINT_ON_CPU_HOST = re.compile(r"Attempting to deserialize object on a CUDA device")
# `.cuda(device)` handed the CPU, on a CPU-only build and on a CUDA one alike.
CUDA_GIVEN_THE_CPU = re.compile(r"Invalid device, must be cuda device")
# CUDA used on a machine without a GPU, as a CPU-only build and a driverless machine say it.
NO_GPU = re.compile(
    "|".join(
        (
            r"Torch not compiled with CUDA enabled",
            r"Found no NVIDIA driver",
            r"No CUDA GPUs are available",
            r"no CUDA-capable device is detected",
            r"Cannot access accelerator device when none is available",
            r"Attempting to deserialize object on a CUDA device",
        )
    )
)
NUMPY_ON_DEVICE = re.compile(r"can't convert \S+ device type tensor to numpy")
# CUDA_VISIBLE_DEVICES set too late can only fail where it is set to something not a string.
ENVIRONMENT_NOT_A_STRING = re.compile(r"str expected, not \w+")
# A non-blocking copy to the CPU read too early: CUDA raises nothing, so the emulated GPU (and, on
# a real GPU, verify's own check) model the race and raise this (emulation.HOST_COPY_READ_EARLY).
HOST_COPY_READ_EARLY = re.compile(r"a non_blocking copy to the CPU was read before synchronising")
# `torch.accelerator.current_accelerator()` on a CPU-only build.
NO_ACCELERATOR_DEVICE = re.compile(r"'NoneType' object has no attribute '(type|index)'")
# A float64 tensor on Apple's GPU (and on the emulated one, `verify.mps`).
MPS_FLOAT64 = re.compile(r"MPS framework doesn't support float64")
# The lengths of a packed sequence anywhere but on the CPU (PyTorch 1.7 on; the emulated GPU too).
PACKED_LENGTHS_ON_DEVICE = re.compile(r"'lengths' argument should be a 1D CPU int64 tensor")
# A tensor of the wrong dtype where a test of its legacy type failed on the GPU (ids taken for
# features, features for ids): the errors of the ops it then reaches.
DTYPE_MISMATCH = re.compile(
    r"must have the same dtype|expected scalar type \w+ but found \w+|to have the same dtype"
    r"|Expected tensor for argument #\d+ 'indices' to have one of the following scalar types"
    r"|Input dtype must be either a floating point or complex dtype"
)
# A device string torch.device does not parse (`"auto"`, `"gpu"`, `"0"`, `""`).
DEVICE_STRING_REJECTED = re.compile(
    r"device type at start of device string|Invalid device string|Device string must not be empty"
)
# CUDA used in a DataLoader worker forked after the training process started CUDA.
CUDA_IN_FORKED_WORKER = re.compile(r"Cannot re-initialize CUDA in forked subprocess")
# A tensor given requires_grad and then moved is no leaf: optimizers refuse it, and its
# `.grad` is None where the program reads it.
NON_LEAF_GRADIENT = re.compile(
    r"can't optimize a non-leaf Tensor|unsupported operand type\(s\) for [^:]*: '[^']*' and 'NoneType'"
    r"|unsupported operand type\(s\) for [^:]*: 'NoneType' and|'NoneType' object has no attribute 'zero_'"
)
# A legacy constructor (`torch.Tensor(...)`, `torch.FloatTensor(...)`) handed a device other than the CPU.
LEGACY_CONSTRUCTOR_OFF_THE_CPU = re.compile(r"legacy constructor expects device type: cpu")
# An attribute of the wrapped model read through its DataParallel/DDP wrapper.
WRAPPER_LACKS_ATTRIBUTE = re.compile(r"'(DataParallel|DistributedDataParallel)' object has no attribute")
# A spawned DataLoader worker re-running the main script's top level, which starts workers.
WORKERS_STARTED_WHILE_BOOTSTRAPPING = re.compile(
    r"An attempt has been made to start a new process before the\s+current process has finished its bootstrapping")
# `.module` read on a model that was not wrapped on this run (its CPU mode, a single GPU).
MODULE_OF_A_BARE_MODEL = re.compile(r"object has no attribute 'module'")
# Optimizer state on another device than its parameters: the foreach step's grouping on CUDA,
# a device mismatch in the step's own arithmetic elsewhere (and on the emulated GPU).
OPTIMIZER_STATE_ELSEWHERE = re.compile(
    DEVICE_MISMATCH.pattern + r"|Tensors of the same index must be on the same device")
# A GPU index past the machine's GPUs (a global rank on the second machine, say).
INVALID_DEVICE_ORDINAL = re.compile(r"invalid device ordinal")
# Two ranks whose NCCL communicators share one GPU (NCCL checks it when it sets them up).
DUPLICATE_GPU = re.compile(r"Duplicate GPU detected")
# `x.get_device()` of a tensor on the CPU (-1) given as a device.
NEGATIVE_DEVICE_INDEX = re.compile(r"Device index must not be negative")
# PyTorch 0.3's `async=` argument on Python 3.7 or later: the file does not compile.
ASYNC_KEYWORD = re.compile(r"SyntaxError: invalid syntax")
PREFIXED_STATE_DICT = re.compile(
    r"Error\(s\) in loading state_dict(?s:.*)(Unexpected|Missing) key\(s\) in state_dict: \"module\."
)


# The machines verify runs a program on (`verify --host`): a GPU host (with `gpus` GPUs), a
# CPU-only one, Apple's GPU, and a CPU-only host given checkpoints saved on a GPU.
ProofHost = Literal["gpu", "cpu", "mps", "cpu-loads-gpu-checkpoint"]


@dataclass(frozen=True)
class RuntimeProof:
    """How a rule's finding is proven by running: the bug's error and the machine it shows on."""

    error: re.Pattern[str] = DEVICE_MISMATCH
    host: ProofHost = "gpu"
    # GPUs the host needs (DataParallel is commonly taken only where there are two or more).
    gpus: int = 1
    # Processes the program runs as, one per rank, as `torchrun --nproc_per_node N` starts
    # them (a program that starts its own with `mp.spawn` runs once).
    processes: int = 1
    # Machines the ranks run on, `processes` on each with `gpus` GPUs, as `torchrun --nnodes`
    # starts them: ranks of the second machine start at `processes`, its local ranks at 0.
    nodes: int = 1
    # The error can be raised anywhere in the program, not only through the finding's lines
    # and the names bound there (a checkpoint saved with `module.` keys fails where it is loaded).
    surfaces_away: bool = False
    # What the bug needs that verify does not emulate (None: verify can run it), as a phrase
    # that completes "its bug needs …".
    not_emulated: str | None = None
    # Machines where the fix changes what the program does though the bug does not show
    # there: the fixed program must run on them too, and agree with the original (a
    # `map_location="cpu"` that a GPU run then trips over is no fix).
    fix_agrees_on: tuple[ProofHost, ...] = ()
