"""The torch brain: generated from the pinned torch's own metadata, and what it answers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from torchdevlint.analysis.brains import torch_api, torch_ops
from torchdevlint.analysis.brains.torch_api import DeviceCheck, Result

GENERATOR = ROOT / "scripts" / "generate_torch_brain.py"


def _installed_torch() -> str | None:
    try:
        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_generated_brain_is_what_the_pinned_torch_states() -> None:
    installed = _installed_torch()
    if installed != torch_ops.TORCH_VERSION:
        pytest.skip(f"torch {torch_ops.TORCH_VERSION} is not installed (found {installed})")
    generator = runpy.run_path(str(GENERATOR))
    spec = importlib.util.find_spec("torchgen")
    assert spec is not None and spec.origin is not None
    expected = generator["generate"](Path(spec.origin).parent.parent)
    actual = (ROOT / "torchdevlint" / "analysis" / "brains" / "torch_ops.py").read_text(encoding="utf-8")
    assert actual == expected, "the torch brain is stale: run python scripts/generate_torch_brain.py"


def test_the_device_types_are_those_the_installed_torch_parses() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as raised:
        torch.device("nosuchdevice")
    listed = str(raised.value).split("Expected one of ")[1].split(" device type")[0]
    assert frozenset(listed.split(", ")) == torch_api.TORCH_DEVICE_TYPES
    assert torch_api.torch_device_accepts("cuda:1") and torch_api.torch_device_accepts("xla")
    assert not any(torch_api.torch_device_accepts(text) for text in ("auto", "gpu", "0", "", "cuda:x"))


def test_linting_never_imports_torch_for_the_brain() -> None:
    code = "import sys; from torchdevlint.analysis.brains import torch_api; " \
           "torch_api.function_op('torch.zeros'); print('torch' in sys.modules)"
    import subprocess

    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "False"


def test_what_the_brain_says_of_familiar_names() -> None:
    sqrt = torch_api.function_op("torch.sqrt")
    assert sqrt is not None and sqrt.result is Result.TENSOR and sqrt.pointwise
    assert sqrt.device_check is DeviceCheck.ITERATOR
    cat = torch_api.function_op("torch.cat")
    assert cat is not None and cat.device_check is DeviceCheck.SAME and not cat.pointwise
    embedding = torch_api.function_op("torch.nn.functional.embedding")
    assert embedding is not None and embedding.device_check is DeviceCheck.SAME
    cross_entropy = torch_api.function_op("torch.nn.functional.cross_entropy")
    assert cross_entropy is not None and cross_entropy.result is Result.TENSOR
    split = torch_api.method_op("split")
    assert split is not None and split.result is Result.TENSORS
    item = torch_api.method_op("item")
    assert item is not None and item.result is Result.NUMBER
    total = torch_api.method_op("sum")
    assert total is not None and total.reduction
    assert torch_api.is_tensor_factory("torch.zeros") and torch_api.is_tensor_factory("torch.tensor")
    assert not torch_api.is_tensor_factory("torch.zeros_like") and not torch_api.is_tensor_factory("torch.sqrt")
    like = torch_api.function_op("torch.zeros_like")
    assert like is not None and like.like_factory
    assert torch_api.function_op("torch.not_a_function") is None
    assert torch_api.function_op("torch._private") is None
    assert torch_api.method_op("_version") is None
