"""The device-flow model, asked what users and rules ask: what is this value here, where does
it live, and where does host data meet accelerator data?"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst

from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.flow.values import Value
from torchdevlint.debug import flow_lines, model_for


def _probes(source: str) -> list[Value]:
    """The value of the argument of every `probe(...)` call, in source order."""
    module = cst.parse_module(textwrap.dedent(source))
    model = model_for(module)
    values: list[Value] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "probe":
            values.append(model.value_of(node.args[0].value))
        stack.extend(reversed(node.children))
    return values


def _facts(source: str) -> list[str]:
    return [line.split(":", 2)[2].strip() for line in flow_lines(textwrap.dedent(source), "t.py")]


def test_factories_moves_and_in_place_module_moves() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        x = torch.zeros(3)
        y = x.to(device)
        z = x.cuda().cpu()
        model = nn.Linear(3, 1)
        model.to(device)
        """
    )
    assert "x: tensor, on host" in facts
    assert "y: tensor, on device device (cpu|cuda)" in facts
    assert "z: tensor, on host" in facts
    assert "model: module, on device device (cpu|cuda)" in facts


def test_branches_join_and_do_not_leak_into_each_other() -> None:
    values = _probes(
        """
        import torch
        if use_gpu:
            h = torch.zeros(2).cuda()
            probe(h)
        else:
            probe(h)
            h = torch.zeros(2)
        probe(h)
        """
    )
    assert values[0].on_accelerator
    assert not values[1].is_known  # the `if` branch's binding is not visible in `else`
    assert values[2].is_tensor and not values[2].on_host and not values[2].on_accelerator


def test_a_tensor_moved_on_one_side_of_a_test_not_about_the_device_is_the_host_side() -> None:
    values = _probes(
        """
        import torch
        if prompt is None:
            h = torch.zeros(2)
        else:
            h = torch.tensor(prompt).cuda()
        probe(h)
        if flag:
            g = torch.zeros(2).cuda()
        else:
            g = torch.zeros(2, device="cuda")
        probe(g)
        k = torch.zeros(2)
        if flag:
            k = k.cuda()
        probe(k)
        """
    )
    assert values[0].is_tensor and values[0].on_host
    assert values[1].on_accelerator  # placed on both sides
    assert not values[2].on_host  # bound before the test: one side keeps what was there


def test_one_line_suites_are_interpreted_like_blocks() -> None:
    values = _probes(
        """
        import torch
        from torch.autograd import Variable
        def to_gpu(x): return x.cuda()
        h = Variable(torch.zeros(2))
        if use_cuda: h = h.cuda()
        probe(h)
        g = torch.zeros(2)
        with torch.no_grad(): g = g.cuda()
        probe(g)
        probe(to_gpu(torch.zeros(2)))
        """
    )
    assert values[0].is_tensor and not values[0].on_host and not values[0].on_accelerator
    assert values[1].on_accelerator
    assert values[2].on_accelerator


def test_type_casts_to_a_legacy_tensor_type_also_move() -> None:
    values = _probes(
        """
        import torch
        cuda = torch.cuda.is_available()
        Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
        x = torch.zeros(2, 4)
        probe(x.type(torch.cuda.FloatTensor))
        probe(x.type("torch.cuda.LongTensor"))
        probe(x.type(torch.DoubleTensor))
        probe(x.type(torch.float16))
        probe(x.type(Tensor))  # either, as the machine has a GPU or not
        """
    )
    assert values[0].on_accelerator and values[1].on_accelerator
    assert values[2].on_host and values[3].on_host
    assert values[4].is_tensor and values[4].places is None


def test_arithmetic_in_both_operand_orders() -> None:
    values = _probes(
        """
        import torch
        x = torch.ones(3).cuda()
        probe(x * 2)
        probe(2 * x)
        counts = torch.bincount(torch.tensor([0, 1, 1]))
        probe(counts.sum() / (2 * counts))
        """
    )
    assert values[0].is_tensor and values[0].on_accelerator
    assert values[1].is_tensor and values[1].on_accelerator
    assert values[2].is_tensor and values[2].on_host


