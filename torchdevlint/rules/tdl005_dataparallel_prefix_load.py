"""TDL005 dataparallel-prefix-load."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.analysis.state_dict_flow import WrappedStateDictSaves
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

_STRIP_HELPER = "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"


@dataclass(frozen=True)
class _Load:
    """A bare model's `load_state_dict(...)` of something loaded from `path`."""

    call: cst.Call
    statement: cst.CSTNode | None
    argument: cst.BaseExpression
    path: str


class DataParallelPrefixLoad(Rule):
    """
    ## What it does
    Finds a bare (unwrapped) model loading a state dict that the same file saved from a
    `DataParallel`/`DistributedDataParallel` wrapper, with the `module.` prefix never
    stripped; also with `strict=False`. The save and the load are matched by the path
    expression they use. Reported at the `load_state_dict(...)` call.

    Stripping the prefix at the load, as the fix does, repairs one loader; saving
    `model.module.state_dict()` in the first place (see TDL004) repairs every one.

    ## Why is this bad?
    The wrapper saved every key as `module.<name>`; the bare model expects `<name>`. The load
    fails with "Missing key(s) in state_dict … Unexpected key(s) in state_dict:
    "module.weight"", and with `strict=False` it silently loads nothing, leaving the model
    with its random initial weights.

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
    ]
    INVALID = [
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
    ]

    def setup(self) -> None:
        self._saves = self.context.shared(WrappedStateDictSaves)
        # (scope node id, variable) -> path text of the torch.load it holds.
        self._loaded: dict[tuple[int, str], str] = {}
        self._loads: list[_Load] = []

    def _key(self, name: str) -> tuple[int, str]:
        return id(self.context.current_scope), name

    def _loaded_path(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Call) and self.context.imports.qualified_name(node.func) in torch_api.TORCH_LOAD:
            return self.context.code_for_node(node.args[0].value) if node.args else None
        if isinstance(node, cst.Subscript):
            node = node.value
        if isinstance(node, cst.Name):
            return self._loaded.get(self._key(node.value))
        return None

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "load_state_dict" and node.args:
            self._check_load(node)
        elif self.context.imports.qualified_name(node.func) == _STRIP_HELPER and node.args:
            stripped = node.args[0].value
            if isinstance(stripped, cst.Subscript):
                stripped = stripped.value
            if isinstance(stripped, cst.Name):
                self._loaded.pop(self._key(stripped.value), None)

    def _check_load(self, node: cst.Call) -> None:
        assert isinstance(node.func, cst.Attribute)
        receiver = node.func.value
        if self.context.flow.value_of(receiver).kinds != {Kind.MODULE}:
            return
        # A parameter annotated `nn.Module` may well be a wrapper (DataParallel is a Module).
        scope = self.context.current_scope
        if isinstance(receiver, cst.Name) and isinstance(scope, cst.FunctionDef):
            params = scope.params
            if receiver.value in {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}:
                return
        argument = node.args[0].value
        path = self._loaded_path(argument)
        if path is None:
            return
        statement = next(
            (a for a in self.context.ancestors(node) if isinstance(a, cst.SimpleStatementLine)), None
        )
        self._loads.append(_Load(node, statement, argument, path))

    def leave_Assign(self, node: cst.Assign) -> None:
        path = self._loaded_path(node.value) if isinstance(node.value, cst.Call) else None
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                key = self._key(target.target.value)
                if path is not None:
                    self._loaded[key] = path
                else:
                    self._loaded.pop(key, None)

    def leave_Module(self, node: cst.Module) -> None:
        saved_paths = {
            self.context.code_for_node(saved.save.args[1].value)
            for saved in self._saves.saved
            if saved.save is not None and len(saved.save.args) >= 2
        }
        for load in self._loads:
            if load.path in saved_paths:
                self.report(load.call, fix=self._fix(load))

    def _fix(self, load: _Load) -> PendingFix | None:
        argument = load.argument
        base = argument.value if isinstance(argument, cst.Subscript) else argument
        if load.statement is None or not isinstance(base, cst.Name):
            return None
        torch_name = self.context.imports.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch_name is None:
            torch_name, imports = "torch", (("torch", None),)
        helper = torch_name + _STRIP_HELPER.removeprefix("torch")
        code = self.context.code_for_node(argument)
        return self.make_fix(
            NodeEdit.insert_line_before(load.statement, f'{helper}({code}, "module.")'),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
