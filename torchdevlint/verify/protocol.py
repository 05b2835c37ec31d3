"""What the parent and a verify child agree on: where a run happens and how it ended.

Plain data only, no torch: both sides import this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

CHILD_MODULE = "torchdevlint.verify.child"

# Every process of one verify run meets its ranks on this port (chosen by the run's first
# process, `child.free_port`): runs side by side (an original and its fix) never share one.
RUN_PORT_VARIABLE = "TORCHDEVLINT_RUN_PORT"
LOCALHOST = "127.0.0.1"
# The machine a rank stands for, where verify runs ranks as several machines' (torchrun --nnodes).
NODE_VARIABLE = "TORCHDEVLINT_NODE"

# The result convention: a program prints `RESULT <value>`; the last such line counts.
RESULT_LINE = re.compile(r"^RESULT[ \t]+(?P<value>.*?)\s*$", re.MULTILINE)


class RunHost(Enum):
    """The machine a single run pretends to be."""

    # A real CUDA GPU.
    CUDA = "cuda"
    # The emulated GPU: CUDA tensors computed on the CPU, torch.cuda answering as N GPUs.
    EMULATED = "emulated"
    # No GPU at all (the reference run of the original program).
    CPU = "cpu"
    # No GPU, and checkpoint files the run did not write load as if a GPU box had written them.
    CPU_LOADS_GPU_CHECKPOINT = "cpu-loads-gpu-checkpoint"
    # An Apple GPU, emulated on the CPU with MPS's dtype rule (`verify.mps`).
    EMULATED_MPS = "emulated-mps"
    # A GPU, emulated or real, where checkpoint files the run did not write load as a GPU box
    # wrote them: where a `map_location` fix must still agree with the original.
    EMULATED_LOADS_GPU_CHECKPOINT = "emulated-loads-gpu-checkpoint"
    CUDA_LOADS_GPU_CHECKPOINT = "cuda-loads-gpu-checkpoint"

    @property
    def real_gpu(self) -> bool:
        return self in (RunHost.CUDA, RunHost.CUDA_LOADS_GPU_CHECKPOINT)

    @property
    def any_gpu(self) -> bool:
        return self in (RunHost.CUDA, RunHost.EMULATED, RunHost.CUDA_LOADS_GPU_CHECKPOINT,
                        RunHost.EMULATED_LOADS_GPU_CHECKPOINT)

    def loading_gpu_checkpoints(self) -> RunHost:
        """This GPU host, where checkpoints from elsewhere were written on a GPU box."""
        return {RunHost.CUDA: RunHost.CUDA_LOADS_GPU_CHECKPOINT,
                RunHost.EMULATED: RunHost.EMULATED_LOADS_GPU_CHECKPOINT}.get(self, self)

    @property
    def label(self) -> str:
        return {
            RunHost.CUDA: "CUDA GPU",
            RunHost.EMULATED: "emulated GPU",
            RunHost.CPU: "CPU",
            RunHost.CPU_LOADS_GPU_CHECKPOINT: "CPU-only host, checkpoints from elsewhere saved as on a GPU",
            RunHost.EMULATED_MPS: "emulated Apple GPU (mps)",
            RunHost.EMULATED_LOADS_GPU_CHECKPOINT: "emulated GPU, checkpoints from elsewhere saved as on a GPU",
            RunHost.CUDA_LOADS_GPU_CHECKPOINT: "CUDA GPU, checkpoints from elsewhere saved as on a GPU",
        }[self]


class RunStatus(Enum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class ErrorInfo:
    """How a run failed: the exception's type and message, and the program line it came from."""

    type: str
    message: str
    # The innermost line of the program itself, and every program line the traceback passes.
    line: int | None = None
    trace: tuple[int, ...] = ()
    # The module whose import the program's line started, where the error was raised importing it.
    importing: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"type": self.type, "message": self.message, "line": self.line, "trace": list(self.trace),
                "importing": self.importing}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ErrorInfo:
        line = data.get("line")
        trace = data.get("trace")
        lines = tuple(item for item in trace if isinstance(item, int)) if isinstance(trace, list) else ()
        importing = data.get("importing")
        return cls(str(data.get("type", "")), str(data.get("message", "")), line if isinstance(line, int) else None,
                   lines, importing if isinstance(importing, str) else None)


@dataclass(frozen=True)
class ChildReport:
    """What the child writes to its report file once the program has ended."""

    status: RunStatus
    error: ErrorInfo | None = None
    # Why an OK run ended before the program did (the proof budget, --seconds, --steps).
    stopped: str | None = None
    # The first line of each finding whose statement never ran to completion (under a proof budget).
    unreached: tuple[int, ...] = ()
    # How long the run took in its own process (the host set up, the program run): without
    # the wait for a fork server still importing torch, which the first runs share.
    seconds: float | None = None
    # On a real GPU: the program drew random numbers with a CUDA generator, which draws other
    # numbers than the CPU's (so its results are not the CPU run's to compare).
    gpu_random: bool = False

    def to_json(self) -> dict[str, object]:
        return {"status": self.status.value, "error": self.error.to_json() if self.error else None,
                "stopped": self.stopped, "unreached": list(self.unreached), "seconds": self.seconds,
                "gpu_random": self.gpu_random}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ChildReport:
        error = data.get("error")
        stopped = data.get("stopped")
        unreached = data.get("unreached")
        seconds = data.get("seconds")
        return cls(RunStatus(str(data.get("status"))), ErrorInfo.from_json(error) if isinstance(error, dict) else None,
                   stopped if isinstance(stopped, str) else None,
                   tuple(line for line in unreached if isinstance(line, int)) if isinstance(unreached, list) else (),
                   float(seconds) if isinstance(seconds, (int, float)) else None, data.get("gpu_random") is True)


def last_result(stdout: str) -> str | None:
    matches = RESULT_LINE.findall(stdout.replace("\r\n", "\n"))
    return matches[-1] if matches else None


def string_map(value: object) -> dict[str, str]:
    """A JSON object of environment variables from a run request, as strings."""
    if not isinstance(value, dict):
        return {}
    return {str(key): str(item) for key, item in value.items()}
