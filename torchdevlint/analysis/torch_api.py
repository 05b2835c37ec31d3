"""What the analysis knows about the torch API, as fully qualified names.

Whitelists on purpose: a name missing here makes a value "unknown", and rules stay
silent on unknown values. Precision before recall.
"""

from __future__ import annotations

# Factories that allocate a new tensor on the default (CPU) device unless given `device=`.
TENSOR_FACTORIES: frozenset[str] = frozenset(
    f"torch.{name}"
    for name in (
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
        "arange", "range", "linspace", "logspace", "eye", "tensor", "empty_strided",
        "tril_indices", "triu_indices", "bartlett_window", "blackman_window",
        "hamming_window", "hann_window", "kaiser_window", "sparse_coo_tensor",
    )
)

# Functions that return one Tensor (not a tuple, not a Python number).
_TENSOR_FUNCTIONS = (
    "as_tensor", "from_numpy", "cat", "concat", "concatenate", "stack", "hstack", "vstack",
    "dstack", "matmul", "mm", "bmm", "einsum", "where", "clamp", "clip", "exp", "log",
    "sigmoid", "tanh", "relu", "softmax", "log_softmax", "flatten", "reshape", "squeeze",
    "unsqueeze", "transpose", "permute", "abs", "sqrt", "mean", "sum", "prod", "argmax",
    "argmin", "gather", "index_select", "masked_fill", "outer", "cumsum", "diag", "tril",
    "triu", "roll", "flip", "repeat_interleave", "pow", "mul", "add", "sub", "div",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "randint_like", "normal", "bernoulli", "multinomial", "cdist", "norm", "square", "erf",
    "sin", "cos", "floor", "ceil", "round", "sign", "logsumexp", "cross", "dot", "addmm",
    "baddbmm", "tensordot", "kron", "pdist", "cosine_similarity", "pairwise_distance",
    "nan_to_num", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not",
    "eq", "ne", "gt", "lt", "ge", "le", "maximum", "minimum", "bucketize", "searchsorted",
    "take", "take_along_dim", "narrow", "movedim", "atleast_1d", "atleast_2d", "bincount",
    "histc", "clone", "detach", "t", "conj", "real", "imag", "view_as_real", "view_as_complex",
    "polar", "complex", "fft", "rfft",
)
TENSOR_RETURNING_FUNCTIONS: frozenset[str] = (
    TENSOR_FACTORIES
    | frozenset(f"torch.{name}" for name in _TENSOR_FUNCTIONS)
    | frozenset(f"torch.Tensor.{name}" for name in ("to", "cuda", "cpu", "float", "half"))
)

# torch.nn.functional returns a tensor except for these.
NON_TENSOR_FUNCTIONAL: frozenset[str] = frozenset(
    {"max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
     "multi_head_attention_forward", "scaled_dot_product_attention_math"}
)

# Tensor methods that return a Tensor.
TENSOR_RETURNING_METHODS: frozenset[str] = frozenset(
    {
        "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "long", "int", "short",
        "byte", "char", "bool", "type", "pin_memory", "contiguous", "detach", "clone",
        "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "unsqueeze",
        "squeeze", "flatten", "unflatten", "expand", "expand_as", "repeat", "sum", "mean",
        "std", "var", "prod", "abs", "exp", "log", "sqrt", "pow", "clamp", "clip",
        "sigmoid", "tanh", "relu", "softmax", "log_softmax", "argmax", "argmin", "matmul",
        "mm", "bmm", "masked_fill", "gather", "index_select", "narrow", "flip", "roll",
        "cumsum", "norm", "neg", "mul", "add", "sub", "div", "type_as", "new_zeros",
        "new_ones", "new_empty", "new_full", "new_tensor", "float_power", "squeeze_",
        "unsqueeze_", "to_dense", "to_sparse", "requires_grad_", "nan_to_num", "round",
        "floor", "ceil", "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "any", "all",
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "log2", "log10", "log1p", "expm1",
        "rsqrt", "reciprocal", "sign", "trunc", "frac", "cumprod", "tril", "triu", "diag", "square",
        "clamp_min", "clamp_max", "amax", "amin", "logsumexp", "masked_select", "index_fill", "scatter",
        "scatter_add", "where", "maximum", "minimum", "lerp", "addmm", "baddbmm", "outer", "dot",
        "logical_and", "logical_or", "isnan", "isinf", "nonzero", "sort_values", "movedim",
        "swapaxes", "swapdims", "mT", "abs_", "clamp_", "fill_", "zero_", "normal_", "uniform_",
    }
)

