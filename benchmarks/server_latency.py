"""How long `torchdevlint server` takes to re-lint a buffer after one keystroke.

    python benchmarks/server_latency.py                  # a generated 1,000-line PyTorch file
    python benchmarks/server_latency.py --file PATH      # any Python file
    python benchmarks/server_latency.py --runs 40
    python benchmarks/server_latency.py --typing code    # a name typed on a new line

Each run types one character in the middle of the file and times:
  - the lint itself, on the server's own code path (the worker's job), with the buffer's
    parser and function flows kept from the version before, as the server keeps them, and,
    for comparison, with the parser only (a fresh interpretation of every function) and with
    nothing (a full parse too);
  - end to end over standard input and output with pygls' client, as while typing (no save):
    from the `didChange` the editor sends to the `publishDiagnostics` for that version.
Prints medians and 90th percentiles in milliseconds. Needs the `server` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_corpus import model_file, training_script

from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.registry import all_rules
from torchdevlint.runner import RunSettings, collect_garbage_rarely
from torchdevlint.server import _Buffer, _Kept, _lint


def thousand_lines() -> str:
    """A model file and a training script, as one 1,000-line module (deterministic)."""
    rng = random.Random(0)
    text = model_file(rng, 0, 1000) + "\n\n" + training_script(rng, 1, 560)
    return "\n".join(text.splitlines()[:1000]) + "\n"


def keystrokes(text: str, count: int, typing: str = "comment") -> list[str]:
    """Successive versions of `text`, each with one more character typed inside a function
    body near the middle of the file: at the end of a line, a comment (`typing="comment"`),
    or on a new line below it, a name being written (`typing="code"`: `t`, `to`, `tot`, ...,
    each version a statement of the function that its analysis must read again)."""
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    line = next(i for i in range(middle, len(lines)) if lines[i].startswith("        ") and lines[i].strip()
                and not lines[i].rstrip().endswith((":", ",", "(", "[", "{", "\\")))
    offset = sum(len(item) for item in lines[:line]) + len(lines[line].rstrip("\n"))
    indent = lines[line][:len(lines[line]) - len(lines[line].lstrip())]
    versions = []
    typed = "\n" + indent if typing == "code" else ""
    for index in range(count):
        if typing == "code":
            typed += "total"[index % 5] if index < 5 else "x"
        else:
            typed += "  # x"[index % 5] if index < 5 else "x"
        versions.append(text[:offset] + typed + text[offset:])
    return versions


def milliseconds(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(samples) * 1000:6.1f} ms   p90 {p90 * 1000:6.1f} ms"


def time_lints(path: Path, versions: list[str]) -> dict[str, list[float]]:
    """Each version linted three ways, taking turns (so a slow spell of the machine falls on
    all three): keeping the parser and the flows, as the server does; keeping the parser
    only; keeping nothing."""
    settings = RunSettings(rule_codes=tuple(rule.code for rule in all_rules()))
    kept, parser_only = _Kept(), _Kept()
    for buffer_state in (kept, parser_only):
        _lint(_Buffer(path.as_uri(), path, versions[0]), settings, buffer_state)
    samples: dict[str, list[float]] = {KEPT: [], PARSER_ONLY: [], NOTHING: []}
    for text in versions[1:]:
        parser_only.flows = FlowMemory()
        for name, buffer_state in ((KEPT, kept), (PARSER_ONLY, parser_only), (NOTHING, _Kept())):
            start = time.perf_counter()
            _lint(_Buffer(path.as_uri(), path, text), settings, buffer_state)
            samples[name].append(time.perf_counter() - start)
    return samples


KEPT = "lint, parser and flows kept (the server)"
PARSER_ONLY = "lint, parser kept, flows not"
NOTHING = "lint, nothing kept"


async def open_in_server(name: str, folder: Path, path: Path, text: str
                         ) -> tuple[LanguageClient, asyncio.Queue[tuple[float, int | None]]]:
    """A `torchdevlint server` started in `folder` over pygls' client, initialised, with `path`
    open as `text` (version 1) and its first diagnostics in; the queue gets (arrival time,
    version) of every later publication."""
    client = LanguageClient(name, "0")
    published: asyncio.Queue[tuple[float, int | None]] = asyncio.Queue()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def _published(params: types.PublishDiagnosticsParams) -> None:
        published.put_nowait((time.perf_counter(), params.version))

    await client.start_io(sys.executable, "-m", "torchdevlint", "server", cwd=str(folder))
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         root_uri=folder.as_uri()))
    client.initialized(types.InitializedParams())
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=text)))
    await published.get()
    return client, published


def type_version(client: LanguageClient, path: Path, version: int, text: str) -> None:
    """The buffer's whole text after a keystroke, as editors send it."""
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def close_server(client: LanguageClient) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def time_round_trips(folder: Path, path: Path, versions: list[str]) -> list[float]:
    client, published = await open_in_server("latency-benchmark", folder, path, versions[0])
    samples = []
    for version, text in enumerate(versions[1:], start=2):
        await asyncio.sleep(0.2)  # a pause between keystrokes: each is measured on its own
        start = time.perf_counter()
        type_version(client, path, version, text)
        while True:
            arrived, shown = await published.get()
            if shown == version:
                break
        samples.append(arrived - start)
    await close_server(client)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, help="the file to type in (default: a generated 1,000-line file)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--typing", choices=("comment", "code"), default="comment",
                        help="what is typed: a comment at the end of a line, or a name on a new line")
    args = parser.parse_args()
    collect_garbage_rarely()  # as `torchdevlint server` does when it starts
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        # A project of its own, as an editor's workspace is: without a marker the project
        # would be the temporary folder's parent, every file in it scanned for project facts.
        (folder / ".git").mkdir()
        path = folder / "model.py"
        text = args.file.read_text(encoding="utf-8") if args.file else thousand_lines()
        path.write_text(text, encoding="utf-8")
        versions = keystrokes(text, args.runs + 1, args.typing)
        print(f"{path.name if not args.file else args.file}: {len(text.splitlines())} lines, "
              f"{args.runs} keystrokes ({args.typing})")
        for name, samples in time_lints(path, versions).items():
            print(f"  {name:<42} {milliseconds(samples)}")
        round_trips = asyncio.run(time_round_trips(folder, path, versions))
        print(f"  {'didChange -> diagnostics (typing, no save)':<42} {milliseconds(round_trips)}")


if __name__ == "__main__":
    main()
