"""What the analysis knows about the torch API, as fully qualified names.

Operators, Tensor methods and `torch.nn.functional` are looked up in `torch_ops`, generated
from torch's own metadata (see `TorchOp`); the rest is what torch states nowhere as data.
Whitelists on purpose: a name missing here makes a value "unknown", and rules stay silent on
unknown values. Precision before recall.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Literal

from torchdevlint.analysis.brains import numpy_conversions, torch_ops
from torchdevlint.analysis.devices import AVAILABILITY_CHECKS, LEGACY_CUDA_TENSOR_TYPES


class Result(Enum):
    """What a torch function or Tensor method returns, as its stubs declare it."""

    TENSOR = "t"
    # A tuple, list or named tuple of Tensors (`split`, `chunk`, `unbind`, `topk`).
    TENSORS = "s"
    NUMBER = "n"
    NONE = "0"
    OTHER = "o"
    # The overloads disagree (`max(t)` is a Tensor, `max(t, 1)` a named tuple).
    MIXED = "m"


class DeviceCheck(Enum):
    """How CUDA checks an operator's Tensor arguments (native_functions.yaml's `device_check`)."""

    # All on one device, 0-dim CPU tensors included.
    SAME = "X"
    # TensorIterator's check: one device, except that 0-dim CPU tensors are read as numbers.
    ITERATOR = "I"
    # Not checked: the operator takes arguments on other devices on purpose.
    UNCHECKED = "N"


@dataclass(frozen=True)
class TorchOp:
    """One torch function, `torch.nn.functional` function or Tensor method (see `torch_ops`)."""

    result: Result
    # Makes a tensor from sizes or data, on `device=` or the default device.
    factory: bool
    # Takes `device=` and Tensor inputs: where its inputs are, unless told (`zeros_like`, `normal`).
    like_factory: bool
    # Element-wise: 0-dim inputs make a 0-dim result.
    pointwise: bool
    reduction: bool
    # None where torch states nothing (a function written in Python, like most of F).
    device_check: DeviceCheck | None


_CHECKS = {check.value: check for check in DeviceCheck}


@cache
def _decode(entry: str) -> TorchOp:
    flags = entry[1:]
    check = next((_CHECKS[flag] for flag in flags if flag in _CHECKS), None)
    return TorchOp(Result(entry[0]), "F" in flags, "L" in flags, "P" in flags, "R" in flags, check)


def function_op(qualified: str) -> TorchOp | None:
    """`torch.sqrt`, `torch.nn.functional.relu`; None for names torch does not declare."""
    head, _, last = qualified.rpartition(".")
    if last.startswith("_"):
        return None
    if head == "torch":
        entry = torch_ops.FUNCTIONS.get(last)
    elif head == "torch.nn.functional":
        entry = torch_ops.FUNCTIONAL.get(last) or torch_ops.FUNCTIONS.get(last)
    elif head in ("torch.nn.utils", "torch.nn.utils.clip_grad"):
        entry = torch_ops.NN_UTILS.get(last)
    else:
        return None
    return None if entry is None else _decode(entry)


def method_op(name: str) -> TorchOp | None:
    """A Tensor method: `x.sqrt()`, `x.split(4)`."""
    entry = torch_ops.METHODS.get(name)
    return None if entry is None or name.startswith("_") else _decode(entry)


# What a Python number answers to, from Python itself: `n.real`, `x.is_integer()`, `n.conjugate()`.
_NUMBER_ATTRIBUTES: frozenset[str] = frozenset(dir(int)) | frozenset(dir(float)) | frozenset(dir(bool))


def only_tensors_have(method: str) -> bool:
    """`x.float()`, `x.sum()`: a Tensor method no Python number has, so a value that is a number
    on some paths and a tensor on others (`correct = 0; correct += (p == y).sum()`) is the
    tensor wherever the call succeeds."""
    return method_op(method) is not None and method not in _NUMBER_ATTRIBUTES


def is_tensor_factory(qualified: str) -> bool:
    """`torch.zeros`, `torch.arange`, `torch.tensor`: a new tensor, on the host unless told."""
    op = function_op(qualified)
    return op is not None and op.factory and op.result is Result.TENSOR and qualified.startswith("torch.") \
        and qualified.count(".") == 1


def takes_device(qualified: str) -> bool:
    """A factory of either kind: `device=` says where its tensor is made."""
    op = function_op(qualified)
    return op is not None and (op.factory or op.like_factory) and qualified.count(".") == 1


# Math on Python numbers: `math.sqrt(2 / math.pi)` is a float, whatever wraps it after.
PYTHON_NUMBER_MODULES = ("math.", "cmath.")
NUMBER_CONSTANTS: frozenset[str] = frozenset(
    f"{module}.{name}" for module in ("math", "torch", "numpy") for name in ("pi", "e", "inf", "nan", "tau")
)

# Methods whose result is a moved or re-typed copy; calling one as a statement throws it away.
MOVE_METHODS: frozenset[str] = frozenset(
    {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "long", "int", "short",
     "byte", "char", "bool", "pin_memory"}
)

# The calls that move a tensor or module to a device a program names (`x.to(device)`, `x.cuda()`).
DEVICE_MOVES: frozenset[str] = frozenset({"to", "cuda"})

# Every method that sends its receiver (a tensor, a batch, a model) somewhere, named or not.
PLACING_METHODS: frozenset[str] = frozenset({"to", "cuda", "cpu", "xpu", "mps"})

# nn.Module methods that work in place and return the module itself.
MODULE_SELF_RETURNING_METHODS: frozenset[str] = frozenset(
    {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval",
     "requires_grad_", "share_memory", "apply", "type", "to_empty", "xpu", "mps"}
)

# Methods that read a tensor's values back to the host: their result is never device data.
HOST_READ_METHODS: frozenset[str] = frozenset({"cpu", "numpy", "item", "tolist"})
# Python builtins that read a tensor's values on the host (`if`, `==` and indexing read them too).
HOST_READING_BUILTINS: frozenset[str] = frozenset({"print", "float", "int", "bool", "str", "repr"})

# Tensor-valued attributes of a Tensor.
TENSOR_ATTRIBUTES: frozenset[str] = frozenset({"T", "mT", "H", "mH", "data", "grad", "real", "imag"})

DATA_PARALLEL: frozenset[str] = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)

# `torch.nn.parallel.data_parallel(module, inputs, ...)`: DataParallel's functional form.
DATA_PARALLEL_FUNCTIONS: frozenset[str] = frozenset(
    {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}
)

# What `.cuda()` and `"cuda"` mean from here on: set, and (with `torch.cuda.device(n)`) changed
# for a block.
SET_CUDA_DEVICE: frozenset[str] = frozenset({"torch.cuda.set_device", "torch.accelerator.set_device_index"})
# `with torch.cuda.device(n):`; a no-op given a negative index or None.
CUDA_DEVICE_CONTEXT = "torch.cuda.device"
# How a call that changes the current device is written, by the end of its dotted name, for
# a look at the text before names resolve: a setter by its own name (`set_device(rank)` after
# `from torch.cuda import set_device`), the context by `cuda.device` (`device` alone is anything).
CURRENT_DEVICE_CHANGE_SUFFIXES: tuple[str, ...] = (
    *sorted({name.rsplit(".", 1)[1] for name in SET_CUDA_DEVICE}), CUDA_DEVICE_CONTEXT.split(".", 1)[1])
# Where tensor factories without `device=` put their tensors from here on (`torch.device(d)`
# as a context manager: in its block).
SET_DEFAULT_DEVICE = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})

FLOAT64_DTYPES: frozenset[str] = frozenset({"torch.float64", "torch.double"})
# NumPy functions that make float64 arrays unless given a dtype (np.array of literals may not).
NUMPY_FLOAT64_CONSTRUCTORS: frozenset[str] = frozenset(
    {f"numpy.{name}" for name in ("zeros", "ones", "empty", "full", "linspace", "eye", "identity", "zeros_like",
                                  "ones_like")}
    | {f"numpy.random.{name}" for name in ("rand", "randn", "random", "uniform", "normal", "random_sample",
                                           "standard_normal")}
)
# Functions that make a tensor of a NumPy array, keeping its dtype when given none.
FROM_NUMPY: frozenset[str] = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})
# Libraries whose functions convert every tensor argument to a NumPy array (through
# `Tensor.__array__`, which calls `.numpy()`).
CONVERTS_ARGUMENTS_TO_NUMPY: tuple[str, ...] = ("matplotlib.",)
# Factories whose tensor, without `dtype=`, has the default dtype, float32 unless the program
# changes the default (`torch.set_default_dtype`); and the legacy float32 constructors.
DEFAULT_FLOAT_FACTORIES: frozenset[str] = frozenset(
    {"torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.empty", "torch.FloatTensor", "torch.Tensor"})
# What changes the default dtype of those factories for the whole program.
DEFAULT_DTYPE_SETTERS: tuple[str, ...] = ("set_default_dtype", "set_default_tensor_type")
# Learning-rate schedulers: their `state_dict()` holds numbers (epochs, rates), no tensors.
LR_SCHEDULERS = "torch.optim.lr_scheduler."
# pyplot calls that give Axes, whose plotting methods convert as pyplot's functions of the same
# name do (`fig, ax = plt.subplots()`, then `ax.plot(x, y)`): the one Axes, or the figure and
# the Axes (or an array of them) as the second item.
MATPLOTLIB_AXES: frozenset[str] = frozenset({"matplotlib.pyplot.gca", "matplotlib.pyplot.axes",
                                             "matplotlib.pyplot.subplot"})
MATPLOTLIB_FIGURE_AND_AXES: frozenset[str] = frozenset({"matplotlib.pyplot.subplots"})


def numpy_converted_arguments(qualified: str) -> tuple[int, ...] | None:
    """The positional arguments a NumPy function turns into arrays (`np.transpose(t, (1, 2, 0))`:
    the first), as NumPy itself behaves (`numpy_conversions`); None for a function that hands a
    tensor to its own method instead (`np.squeeze(t)` is `t.squeeze()`) or is no NumPy function."""
    return numpy_conversions.CONVERTS_POSITIONS.get(qualified)

# The accelerator PyTorch was built for (PyTorch 2.6+): None on a CPU-only build, and with
# `check_available=True` wherever no device is present.
CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"

# `torch.cuda` calls that fail where there is no GPU (measured on a CPU-only build). Seeding,
# `empty_cache`, memory counters and `device_count` are lazy or answer without one.
CUDA_CALLS_NEEDING_A_GPU: frozenset[str] = frozenset(
    f"torch.cuda.{name}"
    for name in (
        "set_device", "device", "synchronize", "current_device", "get_device_name", "get_device_properties",
        "get_device_capability", "mem_get_info", "reset_peak_memory_stats", "reset_max_memory_allocated",
        "Event", "Stream", "current_stream", "default_stream", "get_rng_state", "init", "ipc_collect",
        "set_per_process_memory_fraction", "memory_summary", "CUDAGraph", "graph",
    )
)

DISTRIBUTED_DATA_PARALLEL: frozenset[str] = frozenset(
    {
        "torch.nn.DistributedDataParallel",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
WRAPPERS: frozenset[str] = DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL

# Autocast contexts: those taking the device type as their first argument (`device_type=`),
# and those whose name fixes it.
AUTOCAST_WITH_DEVICE_TYPE: frozenset[str] = frozenset(
    {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
)
AUTOCAST_OF_DEVICE_TYPE: dict[str, str] = {
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}

# Capitalised torch.nn names that are tensors, not modules.
NN_TENSOR_CLASSES: frozenset[str] = frozenset(
    {"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer",
     "torch.nn.UninitializedParameter", "torch.nn.UninitializedBuffer"}
)
# Capitalised torch.nn names that are neither tensors nor modules.
NN_NON_MODULE_CLASSES: frozenset[str] = frozenset(
    {"torch.nn.ParameterList", "torch.nn.ParameterDict"}
)

# Base classes (besides torch.nn.Module and its subclasses) whose subclasses are Modules.
MODULE_BASE_CLASSES: frozenset[str] = frozenset(
    {
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "pytorch_lightning.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "lightning.pytorch.core.LightningModule",
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
    }
)

DATALOADERS: frozenset[str] = frozenset(
    {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
)

# torchtext's iterators (`torchtext.data` before 0.9, `torchtext.legacy.data` in 0.9-0.11): each
# batch they yield holds every field's tensor on the iterator's `device` (with
# `include_lengths=True`, a field is a (tensor, lengths) pair, both there). `.splits(...)` makes
# one iterator per dataset.
TORCHTEXT_ITERATORS: frozenset[str] = frozenset(
    f"torchtext.{package}.{name}" for package in ("data", "data.iterator", "legacy.data", "legacy.data.iterator")
    for name in ("Iterator", "BucketIterator", "BPTTIterator"))
TORCHTEXT_ITERATOR_SPLITS: frozenset[str] = frozenset(f"{name}.splits" for name in TORCHTEXT_ITERATORS)

# Iterator wrappers that yield what they are given.
PASS_THROUGH_ITERATORS: frozenset[str] = frozenset(
    {"tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "iter"}
)

TORCH_LOAD: frozenset[str] = frozenset({"torch.load", "torch.serialization.load"})
# Dataset classes whose items are decoded from files into CPU tensors.
HOST_DATASET_PREFIXES = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")
TENSOR_DATASETS: frozenset[str] = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
# torchvision datasets that keep the whole split as tensors on the host, as attributes
# (`train_data.data[0]`, `test_data.targets[:2000]`): the MNIST family (`torchvision/datasets/
# mnist.py`; CIFAR's `.data` is a NumPy array, ImageFolder's targets a list). torchvision is not
# installed here to read it from, so by name, class and module.
HOST_TENSOR_DATASET_CLASSES: frozenset[str] = frozenset({"MNIST", "FashionMNIST", "KMNIST", "EMNIST", "QMNIST"})
HOST_TENSOR_DATASET_ATTRIBUTES: frozenset[str] = frozenset(
    {"data", "targets", "train_data", "test_data", "train_labels", "test_labels"})
TORCH_SAVE: frozenset[str] = frozenset({"torch.save", "torch.serialization.save"})
# Since PyTorch 0.4 `Variable(t)` returns a Tensor like `t`, where `t` is (pre-0.4 code wraps
# every batch in one).
RETURNS_ITS_TENSOR: frozenset[str] = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
INIT_PROCESS_GROUP: frozenset[str] = frozenset(
    {"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"}
)
# Starts one process per index, each calling the function with its index first.
SPAWN: frozenset[str] = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn"})
# Shards a dataset by the rank it is given among `num_replicas`.
DISTRIBUTED_SAMPLERS: frozenset[str] = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
)
# Strips a prefix such as `module.` from a state dict's keys, in place.
STRIP_STATE_DICT_PREFIX = "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"

TORCH_DEVICE = "torch.device"


def is_module_constructor(qualified_name: str) -> bool:
    """`torch.nn.Linear`, `torch.nn.modules.loss.MSELoss`, `torchvision.models.resnet18` …"""
    if qualified_name in NN_TENSOR_CLASSES or qualified_name in NN_NON_MODULE_CLASSES:
        return False
    if qualified_name in WRAPPERS:
        return False
    head, _, last = qualified_name.rpartition(".")
    if head in ("torch.nn", "torch.nn.modules") or head.startswith("torch.nn.modules."):
        return last[:1].isupper()
    if head.startswith("torchvision.models"):
        return last[:1].islower() and not last.startswith("get_") or last[:1].isupper() and not last.endswith("Weights")
    if head.startswith("timm") and last == "create_model":
        return True
    return head.startswith("torchmetrics") and last[:1].isupper()



# ---- tables the device-flow model reads ------------------------------------------------

# torch.nn modules that hold no parameters or buffers: they run wherever their inputs are.
# Losses hold a buffer only when given a `weight`/`pos_weight` (see STATEFUL_LOSS_KEYWORDS).
_STATELESS_MODULE_PREFIXES = (
    "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "ELU", "SELU", "CELU", "LeakyReLU", "Sigmoid", "Tanh",
    "Softmax", "LogSoftmax", "Softmin", "Softplus", "Softsign", "Hardtanh", "Hardswish", "Hardsigmoid",
    "Tanhshrink", "Threshold", "GLU", "LogSigmoid", "Dropout", "AlphaDropout", "FeatureAlphaDropout",
    "Identity", "Flatten", "Unflatten", "MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool",
    "LPPool", "FractionalMaxPool", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "PixelShuffle", "PixelUnshuffle", "ZeroPad", "ConstantPad", "ReflectionPad", "ReplicationPad",
    "CircularPad", "CosineSimilarity", "PairwiseDistance", "ChannelShuffle", "Fold", "Unfold",
)
STATEFUL_LOSS_KEYWORDS: frozenset[str] = frozenset({"weight", "pos_weight"})
# Modules that hold the modules they are given, and no state of their own.
MODULE_CONTAINERS: frozenset[str] = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict",
                                               "torch.nn.modules.container.Sequential",
                                               "torch.nn.modules.container.ModuleList",
                                               "torch.nn.modules.container.ModuleDict"})


def is_stateless_module(qualified_name: str) -> bool:
    """`torch.nn.MSELoss`, `torch.nn.ReLU`, `torch.nn.MaxPool2d`: no tensors of their own."""
    head, _, last = qualified_name.rpartition(".")
    if not (head in ("torch.nn", "torch.nn.modules") or head.startswith("torch.nn.modules.")):
        return False
    if last.endswith(("Loss", "Loss1d", "Loss2d", "Loss3d")):  # `NLLLoss2d`, kept by torch as an alias
        return True
    return any(last == prefix or (last.startswith(prefix) and last[len(prefix):] in ("1d", "2d", "3d", ""))
               for prefix in _STATELESS_MODULE_PREFIXES)


DTYPE_NAMES: frozenset[str] = frozenset(
    {"float", "float32", "float64", "double", "float16", "half", "bfloat16", "int", "int32", "int64",
     "long", "int16", "short", "int8", "uint8", "bool", "complex64", "complex128", "cfloat", "cdouble"}
)

# What the generated tables cannot say, because torch states it nowhere as data:
# Tensor methods whose Tensor arguments must be on the receiver's device though no operator
# of that name is checked (`Tensor.where(condition, y)` is Python over `torch.where`).
HAND_CHECKED_METHODS: frozenset[str] = frozenset({"where"})
# Tensor methods that take a tensor only for its shape, dtype or device.
SHAPE_ONLY_TENSOR_METHODS: frozenset[str] = frozenset({"expand_as", "view_as", "reshape_as", "type_as"})
# Reductions of the whole tensor, called without a dimension, that no `reduction` tag marks.
HAND_REDUCTIONS: frozenset[str] = frozenset({"median", "norm", "nanmedian"})
# Methods and functions that keep a tensor's shape (copies, casts, gradient switches): a 0-dim
# tensor stays 0-dim through them.
SHAPE_KEEPING_METHODS: frozenset[str] = frozenset(
    {"clone", "detach", "contiguous", "float", "half", "double", "bfloat16", "long", "int", "short", "byte", "char",
     "bool", "type", "type_as", "requires_grad_", "detach_", "to", "cpu", "cuda", "pin_memory", "squeeze", "abs",
     "clamp", "clip"}
)
# Names whose overloads disagree on their result, where those given more than the tensor give
# one Tensor (`where(c)` gives Tensors, `where(c, x, y)` a Tensor; `x.type()` is a string).
TENSOR_RESULT_WHEN_MIXED: frozenset[str] = frozenset({"where", "type"})
# Tensor methods no module, NumPy array, list or dict has: a value they are called on is a tensor.
TENSOR_ONLY_METHODS: frozenset[str] = frozenset(
    {"numel", "dim", "size", "unsqueeze", "permute", "contiguous", "detach", "numpy", "masked_fill", "masked_fill_",
     "unsqueeze_", "squeeze_", "is_floating_point", "element_size", "new_zeros", "new_ones", "new_full", "new_empty",
     "new_tensor", "type_as", "expand_as", "view_as", "softmax", "log_softmax", "argmax", "bmm", "matmul", "mm",
     "sigmoid", "relu", "pin_memory", "get_device"}
)
# Factories that make a 0-dim tensor of one Python number.
SCALAR_TENSOR_FACTORIES: frozenset[str] = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor",
                                                    "torch.asarray"})

# torch functions whose tensor arguments must be on one device (the rest of torch.* and
# torch.nn.functional too, except for the host-only arguments below).
HOST_ARGUMENT_FUNCTIONS: dict[str, dict[int, str]] = {
    # name -> {position: keyword} of the arguments PyTorch wants, or takes, on the CPU.
    "pack_padded_sequence": {1: "lengths"},
    # The lengths go to the CPU inside the op; the schema types them as Tensors all the same.
    "ctc_loss": {2: "input_lengths", 3: "target_lengths"},
}

# Arguments that must be on the host whatever the device of the rest: CUDA refuses the lengths of
# a packed sequence elsewhere ("'lengths' argument should be a 1D CPU int64 tensor", PyTorch
# 1.7 on). The kernel checks it; no schema says so.
HOST_REQUIRED_ARGUMENTS: dict[str, dict[int, str]] = {
    "torch.nn.utils.rnn.pack_padded_sequence": {1: "lengths"},
}
# The same, by the function's last name, for reading a `forward` of the file syntactically.
HOST_REQUIRED_BY_LAST_NAME: dict[str, dict[int, str]] = {
    name.rpartition(".")[2]: wanted for name, wanted in HOST_REQUIRED_ARGUMENTS.items()}

# Loss modules called with arguments that stay on the host, as for HOST_ARGUMENT_FUNCTIONS:
# torch's CTC loss takes its lengths there, and the warp-ctc binding wants its labels there too.
HOST_ARGUMENT_LOSSES: dict[str, dict[int, str]] = {
    **dict.fromkeys(("torch.nn.CTCLoss", "torch.nn.modules.loss.CTCLoss", "torch.nn.modules.CTCLoss"),
                    {2: "input_lengths", 3: "target_lengths"}),
    "warpctc_pytorch.CTCLoss": {1: "labels", 2: "act_lens", 3: "label_lens"},
}


def host_argument(wanted: dict[int, str], position: int, keyword: str | None) -> bool:
    """Whether the argument at this position, or by this keyword, is one of `wanted`."""
    return wanted.get(position) is not None if keyword is None else keyword in wanted.values()


def loads_pretrained_model(qualified: str) -> bool:
    """`AutoModel.from_pretrained`, `BertForSequenceClassification.from_pretrained`: models,
    unlike tokenizers, processors and configs."""
    owner, _, method = qualified.rpartition(".")
    if method != "from_pretrained":
        return False
    last = owner.rsplit(".", 1)[-1]
    return "Model" in last or "For" in last


# Tensor methods whose result never requires grad, whatever the receiver.
GRADLESS_METHODS: frozenset[str] = frozenset(
    {"detach", "argmax", "argmin", "argsort", "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "logical_and",
     "logical_or", "isnan", "isinf", "isfinite", "any", "all", "long", "int", "short", "byte", "char", "bool",
     "sign", "round", "floor", "ceil", "nonzero"}
)


# ---- calls with a role of their own ------------------------------------------------------

# What the checks answer on a machine without a GPU, in one process.
CPU_MODE_ANSWERS: dict[str, bool | int] = {
    **{check: False for check in AVAILABILITY_CHECKS if not check.endswith("device_count")},
    **{check: 0 for check in AVAILABILITY_CHECKS if check.endswith("device_count")},
    "torch.distributed.is_initialized": False,
    "torch.distributed.get_world_size": 1,
    "torch.distributed.get_rank": 0,
}
# The process's rank among every process of every machine: a GPU index only on the first machine,
# where the local rank (`LOCAL_RANK`, `hvd.local_rank()`) is one on every machine.
GLOBAL_RANK_CALLS: frozenset[str] = frozenset(
    {"torch.distributed.get_rank", "torch.distributed.distributed_c10d.get_rank", "horovod.torch.rank"}
)
# The environment variables launchers set to it: torchrun and torch.distributed.launch, Slurm,
# Open MPI, MPICH.
GLOBAL_RANK_VARIABLES: frozenset[str] = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
# The process's rank among the processes of its own machine: a GPU index, but the same numbers
# on every machine, so no rank in a job of several machines.
LOCAL_RANK_CALLS: frozenset[str] = frozenset({"horovod.torch.local_rank"})
LOCAL_RANK_VARIABLES: frozenset[str] = frozenset(
    {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}
)
# Where each is read by the name of the variable: the rank a machine's launcher sets.
RankScope = Literal["global", "local"]
RANK_VARIABLES: dict[str, RankScope] = {**dict.fromkeys(GLOBAL_RANK_VARIABLES, "global"),
                                  **dict.fromkeys(LOCAL_RANK_VARIABLES, "local")}
ENVIRONMENT_MAPPING = "os.environ"
# Packages of programs written to run as several processes, one per GPU, with a backend for
# hosts without one (gloo, MPI).
DISTRIBUTED_PACKAGES: tuple[str, ...] = ("torch.distributed", "horovod")
ENVIRONMENT_READS: frozenset[str] = frozenset({"os.environ.get", "os.getenv"})
LEGACY_HOST_TENSOR_TYPES: frozenset[str] = frozenset(
    f"torch.{name}Tensor" for name in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte",
                                       "Bool", "")
)


class CallRole(Enum):
    """What a call does that its operator schema (or its absence) does not say: the device
    it names or sets, the module it wraps, the data it loads or saves. The interpreter looks
    a call's role up here (`call_role`) before it asks `torch_ops` about it."""

    CURRENT_ACCELERATOR = "the accelerator's device, or None"
    CPU_MODE_CHECK = "a check whose answer the CPU mode knows"
    GLOBAL_RANK = "the process's rank on all machines"
    LOCAL_RANK = "the process's rank on its own machine"
    ENVIRONMENT_READ = "reads an environment variable"
    MEMORY_BUFFER = "an in-memory byte stream"
    DEVICE = "a device"
    SET_DEFAULT_DEVICE = "sets where factories put tensors"
    SET_CUDA_DEVICE = "sets the current CUDA device"
    WRAPPER = "wraps a module (DataParallel, DDP, compile)"
    DATALOADER = "a DataLoader"
    DEVICE_BATCH_ITERATOR = "yields batches whose fields are on its device (torchtext)"
    DEVICE_BATCH_ITERATOR_SPLITS = "one device batch iterator per dataset"
    TENSOR_DATASET = "a dataset of the tensors given"
    HOST_DATASET = "a library dataset of host data"
    NUMPY_FLOAT64 = "a float64 NumPy array"
    LEGACY_CUDA_TENSOR = "a legacy CUDA tensor constructor"
    LEGACY_HOST_TENSOR = "a legacy host tensor constructor"
    RETURNS_ITS_TENSOR = "returns the tensor it is given"
    FROM_NUMPY = "a host tensor sharing a NumPy array's memory"
    LOAD = "loads what was saved"
    SAVE = "saves a value"
    STRIP_STATE_DICT_PREFIX = "strips a state_dict's key prefix in place"
    PYTHON_NUMBER = "Python math: a number"


