"""Write `torchdevlint/analysis/brains/torch_ops.py` from the installed (pinned) torch.

What torch states about its own API, read from files every wheel ships, never by importing it:
- `torchgen/packaged/ATen/native/native_functions.yaml`: each operator's schema, whether its
  Tensor arguments are checked to share a device (`device_check: NoCheck` turns that off;
  a comment naming TensorIterator says the iterator checks them, letting 0-dim CPU tensors
  through), and tags (`pointwise`, `reduction`);
- `torch/_C/_VariableFunctions.pyi` (torch.*), `torch/_C/__init__.pyi` (Tensor methods),
  `torch/nn/functional.pyi` and `torch/nn/functional.py` (torch.nn.functional.*),
  `torch/nn/utils/clip_grad.py` (torch.nn.utils' clipping): which names Python has, their
  parameters and what they return.

Run: `python scripts/generate_torch_brain.py` (add `--check` to compare instead of write).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "torchdevlint" / "analysis" / "brains" / "torch_ops.py"
PINNED_TORCH = "2.13.0"

# Return annotations, by what a rule can say of the value.
_TENSOR = {"Tensor", "torch.Tensor"}
_NUMBER = {"_bool", "_int", "_float", "_complex", "bool", "int", "float", "complex", "Number", "SymInt", "_size",
           "Size"}


@dataclass
class Operator:
    """What native_functions.yaml says of one base name, over all its overloads."""

    unchecked: bool = False  # some overload has `device_check: NoCheck`
    iterator: bool = True  # every unchecked overload says TensorIterator checks instead
    tags: set[str] = field(default_factory=set)


@dataclass
class PythonName:
    """What the stubs say of one Python name, over all its overloads."""

    results: set[str] = field(default_factory=set)
    has_device: bool = False
    takes_tensor: bool = False  # some overload has a required Tensor parameter (beside self)


def read_operators(yaml_path: Path) -> dict[str, Operator]:
    """Base name -> facts; read line by line because the device-check comments carry meaning."""
    operators: dict[str, Operator] = {}
    current: Operator | None = None
    for line in yaml_path.read_text(encoding="utf-8").splitlines():
        found = re.match(r"- func: ([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?\(", line)
        if found:
            name = found.group(1)
            current = operators.setdefault(name, Operator())
            # `add_` and `add.out` are the same operator's forms.
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("device_check:") and "NoCheck" in stripped:
            current.unchecked = True
            if "TensorIterator" not in stripped:
                current.iterator = False
        elif stripped.startswith("tags:"):
            current.tags.update(tag.strip() for tag in stripped[5:].strip(" []").split(",") if tag.strip())
    return operators


def _annotation_kind(node: ast.expr | None) -> str:
    """t: a Tensor; s: Tensors (a tuple, list or named tuple of them); n: a number or bool;
    0: None; o: anything else."""
    if node is None:
        return "o"
    text = ast.unparse(node)
    if text in _TENSOR:
        return "t"
    if text in _NUMBER:
        return "n"
    if text == "None":
        return "0"
    if text.startswith("torch.return_types.") or re.fullmatch(
            r"(tuple|list|Sequence|_?[Tt]uple|List)\[Tensor(, Tensor)*(, \.\.\.)?\]", text):
        return "s"
    return "o"


def _is_tensor_annotation(node: ast.expr | None) -> bool:
    return node is not None and ast.unparse(node) in ("Tensor", "Tensor | None", "Optional[Tensor]")


def _functions(body: list[ast.stmt]) -> Iterator[ast.FunctionDef]:
    for statement in body:
        if isinstance(statement, ast.FunctionDef) and not statement.name.startswith("_"):
            yield statement


def _return_annotation(function: ast.FunctionDef) -> ast.expr | None:
    """The return annotation, or the one a type comment gives (`# type: (Tensor, int) -> Tensor`)."""
    if function.returns is not None or function.type_comment is None:
        return function.returns
    written = function.type_comment.partition("->")[2].strip()
    if written.startswith("(") and written.endswith(")") and "," not in written:
        written = written[1:-1]
    try:
        return ast.parse(written, mode="eval").body
    except SyntaxError:
        return None


def read_python_names(functions: Iterator[ast.FunctionDef], *, method: bool) -> dict[str, PythonName]:
    names: dict[str, PythonName] = {}
    for function in functions:
        entry = names.setdefault(function.name, PythonName())
        entry.results.add(_annotation_kind(_return_annotation(function)))
        arguments = function.args
        parameters = [*arguments.posonlyargs, *arguments.args][1 if method else 0:]
        required = parameters[: len(parameters) - len(arguments.defaults)]
        entry.takes_tensor |= any(_is_tensor_annotation(p.annotation) for p in required)
        entry.has_device |= any(p.arg == "device" for p in [*parameters, *arguments.kwonlyargs])
    return names


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            return statement
    raise SystemExit(f"torch has no class {name} where expected")


def _parse(site_packages: Path, path: str) -> ast.Module:
    return ast.parse((site_packages / path).read_text(encoding="utf-8"), type_comments=True)


def _exported(tree: ast.Module) -> set[str]:
    """The names a module's `__all__` lists."""
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets):
            return set(ast.literal_eval(statement.value))
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                and statement.target.id == "__all__" and statement.value is not None:
            return set(ast.literal_eval(statement.value))  # `__all__: list[str] = [...]`
    return set()


