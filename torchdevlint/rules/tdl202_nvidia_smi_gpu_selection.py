"""TDL202 nvidia-smi-gpu-selection."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.bound_strings import BoundStrings, literal_text
from torchdevlint.analysis.tree import child_nodes, keyword_argument
from torchdevlint.rule import Invalid, Rule, Valid

_SHELL_CALLS = frozenset(
    {
        "os.system", "os.popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
        "subprocess.check_output", "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput",
    }
)
# What a query for choosing a GPU asks nvidia-smi about.
_QUERY_WORDS = ("mem", "util", "free")
# Signs, in the same function, that the numbers pick a GPU rather than feed a log.
_CHOOSING_NAMES = frozenset({"argmax", "argmin", "argsort", "set_device", "index"})
# `max(used)` may only feed a log line: these choose a GPU only when the result is returned
# or used for a device.
_RANKING_NAMES = frozenset({"min", "max", "sorted", "sort"})


class NvidiaSmiGpuSelection(Rule):
    """
    ## What it does
    Finds GPUs chosen by shelling out to `nvidia-smi` (`os.system`, `os.popen`,
    `subprocess.*`) to query free memory or utilisation, typically writing the output to a
    temporary file and parsing it, in a function (or module body) that then picks a device
    (`argmax`/`argmin`/`min`/`max`/`sorted`, `CUDA_VISIBLE_DEVICES`, `set_device`). The
    command may be a string, a list, or a variable holding the string. Calls of `nvidia-smi`
    that only log statistics are not reported.

    Ask CUDA instead: `torch.cuda.mem_get_info(i)` uses CUDA's own numbering and honours
    `CUDA_VISIBLE_DEVICES` (it creates a context on each GPU it asks). NVML (`pynvml`) avoids
    the subprocess and the file but numbers GPUs as `nvidia-smi` does: set
    `CUDA_DEVICE_ORDER=PCI_BUS_ID` if you use it. Better still, let the scheduler or
    `torchrun` assign GPUs.

    ## Why is this bad?
    `nvidia-smi` numbers GPUs in PCI bus order and ignores `CUDA_VISIBLE_DEVICES`; CUDA
    numbers the visible GPUs fastest first. In a job that was given a subset of the GPUs
    (every cluster scheduler does this), or on a machine with mixed GPUs, the index read
    from `nvidia-smi` names another GPU than `cuda:N`, or one that does not exist ("invalid
    device ordinal"). The program also fails where `nvidia-smi` is not installed (many
    containers, ROCm, Apple silicon), and a fixed temporary file in the working directory is
    overwritten by concurrent jobs and left behind.

    ## Fix safety
    No fix: the replacement spans several statements and changes which GPU is picked.

    ## Options
    None.
    """

    code = "TDL202"
    slug = "nvidia-smi-gpu-selection"
    message = "GPU picked from nvidia-smi output, whose numbering ignores CUDA_VISIBLE_DEVICES and CUDA's order"
    requires_any_text = ("nvidia-smi",)

    VALID = [
        Valid(
            """
            import torch

            free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
            device = torch.device(f"cuda:{max(range(len(free)), key=free.__getitem__)}")
            """,
            name="documented-free-memory-from-cuda",
            in_docs=True,
        ),
        Valid(
            """
            import subprocess
            import torch
            def log_gpu_memory():
                out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,nounits,noheader"])
                used = [int(x) for x in out.decode().strip().split("\\n")]
                print("peak GPU memory used (MiB):", max(used))
            """,
            name="peak-memory-only-logged",
        ),
        Valid(
            """
            import os, shutil, subprocess
            import torch
            def gpu_stats(index):
                smi = shutil.which("nvidia-smi")
                result = subprocess.run([smi, "--query-gpu=memory.used,memory.free", f"--id={index}"],
                                        capture_output=True, text=True)
                return [float(x) for x in result.stdout.split(", ")]
            os.system("nvidia-smi")
            """,
            name="statistics-for-a-log",
        ),
        Valid(
            """
            import torch
            def freest_gpu():
                free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
                return max(range(len(free)), key=free.__getitem__)
            """,
            name="mem-get-info",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import os

            import numpy as np
            import torch

            os.system("nvidia-smi -q -d Memory | grep -A4 GPU | grep Free > tmp")
            free = [int(line.split()[2]) for line in open("tmp").readlines()]
            device = torch.device(f"cuda:{int(np.argmax(free))}")
            """,
            name="documented-free-memory-from-nvidia-smi",
            in_docs=True,
        ),
        Invalid(
            """
            import os
            import numpy as np
            import torch
            def get_free_gpu():
                os.system("nvidia-smi -q -d Memory | grep -A4 GPU | grep Free > tmp")
                memory_available = [int(x.split()[2]) for x in open("tmp", "r").readlines()]
                return int(np.argmax(memory_available))
            """,
            name="temporary-file",
        ),
        Invalid(
            """
            import os
            import subprocess as sp
            import torch
            COMMAND = "nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits"
            free = [int(x) for x in sp.check_output(COMMAND.split()).decode().split()]
            os.environ["CUDA_VISIBLE_DEVICES"] = str(free.index(max(free)))
            """,
            name="command-in-a-variable-module-level",
        ),
    ]

    def setup(self) -> None:
        self._strings = self.context.shared(BoundStrings)

    def _text(self, node: cst.BaseExpression, depth: int = 3) -> str:
        """The literal text of a command: strings, lists of them, variables, `.split()`."""
        text = literal_text(node)
        if text is not None:
            return text
        if depth == 0:
            return ""
        if isinstance(node, (cst.List, cst.Tuple)):
            return " ".join(self._text(e.value, depth - 1) for e in node.elements)
        if isinstance(node, cst.Name):
            return self._strings.text_of(node.value) or ""
        if isinstance(node, cst.BinaryOperation):
            return self._text(node.left, depth - 1) + self._text(node.right, depth - 1)
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "split":
                return self._text(node.func.value, depth - 1)
            if self.context.names.qualified_name(node.func, among=("shlex.split",)) is not None and node.args:
                return self._text(node.args[0].value, depth - 1)
        return ""

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.qualified_name(node.func, among=_SHELL_CALLS) is None:
            return
        command = keyword_argument(node, "args") or keyword_argument(node, "cmd")
        if command is None:
            positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
            if not positional:
                return
            command = positional[0]
        text = self._text(command.value)
        if "nvidia-smi" not in text or not any(word in text.lower() for word in _QUERY_WORDS):
            return
        if self._chooses_a_gpu():
            self.report(node)

    def _chooses_a_gpu(self) -> bool:
        function = self.context.enclosing_function()
        if function is not None:
            roots: list[cst.CSTNode] = [function.body]
        else:
            # Module level: its own statements, not the functions and classes it defines.
            roots = [s for s in self.context.module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        stack = list(roots)
        ranks = False
        hands_on = False
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name) and node.value in _CHOOSING_NAMES:
                return True
            if isinstance(node, cst.SimpleString) and "CUDA_VISIBLE_DEVICES" in node.value:
                return True
            if isinstance(node, cst.Name) and node.value in _RANKING_NAMES:
                ranks = True
            if isinstance(node, cst.Return) and node.value is not None:
                hands_on = True
            if isinstance(node, cst.SimpleString) and "cuda" in node.value:
                hands_on = True
            if isinstance(node, cst.Attribute) and node.attr.value == "device":
                hands_on = True
            stack.extend(child_nodes(node))
        return ranks and hands_on