def test_locals_and_parameters_shadow_imports() -> None:
    values = _probes(
        """
        import pickle
        import torch
        from torch import load
        def f(torch):
            probe(torch.zeros(3))
        def g():
            load = pickle.load
            probe(load)
        probe(torch.zeros(3))
        """
    )
    assert not values[0].is_tensor
    assert values[1].reference is not None and values[1].reference.qualified == "pickle.load"
    assert values[2].is_tensor


def test_same_file_functions_and_methods_return_their_values() -> None:
    values = _probes(
        """
        import torch
        import torch.nn as nn
        def make_mask(n) -> torch.Tensor:
            return torch.ones(n, n).triu()
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
            def init_hidden(self, b):
                return next(self.parameters()).new_zeros(b, 2)
        net = Net().to("cuda")
        probe(make_mask(3))
        probe(net.init_hidden(4))
        probe(net.fc)
        """
    )
    assert values[0].is_tensor and values[0].on_host
    assert values[1].is_tensor and values[1].on_accelerator
    assert values[2].is_module_like and values[2].on_accelerator


def test_forward_sees_its_inputs_and_submodules_on_the_module_device() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 8)
            def forward(self, x):
                h = torch.zeros(1, x.size(1), 8)
                out, _ = self.rnn(x, h)
                fixed = torch.zeros(1, 2, 8).to(x.device)
                return out
        """
    )
    assert "h: tensor, on host" in facts
    assert "out: model output, on module device, may require grad" in facts
    assert "fixed: tensor, on module device" in facts
    assert "host data `h` meets accelerator data `self.rnn` (module call)" in facts


def test_a_loop_first_iteration_on_the_host_is_remembered() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        cell = nn.LSTMCell(1, 4).cuda()
        h = torch.zeros(2, 4)
        for step in range(3):
            h, c = cell(torch.ones(2, 1).cuda(), (h, h))
        """
    )
    assert any(fact.startswith("host data `h` meets") for fact in facts)


