"""TDL005 dataparallel-prefix-load."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import PREFIXED_STATE_DICT, RuntimeProof


@dataclass(frozen=True)
class _Load:
    """A bare model's `load_state_dict(...)` of something loaded from one of `paths`."""

    call: cst.Call
    statement: cst.CSTNode | None
    argument: cst.BaseExpression
    paths: frozenset[str]
    # The `torch.load(...)` calls the state dict came from.
    loads: tuple[cst.Call, ...]
    # A resume: a checkpoint path (`args.resume`) loaded into a model the same body wraps
    # in DataParallel/DDP afterwards.
    resumes_a_model_wrapped_later: bool


class DataParallelPrefixLoad(Rule):
    """
    ## What it does
    Finds a bare (unwrapped) model loading a state dict that the same file saved from a
    `DataParallel`/`DistributedDataParallel` wrapper, with the `module.` prefix never
    stripped; also with `strict=False`. The save and the load are matched by the
    file they name: the same path expression, or paths that name the same file when each is
    read where it is written (`os.path.join(args.out, "best.pt")` in two functions, a
    constant, a variable bound once). A resume counts too: a checkpoint path
    (`args.resume`, `ckpt`) loaded into a model that the same body then wraps, in a file
    that saves a wrapper's `state_dict()`. Reported at the `load_state_dict(...)` call.

    Stripping the prefix at the load, as the fix does, repairs one loader; saving
    `model.module.state_dict()` in the first place (see TDL004) repairs every one.

    ## Why is this bad?
    The wrapper saved every key as `module.<name>`; the bare model expects `<name>`. The load
    fails with "Missing key(s) in state_dict … Unexpected key(s) in state_dict:
    "module.weight"", and with `strict=False` it silently loads nothing, leaving the model
    with its random initial weights.

    ## Not reported
    Not reported when the prefix is stripped first (`consume_prefix_in_state_dict_if_present`,
    a comprehension with `removeprefix` or slicing: any rebinding of the loaded dict), when
    the loading model is wrapped the same way, or when the saving side saved `.module`.

    ## Fix safety
    The fix strips the prefix in place just before the load, with
    `consume_prefix_in_state_dict_if_present`. It is unsafe: the dict may be used elsewhere
    with its prefixed keys. It is offered only when the loaded value is a variable (or an item
    of one), since the helper works in place.

    ## Options
    None.
    """

    code = "TDL005"
    slug = "dataparallel-prefix-load"
    message = "Bare model loads a state dict saved from a DataParallel/DDP wrapper; keys keep 'module.'"
    fix_title = "Strip the 'module.' prefix before loading"
    # DataParallel is commonly taken only where there are two GPUs or more.
    proof = RuntimeProof(PREFIXED_STATE_DICT, gpus=2)
    requires_any_text = ("load_state_dict",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), "m.pt")
            state = torch.load("m.pt", map_location="cpu")
            state = {k.removeprefix("module."): v for k, v in state.items()}
            bare = nn.Linear(2, 2)
            bare.load_state_dict(state)
            again = nn.DataParallel(nn.Linear(2, 2))
            again.load_state_dict(torch.load("m.pt", map_location="cpu"))
            """,
            name="prefix-stripped-or-loaded-into-a-wrapper",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.module.state_dict(), "m.pt")
            nn.Linear(2, 2).load_state_dict(torch.load("m.pt", map_location="cpu"))
            """,
            name="saved-unwrapped",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), "wrapped.pt")
            bare = nn.Linear(2, 2)
            bare.load_state_dict(torch.load("pretrained.pt", map_location="cpu"))
            """,
            name="different-file",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

            def train(path):
                net = nn.DataParallel(nn.Linear(4, 2))
                torch.save({"weights": net.state_dict()}, path)

            def evaluate(path):
                model = nn.Linear(4, 2)
                checkpoint = torch.load(path, map_location="cpu")
                consume_prefix_in_state_dict_if_present(checkpoint["weights"], "module.")
                model.load_state_dict(checkpoint["weights"])
                weights = torch.load(path, map_location="cpu")["weights"]
                model.load_state_dict({k.removeprefix("module."): v for k, v in weights.items()})
            """,
            name="checkpoint-item-stripped-in-place-or-rebuilt",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            net = nn.DataParallel(nn.Linear(10, 1))
            torch.save(net.state_dict(), "weights.pt")
            torch.save(net.module.state_dict(), "weights.pt")
            plain = nn.Linear(10, 1)
            plain.load_state_dict(torch.load("weights.pt"))
            torch.save(net.state_dict(), "weights.pt")
            """,
            name="notebook-cells-that-overwrite-the-file-before-loading-and-save-the-wrapper-after",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            def main(args):
                model = nn.Linear(8, 2)
                if args.resume:
                    state = torch.load(args.resume, map_location="cpu")
                    model.load_state_dict(state)
                model = nn.DataParallel(model).cuda()
                for epoch in range(args.epochs):
                    train_one_epoch(model)
                    torch.save(model.state_dict(), f"epoch_{epoch}.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def main(args):
                model = nn.Linear(8, 2)
                if args.resume:
                    state = torch.load(args.resume, map_location="cpu")
                    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "module.")
                    model.load_state_dict(state)
                model = nn.DataParallel(model).cuda()
                for epoch in range(args.epochs):
                    train_one_epoch(model)
                    torch.save(model.state_dict(), f"epoch_{epoch}.pt")
            """,
            applicability=Applicability.UNSAFE,
            name="resume-into-the-bare-model-the-script-wraps-and-saves",
        ),
        Invalid(
            """
            import os
            import torch
            import torch.nn as nn

            def train(args):
                net = nn.DataParallel(nn.Linear(8, 2))
                torch.save(net.state_dict(), os.path.join(args.out, "best.pt"))

            def evaluate(args):
                best = os.path.join(args.out, "best.pt")
                net = nn.Linear(8, 2)
                net.load_state_dict(torch.load(best, map_location="cpu"), strict=False)
            """,
            name="same-file-named-differently-in-another-function",
        ),
        Invalid(
            """
            import torch
            from torch import nn
            from torchvision.models import resnet18

            model = nn.DataParallel(resnet18())
            torch.save(model.state_dict(), "model.pt")

            fresh = resnet18()
            state = torch.load("model.pt", map_location="cpu")
            fresh.load_state_dict(state)
            """,
            fixed="""
            import torch
            from torch import nn
            from torchvision.models import resnet18

            model = nn.DataParallel(resnet18())
            torch.save(model.state_dict(), "model.pt")

            fresh = resnet18()
            state = torch.load("model.pt", map_location="cpu")
            torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "module.")
            fresh.load_state_dict(state)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-wrapped-save-bare-load",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            path = "model.pt"
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), path)
            bare = nn.Linear(2, 2)
            state = torch.load(path, map_location="cpu")
            bare.load_state_dict(state, strict=False)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            path = "model.pt"
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), path)
            bare = nn.Linear(2, 2)
            state = torch.load(path, map_location="cpu")
            torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "module.")
            bare.load_state_dict(state, strict=False)
            """,
            applicability=Applicability.UNSAFE,
            name="strict-false-hides-it",
        ),
        Invalid(
            """
            import torch as T
            from torch import nn
            def export():
                net = nn.Linear(2, 2)
                checkpoint = T.load("ckpt.pt", map_location="cpu")
                net.load_state_dict(checkpoint["model"])
            def train():
                model = nn.Linear(2, 2)
                if T.cuda.device_count() > 1:
                    model = nn.DataParallel(model)
                T.save({"model": model.state_dict()}, "ckpt.pt")
            """,
            fixed="""
            import torch as T
            from torch import nn
            def export():
                net = nn.Linear(2, 2)
                checkpoint = T.load("ckpt.pt", map_location="cpu")
                T.nn.modules.utils.consume_prefix_in_state_dict_if_present(checkpoint["model"], "module.")
                net.load_state_dict(checkpoint["model"])
            def train():
                model = nn.Linear(2, 2)
                if T.cuda.device_count() > 1:
                    model = nn.DataParallel(model)
                T.save({"model": model.state_dict()}, "ckpt.pt")
            """,
            applicability=Applicability.UNSAFE,
            name="checkpoint-item-saved-later-in-the-file",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            torch.save(nn.DataParallel(nn.Linear(2, 2)).state_dict(), "net.pt")
            nn.Linear(2, 2).load_state_dict(torch.load("net.pt"))
            """,
            name="inline-load-has-no-fix",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def build(gpus):
                model = nn.Linear(4, 2)
                return nn.DataParallel(model) if gpus > 1 else model

            def pretrain():
                model = build(torch.cuda.device_count())
                torch.save(model.state_dict(), "pretrained.pt")

            def finetune():
                model = nn.Linear(4, 2)
                state = torch.load("pretrained.pt", map_location="cpu")
                model.load_state_dict(state)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def build(gpus):
                model = nn.Linear(4, 2)
                return nn.DataParallel(model) if gpus > 1 else model

            def pretrain():
                model = build(torch.cuda.device_count())
                torch.save(model.state_dict(), "pretrained.pt")

            def finetune():
                model = nn.Linear(4, 2)
                state = torch.load("pretrained.pt", map_location="cpu")
                torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "module.")
                model.load_state_dict(state)
            """,
            applicability=Applicability.UNSAFE,
            name="saved-in-one-function-from-a-helper-wrapped-model-loaded-bare-in-another",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def train(path):
                net = nn.DataParallel(nn.Linear(4, 2))
                weights = net.state_dict()
                torch.save({"weights": weights, "epoch": 3}, path)

            def evaluate(path):
                checkpoint = torch.load(path, map_location="cpu")
                weights = checkpoint["weights"]
                model = nn.Linear(4, 2)
                model.load_state_dict(weights)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def train(path):
                net = nn.DataParallel(nn.Linear(4, 2))
                weights = net.state_dict()
                torch.save({"weights": weights, "epoch": 3}, path)

            def evaluate(path):
                checkpoint = torch.load(path, map_location="cpu")
                weights = checkpoint["weights"]
                model = nn.Linear(4, 2)
                torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(weights, "module.")
                model.load_state_dict(weights)
            """,
            applicability=Applicability.UNSAFE,
            name="checkpoint-item-taken-out-through-a-variable",
        ),
    ]

    def setup(self) -> None:
        self._loads: list[_Load] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "load_state_dict" and node.args:
            self._check_load(node)

    def _check_load(self, node: cst.Call) -> None:
        assert isinstance(node.func, cst.Attribute)
        receiver = node.func.value
        flow = self.context.flow
        if flow.value_of(receiver).kinds != {Kind.MODULE}:
            return
        # A parameter annotated `nn.Module` may well be a wrapper (DataParallel is a Module).
        scope = self.context.current_scope
        if isinstance(receiver, cst.Name) and isinstance(scope, cst.FunctionDef):
            params = scope.params
            if receiver.value in {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}:
                return
        argument = node.args[0].value
        # The files whose state dict this is: the `torch.load(path)` calls it came from (a
        # stripped prefix or a rebuilt dict no longer holds them).
        loads = tuple(loaded for loaded in flow.held_calls(flow.value_of(argument), Held.LOAD) if loaded.args)
        paths = frozenset(self.context.code_for_node(loaded.args[0].value) for loaded in loads)
        if not paths:
            return
        statement = next(
            (a for a in self.context.ancestors(node) if isinstance(a, cst.SimpleStatementLine)), None
        )
        resumes = isinstance(receiver, cst.Name) and any(
            word in path.lower() for path in paths for word in naming.RESUME_PATH_WORDS
        ) and self._wrapped_later(receiver.value, node)
        self._loads.append(_Load(node, statement, argument, paths, loads, resumes))

    def _wrapped_later(self, name: str, load: cst.Call) -> bool:
        """Whether the body of the load wraps the model of that name after it
        (`model = nn.DataParallel(model)`)."""
        scope = self.context.current_scope
        stack: list[cst.CSTNode] = [scope]
        after_load = False
        while stack:  # in source order
            node = stack.pop()
            if node is load:
                after_load = True
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not scope:
                continue
            if after_load and isinstance(node, cst.Call) and node.args and node.args[0].keyword is None \
                    and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == name \
                    and self.context.names.qualified_name(node.func, among=torch_api.WRAPPERS) is not None:
                return True
            stack.extend(reversed(node.children))
        return False

    def leave_Module(self, node: cst.Module) -> None:
        flow = self.context.flow
        saves = [saved.save for saved in flow.saved_state_dicts() if saved.saved_where_made and len(saved.save.args) >= 2]
        for load in self._loads:
            if saves and load.resumes_a_model_wrapped_later or any(
                    (self.context.code_for_node(save.args[1].value) in load.paths or flow.same_checkpoint_file(save, loaded))
                    and flow.may_read_what_was_saved(save, loaded) for save in saves for loaded in load.loads):
                self.report(load.call, fix=self._fix(load))

    def _fix(self, load: _Load) -> PendingFix | None:
        argument = load.argument
        base = argument.value if isinstance(argument, cst.Subscript) else argument
        if load.statement is None or not isinstance(base, cst.Name):
            return None
        torch_name = self.context.names.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch_name is None:
            torch_name, imports = "torch", (("torch", None),)
        helper = torch_name + torch_api.STRIP_STATE_DICT_PREFIX.removeprefix("torch")
        code = self.context.code_for_node(argument)
        return self.make_fix(
            NodeEdit.insert_line_before(load.statement, f'{helper}({code}, "module.")'),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
