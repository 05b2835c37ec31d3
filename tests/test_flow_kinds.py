"""What the flow model says each expression is, asked the way rules ask it: mid-walk, about
the node being visited."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdevlint.analysis.flow.values import Kind, Value, Wrapping
from torchdevlint.engine import analyse_module
from torchdevlint.rule import Rule


class _Probe(Rule):
    """Records the kind of the argument of every `probe(...)` call."""

    code = "TDL999"
    slug = "probe-kinds"
    message = "probe"

    def setup(self) -> None:
        self.seen: list[Value] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "probe":
            self.seen.append(self.context.flow.value_of(node.args[0].value))


def kinds_of(source: str) -> list[Value]:
    module = cst.parse_module(textwrap.dedent(source))
    (probe,) = analyse_module(module, "probe.py", [_Probe]).rules
    assert isinstance(probe, _Probe)
    return probe.seen


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nprobe(torch.zeros(3))\n",
        "import torch as T\nprobe(T.randn(2, 2).cuda().float())\n",
        "from torch import arange\nprobe(arange(5))\n",
        "import torch\nx = torch.ones(2)\nprobe(x + 1)\nprobe(x[0])\nprobe(x.T)\n",
        "import torch\ndef f(x: torch.Tensor):\n    probe(x)\n",
        "from torch import Tensor\ndef f(x: Tensor):\n    probe(x.view(-1))\n",
        "import torch.nn.functional as F\nimport torch\nprobe(F.relu(torch.zeros(1)))\n",
    ],
)
def test_tensors(source: str) -> None:
    assert all(info.is_tensor_like for info in kinds_of(source))


@pytest.mark.parametrize(
    "source",
    [
        "import torch.nn as nn\nprobe(nn.Linear(2, 2))\n",
        "import torch\nprobe(torch.nn.Sequential())\nprobe(torch.nn.CrossEntropyLoss().cuda())\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    pass\nclass Deeper(Net):\n    pass\nprobe(Deeper())\n",
        "import torchvision.models as models\nprobe(models.resnet18())\n",
        "from transformers import AutoModel\nprobe(AutoModel.from_pretrained('x'))\n",
        "import torch.nn as nn\ndef f(m: nn.Module):\n    probe(m)\n",
    ],
)
def test_modules(source: str) -> None:
    infos = kinds_of(source)
    assert infos and all(info.kinds == {Kind.MODULE} for info in infos)


def test_wrapped_definitely_and_maybe() -> None:
    surely, maybe, unwrapped, helper = kinds_of(
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = torch.nn.Linear(2, 2)
        probe(torch.nn.DataParallel(net).to("cuda"))
        if torch.cuda.device_count() > 1:
            net = DDP(net)
        probe(net)
        probe(net.module if hasattr(net, "module") else net)
        probe(getattr(net, "module", net))
        """
    )
    assert surely.wrapping is Wrapping.YES
    assert maybe.wrapping is Wrapping.MAYBE
    assert unwrapped.kinds == {Kind.MODULE} and unwrapped.wrapping is Wrapping.NO
    assert helper.kinds == {Kind.MODULE}


def test_dataloader_loop_targets() -> None:
    infos = kinds_of(
        """
        import torch
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        loader = DataLoader([])
        for x, y in loader:
            probe(x)
        for i, (x, y) in enumerate(tqdm(loader)):
            probe(y)
        for batch in loader:
            probe(batch["image"])
            probe(batch[0])
        """
    )
    assert all(info.is_tensor_like for info in infos) and len(infos) == 4


def test_self_attributes_from_init() -> None:
    (info,) = kinds_of(
        """
        import torch
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.h = torch.zeros(2)
                self.fc = nn.Linear(2, 2)
            def forward(self, x):
                probe(self.h)
        """
    )
    assert info.is_tensor_like


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    probe(x)\n",
        "import torch\nx = torch.zeros(1)\nfor _ in range(3):\n    x = transform(x)\nprobe(x)\n",
        "import numpy as np\nprobe(np.zeros(3))\n",
        "import torch\nx = torch.zeros(1)\ndef f():\n    x = load()\n    probe(x)\n",
        "from mylib import zeros\nprobe(zeros(3))\n",
    ],
)
def test_unknown_stays_unknown(source: str) -> None:
    assert all(not info.is_tensor_like and not info.is_module_like for info in kinds_of(source))


def test_rebinding_an_imported_name_forgets_the_import() -> None:
    (info,) = kinds_of("import torch\nfrom torch import zeros\nzeros = lambda n: [0] * n\nprobe(zeros(3))\n")
    assert not info.is_tensor_like