def _merged(primary: dict[str, PythonName], secondary: dict[str, PythonName]) -> dict[str, PythonName]:
    """Names of the compiled stubs, and those only Python code defines (`torch.einsum`, `Tensor.norm`)."""
    return {**{name: entry for name, entry in secondary.items() if name not in primary}, **primary}


def encode(name: str, python: PythonName, operators: dict[str, Operator]) -> str:
    """One entry: the result letter, then flags (see the generated module's docstring)."""
    result = python.results.pop() if len(python.results) == 1 else "m"
    flags = ""
    if python.has_device and not python.takes_tensor:
        flags += "F"
    elif python.has_device:
        flags += "L"
    operator = operators.get(name) or operators.get(name.rstrip("_"))
    if operator is not None:
        if "pointwise" in operator.tags:
            flags += "P"
        if "reduction" in operator.tags:
            flags += "R"
        flags += device_check(operator)
    return result + flags


def generate(site_packages: Path) -> str:
    operators = read_operators(site_packages / "torchgen/packaged/ATen/native/native_functions.yaml")
    variable_functions = _parse(site_packages, "torch/_C/_VariableFunctions.pyi")
    python_functions = _parse(site_packages, "torch/functional.py")
    exported = _exported(python_functions)
    tensor_base = _class(_parse(site_packages, "torch/_C/__init__.pyi"), "TensorBase")
    tensor = _class(_parse(site_packages, "torch/_tensor.py"), "Tensor")
    functional: dict[str, PythonName] = {}
    for stub in ("torch/nn/functional.py", "torch/nn/functional.pyi"):
        # The stub's declarations replace the source's untyped `_add_docstr` ones.
        functional.update(read_python_names(_functions(_parse(site_packages, stub).body), method=False))
    # torch.nn.utils' gradient clipping (`clip_grad_norm_` gives the total norm, a Tensor).
    clipping = _parse(site_packages, "torch/nn/utils/clip_grad.py")
    clipping_names = _exported(clipping)
    tables = {
        "FUNCTIONS": _merged(
            read_python_names(_functions(variable_functions.body), method=False),
            read_python_names((f for f in _functions(python_functions.body) if f.name in exported), method=False)),
        "METHODS": _merged(read_python_names(_functions(tensor_base.body), method=True),
                           read_python_names(_functions(tensor.body), method=True)),
        "FUNCTIONAL": functional,
        "NN_UTILS": read_python_names((f for f in _functions(clipping.body) if f.name in clipping_names), method=False),
    }
    lines = [
        f'"""What torch {PINNED_TORCH} states about its Python API. Generated by',
        "scripts/generate_torch_brain.py from the wheel's native_functions.yaml and stubs: do not edit.",
        "",
        "Each entry is a result letter and flags. Result: t a Tensor, s Tensors (tuple, list, named",
        "tuple), n a number or bool, 0 None, o something else, m differs between overloads.",
        "Flags: F a factory (takes device=, no Tensor input), L a factory like its Tensor input",
        "(takes device=), P pointwise, R a reduction; how CUDA checks its Tensor arguments: X all on",
        "one device, I TensorIterator (one device, 0-dim CPU tensors allowed), N not checked.",
        '"""',
        "",
        f'TORCH_VERSION = "{PINNED_TORCH}"',
    ]
    for table, names in tables.items():
        lines.append("")
        lines.append(f"{table}: dict[str, str] = {{")
        for name in sorted(names):
            lines.append(f"    {name!r}: {encode(name, names[name], operators)!r},")
        lines.append("}")
    lines.append("")
    lines.append("# Every operator of native_functions.yaml by its ATen base name (`add`, `add_`,")
    lines.append("# `_log_softmax`), with how CUDA checks its Tensor arguments: X, I or N as above.")
    lines.append("OPERATORS: dict[str, str] = {")
    for name in sorted(operators):
        lines.append(f"    {name!r}: {device_check(operators[name])!r},")
    lines.append("}")
    lines.append("")
    lines.append("# What an nn.DataParallel or DistributedDataParallel wrapper answers to itself: the")
    lines.append("# attributes of its classes (nn.Module's included) and `module`. Any other attribute is")
    lines.append("# the wrapped model's, which the wrapper does not forward (AttributeError).")
    lines.append("WRAPPER_ATTRIBUTES: frozenset[str] = frozenset({")
    for name in sorted(wrapper_attributes(site_packages)):
        lines.append(f"    {name!r},")
    lines.append("})")
    lines.append("")
    lines.append("# How torch.hub names the weights it publishes and downloads: the file name carries a")
    lines.append("# prefix of the file's SHA-256 (`resnet101-63fe2227.pth`), matched by this pattern.")
    lines.append(f"HUB_HASH_PATTERN = {hub_hash_pattern(site_packages)!r}")
    return "\n".join(lines) + "\n"


