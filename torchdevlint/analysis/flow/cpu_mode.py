"""The program's CPU mode: how it runs on a machine without a GPU, its settings choosing the CPU.

A program offers a CPU mode when it tests for one somewhere: `torch.cuda.is_available()`, a
device with a CPU fallback, or a setting (`use_cuda`, `args.no_cuda`, `opt.use_gpu`,
`--device cpu`). In that mode every availability check is false and every such setting
chooses the CPU. The interpreter evaluates tests in that mode (`Value.in_cpu_mode`), so the
model knows which branches the CPU mode takes and which code it never reaches.

Settings are recognised by name, as people name them: a name about the GPU (`use_gpu`,
`cuda`, `n_gpu`, `gpu_ids`, `world_size`) is switched off, one about the CPU or negated
(`cpu`, `no_cuda`, `disable_cuda`) is on, and a device setting (`device`, `args.dev`) is
`"cpu"`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.brains.argparse_options import read_option
from torchdevlint.analysis.devices import integer_value, string_value
from torchdevlint.analysis.flow.values import SWITCHED_OFF, ModeConstant, Off
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes

__all__ = ["Off", "compare", "conjunction", "device_type", "disjunction", "literal_constant", "names_a_gpu_setting", "names_the_cpu_mode",
           "negation", "option_offers_cpu_mode", "setting_in_cpu_mode", "truth"]

@functools.lru_cache(maxsize=4096)
def setting_in_cpu_mode(name: str) -> ModeConstant | None:
    """What a setting of this name is in the CPU mode; None for a name that is no setting."""
    words = naming.words(name)
    if not words:
        return None
    found = set(words)
    if "cpu" in found or found & naming.NEGATION_WORDS and found & (naming.GPU_WORDS | naming.DEVICE_SETTING_WORDS):
        return True
    if found & naming.GPU_WORDS or words[-2:] == ["local", "rank"]:
        return SWITCHED_OFF
    if words[-1] in naming.DEVICE_SETTING_WORDS:
        return "cpu"
    return None


_NAMED_CONSTANTS: dict[str, ModeConstant] = {"True": True, "False": False, "None": SWITCHED_OFF}


def _any_words(node: cst.CSTNode, matches: Callable[[set[str]], bool], *, names: bool = True,
               strings: bool = True, skip: Callable[[cst.CSTNode], bool] | None = None) -> bool:
    """Whether the words of a name or string literal in the expression satisfy `matches`
    (outside the parts `skip` accepts)."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if skip is not None and skip(current):
            continue
        text = current.value if names and type(current) is cst.Name else \
            string_value(current) if strings and type(current) is cst.SimpleString else None
        if text is not None and matches(set(naming.words(text))):
            return True
        stack.extend(child_nodes(current))
    return False


def _says_cpu_mode(words: set[str]) -> bool:
    return bool(words & naming.CPU_MODE_WORDS or words & naming.NEGATION_WORDS and words & (naming.GPU_WORDS | naming.DEVICE_SETTING_WORDS))


def names_the_cpu_mode(test: cst.CSTNode) -> bool:
    """Whether a test says the program runs without a GPU: it asks for one
    (`torch.cuda.is_available()`), names the CPU (`device.type == "cpu"`, `args.cpu`) or a
    GPU switched off (`args.no_cuda`). `if args.use_cuda:` alone may be about where to keep
    features, `if args.distributed:` about processes: neither says there is a CPU mode."""
    return _any_words(test, _says_cpu_mode)




def names_a_gpu_setting(test: cst.CSTNode) -> bool:
    """Whether a test reads a setting about the GPU (`opt.use_gpu`, `use_cuda`, `x.is_cuda`),
    other than a count compared so that no GPU and one GPU answer alike (`num_gpus > 1`:
    one machine or several, not the CPU or a GPU)."""
    return _any_words(test, lambda words: bool(words & naming.GPU_SETTING_WORDS), strings=False, skip=_counts_several_gpus)


_COMPARE = {cst.GreaterThan: operator.gt, cst.GreaterThanEqual: operator.ge, cst.LessThan: operator.lt,
            cst.LessThanEqual: operator.le, cst.Equal: operator.eq, cst.NotEqual: operator.ne}


def _counts_several_gpus(node: cst.CSTNode) -> bool:
    """`num_gpus > 1`, `n_gpu >= 2`, `torch.cuda.device_count() > 1`: a GPU count against a
    number, the same for 0 and 1."""
    if type(node) is not cst.Comparison or len(node.comparisons) != 1:
        return False
    target = node.comparisons[0]
    compare = _COMPARE.get(type(target.operator))
    bound = integer_value(target.comparator)
    counted = node.left.func if type(node.left) is cst.Call and not node.left.args else node.left
    name = dotted_name(counted)
    if compare is None or bound is None or name is None or not _counts_gpus(set(naming.words(name.rpartition(".")[2]))):
        return False
    return bool(compare(0, bound)) == bool(compare(1, bound))


def _counts_gpus(words: set[str]) -> bool:
    """`num_gpus`, `ngpu`, `n_gpu`, `gpu_count`, `torch.cuda.device_count()`: a number of GPUs."""
    return bool(words & {"gpus", "ngpu", "ngpus"}) or "gpu" in words and bool(words & {"n", "num", "number", "count"}) \
        or words == {"device", "count"}


