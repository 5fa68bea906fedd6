"""A searching client's latency alone and during `spanseek sync`, and how long each sync takes, by `write_nice`.

    python bench/sync_under_search.py --index work/demo-index --model default --workdir work/sync-bench \
        --write-nice 0 5 --repeats 2 --out bench/results/sync_under_search.json

For each ``--write-nice`` value in turn (the whole list ``--repeats`` times, so the machine's other load, which
drifts over minutes, weighs on each alike) a server is started with writes on at that ``write_nice``, and
``--clients`` closed-loop searching clients (bench/live_writes.py's: phrase unit, top_k 10) run throughout. After
``--warmup`` unmeasured seconds, ``--rounds`` times: ``--seconds`` of search load alone, then `spanseek sync` of a
fresh folder of ``--files`` text files (``--paragraphs`` paragraphs of one index document each, under names no earlier
round used, so every file is written). The searches sent in each window give the latency of the two conditions.

Prints a table and writes JSON with the CPU's name (bench/machine.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_writes import KEY, report, searching, server_arguments, summary  # noqa: E402
from machine import cpu_name  # noqa: E402
from service_load import free_port, make_questions, wait_ready  # noqa: E402
from service_reliability import start, stop  # noqa: E402

from spanseek.core.phrase_index import PASSAGES, read_jsonl  # noqa: E402


def folders(index: Path, root: Path, rounds: int, files: int, paragraphs: int) -> list[Path]:
    """A folder of ``files`` text files for each round, each file the first ``paragraphs`` paragraphs of an index
    document (the documents taken in turn across rounds), named by its round."""
    by_doc: dict[int, list[str]] = {}
    for p in read_jsonl(index / PASSAGES):
        by_doc.setdefault(p["doc"], []).append(p["text"])
    docs = sorted(by_doc.values(), key=len, reverse=True)
    out = []
    for r in range(rounds):
        folder = root / f"round-{r}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for i in range(files):
            texts = docs[(r * files + i) % len(docs)][:paragraphs]
            (folder / f"r{r}-doc{i}.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
        out.append(folder)
    return out


async def one_server(args: argparse.Namespace, index: Path, write_nice: int, workdir: Path) -> dict:
    """Alone and sync windows on a server at ``write_nice``: each condition's latency and the syncs' durations."""
    shutil.rmtree(workdir, ignore_errors=True)
    dirs = folders(index, workdir / "files", args.rounds, args.files, args.paragraphs)
    port = free_port()
    proc = start(index, args.model, port, ["--writes", "--live-dir", str(workdir / "live"), "--api-key", KEY,
                                           "--merge-tokens", "0", "--write-nice", str(write_nice)])
    questions = make_questions(SimpleNamespace(index=SimpleNamespace(passages=read_jsonl(index / PASSAGES))), 300)
    alone, syncing, took, statuses = [], [], [], []
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=aiohttp.ClientTimeout(total=600)) as s:
            await wait_ready(s, proc)
            stop_at, records = asyncio.Event(), []
            clients = [asyncio.create_task(searching(s, questions, n, stop_at, records)) for n in range(args.clients)]
            await asyncio.sleep(args.warmup)
            for r, folder in enumerate(dirs):
                t0 = time.monotonic()
                await asyncio.sleep(args.seconds)
                alone.append((t0, time.monotonic()))
                t0 = time.monotonic()
                sync = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "spanseek.cli", "sync", str(folder), "--url", f"http://127.0.0.1:{port}",
                    "--source", f"bench-{r}", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                    env={**os.environ, "SPANSEEK_API_KEY": KEY})
                _, err = await sync.communicate()
                syncing.append((t0, time.monotonic()))
                took.append(round(time.monotonic() - t0, 2))
                statuses.append(sync.returncode)
                if sync.returncode:
                    print(err.decode()[-2000:], file=sys.stderr)
            stop_at.set()
            await asyncio.gather(*clients)
    finally:
        stop(proc)
    during, base = summary(records, 0, 0, syncing), summary(records, 0, 0, alone)
    return {"write_nice": write_nice, "alone": base, "during_sync": during, "sync_seconds": took,
            "sync_exit": statuses, "p50_ratio": during["p50_ms"] / base["p50_ms"] if base["p50_ms"] else None}


async def run(args: argparse.Namespace) -> dict:
    index = Path(args.index).resolve()
    runs = []
    for repeat in range(args.repeats):
        for nice in args.write_nice:
            runs.append(await one_server(args, index, nice, Path(args.workdir) / f"nice{nice}-{repeat}"))
    return {"cpu": cpu_name(), "index": str(index), "clients": args.clients, "files": args.files,
            "paragraphs": args.paragraphs, "rounds": args.rounds, "runs": runs}


def table(r: dict) -> str:
    rows = [f"CPU: {r['cpu']}; {r['clients']} searching clients; syncs of {r['files']} files of {r['paragraphs']} "
            "paragraphs",
            "write_nice  search p50/p99 alone (ms)  during a sync (ms)  p50 ratio  each sync (s)"]
    for run in r["runs"]:
        a, d = run["alone"], run["during_sync"]
        rows.append(f"{run['write_nice']:10d}  {a['p50_ms']:8.1f} / {a['p99_ms']:8.1f}  {d['p50_ms']:8.1f} / "
                    f"{d['p99_ms']:8.1f}  {run['p50_ratio'] or float('nan'):9.2f}  "
                    f"{', '.join(map(str, run['sync_seconds']))}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(p, clients=1)
    p.add_argument("--write-nice", type=int, nargs="+", default=[0, 5], help="the server's write_nice values")
    p.add_argument("--repeats", type=int, default=2, help="times the list of --write-nice values is run, in turn")
    p.add_argument("--rounds", type=int, default=2, help="alone windows and syncs on each server")
    p.add_argument("--files", type=int, default=20, help="text files in each sync")
    p.add_argument("--paragraphs", type=int, default=4, help="paragraphs in each file")
    p.add_argument("--seconds", type=float, default=15.0, help="seconds of each window of search load alone")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds of search load before the first window")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    report(result, table(result), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
