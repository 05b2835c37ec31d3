"""The emulated GPU's NCCL: process groups, collectives and DistributedDataParallel for ranks
whose GPUs are emulated.

Imported only inside a verify child process: it imports torch.

A CPU-only build has no NCCL, and Gloo refuses the emulated GPU's tensors (to PyTorch's C++
core they are `meta` wrappers). So a group asked for NCCL is a Gloo group underneath, which
the ranks reach over the loopback, and each collective hands Gloo the CPU values behind the
emulated tensors, in place. What NCCL checks is checked here, in NCCL's words:

- A communicator lives on one GPU per rank: the first collective of an NCCL group gathers each
  rank's GPU (the device of its tensor, or the group's `device_id`), and two ranks on one GPU
  raise NCCL's "Duplicate GPU detected" on every rank, as the real communicator's setup does.
  That is the bug of ranks that never set their own device (TDL023).
- A group that is NCCL only has no backend for CPU tensors.

`DistributedDataParallel` over emulated tensors is the module's own forward plus what DDP
does around it: the module's state broadcast from rank 0 when it is wrapped (DDP's first
collective, so the duplicate GPU shows there, as on CUDA), its device checks, its inputs moved
to `device_ids[0]`, its buffers broadcast before each forward and its gradients averaged
across ranks after each backward (`no_sync` skips that), and `module.`-prefixed state.

`mp.spawn` starts its processes by forking here, so each rank inherits the emulation; a
spawned rank starts CUDA afresh, as a spawned interpreter would.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from torchdevlint.verify.cuda_api import EmulatedMachine
from torchdevlint.verify.protocol import LOCALHOST, NODE_VARIABLE, RUN_PORT_VARIABLE
from torchdevlint.verify.race import Patches

_EMULATION_NOTE = "raised by torchdevlint's emulated GPU, as NCCL raises it"
# The NCCL of torch's CUDA 12 wheels, for what asks (torch's own logging of a failed collective).
_NCCL_VERSION = (2, 27, 5)

_COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv",
    "isend", "irecv", "barrier",
)
# The object collectives pickle into tensors of their own: never refused as CPU tensors.
_OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")


@dataclass
class _Group:
    """An NCCL group as the program asked for it; Gloo runs it."""

    # Only NCCL ("nccl"), or NCCL for CUDA tensors beside Gloo for the CPU's (None, "cuda:nccl,cpu:gloo").
    nccl_only: bool
    # The GPU its communicator uses in this rank, once set up (`device_id` sets it at once).
    device: int | None = None


class _ProcessGroups:
    def __init__(self, machine: EmulatedMachine, gpu_of: Callable[[torch.Tensor], int | None],
                 host_values: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.machine = machine
        self.gpu_of = gpu_of
        self.host_values = host_values
        self.groups: dict[int, _Group] = {}
        self.original_all_gather = c10d.all_gather
        self.object_collective_depth = 0
        # A collective torch hands on to the emulation's function mode comes back here: the
        # second time through it is the original's own.
        self.collective_depth = 0

    def group_of(self, group: Any) -> _Group | None:
        if group is None:
            if not c10d.is_initialized():
                return None
            group = c10d._get_default_group()
        return self.groups.get(id(group))

    def tensors_for_gloo(self, value: Any, found: list[torch.Tensor]) -> Any:
        """`value` with each emulated tensor replaced by its CPU values (the same memory)."""
        if isinstance(value, torch.Tensor):
            found.append(value)
            return self.host_values(value)
        if isinstance(value, list):
            return [self.tensors_for_gloo(item, found) for item in value]
        if isinstance(value, tuple):
            return tuple(self.tensors_for_gloo(item, found) for item in value)
        return value

    def communicator_on(self, group: Any, info: _Group, gpu: int) -> None:
        """Set up the group's communicator on `gpu`, as NCCL does at its first collective."""
        if info.device is not None:
            return
        info.device = gpu
        size = c10d.get_world_size(group)
        # Ranks on other machines (verify's emulated nodes) have GPUs of their own.
        node = int(os.environ.get(NODE_VARIABLE, "0"))
        devices = [torch.zeros(2, dtype=torch.int64) for _ in range(size)]
        self.original_all_gather(devices, torch.tensor([node, gpu], dtype=torch.int64), group=group)
        first_rank_on: dict[tuple[int, int], int] = {}
        for rank, device in enumerate((int(item[0]), int(item[1])) for item in devices):
            if device in first_rank_on:
                raise dist.DistBackendError(
                    "NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)\n"
                    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
                    f"Duplicate GPU detected : rank {rank} and rank {first_rank_on[device]} both on CUDA device "
                    f"{device[1]} ({_EMULATION_NOTE})"
                )
            first_rank_on[device] = rank

    def collective(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            group = bound.arguments.get("group")
            info = self.group_of(group)
            if info is None or self.collective_depth:
                return original(*args, **kwargs)
            self.collective_depth += 1
            try:
                return self._collective(name, original, bound, group, info)
            finally:
                self.collective_depth -= 1

        return run

    def _collective(self, name: str, original: Callable[..., Any], bound: inspect.BoundArguments, group: Any,
                    info: _Group) -> Any:
        found: list[torch.Tensor] = []
        for key, value in list(bound.arguments.items()):
            bound.arguments[key] = self.tensors_for_gloo(value, found)
        gpus = [gpu for gpu in map(self.gpu_of, found) if gpu is not None]
        if info.nccl_only and len(gpus) < len(found) and not self.object_collective_depth:
            raise RuntimeError(f"No backend type associated with device type cpu ({_EMULATION_NOTE})")
        if gpus or name == "barrier":
            # A barrier's communicator is on the current GPU (or the `device_ids` it names).
            device_ids = bound.arguments.get("device_ids")
            gpu = gpus[0] if gpus else device_ids[0] if device_ids else self.machine.current_index
            self.communicator_on(group, info, gpu)
        if name == "barrier":
            bound.arguments.pop("device_ids", None)  # Gloo's barrier has no device
        return original(*bound.args, **bound.kwargs)

    def object_collective(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            self.object_collective_depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self.object_collective_depth -= 1

        return run

    def backend_rewritten(self, original: Callable[..., Any], *, default_group: bool) -> Callable[..., Any]:
        """`init_process_group`/`new_group` with NCCL asked for: a Gloo group that remembers it."""
        signature = inspect.signature(original)

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            backend = bound.arguments.get("backend")
            text = str(backend).lower() if backend is not None else None
            nccl = text is None or "nccl" in text
            device_id = bound.arguments.pop("device_id", None)
            if nccl:
                bound.arguments["backend"] = "gloo"
            if default_group:
                _meet_on_the_run_port(bound.arguments)
            result = original(*bound.args, **bound.kwargs)
            group = c10d._get_default_group() if default_group else result
            if nccl and group is not None:
                info = _Group(nccl_only=text is not None and "cpu" not in text)
                self.groups[id(group)] = info
                if device_id is not None:
                    index = self.machine.cuda_index(device_id, int_is_device=True)
                    if index is not None:
                        self.communicator_on(group, info, index)
            return result

        return run

    def backend_name(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def get_backend(group: Any = None) -> Any:
            info = self.group_of(group)
            return "nccl" if info is not None else original(group)

        return get_backend


def _meet_on_the_run_port(arguments: dict[str, Any]) -> None:
    """Point a process group's rendezvous at the run's own port (a program's fixed
    `MASTER_PORT = "12355"` would otherwise meet another run's ranks)."""
    port = os.environ.get(RUN_PORT_VARIABLE)
    if port is None or arguments.get("store") is not None:
        return
    method = arguments.get("init_method")
    if method is None or str(method).startswith("env://"):
        os.environ["MASTER_ADDR"] = LOCALHOST
        os.environ["MASTER_PORT"] = port
    elif str(method).startswith("tcp://"):
        parts = urlsplit(str(method))
        arguments["init_method"] = urlunsplit(parts._replace(netloc=f"{LOCALHOST}:{port}"))


class _DistributedDataParallel(torch.nn.Module):
    """DistributedDataParallel over a module on the emulated GPU (or the CPU): see the module doc."""

    def __init__(self, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                 broadcast_buffers: bool | None = None, init_sync: bool = True, process_group: Any = None,
                 **options: Any) -> None:
        super().__init__()
        self.module = module
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers is not False
        self.process_group = process_group
        self.require_backward_grad_sync = True
        devices = {tensor.device for tensor in (*module.parameters(), *module.buffers())}
        device_type = next(iter(devices)).type if devices else "cpu"
        if device_ids is None or len(device_ids) == 0 or device_type == "cpu" or len(devices) > 1:
            if device_ids or output_device:
                raise ValueError(
                    "DistributedDataParallel device_ids and output_device arguments only work with single-device/"
                    f"multiple-device GPU modules or CPU modules, but got device_ids {device_ids}, output_device "
                    f"{output_device}, and module parameters {devices}.")
            self.device_ids: list[int] | None = None
        else:
            self.device_ids = [torch._utils._get_device_index(item, True) for item in device_ids]
            expected = torch.device("cuda", self.device_ids[0])
            for tensor in (*module.parameters(), *module.buffers()):
                if tensor.device != expected:
                    raise RuntimeError(
                        f"module must have its parameters and buffers on device {expected} (device_ids[0]) "
                        f"but found one of them on device: {tensor.device}")
        if init_sync:
            self._broadcast(list(module.state_dict().values()))
        for parameter in module.parameters():
            if parameter.requires_grad:
                parameter.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]  # unannotated in torch
                    self._average_gradient)

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        source = c10d.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        with torch.no_grad():
            for tensor in tensors:
                if isinstance(tensor, torch.Tensor):
                    dist.broadcast(tensor, source, group=self.process_group)

    def _average_gradient(self, parameter: torch.Tensor) -> None:
        if not self.require_backward_grad_sync or parameter.grad is None:
            return
        with torch.no_grad():
            dist.all_reduce(parameter.grad, group=self.process_group)
            parameter.grad.div_(c10d.get_world_size(self.process_group))

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers and torch.is_grad_enabled():
            self._broadcast(list(self.module.buffers()))
        if self.device_ids:
            device = torch.device("cuda", self.device_ids[0])
            inputs, kwargs = _moved((inputs, kwargs), device)
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        previous, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous


_DistributedDataParallel.__name__ = _DistributedDataParallel.__qualname__ = "DistributedDataParallel"


def _moved(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_moved(item, device) for item in value)
    if isinstance(value, list):
        return [_moved(item, device) for item in value]
    if isinstance(value, dict):
        return {key: _moved(item, device) for key, item in value.items()}
    return value


def _forked_ranks(machine: EmulatedMachine, original: Callable[..., Any]) -> Callable[..., Any]:
    """`start_processes` that forks: each process inherits the emulation, then starts CUDA
    afresh, as a spawned interpreter does. The run's line budget stays with the first process."""
    signature = inspect.signature(original)

    def start_processes(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        fn = bound.arguments["fn"]

        def rank(index: int, *arguments: Any) -> Any:
            sys.settrace(None)
            machine.started_afresh()
            return fn(index, *arguments)

        bound.arguments["fn"] = rank
        bound.arguments["start_method"] = "fork"
        return original(*bound.args, **bound.kwargs)

    return start_processes


def patch_distributed(patches: Patches, machine: EmulatedMachine, gpu_of: Callable[[torch.Tensor], int | None],
                      host_values: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """NCCL, DistributedDataParallel and `mp.spawn` for the emulated GPU (see the module doc)."""
    groups = _ProcessGroups(machine, gpu_of, host_values)
    for name in _COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        emulated = groups.collective(name, original)
        patches.set(c10d, name, emulated)
        if getattr(dist, name, None) is original:
            patches.set(dist, name, emulated)
    for name in _OBJECT_COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is not None:
            wrapped = groups.object_collective(original)
            patches.set(c10d, name, wrapped)
            if getattr(dist, name, None) is original:
                patches.set(dist, name, wrapped)
    for name, default_group in (("init_process_group", True), ("new_group", False)):
        original = getattr(c10d, name)
        rewritten = groups.backend_rewritten(original, default_group=default_group)
        patches.set(c10d, name, rewritten)
        patches.set(dist, name, rewritten)
    backend_name = groups.backend_name(c10d.get_backend)
    patches.set(c10d, "get_backend", backend_name)
    patches.set(dist, "get_backend", backend_name)
    patches.set(dist, "is_nccl_available", lambda: True)
    patches.set(torch.cuda.nccl, "version", lambda: _NCCL_VERSION)
    patches.set(torch.cuda.nccl, "is_available", lambda tensors: True)
    patches.set(c10d, "is_nccl_available", lambda: True)
    patches.set(torch.nn.parallel, "DistributedDataParallel", _DistributedDataParallel)
    patches.set(torch.nn.parallel.distributed, "DistributedDataParallel", _DistributedDataParallel)
    spawning = sys.modules["torch.multiprocessing.spawn"]
    forked = _forked_ranks(machine, spawning.start_processes)
    patches.set(spawning, "start_processes", forked)
    patches.set(torch.multiprocessing, "start_processes", forked)


def patch_rendezvous(patches: Patches) -> None:
    """On any host: the default group meets on the run's own port (see `_meet_on_the_run_port`)."""
    original = c10d.init_process_group
    signature = inspect.signature(original)

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        _meet_on_the_run_port(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    patches.set(c10d, "init_process_group", init_process_group)
    patches.set(dist, "init_process_group", init_process_group)