def test_loader_batches_are_host_tensors_unless_the_dataset_is_on_the_device() -> None:
    values = _probes(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        for x, y in DataLoader(dataset):
            probe(y)
        for x, y in DataLoader(TensorDataset(torch.ones(4).cuda(), torch.ones(4).cuda())):
            probe(y)
        """
    )
    assert values[0].is_tensor and values[0].on_host
    assert values[1].is_tensor and values[1].on_accelerator


def test_debug_flow_command_prints_one_line(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text("import torch\nx = torch.zeros(3)\ny = x.cuda()\n")
    result = subprocess.run([sys.executable, "-m", "torchdevlint", "debug", "flow", f"{program}:3"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{program}:3: y: tensor, on device 'cuda' (cuda:0)\n"


def test_debug_flow_reports_a_syntax_error_without_a_traceback(tmp_path: Path) -> None:
    program = tmp_path / "broken.py"
    program.write_text("import torch\nx = (\n")
    result = subprocess.run([sys.executable, "-m", "torchdevlint", "debug", "flow", str(program)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "syntax error" in result.stderr and "Traceback" not in result.stderr


def test_a_function_the_file_only_calls_directly_sees_what_its_calls_pass() -> None:
    on_device, joined, annotated, passed_around = _probes(
        """
        import torch
        import torch.nn as nn
        device = torch.device("cuda")

        def evaluate(model, x):
            probe(model)
            probe(x)

        def step(model: nn.Module):
            probe(model)

        def callback(model):
            probe(model)

        net = nn.Linear(2, 2).to(device)
        evaluate(net, torch.zeros(2, device=device))
        evaluate(net, x=torch.zeros(2))
        step(net)
        register(callback)
        callback(net)
        """
    )
    assert on_device.describe() == "module, on device 'cuda' (cuda:0)"
    assert joined.describe() == "tensor, on device 'cuda' (cuda:0) or host"
    assert annotated.describe() == "module, on device 'cuda' (cuda:0)"
    # Passed to code we cannot see, it may be called with anything.
    assert passed_around.describe() == "unknown"


def test_what_a_caller_passes_on_reaches_its_callee_two_levels_down_in_any_order_of_asking() -> None:
    """`train_iters(model, ...)` hands the file's model to `train(model, ...)`; a helper called
    first with one loader and later with another sees both, whichever body is asked first."""
    source = """
        import torch
        import torch.nn as nn
        device = torch.device("cuda")

        def train(model, batch):
            probe(model)
            return model(batch.to(device))

        def train_iters(model, batches):
            for batch in batches:
                train(model, batch)

        def measure(loader):
            probe(loader)

        net = nn.Linear(2, 2).to(device)
        train_iters(net, [torch.zeros(4, 2)])
        first = torch.utils.data.DataLoader(torch.zeros(4, 2))
        measure(first)
        second = torch.utils.data.DataLoader(torch.zeros(8, 2))
        measure(second)
        """
    model_in_train, loader = _probes(source)
    assert model_in_train.describe() == "module, on device 'cuda' (cuda:0)"
    assert len(loader.holds) == 2
    # Asked bottom-up, as a rule visiting the module's last line first would.
    module = cst.parse_module(textwrap.dedent(source))
    flow = model_for(module)
    calls = [node for node in _walk(module) if isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
             and node.func.value == "probe"]
    assert len(flow.value_of(calls[1].args[0].value).holds) == 2
    assert flow.value_of(calls[0].args[0].value).describe() == "module, on device 'cuda' (cuda:0)"


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found = [node]
    for child in node.children:
        found.extend(_walk(child))
    return found


def test_a_plain_class_method_the_class_alone_calls_sees_what_its_calls_pass() -> None:
    own_call, passed_around, framework_class = _probes(
        """
        import torch.nn as nn
        import lightning as L

        class Trainer(object):
            def __init__(self):
                self.model = nn.Linear(2, 2).cuda()
            def evaluate(self, model):
                probe(model)
            def report(self, model):
                probe(model)
            def run(self, hooks):
                self.evaluate(self.model)
                self.report(self.model)
                hooks.append(self.report)

        class Module(L.LightningModule):
            def check(self, model):
                probe(model)
            def training_step(self, batch, index):
                self.check(nn.Linear(2, 2).cuda())
        """
    )
    assert own_call.describe() == "module, on device 'cuda' (cuda:0)"
    # Handed out as a callback, or in a class a framework calls into: callers we cannot see.
    assert not passed_around.is_known
    assert not framework_class.is_known


def test_cuda_devices_carry_their_index_where_the_code_shows_it() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        a = torch.zeros(2).cuda()
        b = torch.zeros(2).to(1)
        gpu = torch.device("cuda", 2)
        c = torch.zeros(2, device=gpu)
        torch.cuda.set_device(3)
        d = torch.zeros(2).cuda()
        with torch.cuda.device(1):
            e = torch.zeros(2).cuda()
        f = torch.zeros(2).cuda()
        if flag:
            torch.cuda.set_device(0)
        g = torch.zeros(2).cuda()
        wrapped = nn.DataParallel(nn.Linear(2, 2).cuda(), device_ids=[1, 2])
        """
    )
    # The module's own code holds every change of the current device: it starts on cuda:0.
    assert "a: tensor, on device 'cuda' (cuda:0)" in facts
    assert "b: tensor, on device 'cuda:1' (cuda:1)" in facts
    assert "c: tensor, on device 'cuda:2' (cuda:2)" in facts
    assert "d: tensor, on device 'cuda' (cuda:3)" in facts
    assert "e: tensor, on device 'cuda' (cuda:1)" in facts
    assert "f: tensor, on device 'cuda' (cuda:3)" in facts
    assert "g: tensor, on device 'cuda' (cuda)" in facts
    assert "wrapped: wrapped module, names device device_ids[0] (cuda:1), on device 'cuda' (cuda)" in facts


def test_the_current_device_is_followed_per_branch_and_unknown_where_another_body_sets_it() -> None:
    helped = _facts(
        """
        import torch
        def setup(rank):
            torch.cuda.set_device(rank)
        def after_a_helper(rank):
            setup(rank)
            helped = torch.zeros(2).cuda()
        """
    )
    # `setup` may run before any body but its own: elsewhere the current device is unknown.
    assert "helped: tensor, on device 'cuda' (cuda)" in helped
    own = _facts(
        """
        import torch
        def worker(gpu):
            if gpu is not None:
                torch.cuda.set_device(gpu)
                chosen = torch.zeros(2).cuda()
            else:
                default = torch.zeros(2).cuda()
            either = torch.zeros(2).cuda()
        """
    )
    # `worker` holds the file's only change: cuda:0 on each path that has not made it.
    assert "chosen: tensor, on device 'cuda' (cuda)" in own
    assert "default: tensor, on device 'cuda' (cuda:0)" in own
    assert "either: tensor, on device 'cuda' (cuda)" in own


