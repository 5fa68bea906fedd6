"""Hot reload under load: `spanseek serve` on an alias, closed-loop clients, and the alias switched between two
indexes (built by the same model) every --interval seconds; the service polls the alias.

    python bench/reload_under_load.py --indexes work/index-a work/index-b --workdir runs/reload \
        --out runs/reload/reload.json

Clients honour Retry-After on 429 (admission control sheds load on a busy machine; that is not the reload's doing,
so statuses are reported for requests that overlapped a swap and for the others). Reports the latency of requests that overlapped a swap against the others,
the time from each switch to the first answer from the new index, the reload time the service measured, answers
after that point that still came from the old index (should be 0), and the server's RSS (the old index released).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_load import free_port, make_questions, percentiles, wait_ready  # noqa: E402
from service_reliability import rss_mb, start, stop  # noqa: E402

from spanseek.core.alias import switch_alias  # noqa: E402
from spanseek.core.phrase_index import DOCS, PASSAGES, read_jsonl  # noqa: E402


async def client_loop(session: aiohttp.ClientSession, questions: list[str], n: int, done: asyncio.Event,
                      records: list[tuple[float, float, int | str, frozenset[str]]]) -> None:
    i = n
    while not done.is_set():
        sent = time.monotonic()
        try:
            async with session.post("/search?unit=doc", json={"query": questions[i % len(questions)], "top_k": 3}) as r:
                body = await r.json() if r.status == 200 else {}
                retry_after = float(r.headers.get("Retry-After", "1")) if r.status == 429 else 0.0
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as e:  # a lost request: counted under the exception's name
            body, retry_after, status = {}, 0.0, type(e).__name__
        docs = frozenset(h["title"] for res in body.get("results", []) for h in res["hits"])
        records.append((sent, time.monotonic(), status, docs))
        await asyncio.sleep(retry_after)  # as a well-behaved client (spanseek.client) does
        i += len(questions) // 7 + 1


async def run(args: argparse.Namespace) -> dict:
    indexes = [Path(p).resolve() for p in args.indexes]
    doc_ids = [{d["title"] for d in read_jsonl(ix / DOCS)} for ix in indexes]  # SQuAD ids repeat; titles not
    if doc_ids[0] & doc_ids[1]:
        raise SystemExit("the two indexes share document titles; answers could not tell them apart")
    questions = make_questions(SimpleNamespace(index=SimpleNamespace(passages=read_jsonl(indexes[0] / PASSAGES))),
                               400)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    alias = switch_alias(Path(args.workdir) / "current", indexes[0]).path
    port = free_port()
    proc = start(alias, args.model, port, ["--index-poll-s", str(args.poll)])
    records: list[tuple[float, float, int | str, frozenset[str]]] = []
    swaps: list[dict] = []
    rss: list[tuple[float, float]] = []
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=aiohttp.ClientTimeout(total=120)) as s:
            await wait_ready(s, proc)
            rss_idle = rss_mb(proc.pid)
            done = asyncio.Event()
            clients = [asyncio.create_task(client_loop(s, questions, n, done, records)) for n in range(args.clients)]
            for k in range(args.swaps + 1):
                settle = time.monotonic() + args.interval
                while time.monotonic() < settle:
                    rss.append((time.monotonic(), rss_mb(proc.pid)))
                    await asyncio.sleep(0.25)
                if k == args.swaps:
                    break
                new = (k + 1) % 2
                switched = time.monotonic()
                switch_alias(alias, indexes[new])
                while True:  # the first answer from the new index marks the swap
                    fresh = [r for r in records if r[0] > switched and r[3] and r[3] <= doc_ids[new]]
                    if fresh:
                        break
                    if time.monotonic() > switched + 300:
                        raise RuntimeError("the service never answered from the new index")
                    rss.append((time.monotonic(), rss_mb(proc.pid)))
                    await asyncio.sleep(0.05)
                async with s.get("/info") as r:
                    reload = (await r.json())["service"]["reload"]
                swaps.append({"switched": switched, "serving": min(r[1] for r in fresh), "to": new,
                              "reload_seconds": reload["last"].get("seconds"),
                              "load_seconds": reload["last"].get("load_seconds")})
            done.set()
            await asyncio.gather(*clients)
            async with s.get("/info") as r:
                info = await r.json()
            rss_end = rss_mb(proc.pid)
    finally:
        stop(proc)

    def overlaps(r: tuple) -> bool:
        return any(r[0] < sw["serving"] + 0.5 and r[1] > sw["switched"] for sw in swaps)

    during = [r[1] - r[0] for r in records if r[2] == 200 and overlaps(r)]
    steady = [r[1] - r[0] for r in records if r[2] == 200 and not overlaps(r)]
    stale = 0
    for k, sw in enumerate(swaps):  # sent after the new index answered, before the next switch: must be new
        end = swaps[k + 1]["switched"] if k + 1 < len(swaps) else float("inf")
        stale += sum(1 for r in records if sw["serving"] < r[0] and r[1] < end and not r[3] <= doc_ids[sw["to"]])
    statuses: dict[str, dict[str, int]] = {"during_swaps": {}, "otherwise": {}}
    for r in records:
        counts = statuses["during_swaps" if overlaps(r) else "otherwise"]
        counts[str(r[2])] = counts.get(str(r[2]), 0) + 1
    return {
        "indexes": [str(p) for p in indexes], "clients": args.clients, "swaps": len(swaps), "poll_s": args.poll,
        "requests": len(records), "statuses": statuses, "stale_answers_after_swap": stale,
        "switch_to_new_answers_s": [round(sw["serving"] - sw["switched"], 3) for sw in swaps],
        "reload_seconds_by_service": [sw["reload_seconds"] for sw in swaps],
        "of_which_loading_s": [sw["load_seconds"] for sw in swaps],
        "latency_during_swaps": {"n": len(during), **percentiles(during)},
        "latency_otherwise": {"n": len(steady), **percentiles(steady)},
        "rss_mb": {"ready": rss_idle, "peak": max(v for _, v in rss), "end": rss_end},
        "reload_info": info["service"]["reload"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--indexes", nargs=2, required=True, help="two index directories built by the same model")
    p.add_argument("--model", default="default")
    p.add_argument("--workdir", required=True, help="folder for the alias")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--swaps", type=int, default=4)
    p.add_argument("--interval", type=float, default=10.0, help="seconds between switches")
    p.add_argument("--poll", type=float, default=0.5, help="the service's SPANSEEK_INDEX_POLL_S")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    print(text)  # noqa: T201
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
