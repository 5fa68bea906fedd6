"""Live writes under search load: how soon a written document is searchable, what writes cost the searches, a
background merge under load, and kill -9 during writes.

    python bench/live_writes.py --index work/demo-index --model default --workdir work/live-bench \
        --out bench/results/live_writes.json

Starts `spanseek serve --writes` (a fresh live directory under --workdir, an API key) and runs, with --clients
closed-loop searching clients (phrase unit, top_k 10, honouring Retry-After) throughout:

1. baseline: --seconds of search load alone after --warmup unmeasured seconds, and again --seconds after the
   writes (the machine's other load drifts); latency p50/p99 of both windows together;
2. writes: --writes single-document `PUT /documents`, one at a time (each document one passage of the index,
   under a new id). After each acknowledgement a probe searches for it (unit=doc, filtered to its id) until it is
   found: the visible delay is from the acknowledgement to the answer of the first probe that finds it (so it
   includes one search's latency). The searching clients' latency is recorded meanwhile;
2b. files (--files > 0): --files PDFs (--file-paragraphs paragraphs of an index document each, written with fpdf2
   as bench/document_formats.py writes them) in rounds of --file-batch: uploaded one at a time with
   `PUT /files/{name}`, as `spanseek sync` sends them, then the same documents (read here as the server reads them)
   with `PUT /documents`, then no writes for as long as the uploads took. The searching clients' latency in each of
   the three, so what reading the files costs the searches shows apart from what encoding them costs (the rounds
   interleave them: the machine's other load drifts);
3. merge (unless --no-merge): `POST /admin/compact` under the same load, every answer's status counted until the
   merge is done;
4. kill -9 (--kills > 0): a second server over a fresh live directory; --kill-writes single-document writes, and
   the server killed (SIGKILL) --kills times at random moments, some while a write is in flight, then restarted.
   After each restart every acknowledged document must be returned by `GET /documents/{id}` and found by a search,
   and a write that was not acknowledged must be all there (found, every passage) or not at all.
5. write cost (--cost-at, e.g. 0,600,1200): what one write costs with that many documents already written (index
   passages under new ids, one a document), median of --cost-writes: the store's upsert of a pre-encoded document
   (``LiveStore.upsert``, its snapshot made; the vectors are the index's own rows for the passage, so no model runs)
   over a copy of the index, and a `PUT /documents` of one document end to end (the model encodes it) on a server
   without search load, its segment filled by batched writes between the sizes.

Prints a table and writes JSON with the CPU's name (bench/machine.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from document_formats import write_pdf  # noqa: E402
from machine import cpu_name  # noqa: E402
from service_load import free_port, make_questions, percentiles, wait_ready  # noqa: E402
from service_reliability import start, stop  # noqa: E402

from spanseek.core.config import EncoderConfig  # noqa: E402
from spanseek.core.io import Document, document_json  # noqa: E402
from spanseek.core.model import CONFIG_NAME, load_tokenizer, resolve_model  # noqa: E402
from spanseek.core.phrase_index import DOCS, PASSAGES, read_jsonl  # noqa: E402
from spanseek.core.segment import EncodedDocument  # noqa: E402
from spanseek.indexer.chunking import model_token_counter  # noqa: E402
from spanseek.indexer.ingest import IngestOptions, read_document  # noqa: E402

KEY = "live-writes-bench"
HEADERS = {"X-API-Key": KEY}


def serve(index: Path, model: str, port: int, live_dir: Path, write_wait_ms: float | None = None):
    extra = [] if write_wait_ms is None else ["--write-wait-ms", str(write_wait_ms)]
    return start(index, model, port, ["--writes", "--live-dir", str(live_dir), "--api-key", KEY, "--merge-tokens", "0",
                                      *extra])


def documents(index: Path, n: int, prefix: str, seed: int = 0) -> list[dict]:
    """``n`` one-passage documents taken from the index's passages, under new ids."""
    passages = read_jsonl(index / PASSAGES)
    rng = random.Random(seed)
    return [{"id": f"{prefix}-{i}", "title": f"Live {i}", "paragraphs": [rng.choice(passages)["text"]],
             "meta": {"source": "live-writes-bench"}} for i in range(n)]