_CALL_ROLES: dict[str, CallRole] = {
    CURRENT_ACCELERATOR: CallRole.CURRENT_ACCELERATOR,
    **dict.fromkeys(CPU_MODE_ANSWERS, CallRole.CPU_MODE_CHECK),
    **dict.fromkeys(GLOBAL_RANK_CALLS, CallRole.GLOBAL_RANK),
    **dict.fromkeys(LOCAL_RANK_CALLS, CallRole.LOCAL_RANK),
    **dict.fromkeys(ENVIRONMENT_READS, CallRole.ENVIRONMENT_READ),
    "io.BytesIO": CallRole.MEMORY_BUFFER,
    TORCH_DEVICE: CallRole.DEVICE,
    **dict.fromkeys(SET_DEFAULT_DEVICE, CallRole.SET_DEFAULT_DEVICE),
    **dict.fromkeys(SET_CUDA_DEVICE, CallRole.SET_CUDA_DEVICE),
    **dict.fromkeys(WRAPPERS, CallRole.WRAPPER),
    **dict.fromkeys(DATALOADERS, CallRole.DATALOADER),
    **dict.fromkeys(TORCHTEXT_ITERATORS, CallRole.DEVICE_BATCH_ITERATOR),
    **dict.fromkeys(TORCHTEXT_ITERATOR_SPLITS, CallRole.DEVICE_BATCH_ITERATOR_SPLITS),
    **dict.fromkeys(TENSOR_DATASETS, CallRole.TENSOR_DATASET),
    **dict.fromkeys(NUMPY_FLOAT64_CONSTRUCTORS, CallRole.NUMPY_FLOAT64),
    **dict.fromkeys(LEGACY_CUDA_TENSOR_TYPES, CallRole.LEGACY_CUDA_TENSOR),
    **dict.fromkeys(LEGACY_HOST_TENSOR_TYPES, CallRole.LEGACY_HOST_TENSOR),
    **dict.fromkeys(RETURNS_ITS_TENSOR, CallRole.RETURNS_ITS_TENSOR),
    "torch.from_numpy": CallRole.FROM_NUMPY,
    **dict.fromkeys(TORCH_LOAD, CallRole.LOAD),
    **dict.fromkeys(TORCH_SAVE, CallRole.SAVE),
    STRIP_STATE_DICT_PREFIX: CallRole.STRIP_STATE_DICT_PREFIX,
}
_PREFIX_ROLES: tuple[tuple[tuple[str, ...], CallRole], ...] = (
    (HOST_DATASET_PREFIXES, CallRole.HOST_DATASET),
    (PYTHON_NUMBER_MODULES, CallRole.PYTHON_NUMBER),
)


