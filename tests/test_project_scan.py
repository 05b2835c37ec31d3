"""What a file's findings depend on in its project's other files. TDL003: a checkpoint loaded
without `map_location` is reported where some file of the project saves what may hold GPU
tensors. TDL007: an option in another file (`--gpu_ids -1` for the CPU) gives the programs that
import it a CPU mode, which reaches the models they import."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import run_cli

from torchdevlint.project_scan import checkpoint_writing, forget, path_target_of_code, project_root

PREDICT = """
import torch
import torch.nn as nn
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model.load_state_dict(torch.load("weights/classifier.pth"))
model.to(device)
"""

GPU_TRAINING = """
import torch
import torch.nn as nn
model = nn.Linear(8, 2).cuda()
for step in range(10):
    model(torch.randn(4, 8).cuda()).sum().backward()
torch.save(model.state_dict(), "weights/classifier.pth")
"""

# Converts another framework's arrays: nothing in it runs on a GPU.
CONVERSION = """
import numpy as np
import torch
import torch.nn as nn
def convert(arrays_file, out_file):
    arrays = np.load(arrays_file)
    model = nn.Linear(8, 2)
    model.weight.data = torch.from_numpy(arrays["w"])
    torch.save(model.state_dict(), out_file)
"""

# A trainer class that saves the model it was handed; the device is chosen elsewhere.
TRAINER = """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
    def save(self, epoch, path):
        state = {"epoch": epoch, "model": self.model.state_dict()}
        torch.save(state, path)
"""

MAIN_ON_THE_DEVICE = """
import torch
from trainer import Trainer
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = build().to(device)
Trainer(model, None).save(0, "weights/classifier.pth")
"""


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def _codes(root: Path, *paths: str) -> list[tuple[str, str]]:
    found = json.loads(run_cli("check", "--format", "json", *(paths or (".",)), cwd=root).stdout)
    return sorted((Path(item["path"]).name, item["code"]) for item in found)


def test_a_load_is_reported_where_the_project_trains_on_a_gpu_and_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "train.py": GPU_TRAINING})
    assert _codes(root) == [("predict.py", "TDL003")]
    # Linting the one file (pre-commit, an editor) reads the same project.
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]


def test_released_weights_are_not_reported_where_nothing_in_the_project_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    assert _codes(root) == []


def test_a_conversion_that_saves_host_tensors_writes_no_gpu_checkpoint(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "tools/convert.py": CONVERSION})
    assert _codes(root) == []
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and not writing.writes_device_checkpoints


def test_a_trainer_saving_the_model_it_was_handed_in_a_project_on_the_gpu(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT, "trainer.py": TRAINER, "main.py": MAIN_ON_THE_DEVICE})
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and ("trainer.py", 8) in writing.device_saves


def test_a_tests_own_round_trip_writes_no_project_checkpoint(tmp_path: Path) -> None:
    test = """
    import torch
    def test_round_trip(tmp_path):
        torch.save(torch.ones(2, device="cuda"), tmp_path / "t.pt")
    """
    root = _project(tmp_path, {"predict.py": PREDICT, "tests/test_io.py": test})
    assert _codes(root, "predict.py") == []


def test_the_cached_result_follows_a_save_added_in_another_file(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    assert _codes(root, "predict.py") == []
    (root / "train.py").write_text(textwrap.dedent(GPU_TRAINING))
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]
    (root / "train.py").unlink()
    assert _codes(root, "predict.py") == []


def test_a_notebook_that_trains_on_the_gpu_and_saves_is_a_writer(tmp_path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": textwrap.dedent(GPU_TRAINING).splitlines(keepends=True)},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["!nvidia-smi\n", "%matplotlib inline\n"]}]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    root = _project(tmp_path, {"predict.py": PREDICT, "train.ipynb": json.dumps(notebook)})
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]


def test_the_project_is_the_folder_with_a_marker_or_the_code_folders_above_the_file(tmp_path: Path) -> None:
    # A folder of projects holds no Python file itself: each project is its own.
    collection = _project(tmp_path, {"gan/train.py": GPU_TRAINING, "classifier/predict.py": PREDICT,
                                     "classifier/models/net.py": "import torch\n"})
    assert project_root(str(collection / "classifier/models/net.py")) == collection / "classifier"
    assert _codes(collection) == []
    (collection / "pyproject.toml").write_text("[project]\nname = 'collection'\n")
    forget()  # what a new run does
    assert project_root(str(collection / "classifier/models/net.py")) == collection
    assert _codes(collection) == [("predict.py", "TDL003")]
    assert project_root(str(tmp_path / "no-such-file.py")) is None


def test_the_option_reports_loads_of_files_from_outside_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    (root / "pyproject.toml").write_text("[tool.torchdevlint.TDL003]\ninclude-outside-checkpoints = true\n")
    assert _codes(root) == [("predict.py", "TDL003")]


def test_show_settings_says_what_the_project_saves(tmp_path: Path) -> None:
    root = _project(tmp_path, {"predict.py": PREDICT})
    shown = run_cli("check", "--show-settings", "predict.py", cwd=root).stdout
    assert f"project: {root}" in shown
    assert "writes no checkpoint that may hold GPU tensors" in shown
    (root / "train.py").write_text(textwrap.dedent(GPU_TRAINING).lstrip())
    shown = run_cli("check", "--show-settings", "predict.py", cwd=root).stdout
    assert "may hold GPU tensors, e.g. train.py:6" in shown


def test_a_save_of_a_host_copy_writes_no_gpu_checkpoint(tmp_path: Path) -> None:
    saver = """
    import torch
    def save_network(net, path, gpu_ids):
        torch.save(net.cpu().state_dict(), path)
        if gpu_ids and torch.cuda.is_available():
            net.cuda()
    """
    root = _project(tmp_path, {"predict.py": PREDICT, "util.py": saver})
    assert _codes(root) == []


# A translation script that pickles its vocabularies beside the GPU model's weights.
VOCABULARY_AND_WEIGHTS = """
import os
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
def vocabularies(build):
    if not os.path.exists("vocab.pt"):
        vocab_src, vocab_tgt = build()
        torch.save((vocab_src, vocab_tgt), "vocab.pt")
    else:
        vocab_src, vocab_tgt = torch.load("vocab.pt")
    return vocab_src, vocab_tgt
def train(model):
    model.to(device)
    torch.save(model.state_dict(), "checkpoints/final.pt")
"""

# A config naming the converted weights, a script converting them on the CPU, and a model
# that loads them, in a project whose training saves GPU checkpoints.
CONFIG = """
class Config:
    pretrained_path = 'checkpoints/vgg16_converted.pth'
    load_path = None
opt = Config()
"""

CONVERTER = """
import torch
from torch.utils.model_zoo import load_url
weights = load_url("https://example.org/vgg16.pth")
weights["classifier.0.weight"] = weights.pop("classifier.1.weight")
torch.save(weights, "checkpoints/vgg16_converted.pth")
"""

BACKBONE = """
import torch
from config import opt
def backbone(model):
    model.load_state_dict(torch.load(opt.pretrained_path))
    return model.cuda() if torch.cuda.is_available() else model
"""

RESUME = """
import torch
from config import opt
def resume(model):
    model.load_state_dict(torch.load("weights/classifier.pth"))