def pdf_files(index: Path, model: str, n: int, paragraphs: int, folder: Path) -> list[tuple[Path, dict]]:
    """``n`` PDFs of ``paragraphs`` paragraphs of the index's documents each (cycling through them, a run of
    paragraphs further on each round), each with the document the server makes of it (``read_document``, the
    model's tokenizer), as ``PUT /documents`` takes it."""
    by_doc: dict[int, list[str]] = {}
    for p in read_jsonl(index / PASSAGES):
        by_doc.setdefault(p["doc"], []).append(p["text"])
    titles = [d["title"] for d in read_jsonl(index / DOCS)]
    count = model_token_counter(load_tokenizer(EncoderConfig.load(resolve_model(model) / CONFIG_NAME)))
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        d = i % len(titles)
        texts = by_doc[d]
        start = (i // len(titles)) * paragraphs % max(1, len(texts) - paragraphs)
        path = folder / f"upload-{i}.pdf"
        if not path.exists():
            write_pdf({"title": titles[d], "paragraphs": [{"context": t} for t in texts[start:start + paragraphs]]},
                      path)
        doc = read_document(path, path.name, count, IngestOptions())
        assert not isinstance(doc, str), f"{path}: {doc}"
        out.append((path, {**document_json(doc), "id": f"as-documents/{path.name}"}))
    return out


async def searching(s: aiohttp.ClientSession, questions: list[str], n: int, stop_at: asyncio.Event,
                    records: list[tuple[float, float, int | str]]) -> None:
    """A closed-loop client: (sent, latency, status) per request; honours Retry-After."""
    i = n
    while not stop_at.is_set():
        sent = time.monotonic()
        try:
            async with s.post("/search?unit=phrase", json={"query": questions[i % len(questions)], "top_k": 10},
                              headers=HEADERS) as r:
                await r.read()
                status: int | str = r.status
                wait = float(r.headers.get("Retry-After", "1")) if r.status == 429 else 0.0
        except (aiohttp.ClientError, TimeoutError) as e:
            status, wait = type(e).__name__, 0.0
        records.append((sent, time.monotonic() - sent, status))
        await asyncio.sleep(wait)
        i += 7


async def found(s: aiohttp.ClientSession, doc: dict) -> bool:
    """Whether a search filtered to the document finds it (by its text); a 429 is asked again after its Retry-After
    (the search was refused, not answered)."""
    body = {"query": doc["paragraphs"][0][:200], "top_k": 1, "filter": {"doc_ids": [doc["id"]]}}
    while True:
        async with s.post("/search?unit=doc", json=body, headers=HEADERS) as r:
            if r.status == 429:
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                continue
            if r.status != 200:
                return False
            return any(h["doc_id"] == doc["id"] for res in (await r.json())["results"] for h in res["hits"])


async def write(s: aiohttp.ClientSession, doc: dict) -> int:
    async with s.put("/documents", json=doc, headers=HEADERS) as r:
        await r.read()
        return r.status


async def put_file(s: aiohttp.ClientSession, path: Path) -> int:
    async with s.put(f"/files/{path.name}", data=path.read_bytes(), headers=HEADERS) as r:
        await r.read()
        return r.status


async def file_rounds(s: aiohttp.ClientSession, files: list[tuple[Path, dict]], batch: int) -> dict:
    """``files`` in rounds of ``batch``: the round's files with PUT /files, then the same documents with PUT
    /documents, then no writes for as long as the files took. Interleaved so that the machine's other load, which
    drifts over minutes, weighs on the three alike. Each one's statuses, acknowledgement times and windows."""
    out = {c: {"statuses": {}, "acks": [], "windows": []} for c in ("files", "file_documents", "alone")}

    async def run(cond: str, calls: list) -> float:
        t0 = time.monotonic()
        for call in calls:
            sent = time.monotonic()
            status = await call()
            out[cond]["acks"].append(time.monotonic() - sent)
            out[cond]["statuses"][str(status)] = out[cond]["statuses"].get(str(status), 0) + 1
        out[cond]["windows"].append((t0, time.monotonic()))
        return time.monotonic() - t0

    for i in range(0, len(files), batch):
        round_ = files[i:i + batch]
        took = await run("files", [lambda p=p: put_file(s, p) for p, _ in round_])
        await run("file_documents", [lambda d=d: write(s, d) for _, d in round_])
        await run("alone", [lambda t=took: asyncio.sleep(t)])
    return out


def summary(records: list[tuple[float, float, int | str]], t0: float, t1: float,
            windows: list[tuple[float, float]] | None = None) -> dict:
    """The requests sent from ``t0`` to ``t1`` (or in any of ``windows``): how many, their statuses, latency
    percentiles of those answered 200."""
    window = [r for r in records if any(a <= r[0] < b for a, b in windows or [(t0, t1)])]
    statuses: dict[str, int] = {}
    for _, _, st in window:
        statuses[str(st)] = statuses.get(str(st), 0) + 1
    return {"requests": len(window), "statuses": statuses, **percentiles([lat for _, lat, st in window if st == 200])}


async def load_phases(args: argparse.Namespace, index: Path, port: int) -> dict:
    questions = make_questions(SimpleNamespace(index=SimpleNamespace(passages=read_jsonl(index / PASSAGES))), 400)
    docs = documents(index, args.writes, "live")
    files = pdf_files(index, args.model, args.files, args.file_paragraphs, Path(args.workdir) / "files")
    out: dict = {}
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=aiohttp.ClientTimeout(total=600)) as s:
        await wait_ready(s, args.proc)
        stop_at, records = asyncio.Event(), []
        clients = [asyncio.create_task(searching(s, questions, n, stop_at, records)) for n in range(args.clients)]
        await asyncio.sleep(args.warmup)  # not measured: the first batches after the start are slow
        t0 = time.monotonic()
        await asyncio.sleep(args.seconds)
        t1 = time.monotonic()
        acks, delays, probes, write_status = [], [], [], {}
        for doc in docs:
            sent = time.monotonic()
            status = await write(s, doc)
            acked = time.monotonic()
            write_status[str(status)] = write_status.get(str(status), 0) + 1
            if status != 200:
                continue
            acks.append(acked - sent)
            tries = 0
            while True:
                tries += 1
                if await found(s, doc):
                    delays.append(time.monotonic() - acked)
                    break
                if time.monotonic() - acked > 30:
                    delays.append(float("inf"))
                    break
            probes.append(tries - 1)
            if args.write_interval:
                await asyncio.sleep(args.write_interval)
        t2 = time.monotonic()
        if docs:
            out["writes"] = {"documents": len(docs), "statuses": write_status, "seconds": round(t2 - t1, 2),
                             "ack": percentiles(acks), "visible_after_ack": percentiles(delays),
                             "visible_max_ms": max(delays) * 1e3 if delays else None,
                             "visible_within_1s": sum(d <= 1.0 for d in delays), "answered_misses": sum(probes)}
            out["during_writes"] = summary(records, t1, t2)
        if files:
            rounds = await file_rounds(s, files, args.file_batch)
            for cond, r in rounds.items():
                out[cond if cond != "alone" else "files_alone"] = {
                    "statuses": r["statuses"], "seconds": round(sum(b - a for a, b in r["windows"]), 2),
                    "ack": percentiles(r["acks"])}
                out[f"during_{cond}"] = summary(records, 0.0, 0.0, r["windows"])
            out["files"]["words"] = sum(len(" ".join(d["paragraphs"]).split()) for _, d in files)
            t2 = time.monotonic()
        await asyncio.sleep(args.seconds)  # search alone again: the machine's other load drifts
        t2b = time.monotonic()
        out["baseline_before"], out["baseline_after"] = summary(records, t0, t1), summary(records, t2, t2b)
        alone = [r for r in records if t0 <= r[0] < t1 or t2 <= r[0] < t2b]
        out["baseline"] = summary(alone, 0.0, float("inf"))
        t2 = t2b
        if docs:
            base_p99, write_p99 = out["baseline"]["p99_ms"], out["during_writes"]["p99_ms"]
            out["search_p99_ratio"] = write_p99 / base_p99 if base_p99 else None
        if args.merge:
            async with s.post("/admin/compact", headers=HEADERS) as r:
                started = (await r.json())["live"]["merges"]
            while True:
                await asyncio.sleep(0.5)
                async with s.post("/admin/compact", headers=HEADERS) as r:
                    live = (await r.json())["live"]
                last = live.get("last_merge") or {}
                if (live["merges"] > started and last) or last.get("error"):
                    break
            t3 = time.monotonic()
            out["merge"] = {**summary(records, t2, t3), "seconds": round(t3 - t2, 1), "result": last,
                            "found_after": sum([await found(s, d) for d in docs[:: max(1, len(docs) // 20)]])}
        stop_at.set()
        await asyncio.gather(*clients)
    return out


async def kill_phase(args: argparse.Namespace, index: Path) -> dict:
    live_dir = Path(args.workdir) / "kill.live"
    shutil.rmtree(live_dir, ignore_errors=True)
    docs = documents(index, args.kill_writes, "kill", seed=1)
    rng = random.Random(args.seed)
    kill_at = set(rng.sample(range(1, len(docs)), min(args.kills, len(docs) - 1)))
    acked: list[dict] = []
    unacked: list[dict] = []
    restarts: list[float] = []
    lost, half, all_there_unacked = 0, 0, 0
    interrupted: dict | None = None
    port = free_port()
    proc = serve(index, args.model, port, live_dir)
    timeout = aiohttp.ClientTimeout(total=600)
    try:
        for i, doc in enumerate(docs):
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout) as s:
                if i == 0 or i - 1 in kill_at:
                    t0 = time.monotonic()
                    await wait_ready(s, proc, timeout=900)
                    if i:
                        restarts.append(time.monotonic() - t0)
                        for d in acked:  # everything acknowledged is back, and searchable
                            async with s.get(f"/documents/{d['id']}", headers=HEADERS) as r:
                                ok = r.status == 200 and (await r.json())["paragraphs"] == d["paragraphs"]
                            lost += not (ok and await found(s, d))
                        if interrupted is not None:  # the write the kill cut short: all there, or nothing
                            async with s.get(f"/documents/{interrupted['id']}", headers=HEADERS) as r:
                                there = r.status == 200
                            searchable = await found(s, interrupted)
                            half += there != searchable
                            all_there_unacked += there and searchable
                task = asyncio.create_task(write(s, doc))
                if i in kill_at:
                    await asyncio.sleep(rng.uniform(0.0, args.kill_window))
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    try:
                        status = await task
                    except (aiohttp.ClientError, TimeoutError):
                        status = 0
                    (acked if status == 200 else unacked).append(doc)
                    interrupted = None if status == 200 else doc
                    proc = serve(index, args.model, port, live_dir)
                    continue
                status = await task
                (acked if status == 200 else unacked).append(doc)
    finally:
        stop(proc)
    return {"writes": len(docs), "kills": len(kill_at), "acknowledged": len(acked), "unacknowledged": len(unacked),
            "lost_acknowledged": lost, "half_present_unacknowledged": half,
            "unacknowledged_found_whole": all_there_unacked,
            "restart_seconds": percentiles(restarts) | {"max_s": max(restarts, default=0.0)}}



def encoded_documents(index: Any, docs: list[dict]) -> list[tuple[Document, EncodedDocument]]:
    """``docs`` (``documents``: one index passage each) with their ``EncodedDocument`` taken from the index's rows for
    that passage (its fine vectors, offsets and flags; every token kept), as the server's encoder makes them but
    without the model, so a write's own cost shows alone."""
    from spanseek.core.io import document_from_json
    from spanseek.core.segment import EncodedDocument, passage_terms

    by_text = {p["text"]: i for i, p in enumerate(index.passages)}
    out = []
    for d in docs:
        p = by_text[d["paragraphs"][0]]
        a, b = int(index.passage_tokens[p]), int(index.passage_tokens[p + 1])
        ids = np.arange(a, b)
        record = {"id": d["id"], "title": d["title"], "meta": d["meta"]}
        terms = passage_terms(d["title"], d["paragraphs"], index.lexical.analyzer) if index.lexical else []
        enc = EncodedDocument(record, ({"para": 0, "text": d["paragraphs"][0]},),
                              index.token_vectors(ids).astype(np.float16), np.asarray(index.token_offsets[a:b]),
                              np.asarray(index.token_flags[a:b]), np.asarray([b - a]), np.ones(b - a, bool),
                              tuple(terms))
        parsed = document_from_json(d, "bench")
        assert parsed is not None
        out.append((parsed, enc))
    return out


def store_write_cost(index: Path, workdir: Path, sizes: list[int], writes: int) -> list[dict]:
    """Median seconds of ``LiveStore.upsert`` of one pre-encoded document, and its snapshot, at each segment size."""
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.indexer.live import LiveStore

    copy = workdir / "cost-index"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(index, copy)
    live_dir = workdir / "cost-store.live"
    shutil.rmtree(live_dir, ignore_errors=True)
    base = PhraseIndex(copy)
    pool = encoded_documents(base, documents(copy, max(sizes) + writes * len(sizes), "store"))
    store = LiveStore(live_dir, copy, base, None, lambda snap: None)  # type: ignore[arg-type]  (no replay to encode)
    out, held = [], 0
    try:
        for size in sizes:
            while held < size:
                batch = pool[held:min(size, held + 100)]
                store.upsert([d for d, _ in batch], [e for _, e in batch])
                held += len(batch)
            times = []
            for d, e in pool[held:held + writes]:
                t0 = time.perf_counter()
                store.upsert([d], [e])
                times.append(time.perf_counter() - t0)
            held += writes
            out.append({"segment_documents": size, "median_s": round(statistics.median(times), 4),
                        "seconds": [round(t, 4) for t in times]})
    finally:
        store.close()
    return out


async def server_write_cost(args: argparse.Namespace, index: Path, sizes: list[int]) -> list[dict]:
    """Median seconds of a one-document `PUT /documents` end to end at each segment size (no search load)."""
    live_dir = Path(args.workdir) / "cost-server.live"
    shutil.rmtree(live_dir, ignore_errors=True)
    port = free_port()
    proc = serve(index, args.model, port, live_dir)
    pool = documents(index, max(sizes) + args.cost_writes * len(sizes), "server", seed=1)
    out, held = [], 0
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}",
                                         timeout=aiohttp.ClientTimeout(total=3600)) as s:
            await wait_ready(s, proc, timeout=900)
            for size in sizes:
                while held < size:
                    batch = pool[held:min(size, held + 100)]
                    async with s.put("/documents", json={"documents": batch}, headers=HEADERS) as r:
                        assert r.status == 200, (r.status, await r.text())
                    held += len(batch)
                times = []
                for d in pool[held:held + args.cost_writes]:
                    t0 = time.perf_counter()
                    assert await write(s, d) == 200
                    times.append(time.perf_counter() - t0)
                held += args.cost_writes
                out.append({"segment_documents": size, "median_s": round(statistics.median(times), 4),
                            "seconds": [round(t, 4) for t in times]})
    finally:
        stop(proc)
    return out


async def run(args: argparse.Namespace) -> dict:
    index = Path(args.index).resolve()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    result: dict = {"cpu": cpu_name(), "index": str(index), "clients": args.clients, "writes": args.writes,
                    "write_interval_s": args.write_interval, "file_count": args.files,
                    "file_paragraphs": args.file_paragraphs, "write_wait_ms": args.write_wait_ms}
    if args.writes or args.files:
        live_dir = Path(args.workdir) / "load.live"
        shutil.rmtree(live_dir, ignore_errors=True)
        port = free_port()
        args.proc = serve(index, args.model, port, live_dir, args.write_wait_ms)
        try:
            result.update(await load_phases(args, index, port))
        finally:
            stop(args.proc)
    if args.kills:
        result["kill9"] = await kill_phase(args, index)
    if args.cost_at:
        sizes = [int(n) for n in args.cost_at.split(",")]
        result["write_cost"] = {"store": store_write_cost(index, Path(args.workdir), sizes, args.cost_writes),
                                "put_documents": await server_write_cost(args, index, sizes)}
    return result


def table(r: dict) -> str:
    rows = [f"CPU: {r['cpu']}; {r['clients']} searching clients"]
    if "baseline" in r:
        rows.append(f"search p50/p99 alone        {r['baseline']['p50_ms']:8.1f} / {r['baseline']['p99_ms']:8.1f} ms")
    if "writes" in r and isinstance(r["writes"], dict):
        w = r["writes"]
        rows += [f"search p50/p99 during writes{r['during_writes']['p50_ms']:8.1f} / "
                 f"{r['during_writes']['p99_ms']:8.1f} ms  (p99 x{r['search_p99_ratio']:.2f})",
                 f"write ack p50/p99           {w['ack']['p50_ms']:8.1f} / {w['ack']['p99_ms']:8.1f} ms",
                 f"visible after ack p50/p99   {w['visible_after_ack']['p50_ms']:8.1f} / "
                 f"{w['visible_after_ack']['p99_ms']:8.1f} ms  ({w['visible_within_1s']}/{w['documents']} within 1 s)"]
    if "during_files" in r:
        f, d, a = r["during_files"], r["during_file_documents"], r["during_alone"]
        rows += [f"search p50/p99 between them {a['p50_ms']:8.1f} / {a['p99_ms']:8.1f} ms  (no writes, as long as "
                 "the files took, in each round)",
                 f"search p50/p99 during files {f['p50_ms']:8.1f} / {f['p99_ms']:8.1f} ms  ({r['file_count']} PUT /files "
                 f"in {r['files']['seconds']} s, ack p50/p99 {r['files']['ack']['p50_ms']:.0f} / "
                 f"{r['files']['ack']['p99_ms']:.0f} ms)",
                 f"  same documents as JSON    {d['p50_ms']:8.1f} / {d['p99_ms']:8.1f} ms  (PUT /documents in "
                 f"{r['file_documents']['seconds']} s, ack p50/p99 {r['file_documents']['ack']['p50_ms']:.0f} / "
                 f"{r['file_documents']['ack']['p99_ms']:.0f} ms)"]
    if "merge" in r:
        m = r["merge"]
        rows.append(f"merge under load            {m['seconds']} s, statuses {m['statuses']}")
    for kind, rows_of in r.get("write_cost", {}).items():
        rows += [f"write cost ({kind}) at {c['segment_documents']:5d} written  {c['median_s'] * 1000:8.1f} ms median"
                 for c in rows_of]
    if "kill9" in r:
        k = r["kill9"]
        rows.append(f"kill -9                     {k['kills']} kills in {k['writes']} writes: lost acknowledged "
                    f"{k['lost_acknowledged']}, half-present unacknowledged {k['half_present_unacknowledged']}")
    return "\n".join(rows)


def server_arguments(p: argparse.ArgumentParser, clients: int) -> None:
    """The flags of a benchmark of a server with writes under closed-loop search load: --index, --model, --workdir
    and --clients (``clients`` by default)."""
    p.add_argument("--index", required=True, help="index directory (not changed: writes go to --workdir)")
    p.add_argument("--model", default="default")
    p.add_argument("--workdir", required=True, help="folder for the live directories (and files written)")
    p.add_argument("--clients", type=int, default=clients, help="closed-loop searching clients")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(p, clients=8)
    p.add_argument("--seconds", type=float, default=30.0, help="seconds of each baseline window (before and after "
                                                               "the writes)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of search load before the first window")
    p.add_argument("--writes", type=int, default=200, help="single-document writes under load (0: skip)")
    p.add_argument("--write-wait-ms", type=float, help="the server's write_wait_ms (default: its own): how long a "
                   "write step waits for a gap in the searches")
    p.add_argument("--write-interval", type=float, default=0.0, help="seconds between two writes (0: back to back)")
    p.add_argument("--files", type=int, default=0, help="PDFs uploaded with PUT /files under load, then written "
                                                       "as documents (0: skip)")
    p.add_argument("--file-paragraphs", type=int, default=12, help="paragraphs in each uploaded PDF")
    p.add_argument("--file-batch", type=int, default=5, help="files in each round (their PUT /files, the same "
                                                          "documents' PUT /documents, then a pause as long)")
    p.add_argument("--no-merge", dest="merge", action="store_false", help="skip the merge under load")
    p.add_argument("--kills", type=int, default=10, help="kill -9 of the server during the kill phase (0: skip)")
    p.add_argument("--kill-writes", type=int, default=200, help="writes of the kill phase")
    p.add_argument("--kill-window", type=float, default=0.3, help="a kill comes up to this many seconds after a "
                                                                  "write is sent")
    p.add_argument("--cost-at", default="", help="segment sizes (documents written) at which one write's cost is "
                   "measured, e.g. 0,600,1200 (empty: skip)")
    p.add_argument("--cost-writes", type=int, default=5, help="writes measured at each size (their median)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    report(result, table(result), args.out)
    return 0


def report(result: dict, text: str, out: Path | None) -> None:
    """Print a run's table and write its result as JSON to ``out`` (when given), making its folder."""
    print(text)  # noqa: T201
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
