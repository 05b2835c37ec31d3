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


def test_a_test_of_the_same_text_takes_the_side_that_wrapped_the_model() -> None:
    wrapped_here, bare_here, after_unwrapping, negated = kinds_of(
        """
        import torch.nn as nn
        net = nn.Linear(2, 2)
        if args.cuda:
            net = nn.DataParallel(net.cuda())
        if args.cuda:
            probe(net.module)
        else:
            probe(net)
        def train(model):
            if args.cuda:
                model = model.module
            probe(model)
            if not args.cuda:
                probe(model)
        train(net)
        """
    )
    assert wrapped_here.kinds == {Kind.MODULE}
    assert bare_here.wrapping is Wrapping.NO
    assert after_unwrapping.wrapping is Wrapping.NO
    assert negated.wrapping is Wrapping.NO


def test_the_wrapping_test_is_kept_only_where_the_other_side_is_the_bare_model() -> None:
    known, from_a_factory, device_chosen = kinds_of(
        """
        import torch.nn as nn
        net = nn.Linear(2, 2)
        if torch.cuda.device_count() > 1:
            net = nn.DataParallel(net)
        probe(net)
        model = create_model(opt)
        if opt.fp16:
            model = nn.DataParallel(model)
        probe(model)
        other = build(opt)
        if opt.cuda:
            other = nn.DataParallel(other)
        probe(other)
        print(net.module)  # the flow keeps wrapping tests only in files that read `.module`
        """
    )
    assert known.wrapped_when is not None and known.wrapped_when.describe() == "torch.cuda.device_count()>1"
    assert not known.wrapped_when.bare_in_cpu_mode
    assert from_a_factory.wrapping is Wrapping.MAYBE and from_a_factory.wrapped_when is None
    assert device_chosen.wrapped_when is not None and device_chosen.wrapped_when.bare_in_cpu_mode


def test_parts_of_a_forward_input_named_as_lengths_or_numbers_are_not_taken_for_data() -> None:
    sentences, lengths, steps, hidden, packed_lengths = kinds_of(
        """
        import numpy as np
        import torch.nn as nn
        class Encoder(nn.Module):
            def forward(self, sent_tuple, state):
                sent, sent_len, num_steps = sent_tuple
                order = np.argsort(sent_len)
                h, c = state
                probe(sent)
                probe(sent_len)
                probe(num_steps)
                probe(h)
        class Tagger(nn.Module):
            def forward(self, batch):
                x, x_len = batch
                probe(x_len)
        """
    )
    assert sentences.is_tensor_like and lengths.kinds == {Kind.UNKNOWN} and steps.kinds == {Kind.UNKNOWN}
    assert hidden.is_tensor_like
    # Lengths the body does not hand to NumPy may be a loader's tensor on the device (torchtext).
    assert packed_lengths.is_tensor_like


def test_a_loss_kept_under_torchs_old_2d_name_is_where_its_weight_is() -> None:
    weighted, bare = kinds_of(
        """
        import torch
        weight = torch.ones(3).cuda()
        probe(torch.nn.NLLLoss2d(weight))
        probe(torch.nn.NLLLoss2d())
        """
    )
    assert weighted.on_accelerator and bare.places is not None and not bare.on_host


def test_a_helpers_result_placed_by_its_device_parameter_is_where_the_caller_passed() -> None:
    (returns,) = kinds_of(
        """
        import torch
        import torch.nn as nn

        def train(policy, device):
            returns = calculate_returns([1.0, 0.5], device)
            probe(returns)

        def calculate_returns(rewards, device):
            return torch.tensor(rewards).to(device)

        device = torch.device("cpu")
        train(nn.Linear(4, 1).to(device), device)
        """
    )
    # Inside train's run for its call, the helper is not run again; its device parameter is
    # the device train was handed, not a device of unknown type.
    assert returns.on_host


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


@pytest.mark.parametrize(
    "expression",
    [
        "torch.sqrt(torch.tensor(2.0 / math.pi))",
        "torch.sqrt(torch.tensor(2.0 / torch.pi))",
        "torch.tensor(8.0).sqrt()",
        "torch.exp(torch.tensor(0.5)).float()",
        "torch.log(torch.tensor(3.0)).abs().clone()",
        "torch.tensor(math.sqrt(2.0 / math.pi)) * 2",
        "torch.ones(4, 4).sum()",
        "torch.rand(3).mean()",
        "torch.pow(torch.tensor(2.0), torch.tensor(0.5))",
    ],
)
def test_zero_dim_tensors_stay_zero_dim_through_math(expression: str) -> None:
    (value,) = kinds_of(f"import math\nimport torch\nprobe({expression})\n")
    assert value.is_tensor and value.on_host and value.zero_dim, value.describe()