"""


def test_a_vocabulary_saved_beside_the_gpu_weights_is_host_data(tmp_path: Path) -> None:
    root = _project(tmp_path, {"translate.py": VOCABULARY_AND_WEIGHTS})
    # The file's own load of vocab.pt reads what only the vocabulary save writes.
    assert _codes(root) == []
    writing = checkpoint_writing(str(root / "translate.py"))
    assert writing is not None and writing.writes_device_checkpoints
    assert dict(writing.written) == {"vocab.pt": False, "final.pt": True}


def test_weights_converted_on_the_cpu_are_found_through_the_configs_path(tmp_path: Path) -> None:
    files = {"config.py": CONFIG, "tools/convert.py": CONVERTER, "model.py": BACKBONE, "train.py": GPU_TRAINING}
    root = _project(tmp_path, files)
    assert _codes(root) == []
    # The same project's load of what its GPU training writes is still reported.
    (root / "resume.py").write_text(textwrap.dedent(RESUME).lstrip())
    forget()
    assert _codes(root) == [("resume.py", "TDL003")]


def test_a_file_name_some_gpu_save_writes_is_reported_whatever_else_writes_it(tmp_path: Path) -> None:
    gpu_converter = CONVERTER.replace("import torch\n", "import torch\nweights_on = 'cuda'\n")
    root = _project(tmp_path, {"config.py": CONFIG, "tools/convert.py": CONVERTER, "tools/convert_gpu.py": gpu_converter,
                               "model.py": BACKBONE})
    assert _codes(root) == [("model.py", "TDL003")]


def test_an_options_default_path_names_the_file_a_load_reads(tmp_path: Path) -> None:
    prepare = """
    import argparse
    import torch
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab-file", default="data/vocab.pt")
    args = parser.parse_args()
    stoi = {"<pad>": 0}
    torch.save(stoi, args.vocab_file)
    model = torch.nn.Linear(2, 2).cuda()
    torch.save(model.state_dict(), "model.pt")
    """
    tag = """
    import argparse
    import torch
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab-file", default="data/vocab.pt")
    args = parser.parse_args()
    model = torch.nn.Linear(2, 2).to("cuda" if torch.cuda.is_available() else "cpu")
    stoi = torch.load(args.vocab_file)
    model.load_state_dict(torch.load("model.pt"))
    """
    root = _project(tmp_path, {"prepare.py": prepare, "tag.py": tag})
    # The vocabulary's load is left alone; the model's is reported.
    found = json.loads(run_cli("check", "--format", "json", ".", cwd=root).stdout)
    assert [(item["path"], item["line"], item["code"]) for item in found] == [("tag.py", 8, "TDL003")]
    writing = checkpoint_writing(str(root / "prepare.py"))
    assert writing is not None and dict(writing.path_names)["vocab_file"] == ("vocab.pt",)


def test_published_and_converted_weights_are_known_by_their_names(tmp_path: Path) -> None:
    paths = """
    import os
    root = "/data/pretrained"
    resnet_path = os.path.join(root, "resnet101-5d3b4d8f.pth")
    vgg_path = os.path.join(root, "vgg16-caffe.pth")
    own_path = os.path.join(root, "resnet101-finetuned.pth")
    """
    backbones = """
    import torch
    from .paths import *
    def resnet(model):
        model.load_state_dict(torch.load(resnet_path))
    def vgg(model):
        model.load_state_dict(torch.load(vgg_path))
    def own(model):
        model.load_state_dict(torch.load(own_path))
    """
    root = _project(tmp_path, {"models/paths.py": paths, "models/backbones.py": backbones, "train.py": GPU_TRAINING})
    # torch.hub's hashed name and a Caffe conversion are weights made elsewhere; the file
    # with a name of the project's own may be one its GPU training wrote.
    found = json.loads(run_cli("check", "--format", "json", ".", cwd=root).stdout)
    assert [(Path(item["path"]).name, item["line"]) for item in found] == [("backbones.py", 8)]


def test_a_save_through_a_star_import_of_torch_is_a_save(tmp_path: Path) -> None:
    parameters = """
    import torch
    CUDA = torch.cuda.is_available()
    """
    utils = """
    from parameters import *
    def save_checkpoint(filename, model, epoch):
        torch.save({"state_dict": model.state_dict(), "epoch": epoch}, filename)
    """
    root = _project(tmp_path, {"parameters.py": parameters, "utils.py": utils, "predict.py": PREDICT})
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and writing.device_saves == (("utils.py", 3),)
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]



def test_a_save_where_torch_is_bound_by_importing_a_submodule_is_a_save(tmp_path: Path) -> None:
    training = """
    import torch.optim as optim
    import torch.utils.data
    net = torch.nn.Linear(4, 2)
    if torch.cuda.is_available():
        net.cuda()
    torch.save(net.state_dict(), "epochs/net_%d.pth" % 3)
    """
    root = _project(tmp_path, {"train.py": training, "predict.py": PREDICT})
    writing = checkpoint_writing(str(root / "predict.py"))
    assert writing is not None and writing.device_saves == (("train.py", 6),)
    assert _codes(root, "predict.py") == [("predict.py", "TDL003")]


OPTIONS = """
import argparse
def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu_ids", type=str, default="0", help="gpu ids: 0,1 or -1 for the CPU")
    opt = parser.parse_args()
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
    return opt
"""

MODEL_ON_CUDA = """
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x.cuda())
"""

TRAIN_WITH_OPTIONS = """
from options.parse import parse
from models import build
opt = parse()
net = build(opt)
"""

MODELS_PACKAGE = """
def build(opt):
    from .net import Net
    net = Net()
    if opt.gpu_ids:
        net.cuda(opt.gpu_ids[0])
    return net
"""


def test_a_cpu_option_in_another_file_reaches_the_models_the_program_imports(tmp_path: Path) -> None:
    root = _project(tmp_path, {"options/parse.py": OPTIONS, "train.py": TRAIN_WITH_OPTIONS,
                               "models/__init__.py": MODELS_PACKAGE, "models/net.py": MODEL_ON_CUDA})
    found = json.loads(run_cli("check", "--format", "json", ".", cwd=root).stdout)
    assert [(Path(item["path"]).as_posix(), item["code"], item["line"]) for item in found] == [
        ("models/net.py", "TDL007", 8)]
    assert found[0]["message"] == (
        "CUDA is used unguarded in a program that falls back to the CPU (train.py runs this file, and its option "
        "at options/parse.py:4 chooses the CPU); it fails without a GPU")
    shown = run_cli("check", "--show-settings", "models/net.py", cwd=root).stdout
    assert "train.py runs it with the CPU mode of the option at options/parse.py:4" in shown


def test_without_the_option_the_model_is_gpu_only_and_the_cached_result_follows(tmp_path: Path) -> None:
    gpu_only_options = OPTIONS.replace('help="gpu ids: 0,1 or -1 for the CPU"', 'help="gpu ids: 0,1"')
    root = _project(tmp_path, {"options/parse.py": gpu_only_options, "train.py": TRAIN_WITH_OPTIONS,
                               "models/__init__.py": MODELS_PACKAGE, "models/net.py": MODEL_ON_CUDA})
    assert _codes(root) == []
    assert ("net.py", "TDL203") in _codes_selected(root, "TDL007,TDL203")
    (root / "options/parse.py").write_text(textwrap.dedent(OPTIONS).lstrip())
    assert _codes_selected(root, "TDL007,TDL203") == [("net.py", "TDL007")]


def test_a_cpu_fallback_in_one_script_leaves_the_gpu_only_scripts_beside_it_alone(tmp_path: Path) -> None:
    # The evaluation script falls back to the CPU at its top level and runs the model there:
    # the model's hard-coded move fails in that run. The sampling script beside it is GPU-only.
    evaluate = """
    import torch
    from net import Net
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(Net().to(device)(torch.ones(4, device=device)))
    """
    root = _project(tmp_path, {"evaluate.py": evaluate, "net.py": MODEL_ON_CUDA,
                               "sample.py": "import torch\nfrom net import Net\nprint(Net().cuda()(torch.ones(4)))\n"})
    assert _codes_selected(root, "TDL007,TDL203") == [("net.py", "TDL007"), ("sample.py", "TDL203")]


PREFETCHING_DATA = """
import torch