def hub_hash_pattern(site_packages: Path) -> str:
    """`torch.hub.HASH_REGEX`'s pattern, read from torch/hub.py."""
    for statement in _parse(site_packages, "torch/hub.py").body:
        if isinstance(statement, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "HASH_REGEX"
                                                     for target in statement.targets):
            call = statement.value
            if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant) \
                    and isinstance(call.args[0].value, str):
                return call.args[0].value
    raise SystemExit("torch/hub.py no longer defines HASH_REGEX as re.compile(<pattern>)")


# The classes whose instances wrap a model, and the classes they inherit from, by file.
_WRAPPER_CLASSES = (
    ("torch/nn/modules/module.py", "Module"),
    ("torch/nn/parallel/data_parallel.py", "DataParallel"),
    ("torch/nn/parallel/distributed.py", "DistributedDataParallel"),
    ("torch/distributed/algorithms/join.py", "Joinable"),
)


def wrapper_attributes(site_packages: Path) -> set[str]:
    """What an `nn.DataParallel` or DDP wrapper answers to without reaching its module: the
    methods and class attributes of its classes and their bases, the attributes their methods
    set on `self` (also through `super().__setattr__("training", ...)`), and `module`, its one
    sub-module. `nn.Module.__getattr__` finds nothing else: the wrapped model's own
    attributes are not there."""
    names = {"module"}
    for path, class_name in _WRAPPER_CLASSES:
        cls = _class(_parse(site_packages, path), class_name)
        for statement in cls.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(statement.name)
            elif isinstance(statement, ast.Assign):
                names.update(target.id for target in statement.targets if isinstance(target, ast.Name))
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                names.add(statement.target.id)
        for node in ast.walk(cls):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) \
                            and element.value.id == "self":
                        names.add(element.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "__setattr__" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def device_check(operator: Operator) -> str:
    if not operator.unchecked:
        return "X"
    return "I" if operator.iterator else "N"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the module differs from what torch gives")
    options = parser.parse_args()
    installed = importlib.metadata.version("torch").split("+")[0]
    if installed != PINNED_TORCH:
        print(f"torch {installed} is installed; the brain is generated from torch {PINNED_TORCH}", file=sys.stderr)
        return 2
    spec = importlib.util.find_spec("torchgen")
    if spec is None or spec.origin is None:
        print("torchgen (shipped with torch) is not installed", file=sys.stderr)
        return 2
    text = generate(Path(spec.origin).parent.parent)
    if options.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUTPUT} differs from torch {PINNED_TORCH}; run {Path(__file__).name}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
