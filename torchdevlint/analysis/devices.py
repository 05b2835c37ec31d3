"""Devices written in the code: literals (`"cuda:1"`, `torch.device("cuda", 1)`), the calls that
ask whether a GPU exists, and the calls that initialise CUDA.

Shared by the rules about where tensors and models live (TDL006, TDL007, TDL008, TDL012).
Literals only: a device held in a variable is the rule's own business, and a value the code
does not spell out is unknown.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.names import NameResolver, identifier_words
from torchdevlint.analysis.tree import descendants

# Device types that are not the host: a tensor there cannot become a NumPy array, and code
# that names one fails on a machine without it.
ACCELERATOR_TYPES: frozenset[str] = frozenset({"cuda", "mps", "xpu", "hpu", "npu", "mtia"})
_HOST_TYPES: frozenset[str] = frozenset({"cpu", "meta"})

TORCH_DEVICE: frozenset[str] = frozenset({"torch.device"})

# Calls that answer "is there a GPU?" (and how many): what a guard tests.
AVAILABILITY_CHECKS: frozenset[str] = frozenset(
    {
        "torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
        "torch.accelerator.is_available", "torch.accelerator.device_count",
        "torch.backends.mps.is_available", "torch.backends.cudnn.is_available",
        "torch.xpu.is_available", "torch.xpu.device_count",
    }
)

# Functions that initialise CUDA in the process: the CUDA runtime reads CUDA_VISIBLE_DEVICES
# then, once. `torch.cuda.device_count()` asks NVML first and `torch.cuda.manual_seed`,
# `memory_allocated` and `empty_cache` are lazy, so they are not here.
CUDA_INITIALISING_FUNCTIONS: frozenset[str] = frozenset(
    f"torch.cuda.{name}"
    for name in (
        "is_available", "init", "current_device", "set_device", "get_device_name",
        "get_device_properties", "get_device_capability", "synchronize", "mem_get_info",
        "get_arch_list", "current_stream", "default_stream", "Stream", "Event",
    )
)

# `torch.cuda.FloatTensor(...)` and friends: legacy constructors that allocate on the GPU.
# The legacy tensor types and the dtype each makes (`torch.FloatTensor` is float32 ...).
LEGACY_TENSOR_DTYPES: dict[str, str] = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
    "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
}
LEGACY_CUDA_TENSOR_TYPES: frozenset[str] = frozenset(f"torch.cuda.{name}Tensor" for name in LEGACY_TENSOR_DTYPES)

# Contexts and decorators under which results do not require grad.
GRAD_DISABLING: frozenset[str] = frozenset(
    {
        "torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled",
        "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad",
        "torch.autograd.inference_mode", "torch.autograd.grad_mode.inference_mode",
    }
)


@dataclass(frozen=True)
class DeviceLiteral:
    """A device spelled out in the code: `"cuda:1"` is DeviceLiteral("cuda", 1)."""

    type: str
    index: int | None = None

    @property
    def is_accelerator(self) -> bool:
        return self.type in ACCELERATOR_TYPES

    @property
    def is_host(self) -> bool:
        return self.type in _HOST_TYPES


# String prefixes whose literal, without backslashes, is the text between its quotes.
_VERBATIM_PREFIXES = frozenset({"", "r", "R", "u", "U"})


def string_value(node: cst.BaseExpression) -> str | None:
    """The text of a plain string literal; None for bytes, f-strings and anything else.

    Rules read literals through here, never through LibCST's `evaluated_value` directly: that
    compiles the literal with the stdlib, which warns about the user's code (`"\\d"` is an
    invalid escape: a SyntaxWarning on Python 3.12+, a DeprecationWarning before) on our
    stderr, and raises where the user runs with warnings as errors.
    """
    # An exact type test: isinstance on LibCST's ABCs is slow, and every string asks this.
    if type(node) is cst.SimpleString:
        raw = node.value
        quote = 0
        while raw[quote] not in "'\"":
            quote += 1
        if "\\" not in raw and raw[:quote] in _VERBATIM_PREFIXES:
            # The common case, without compiling the literal (evaluated_value does).
            width = 3 if raw[quote:quote + 3] in ('"""', "'''") else 1
            return raw[quote + width:len(raw) - width]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd literals are simply not device strings
            return None
        return value if isinstance(value, str) else None
    return None


# What a string names when it names a device (`"cuda:1"`, `"cpu"`).
_DEVICE_STRING_TYPES = ("cuda", "cpu", "mps", "xpu", "meta")


def is_device_string(node: cst.BaseExpression) -> bool:
    value = string_value(node)
    return value is not None and value.split(":", 1)[0] in _DEVICE_STRING_TYPES


def integer_value(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.evaluated_value)
        except ValueError:
            return None
    return None