def test_a_model_built_out_of_sight_and_moved_in_place_is_there() -> None:
    facts = _facts(
        """
        import torch
        from project import build_resnet
        model = build_resnet(50)
        model.cuda()
        features = build_resnet(18)
        features.cuda()
        """
    )
    # Moved by a statement of its own and named as models are: now on the GPU (a Module moves
    # in place; its kind stays unknown, as nothing else says it).
    assert "model: unknown, on device 'cuda' (cuda:0)" in facts
    # Not named as a model: a tensor's move thrown away looks the same, so nothing is said.
    assert not any(fact.startswith("features: unknown, on device") for fact in facts)


def test_a_tuple_a_method_makes_on_its_modules_device_is_where_the_module_is() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.LSTM(4, 8)
            def init_hidden(self, batch):
                weight = next(self.parameters())
                return (weight.new_zeros(1, batch, 8), weight.new_zeros(1, batch, 8))
        on_host = LM()
        hidden = on_host.init_hidden(1)
        on_gpu = LM().cuda()
        moved = on_gpu.init_hidden(1)
        """
    )
    assert "hidden: container, [0: tensor, on host, 1: tensor, on host]" in facts
    assert "moved: container, [0: tensor, on device 'cuda' (cuda:0), 1: tensor, on device 'cuda' (cuda:0)]" in facts


def test_factories_follow_the_default_device_the_program_sets() -> None:
    facts = _facts(
        """
        import torch
        def helper():
            early = torch.zeros(2)
        a = torch.zeros(2)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.set_default_device(device)
        b = torch.zeros(2)
        c = torch.zeros(2, device="cpu")
        """
    )
    # The file changes the default device: before it says which, a factory's tensor could be
    # anywhere (in a function, called after the change, say).
    assert "early: tensor" in facts
    assert "a: tensor" in facts
    assert "b: tensor, on device  (cpu|cuda)" in facts
    assert "c: tensor, on host" in facts

    scoped = _facts(
        """
        import torch
        import torch.nn as nn
        with torch.device("cuda"):
            inside = torch.zeros(2)
            layer = nn.Linear(2, 2)
        after = torch.zeros(2)
        """
    )
    assert "inside: tensor, on device 'cuda' (cuda:0)" in scoped
    # Built on the default device: its parameters are there.
    assert "layer: module, on device 'cuda' (cuda:0)" in scoped
    assert "after: tensor, on host" in scoped


def test_results_of_calls_it_cannot_see_are_placed_by_their_device_inputs() -> None:
    facts = _facts(
        """
        import torch
        def train(model, batch, criterion, args, device):
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            loss = out.loss
            weighted = args.weight * loss
            extractor = make_extractor().to(device)
            features = extractor(batch["x"])
            task = criterion(features, batch["y"])
        """
    )
    assert "batch: container, on device device (?)" in facts
    assert "loss: model output, on device device (?), may require grad" in facts
    assert "weighted: tensor, on device device (?), may require grad" in facts
    assert "features: model output, on device device (?), may require grad" in facts
    assert "task: tensor, on device device (?), 0-dim, may require grad" in facts


def test_a_parameter_left_to_its_default_device_is_there() -> None:
    values = _probes(
        """
        import torch
        def check(steps, device=torch.device("cpu")):
            x = torch.ones(3, device=device)
            probe(x)
        check(10)
        """
    )
    assert values[0].on_host


def test_the_cpu_mode_answers_availability_checks_settings_and_device_tests() -> None:
    values = _probes(
        """
        import argparse
        import torch
        class Config:
            use_gpu = True
        opt = Config()
        args = argparse.ArgumentParser().parse_args()
        use_cuda = not args.no_cuda and torch.cuda.is_available()
        device = torch.device("cuda" if opt.use_gpu else "cpu")
        probe(use_cuda)
        probe(device.type == "cuda")
        probe(args.gpu is not None)
        probe(args.local_rank == -1)
        probe(torch.cuda.device_count() > 1)
        probe(len(args.gpu_ids) > 0)
        probe(torch.zeros(2).is_cuda)
        probe(args.cpu or opt.use_gpu)
        probe(args.seed > 0)
        """
    )
    assert [value.in_cpu_mode for value in values] == [False, False, False, True, False, False, False, True, None]


def test_code_the_cpu_mode_cannot_reach_is_marked_and_joins_back() -> None:
    facts = _facts(
        """
        import sys
        import torch
        def main(use_cuda):
            if use_cuda:
                a = 1
            b = 2
            if not torch.cuda.is_available():
                sys.exit("needs a GPU")
            c = 3
        """
    )
    assert "a = 1: not reached in the CPU mode" in facts
    assert "b = 2: not reached in the CPU mode" not in facts
    assert "c = 3: not reached in the CPU mode" in facts


def test_operators_cuda_checks_for_one_device_take_no_0_dim_host_tensor() -> None:
    facts = _facts(
        """
        import torch
        import torch.nn as nn
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        table = nn.Embedding(10, 4).to(device)
        first = torch.tensor(3)
        row = torch.index_select(table.weight, 0, first)
        scaled = table.weight * torch.tensor(2.0)
        masked = table.weight.masked_fill(table.weight > 0, torch.tensor(0.0))
        """
    )
    meetings = [fact for fact in facts if "meets" in fact]
    assert meetings == ["host data `first` meets accelerator data `table.weight` (call checked for one device)"]


def test_global_and_local_ranks_are_traced_through_names_int_and_functions_and_lost_in_arithmetic() -> None:
    source = textwrap.dedent(
        """
        import os
        import torch
        import torch.distributed as dist
        import horovod.torch as hvd
        def launcher_rank():
            return int(os.environ.get("RANK", 0))
        rank = dist.get_rank()
        probe(rank)
        probe(int(os.environ["RANK"]))
        probe(launcher_rank())
        probe(hvd.rank())
        probe(int(os.environ["LOCAL_RANK"]))
        probe(hvd.local_rank())
        probe(rank % torch.cuda.device_count())
        probe(os.environ.get("MASTER_ADDR"))
        """
    )
    module = cst.parse_module(source)
    model = model_for(module)
    probes = [node.args[0].value for node in _calls_named(module, "probe")]
    traced = [model.holds(model.value_of(probe), Held.GLOBAL_RANK) for probe in probes]
    assert traced == [True, True, True, True, False, False, False, False]
    local = [model.holds(model.value_of(probe), Held.LOCAL_RANK) for probe in probes]
    assert local == [False, False, False, False, True, True, False, False]


def _calls_named(module: cst.Module, name: str) -> list[cst.Call]:
    found: list[cst.Call] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name:
            found.append(node)
        stack.extend(reversed(node.children))
    return found


def test_assigning_a_tensors_data_moves_the_tensor() -> None:
    facts = _facts(
        """
        import torch
        x = torch.zeros(1, 1).long()
        if torch.cuda.is_available():
            x.data = x.data.cuda()
        model = torch.nn.Embedding(4, 2).cuda()
        y = model(x)
        """
    )
    assert "x: tensor, on device 'cuda' (cuda:0)" in facts
    assert not any("meets" in fact for fact in facts)


# A trainer object (not a Module) whose `check_cuda()` moves its models in place and whose
# `train()` moves the batch and labels under the same flag: consistent on every path.
_TRAINER_MOVING_ITS_MODELS = """
import torch
import torch.nn as nn


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