def call_role(qualified: str) -> CallRole | None:
    """The role of a call by its qualified name, if it has one of its own."""
    role = _CALL_ROLES.get(qualified)
    if role is not None:
        return role
    for prefixes, prefixed_role in _PREFIX_ROLES:
        if qualified.startswith(prefixes):
            return prefixed_role
    return None


# Library helpers whose device parameter defaults to CUDA: (its position, its keyword). Read
# from their signatures: torchsummary 1.5.1's `summary(model, input_size, batch_size=-1,
# device="cuda")` builds its dummy inputs on CUDA wherever a GPU is available (on the CPU
# elsewhere), whatever device the model is on, and accepts only "cuda" or "cpu".
CUDA_DEFAULT_DEVICE_CALLS: dict[str, tuple[int, str]] = {
    "torchsummary.summary": (3, "device"),
    "torchsummary.torchsummary.summary": (3, "device"),
}


# ---- device strings ------------------------------------------------------------------------

# The device types `torch.device("<type>[:<index>]")` accepts, as c10's parser lists them
# (`Expected one of cpu, cuda, ... device type at start of device string`); the C++ source
# is their only record, so `tests/test_torch_brain.py` compares this with the installed torch.
TORCH_DEVICE_TYPES: frozenset[str] = frozenset(
    {
        "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla",
        "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone",
    }
)


def torch_device_accepts(text: str) -> bool:
    """Whether `torch.device(text)` accepts the string: a device type, then `:<index>`."""
    kind, colon, index = text.partition(":")
    return kind in TORCH_DEVICE_TYPES and (not colon or index.isdigit())


def is_optimizer_class(qualified: str) -> bool:
    """An optimizer of `torch.optim` (`torch.optim.SGD`, `torch.optim.adamw.AdamW`): a class
    there, not a learning-rate scheduler, an SWA helper or the `Optimizer` base."""
    parts = qualified.split(".")
    return (len(parts) in (3, 4) and parts[:2] == ["torch", "optim"] and parts[-1][:1].isupper()
            and parts[-1] != "Optimizer" and not {"lr_scheduler", "swa_utils"} & set(parts))
