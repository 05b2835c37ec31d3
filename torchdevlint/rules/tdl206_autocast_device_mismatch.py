"""TDL206 autocast-device-mismatch."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains.torch_api import AUTOCAST_OF_DEVICE_TYPE, AUTOCAST_WITH_DEVICE_TYPE
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.values import SWITCHED_OFF, PlaceKind
from torchdevlint.analysis.tree import child_nodes, keyword_argument
from torchdevlint.rule import Invalid, Rule, Valid

_HOST = frozenset({"cpu"})
_AUTOCASTS = frozenset(AUTOCAST_OF_DEVICE_TYPE) | AUTOCAST_WITH_DEVICE_TYPE


class AutocastDeviceMismatch(Rule):
    """
    ## What it does
    Finds an autocast context whose device type is written out (`torch.autocast("cuda")`,
    `torch.amp.autocast(device_type="cpu")`, `torch.cuda.amp.autocast()`) around a call of a
    model that the flow model places on another device type: on the CPU when autocast is
    for CUDA, on a GPU when it is for the CPU, or on a device that falls back to the CPU
    (`"cuda" if torch.cuda.is_available() else "cpu"`) when autocast is for CUDA and is
    not switched off in that CPU mode (`enabled=use_cuda`).

    ## Why is this bad?
    Autocast changes only the operations of its own device type. Around a model on
    another device it does nothing: the model runs in float32, slower and with more memory
    than the author measured, and nothing fails. `torch.autocast("cuda")` on a machine
    without a GPU only warns "User provided device_type of 'cuda', but CUDA is not
    available. Disabling". The device type should follow the model's device
    (`torch.autocast(device.type)`).

    ## Not reported
    Not reported: a device type that is not a literal (`device.type`, a variable), models
    whose device the file does not show, and autocast switched off where the types differ.

    ## Fix safety
    No fix: whether the other device should run in reduced precision, and in which dtype
    (CPU autocast uses bfloat16), is the author's call.

    ## Options
    None.
    """

    code = "TDL206"
    slug = "autocast-device-mismatch"
    message = "Autocast is for another device type than the model's: mixed precision is silently off"
    requires_any_text = ("autocast",)

    VALID = [
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            with torch.autocast(device.type):
                out = model(torch.randn(4, 8, device=device))
            """,
            name="device-type-of-the-models-device",
            in_docs=True,
        ),
        Valid(
            """
            import torch
            use_cuda = torch.cuda.is_available()
            device = torch.device("cuda" if use_cuda else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            with torch.autocast("cuda", enabled=use_cuda):
                out = model(torch.randn(4, 8, device=device))
            gpu_model = torch.nn.Linear(8, 2).cuda()
            with torch.cuda.amp.autocast():
                out = gpu_model(torch.randn(4, 8).cuda())
            """,
            name="switched-off-without-cuda-and-a-gpu-model",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            with torch.autocast("cuda"):
                out = model(torch.randn(4, 8, device=device))
            """,
            name="cuda-autocast-in-a-program-with-a-cpu-mode",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.Linear(8, 2).cuda()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                out = model(torch.randn(4, 8).cuda())
            cpu_model = torch.nn.Linear(8, 2)
            with torch.cuda.amp.autocast():
                out = cpu_model(torch.randn(4, 8))
            """,
            count=2,
            name="cpu-autocast-around-a-gpu-model-and-the-reverse",
        ),
    ]

    def leave_With(self, node: cst.With) -> None:
        for item in node.items:
            call = item.item
            if not isinstance(call, cst.Call):
                continue
            device_type = self._device_type(call)
            if device_type is not None and self._model_elsewhere(node.body, call, device_type):
                self.report(call)

    def _device_type(self, call: cst.Call) -> str | None:
        qualified = self.context.names.qualified_name(call.func, among=_AUTOCASTS) or ""
        if qualified in AUTOCAST_OF_DEVICE_TYPE:
            return AUTOCAST_OF_DEVICE_TYPE[qualified]
        if qualified not in AUTOCAST_WITH_DEVICE_TYPE:
            return None
        argument = keyword_argument(call, "device_type") or next(
            (arg for arg in call.args if arg.keyword is None and not arg.star), None)
        return string_value(argument.value) if argument is not None else None

    def _model_elsewhere(self, body: cst.BaseSuite, autocast: cst.Call, device_type: str) -> bool:
        flow = self.context.flow
        enabled = keyword_argument(autocast, "enabled")
        if enabled is None and self.context.names.qualified_name(autocast.func, among=AUTOCAST_OF_DEVICE_TYPE) is not None:
            # `torch.cuda.amp.autocast(enabled, dtype, ...)`: no device type to pass first.
            enabled = next((arg for arg in autocast.args if arg.keyword is None and not arg.star), None)
        if enabled is not None and flow.constant_truth(enabled.value) is False:
            return False
        on_in_cpu_mode = enabled is None or flow.value_of(enabled.value).in_cpu_mode not in (False, SWITCHED_OFF, 0)
        stack: list[cst.CSTNode] = [body]
        while stack:
            current = stack.pop()
            if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(current, cst.Call):
                callee = flow.value_of(current.func)
                if callee.is_module_like and callee.places:
                    for place in callee.places:
                        types = _HOST if place.kind is PlaceKind.HOST else (
                            place.types if place.kind is PlaceKind.DEVICE else None)
                        if types is None:
                            continue
                        if device_type not in types:
                            return True
                        if device_type == "cuda" and "cpu" in types and on_in_cpu_mode:
                            return True
            stack.extend(child_nodes(current))  # code only, not whitespace
        return False
