"""TDL031 wrapped-model-attribute-on-wrapper."""

from __future__ import annotations

import difflib

import libcst as cst

from torchdevlint.analysis.brains.torch_ops import WRAPPER_ATTRIBUTES
from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import is_written
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import WRAPPER_LACKS_ATTRIBUTE, RuntimeProof

# How close a name must be to one of the wrapper's own to be taken for it misspelt
# (`moduel`, `modle`; `mean_latent` and `width` are far from all of them).
_TYPO_SIMILARITY = 0.8
# What a misspelt name may have meant: the wrapper's public attributes (`crnn.backward_hook`
# is a method of the model, not `_backward_hooks` misspelt).
_PUBLIC_WRAPPER_ATTRIBUTES = sorted(name for name in WRAPPER_ATTRIBUTES if not name.startswith("_"))


class WrappedModelAttributeOnWrapper(Rule):
    """
    ## What it does
    Finds an attribute of a model read through its `nn.DataParallel` or
    `DistributedDataParallel` wrapper: `model = nn.DataParallel(model)` followed by
    `model.generate(...)`, `model.mean_latent(4096)` or `model.width`. The flow model knows
    where a name holds a wrapper (on every path, or only on some: `if torch.cuda.device_count()
    > 1: model = nn.DataParallel(model)`), through assignments, branches and the functions the
    file calls with it. What a wrapper answers to itself is read from torch's own source
    (`torch_ops.WRAPPER_ATTRIBUTES`, generated): the methods and attributes of `nn.Module`,
    `DataParallel` and DDP, and `module`. Anything else is the wrapped model's.

    ## Why is this bad?
    A wrapper does not forward attributes to the model it wraps: `nn.Module.__getattr__`
    looks only among the wrapper's own parameters, buffers and sub-modules, and its one
    sub-module is `module`. The read fails with "AttributeError: 'DataParallel' object has
    no attribute 'generate'". Where the model is wrapped only on several GPUs, the program
    runs on one GPU and on the CPU and fails on the multi-GPU machine it was meant for.

    ## Not reported
    A wrapper's own attributes (`model.train()`, `model.parameters()`, `model.device_ids`,
    `model.module`), attributes written (`model.epoch = 3` sets it on the wrapper), dunder
    names, and reads where a test has ruled the wrapper out (`if isinstance(model,
    nn.DataParallel): model = model.module`, `model.module if hasattr(model, "module") else
    model`). Wrappers of other libraries (FSDP, Lightning, Accelerate) forward attributes and
    are not wrappers here.

    A name close to one of the wrapper's own (`model.moduel`, `model.modle`) is reported as
    that name misspelt, without a fix: the model it wraps is unlikely to have it either.

    ## Fix safety
    Safe where the model is wrapped on every path: `model.generate` becomes
    `model.module.generate`, the attribute of the model it wraps (a method called so runs on
    the wrapped model's device, `device_ids[0]`, outside the wrapper's scatter). Unsafe where it
    is wrapped on some paths only: `getattr(model, "module", model).generate` reads through
    the wrapper where there is one, and reads the model itself where there is none, unless the
    bare model has an attribute of its own named `module`. No fix where the wrapper is not
    read from a name (`wrap(model).generate`).

    ## Options
    None.
    """

    code = "TDL031"
    slug = "wrapped-model-attribute-on-wrapper"
    message = "An attribute of the wrapped model read through its DataParallel/DDP wrapper, which has no such attribute"
    fix_title = "Read it from the wrapped model (`.module`)"
    proof = RuntimeProof(WRAPPER_LACKS_ATTRIBUTE, gpus=2)
    requires_any_text = ("DataParallel",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            class Generator(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Linear(8, 8)
                def mean_latent(self, n):
                    return self.net(torch.randn(n, 8, device=self.net.weight.device)).mean(0)

            g = Generator().cuda()
            g = nn.DataParallel(g)
            g.eval()
            for parameter in g.parameters():
                parameter.requires_grad_(False)
            latent = g.module.mean_latent(4096)
            print(g.device_ids, g.training)
            g.epoch = 3
            """,
            name="the-wrappers-own-attributes-and-module",
        ),
        Valid(
            """
            import torch.nn as nn

            def unwrap(model):
                return model.module if hasattr(model, "module") else model

            net = build()
            if num_gpus > 1:
                net = nn.DataParallel(net)
            bare = net.module if isinstance(net, nn.DataParallel) else net
            print(bare.num_classes)
            if isinstance(net, nn.DataParallel):
                net = net.module
            net.export("model.onnx")
            """,
            name="a-test-rules-the-wrapper-out",
        ),
        Valid(
            """
            import torch.nn as nn

            def sample(args, generator, discriminator):
                # The side that reads `.module` is the wrapped one, whatever the test asks.
                g = generator.module if args.distributed else generator
                if args.distributed:
                    d = discriminator.module
                else:
                    d = discriminator
                return g.mean_latent(4096), d.score_fn

            generator, discriminator = Generator(), Discriminator()
            if args.distributed:
                generator = nn.parallel.DistributedDataParallel(generator, device_ids=[args.local_rank])
                discriminator = nn.parallel.DistributedDataParallel(discriminator, device_ids=[args.local_rank])
            model = nn.DataParallel(Detector())
            model.class_weights = class_weights(labels)
            print(sample(args, generator, discriminator), model.class_weights)
            """,
            name="a-side-that-unwraps-and-an-attribute-set-on-the-wrapper",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class CapsuleNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.routing = nn.Linear(8, 8)
                    self.num_routes = 3

            def train(model, loader):
                # Unwrapped under the test that wrapped it: what follows reads the model.
                if args.cuda:
                    model = model.module
                for images, _ in loader:
                    print(model.num_routes, model.routing(images))

            model = CapsuleNet()
            if args.cuda:
                model = nn.DataParallel(model.cuda())
            train(model, loader)
            """,
            name="unwrapped-in-another-function-under-the-same-test",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            generator = Generator(size=256).to("cuda")
            generator = nn.DataParallel(generator)
            mean_latent = generator.mean_latent(4096)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            generator = Generator(size=256).to("cuda")
            generator = nn.DataParallel(generator)
            mean_latent = generator.module.mean_latent(4096)
            """,
            applicability=Applicability.SAFE,
            name="a-method-of-the-generator",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            model = Detector(cfg)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            model.to("cuda")

            def evaluate(model, images):
                resized = [resize(image, model.width, model.height) for image in images]
                return model(torch.stack(resized).cuda())

            evaluate(model, load_images())
            """,
            fixed="""
            import torch
            import torch.nn as nn

            model = Detector(cfg)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            model.to("cuda")

            def evaluate(model, images):
                resized = [resize(image, getattr(model, "module", model).width, getattr(model, "module", model).height) for image in images]
                return model(torch.stack(resized).cuda())

            evaluate(model, load_images())
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="wrapped-on-several-gpus-only",
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Trainer:
                def __init__(self, model, gpu_id):
                    self.model = model.to(gpu_id)
                    self.model = DDP(self.model, device_ids=[gpu_id])

                def sample(self):
                    return self.model.generate(16)

                def save(self):
                    torch.save(self.model.module.state_dict(), "checkpoint.pt")
            """,
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Trainer:
                def __init__(self, model, gpu_id):
                    self.model = model.to(gpu_id)
                    self.model = DDP(self.model, device_ids=[gpu_id])

                def sample(self):
                    return self.model.module.generate(16)

                def save(self):
                    torch.save(self.model.module.state_dict(), "checkpoint.pt")
            """,
            applicability=Applicability.SAFE,
            name="a-trainer-that-wraps-its-model-in-init",
        ),
        Invalid(
            """
            import torch

            model = Yolo(n_classes=80)
            if torch.cuda.device_count() > 1:
                model = torch.nn.DataParallel(model)
            train(model)
            if isinstance(model, torch.nn.DataParallel):
                torch.save(model.moduel.state_dict(), "checkpoint.pth")
            else:
                torch.save(model.state_dict(), "checkpoint.pth")
            """,
            name="the-wrappers-own-attribute-misspelt",
        ),
        Invalid(
            """
            import torch.nn as nn

            recogniser = Recogniser()
            if multi_gpu:
                recogniser = nn.DataParallel(recogniser)
            # The model's own hook, named like the wrapper's private `_backward_hooks`.
            recogniser.register_full_backward_hook(recogniser.backward_hook)
            """,
            fixed="""
            import torch.nn as nn

            recogniser = Recogniser()
            if multi_gpu:
                recogniser = nn.DataParallel(recogniser)
            # The model's own hook, named like the wrapper's private `_backward_hooks`.
            recogniser.register_full_backward_hook(getattr(recogniser, "module", recogniser).backward_hook)
            """,
            applicability=Applicability.UNSAFE,
            name="a-model-method-named-like-a-private-attribute-of-the-wrapper",
        ),
    ]

    def setup(self) -> None:
        # Reads through a wrapper, reported at the end unless the file sets them on it.
        self._reads: list[tuple[cst.Attribute, Wrapping]] = []
        # What the file assigns attributes of: (object, attribute name) nodes, read at the end.
        self._writes: list[tuple[cst.BaseExpression, str]] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attribute = node.attr.value
        if attribute in WRAPPER_ATTRIBUTES or attribute.startswith("__") and attribute.endswith("__"):
            return
        if is_written(node, self.context.parent):
            return
        wrapping = self.context.flow.value_of(node.value).wrapping
        if wrapping is not Wrapping.NO:
            self._reads.append((node, wrapping))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._record_write(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._record_write(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        # `setattr(model, "names", ...)`.
        if isinstance(node.func, cst.Name) and node.func.value == "setattr" and len(node.args) >= 2:
            name = node.args[1].value
            text = name.evaluated_value if isinstance(name, cst.SimpleString) else None
            if isinstance(text, str):
                self._writes.append((node.args[0].value, text))

    def _record_write(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Attribute):
            self._writes.append((target.value, target.attr.value))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._record_write(element.value)

    def leave_Module(self, node: cst.Module) -> None:
        if not self._reads:
            return
        code = self.context.code_for_node
        # Set on the wrapper itself (`model.class_weights = ...`), they are there to read.
        assigned = {(code(owner), attribute) for owner, attribute in self._writes}
        for read, wrapping in self._reads:
            base, attribute = code(read.value), read.attr.value
            if (base, attribute) not in assigned:
                self._report(read, wrapping, base, attribute)

    def _report(self, node: cst.Attribute, wrapping: Wrapping, base: str, attribute: str) -> None:
        where = "" if wrapping is Wrapping.YES else " where the model is wrapped"
        meant = difflib.get_close_matches(attribute, _PUBLIC_WRAPPER_ATTRIBUTES, n=1, cutoff=_TYPO_SIMILARITY)
        if meant:
            # `model.moduel`: the wrapper's own attribute misspelt, not the model's.
            self.report(node, message=(f"`{base}.{attribute}` is no attribute of the DataParallel/DDP wrapper{where}, "
                                       f"nor of the model it wraps: `{meant[0]}` misspelt? (AttributeError)"))
            return
        self.report(
            node,
            message=(f"`{base}.{attribute}` reads the wrapped model's `{attribute}` through its DataParallel/DDP "
                     f"wrapper, which has no such attribute{where} (AttributeError)"),
            fix=self._fix(node, wrapping, base),
        )

    def _fix(self, node: cst.Attribute, wrapping: Wrapping, base: str) -> PendingFix | None:
        if wrapping is Wrapping.YES:
            return self.make_fix(NodeEdit.insert_after(node.value, ".module"), applicability=Applicability.SAFE)
        if dotted_name(node.value) is None:
            return None  # read twice by the fix: only a plain name or attribute chain
        return self.make_fix(NodeEdit(node.value, f'getattr({base}, "module", {base})'),
                             applicability=Applicability.UNSAFE)

