"""TDL106 python-loop-over-device-tensor."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import subnodes, under_placement_test
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid

# Statements and expressions whose test Python turns into a bool.
_TESTED = (cst.If, cst.While, cst.IfExp, cst.Assert)


class PythonLoopOverDeviceTensor(Rule):
    """
    ## What it does
    Finds a Python loop (a `for` statement or a comprehension) over a tensor that the flow
    model places on a GPU (on every path, or where `if use_cuda:` moves take place together)
    whose body reads each element on the host: tests it (`if token == eos:`, `[t for t in
    tokens if t > 0]`), indexes a Python list or dict with it (`vocab.itos[i]`), calls
    `int()`, `float()`, `.item()` or `.tolist()` on it, or prints or formats it.

    ## Why is this bad?
    Iterating a tensor gives tensors of one element each, still on the GPU. Reading one on
    the host waits for every kernel queued before it and copies four bytes: a decoding loop
    over a sentence of 50 tokens waits 50 times where one `.tolist()` would wait once.
    Nothing fails, which is why it stays: it is a performance rule, off by default.

    ## Not reported
    Not reported: loops over host tensors or lists, loops whose body only computes with each
    element on the GPU (`total = total + row`), loops in the CPU branch of a device test, and
    tensors of unknown place.

    ## Fix safety
    Unsafe, and only where the body uses each element as a Python value (compared, tested,
    used as an index or read with `int()`/`float()`): the fix loops over `tensor.tolist()`,
    one copy. The elements then are Python numbers: a float32 compared with a Python float
    can compare differently (`0.1` is rounded to float32 on the tensor's side only), and
    integers index as before. Bodies that call tensor methods on the element get no fix.

    ## Options
    None.
    """

    code = "TDL106"
    slug = "python-loop-over-device-tensor"
    message = "Python loop reads a GPU tensor one element at a time: each read waits for the GPU"
    fix_title = "Loop over one host copy (.tolist())"
    default_enabled = False
    requires_any_text = ("for ",)

    VALID = [
        Valid(
            """
            import torch

            device = torch.device("cuda")
            tokens = torch.tensor([3, 7, 2]).to(device)
            for token in tokens.tolist():
                if token == 2:
                    break
            words = [str(index) for index in tokens.cpu()]
            total = torch.zeros((), device=device)
            for row in torch.randn(4, 3, device=device):
                total = total + row.sum()
            on_host = torch.tensor([1, 2, 3])
            kept = [value for value in on_host if value > 1]
            """,
            name="one-copy-host-tensors-or-work-left-on-the-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 5).to(device)
            itos = ["<pad>", "<eos>", "a", "b", "c"]
            predicted = model(torch.randn(6, 8).to(device)).argmax(-1)
            words = []
            for token in predicted:
                if token == 1:
                    break
                words.append(itos[token])
            """,
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 5).to(device)
            itos = ["<pad>", "<eos>", "a", "b", "c"]
            predicted = model(torch.randn(6, 8).to(device)).argmax(-1)
            words = []
            for token in predicted.tolist():
                if token == 1:
                    break
                words.append(itos[token])
            """,
            applicability=Applicability.UNSAFE,
            name="decoding-tokens-one-by-one",
            in_docs=True,
        ),
        Invalid(
            """
            import torch

            scores = torch.rand(10).cuda()
            kept = [float(score) for score in scores if score > 0.5]
            for score in scores:
                print(score.item())
            """,
            fixed="""
            import torch

            scores = torch.rand(10).cuda()
            kept = [float(score) for score in scores.tolist() if score > 0.5]
            for score in scores:
                print(score.item())
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-comprehension-and-a-loop-calling-item",
        ),
        Invalid(
            """
            import torch

            finished = [False] * 4
            last = torch.randint(0, 9, (4,), device="cuda")
            for row, token in enumerate(last):
                if token == 0:
                    finished[row] = True
            """,
            fixed="""
            import torch

            finished = [False] * 4
            last = torch.randint(0, 9, (4,), device="cuda")
            for row, token in enumerate(last.tolist()):
                if token == 0:
                    finished[row] = True
            """,
            applicability=Applicability.UNSAFE,
            name="enumerating-a-batch-of-tokens",
        ),
    ]

    def visit_For(self, node: cst.For) -> None:
        looped = _element_name(node.target, node.iter)
        if looped is not None:
            self._check(looped[0], looped[1], [node.body], node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        comprehension = self.context.stack[-2] if len(self.context.stack) > 1 else None
        looped = _element_name(node.target, node.iter)
        if looped is None or not isinstance(comprehension, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            return
        element = [comprehension.key, comprehension.value] if isinstance(comprehension, cst.DictComp) \
            else [comprehension.elt]
        self._check(looped[0], looped[1], [*element, *node.ifs, *_inner_clauses(node)], node)

    def _check(self, iterable: cst.BaseExpression, name: str, body: list[cst.CSTNode], loop: cst.CSTNode) -> None:
        value = self.context.flow.value_of(iterable)
        if not value.on_accelerator:
            value = self.context.flow.value_on_a_gpu_machine(iterable)
        if not (value.is_tensor_like and value.on_accelerator) or under_placement_test(loop, self.context.ancestors(loop)):
            return
        reads, only_as_values = _host_reads(body, name, self)
        if not reads:
            return
        fix = None
        if only_as_values and isinstance(iterable, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            fix = self.make_fix(NodeEdit.insert_after(iterable, ".tolist()"), applicability=Applicability.UNSAFE)
        self.report(iterable, fix=fix)


def _element_name(target: cst.BaseAssignTargetExpression, iterable: cst.BaseExpression
                  ) -> tuple[cst.BaseExpression, str] | None:
    """The tensor looped over and the name of its element: `for x in t`, or `for i, x in
    enumerate(t)`."""
    if type(target) is cst.Name:
        return iterable, target.value
    if type(target) is cst.Tuple and len(target.elements) == 2 and type(target.elements[1].value) is cst.Name \
            and type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == "enumerate" \
            and len(iterable.args) == 1 and iterable.args[0].keyword is None and not iterable.args[0].star:
        return iterable.args[0].value, target.elements[1].value.value
    return None


def _inner_clauses(clause: cst.CompFor) -> list[cst.CSTNode]:
    """A nested `for` clause of the same comprehension reads the element too."""
    inner = clause.inner_for_in
    return [inner] if inner is not None else []


def _host_reads(body: list[cst.CSTNode], name: str, rule: Rule) -> tuple[bool, bool]:
    """Whether the body reads the element on the host, and whether it uses it only as a
    Python value would be used (so `.tolist()` keeps the body's meaning)."""
    reads = False
    only_as_values = True
    stack: list[tuple[cst.CSTNode, bool]] = [(node, False) for node in body]
    while stack:
        node, tested = stack.pop()
        if type(node) is cst.Name and node.value == name:
            reads = reads or tested
            continue
        if isinstance(node, _TESTED) or type(node) is cst.CompIf:
            test = node.test
            stack.append((test, True))
            stack.extend((child, tested) for child in node.children if child is not test)
            continue
        if type(node) is cst.Subscript and any(
                _is_name(element.slice.value, name) for element in node.slice
                if isinstance(element.slice, cst.Index)):
            indexed = rule.context.flow.value_of(node.value)
            if indexed.is_tensor_like:
                only_as_values = False
            else:
                reads = True
        elif type(node) is cst.Call:
            func = node.func
            if type(func) is cst.Name and func.value in torch_api.HOST_READING_BUILTINS \
                    and any(_is_name(arg.value, name) for arg in node.args):
                reads = True
            elif type(func) is cst.Attribute and _is_name(func.value, name):
                only_as_values = False
                reads = reads or func.attr.value in torch_api.HOST_READ_METHODS
            elif any(_is_name(arg.value, name) for arg in node.args):
                only_as_values = False  # handed on: a tensor there, a number after the fix
        elif type(node) is cst.FormattedStringExpression and any(
                _is_name(sub, name) for sub in subnodes(node.expression)):
            reads = True
        elif type(node) is cst.Attribute and _is_name(node.value, name):
            only_as_values = False
        stack.extend((child, tested) for child in node.children)
    return reads, only_as_values


def _is_name(node: cst.CSTNode, name: str) -> bool:
    return type(node) is cst.Name and node.value == name