class Trainer(object):
    def __init__(self, args):
        self.D = Critic()
        self.loss = nn.BCELoss()
        self.cuda = False
        self.check_cuda(args.cuda)

    def check_cuda(self, cuda_flag=False):
        if cuda_flag:
            self.cuda = True
            self.D.cuda(0)

    def train(self, loader):
        for images, _ in loader:
            labels = torch.ones(8)
            if self.cuda:
                images, labels = images.cuda(0), labels.cuda(0)
            print(self.loss(self.D(images).flatten(), labels))
"""


def test_findings_do_not_depend_on_which_body_the_rules_ask_about_first() -> None:
    from torchdevlint.engine import lint_source
    from torchdevlint.registry import all_rules

    rules = {rule.code: rule for rule in all_rules()}
    source = textwrap.dedent(_TRAINER_MOVING_ITS_MODELS)
    # TDL001 asks about `self.D.cuda(0)` (in `check_cuda`) before TDL009 reads `train`: the
    # class's attributes were once gathered while `check_cuda` ran, without its move.
    alone = lint_source(source, "t.py", [rules["TDL009"]])
    asked_first = lint_source(source, "t.py", [rules["TDL001"], rules["TDL009"]])
    assert alone == asked_first == []


def test_a_module_moved_by_a_helper_or_a_chain_of_its_own_methods_is_there_after() -> None:
    from torchdevlint.engine import lint_source
    from torchdevlint.registry import all_rules

    rules = [rule for rule in all_rules() if rule.code == "TDL034"]
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn

        def train_model(model, batches):
            model.cuda()
            for x in batches:
                model(x.cuda()).sum().backward()

        model = nn.Linear(4, 2)
        train_model(model, [torch.randn(2, 4)])
        print(model(torch.randn(2, 4).cuda()))

        half = nn.Linear(4, 2)
        if torch.cuda.is_available():
            half.cuda().half()
        x = torch.randn(2, 4)
        if torch.cuda.is_available():
            x = x.cuda().half()
        print(half(x))
        """)
    # `train_model` moves the module in place; `half.cuda().half()` moves `half` too.
    assert lint_source(source, "t.py", rules) == []


