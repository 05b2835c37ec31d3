"""Naming conventions: the words by which code about devices, models and losses is known,
where no type says it. One copy of each list, each used for one question."""

from __future__ import annotations

import re

from torchdevlint.analysis.names import identifier_words


def words(name: str) -> list[str]:
    """The lower-case words of a name or option (`--useGPU` -> use, gpu; `no_cuda` -> no, cuda)."""
    return identifier_words(name)

# What `from utils import *` brings where the module imported `torch` itself (a tutorial's
# scripts sharing one helper module): names no other import of the file binds, by the
# conventional aliases (`import torch.nn.functional as F`).
STAR_IMPORTED_MODULES: dict[str, str] = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}

# Words in the text of a `device=` argument that make it a device variable (`device=dev`, `device=self.gpu`).
DEVICE_VARIABLE_WORDS = ("device", "dev", "gpu", "cuda", "rank")

# Words in the name of a callable we cannot see whose tensor arguments must share a device.
TENSORS_MEET_IN_CALLEE_WORDS = ("loss", "criterion", "crit", "metric", "model", "net")

# Words in the name of a callable we cannot see that make it a loss.
LOSS_WORDS = ("loss", "criterion", "crit")

# Words in the name of a callable we cannot see that make it a model.
MODEL_NAME_WORDS = ("model", "net", "encoder", "decoder", "classifier", "backbone")

# `build_model(cfg)`, `get_encoder()`: first words of functions that make or fetch a model, not models.
BUILDER_VERBS = frozenset({"build", "create", "make", "get", "load", "init", "setup", "construct", "prepare",
                           "define", "instantiate", "new", "from", "fetch"})

# `save_model(net, path)`, `train_model(model, loader)`: first words of functions that do
# something with a model they are handed, not models themselves.
MODEL_HANDLING_VERBS = frozenset({"save", "train", "test", "eval", "evaluate", "run", "fit", "predict", "export",
                                  "show", "plot", "log", "print", "summarize", "summary", "freeze", "update",
                                  "copy", "compute", "check", "validate", "infer", "count", "wrap", "convert",
                                  "to", "set", "apply", "register", "profile", "benchmark", "visualize"})

# `resnet_block(dim, dim)`, `net_fn(...)`: a name ending so makes a part of a model (often a
# `partial` of a class), or is some other callable: what it returns is no model's output.
PART_MAKER_NOUNS = frozenset({"block", "blocks", "layer", "layers", "fn", "fun", "func", "function", "factory",
                              "maker", "cls", "klass", "class", "builder", "type", "ctor", "constructor", "cfg",
                              "config", "kwargs"})

# A tensor of sequence lengths (`lengths`, `src_len`, `seq_lens`): a model packing its input
# (`pack_padded_sequence`) wants it on the CPU, beside data on the GPU.
LENGTH_WORDS = frozenset({"len", "lens", "length", "lengths"})

# Words of a setting, flag or test about using GPUs (split from names by `cpu_mode.words`).
GPU_WORDS = frozenset({"cuda", "gpu", "gpus", "ngpu", "ngpus", "accel", "accelerator", "mps", "xpu",
                       "distributed", "ddp", "world", "multigpu", "cudnn"})

# Text whose presence anywhere in a program (a name, a string, a comment) says it may put data
# on an accelerator: where none is, and the program trains a model itself, all its data stays
# on the host (`FlowQueries.trains_only_on_the_host`). Read case-insensitively, as substrings.
ACCELERATOR_TEXT = ("cuda", "device", "gpu", "mps", "xpu", "accel", "distributed", "parallel", "pin_memory",
                    "nccl", ".to(", "torch.compile")

# Words that turn a GPU setting around (`--no-cuda`, `disable_gpu`).
NEGATION_WORDS = frozenset({"no", "not", "disable", "disabled", "without", "nocuda", "nogpu"})

# Words of a setting that names the device itself (`--device`, `args.dev`).
DEVICE_SETTING_WORDS = frozenset({"device", "dev"})

# Words of a test that asks whether the program runs without a GPU (`use_cpu`, `cuda_available`).
CPU_MODE_WORDS = frozenset({"cpu", "available"})

# Words of a setting read as a GPU switch (`opt.use_gpu`, `x.is_cuda`).
GPU_SETTING_WORDS = frozenset({"cuda", "gpu", "gpus", "ngpu", "ngpus", "accel", "accelerator", "mps", "xpu"})


def turns_the_gpu_on(name_words: set[str]) -> bool:
    """Whether a switch so named means the GPU when true (`--cuda`, `use_gpu`), not the CPU
    (`--cpu`, `--no-cuda`)."""
    return bool(name_words & GPU_SETTING_WORDS) and "cpu" not in name_words and not name_words & NEGATION_WORDS