@pytest.mark.parametrize(
    "expression",
    ["torch.stack([torch.tensor(1.0), torch.tensor(2.0)])", "torch.tensor(2.0).expand(3)", "torch.tensor(2.0).repeat(4)",
     "torch.tensor(2.0).unsqueeze(0)", "torch.ones(2, 2) * torch.tensor(2.0)", "torch.ones(2).sum(0).tril()"],
)
def test_what_gives_a_tensor_dimensions_is_not_zero_dim(expression: str) -> None:
    (value,) = kinds_of(f"import torch\nprobe({expression})\n")
    assert value.is_tensor and value.on_host and not value.zero_dim, value.describe()


def test_split_chunk_and_unbind_give_tensors_where_their_input_is() -> None:
    q, part, row, first = kinds_of(
        """
        import torch
        x = torch.zeros(2, 12)
        q, k, v = x.split(4, dim=1)
        probe(q)
        for part in torch.chunk(x, 3):
            probe(part)
        rows = x.unbind(0)
        probe(rows[1])
        probe(x.cuda().split(2)[0])
        """
    )
    assert q.is_tensor and q.on_host
    assert part.is_tensor and part.on_host
    assert row.is_tensor and row.on_host
    assert first.is_tensor and first.on_accelerator


@pytest.mark.parametrize(
    ("expression", "kind"),
    [("x.size(0)", Kind.SCALAR), ("x.numel()", Kind.SCALAR), ("x.dim()", Kind.SCALAR), ("x.is_floating_point()", Kind.SCALAR),
     ("torch.numel(x)", Kind.SCALAR), ("math.sqrt(2.0)", Kind.SCALAR), ("math.pi", Kind.SCALAR), ("torch.pi", Kind.SCALAR)],
)
def test_numbers_torch_and_math_return(expression: str, kind: Kind) -> None:
    (value,) = kinds_of(f"import math\nimport torch\nx = torch.zeros(2)\nprobe({expression})\n")
    assert value.kinds == {kind}, value.describe()


@pytest.mark.parametrize(
    "expression",
    ["torch.rand(4) > 0.5", "~(torch.rand(4) > 0.5)", "-torch.ones(3)", "torch.ones(4, 4).tril() == 0",
     "torch.linspace(0, 1, 5)", "torch.normal(0.0, 1.0, size=(3,))", "torch.full((2,), 1.0).bool()"],
)
def test_unary_and_comparison_operators_and_factories_from_numbers_keep_host_tensors(expression: str) -> None:
    (value,) = kinds_of(f"import torch\nprobe({expression})\n")
    assert value.is_tensor and value.on_host and not value.zero_dim, value.describe()


def test_a_like_factory_of_a_value_of_unknown_kind_is_not_placed() -> None:
    (noise,) = kinds_of("import torch\ndef f(x):\n    probe(torch.randn_like(x))\n")
    assert noise.is_tensor and noise.places is None, noise.describe()


@pytest.mark.parametrize(
    "expression",
    ["torch.where(x > 0, x, torch.zeros(3))", "x.where(x > 0, x)", "x.type(torch.FloatTensor)", "torch.einsum('i,i->i', x, x)"],
)
def test_names_whose_overloads_disagree_give_a_tensor_where_the_call_says_so(expression: str) -> None:
    (value,) = kinds_of(f"import torch\nx = torch.ones(3)\nprobe({expression})\n")
    assert value.is_tensor and value.on_host, value.describe()


@pytest.mark.parametrize("expression", ["x.type()", "torch.where(x > 0)"])
def test_overloads_that_give_no_single_tensor_are_not_tensors(expression: str) -> None:
    (value,) = kinds_of(f"import torch\nx = torch.ones(3)\nprobe({expression})\n")
    assert not value.is_tensor, value.describe()


def test_generators_and_dicts_the_program_builds_of_tensors_keep_them() -> None:
    generated, value, pair_value = kinds_of(
        """
        import torch
        xs = [torch.ones(2), torch.ones(2)]
        moved = tuple(x.cuda() for x in xs)
        probe(moved[0])
        table = {name: x.cuda() for name, x in zip("ab", xs)}
        for v in table.values():
            probe(v)
        for k, v in table.items():
            probe(v)
        """
    )
    for value_seen in (generated, value, pair_value):
        assert value_seen.is_tensor and value_seen.on_accelerator, value_seen.describe()


def test_a_torchtext_batch_holds_its_fields_on_the_iterator_s_device() -> None:
    seen = kinds_of("""
        import torch
        from torchtext.legacy import data

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        train_iterator, valid_iterator = data.BucketIterator.splits((train, valid), batch_size=32, device=device)
        for batch in valid_iterator:
            text, text_lengths = batch.text
            probe(text_lengths)
            probe(batch.label)
        for batch in data.Iterator(test, batch_size=32):
            probe(batch.label)
        """)
    on_device, label_on_device, without_a_device = seen
    assert on_device.is_placed_data and on_device.on_accelerator
    assert label_on_device.is_placed_data and label_on_device.on_accelerator
    # Without `device=` the batch's place depends on torchtext's version: nothing is known.
    assert without_a_device.places is None


