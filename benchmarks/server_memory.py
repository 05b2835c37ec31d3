"""How much memory `torchdevlint server` holds after thousands of keystrokes.

    python benchmarks/server_memory.py                     # 10,000 keystrokes, 20 ms apart
    python benchmarks/server_memory.py --edits 3000 --pause 0.15

Opens the first 300 lines of the generated file `server_latency.py` types into, then types one
character at a time inside a function body, over standard input and output with pygls' client,
as an editor does while typing (no save). Prints the server process's resident memory (VmRSS,
from /proc: Linux) after opening the file and after each tenth of the edits. Needs the `server`
extra.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_latency import close_server, keystrokes, open_in_server, thousand_lines, type_version


def resident_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))


async def measure(edits: int, pause: float) -> list[tuple[int, int]]:
    folder = Path(tempfile.mkdtemp())
    path = folder / "model.py"
    text = "\n".join(thousand_lines().splitlines()[:300]) + "\n"
    path.write_text(text, encoding="utf-8")
    versions = keystrokes(text, edits + 1)
    client, _ = await open_in_server("server-memory", folder, path, versions[0])
    server = client._server  # the process pygls started
    assert server is not None
    samples = [(0, resident_mib(server.pid))]
    for version, typed in enumerate(versions[1:], start=2):
        type_version(client, path, version, typed)
        await asyncio.sleep(pause)
        if (version - 1) % max(1, edits // 10) == 0:
            samples.append((version - 1, resident_mib(server.pid)))
    await close_server(client)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=10_000)
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between keystrokes")
    args = parser.parse_args()
    started = time.perf_counter()
    samples = asyncio.run(measure(args.edits, args.pause))
    print(f"{args.edits} keystrokes, {args.pause * 1000:.0f} ms apart, in {time.perf_counter() - started:.0f} s")
    print("| edits | server resident MiB |\n|---:|---:|")
    for edits, mib in samples:
        print(f"| {edits} | {mib} |")


if __name__ == "__main__":
    main()
