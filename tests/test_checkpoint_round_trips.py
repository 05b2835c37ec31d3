"""Which `torch.load` calls read a file the same run wrote first (TDL003's round trip): the
device that saved it is then the device loading it."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdevlint.debug import model_for


def _loads_written_earlier(source: str) -> list[bool]:
    """For each `torch.load(...)` call in source order: whether the run wrote its file first."""
    module = cst.parse_module(textwrap.dedent(source))
    model = model_for(module)
    loads: list[cst.Call] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and model.imported_name(node.func) == (True, "torch.load"):
            loads.append(node)
        stack.extend(reversed(node.children))
    return [model.written_earlier_in_run(load) for load in loads]


def test_a_constant_path_saved_in_the_training_loop_then_reloaded() -> None:
    assert _loads_written_earlier(
        """
        import torch
        PATH = "./net.pth"
        for epoch in range(3):
            if better(epoch):
                torch.save(net.state_dict(), PATH)
        net.load_state_dict(torch.load(PATH))
        """
    ) == [True]


def test_a_resume_before_the_first_save_reads_an_earlier_run() -> None:
    assert _loads_written_earlier(
        """
        import torch
        if args.resume:
            net.load_state_dict(torch.load(args.ckpt))
        for epoch in range(3):
            torch.save(net.state_dict(), args.ckpt)
        """
    ) == [False]


def test_branches_one_run_cannot_both_take() -> None:
    assert _loads_written_earlier(
        """
        import torch
        if args.mode == "train":
            torch.save(net.state_dict(), "net.pt")
        elif args.mode == "eval":
            net.load_state_dict(torch.load("net.pt"))
        """
    ) == [False]


def test_another_file_is_not_this_file() -> None:
    assert _loads_written_earlier(
        """
        import torch
        torch.save(net.state_dict(), "last.pt")
        net.load_state_dict(torch.load("best.pt"))
        for epoch in range(3):
            torch.save(net.state_dict(), f"epoch_{epoch}.pt")
        net.load_state_dict(torch.load(f"step_{epoch}.pt"))
        """
    ) == [False, False]


def test_one_of_the_files_a_template_named_earlier_in_the_run() -> None:
    # `epoch` and `best` are not known, but the file is one of those the loop wrote.
    assert _loads_written_earlier(
        """
        import torch
        for epoch in range(3):
            torch.save(net.state_dict(), f"epoch_{epoch}.pt")
        net.load_state_dict(torch.load(f"epoch_{best}.pt"))
        if args.resume is not None:
            net.load_state_dict(torch.load("{}.pt".format(args.resume)))
        """
    ) == [True, False]


def test_paths_built_the_same_way_in_two_functions_through_a_helper_that_saves() -> None:
    assert _loads_written_earlier(
        """
        import os
        import torch

        def save(model, path):
            torch.save(model.state_dict(), path)

        def train(model, args):
            for epoch in range(args.epochs):
                save(model, os.path.join(args.out_dir, "best.pt"))

        def test(model, args):
            best = os.path.join(args.out_dir, "best.pt")
            model.load_state_dict(torch.load(best))

        def main(args):
            model = build(args)
            train(model, args)
            test(model, args)

        def evaluate_only(args):
            model = build(args)
            model.load_state_dict(torch.load(os.path.join(args.out_dir, "best.pt")))
        """
    ) == [True, False]


def test_a_function_every_call_of_which_follows_the_save() -> None:
    source = """
        import torch

        def reload(net):
            net.load_state_dict(torch.load("model.pt"))

        {before}
        reload(net)
        """
    assert _loads_written_earlier(source.format(before='torch.save(net.state_dict(), "model.pt")')) == [True]
    # Also called before anything was saved: that call reads an earlier run's file.
    assert _loads_written_earlier(source.format(before='reload(other)\n        torch.save(net.state_dict(), "model.pt")')) == [False]
    assert _loads_written_earlier(source.format(before="pass")) == [False]


def test_methods_of_one_trainer() -> None:
    assert _loads_written_earlier(
        """
        import torch

        class Trainer:
            def __init__(self, net, path):
                self.net, self.path = net, path

            def checkpoint(self):
                torch.save(self.net.state_dict(), self.path)

            def fit(self):
                for epoch in range(3):
                    self.checkpoint()
                self.net.load_state_dict(torch.load(self.path))
        """
    ) == [True]


@pytest.mark.parametrize(
    "binding",
    [
        "path = next(paths)\npath = next(paths)",  # bound twice: which file is unknown
        "for path in paths: pass",
    ],
)
def test_names_that_do_not_name_one_file(binding: str) -> None:
    assert _loads_written_earlier(
        "import torch\n" + binding + "\ntorch.save(net, path)\nnet = torch.load(path)\n"
    ) == [False]


def test_a_file_handle_names_the_file_it_opened() -> None:
    assert _loads_written_earlier(
        """
        import torch
        with open(args.save, "wb") as f:
            torch.save(model, f)
        with open(args.save, "rb") as f:
            model = torch.load(f)
        """
    ) == [True]


def test_a_handle_named_alike_for_two_files_is_the_file_its_with_opened() -> None:
    assert _loads_written_earlier(
        """
        import os
        import torch

        class Digits:
            def __init__(self, root, train, download=False):
                self.root = root
                if download:
                    self.download()
                name = "training.pt" if train else "test.pt"
                self.data = torch.load(os.path.join(self.root, "training.pt"))

            def download(self):
                with open(os.path.join(self.root, "training.pt"), "wb") as f:
                    torch.save(make_split(True), f)
                with open(os.path.join(self.root, "test.pt"), "wb") as f:
                    torch.save(make_split(False), f)
        """
    ) == [True]


def test_printf_style_names_are_templates_and_a_bare_one_is_keyed_by_its_argument() -> None:
    assert _loads_written_earlier(
        """
        import torch
        for epoch in range(1, 11):
            torch.save(net.state_dict(), "encoder_%03d_%s.pt" % (epoch, device))
        net.load_state_dict(torch.load("encoder_010_%s.pt" % device))
        net.load_state_dict(torch.load("decoder_010_%s.pt" % device))
        torch.save(net.state_dict(), "%s.pt" % name)
        net.load_state_dict(torch.load("%s.pt" % name))
        net.load_state_dict(torch.load("%s.pt" % other))
        """
    ) == [True, False, True, False]


def test_the_newest_file_a_glob_lists_after_the_loop_saved_the_files_it_matches() -> None:
    # A notebook's last cells: checkpoints written in the loop, then the newest reloaded.
    assert _loads_written_earlier(
        """
        import glob, os
        import torch
        def save_checkpoint(state, file_name):
            torch.save(state, file_name)
        for step in range(3):
            save_checkpoint({"G": G.state_dict()}, "ckpt/gan{:06d}.pth.tar".format(step))
        newest = sorted(glob.glob(os.path.join("ckpt", "*.pth.tar")))[-1]
        state = torch.load(newest)
        for epoch in range(3):
            torch.save(net.state_dict(), os.path.join(args.out, f"epoch_{epoch}.pt"))
        torch.load(max(glob.glob(os.path.join(args.out, "*.pt")), key=os.path.getmtime))
        """
    ) == [True, True]


def test_a_glob_of_other_files_or_read_before_the_save_is_no_round_trip() -> None:
    assert _loads_written_earlier(
        """
        import glob, os
        import torch
        found = sorted(glob.glob(os.path.join(args.out, "*.pt")))
        if found:
            net.load_state_dict(torch.load(found[-1]))  # a resume: an earlier run's file
        for epoch in range(3):
            torch.save(net.state_dict(), os.path.join(args.out, f"epoch_{epoch}.pt"))
        torch.load(sorted(glob.glob("pretrained/*.pt"))[0])
        torch.load(sorted(glob.glob(os.path.join(args.out, "*.pth")))[-1])
        torch.load(sorted(glob.glob(os.path.join(args.other, "*.pt")))[-1])
        """
    ) == [False, False, False, False]