class Prefetcher:
    def __init__(self, loader, device):
        self.loader, self.device = loader, device
        self.stream = torch.cuda.Stream()

    def __iter__(self):
        for images, labels in self.loader:
            with torch.cuda.stream(self.stream):
                images = images.cuda(device=self.device, non_blocking=True)
            torch.cuda.current_stream().wait_stream(self.stream)
            yield images, labels

def first_batch(loader):
    return next(iter(loader))[0].cuda()
"""

FALLING_BACK_TO_THE_CPU = """
import torch
import data
device = "cuda" if torch.cuda.is_available() else "cpu"
print(data.first_batch(loader).to(device))
"""


def test_a_cpu_mode_elsewhere_reaches_only_what_its_program_uses(tmp_path: Path) -> None:
    # The inference script falls back to the CPU and uses `first_batch`; the GPU prefetcher
    # is built only by the training script, which has no CPU mode.
    train = "import torch\nfrom data import Prefetcher\nfor batch in Prefetcher(loader, torch.device('cuda')):\n    pass\n"
    root = _project(tmp_path, {"data.py": PREFETCHING_DATA, "infer.py": FALLING_BACK_TO_THE_CPU, "train.py": train})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL007,TDL027", ".", cwd=root).stdout)
    assert [(item["path"], item["code"], item["line"]) for item in found] == [("data.py", "TDL007", 16)]
    assert "infer.py runs this file" in found[0]["message"]
    # Once the inference script builds the prefetcher too, its CPU mode reaches it (the
    # cached result follows the other file's change).
    (root / "infer.py").write_text(textwrap.dedent(FALLING_BACK_TO_THE_CPU).lstrip() + "data.Prefetcher(loader, device)\n")
    assert [line for path, code, line in _lines(root, "TDL007")] == [6, 11, 12, 16]


def test_a_definition_looked_up_by_a_computed_name_may_be_used(tmp_path: Path) -> None:
    looking_up = FALLING_BACK_TO_THE_CPU.replace("import data\n", "import data\nmaker = getattr(data, config['loader'])\n")
    root = _project(tmp_path, {"data.py": PREFETCHING_DATA, "infer.py": looking_up})
    assert [line for path, code, line in _lines(root, "TDL007")] == [6, 11, 12, 16]


MOVING_TRAINER = """
import torch

class Trainer:
    def __init__(self, model, device):
        self.model, self.device = model, device
        self.model.to(self.device)
"""

EVALUATES_AFTER_THE_TRAINER = """
import torch
import torch.nn as nn
from trainers.base import Trainer
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(4, 2)
trainer = Trainer(model, device)
print(model(torch.randn(3, 4).to(device)))
"""


def test_a_model_handed_to_another_files_trainer_that_moves_it_is_not_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"trainers/__init__.py": "", "trainers/base.py": MOVING_TRAINER,
                               "evaluate.py": EVALUATES_AFTER_THE_TRAINER})
    assert _lines(root, "TDL034") == []
    # A trainer that keeps the model where it is: the model stays on the CPU.
    (root / "trainers/base.py").write_text(textwrap.dedent(MOVING_TRAINER).replace("        self.model.to(self.device)\n", ""))
    assert _lines(root, "TDL034") == [("evaluate.py", "TDL034", 7)]


EARLY_STOPPING = """
import torch

class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.best = patience, None

    def __call__(self, loss, model, folder):
        if self.best is None or loss < self.best:
            self.best = loss
            torch.save(model.state_dict(), folder + '/' + 'checkpoint.pth')
"""

TRAINS_THEN_RELOADS_THE_BEST = """
import torch
from utils.tools import EarlyStopping
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train(model, batches, folder):
    early_stopping = EarlyStopping(patience=3)
    for loss in batches:
        early_stopping(loss, model, folder)
    best_model_path = folder + '/' + 'checkpoint.pth'
    model.load_state_dict(torch.load(best_model_path))
    return model
"""


def test_a_checkpoint_another_files_helper_saved_earlier_in_the_body_is_not_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"utils/__init__.py": "", "utils/tools.py": EARLY_STOPPING,
                               "exp.py": TRAINS_THEN_RELOADS_THE_BEST})
    assert _lines(root, "TDL003") == []
    # A helper saving another file wrote nothing this load reads.
    (root / "utils/tools.py").write_text(textwrap.dedent(EARLY_STOPPING).replace("checkpoint.pth", "last.pth"))
    assert _lines(root, "TDL003") == [("exp.py", "TDL003", 10)]


SAVES_WHERE_IT_IS_TOLD = """
from pathlib import Path
import torch

def save_model(model, target_dir, model_name):
    target_dir_path = Path(target_dir)
    target_dir_path.mkdir(parents=True, exist_ok=True)
    model_save_path = target_dir_path / model_name
    torch.save(obj=model.state_dict(), f=model_save_path)
"""

NOTEBOOK_SAVES_THEN_RELOADS = """
import torch
from helpers import utils
device = "cuda" if torch.cuda.is_available() else "cpu"
model = make_model().to(device)
weights = "classifier_20_percent.pth"
utils.save_model(model=model, target_dir="models", model_name=weights)
utils.save_model(model, "models", "baseline.pth")
reloaded = make_model()
reloaded.load_state_dict(torch.load("models/classifier_20_percent.pth"))
reloaded.load_state_dict(torch.load("models/baseline.pth"))
reloaded.load_state_dict(torch.load("models/other.pth"))
for model_name in ("small", "large"):
    for epochs in (5, 10):
        path = f"07_{model_name}_{epochs}_epochs.pth"
        utils.save_model(model=model, target_dir="models", model_name=path)
reloaded.load_state_dict(torch.load("models/07_large_10_epochs.pth"))
reloaded.load_state_dict(torch.load("models/07_large_10_steps.pth"))
"""


def test_a_file_another_files_helper_saved_under_the_name_it_was_handed_is_not_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"helpers/__init__.py": "", "helpers/utils.py": SAVES_WHERE_IT_IS_TOLD,
                               "notebook.py": NOTEBOOK_SAVES_THEN_RELOADS})
    # The files the helper was handed (by name, or one of a template's) were written earlier
    # in the run; others were not.
    assert _lines(root, "TDL003") == [("notebook.py", "TDL003", 11), ("notebook.py", "TDL003", 17)]


ACQUIRES_A_DEVICE = """
import os
import torch

