"""TDL003 load-without-map-location."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.cuda_uses import CudaProgram
from torchdevlint.analysis.flow.results import FixAgreement
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.analysis.local_names import function_bindings, target_names
from torchdevlint.analysis.test_code import is_test_code
from torchdevlint.analysis.tree import child_nodes, under_main_guard
from torchdevlint.analysis.value_uses import assigned_values
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import CUDA_CHECKPOINT_ON_CPU_HOST, RuntimeProof

_DEVICE_NAME = re.compile(r"[a-z][a-z0-9_]*(:[0-9]+)?")


@dataclass(frozen=True)
class LoadOptions:
    # What the fix passes when no device variable is in scope.
    map_location: str = "cpu"
    # A test loads what it has just saved, on the same machine: not reported by default.
    include_tests: bool = False
    # Also report loads in a project whose own code writes no GPU checkpoint.
    include_outside_checkpoints: bool = False

    def __post_init__(self) -> None:
        # It is written into the fix as a string literal: a device name, nothing to escape.
        if not isinstance(self.map_location, str) or not _DEVICE_NAME.fullmatch(self.map_location):
            raise ValueError(f"map-location must name a device, such as \"cpu\" or \"cuda:0\" "
                             f"(got {self.map_location!r})")
        if not isinstance(self.include_tests, bool):
            raise ValueError("include-tests must be true or false")
        if not isinstance(self.include_outside_checkpoints, bool):
            raise ValueError("include-outside-checkpoints must be true or false")


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

    ## Not reported
    Not reported where the program reads what it loaded as host data, `.numpy()` on a name
    the load bound (`image, label = torch.load(path)`, then `image.numpy()`): `.numpy()`
    refuses a GPU tensor, so the file holds host tensors. Nor a learning-rate scheduler's
    state loaded into it (`scheduler.load_state_dict(torch.load(path))`, `scheduler` made by
    `torch.optim.lr_scheduler`): it holds numbers, no tensors.
    Nor when the same run of the program wrote the file earlier: a script
    that saves its best weights during training and reloads them to evaluate, or a notebook
    cell that reads what an earlier cell saved. The saving device is then the loading one.
    The save and the load must name the same file (the same literal, constant, `args.save`
    attribute, or `os.path.join` of those; or one module-level name assigned once, in no loop,
    whatever folder it joins; or a parameter the function never rebinds, within one call; or
    a file a glob lists, `sorted(glob.glob(os.path.join("ckpt", "*.pt")))[-1]`, where the
    saved path matches the glob, `f"ckpt/epoch_{epoch}.pt"` saved in the loop), and
    the save must run first: earlier in the same
    body, in a same-file function called earlier, or before every call of the function that
    loads. A resume that loads before the script saves anything is still reported. Nor a
    cache the program builds where it is missing (`if os.path.exists(path): corpus =
    torch.load(path)` with `else:` building it and saving it to that path): whichever machine
    reads it wrote it. Weights loaded so straight into a model (`net.load_state_dict(
    torch.load(path))`, trained and saved on the other side) are still reported: a
    checkpoint travels between machines as a cache does not. Nor a load after a call, earlier in the same body, of a function or
    class of another file of the project that saves a file of the name the load reads (an
    `EarlyStopping` instance saving `path + '/' + 'checkpoint.pth'`, called each epoch, and
    the best checkpoint reloaded after the loop).

    Nor loads the CPU mode does not reach, such as one in the branch a `--cuda` setting takes
    (`if args.cuda: model = torch.load(f)`): they run only where the program has chosen the
    GPU.

    Nor in a program that says it cannot run without a GPU: `assert torch.cuda.is_available()`,
    a module-level `if not torch.cuda.is_available(): sys.exit(...)`, or an NCCL process group
    set up whatever its settings. It stops on a machine without a GPU before its loads matter.
    Nor in a program that hard-codes CUDA with no CPU mode at all (which TDL203 reports), in one
    process (no `torch.distributed`): it runs only on a GPU machine, where a checkpoint saved
    on the first GPU loads, and on a machine without one it fails at its first CUDA use
    anyway. Once TDL203's fix gives the program a CPU mode, its loads are reported too. A
    distributed program's loads are still reported: each of its processes would put the
    checkpoint on the saving process's GPU. So for a file's own run as a script: a load under
    its main guard, where the guard's code hard-codes CUDA, is not reported because another
    program that imports the file for its helpers has a CPU mode (`predict.py` importing
    `sample` from a GPU-only `generate.py`): that program never runs the guard.

    Nor in a project none of whose code writes a checkpoint that may hold GPU tensors, unless
    `include-outside-checkpoints` is set. The project is the closest folder above the file
    holding `.git`, `pyproject.toml`, `setup.py` or `setup.cfg` (without one, the folders of
    code around the file, or the folder above them that holds a repository's `README`,
    `LICENSE`, `requirements.txt` or `.gitignore`, as a GitHub zip does), and each of its Python files and notebooks is read for `torch.save`.
    A save may hold GPU tensors where its file names an accelerator or a device anywhere, or
    where it saves what its function was handed (a trainer saving `self.model`) in a project
    that names one; not where what it saves passed through `.cpu()` (`net.cpu().state_dict()`), or had each entry
    copied to the host first (`state_dict[key] = state_dict[key].to(torch.device("cpu"))`). Where no save may, or there is none, the files the project loads were
    written elsewhere (released weights, another framework's weights converted on the CPU),
    and nothing in the code says what device saved them. Saves in test code do not count. Code
    that is not in a file on disk (standard input without `--stdin-filename`) is reported as
    before.

    Nor a load of a file that, by its name, none of those saves wrote. The name is read from
    the load's path (`"vocab.pt"`, `os.path.join(root, "model.pth")`, `folder / "x.pt"`) or,
    for a name (`args.weights`, `opt.pretrained_path`, `res152_path`), from the paths the
    project gives it: string assignments, `os.path.join(...)` with a literal file name, and
    options' defaults (`add_argument("--weights", default="model.pth")`). Not reported where
    every save of the project that writes a file of that name saves host data (a `.cpu()`
    copy, a vocabulary or the program's options: `torch.save((vocab_src, vocab_tgt),
    "vocab.pt")`, weights converted in a script that names no accelerator); nor where no save
    writes it and the name says it was made elsewhere: torch.hub's published weights, named
    with a prefix of their hash (`resnet152-b121ed2d.pth`), and weights converted from another
    framework's (`vgg16-caffe.pth`).

    Also not reported, unless `include-tests` is set: loads in test code as pytest collects
    it (`conftest.py`, modules that import pytest or unittest, and files named `test_*.py`
    or `*_test.py` that define `test*` functions or `Test*` classes), which reads back
    checkpoints the test itself wrote on the same machine. A script's own `test()` or `test_voc()` function is not test code: an
    evaluation script loads checkpoints written elsewhere.

    ## Fix safety
    The fix adds `map_location=`. What goes into `load_state_dict` (directly, or as an item
    of the loaded checkpoint) is mapped to the configured location (`"cpu"`):
    `load_state_dict` copies each value onto the model's own device, and mapping the weights
    to the GPU first would hold a second copy of them there. A whole model, or tensors used
    as they are, are mapped to the device variable in scope (a name containing "device"
    bound to a `torch.device` or a device string), or else to the configured location, but
    only with evidence that the program does not rely on the load's own device: the flow model
    shows that choice agrees with how the program uses it, the load is read on the host at
    once (`torch.load(path).numpy()`), the name it is bound to is moved later in the same body
    (`model.cuda()`), or the file names no accelerator at all. A pickled model mapped to the
    CPU that a GPU run then feeds GPU data, never moving it, would break that run. When the loaded object is assigned and then used, the device-flow model
    checks each choice: one under which the loaded object then meets only data on that same
    device (a whole pickled model fed inputs moved to `device`) is chosen, and the fix is
    safe. A choice under which it would meet data elsewhere (a model mapped to the CPU fed
    CUDA inputs) is never offered; when every choice would, the finding has no fix.

    Loading straight into `load_state_dict(...)` is also safe: it copies the values onto the
    model's own device anyway. Otherwise the fix is unsafe: code after the load may rely on
    tensors (an optimizer state, say) being restored on the GPU.

    The fix adds `map_location` only. It never touches `weights_only`, whose default changed
    in PyTorch 2.6: setting it changes what a checkpoint may contain.

    ## Options
    - `map-location` (default `"cpu"`): the location the fix uses when no device variable is
      in scope.
    - `include-tests` (default `false`): also report loads in test code.
    - `include-outside-checkpoints` (default `false`): also report loads in a project whose
      own code writes no checkpoint that may hold GPU tensors.
    """

    code = "TDL003"
    slug = "load-without-map-location"
    message = "torch.load without map_location fails where the saving device is absent"
    fix_title = "Pass map_location"
    proof = RuntimeProof(CUDA_CHECKPOINT_ON_CPU_HOST, host="cpu-loads-gpu-checkpoint", fix_agrees_on=("gpu",))
    requires_any_text = ("load",)
    reads_the_project = True
    Options = LoadOptions
    options: LoadOptions

    VALID = [
        Valid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max")
            torch.save(model.state_dict(), "model.pt")
            scheduler.load_state_dict(torch.load("saved/scheduler.pt"))
            """,
            name="a-learning-rate-scheduler-s-state-holds-no-tensors",
        ),
        Valid(
            """
            import hashlib
            import os
            import torch

            cache = "features.{}.pt".format(hashlib.md5(b"train").hexdigest())
            if os.path.exists(cache):
                features = torch.load(cache)
            else:
                features = extract(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                torch.save(features, cache)
            """,
            name="a-cache-built-where-missing",
        ),
        Valid(
            """
            import torch

            class LRFinder:
                def __init__(self, model, optimizer):
                    self.model, self.optimizer = model, optimizer
                    # Kept to restore the initial weights after the test, in this run.
                    torch.save(model.state_dict(), "init_params.pt")

                def range_test(self, batches):
                    for inputs, targets in batches:
                        self.optimizer.zero_grad()
                    self.model.load_state_dict(torch.load("init_params.pt"))

            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = build().to(device)
            LRFinder(model, torch.optim.SGD(model.parameters(), lr=1e-7)).range_test(loader)
            """,
            name="initial-weights-a-class-saves-in-its-constructor",
        ),
        Valid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action="store_true")
            args = parser.parse_args()
            with open("model.pt", "rb") as f:
                if args.cuda:
                    model = torch.load(f)
                else:
                    model = torch.load(f, map_location=lambda storage, location: storage)
            """,
            name="a-load-only-the-gpu-branch-runs",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            assert torch.cuda.is_available(), "this script needs a GPU"
            model = nn.Linear(8, 2).cuda()
            model.load_state_dict(torch.load("checkpoint.pth"))
            print(model(torch.randn(4, 8).cuda()).argmax(1))
            """,
            name="a-program-that-needs-a-gpu",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            encoder = nn.Linear(8, 2).cuda()
            try:
                encoder.load_state_dict(torch.load("encoder.pkl"))
            except FileNotFoundError:
                pass
            for step in range(100):
                encoder(torch.randn(4, 8).cuda()).sum().backward()
            torch.save(encoder.state_dict(), "encoder.pkl")
            """,
            name="a-cuda-only-program-resuming-from-what-it-saves",
        ),
        Valid(
            """
            import torch
            from pathlib import Path
            model = torch.nn.Linear(2, 2)
            MODEL_DIR = Path("models")
            MODEL_NAME = "linear_0.pth"
            MODEL_PATH = MODEL_DIR / MODEL_NAME
            torch.save(obj=model.state_dict(), f=MODEL_PATH)
            model.load_state_dict(torch.load(f=MODEL_PATH))
            # A notebook's next model rebinds the names: each load reads the binding before it.
            MODEL_NAME = "linear_1.pth"
            MODEL_PATH = MODEL_DIR / MODEL_NAME
            torch.save(model.state_dict(), MODEL_PATH)
            model.load_state_dict(torch.load(MODEL_PATH))
            """,
            name="notebook-round-trips-with-names-rebound-per-model",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(4, 2)
            torch.save({"state_dict": model.state_dict(), "size": 4}, "checkpoint.pth")
            def load_checkpoint(filepath):
                checkpoint = torch.load(filepath)
                restored = nn.Linear(checkpoint["size"], 2)
                restored.load_state_dict(checkpoint["state_dict"])
                return restored
            model = load_checkpoint("checkpoint.pth")
            """,
            name="a-helper-loading-the-file-each-of-its-calls-saved-before",
        ),
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
            import pytest
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
        Valid(
            """
            import torch
            import torch.nn as nn

            BEST = "./classifier.pth"
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(8, 2).to(device)
            best_loss = float("inf")
            for epoch in range(10):
                loss = train_one_epoch(net)
                if loss < best_loss:
                    best_loss = loss
                    torch.save(net.state_dict(), BEST)

            net.load_state_dict(torch.load(BEST))
            """,
            name="reloads-what-this-run-saved",
        ),
        Valid(
            """
            import os
            import torch

            def fit(model, args):
                for epoch in range(args.epochs):
                    step(model)
                    torch.save(model, os.path.join(args.out, "last.pt"))

            def main(args):
                model = build(args)
                fit(model, args)
                with open(os.path.join(args.out, "last.pt"), "rb") as handle:
                    model = torch.load(handle, weights_only=False)
                return evaluate(model)
            """,
            name="saved-by-a-helper-called-earlier",
        ),
        Valid(
            """
            import os
            import torch

            class Digits:
                def __init__(self, root, download=False):
                    self.root = root
                    if download:
                        self.download()
                    self.data, self.labels = torch.load(os.path.join(self.root, "train.pt"))

                def download(self):
                    with open(os.path.join(self.root, "train.pt"), "wb") as f:
                        torch.save(fetch_split("train"), f)
                    with open(os.path.join(self.root, "test.pt"), "wb") as f:
                        torch.save(fetch_split("test"), f)
            """,
            name="written-by-a-method-defined-below",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Trainer:
                def __init__(self, model):
                    self.model = model
                def save_checkpoint(self, filename):
                    torch.save({"model": self.model.state_dict()}, filename)
                def load_checkpoint(self, filename):
                    checkpoint = torch.load(filename)
                    self.model.load_state_dict(checkpoint["model"])
            trainer = Trainer(nn.Linear(2, 2))
            trainer.save_checkpoint("model_checkpoint.pth")
            resumed = Trainer(nn.Linear(2, 2))
            resumed.load_checkpoint("model_checkpoint.pth")
            """,
            name="methods-that-save-and-reload-a-checkpoint-in-one-session",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(8, 2)
            best_loss, best_epoch = float("inf"), 0
            for epoch in range(10):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                torch.save(model.state_dict(), "snapshot_{}.pkl".format(epoch))
                if loss.item() < best_loss:
                    best_loss, best_epoch = loss.item(), epoch
            model.load_state_dict(torch.load("snapshot_{}.pkl".format(best_epoch)))
            """,
            name="the-best-of-the-snapshots-this-run-saved",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(8, 2).to(device)
            epochs = 5
            for epoch in range(1, epochs + 1):
                loss = model(torch.randn(4, 8, device=device)).pow(2).mean()
                torch.save(model.state_dict(), "linear_epoch%02d_%s.pt" % (epoch, device))
            model.load_state_dict(torch.load("linear_epoch05_%s.pt" % device))
            """,
            name="the-last-epoch-file-this-run-saved-named-printf-style",
        ),
        Valid(
            """
            import argparse
            import torch
            import torch.nn as nn
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda:0")
            parser.add_argument("--save", default="./garage/metr")
            args = parser.parse_args()
            device = torch.device(args.device)
            model = nn.Linear(8, 2).to(device)
            history = []
            for epoch in range(1, 11):
                loss = model(torch.randn(4, 8, device=device)).pow(2).mean().item()
                history.append(loss)
                torch.save(model.state_dict(), args.save + "_epoch_" + str(epoch) + "_" + str(round(loss, 2)) + ".pth")
            best = min(range(len(history)), key=history.__getitem__)
            model.load_state_dict(torch.load(args.save + "_epoch_" + str(best + 1) + "_" + str(round(history[best], 2)) + ".pth"))
            """,
            name="the-best-epoch-file-this-run-saved-named-by-adding-strings",
        ),
        Valid(
            """
            import io
            import requests
            import torch
            image, label = torch.load("data/validation_example.pt")
            payload = io.BytesIO(image.numpy().tobytes())
            requests.post("http://localhost:8000/predict", files={"blob": payload})
            """,
            name="what-was-loaded-is-read-as-host-data",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            train_data = torch.load("mnist/train_data.pt").reshape(60000, 784).numpy()
            train_labels = torch.load("mnist/train_label.pt").numpy()
            """,
            name="a-load-read-at-once-as-host-data",
        ),
        Valid(
            """
            import os
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(4, 2).to(device)
            run_dir = "runs/0"
            while os.path.isdir(run_dir):
                run_dir = os.path.join("runs", str(len(os.listdir("runs"))))
            weights = os.path.join(run_dir, "net.pt")
            def fit(best):
                loss = net(torch.randn(8, 4, device=device)).pow(2).mean()
                if loss.item() < best:
                    torch.save(net.state_dict(), weights)
                return min(best, loss.item())
            def evaluate():
                net.load_state_dict(torch.load(weights))
            best = float("inf")
            for epoch in range(10):
                best = fit(best)
            evaluate()
            """,
            name="a-path-bound-once-to-a-folder-chosen-at-run-time",
        ),
        Valid(
            """
            import os
            import torch
            import torch.nn as nn

            def fit(net, batches, out_dir, epochs=5):
                if torch.cuda.is_available():
                    net = net.cuda()
                best = float("inf")
                for epoch in range(epochs):
                    loss = sum(net(x).pow(2).mean().item() for x in batches)
                    if loss < best:
                        best = loss
                        torch.save(net.state_dict(), os.path.join(out_dir, "best.pt"))
                net.load_state_dict(torch.load(os.path.join(out_dir, "best.pt")))
                return net

            fit(nn.Linear(4, 2), [torch.randn(8, 4)], "runs")
            """,
            name="a-folder-handed-to-the-function-that-saves-and-reloads",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import torch
            from corpus import batches
            parser = argparse.ArgumentParser()
            parser.add_argument("--cuda", action="store_true")
            args = parser.parse_args()
            with open("model.pt", "rb") as f:
                model = torch.load(f)
            for inputs in batches(args):
                print(model(inputs).argmax(-1))
            """,
            name="no-fix-for-a-whole-model-used-where-the-flow-cannot-see",
        ),
        Invalid(
            """
            from helpers import *
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            checkpoint = torch.load("detector_checkpoint.pth.tar")
            model = checkpoint["model"].to(device)
            """,
            fixed="""
            from helpers import *
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            checkpoint = torch.load("detector_checkpoint.pth.tar", map_location=device)
            model = checkpoint["model"].to(device)
            """,
            applicability=Applicability.UNSAFE,
            name="torch-brought-by-a-star-import-of-the-projects-helpers",
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def main(resume):
                checkpoint = torch.load(resume)
                model, optimizer = checkpoint["model"], checkpoint["optimizer"]
                model = model.to(device)
                return model, optimizer
            if __name__ == "__main__":
                main("checkpoint_ssd300.pth.tar")
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def main(resume):
                checkpoint = torch.load(resume, map_location=device)
                model, optimizer = checkpoint["model"], checkpoint["optimizer"]
                model = model.to(device)
                return model, optimizer
            if __name__ == "__main__":
                main("checkpoint_ssd300.pth.tar")
            """,
            applicability=Applicability.UNSAFE,
            name="a-pickled-model-and-optimizer-resumed-where-the-module-level-device-is",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            torch.save(nn.Linear(4, 2).state_dict(), "checkpoint.pth")
            def load_weights(filepath):
                return torch.load(filepath)
            mine = load_weights("checkpoint.pth")
            model = nn.Linear(4, 2)
            model.load_state_dict(load_weights("released.pth"))
            """,
            fixed="""
            import torch
            import torch.nn as nn
            torch.save(nn.Linear(4, 2).state_dict(), "checkpoint.pth")
            def load_weights(filepath):
                return torch.load(filepath, map_location="cpu")
            mine = load_weights("checkpoint.pth")
            model = nn.Linear(4, 2)
            model.load_state_dict(load_weights("released.pth"))
            """,
            applicability=Applicability.UNSAFE,
            name="a-helper-also-called-with-a-file-another-run-saved",
        ),
        Invalid(
            """
            import torch

            def test_voc(weights):
                net = build_ssd("test", 300, 21)
                net.load_state_dict(torch.load(weights))
                net.eval()
                return evaluate(net)

            if __name__ == "__main__":
                test_voc(args.trained_model)
            """,
            fixed="""
            import torch

            def test_voc(weights):
                net = build_ssd("test", 300, 21)
                net.load_state_dict(torch.load(weights, map_location="cpu"))
                net.eval()
                return evaluate(net)

            if __name__ == "__main__":
                test_voc(args.trained_model)
            """,
            applicability=Applicability.SAFE,
            name="evaluation-script-entry-point-named-test",
        ),
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
            import torch.nn as nn
            model = nn.Linear(4, 2)
            model.load_state_dict(load("ckpt.pt", map_location=None))
            """,
            fixed="""
            from torch import load
            import torch.nn as nn
            model = nn.Linear(4, 2)
            model.load_state_dict(load("ckpt.pt", map_location="cpu"))
            """,
            applicability=Applicability.SAFE,
            name="from-import-map-location-none",
        ),        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.load("whole_model.pt", weights_only=False)
            model.eval()
            scores = model(torch.randn(1, 3, 32, 32).to(device))
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.load("whole_model.pt", weights_only=False, map_location=device)
            model.eval()
            scores = model(torch.randn(1, 3, 32, 32).to(device))
            """,
            applicability=Applicability.SAFE,
            name="whole-model-mapped-where-its-inputs-are",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def main(args):
                net = nn.Linear(8, 2)
                if args.resume:
                    net.load_state_dict(torch.load(args.checkpoint))
                for epoch in range(args.epochs):
                    train_one_epoch(net)
                    torch.save(net.state_dict(), args.checkpoint)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def main(args):
                net = nn.Linear(8, 2)
                if args.resume:
                    net.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
                for epoch in range(args.epochs):
                    train_one_epoch(net)
                    torch.save(net.state_dict(), args.checkpoint)
            """,
            applicability=Applicability.SAFE,
            name="resume-reads-an-earlier-run",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            if args.train:
                net = nn.Linear(8, 2)
                torch.save(net.state_dict(), "net.pt")
            else:
                net = nn.Linear(8, 2)
                net.load_state_dict(torch.load("net.pt"))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            if args.train:
                net = nn.Linear(8, 2)
                torch.save(net.state_dict(), "net.pt")
            else:
                net = nn.Linear(8, 2)
                net.load_state_dict(torch.load("net.pt", map_location="cpu"))
            """,
            applicability=Applicability.SAFE,
            name="saved-by-another-run-of-the-same-script",
        ),
        Invalid(
            """
            import os
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(8, 2).to(device)
            path = "models/linear-100.pkl"
            if os.path.isfile(path):
                net.load_state_dict(torch.load(path))
            else:
                train(net)
                torch.save(net.state_dict(), path)
            """,
            fixed="""
            import os
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(8, 2).to(device)
            path = "models/linear-100.pkl"
            if os.path.isfile(path):
                net.load_state_dict(torch.load(path, map_location="cpu"))
            else:
                train(net)
                torch.save(net.state_dict(), path)
            """,
            applicability=Applicability.SAFE,
            name="weights-trained-where-missing-travel-between-machines",
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = build_model().to(device)
            checkpoint = torch.load("release.ckpt")
            model.load_state_dict(checkpoint["model"])
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = build_model().to(device)
            checkpoint = torch.load("release.ckpt", map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            """,
            applicability=Applicability.UNSAFE,
            name="weights-for-load-state-dict-stay-on-the-host",
        ),
        Invalid(
            """
            import torch
            use_gpu = torch.cuda.is_available()
            net = torch.load("whole_model.pt", weights_only=False)
            net.eval()
            batch = torch.randn(1, 3, 32, 32)
            scores = net(batch.cuda() if use_gpu else batch)
            """,
            name="no-fix-when-cpu-would-meet-cuda-inputs",
        ),
        Invalid(
            """
            import torch
            use_gpu = torch.cuda.is_available()
            encoder, decoder = torch.load("autoencoder.pt", weights_only=False)
            image = torch.rand(1, 784)
            if use_gpu:
                image = image.cuda()
            print(decoder(encoder(image)))
            """,
            name="no-fix-when-models-unpacked-from-one-file-would-meet-cuda-inputs",
        ),
    ]

    def setup(self) -> None:
        self._program = self.context.shared(CudaProgram)
        self._found: list[tuple[cst.Call, PendingFix | None]] = []
        # The loads found under the file's main guard (by id).
        self._under_main_guard: set[int] = set()

    def leave_Module(self, node: cst.Module) -> None:
        if self._found and (self._needs_a_gpu() or not self._project_may_have_saved_them()):
            return
        for call, fix in self._found:
            if not self._file_may_hold_device_tensors(call):
                continue
            if self._program.hard_coded_cuda():
                # A program with no CPU mode, in one process: it runs only on a GPU machine, whose
                # first GPU is there, and fails on any other before its loads matter.
                continue
            if self._program.cpu_mode_elsewhere is not None and id(call) in self._under_main_guard \
                    and self._program.hard_coded_cuda_in_its_own_run():
                # The file run as a script, GPU-only (`device = "cuda"` under its main guard):
                # the program importing it for its helpers, with a CPU mode, never runs this.
                continue
            self.report(call, fix=fix)


    def _project_may_have_saved_them(self) -> bool:
        """Some file of the project saves what may hold accelerator tensors; or the file has
        no project on disk to ask. Where every save is of host data, or there is none, the
        files loaded come from elsewhere (released weights, converted models), and what
        device they were saved from is not in the code."""
        if self.options.include_outside_checkpoints:
            return True
        writing = self.context.project_checkpoints()
        return writing is None or writing.writes_device_checkpoints

    def _file_may_hold_device_tensors(self, call: cst.Call) -> bool:
        """The file loaded may be one the project's device saves wrote: not where every save
        of the project that writes a file of its name saves host data (a vocabulary, weights
        converted on the CPU)."""
        if self.options.include_outside_checkpoints:
            return True
        path = next((arg.value for arg in call.args if arg.keyword is None and not arg.star), None) or next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "f"), None)
        return path is None or self.context.loaded_file_may_hold_device_tensors(path)

    def _needs_a_gpu(self) -> bool:
        """The program says it cannot run without a GPU: it asserts one, exits without one, or
        sets up NCCL whatever its settings. A load on a machine without one is then moot."""
        return self._program.declares_gpu_only or self._program.says_it_needs_a_gpu

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.qualified_name(node.func, among=torch_api.TORCH_LOAD) is None:
            return
        flow = self.context.flow
        if any(arg.star == "**" for arg in node.args):
            return
        if node.args and node.args[0].keyword is None and flow.value_of(node.args[0].value).only(Kind.MEMORY_BUFFER):
            return
        if not self.options.include_tests and is_test_code(self.context.path, self.context.module, self.context.names.imports_from):
            return
        if flow.written_earlier_in_run(node):
            return  # the device that saved it is the one loading it
        if not flow.reached_in_cpu_mode(node, self.context.ancestors(node)):
            return  # only where the program has chosen the GPU (`if args.cuda:`)
        if self._read_as_host_data(node):
            return  # what the file holds is host data: a GPU did not save it
        if self._loaded_into_a_scheduler(node):
            return  # a learning-rate scheduler's state: numbers, no tensors
        keyword = next((arg for arg in node.args if arg.keyword is not None and arg.keyword.value == "map_location"), None)
        if keyword is not None and not (isinstance(keyword.value, cst.Name) and keyword.value.value == "None"):
            return
        positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
        if len(positional) >= 2 or not node.args or any(arg.star == "*" for arg in node.args):
            if keyword is None:
                return
        self._found.append((node, self._fix(node, keyword)))
        if under_main_guard(node, self.context.ancestors(node)):
            self._under_main_guard.add(id(node))

    def _fix(self, node: cst.Call, keyword: cst.Arg | None) -> PendingFix | None:
        into_load_state_dict = self._flows_into_load_state_dict(node)
        configured = f'"{self.options.map_location}"'
        into_state_dict = into_load_state_dict or self.context.flow.loaded_into_state_dict(node)
        if into_state_dict:
            # Weights bound for `load_state_dict` are copied onto the model's device there:
            # mapping them to the GPU first would hold a second copy of the model on it.
            candidates = [configured, *self._device_variables(node)]
        else:
            # A whole model, or tensors used as they are, belong where the program computes.
            candidates = [*self._device_variables(node), configured]
        offered: str | None = None
        for location in candidates:
            agreement = self._agreement(node, keyword, location)
            if agreement is FixAgreement.AGREES:
                return self._edit(node, keyword, location, Applicability.SAFE)
            # A whole model mapped to the configured location with nothing to show where the
            # program then uses it: a GPU run that feeds it GPU data would break.
            guessed = location == configured and not into_state_dict and not (
                self._read_on_the_host(node) or self.context.flow.names_no_accelerator() or self._moved_later(node))
            if agreement is FixAgreement.NO_EVIDENCE and offered is None and not guessed:
                offered = location
        if offered is None:
            return None
        return self._edit(node, keyword, offered,
                          Applicability.SAFE if into_load_state_dict else Applicability.UNSAFE)

    def _moved_later(self, node: cst.Call) -> bool:
        """`model = torch.load(f)`, and later in the same body `model.to(device)` (or
        `.cuda()`): the program puts what it loaded where it computes, wherever it was mapped."""
        return any(type(current.func) is cst.Attribute and current.func.attr.value in torch_api.PLACING_METHODS
                   and type(current.func.value) is cst.Name
                   for current in self._later_calls_on_what_was_loaded(node))

    def _read_as_host_data(self, node: cst.Call) -> bool:
        """`im, label = torch.load(path)`, then `im.numpy()` in the same body, or
        `torch.load(path).reshape(n, -1).numpy()`, with no copy to the host: the program knows
        the file holds host tensors (`.numpy()` refuses any other), so no GPU saved them."""
        current: cst.CSTNode = node
        while True:
            attribute = self.context.parent(current)
            call = self.context.parent(attribute) if type(attribute) is cst.Attribute else None
            if type(attribute) is not cst.Attribute or type(call) is not cst.Call or call.func is not attribute:
                break
            if attribute.attr.value == "numpy":
                return True
            if attribute.attr.value in torch_api.PLACING_METHODS:
                break
            current = call
        return any(type(current.func) is cst.Attribute and current.func.attr.value == "numpy"
                   for current in self._later_calls_on_what_was_loaded(node))

    def _later_calls_on_what_was_loaded(self, node: cst.Call) -> Iterator[cst.Call]:
        """The calls of a method of a name `name = torch.load(...)` (or `a, b = ...`) binds, in
        the statements after it in the same body."""
        ancestors = self.context.ancestors(node)
        assign = ancestors[0] if ancestors else None
        if type(assign) is not cst.Assign:
            return
        names = {name.value for target in assign.targets for name in target_names(target.target)}
        body = next((a for a in ancestors if isinstance(a, (cst.FunctionDef, cst.Module))), None)
        if body is None:
            return
        statements = body.body.body if isinstance(body, cst.FunctionDef) and isinstance(body.body, cst.IndentedBlock) \
            else body.body if isinstance(body, cst.Module) else ()
        holding = next((index for index, statement in enumerate(statements) if statement in ancestors), None)
        if holding is None:
            return
        stack: list[cst.CSTNode] = list(statements[holding + 1:])
        while stack:
            current = stack.pop()
            if type(current) is cst.Call and type(current.func) is cst.Attribute \
                    and type(current.func.value) is cst.Name and current.func.value.value in names:
                yield current
            stack.extend(child_nodes(current))

    def _read_on_the_host(self, node: cst.Call) -> bool:
        """`torch.load(path).numpy()`: what was loaded is read on the host at once."""
        parent = self.context.parent(node)
        return type(parent) is cst.Attribute and parent.attr.value in torch_api.HOST_READ_METHODS

    def _edit(self, node: cst.Call, keyword: cst.Arg | None, location: str,
              applicability: Applicability) -> PendingFix:
        if keyword is not None:
            edit = NodeEdit(keyword.value, location)
        else:
            edit = NodeEdit.insert_after(node.args[-1].value, f", map_location={location}")
        return self.make_fix(edit, applicability=applicability)

    def _agreement(self, node: cst.Call, keyword: cst.Arg | None, location: str) -> FixAgreement:
        """What the model says of the assigned, loaded object once it is mapped to `location`."""
        parent = self.context.parent(node)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is node):
            return FixAgreement.NO_EVIDENCE
        value = cst.parse_expression(location)
        if keyword is not None:
            mapped = node.with_deep_changes(keyword, value=value)
        else:
            mapped = node.with_changes(args=[*node.args, cst.Arg(value, keyword=cst.Name("map_location"))])
        replacement = parent.with_changes(value=mapped)
        target = parent.targets[0].target
        # `encoder, decoder = torch.load(...)`: each name unpacked is moved.
        parts = [element.value for element in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
        return self.context.flow.fix_agreement(parent, replacement, [self.context.code_for_node(part) for part in parts])

    def _device_variables(self, node: cst.Call) -> list[str]:
        """Names holding a device where the load runs (`device`, `args.device`)."""
        ancestors = self.context.ancestors(node)
        statement = next((a for a in ancestors if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement))), None)
        env = self.context.flow.env_before(statement) if statement is not None else None
        if env is None:
            return []
        found = [name for name, value in env.items() if "device" in name.lower() and value.is_device]
        functions = [a for a in ancestors if isinstance(a, cst.FunctionDef)]
        if found or not functions:
            return found
        # A module-level `device` the function reads as a global (`def main(): ... torch.load(p)`).
        outermost = functions[-1]
        body = list(self.context.module.body)
        # The module's bindings where the program goes on after the `def` (a `def` has no
        # environment of its own): where `main()` is called, say.
        later = body[body.index(outermost) + 1:] if outermost in body else []
        module_env = next((env for env in map(self.context.flow.env_before, later) if env is not None), None)
        local = set().union(*(function_bindings(function).local for function in functions))
        return [name for name, value in (module_env or {}).items()
                if "device" in name.lower() and value.is_device and name not in local]

    def _loaded_into_a_scheduler(self, node: cst.Call) -> bool:
        """`scheduler.load_state_dict(torch.load(path))` where every assignment of `scheduler`
        in its scope makes a `torch.optim.lr_scheduler` scheduler, whose state holds no tensors."""
        ancestors = self.context.ancestors(node)
        if len(ancestors) < 2 or type(ancestors[0]) is not cst.Arg or type(ancestors[1]) is not cst.Call:
            return False
        holder = ancestors[1]
        if not (type(holder.func) is cst.Attribute and holder.func.attr.value == "load_state_dict"
                and type(holder.func.value) is cst.Name):
            return False
        name = holder.func.value.value
        scope = self.context.binding_scope(name)
        if scope is None:
            return False
        made = assigned_values(scope, name)
        names = self.context.names
        return bool(made) and all(
            isinstance(value, cst.Call)
            and (names.qualified_name(value.func) or "").startswith(torch_api.LR_SCHEDULERS) for value in made)

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