def test_a_method_run_while_the_class_collects_its_attributes_is_not_kept_as_final() -> None:
    # `__init__` asks a method of its own that reads an attribute before it wraps the model,
    # and later resumes through one that sets attributes too: asking first about a save in a third method makes the
    # class collect its attributes, and the resume run inside that collection read
    # `self.net` as unknown. That run must not be the resume's flow.
    values = _probes(
        """
        import torch
        from torch import nn
        from wrappers import SyncParallel

        class Runner:
            def __init__(self, net, resume, sync):
                self.net = net
                self.log = []
                self.device = self.pick_device()
                if sync:
                    self.net = SyncParallel(self.net)
                else:
                    self.net = nn.DataParallel(self.net)
                if resume:
                    self.restore(resume)

            def pick_device(self):
                self.log.append("choosing the device")
                return torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def keep(self, path):
                torch.save(probe(self.net).state_dict(), path)

            def restore(self, path):
                state = torch.load(path, map_location="cpu")
                self.step = state["step"]
                probe(self.net).load_state_dict(state["net"])
        """
    )
    assert [value.wrapping.name for value in values] == ["MAYBE", "MAYBE"]


def test_a_loss_helper_called_from_a_training_function_is_where_this_call_s_model_is() -> None:
    # `train(model, ...)` seen with its model unknown hands `loss_func` the output of a model
    # "wherever it is"; called from the script with a model on the host (or the device), the
    # helper's result is there too, not on "the module's device".
    source = """
        import torch
        import torch.nn.functional as F

        class Regression(torch.nn.Module):
            def __init__(self, features):
                super().__init__()
                self.linear = torch.nn.Linear(features, 1)

            def forward(self, x):
                return self.linear(x).view(-1)

        def loss_func(yhat, y):
            return torch.mean((yhat - y) ** 2)

        def train(model, x, y, epochs):
            cost = []
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                loss = F.mse_loss(model.forward(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                with torch.no_grad():
                    yhat = model.forward(x)
                    cost.append(loss_func(yhat, y))
            return cost

        x, y = torch.randn(10, 3){move}, torch.randn(10){move}
        model = Regression(x.size(1)){move}
        probe(train(model, x, y, 20))
    """
    on_host, = _probes(source.format(move=""))
    on_device, = _probes(source.format(move=".cuda()"))
    assert on_host.on_host
    assert on_device.on_accelerator