class ExpBasic:
    def __init__(self, args):
        self.args = args
        if args.use_gpu:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
            self.device = torch.device("cuda:0")
        else:
            self.device = torch.device("cpu")
"""

MAIN_CHECKS_THEN_BUILDS = """
import argparse
import torch
from exp.basic import ExpBasic
parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=0)
args = parser.parse_args()
args.use_gpu = torch.cuda.is_available()
experiment = ExpBasic(args)
"""


def test_visible_devices_set_in_a_class_a_program_builds_after_checking_cuda(tmp_path: Path) -> None:
    root = _project(tmp_path, {"exp/__init__.py": "", "exp/basic.py": ACQUIRES_A_DEVICE, "main.py": MAIN_CHECKS_THEN_BUILDS})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL008", ".", cwd=root).stdout)
    assert [(Path(item["path"]).as_posix(), item["line"]) for item in found] == [("exp/basic.py", 8)]
    assert "main.py:7 initialises it at module level" in found[0]["message"]
    # Built before the check: the setting comes first and works.
    (root / "main.py").write_text(textwrap.dedent(MAIN_CHECKS_THEN_BUILDS).replace(
        "args.use_gpu = torch.cuda.is_available()\nexperiment = ExpBasic(args)\n",
        "experiment = ExpBasic(args)\nprint(torch.cuda.is_available())\n"))
    assert _lines(root, "TDL008") == []


MEMORY_BANK = """
import torch
import torch.nn as nn

class Sampler:
    def __init__(self, probs):
        self.prob = probs

    def cuda(self):
        self.prob = self.prob.cuda()