# Methods whose result is a moved or re-typed copy; calling one as a statement throws it away.
MOVE_METHODS: frozenset[str] = frozenset(
    {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "long", "int", "short",
     "byte", "char", "bool", "pin_memory"}
)

# nn.Module methods that work in place and return the module itself.
MODULE_SELF_RETURNING_METHODS: frozenset[str] = frozenset(
    {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval",
     "requires_grad_", "share_memory", "apply", "type", "to_empty", "xpu", "mps"}
)

# Methods that read a tensor's values back to the host: their result is never device data.
HOST_READ_METHODS: frozenset[str] = frozenset({"cpu", "numpy", "item", "tolist"})

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
SET_CUDA_DEVICE = "torch.cuda.set_device"
CUDA_DEVICE_CONTEXT = "torch.cuda.device"
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

WRAPPERS: frozenset[str] = DATA_PARALLEL | frozenset(
    {
        "torch.nn.DistributedDataParallel",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)

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

# Iterator wrappers that yield what they are given.
PASS_THROUGH_ITERATORS: frozenset[str] = frozenset(
    {"tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "iter"}
)

TORCH_LOAD: frozenset[str] = frozenset({"torch.load", "torch.serialization.load"})
# Dataset classes whose items are decoded from files into CPU tensors.
HOST_DATASET_PREFIXES = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")
TENSOR_DATASETS: frozenset[str] = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
TORCH_SAVE: frozenset[str] = frozenset({"torch.save", "torch.serialization.save"})
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


def is_tensor_function(qualified_name: str) -> bool:
    if qualified_name in TENSOR_RETURNING_FUNCTIONS or qualified_name in NN_TENSOR_CLASSES:
        return True
    head, _, last = qualified_name.rpartition(".")
    if head == "torch.nn.functional":
        return not last.startswith("_") and last not in NON_TENSOR_FUNCTIONAL
    return False


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


def is_stateless_module(qualified_name: str) -> bool:
    """`torch.nn.MSELoss`, `torch.nn.ReLU`, `torch.nn.MaxPool2d`: no tensors of their own."""
    head, _, last = qualified_name.rpartition(".")
    if not (head in ("torch.nn", "torch.nn.modules") or head.startswith("torch.nn.modules.")):
        return False
    if last.endswith("Loss"):
        return True
    return any(last == prefix or (last.startswith(prefix) and last[len(prefix):] in ("1d", "2d", "3d", ""))
               for prefix in _STATELESS_MODULE_PREFIXES)


DTYPE_NAMES: frozenset[str] = frozenset(
    {"float", "float32", "float64", "double", "float16", "half", "bfloat16", "int", "int32", "int64",
     "long", "int16", "short", "int8", "uint8", "bool", "complex64", "complex128", "cfloat", "cdouble"}
)

# Tensor methods whose tensor arguments must be on the receiver's device.
TENSOR_METHODS_WITH_TENSOR_OPERANDS: frozenset[str] = frozenset(
    {"add", "sub", "mul", "div", "matmul", "mm", "bmm", "dot", "eq", "ne", "gt", "lt", "ge", "le",
     "masked_fill", "masked_fill_", "add_", "sub_", "mul_", "div_", "type_as", "expand_as", "view_as",
     "where", "maximum", "minimum", "pow", "gather", "index_select", "scatter", "scatter_", "scatter_add",
     "scatter_add_", "lerp", "lerp_", "addmm", "baddbmm", "cross", "outer"}
)
# Tensor methods that take a tensor only for its shape, dtype or device.
SHAPE_ONLY_TENSOR_METHODS: frozenset[str] = frozenset({"expand_as", "view_as", "reshape_as", "type_as"})

# Reductions whose result, called without arguments, has no dimensions.
FULL_REDUCTIONS: frozenset[str] = frozenset(
    {"sum", "mean", "prod", "std", "var", "max", "min", "norm", "any", "all", "amax", "amin", "median"}
)

# torch functions whose tensor arguments must be on one device (the rest of torch.* and
# torch.nn.functional too, except for the host-only arguments below).
HOST_ARGUMENT_FUNCTIONS: dict[str, tuple[int, str]] = {
    # name -> (position, keyword) of an argument PyTorch wants on the CPU.
    "pack_padded_sequence": (1, "lengths"),
}


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