def test_a_count_started_at_zero_is_the_tensor_added_to_it_wherever_a_tensor_method_is_called() -> None:
    correct_after_loop, accuracy, mixed_half, number = kinds_of("""
        import torch
        device = torch.device("cuda")
        correct = 0
        for images, labels in loader:
            predictions = model(images.to(device)).argmax(1)
            correct += (predictions == labels.to(device)).sum()
        probe(correct)
        probe(correct.float() / 100 * 100)
        probe(correct / 2)
        total = 0
        for step in range(3):
            total += step
        probe(total)
    """)
    # A number before the first round, a tensor on the device after it: not a tensor everywhere.
    assert correct_after_loop.kinds == {Kind.SCALAR, Kind.TENSOR}
    assert not correct_after_loop.is_tensor_like
    # `.float()` is a method no Python number has: where it runs, `correct` is the tensor.
    assert accuracy.is_tensor and accuracy.on_accelerator
    assert mixed_half.kinds == {Kind.SCALAR, Kind.TENSOR}
    assert number.kinds == {Kind.SCALAR}


def test_expressions_in_each_part_of_a_concatenated_f_string_are_evaluated() -> None:
    (inside,) = kinds_of("""
        import torch
        loss = torch.ones(2).cuda().sum()
        message = (f"epoch {1:03d} | "
                   f"loss {probe(loss):.3f}")
    """)
    assert inside.is_tensor and inside.on_accelerator


def test_an_iterators_next_method_gives_what_next_gives() -> None:
    """`images, labels = dataiter.next()`: older torch's loader iterators, still in tutorials."""
    by_function, by_method = kinds_of(
        """
        import torch
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), batch_size=4)
        images, = next(iter(loader))
        probe(images)
        stream = iter(loader)
        pictures, = stream.next()
        probe(pictures)
        """
    )
    assert by_function.is_tensor_like and by_method.is_tensor_like


def test_python_builtins_of_tensors_give_tensors_and_of_numbers_numbers() -> None:
    """`sum(losses)` adds tensors up from 0; `max(a, b)`, `abs(x)` and `round(x)` return one."""
    summed, biggest, absolute, rounded, counted, length = kinds_of(
        """
        import torch
        losses = [torch.ones(1, device="cuda") for _ in range(3)]
        a, b = torch.zeros(2), torch.ones(2)
        probe(sum(loss for loss in losses))
        probe(max(a, b))
        probe(abs(a))
        probe(round(a))
        probe(sum(p.numel() for p in torch.nn.Linear(2, 2).parameters()))
        probe(len(losses))
        """
    )
    assert summed.is_tensor_like and summed.on_accelerator
    assert biggest.is_tensor_like and absolute.is_tensor_like and rounded.is_tensor_like
    assert counted.kinds == {Kind.SCALAR} and length.kinds == {Kind.SCALAR}


def test_a_class_of_another_library_given_a_forward_is_a_module() -> None:
    # espnet's E2E, directly, through a class of the file or a star import: its sub-modules
    # are where the model is, not on the host; torch's autograd Function is no Module.
    in_method, through_the_file, star_imported, function = kinds_of(
        """
        import torch
        from espnet.nets.e2e_asr_transformer import E2E
        from espnet.nets.transformer.encoder import *

        class Discriminator(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 1)
            def forward(self, x):
                return self.fc(x)

        class Adapted(E2E):
            def __init__(self):
                super().__init__()
                self.critic = Discriminator()
            def forward(self, x):
                probe(self.critic(x))

        class Plain(E2E):
            def recognize(self, x):
                return x

        class Domain(Plain):
            def __init__(self):
                super().__init__()
                self.critic = Discriminator()
            def forward(self, x):
                probe(self.critic(x))

        class CustomEncoder(Encoder):
            def __init__(self):
                super().__init__()
                self.critic = Discriminator()
            def forward(self, x):
                probe(self.critic(x))

        class Reverse(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                probe(Discriminator()(x))
                return x
        """
    )
    for value in (in_method, through_the_file, star_imported):
        assert not value.on_host and value.may_be_on_accelerator
    assert function.on_host


def test_a_model_named_maker_handed_only_settings_is_built_not_run() -> None:
    # `model = models.__dict__[name]; model = model(**config)`: a class from a registry, built;
    # `model(x)` is a forward pass, and so is `model(**batch)` of data (see test_flow).
    built, output = kinds_of(
        """
        import torch
        import models
        model_config = {"dataset": "cifar10", "depth": 18}
        model = models.__dict__[args.model]
        model = model(**model_config)
        probe(model)
        net = models.__dict__[args.model]
        probe(net(torch.zeros(2, 3)))
        """
    )
    assert Kind.MODEL_OUTPUT not in built.kinds
    assert Kind.MODEL_OUTPUT in output.kinds