# Words in a test, a flag, a decorator or a helper's name that make it about the device. A
# distributed run (`if dist.is_initialized():`, `world_size > 1`) counts too: multi-process
# training code is written for NCCL, which needs GPUs.
DEVICE_CONTEXT_WORDS = ("cuda", "gpu", "device", "accel", "cpu", "avail", "mps", "xpu", "dist", "world_size", "rank")
# Of those, the ones other words hold (`distill`, `distance`, `ranking`, `timestamps`): they
# count only as words of their own, or (a rank) at the end of one (`*rank`: `localrank`).
WHOLE_DEVICE_WORDS: dict[str, frozenset[str]] = {
    "dist": frozenset({"dist", "distributed"}),
    "mps": frozenset({"mps"}),
    "rank": frozenset({"rank", "ranks", "*rank"}),
}

# Words of the receiver of a `.step(action)` call that make it a simulated environment (gym's
# `env.step`, `envs.step`): what it is handed must be on the host, every step.
ENVIRONMENT_WORDS = frozenset({"env", "envs", "environment", "environments", "venv", "simulator", "sim", "game"})

# Words in an option's names that make it a device flag (`--cuda`, `--use-gpu`, `--cpu-only`).
DEVICE_FLAG_WORDS = ("cuda", "gpu", "cpu", "device", "mps", "xpu", "accelerator")

# Parts of the names of `forward` inputs that are numbers, not data (`batch_size`, `num_steps`,
# `step`, `dim`, `idx`): never taken for tensors where the module is.
FORWARD_NUMBER_WORDS = ("size", "num", "count", "step", "dim", "idx", "index")

# Words of names of what stays host data whatever device a program runs on: a vocabulary, a
# tokenizer, the program's options, its logged numbers (`torch.save((vocab_src, vocab_tgt), path)`),
# a text dataset's examples read before training (`torch.save(train_data.examples, path)`).
HOST_DATA_WORDS = frozenset({"vocab", "vocabs", "vocabulary", "tokenizer", "stoi", "itos", "args", "hparams",
                             "config", "cfg", "history", "metrics", "examples"})
# ... unless the name also says it holds tensors or a model's state (`vocab_embeddings`).
TENSOR_HOLDER_WORDS = frozenset({"model", "net", "state", "weights", "weight", "params", "embedding", "embeddings",
                                 "tensor", "tensors", "optimizer", "checkpoint", "ckpt"})
# Words of names of what holds training state but no model's weights: `optimizer.load_state_dict`,
# `self.lr_scheduler.load_state_dict`, `scaler.load_state_dict` load no module.
TRAINING_STATE_WORDS = frozenset({"optimizer", "optimizers", "optim", "scheduler", "schedulers", "sched", "scaler"})
# Word-to-index tables: `word2idx`, `char_to_index`, `token2id`.
_INDEX_TABLE = re.compile(r"(?:word|char|token|tag|label)s?_?(?:2|to)_?(?:idx|index|id|ix)"
                          r"|(?:idx|index|id|ix)_?(?:2|to)_?(?:word|char|token|tag|label)s?")


def names_host_data(name: str) -> bool:
    """A variable's name says it holds host data only (see `HOST_DATA_WORDS`)."""
    named = set(words(name))
    if named & TENSOR_HOLDER_WORDS:
        return False
    return bool(named & HOST_DATA_WORDS) or _INDEX_TABLE.fullmatch(name.lower()) is not None


# Words of a weights file's name that say it was converted from another framework's weights
# (`vgg16-caffe.pth`, `yolov4.darknet.pth`, `bert_tf_converted.bin`).
OTHER_FRAMEWORK_WORDS = frozenset({"caffe", "caffe2", "tf", "tensorflow", "keras", "mxnet", "chainer", "darknet",
                                   "paddle", "jax", "flax", "lua"})

# Words in a checkpoint path that say a script reads its own earlier runs back (a resume).
RESUME_PATH_WORDS = ("resume", "checkpoint", "ckpt")

# Words in the name of a function we cannot see that, handed a model, reads a checkpoint into
# it (`restart_from_checkpoint(path, state_dict=model)`, `load_weights(model, path)`).
CHECKPOINT_READER_WORDS = ("load", "resume", "restart", "restore")

# Names a parsed command line usually goes by where it is passed around (`def main(args)`,
# `train(opt)`): read as argparse namespaces beside the names bound by `parse_args()`.
OPTION_NAMESPACE_NAMES = frozenset({"args", "opt", "opts", "options", "flags", "hparams", "cfg", "config", "argv"})

# Words in the name of a function that runs training steps (`train_one_epoch`, `fit`): a
# loop calling one is a training loop, whose backward passes are out of sight.
TRAINING_CALL_WORDS = ("train", "epoch", "fit")

# Words of code that asks how many GPUs there are, or requires several: a test
# (`if torch.cuda.device_count() > 1:`) or a test decorator (`@RunIf(min_cuda_gpus=2)`,
# `@skip_if_lt_x_gpu(2)`, `@require_multi_gpu`, `@pytest.mark.multigpu`).
GPU_COUNT_WORDS = ("device_count", "n_gpu", "num_gpu", "ngpu", "gpu_count", "min_cuda_gpus", "min_gpus",
                   "multi_gpu", "multigpu", "lt_x_gpu")
