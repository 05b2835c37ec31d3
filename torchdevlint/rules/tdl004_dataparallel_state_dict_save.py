"""TDL004 dataparallel-state-dict-save."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.flow.values import Kind, Wrapping
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import argument_for, descendants
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import PREFIXED_STATE_DICT, RuntimeProof

_WHOLE_WRAPPER_MESSAGE = ("a DataParallel/DDP wrapper is saved whole: loading it gives the wrapper, "
                          "with its GPU ids, not the model")


class DataParallelStateDictSave(Rule):
    """
    ## What it does
    Finds `model.state_dict()` reaching `torch.save` (directly, inside a dict or list,
    through variables such as a checkpoint dict, or through a same-file helper that builds or
    saves the checkpoint) when `model` is, or may be, wrapped in
    `nn.DataParallel` or `DistributedDataParallel`, for instance under
    `if torch.cuda.device_count() > 1:`. Reported at the `.state_dict()` call.

    Also across files: a function (or a callable class's `__call__`) that saves the
    `state_dict()` of a model it is handed, as it is handed, where another file of the
    project hands it a model that file bound to a wrapper (`model = DDP(model)` under `if
    args.distributed:`, then `save_model(epoch, model, ...)` imported from `utils/general.py`).
    Not where the function unwraps it first (`getattr(model, "module", model)`, `model.module`).
    And the other way round: a checkpoint holding the wrapper's `state_dict()` handed to
    another file's function that saves what it is handed, or an item of it
    (`save_checkpoint({"state_dict": model.state_dict(), ...}, is_best, output_dir)` with
    `torch.save(states["state_dict"], ...)` in `utils/checkpoints.py`).

    ## Why is this bad?
    A wrapper's state dict prefixes every key with `module.`. Loading the file into the bare
    model (for inference, on one GPU, on a CPU) then fails with "Missing key(s) in
    state_dict: "weight" … Unexpected key(s) in state_dict: "module.weight"", and with
    `strict=False` it silently loads nothing.

    ## Not reported
    Not reported: `model.module.state_dict()`, or an unwrap helper such as
    `getattr(model, "module", model)` or `model.module if hasattr(model, "module") else model`;
    nor a program that reads its checkpoints back into the model wrapped on every path, as the
    DistributedDataParallel tutorial does (`ddp_model.load_state_dict(torch.load(path))`, or
    the wrapped model handed to a loading helper the file cannot see, such as
    `restart_from_checkpoint(path, state_dict=model)`): its reader expects the prefix, and
    such projects strip it where a bare model loads (`k.replace("module.", "")`). That holds
    for the project too: where another of its files loads a state dict into a model it wrapped
    (a `test.py` with `model = nn.DataParallel(model).cuda()`, then `model.load_state_dict(...)`),
    the checkpoints the training script saves are meant for it (the project is read as for
    TDL003); so they are where another file strips the prefix before it loads
    (`k.replace("module.", "")`, `new[k[7:]] = v` for keys holding `"module"`, torch's
    `consume_prefix_in_state_dict_if_present`, a helper of the project's called with the
    prefix: `remove_prefix(state_dict, "module.")`), or where the saving file itself strips it
    from what it resumes from.
    Nor the branch of `if isinstance(model, nn.DataParallel):` (or `hasattr(model, "module")`)
    where the model is not the wrapper. Nor a model that did its work bare and is wrapped only
    to be saved: `net = DataParallel(net)`
    after the bare `net` was called (or a method of its own was), with nothing after it but
    `net.state_dict()`. A conversion script writes its released checkpoint that way, in the
    format the project's wrapped models load, and the wrapper exists for nothing else.

    Also finds the wrapper itself saved whole (`torch.save(model, "model.pt")` where `model`
    is, or may be, the DataParallel/DDP object). Loading that file gives the wrapper back:
    code that wraps what it loads wraps it twice (`model.module` is then the inner wrapper),
    code that reads the model's attributes fails, and DataParallel's forward scatters to the
    GPU ids it was saved with, which a CPU machine or a smaller one lacks.

    ## Fix safety
    A surely wrapped model gets `.module`; a maybe wrapped one gets
    `getattr(model, "module", model)`, which is the bare model in both cases. A parameter
    that the file's own calls fill with a wrapper counts as maybe wrapped: callers in other
    files may pass the bare model. The saved keys lose the `module.` prefix, which is what any
    loader of a bare model expects. Safe, unless the program also loads a state dict into a
    model wrapped on some paths only (wrapped with a GPU, bare on the CPU), or into one whose
    making the flow cannot see (a builder of another file, a wrapper class of the project,
    not an optimizer's or scheduler's state): that load expects
    the prefix where the model is (or may be) wrapped, so the fix unwraps it too
    (`getattr(model, "module", model).load_state_dict(...)`) and both sides agree on keys
    without the prefix on every path. That fix is unsafe: checkpoints saved before it carry
    the prefix. No fix where such a load goes through a helper the file cannot show, or is in
    another file of the project, wrapped under a test of the same text (`if params.multi_gpu:`
    in `train.py` and in `demo.py`): the fix cannot unwrap that load too.
    A wrapper saved whole gets `.module` (or `getattr(model, "module", model)`), unsafe: a
    reader that expects the wrapper back (and unwraps it itself) must change with it.

    ## Options
    None.
    """

    code = "TDL004"
    reads_the_project = True
    slug = "dataparallel-state-dict-save"
    message = "state_dict() of a DataParallel/DDP-wrapped model is saved with 'module.'-prefixed keys"
    fix_title = "Save the unwrapped model's state_dict()"
    # DataParallel is commonly taken only where there are two GPUs or more; the prefixed keys
    # fail where the checkpoint is loaded, perhaps much later.
    proof = RuntimeProof(PREFIXED_STATE_DICT, gpus=2, surfaces_away=True)
    requires_any_text = ("state_dict", "Parallel")

    VALID = [
        Valid(
            """
            import torch

            class Trainer:
                def __init__(self, net, use_gpu, gpu_ids):
                    self.use_gpu = use_gpu
                    self.net = net
                    if use_gpu:
                        self.net.to(gpu_ids[0])
                        self.net = torch.nn.DataParallel(self.net, device_ids=gpu_ids)

                def save(self, path):
                    # The side that reads `.module` is the wrapped one: the helper gets the bare net.
                    if self.use_gpu:
                        self.save_network(self.net.module, path)
                    else:
                        self.save_network(self.net, path)

                def save_network(self, network, path):
                    torch.save(network.state_dict(), path)
            """,
            name="unwrapped-on-the-side-that-wrapped-it",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            net = nn.DataParallel(build_detector()).cuda()
            torch.save(net.module, "detector.pt")
            torch.save(build_detector(), "untrained.pt")
            """,
            name="the-unwrapped-model-saved-whole",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.module.state_dict(), "a.pt")
            bare = model.module if hasattr(model, "module") else model
            torch.save(bare.state_dict(), "b.pt")
            torch.save(getattr(model, "module", model).state_dict(), "c.pt")
            raw_model = model.module if distributed else model
            torch.save(raw_model.state_dict(), "d.pt")
            """,
            name="unwrapped-before-saving",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(2, 2)
            torch.save(model.state_dict(), "a.pt")
            """,
            name="never-wrapped",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            snapshot = model.state_dict()
            print(len(snapshot))
            """,
            name="state-dict-not-saved",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            def demo_checkpoint(rank, path):
                ddp_model = DDP(torch.nn.Linear(10, 5).to(rank), device_ids=[rank])
                if rank == 0:
                    torch.save(ddp_model.state_dict(), path)
                dist.barrier()
                ddp_model.load_state_dict(torch.load(path, map_location={"cuda:0": f"cuda:{rank}"}))
            """,
            name="resumed-into-the-wrapped-model-as-the-ddp-tutorial-does",
        ),
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel
            from project.utils import restart_from_checkpoint
            def main(args, backbone):
                model = DistributedDataParallel(backbone.cuda(), device_ids=[args.gpu])
                restart_from_checkpoint(args.resume, state_dict=model)
                for epoch in range(args.epochs):
                    torch.save({"epoch": epoch + 1, "state_dict": model.state_dict()}, args.resume)
            """,
            name="resumed-by-a-helper-handed-the-wrapped-model",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            if __name__ == "__main__":
                net = build_segmenter()
                net.load_converted_weights("segmenter.caffemodel")
                net.cuda()
                print(net.predict(torch.rand(1, 3, 64, 64).cuda()).shape)
                # The project's training script loads into a wrapped model: keep its key format.
                net = nn.DataParallel(net, device_ids=range(torch.cuda.device_count()))
                torch.save({"model_state": net.state_dict()}, "segmenter_converted.pth")
            """,
            name="a-converted-model-wrapped-only-to-save-prefixed-keys",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            def main(cfg):
                model = build_detector(cfg)
                if torch.cuda.device_count() > 1:
                    model = nn.DataParallel(model)
                model.cuda()
                try:
                    fit(model, cfg)
                except KeyboardInterrupt:
                    if isinstance(model, nn.DataParallel):
                        torch.save(model.module.state_dict(), "interrupted.pth")
                    else:
                        torch.save(model.state_dict(), "interrupted.pth")
            """,
            name="the-branch-where-an-isinstance-test-says-the-model-is-bare",
        ),
        Valid(
            """
            import torch
            from torch import nn
            from collections import OrderedDict

            net = nn.Linear(8, 2)
            if resume_path is not None:
                saved = torch.load(resume_path)
                renamed = OrderedDict()
                for key, value in saved.items():
                    renamed[key[7:] if key[:7] == "module." else key] = value
                net.load_state_dict(renamed)
            net = nn.DataParallel(net).cuda()
            for step in range(10):
                net(torch.rand(4, 8).cuda()).sum().backward()
            torch.save(net.state_dict(), "last.pth")
            """,
            name="the-script-strips-the-prefix-of-what-it-resumes-from",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn
            from zoo import build_student

            teacher = nn.DataParallel(nn.Linear(8, 2)).cuda()
            teacher(torch.rand(4, 8).cuda()).sum().backward()
            torch.save(teacher.state_dict(), "teacher.pt")
            student = build_student()
            student.load_state_dict(torch.load("teacher.pt", map_location="cpu"))
            """,
            fixed="""
            import torch
            from torch import nn
            from zoo import build_student

            teacher = nn.DataParallel(nn.Linear(8, 2)).cuda()
            teacher(torch.rand(4, 8).cuda()).sum().backward()
            torch.save(teacher.module.state_dict(), "teacher.pt")
            student = build_student()
            getattr(student, "module", student).load_state_dict(torch.load("teacher.pt", map_location="cpu"))
            """,
            applicability=Applicability.UNSAFE,
            name="loaded-into-a-model-made-out-of-sight",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            net = build_segmenter()
            net.load_converted_weights("init.caffemodel")
            net = nn.DataParallel(net).cuda()
            for images in loader:
                net(images.cuda()).mean().backward()
            torch.save(net.state_dict(), "segmenter.pth")
            """,
            fixed="""
            import torch
            import torch.nn as nn
            net = build_segmenter()
            net.load_converted_weights("init.caffemodel")
            net = nn.DataParallel(net).cuda()
            for images in loader:
                net(images.cuda()).mean().backward()
            torch.save(net.module.state_dict(), "segmenter.pth")
            """,
            applicability=Applicability.SAFE,
            name="wrapped-after-loading-weights-then-trained-through-the-wrapper",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def train(loader, epochs):
                net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1))
                if torch.cuda.device_count() > 1:
                    net = nn.DataParallel(net)
                net = net.cuda()
                for epoch in range(epochs):
                    fit_one_epoch(net, loader)
                torch.save(net, "detector_final.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def train(loader, epochs):
                net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1))
                if torch.cuda.device_count() > 1:
                    net = nn.DataParallel(net)
                net = net.cuda()
                for epoch in range(epochs):
                    fit_one_epoch(net, loader)
                torch.save(getattr(net, "module", net), "detector_final.pt")
            """,
            applicability=Applicability.UNSAFE,
            name="the-wrapper-saved-whole",
        ),
        Invalid(
            """
            import torch
            from torch import nn

            model = nn.DataParallel(model)
            torch.save(model.state_dict(), "model.pt")
            """,
            fixed="""
            import torch
            from torch import nn

            model = nn.DataParallel(model)
            torch.save(model.module.state_dict(), "model.pt")
            """,
            applicability=Applicability.SAFE,
            name="documented-wrapped-model-saved",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), "model.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.module.state_dict(), "model.pt")
            """,
            applicability=Applicability.SAFE,
            name="surely-wrapped",
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = torch.nn.Linear(2, 2)
            if torch.cuda.device_count() > 1:
                net = DDP(net)
            checkpoint = {"model": net.state_dict(), "epoch": 3}
            torch.save(checkpoint, "ckpt.pt")
            """,
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = torch.nn.Linear(2, 2)
            if torch.cuda.device_count() > 1:
                net = DDP(net)
            checkpoint = {"model": getattr(net, "module", net).state_dict(), "epoch": 3}
            torch.save(checkpoint, "ckpt.pt")
            """,
            applicability=Applicability.SAFE,
            name="maybe-wrapped-through-checkpoint-dict",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Trainer:
                def __init__(self):
                    self.model = nn.DataParallel(nn.Linear(2, 2))
                def save(self, path):
                    state = {}
                    state["model"] = self.model.state_dict()
                    torch.save(state, path)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Trainer:
                def __init__(self):
                    self.model = nn.DataParallel(nn.Linear(2, 2))
                def save(self, path):
                    state = {}
                    state["model"] = self.model.module.state_dict()
                    torch.save(state, path)
            """,
            applicability=Applicability.SAFE,
            name="attribute-model-item-assignment",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = "cuda" if torch.cuda.is_available() else "cpu"
            net = nn.Linear(2, 2).to(device)
            if device == "cuda":
                net = nn.DataParallel(net)
            if resume:
                net.load_state_dict(torch.load("ckpt.pth", map_location=device)["net"])
            torch.save({"net": net.state_dict()}, "ckpt.pth")
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = "cuda" if torch.cuda.is_available() else "cpu"
            net = nn.Linear(2, 2).to(device)
            if device == "cuda":
                net = nn.DataParallel(net)
            if resume:
                getattr(net, "module", net).load_state_dict(torch.load("ckpt.pth", map_location=device)["net"])
            torch.save({"net": getattr(net, "module", net).state_dict()}, "ckpt.pth")
            """,
            applicability=Applicability.UNSAFE,
            name="resumed-into-a-model-wrapped-only-with-a-gpu-makes-the-fix-unsafe",
        ),
        Invalid(
            """
            import shutil
            import torch
            import torchvision.models as models
            def main(args):
                model = models.__dict__[args.arch]()
                if args.distributed:
                    model = torch.nn.parallel.DistributedDataParallel(model)
                elif args.gpu is None:
                    model = torch.nn.DataParallel(model).cuda()
                save_checkpoint({"epoch": 1, "state_dict": model.state_dict()}, True)
            def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
                torch.save(state, filename)
                if is_best:
                    shutil.copyfile(filename, "model_best.pth.tar")
            """,
            fixed="""
            import shutil
            import torch
            import torchvision.models as models
            def main(args):
                model = models.__dict__[args.arch]()
                if args.distributed:
                    model = torch.nn.parallel.DistributedDataParallel(model)
                elif args.gpu is None:
                    model = torch.nn.DataParallel(model).cuda()
                save_checkpoint({"epoch": 1, "state_dict": getattr(model, "module", model).state_dict()}, True)
            def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
                torch.save(state, filename)
                if is_best:
                    shutil.copyfile(filename, "model_best.pth.tar")
            """,
            applicability=Applicability.SAFE,
            name="saved-through-a-helper-defined-later",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def build(gpus):
                model = nn.Linear(4, 2)
                if gpus > 1:
                    model = nn.DataParallel(model)
                return model

            def pretrain(path):
                model = build(torch.cuda.device_count())
                torch.save(model.state_dict(), path)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def build(gpus):
                model = nn.Linear(4, 2)
                if gpus > 1:
                    model = nn.DataParallel(model)
                return model

            def pretrain(path):
                model = build(torch.cuda.device_count())
                torch.save(getattr(model, "module", model).state_dict(), path)
            """,
            applicability=Applicability.SAFE,
            name="wrapped-on-some-path-by-a-same-file-helper",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def save_checkpoint(model, epoch, path):
                torch.save({"model": model.state_dict(), "epoch": epoch}, path)

            net = nn.DataParallel(nn.Linear(4, 2)).cuda()
            save_checkpoint(net, 1, "last.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def save_checkpoint(model, epoch, path):
                torch.save({"model": getattr(model, "module", model).state_dict(), "epoch": epoch}, path)

            net = nn.DataParallel(nn.Linear(4, 2)).cuda()
            save_checkpoint(net, 1, "last.pt")
            """,
            applicability=Applicability.SAFE,
            name="helper-the-file-calls-with-a-wrapped-model",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def make_checkpoint(model, epoch):
                return {"model": model.state_dict(), "epoch": epoch}

            net = nn.DataParallel(nn.Linear(4, 2))
            weights = net.state_dict()
            snapshot = {"weights": weights}
            torch.save(snapshot, "weights.pt")
            torch.save(make_checkpoint(net, 1), "last.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn

            def make_checkpoint(model, epoch):
                return {"model": getattr(model, "module", model).state_dict(), "epoch": epoch}

            net = nn.DataParallel(nn.Linear(4, 2))
            weights = net.module.state_dict()
            snapshot = {"weights": weights}
            torch.save(snapshot, "weights.pt")
            torch.save(make_checkpoint(net, 1), "last.pt")
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="through-variables-and-a-helper-that-builds-the-checkpoint",
        ),
    ]

    def setup(self) -> None:
        # How the models the program reads checkpoints into are wrapped, at worst: on every
        # path (its checkpoints are meant to carry the prefix), on some (a load the fix would
        # break where the model is wrapped), or not at all.
        self._loads_into = Wrapping.NO
        # The models loaded into that are wrapped on some paths, which a fix must unwrap too;
        # None once one of them is out of reach (a helper's, or no name).
        self._loads_to_unwrap: list[cst.BaseExpression] | None = []
        # Another file's functions that hand a parameter to `torch.save` (`stem.function` ->
        # (position, name)), asked for at the first call that may be one; and the checkpoints
        # this file hands them.
        self._saving_helpers: dict[str, tuple[tuple[int, str], ...]] | None = None
        self._saving_helper_names: frozenset[str] = frozenset()
        self._handed_to_savers: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict":
            self._loaded_into(func.value, unwrappable=dotted_name(func.value) is not None, receiver=True)
        elif node.args and self._names_a_checkpoint_reader(func):
            for arg in node.args:
                self._loaded_into(arg.value, unwrappable=False)
        elif node.args:
            self._handed_to_a_saver(node)

    def _handed_to_a_saver(self, call: cst.Call) -> None:
        """`save_checkpoint({'state_dict': model.state_dict(), ...}, is_best, output_dir)`, a
        function of another file of the project that saves what it is handed (or an item of
        it): the checkpoint is saved as this file made it."""
        func = call.func
        last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if last is None or "save" not in last.lower():
            return
        if self._saving_helpers is None:
            self._saving_helpers = self.context.project_saved_parameters()
            self._saving_helper_names = frozenset(key.rsplit(".", 1)[-1] for key in self._saving_helpers)
        if last not in self._saving_helper_names:
            return
        qualified = self.context.names.qualified_name(func)
        if qualified is None or qualified.count(".") < 1:
            return  # the file's own function: the flow reads its saves
        for position, name in self._saving_helpers.get(".".join(qualified.split(".")[-2:]), ()):
            arg = argument_for(call, position, name)
            if arg is not None:
                self._handed_to_savers.append(arg.value)

    def _loaded_into(self, model: cst.BaseExpression, *, unwrappable: bool, receiver: bool = False) -> None:
        value = self.context.flow.value_of(model)
        wrapping = value.wrapping
        if receiver and wrapping is Wrapping.NO and Kind.UNKNOWN in value.kinds and not _names_training_state(model):
            # What the flow cannot name may be the wrapper (a subclass of another file's, a
            # model read mid-construction): unwrapping the save alone could break this load.
            wrapping = Wrapping.MAYBE
        if wrapping is Wrapping.YES or wrapping is Wrapping.MAYBE and self._loads_into is Wrapping.NO:
            self._loads_into = wrapping
        if wrapping is Wrapping.MAYBE and self._loads_to_unwrap is not None:
            if unwrappable:
                self._loads_to_unwrap.append(model)
            else:
                self._loads_to_unwrap = None

    def _names_a_checkpoint_reader(self, func: cst.BaseExpression) -> bool:
        """A function out of sight named as a checkpoint reader (`load_checkpoint`)."""
        name = dotted_name(func)
        if name is None:
            return False
        last = name.rsplit(".", 1)[-1].lower()
        if last == "load_state_dict" or not any(word in last for word in naming.CHECKPOINT_READER_WORDS):
            return False
        # Asked last: the flow model interprets the function the call is in.
        reference = self.context.flow.value_of(func).reference
        return reference is None or reference.definition is None  # the file's own shows what it loads into

    def leave_Module(self, node: cst.Module) -> None:
        for whole in self.context.flow.saved_wrappers():
            fix = None
            if dotted_name(whole.saved) is not None:
                fix = self.make_fix(NodeEdit.insert_after(whole.saved, ".module") if whole.wrapping is Wrapping.YES
                                    else self._unwrapped(whole.saved), applicability=Applicability.UNSAFE,
                                    title="Save the unwrapped model")
            self.report(whole.saved, fix=fix, message=_WHOLE_WRAPPER_MESSAGE)
        if self._loads_into is Wrapping.YES or self.context.project_wrapped_checkpoint_load() is not None \
                or self.context.strips_the_wrapper_prefix():
            return
        applicability = Applicability.UNSAFE if self._loads_into is Wrapping.MAYBE else Applicability.SAFE
        flow = self.context.flow
        saved_calls = [saved.call for saved in flow.saved_state_dicts() if not saved.wrapped_only_to_save]
        reported = {id(call) for call in saved_calls} | {id(saved.call) for saved in flow.saved_state_dicts()}
        for checkpoint in self._handed_to_savers:
            for call in flow.held_calls(flow.value_of(checkpoint), Held.WRAPPED_STATE_DICT):
                if id(call) not in reported:
                    reported.add(id(call))
                    saved_calls.append(call)
        for saved_call in saved_calls:
            assert isinstance(saved_call.func, cst.Attribute)
            receiver = saved_call.func.value
            value = self.context.flow.value_of(receiver)
            fix = self._fix(receiver, value.wrapping, applicability)
            if fix is not None and value.wrapped_when is not None \
                    and self.context.project_load_wrapped_under(value.wrapped_when.text) is not None:
                # Another file loads into a model it wraps under the same test (`if
                # params.multi_gpu:` in train.py and demo.py): unwrapping the save here would
                # break that load where the test holds, and the fix cannot edit that file.
                fix = None
            self.report(saved_call, fix=fix)
        handoffs = self.context.project_wrapped_handoffs()
        for statement in node.body if handoffs else ():
            if isinstance(statement, cst.FunctionDef) and statement.name.value in handoffs:
                self._saves_what_it_is_handed(statement, handoffs[statement.name.value], method=False)
            elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
                for method in statement.body.body:
                    handed = handoffs.get(f"{statement.name.value}.{method.name.value}") \
                        if isinstance(method, cst.FunctionDef) else None
                    if handed is not None:
                        assert isinstance(method, cst.FunctionDef)
                        self._saves_what_it_is_handed(method, handed, method=True)

    def _saves_what_it_is_handed(self, function: cst.FunctionDef, handed: dict[str, str], *, method: bool) -> None:
        """`def save_model(epoch, model, ...)`: torch.save(model.state_dict(), ...)` in a file
        whose project hands it a wrapped model (`save_model(epoch, ddp_model, ...)` in train.py;
        for a method, an instance called: `save_best(ddp_model, ...)`)."""
        params = [*function.params.posonly_params, *function.params.params][1 if method else 0:]
        for position, param in enumerate(params):
            name = param.name.value
            caller = handed.get(str(position)) or handed.get(name)
            if caller is None:
                continue
            calls = _state_dict_calls(function, name)
            if calls is None or not any(self.context.names.qualified_name(call.func, among=_SAVES) is not None
                                        for call in _calls_in(function)):
                continue
            for call in calls:
                assert isinstance(call.func, cst.Attribute)
                self.report(call, fix=self._fix(call.func.value, Wrapping.MAYBE, Applicability.UNSAFE),
                            message=f"state_dict() of the model {caller} hands this function wrapped in "
                                    f"DataParallel/DDP is saved with 'module.'-prefixed keys")

    def _fix(self, receiver: cst.BaseExpression, wrapping: Wrapping, applicability: Applicability) -> PendingFix | None:
        if self._loads_into is Wrapping.MAYBE and self._loads_to_unwrap is None:
            return None
        loads = [self._unwrapped(model) for model in self._loads_to_unwrap or ()]
        if wrapping is Wrapping.YES:
            return self.make_fix(NodeEdit.insert_after(receiver, ".module"), *loads, applicability=applicability)
        if dotted_name(receiver) is None:
            return None
        return self.make_fix(self._unwrapped(receiver), *loads, applicability=applicability)

    def _unwrapped(self, model: cst.BaseExpression) -> NodeEdit:
        code = self.context.code_for_node(model)
        return NodeEdit(model, f'getattr({code}, "module", {code})')


_SAVES = frozenset({"torch.save"})


def _names_training_state(node: cst.BaseExpression) -> bool:
    """`optimizer`, `self.lr_scheduler`: what state is loaded into is no model."""
    name = dotted_name(node)
    return name is not None and bool(set(naming.words(name.rsplit(".", 1)[-1])) & naming.TRAINING_STATE_WORDS)


def _calls_in(function: cst.FunctionDef) -> list[cst.Call]:
    return [node for node in descendants(function.body, into_definitions=False) if isinstance(node, cst.Call)]


def _state_dict_calls(function: cst.FunctionDef, name: str) -> list[cst.Call] | None:
    """`model.state_dict()` calls of a parameter the function neither rebinds nor unwraps
    (`model.module`, `getattr(model, "module", model)`, `hasattr(model, "module")`); None where
    it does either."""
    found: list[cst.Call] = []
    for node in descendants(function.body, into_definitions=False):
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
            target = node.target
            if isinstance(target, cst.Name) and target.value == name:
                return None
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == name \
                and node.attr.value == "module":
            return None
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Name) and func.value in ("getattr", "hasattr") and node.args \
                    and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == name:
                return None
            if isinstance(func, cst.Attribute) and func.attr.value == "state_dict" and not node.args \
                    and isinstance(func.value, cst.Name) and func.value.value == name:
                found.append(node)
    return found
