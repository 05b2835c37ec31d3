"""TDL003 load-without-map-location."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.value_kinds import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid


@dataclass(frozen=True)
class LoadOptions:
    # What the fix passes when no device variable is in scope.
    map_location: str = "cpu"
    # A test loads what it has just saved, on the same machine: not reported by default.
    include_tests: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.map_location, str) or not self.map_location:
            raise ValueError("map-location must be a non-empty string such as \"cpu\"")
        if not isinstance(self.include_tests, bool):
            raise ValueError("include-tests must be true or false")


class LoadWithoutMapLocation(Rule):
    """
    ## What it does
    Finds `torch.load(...)` calls, under any alias (`import torch as T`,
    `from torch import load`), with no effective `map_location`: none given,
    `map_location=None`, or only `weights_only=True`. A second positional argument counts as
    `map_location`. `torch.jit.load`, `torch.hub.load` and other libraries' `load` functions
    are not reported, nor loads from an in-memory `io.BytesIO` buffer (bytes passed between
    processes of one machine, where the saving device exists).

    ## Why is this bad?
    `torch.load` restores each tensor on the device it was saved from. A checkpoint written
    on a GPU machine then fails to load on a machine without one: "Attempting to deserialize
    object on a CUDA device but torch.cuda.is_available() is False". On a machine with
    several GPUs everything lands on the saving process's GPU.

    ## Fix safety
    The fix adds `map_location=` with the device variable in scope (a name containing
    "device" bound to a `torch.device` or a device string), or else with the configured
    location (`"cpu"`). It is safe when the loaded object flows straight into
    `load_state_dict(...)`, which copies the values onto the model's own device anyway. It is
    unsafe otherwise: code after the load may rely on tensors (an optimizer state, say)
    being restored on the GPU.

    Also not reported, unless `include-tests` is set: loads inside test functions (`test_*`,
    as pytest and unittest name them), which read back checkpoints the test itself wrote on
    the same machine.

    ## Options
    - `map-location` (default `"cpu"`): the location the fix uses when no device variable is
      in scope.
    - `include-tests` (default `false`): also report loads inside `test_*` functions.
    """

    code = "TDL003"
    slug = "load-without-map-location"
    message = "torch.load without map_location fails where the saving device is absent"
    fix_title = "Pass map_location"
    requires_any_text = ("load",)
    Options = LoadOptions
    options: LoadOptions

    VALID = [
        Valid(
            """
            import torch
            state = torch.load("model.pt", map_location="cpu")
            other = torch.load("model.pt", "cpu")
            scripted = torch.jit.load("model.pt")
            hub = torch.hub.load("pytorch/vision", "resnet18")
            """,
            name="map-location-given",
        ),
        Valid(
            """
            import io
            import torch
            def broadcast(obj):
                buffer = io.BytesIO(obj.cpu().numpy())
                return torch.load(buffer), torch.load(io.BytesIO(b""))
            """,
            name="in-memory-buffer-on-the-same-machine",
        ),
        Valid(
            """
            import torch
            def test_checkpoint_round_trip(tmp_path):
                torch.save({"w": torch.ones(2)}, tmp_path / "c.pt")
                assert torch.load(tmp_path / "c.pt")["w"].sum() == 2
            """,
            name="test-reads-back-what-it-wrote",
        ),
        Valid(
            """
            import pickle
            import torch
            def load(path):
                return pickle.load(open(path, "rb"))
            data = load("x.pkl")
            """,
            name="other-load-functions",
        ),
        Valid(
            """
            import torch
            def restore(path, **kwargs):
                return torch.load(path, **kwargs)
            """,
            name="keyword-splat",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            model.load_state_dict(torch.load("model.pt"))
            """,
            fixed="""
            import torch

            model.load_state_dict(torch.load("model.pt", map_location="cpu"))
            """,
            applicability=Applicability.SAFE,
            name="documented-load-into-state-dict",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.Linear(2, 2)
            model.load_state_dict(torch.load("model.pt"))
            """,
            fixed="""
            import torch
            model = torch.nn.Linear(2, 2)
            model.load_state_dict(torch.load("model.pt", map_location="cpu"))
            """,
            applicability=Applicability.SAFE,
            name="straight-into-load-state-dict",
        ),
        Invalid(
            """
            import torch as T
            device = T.device("cuda" if T.cuda.is_available() else "cpu")
            checkpoint = T.load("ckpt.pt", weights_only=True)
            """,
            fixed="""
            import torch as T
            device = T.device("cuda" if T.cuda.is_available() else "cpu")
            checkpoint = T.load("ckpt.pt", weights_only=True, map_location=device)
            """,
            applicability=Applicability.UNSAFE,
            name="alias-device-variable-weights-only",
        ),
        Invalid(
            """
            from torch import load
            state = load("ckpt.pt", map_location=None)
            """,
            fixed="""
            from torch import load
            state = load("ckpt.pt", map_location="cpu")
            """,
            applicability=Applicability.UNSAFE,
            name="from-import-map-location-none",
        ),
    ]

    def setup(self) -> None:
        # (scope node id, name) of variables holding an in-memory buffer.
        self._buffers: set[tuple[int, str]] = set()

    def _is_buffer(self, node: cst.BaseExpression) -> bool:
        """`io.BytesIO(...)`: bytes handed between processes of one machine, not a file."""
        if isinstance(node, cst.Call):
            return self.context.imports.qualified_name(node.func) == "io.BytesIO"
        if isinstance(node, cst.Name):
            return any((id(scope.node), node.value) in self._buffers for scope in self.context.kinds.scopes)
        return False

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                key = (id(self.context.kinds.current.node), target.target.value)
                if self._is_buffer(node.value):
                    self._buffers.add(key)
                else:
                    self._buffers.discard(key)

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.imports.qualified_name(node.func) not in torch_api.TORCH_LOAD:
            return
        if any(arg.star == "**" for arg in node.args):
            return
        if node.args and node.args[0].keyword is None and self._is_buffer(node.args[0].value):
            return
        if not self.options.include_tests and self._in_test_function():
            return
        keyword = keyword_argument(node, "map_location")
        if keyword is not None and not (isinstance(keyword.value, cst.Name) and keyword.value.value == "None"):
            return
        positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
        if len(positional) >= 2 or not node.args or any(arg.star == "*" for arg in node.args):
            if keyword is None:
                return
        location = self._device_variable() or repr(self.options.map_location).replace("'", '"')
        applicability = Applicability.SAFE if self._flows_into_load_state_dict(node) else Applicability.UNSAFE
        if keyword is not None:
            edit = NodeEdit(keyword.value, location)
        else:
            edit = NodeEdit.insert_after(node.args[-1].value, f", map_location={location}")
        self.report(node, fix=self.make_fix(edit, applicability=applicability))

    def _in_test_function(self) -> bool:
        return any(
            isinstance(scope.node, cst.FunctionDef) and scope.node.name.value.startswith("test")
            for scope in self.context.kinds.scopes
        )

    def _device_variable(self) -> str | None:
        kinds = self.context.kinds
        for scope in reversed(kinds.scopes):
            for name, info in scope.bindings.items():
                if "device" in name.lower() and info.is_device and kinds.lookup(name) is info:
                    return name
        return None

    def _flows_into_load_state_dict(self, node: cst.Call) -> bool:
        ancestors = self.context.ancestors(node)
        index = 0
        if ancestors and isinstance(ancestors[0], cst.Subscript):
            index = 1
        if len(ancestors) < index + 2 or not isinstance(ancestors[index], cst.Arg):
            return False
        call = ancestors[index + 1]
        return (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "load_state_dict"
        )
