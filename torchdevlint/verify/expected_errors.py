"""The runtime error each rule predicts, as PyTorch words it (on CUDA and on the emulated GPU).

A program reproduces its bug only when the original fails with an error a finding predicts;
any other failure (a typo, a missing file) is not the bug.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from torchdevlint.verify.protocol import ErrorInfo

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
            r"Input type \(.*\) and weight type \(.*\) should be the same",
            r"Expected object of device type",
            r"module must have its parameters and buffers on device",
        )
    )
)
CUDA_CHECKPOINT_ON_CPU_HOST = re.compile(r"Attempting to deserialize object on a CUDA device")
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
# A device string torch.device does not parse (`"auto"`, `"gpu"`, `"0"`, `""`).
DEVICE_STRING_REJECTED = re.compile(
    r"device type at start of device string|Invalid device string|Device string must not be empty"
)
# CUDA used in a DataLoader worker forked after the training process started CUDA.
CUDA_IN_FORKED_WORKER = re.compile(r"Cannot re-initialize CUDA in forked subprocess")
PREFIXED_STATE_DICT = re.compile(
    r"Error\(s\) in loading state_dict(?s:.*)(Unexpected|Missing) key\(s\) in state_dict: \"module\."
)

EXPECTED_BY_RULE: dict[str, re.Pattern[str]] = {
    "TDL001": DEVICE_MISMATCH,
    "TDL002": DEVICE_MISMATCH,
    "TDL003": CUDA_CHECKPOINT_ON_CPU_HOST,
    "TDL004": PREFIXED_STATE_DICT,
    "TDL005": PREFIXED_STATE_DICT,
    "TDL006": NUMPY_ON_DEVICE,
    "TDL007": NO_GPU,
    "TDL008": ENVIRONMENT_NOT_A_STRING,
    "TDL013": HOST_COPY_READ_EARLY,
    "TDL014": NO_GPU,
    "TDL015": NO_ACCELERATOR_DEVICE,
    "TDL016": MPS_FLOAT64,
    "TDL017": NO_GPU,
    "TDL019": NO_GPU,
    "TDL020": DEVICE_STRING_REJECTED,
    "TDL021": CUDA_IN_FORKED_WORKER,
    "TDL022": DEVICE_MISMATCH,
}


# Rules whose bug needs a machine verify does not emulate, with what it needs.
NOT_EMULATED: dict[str, str] = {
    "TDL023": "one process per GPU (torchrun or mp.spawn) on several GPUs",
}


def predicted_by(codes: Iterable[str], error: ErrorInfo) -> bool:
    """Does one of the findings' rules predict this error? Unknown (future) rules: a device mismatch."""
    text = f"{error.type}: {error.message}"
    return any(EXPECTED_BY_RULE.get(code, DEVICE_MISMATCH).search(text) for code in set(codes))


# Rules whose bug surfaces away from the finding and from any name bound there: a DataParallel
# checkpoint saved with `module.` keys fails where it is loaded, perhaps much later; a
# `type=bool` device flag, an availability check never called, or a CUDA default device,
# fails wherever CUDA is then used.
_SURFACES_AWAY = frozenset({"TDL004", "TDL014", "TDL017", "TDL019"})


def surfaces_away(code: str) -> bool:
    """Can this rule's error be raised anywhere in the program, not only through the finding's lines?"""
    return code in _SURFACES_AWAY