def parse_device_string(value: str) -> DeviceLiteral | None:
    """`"cuda"`, `"cuda:1"`, `"cpu"`; None for anything torch.device would not accept as one."""
    kind, colon, index = value.partition(":")
    if kind not in ACCELERATOR_TYPES and kind not in _HOST_TYPES:
        return None
    if not colon:
        return DeviceLiteral(kind)
    if not index.isdigit():
        return None
    return DeviceLiteral(kind, int(index))


def device_literal(node: cst.BaseExpression, names: NameResolver) -> DeviceLiteral | None:
    """A string device or `torch.device(...)` with literal arguments."""
    value = string_value(node)
    if value is not None:
        return parse_device_string(value)
    if not (isinstance(node, cst.Call) and names.qualified_name(node.func, among=TORCH_DEVICE) is not None):
        return None
    if any(arg.star for arg in node.args):
        return None
    positional = [arg.value for arg in node.args if arg.keyword is None]
    keywords = {arg.keyword.value: arg.value for arg in node.args if arg.keyword is not None}
    kind_node = positional[0] if positional else keywords.get("type")
    index_node = positional[1] if len(positional) > 1 else keywords.get("index")
    kind_value = string_value(kind_node) if kind_node is not None else None
    if kind_value is None:
        return None
    parsed = parse_device_string(kind_value)
    if parsed is None or index_node is None:
        return parsed
    index = integer_value(index_node)
    if index is None or parsed.index is not None:
        return None
    return DeviceLiteral(parsed.type, index)


def subnodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node inside `node` (itself included), not entering nested functions or classes."""
    return descendants(node, into_definitions=False)


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call inside an expression."""
    return [current for current in subnodes(node) if type(current) is cst.Call]


def mentions_any(node: cst.CSTNode, words: tuple[str, ...], *, strings: bool = False,
                 whole_words: Mapping[str, frozenset[str]] | None = None) -> bool:
    """Does a name (or, with `strings`, a string literal) in the expression contain one of the
    words? `use_cuda`, `args.gpu`, `x.is_cuda`, `device.type == "cpu"`: tests about devices.
    A word of `whole_words` counts only where a word of the name is one of its spellings (or,
    for a spelling `*word`, ends with the word: `localrank`): `dist` is not in `distill`."""
    for current in subnodes(node):
        text: str | None = None
        if type(current) is cst.Name:
            text = current.value
        elif strings and type(current) is cst.SimpleString:
            text = string_value(current)
        if text is not None and any(_holds_word(text, word, whole_words) for word in words):
            return True
    return False


def _holds_word(text: str, word: str, whole_words: Mapping[str, frozenset[str]] | None) -> bool:
    if word not in text.lower():
        return False
    spellings = whole_words.get(word) if whole_words is not None else None
    if spellings is None:
        return True
    # `*rank` in the spellings: any word ending so (`localrank`).
    return any(part in spellings or f"*{word}" in spellings and part.endswith(word)
               for part in identifier_words(text))


def asks_for_gpu(node: cst.CSTNode, names: NameResolver) -> bool:
    """Does the expression call `torch.cuda.is_available()`, `device_count()` or the like?"""
    return any(names.qualified_name(call.func, among=AVAILABILITY_CHECKS) is not None for call in calls_in(node))


def is_grad_disabling(call: cst.BaseExpression, names: NameResolver) -> bool:
    """`torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)` (or the bare decorator)."""
    target = call.func if isinstance(call, cst.Call) else call
    return disables_grad(names.qualified_name(target, among=GRAD_DISABLING), call)


def disables_grad(qualified: str | None, call: cst.BaseExpression) -> bool:
    """Whether `call` (a context manager or decorator whose callee is `qualified`) turns off autograd."""
    if qualified not in GRAD_DISABLING:
        return False
    if qualified == "torch.set_grad_enabled":
        return (
            isinstance(call, cst.Call)
            and len(call.args) == 1
            and isinstance(call.args[0].value, cst.Name)
            and call.args[0].value.value == "False"
        )
    if qualified.endswith("inference_mode") and isinstance(call, cst.Call) and call.args:
        first = call.args[0].value
        return not (isinstance(first, cst.Name) and first.value == "False")
    return True


# Names in a condition that say the code asks where a tensor is (`t.is_cuda`, `x.device`).
_LOCATION_TESTS = ("is_cuda", "is_cpu", "device")
_GPU_WORDS = ("cuda", "gpu")


def under_placement_test(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool:
    """Inside a branch chosen by where a tensor is (`if t.is_cuda:`), or the CPU branch of a
    GPU test (`else` of `if use_cuda:`), within the enclosing function. `ancestors`: nearest first."""
    child: cst.CSTNode = node
    for ancestor in ancestors:
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)):
            test = ancestor.test
            if child is not test:
                if mentions_any(test, _LOCATION_TESTS):
                    return True
                negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
                in_else = child is ancestor.orelse
                if mentions_any(test, _GPU_WORDS) and (in_else != negated):
                    return True
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return False
        child = ancestor
    return False