def option_offers_cpu_mode(call: cst.Call) -> bool:
    """`parser.add_argument(...)` of an option that runs the program on the CPU: `--cpu`,
    `--no-cuda`, a `--cuda`/`--gpu` switch off by default (`action="store_true"`), a
    `--device` or `--gpu_ids` option that offers the CPU (its default, choices or help: "use
    -1 for CPU")."""
    option = read_option(call)
    if option is None:
        return False
    names, keywords = option.names, option.keywords
    dest = keywords.get("dest")
    words: set[str] = set()
    for name in [*names, string_value(dest) if dest is not None else None]:
        if name is not None and name.startswith("-") or name is not None and dest is not None:
            words.update(naming.words(name))
    if not words:
        return False
    if "cpu" in words or words & naming.NEGATION_WORDS and words & (naming.GPU_WORDS | naming.DEVICE_SETTING_WORDS):
        return True
    # A switch for the GPU itself, not for distributed training (`--multiprocessing-distributed`
    # off runs one process, on the GPU all the same).
    action = keywords.get("action")
    if words & naming.GPU_SETTING_WORDS and action is not None and option.action == "store_true":
        return True
    if words & naming.GPU_SETTING_WORDS and option.type_name == "bool":
        # `--cuda type=bool`: meant as a switch, though it may not switch (see `stuck_switch`).
        return True
    if words & (naming.DEVICE_SETTING_WORDS | naming.GPU_SETTING_WORDS):
        # `--device` offering "cpu"; `--gpu_ids` whose help says "use -1 for CPU".
        offered = [keywords.get(key) for key in ("default", "choices", "help")]
        return any(node is not None and _mentions_cpu(node) for node in offered)
    return False


def _mentions_cpu(node: cst.CSTNode) -> bool:
    return _any_words(node, lambda words: "cpu" in words, names=False)


def literal_constant(node: cst.BaseExpression) -> ModeConstant | None:
    """The constant a literal is in every mode: numbers, strings, True/False/None."""
    if type(node) is cst.Name:
        return _NAMED_CONSTANTS.get(node.value)
    if type(node) is cst.UnaryOperation and isinstance(node.operator, cst.Minus):
        inner = integer_value(node.expression)
        return None if inner is None else -inner
    number = integer_value(node)
    if number is not None:
        return number
    return string_value(node)


def truth(constant: ModeConstant | None) -> bool | None:
    if constant is None:
        return None
    if isinstance(constant, Off):
        return False
    return bool(constant)


def negation(constant: ModeConstant | None) -> bool | None:
    value = truth(constant)
    return None if value is None else not value


def conjunction(left: ModeConstant | None, right: ModeConstant | None) -> bool | None:
    a, b = truth(left), truth(right)
    if a is False or b is False:
        return False
    return True if a and b else None


def disjunction(left: ModeConstant | None, right: ModeConstant | None) -> bool | None:
    a, b = truth(left), truth(right)
    if a or b:
        return True
    return False if a is False and b is False else None


def compare(operator: cst.BaseCompOp, left: ModeConstant | None, right: ModeConstant | None) -> bool | None:
    """One comparison in the CPU mode; None where the constants do not decide it."""
    if left is None or right is None:
        return None
    if isinstance(operator, (cst.Is, cst.IsNot)):
        if not isinstance(right, Off):
            return None
        result = isinstance(left, Off)
        return result if isinstance(operator, cst.Is) else not result
    if isinstance(operator, (cst.In, cst.NotIn)):
        if isinstance(left, str) and isinstance(right, str):
            return (left in right) == isinstance(operator, cst.In)
        return None
    if isinstance(left, Off) or isinstance(right, Off):
        return _compare_switched_off(operator, left, right)
    if isinstance(operator, cst.Equal):
        return left == right
    if isinstance(operator, cst.NotEqual):
        return left != right
    if isinstance(left, str) or isinstance(right, str):
        return None
    if isinstance(operator, cst.LessThan):
        return left < right
    if isinstance(operator, cst.LessThanEqual):
        return left <= right
    if isinstance(operator, cst.GreaterThan):
        return left > right
    if isinstance(operator, cst.GreaterThanEqual):
        return left >= right
    return None


def _compare_switched_off(operator: cst.BaseCompOp, left: ModeConstant, right: ModeConstant) -> bool | None:
    """A setting switched off is None, False or a negative number: below every device index."""
    flipped = isinstance(right, Off)
    other = left if flipped else right
    if isinstance(other, Off):
        return isinstance(operator, cst.Equal) if isinstance(operator, (cst.Equal, cst.NotEqual)) else None
    if isinstance(other, bool) or not isinstance(other, int):
        return None
    if flipped:
        # `n < off` is `off > n`.
        operator = {cst.LessThan: cst.GreaterThan(), cst.LessThanEqual: cst.GreaterThanEqual(),
                    cst.GreaterThan: cst.LessThan(), cst.GreaterThanEqual: cst.LessThanEqual()}.get(
            type(operator), operator)
    if isinstance(operator, cst.Equal):
        return True if other == -1 else (False if other > 0 else None)
    if isinstance(operator, cst.NotEqual):
        return False if other == -1 else (True if other > 0 else None)
    if isinstance(operator, cst.GreaterThan):
        return False if other >= -1 else None
    if isinstance(operator, cst.GreaterThanEqual):
        return False if other >= 0 else None
    if isinstance(operator, cst.LessThan):
        return True if other >= 0 else None
    if isinstance(operator, cst.LessThanEqual):
        return True if other >= -1 else None
    return None


def device_type(constant: ModeConstant | None) -> str | None:
    """`"cuda:1"` -> `"cuda"`: the `.type` of a device given by that string."""
    return constant.partition(":")[0] if isinstance(constant, str) else None
