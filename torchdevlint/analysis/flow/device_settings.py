"""Which bodies of a top-level statement change the current CUDA device (`torch.cuda.set_device`,
`with torch.cuda.device(n)`): the flow model's `entry_cuda_device` asks, and an editor's memory
keeps each unchanged statement's answer (see `memory`)."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes

# (whether the module's own code in the statement changes it, the ids of the functions and
# lambdas inside whose own code does).
DeviceSettings = tuple[bool, frozenset[int]]


def device_settings_in(statement: cst.BaseStatement) -> DeviceSettings:
    at_module_level = False
    inner: set[int] = set()
    stack: list[tuple[cst.CSTNode, int | None]] = [(statement, None)]
    while stack:
        node, body = stack.pop()
        if type(node) is cst.FunctionDef or type(node) is cst.Lambda:
            body = id(node)
        elif type(node) is cst.Call:
            name = dotted_name(node.func)
            if name is not None and name.endswith(torch_api.CURRENT_DEVICE_CHANGE_SUFFIXES):
                if body is None:
                    at_module_level = True
                else:
                    inner.add(body)
        stack.extend((child, body) for child in child_nodes(node))
    return at_module_level, frozenset(inner)