class MemoryBank(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.sampler = Sampler(torch.ones(size))
        self.sampler.cuda()
"""

GUARDS_ITS_MOVES = """
import torch
from memory import MemoryBank

def main():
    bank = MemoryBank(16)
    model = torch.nn.Linear(4, 2)
    if torch.cuda.is_available():
        model.cuda()
        bank.cuda()

if __name__ == "__main__":
    main()
"""


def test_a_script_moving_only_where_there_is_a_gpu_runs_its_imports_on_the_cpu(tmp_path: Path) -> None:
    root = _project(tmp_path, {"memory.py": MEMORY_BANK, "train.py": GUARDS_ITS_MOVES})
    assert _lines(root, "TDL007") == [("memory.py", "TDL007", 15)]
    # A script that also moves unguarded fails its CPU mode there first, and in what it
    # imports once that is mended: both are reported.
    (root / "train.py").write_text(textwrap.dedent(GUARDS_ITS_MOVES).replace(
        "    bank = MemoryBank(16)\n", "    bank = MemoryBank(16)\n    torch.zeros(1).cuda()\n"))
    assert sorted(_lines(root, "TDL007")) == [("memory.py", "TDL007", 15), ("train.py", "TDL007", 7)]
    # One that never moves under an availability check offers no CPU mode to what it imports.
    (root / "train.py").write_text(textwrap.dedent(GUARDS_ITS_MOVES).replace(
        "    if torch.cuda.is_available():\n        model.cuda()\n        bank.cuda()\n",
        "    model.cuda()\n    bank.cuda()\n"))
    assert _lines(root, "TDL007") == []
    # Nor one whose availability check stops the program where there is no GPU.
    (root / "train.py").write_text(textwrap.dedent(GUARDS_ITS_MOVES).replace(
        "    if torch.cuda.is_available():\n        model.cuda()\n        bank.cuda()\n",
        "    if torch.cuda.is_available():\n        model.cuda()\n        bank.cuda()\n"
        "    else:\n        raise SystemError('GPU device not found')\n"))
    assert _lines(root, "TDL007") == []


def _lines(root: Path, select: str) -> list[tuple[str, str, int]]:
    found = json.loads(run_cli("check", "--format", "json", "--select", select, ".", cwd=root).stdout)
    return [(item["path"], item["code"], item["line"]) for item in found]


def test_imports_are_read_from_the_text_relative_ones_from_the_package() -> None:
    from torchdevlint.project_scan import _imports

    source = b"""import os, sys as system
import a.b as c
from . import networks, blocks as b
from ..util import (io,
    visual)
    from .base_model import BaseModel
from x import *  # everything
"""
    assert _imports(source) == ("os", "sys", "a.b", ".networks", ".blocks", "..util", "..util.io",
                                "..util.visual", ".base_model", ".base_model.BaseModel", "x")


def _codes_selected(root: Path, codes: str) -> list[tuple[str, str]]:
    found = json.loads(run_cli("check", "--format", "json", "--select", codes, ".", cwd=root).stdout)
    return sorted((Path(item["path"]).name, item["code"]) for item in found)


# DataParallel over GPUs from the command line, the model moved to the current GPU (GPU 0).
TRAIN_ON_OPTION_GPUS = """
import argparse
import torch
import torch.nn as nn
import models

def train(args):
    model = nn.DataParallel(models.Net(), device_ids=args.gpus)
    model.cuda()
    return model

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
train(parser.parse_args())
"""

SELECTS_THE_FIRST_GPU = """
import torch
def select(args):
    torch.cuda.set_device(args.gpus[0])
"""


def test_option_device_ids_are_reported_unless_the_program_selects_a_gpu_elsewhere(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": TRAIN_ON_OPTION_GPUS, "models.py": "import torch.nn as nn\nNet = nn.Linear\n",
                               "tools/select.py": SELECTS_THE_FIRST_GPU})
    # A file that selects a GPU in no program of train.py's does not count.
    assert _codes(root) == [("train.py", "TDL012")]
    # Imported by the program's own model module, it does: the program then runs on args.gpus[0].
    (root / "models.py").write_text("import torch.nn as nn\nfrom tools import select\nNet = nn.Linear\n")
    forget()
    assert _codes(root) == []


TRAIN_SAVING_THE_WRAPPER = """
import torch
import torch.nn as nn
model = nn.DataParallel(nn.Linear(4, 2)).cuda()
torch.save({"state_dict": model.state_dict()}, "checkpoint.pth.tar")
"""

TEST_LOADING_INTO_A_WRAPPER = """
import torch
import torch.nn as nn
model = nn.Linear(4, 2)
model = torch.nn.DataParallel(model).cuda()
checkpoint = torch.load("checkpoint.pth.tar")
model.load_state_dict(checkpoint["state_dict"])
"""


def test_a_wrappers_state_dict_that_another_file_loads_into_a_wrapper_is_not_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": TRAIN_SAVING_THE_WRAPPER})
    assert ("train.py", "TDL004") in _codes(root)
    # The project's own evaluation script wraps the model before loading: the prefix is meant.
    (root / "test.py").write_text(textwrap.dedent(TEST_LOADING_INTO_A_WRAPPER).lstrip())
    forget()
    assert ("train.py", "TDL004") not in _codes(root)


HAND_MODEL = """
from collections import OrderedDict
import torch.nn as nn

def make_layers(spec):
    layers = [nn.Conv2d(cin, cout, 3, padding=1) for cin, cout in spec]
    return nn.Sequential(*layers)

class HandModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = make_layers([(3, 8), (8, 8)])

    def forward(self, x):
        return self.body(x)

class Wrapper(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)
"""

MEASURE_OUTPUT_SIZES = """
import torch
from src.model import HandModel, Wrapper

model = HandModel()
wrapped = Wrapper(model)
for size in range(10, 20):
    data = torch.randn(1, 3, size, size)
    if torch.cuda.is_available():
        data = data.cuda()
    print(model(data).size(2), wrapped(data).size(2))
"""


def test_a_model_class_of_another_file_is_built_on_the_cpu(tmp_path: Path) -> None:
    root = _project(tmp_path, {"src/model.py": HAND_MODEL, "src/__init__.py": "", "measure.py": MEASURE_OUTPUT_SIZES})
    # HandModel makes layers (through make_layers); Wrapper only holds what it is handed.
    found = json.loads(run_cli("check", "--format", "json", "measure.py", cwd=root).stdout)
    assert [(item["line"], item["code"]) for item in found] == [(10, "TDL034")]


DECODER_BASE = """
import torch.nn as nn

class DecoderBase(nn.Module):
    def __init__(self):
        super().__init__()

    def decode(self, x, z):
        raise NotImplementedError
"""

GREEDY_DECODER = """
import torch
import torch.nn as nn
from .base import DecoderBase
from .search import Hypothesis


class GreedyDecoder(DecoderBase):
    def __init__(self, args, vocab):
        super().__init__()
        self.vocab = vocab
        self.device = args.device
        self.embed = nn.Embedding(len(vocab), args.width)
        self.rnn = nn.GRU(args.width, args.width, batch_first=True)
        self.out = nn.Linear(args.width, len(vocab))

    def beam(self, start, width=4):
        hypotheses = [Hypothesis(torch.tensor([[start]], device=self.device), 0.0)]
        for _ in range(30):
            words = torch.cat([h.word for h in hypotheses], dim=0)
            scores, _ = self.rnn(self.embed(words))
            logits = self.out(scores).log_softmax(-1)
            so_far = torch.tensor([h.score for h in hypotheses], device=self.device)
            total = logits + so_far.view(-1, 1, 1)
            best, index = total.view(-1).topk(width)
            hypotheses = [Hypothesis(index[i:i + 1].view(1, 1) % len(self.vocab), best[i].item())
                          for i in range(width)]
        return hypotheses

    def greedy(self, start, end, count):
        words = torch.tensor([[start]] * count, device=self.device)
        stop = torch.tensor([end] * count, device=self.device)
        running = torch.ones(count, dtype=torch.bool, device=self.device)
        while running.any():
            scores, _ = self.rnn(self.embed(words))
            best = self.out(scores).squeeze(1).argmax(dim=1)
            running = running & (best != stop)
            words = best.unsqueeze(1)
        return words
"""


def test_a_model_whose_base_class_is_in_another_file_is_a_module(tmp_path: Path) -> None:
    # The layers of a Module go where its owner moves it; taken for a plain class, its layers
    # stayed on the host, and their output met the tensors it makes on `self.device`.
    root = _project(tmp_path, {"decoders/__init__.py": "", "decoders/base.py": DECODER_BASE,
                               "decoders/greedy.py": GREEDY_DECODER})
    found = json.loads(run_cli("check", "--format", "json", "decoders/greedy.py", cwd=root).stdout)
    assert found == []


BASE_MODEL = """
import torch

class BaseModel(torch.nn.Module):
    def initialize(self, opt):
        self.opt = opt
        self.gpu_ids = opt.gpu_ids
"""

COLOURISER_MODEL = """
import torch
import torch.nn as nn
from .base_model import BaseModel

class ColouriserModel(BaseModel):
    def initialize(self, opt):
        BaseModel.initialize(self, opt)
        self.net = nn.Conv2d(1, 3, 3, padding=1)
        if len(self.gpu_ids) > 0:
            self.net.cuda(self.gpu_ids[0])

    def forward(self, gray):
        gray = gray.cuda()
        return self.net(gray)
"""


def test_a_model_wrapper_on_another_files_base_keeps_the_programs_cpu_mode(tmp_path: Path) -> None:
    # ColouriserModel is a Module only through BaseModel of another file: its test of
    # self.gpu_ids is the program choosing the CPU (gpu_ids empty), so the unguarded
    # .cuda() in forward fails there; a layer's `if self.cuda:` would not be such a choice.
    root = _project(tmp_path, {"models/__init__.py": "", "models/base_model.py": BASE_MODEL,
                               "models/colouriser.py": COLOURISER_MODEL})
    found = json.loads(run_cli("check", "--format", "json", "models/colouriser.py", cwd=root).stdout)
    assert [(item["line"], item["code"]) for item in found] == [(13, "TDL007")]


EVALUATE_STRIPPING_THE_PREFIX = """
import torch
import torch.nn as nn

net = nn.Linear(8, 2)
saved = torch.load("net.pth", map_location="cpu")
bare = {}
for key, value in saved.items():
    if "module" in key:
        bare[key[7:]] = value
    else:
        bare[key] = value
net.load_state_dict(bare)
"""


def test_a_wrappers_state_dict_whose_prefix_another_file_strips_is_not_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": TRAIN_SAVING_THE_WRAPPER})
    assert ("train.py", "TDL004") in _codes(root)
    # The project's evaluation script takes the prefix off before loading: it is expected.
    (root / "evaluate.py").write_text(textwrap.dedent(EVALUATE_STRIPPING_THE_PREFIX).lstrip())
    forget()
    assert ("train.py", "TDL004") not in _codes(root)


DETECT_WITH_A_PREFIX_HELPER = """
import torch
import torch.nn as nn


def drop_prefix(state, prefix):
    return {(key[len(prefix):] if key.startswith(prefix) else key): value for key, value in state.items()}


net = nn.Linear(8, 2)
state = drop_prefix(torch.load("net.pth", map_location="cpu"), "module.")
net.load_state_dict(state)
"""


PREDICT_STRIPPING_ON_THE_CPU = """
import torch
import torch.nn as nn

net = nn.Linear(8, 2)
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
saved = torch.load("net.pth", map_location=device)
# Trained wrapped: keys start with the wrapper's prefix.
if "module" in next(iter(saved)):
    # On a GPU the model is wrapped as it was trained,
    # so the keys fit as they are.
    if device.type == "cuda":
        net = nn.DataParallel(net)
    else:
        # On the CPU the prefix goes.
        bare = {}
        for key, value in saved.items():
            bare[key[7:]] = value
        saved = bare
net.load_state_dict(saved)
"""


def test_a_prefix_stripped_further_down_from_its_test_is_seen(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": TRAIN_SAVING_THE_WRAPPER})
    (root / "predict.py").write_text(textwrap.dedent(PREDICT_STRIPPING_ON_THE_CPU).lstrip())
    forget()
    assert ("train.py", "TDL004") not in _codes(root)


def test_a_project_helper_called_with_the_prefix_strips_it(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": TRAIN_SAVING_THE_WRAPPER})
    assert ("train.py", "TDL004") in _codes(root)
    (root / "detect.py").write_text(textwrap.dedent(DETECT_WITH_A_PREFIX_HELPER).lstrip())
    forget()
    assert ("train.py", "TDL004") not in _codes(root)


CHECKPOINT_HELPERS = """
import torch


def save_checkpoint(epoch, model, folder):
    torch.save({"epoch": epoch, "weights": model.state_dict()}, f"{folder}/last.pth")


def save_unwrapped(model, folder):
    bare = getattr(model, "module", model)
    torch.save(bare.state_dict(), f"{folder}/bare.pth")


class KeepBest:
    def __init__(self):
        self.best = float("inf")

    def __call__(self, model, loss, folder):
        if loss < self.best:
            self.best = loss
            torch.save(model.state_dict(), f"{folder}/best.pth")
"""

DISTRIBUTED_TRAINING = """
import argparse
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from helpers.checkpoints import KeepBest, save_checkpoint, save_unwrapped

parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
parser.add_argument("--local-rank", type=int, default=0)
args = parser.parse_args()


def main():
    model = nn.Linear(8, 2).cuda()
    if args.distributed:
        torch.distributed.init_process_group("nccl")
        model = DDP(model, device_ids=[args.local_rank])
    keep_best = KeepBest()
    for epoch in range(3):
        loss = model(torch.randn(4, 8).cuda()).pow(2).mean()
        save_checkpoint(epoch, model, "runs")
        save_unwrapped(model, "runs")
        keep_best(model, loss.item(), "runs")


main()
"""


def test_a_helper_saving_the_state_dict_of_a_model_another_file_wraps(tmp_path: Path) -> None:
    # train.py hands the DDP-wrapped model to the helpers: the ones that save its state_dict()
    # as handed write 'module.' keys; the one that unwraps it first does not.
    root = _project(tmp_path, {"helpers/__init__.py": "", "helpers/checkpoints.py": CHECKPOINT_HELPERS,
                               "train.py": DISTRIBUTED_TRAINING})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL004", "helpers/checkpoints.py",
                               cwd=root).stdout)
    assert [(item["line"], item["code"]) for item in found] == [(5, "TDL004"), (20, "TDL004")]
    assert all("train.py" in item["message"] for item in found)


TINY_VAE = """
import torch.nn as nn


class TinyVAE(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.encode = nn.Linear(width, 4)
        self.decode = nn.Linear(4, width)

    def forward(self, x):
        return self.decode(self.encode(x))
"""

FIT_THE_REEXPORTED_MODEL = """
import torch
from models import TinyVAE

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = TinyVAE(16)
optimizer = torch.optim.Adam(model.parameters())
for step in range(10):
    batch = torch.randn(8, 16).to(device)
    loss = (model(batch) - batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_model_class_a_package_re_exports_is_known_by_its_name(tmp_path: Path) -> None:
    # `from models import TinyVAE`: models/__init__.py re-exports it from models/vae.py, the
    # one file of the project that defines a class so named.
    root = _project(tmp_path, {"models/__init__.py": "from .vae import TinyVAE\n", "models/vae.py": TINY_VAE,
                               "fit.py": FIT_THE_REEXPORTED_MODEL})
    found = json.loads(run_cli("check", "--format", "json", "fit.py", cwd=root).stdout)
    assert [(item["line"], item["code"]) for item in found] == [(9, "TDL034")]


SETTINGS = """
cuda = True
multi_gpu = False
"""

TRAIN_WRAPPING_ON_A_SETTING = """
import torch
import torch.nn as nn
import settings


class Recogniser(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)


model = Recogniser()
if settings.cuda and torch.cuda.is_available():
    model = model.cuda()
    if settings.multi_gpu:
        model = nn.DataParallel(model)
for epoch in range(3):
    torch.save(model.state_dict(), "recogniser.pth")
"""

DEMO_WRAPPING_ON_THE_SAME_SETTING = """
import torch
import torch.nn as nn
import settings
from train import Recogniser

model = Recogniser()
if settings.multi_gpu:
    model = nn.DataParallel(model)
model.load_state_dict(torch.load("recogniser.pth", map_location="cpu"))
"""


def _fixes(root: Path, code: str) -> list[str | None]:
    found = json.loads(run_cli("check", "--format", "json", "--unsafe-fixes", ".", cwd=root).stdout)
    return [item["fix"] and item["fix"]["applicability"] for item in found if item["code"] == code]


def test_no_fix_unwraps_a_save_whose_keys_another_files_load_expects_under_the_same_setting(tmp_path: Path) -> None:
    root = _project(tmp_path, {"settings.py": SETTINGS, "train.py": TRAIN_WRAPPING_ON_A_SETTING})
    assert _fixes(root, "TDL004") == ["safe"]
    # The demo wraps under the same setting before it loads: unwrapping the save would break
    # the demo's multi-GPU load, and the fix cannot edit the demo.
    (root / "demo.py").write_text(textwrap.dedent(DEMO_WRAPPING_ON_THE_SAME_SETTING).lstrip())
    forget()
    assert _fixes(root, "TDL004") == [None]
    # Under another setting the demo's load is bare where the save is: the fix stays.
    (root / "demo.py").write_text(textwrap.dedent(DEMO_WRAPPING_ON_THE_SAME_SETTING).lstrip().replace(
        "settings.multi_gpu", "settings.distributed"))
    forget()
    assert _fixes(root, "TDL004") == ["safe"]


EXAMPLES_CACHED_BESIDE_A_GPU_MODEL = """
import os
import torch

data_dir = "data/squad/"
examples_path = data_dir + "train_examples.pt"
if os.path.exists(examples_path):
    examples = torch.load(examples_path)
else:
    examples = read_examples("train.jsonl")
    torch.save(examples, examples_path)
model = build(examples).cuda()
torch.save(model.state_dict(), data_dir + "model.pt")
"""


def test_examples_saved_to_a_path_joined_with_a_plus_are_host_data(tmp_path: Path) -> None:
    root = _project(tmp_path, {"prepare.py": EXAMPLES_CACHED_BESIDE_A_GPU_MODEL})
    writing = checkpoint_writing(str(root / "prepare.py"))
    assert writing is not None and writing.writes_device_checkpoints
    assert writing.file_names(path_target_of_code("examples_path")) == {"train_examples.pt"}
    assert not writing.may_hold_device_tensors(frozenset({"train_examples.pt"}))
    assert writing.may_hold_device_tensors(frozenset({"model.pt"}))
    assert _codes(root) == []


SAVE_EACH_NETWORK = """
import torch


def save_checkpoint(folder, encoder_state, decoder_state, filename="checkpoint.pth.tar"):
    for prefix, state in zip(["encoder", "decoder"], [encoder_state, decoder_state]):
        torch.save(state, f"{folder}/{prefix}_{filename}")
"""

TRAIN_ON_THE_DEVICE = """
import torch
from utils import save_checkpoint

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
encoder, decoder = build_encoder().to(device), build_decoder().to(device)
save_checkpoint("runs", {"state_dict": encoder.state_dict()}, {"state_dict": decoder.state_dict()})
"""

INFER = """
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
encoder = build_encoder().to(device)
weights = torch.load(args.pretrained)
encoder.load_state_dict(weights["state_dict"])
"""


def test_a_helper_saving_what_its_loop_takes_from_its_parameters_writes_device_checkpoints(tmp_path: Path) -> None:
    root = _project(tmp_path, {"utils.py": SAVE_EACH_NETWORK, "train.py": TRAIN_ON_THE_DEVICE, "infer.py": INFER})
    writing = checkpoint_writing(str(root / "infer.py"))
    assert writing is not None and writing.writes_device_checkpoints
    assert _codes(root) == [("infer.py", "TDL003")]


POLICY_NETWORKS = """
import torch
import torch.nn as nn


class RecurrentPolicy(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(4, hidden)
        self.hidden = hidden

    def initial_state(self):
        return torch.zeros(1, 1, self.hidden).cuda(), torch.zeros(1, 1, self.hidden).cuda()
"""

SCRIPT_FALLING_BACK = """
import torch
from policy_networks import RecurrentPolicy

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
policy = RecurrentPolicy(32).to(device)
state = policy.initial_state()
"""

HELPER_WITH_ITS_OWN_RUN = """
import torch
from policy_networks import RecurrentPolicy


def evaluate(policy):
    return policy.initial_state()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(evaluate(RecurrentPolicy(8).to(device)))
"""

GPU_ONLY_SCRIPT = """
import torch
from evaluation import evaluate
from policy_networks import RecurrentPolicy

policy = RecurrentPolicy(32).cuda()
evaluate(policy)
"""


def test_a_module_imported_by_a_script_with_a_cpu_fallback_device_takes_its_cpu_mode(tmp_path: Path) -> None:
    root = _project(tmp_path, {"policy_networks.py": POLICY_NETWORKS, "sac_lstm.py": SCRIPT_FALLING_BACK})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL007", ".", cwd=root).stdout)
    assert [(Path(item["path"]).name, item["line"]) for item in found] == [("policy_networks.py", 12)] * 2
    assert "device choice at sac_lstm.py:4 falls back to the CPU" in found[0]["message"]


def test_a_modules_own_demo_takes_no_cpu_mode_from_the_scripts_importing_it(tmp_path: Path) -> None:
    # The demo under the main guard runs when the module is the script, never in sac_lstm.py's
    # run: only the method that run calls is reported.
    demo = POLICY_NETWORKS + """

if __name__ == "__main__":
    policy = RecurrentPolicy(8).cuda()
    print(policy.initial_state())
"""
    root = _project(tmp_path, {"policy_networks.py": demo, "sac_lstm.py": SCRIPT_FALLING_BACK})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL007", ".", cwd=root).stdout)
    assert [(Path(item["path"]).name, item["line"]) for item in found] == [("policy_networks.py", 12)] * 2


def test_a_fallback_under_a_main_guard_is_no_cpu_mode_of_the_scripts_importing_the_file(tmp_path: Path) -> None:
    root = _project(tmp_path, {"policy_networks.py": POLICY_NETWORKS, "evaluation.py": HELPER_WITH_ITS_OWN_RUN,
                               "gpu_only.py": GPU_ONLY_SCRIPT})
    found = json.loads(run_cli("check", "--format", "json", "--select", "TDL007", ".", cwd=root).stdout)
    # evaluation.py runs policy_networks.py in its own run, which falls back to the CPU; the
    # GPU-only script importing evaluation.py for its helper takes no CPU mode from it.
    assert sorted({Path(item["path"]).name for item in found}) == ["policy_networks.py"]
    assert all("evaluation.py" in item["message"] for item in found)


LAUNCHER_SETTING_THE_DEFAULT = """
import torch


def run(train, no_cuda=False):
    if not no_cuda:
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
    train()
"""

STYLE_NETWORK = """
import torch
import torch.nn as nn


class NoiseBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        noise = torch.randn(x.shape[0], 1, x.shape[2], x.shape[3])
        return x + self.weight.view(1, -1, 1, 1) * noise
"""

TRAIN_THROUGH_THE_LAUNCHER = """
from launcher import run
from net import NoiseBlock


def train():
    print(NoiseBlock(8))


run(train)
"""


def test_factories_in_a_program_whose_launcher_sets_a_cuda_default_follow_the_default(tmp_path: Path) -> None:
    root = _project(tmp_path, {"net.py": STYLE_NETWORK})
    assert _codes(root) == [("net.py", "TDL002")]
    for name, text in (("launcher.py", LAUNCHER_SETTING_THE_DEFAULT), ("train_style.py", TRAIN_THROUGH_THE_LAUNCHER)):
        (root / name).write_text(textwrap.dedent(text).lstrip())
    forget()
    assert _codes(root) == []


# Resumes from one of the project's checkpoints for its config, then picks the GPUs.
RESUME_THEN_PICK_GPUS = """
import os
import sys
import torch
settings = {"lr": 0.1}
if len(sys.argv) > 2:
    settings = torch.load(sys.argv[2])["settings"]
os.environ["CUDA_VISIBLE_DEVICES"] = sys.argv[1]
print(settings)
"""


def test_a_gpu_checkpoint_loaded_before_the_gpus_are_picked_has_started_cuda(tmp_path: Path) -> None:
    # Unpickling the GPU weights beside the settings starts CUDA: the GPUs picked after it
    # are ignored. Without a save of GPU tensors in the project, the load is no sign of that.
    root = _project(tmp_path, {"resume.py": RESUME_THEN_PICK_GPUS, "train.py": GPU_TRAINING})
    assert ("resume.py", "TDL008") in _codes(root)
    (root / "train.py").write_text(textwrap.dedent(CONVERSION).lstrip())
    forget()
    assert ("resume.py", "TDL008") not in _codes(root)


PLOTS = """
import matplotlib.pyplot as plt


def scatter(points, title=""):
    points = points.numpy()
    plt.scatter(points[:, 0], points[:, 1])
    plt.title(title)


def outline(points):
    points = points.cpu()
    plt.plot(points.numpy()[:, 0], points.numpy()[:, 1])
"""

STRETCH = """
import torch
from plots import outline, scatter

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
points = torch.randn(100, 2).to(device)
scatter(points, "before")
stretched = points @ torch.tensor([[2.0, 0.0], [0.0, 0.5]], device=device)
scatter(stretched.cpu(), title="after")
scatter(title="again", points=stretched)
outline(stretched)
"""


def test_a_device_tensor_handed_to_a_project_helper_that_calls_numpy_on_it(tmp_path: Path) -> None:
    root = _project(tmp_path, {"plots.py": PLOTS, "stretch.py": STRETCH})
    found = json.loads(run_cli("check", "--format", "json", "stretch.py", cwd=root).stdout)
    assert [(item["line"], item["code"]) for item in found] == [(6, "TDL006"), (9, "TDL006")]
    assert found[0]["message"].startswith("scatter() calls .numpy() on this tensor")
    assert found[0]["fix"]["applicability"] == "unsafe"


CHECKPOINT_HELPER = """
import os
import torch

def save_checkpoint(states, is_best, output_dir, filename="checkpoint.pth.tar"):
    torch.save(states, os.path.join(output_dir, filename))
    if is_best and "state_dict" in states:
        torch.save(states["state_dict"], os.path.join(output_dir, "model_best.pth.tar"))
"""

TRAINS_WRAPPED_SAVES_THROUGH_THE_HELPER = """
import torch
from torch import nn
from utils.checkpoints import save_checkpoint

def main(net, gpus, epochs, output_dir):
    model = nn.DataParallel(net, device_ids=gpus).cuda()
    for epoch in range(epochs):
        save_checkpoint({
            "epoch": epoch + 1,
            "state_dict": model.state_dict(),
        }, epoch == epochs - 1, output_dir)
"""

# The evaluation script loads the best weights into the bare model, and wraps it afterwards.
VALIDATES_BARE = """
import torch
from torch import nn

def main(net, gpus, weights):
    net.load_state_dict(torch.load(weights))
    model = nn.DataParallel(net, device_ids=gpus).cuda()
    return model
"""


def test_a_wrapped_state_dict_handed_to_another_files_saver_is_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, {"utils/__init__.py": "", "utils/checkpoints.py": CHECKPOINT_HELPER,
                               "train.py": TRAINS_WRAPPED_SAVES_THROUGH_THE_HELPER, "valid.py": VALIDATES_BARE})
    assert ("train.py", "TDL004", 10) in _lines(root, "TDL004")
    # Where the project's reader loads into the wrapper, the prefixed keys are what it expects.
    (root / "valid.py").write_text(textwrap.dedent(VALIDATES_BARE).replace(
        "    net.load_state_dict(torch.load(weights))\n    model = nn.DataParallel(net, device_ids=gpus).cuda()\n",
        "    model = nn.DataParallel(net, device_ids=gpus).cuda()\n    model.load_state_dict(torch.load(weights))\n"))
    assert _lines(root, "TDL004") == []
    # Unwrapped before it is handed: nothing to report.
    (root / "valid.py").write_text(textwrap.dedent(VALIDATES_BARE))
    (root / "train.py").write_text(textwrap.dedent(TRAINS_WRAPPED_SAVES_THROUGH_THE_HELPER).replace(
        "model.state_dict()", "model.module.state_dict()"))
    assert _lines(root, "TDL004") == []


def test_a_repository_copied_without_git_is_one_project(tmp_path: Path) -> None:
    from torchdevlint.project_scan import _root_of

    # A GitHub zip: scripts in one folder, their library in another, the README above both.
    repository = tmp_path / "pose"
    for name in ("README.md", "requirements.txt", "lib/utils/checkpoints.py", "scripts/train.py"):
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        (repository / name).write_text("")
    assert _root_of(repository / "scripts") == repository
    # A folder of such copies with its own README: each copy is its own project.
    (tmp_path / "README.md").write_text("")
    other = tmp_path / "tutorial"
    for name in ("README.md", "train.py"):
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        (other / name).write_text("")
    assert _root_of(other) == other
    assert _root_of(repository / "scripts") == repository


SAVES_HOST_COPIES_OF_ITS_WEIGHTS = """
import torch
from torch import nn

decoder = nn.Linear(4, 4).cuda()
for step in range(10):
    if step % 5 == 4:
        state_dict = decoder.state_dict()
        for key in state_dict.keys():
            state_dict[key] = state_dict[key].to(torch.device("cpu"))
        torch.save(state_dict, "decoder_iter_{:d}.pth".format(step + 1))
"""

LOADS_THE_DECODER = """
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
decoder = nn.Linear(4, 4)
decoder.load_state_dict(torch.load("decoder_iter_10.pth"))
decoder.to(device)
"""


def test_a_state_dict_whose_entries_are_copied_to_the_host_is_a_host_checkpoint(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": SAVES_HOST_COPIES_OF_ITS_WEIGHTS, "test.py": LOADS_THE_DECODER})
    assert _codes(root, "test.py") == []
    writing = checkpoint_writing(str(root / "test.py"))
    assert writing is not None and not writing.device_saves
    # Saved as it is, on the GPU: the load is reported.
    (root / "train.py").write_text(textwrap.dedent(SAVES_HOST_COPIES_OF_ITS_WEIGHTS).replace(
        '            state_dict[key] = state_dict[key].to(torch.device("cpu"))\n', "            pass\n"))
    assert _codes(root, "test.py") == [("test.py", "TDL003")]


SAVES_THE_WRAPPED_MODEL = """
import torch
from torch.nn import DataParallel

def save_model(model, path):
    torch.save(model.state_dict(), path)

if __name__ == "__main__":
    model = DataParallel(torch.nn.Linear(4, 4)).cuda()
    save_model(model, "face.pth")
"""

TESTS_IN_A_MAIN_GUARD = """
import torch
from torch.nn import DataParallel

if __name__ == "__main__":
    model = torch.nn.Linear(4, 4)
    model = DataParallel(model)
    model.load_state_dict(torch.load("face.pth"))
"""


def test_a_wrapped_load_in_a_main_guard_makes_prefixed_checkpoints_the_projects_format(tmp_path: Path) -> None:
    root = _project(tmp_path, {"train.py": SAVES_THE_WRAPPED_MODEL, "test.py": TESTS_IN_A_MAIN_GUARD})
    assert ("train.py", "TDL004") not in _codes(root)
    (root / "test.py").write_text(textwrap.dedent(TESTS_IN_A_MAIN_GUARD).replace("    model = DataParallel(model)\n", ""))
    assert ("train.py", "TDL004") in _codes(root)


SAMPLES_ON_THE_GPU = """
import torch
from torch import nn

def sample(generator, n, device):
    return generator(torch.randn(n, 8).to(device))

if __name__ == "__main__":
    device = "cuda"
    generator = nn.Linear(8, 8).to(device)
    generator.load_state_dict(torch.load("checkpoint/train_step-7.model"))
    print(sample(generator, 4, device))
"""

PREDICTS_WITH_A_FALLBACK = """
import torch
from torch import nn
from generate import sample

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
generator = nn.Linear(8, 8).to(device)
print(sample(generator, 2, device))
"""

TRAINS_ON_THE_GPU = """
import torch
from torch import nn

model = nn.Linear(8, 8).cuda()
torch.save(model.state_dict(), "checkpoint/train_step-7.model")
"""


def test_a_scripts_own_gpu_only_run_is_not_the_cpu_mode_of_a_program_importing_its_helpers(tmp_path: Path) -> None:
    root = _project(tmp_path, {"generate.py": SAMPLES_ON_THE_GPU, "predict.py": PREDICTS_WITH_A_FALLBACK,
                               "train.py": TRAINS_ON_THE_GPU})
    assert _lines(root, "TDL003") == []
    # The same load outside the main guard runs in the importing program's CPU mode.
    (root / "generate.py").write_text(textwrap.dedent(SAMPLES_ON_THE_GPU).replace(
        'if __name__ == "__main__":\n', "def main():\n"))
    assert [(path, code) for path, code, _ in _lines(root, "TDL003")] == [("generate.py", "TDL003")]


MOVES_WHAT_IT_IS_HANDED_IN_A_LOOP = """
def to_device(device, *modules):
    return [module.to(device) for module in modules]
"""

TRAINS_A_POLICY = """
import torch
from torch import nn
from utils import *

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
policy = nn.Linear(4, 2)
to_device(device, policy)
for step in range(3):
    states = torch.randn(8, 4).to(device)
    actions = policy(states)
"""


def test_a_helper_moving_each_module_it_is_handed_moves_the_model(tmp_path: Path) -> None:
    root = _project(tmp_path, {"utils.py": MOVES_WHAT_IT_IS_HANDED_IN_A_LOOP, "train.py": TRAINS_A_POLICY})
    assert _lines(root, "TDL034") == []
    (root / "utils.py").write_text("def to_device(device, *modules):\n    return list(modules)\n")
    assert [(path, code) for path, code, _ in _lines(root, "TDL034")] == [("train.py", "TDL034")]
