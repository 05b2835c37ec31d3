"""Write `torchdevlint/analysis/brains/numpy_conversions.py` by asking NumPy itself.

Which NumPy functions turn a tensor argument into an array (and so fail on a GPU tensor with
"can't convert cuda:0 device type tensor to numpy") is NumPy's behaviour, not a list anyone
should type: `np.transpose(t, (1, 2, 0))` converts, while `np.squeeze(t)` and `np.swapaxes(t,
0, 1)` call the tensor's own method and hand back a tensor. So each public NumPy function is
called with CPU tensors and, where that works, again with one argument on `verify`'s emulated
GPU (whose tensors refuse `__array__` as CUDA's do); the positions whose GPU tensor makes the
call fail with that error are recorded.

Run: `python scripts/generate_numpy_brain.py` (add `--check` to compare instead of write). It
needs torch and NumPy; linting never imports either.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "torchdevlint" / "analysis" / "brains" / "numpy_conversions.py"
_REFUSED = "device type tensor to numpy"
# Functions that write files, print or wait on input are not called.
_NOT_CALLED = frozenset({"save", "savez", "savez_compressed", "savetxt", "info", "show_config", "show_runtime",
                         "test", "source", "lookfor", "who", "get_include", "fromfile", "tofile", "memmap"})


def _works(function: Callable[..., Any], arguments: Sequence[Any]) -> bool:
    try:
        function(*arguments)
    except Exception:  # noqa: BLE001  # any failure on the CPU means this shape of call is not one it takes
        return False
    return True


def _refuses_the_gpu_tensor(function: Callable[..., Any], arguments: Sequence[Any]) -> bool:
    try:
        function(*arguments)
    except TypeError as error:
        return _REFUSED in str(error)
    except Exception:  # noqa: BLE001  # another failure is not the conversion
        return False
    return False


def probe() -> dict[str, tuple[int, ...]]:
    """Qualified NumPy name -> the positions of the arguments it converts to arrays."""
    import numpy
    import torch

    from torchdevlint.verify.emulation import emulated_gpu

    found: dict[str, tuple[int, ...]] = {}
    with emulated_gpu(), tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = os.getcwd()
        os.chdir(scratch)
        try:
            host = torch.rand(4, 4)
            gpu = host.cuda()
            for name in sorted(dir(numpy)):
                function = getattr(numpy, name)
                if name.startswith("_") or name in _NOT_CALLED or isinstance(function, type) or not callable(function):
                    continue
                # One tensor, two tensors, then a list of tensors (`np.concatenate(outputs)`).
                for count in (1, 2):
                    if _works(function, [host] * count):
                        positions = tuple(position for position in range(count)
                                          if _refuses_the_gpu_tensor(function, [gpu if index == position else host
                                                                                for index in range(count)]))
                        break
                else:
                    listed = _works(function, [[host, host]]) and _refuses_the_gpu_tensor(function, [[gpu, gpu]])
                    positions = (0,) if listed else ()
                if positions:
                    found[f"numpy.{name}"] = positions
        finally:
            os.chdir(previous)
    return found


def render(found: dict[str, tuple[int, ...]], numpy_version: str) -> str:
    lines = [
        '"""Which NumPy functions convert tensor arguments to arrays, as NumPy '
        f'{numpy_version} behaves. Generated',
        "by scripts/generate_numpy_brain.py, which calls each one with a tensor on verify's emulated GPU:",
        'do not edit."""',
        "",
        f"NUMPY_VERSION = {numpy_version!r}",
        "",
        "# Qualified name -> the positional arguments that a tensor on a GPU makes fail there.",
        "CONVERTS_POSITIONS: dict[str, tuple[int, ...]] = {",
    ]
    lines.extend(f"    {name!r}: {positions!r}," for name, positions in sorted(found.items()))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the module differs from what NumPy gives")
    options = parser.parse_args()
    import numpy

    text = render(probe(), numpy.__version__)
    if options.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUTPUT} differs from NumPy {numpy.__version__}; run {Path(__file__).name}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
