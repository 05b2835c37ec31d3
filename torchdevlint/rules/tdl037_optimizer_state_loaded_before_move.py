"""TDL037 optimizer-state-loaded-before-move."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.names import dotted_name, module_bound_names
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import OPTIMIZER_STATE_ELSEWHERE, RuntimeProof


@dataclass(frozen=True)
class _Event:
    # Where it happens in the body: the path of statement indices from the body down.
    position: tuple[int, ...]
    node: cst.Call
    name: str
    statement: cst.SimpleStatementLine | None


class OptimizerStateLoadedBeforeMove(Rule):
    """
    ## What it does
    Finds `optimizer.load_state_dict(...)` that runs while the model whose parameters the
    optimizer holds is still on the CPU, where a later statement of the same function then
    moves the model to a device that may be a GPU: a resume that loads the checkpoint into the
    model and the optimizer, and only afterwards calls `model.to(device)`. The optimizer is
    one of `torch.optim` built over the model's parameters (`SGD(model.parameters(), ...)`).

    ## Why is this bad?
    `Optimizer.load_state_dict` puts each saved state tensor (SGD's momentum, Adam's averages)
    on the device its parameter is on at that moment: the CPU. `model.to(device)` then moves
    the parameters, not the optimizer's state, and the first `optimizer.step()` on a GPU
    meets CPU state: "Tensors of the same index must be on the same device" (or "Expected all
    tensors to be on the same device"). Training from scratch works, and so does a resume on
    a machine without a GPU: the bug waits for the first GPU resume.

    ## Not reported
    Not reported: a model moved before the load (a move after it is then a no-op), a later
    move to the CPU, a move in another branch of an `if` than the load, and optimizers this
    rule cannot tie to the model (built elsewhere, or over another model's parameters).

    ## Fix safety
    Unsafe: the fix moves the model first, with a copy of its later move put right before the
    load (`model.to(device)`; a module moves in place, so the later move does nothing), where
    every name the move reads is bound already; otherwise no fix. What runs between the load
    and the move (a summary, a check of the parameters' device) then sees the model on its
    device.

    ## Options
    None.
    """

    code = "TDL037"
    slug = "optimizer-state-loaded-before-move"
    message = "Optimizer state loaded while the model is on the CPU stays there when the model moves later"
    fix_title = "Move the model before loading the optimizer's state"
    proof = RuntimeProof(OPTIMIZER_STATE_ELSEWHERE)
    requires_any_text = ("load_state_dict",)
    requires_also_any_text = ("optim",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            checkpoint = torch.load("last.pt", map_location=device)
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            """,
            name="moved-before-the-load",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            def resume(path, device):
                model = nn.Linear(4, 2)
                optimizer = torch.optim.Adam(model.parameters())
                state = torch.load(path, map_location="cpu")
                if state is not None:
                    optimizer.load_state_dict(state["optimizer"])
                    model.to("cpu")
                else:
                    model.to(device)
                return model, optimizer
            """,
            name="a-move-to-the-cpu-and-one-in-the-other-branch",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(4, 2)
            critic = nn.Linear(4, 1)
            optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
            optimizer.load_state_dict(torch.load("critic_optimizer.pt"))
            model.cuda()
            """,
            name="the-optimizer-of-another-model",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            checkpoint = torch.load("last.pt", map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            model.to(device)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            checkpoint = torch.load("last.pt", map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            model.to(device)
            optimizer.load_state_dict(checkpoint["optimizer"])
            model.to(device)
            """,
            applicability=Applicability.UNSAFE,
            name="resume-then-move",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch import nn, optim
            def train(args, device):
                net = nn.Linear(8, 2)
                opt = optim.Adam(filter(lambda p: p.requires_grad, net.parameters()), lr=1e-3)
                if args.resume:
                    state = torch.load(args.resume, map_location=lambda storage, loc: storage)
                    net.load_state_dict(state["net"])
                    opt.load_state_dict(state["opt"])
                net = net.cuda()
                return net, opt
            """,
            fixed="""
            import torch
            from torch import nn, optim
            def train(args, device):
                net = nn.Linear(8, 2)
                opt = optim.Adam(filter(lambda p: p.requires_grad, net.parameters()), lr=1e-3)
                if args.resume:
                    state = torch.load(args.resume, map_location=lambda storage, loc: storage)
                    net.load_state_dict(state["net"])
                    net.cuda()
                    opt.load_state_dict(state["opt"])
                net = net.cuda()
                return net, opt
            """,
            applicability=Applicability.UNSAFE,
            name="resume-in-a-branch-then-cuda",
        ),
        Invalid(
            """
            import torch
            from torch import optim
            def train(build, resume_path):
                model = build()
                if resume_path is None:
                    groups = model.parameters()
                else:
                    groups = [{"params": backbone_params(model), "lr": 0.01}, {"params": head_params(model)}]
                optimizer = optim.SGD(groups, lr=0.1, momentum=0.9)
                if resume_path is not None:
                    optimizer.load_state_dict(torch.load(resume_path)["opt_dict"])
                model.cuda()
            """,
            fixed="""
            import torch
            from torch import optim
            def train(build, resume_path):
                model = build()
                if resume_path is None:
                    groups = model.parameters()
                else:
                    groups = [{"params": backbone_params(model), "lr": 0.01}, {"params": head_params(model)}]
                optimizer = optim.SGD(groups, lr=0.1, momentum=0.9)
                if resume_path is not None:
                    model.cuda()
                    optimizer.load_state_dict(torch.load(resume_path)["opt_dict"])
                model.cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="parameter-groups-gathered-first",
        ),
    ]

    def setup(self) -> None:
        self._globals: set[str] | None = None  # what the module binds, read once where a fix needs it
        # For the module and each function being walked: whether it builds a torch optimizer,
        # and whether it calls some `.load_state_dict`. Only a body that does both is searched
        # (a keystroke walks every function of the file again).
        self._scopes: list[_Scope] = [_Scope()]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(_Scope())

    def visit_Call(self, node: cst.Call) -> None:
        scope = self._scopes[-1]
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "load_state_dict":
            scope.loads_state = True
        elif not scope.builds_optimizer \
                and self.context.names.qualified_name(node.func, among=torch_api.is_optimizer_class) is not None:
            scope.builds_optimizer = True

    def leave_Module(self, node: cst.Module) -> None:
        if self._scopes[-1].may_load_an_optimizer:
            self._check_body(node.body)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._scopes.pop().may_load_an_optimizer and isinstance(node.body, cst.IndentedBlock):
            self._check_body(node.body.body)

    def _check_body(self, body: Sequence[cst.BaseStatement]) -> None:
        optimizers: dict[str, str] = {}  # optimizer name -> model name
        loads: list[_Event] = []
        moves: list[_Event] = []
        self._assigned = _assignments(body)
        for position, call, target, statement in _calls_in_order(body):
            func = call.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                owner, method = func.value.value, func.attr.value
                if method == "load_state_dict" and owner in optimizers:
                    loads.append(_Event(position, call, owner, statement))
                elif method in torch_api.DEVICE_MOVES and self._moves_to_an_accelerator(call):
                    moves.append(_Event(position, call, owner, statement))
            built = self._optimizer_over(call) if target is not None else None
            if target is not None and built is not None:
                optimizers[target] = built
        for load in loads:
            model = optimizers[load.name]
            if any(move.name == model and move.position < load.position for move in moves):
                continue  # already where it trains: a later move does nothing
            later = [move for move in moves if move.name == model and _runs_after(load.position, move.position)]
            if later:
                self.report(load.node, fix=self._fix(load, later[0]))

    def _fix(self, load: _Event, move: _Event) -> PendingFix | None:
        """The model's move, made first: right before the load, where what it names is bound."""
        if load.statement is None:
            return None
        env = self.context.flow.env_before(load.statement)
        if env is None:
            return None
        needed = {name.value for arg in move.node.args for name in _names_in(arg.value)}
        if self._globals is None:
            self._globals = module_bound_names(self.context.module)
        if not needed <= env.keys() | self._globals:
            return None
        return self.make_fix(NodeEdit.insert_line_before(load.statement, self.context.code_for_node(move.node)),
                             applicability=Applicability.UNSAFE)

    def _moves_to_an_accelerator(self, call: cst.Call) -> bool:
        destination = self.context.flow.move_destination(call)
        return destination is not None and destination.may_be_accelerator

    def _optimizer_over(self, call: cst.Call) -> str | None:
        """The model whose `.parameters()` a `torch.optim` optimizer is built over."""
        if self.context.names.qualified_name(call.func, among=torch_api.is_optimizer_class) is None:
            return None
        first = next((arg.value for arg in call.args if arg.keyword is None or arg.keyword.value == "params"), None)
        if first is None:
            return None
        # Parameters gathered first (`params = [{"params": get_1x_lr_params(model)}, ...]`, in
        # each branch that builds a model): every value the name is given.
        given = self._assigned.get(first.value, []) if isinstance(first, cst.Name) else [first]
        models = {found for value in given for found in _parameters_of(value)}
        return models.pop() if len(models) == 1 else None


@dataclass
class _Scope:
    builds_optimizer: bool = False
    loads_state: bool = False

    @property
    def may_load_an_optimizer(self) -> bool:
        return self.builds_optimizer and self.loads_state


def _parameters_of(node: cst.CSTNode) -> Iterator[str]:
    """The models whose parameters `node` gathers: `x` of each `x.parameters()` /
    `x.named_parameters()`, and the names handed to a helper named for parameters
    (`get_10x_lr_params(model)`)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value in ("parameters", "named_parameters") and isinstance(node.func.value, cst.Name):
        yield node.func.value.value
        return
    if isinstance(node, cst.Call):
        called = dotted_name(node.func) or ""
        if "param" in called.rsplit(".", 1)[-1].lower():
            yield from (arg.value.value for arg in node.args if isinstance(arg.value, cst.Name))
            return
    for child in child_nodes(node):
        yield from _parameters_of(child)


def _assignments(body: Sequence[cst.BaseStatement]) -> dict[str, list[cst.BaseExpression]]:
    """Every value a plain name is given in the body (nested functions and classes aside)."""
    found: dict[str, list[cst.BaseExpression]] = {}

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            found.setdefault(node.targets[0].target.value, []).append(node.value)
        for child in child_nodes(node):
            visit(child)

    for statement in body:
        visit(statement)
    return found


# A call, its statement's position, the name it is assigned to, and its statement.
_Found = tuple[tuple[int, ...], cst.Call, str | None, cst.SimpleStatementLine | None]


def _calls_in_order(body: Sequence[cst.BaseStatement]) -> Iterator[_Found]:
    """Each call of the body, in the order of its statements, with its statement's position
    and the name it is assigned to (`name = call(...)`); nested functions and classes are
    their own bodies."""
    for index, statement in enumerate(body):
        yield from _calls_of(statement, (index,), None)


def _calls_of(node: cst.CSTNode, position: tuple[int, ...], line: cst.SimpleStatementLine | None) -> Iterator[_Found]:
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return
    if isinstance(node, cst.SimpleStatementLine):
        line = node
    if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) and len(node.targets) == 1 \
            and isinstance(node.targets[0].target, cst.Name):
        yield position, node.value, node.targets[0].target.value, line
        for child in child_nodes(node.value):
            yield from _calls_of(child, position, line)
        return
    if isinstance(node, cst.Call):
        yield position, node, None, line
    if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        for index, statement in enumerate(node.body):
            yield from _calls_of(statement, (*position, index), line)
        return
    if isinstance(node, (cst.If, cst.Else)):
        # Each branch: its own step in the position, so the two sides of an `if` never follow each other.
        branches = [node.body, node.orelse] if isinstance(node, cst.If) else [node.body]
        if isinstance(node, cst.If):
            yield from _calls_of(node.test, position, line)
        for side, branch in enumerate(branches):
            if branch is not None:
                yield from _calls_of(branch, (*position, -1 - side), line)
        return
    for child in child_nodes(node):
        yield from _calls_of(child, position, line)


def _names_in(node: cst.CSTNode) -> Iterator[cst.Name]:
    """The names `node` reads (not attribute names after a dot, nor keywords)."""
    if isinstance(node, cst.Name):
        yield node
        return
    if isinstance(node, cst.Attribute):
        yield from _names_in(node.value)
        return
    for child in child_nodes(node):
        if isinstance(child, cst.Arg):
            yield from _names_in(child.value)
        else:
            yield from _names_in(child)


def _runs_after(first: tuple[int, ...], later: tuple[int, ...]) -> bool:
    """Whether the statement at `later` runs after the one at `first` on some path: it comes
    after it in a block that holds both, not in another branch of an `if` around it."""
    for a, b in zip(first, later, strict=False):
        if a != b:
            # Sides of an `if` (negative steps) are alternatives; statements of one block follow in order.
            return a >= 0 and b >= 0 and b > a
    return False
