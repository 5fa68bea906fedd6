"""A soak of the service with live writes: mixed traffic for many minutes, sampling what the process holds, to find
what grows with the number of distinct requests or writes rather than with the data.

    python bench/soak.py --index work/demo-index --model default --workdir work/soak --minutes 25 \
        --out bench/results/soak.json

Starts `spanseek serve --writes` (a fresh live directory under --workdir, an API key, --reader unless
--no-reader) and drives it with --clients closed-loop clients, each picking at random:

- searches of every unit and mode with distinct questions, `top_k`, `offset`, `rank_window`, `allow_overlap`,
  `merge_answers`, `full_passage`, `min_confidence`, `read` and many distinct filters (ids, title prefixes,
  metadata ranges and lists built from random values, so nearly every filter is new);
- writes: `PUT /documents` upserts over each client's own ids (so the client knows what it acknowledged),
  `POST /documents` adds of new ids, `DELETE /documents/{id}`, `POST /documents/delete` by filter, and
  `PUT /files/{name}` of small Markdown, HTML and PDF files made here;
- reads of the write API (`GET /documents` listings by metadata, a page after a random id; `GET /documents/{id}`),
  `/info` and `/metrics`; every few minutes `POST /admin/compact` (a merge) and a SIGHUP (a reload, which a
  server with writes ignores).

Every --sample seconds it records the server's RSS, anonymous and unique (USS) memory, open file descriptors
(and deleted files still held open), threads, child processes, the live directory's and the index directory's
size and file count, the number of Prometheus series in /metrics, and the searches' p50/p99 latency in the window.
A line per sample goes to stderr.

Then, unless --no-shrink: delete most documents (the soak's and most of the index's own), merge, and sample
again (do disk and memory come back?). Last, a graceful stop under load: SIGTERM while clients write, how long
the exit takes, temporaries left in the live directory, and after a restart whether every acknowledged write is
there as acknowledged (and every acknowledged delete absent).

Writes JSON with the CPU's name (bench/machine.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from document_formats import write_pdf  # noqa: E402
from machine import cpu_name  # noqa: E402
from service_load import free_port, percentiles, wait_ready  # noqa: E402
from service_reliability import stop  # noqa: E402

from spanseek.core.phrase_index import DOCS, PASSAGES, read_jsonl  # noqa: E402

KEY = "soak-bench"
HEADERS = {"X-API-Key": KEY}
UNITS = ("phrase", "passage", "doc")
MODES = ("dense", "lexical", "hybrid", None)
LANGS = ("en", "fr", "de", "es", "it", "nl")
READY_S = 900  # a restart replays the log, encoding its documents again


def serve(index: Path, model: str, port: int, live_dir: Path, args: argparse.Namespace) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index), "--model", model,
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "warning",
           "--writes", "--live-dir", str(live_dir), "--api-key", KEY, "--merge-tokens", str(args.merge_tokens)]
    if args.reader:
        cmd += ["--reader", args.reader]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(["nice", "-n", str(args.nice), *cmd], env=env)


# --- what the process holds --------------------------------------------------------------------------------------

def children(pid: int) -> list[int]:
    """Every process under ``pid`` (each thread lists the children it started)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids += [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
        out += kids
        todo += kids
    return out


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def deleted_maps(pid: int) -> int:
    """Distinct deleted files the process still maps (an old base's vectors, a semaphore in /dev/shm)."""
    return len({line.split(None, 5)[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if line.endswith(" (deleted)")})


def memory(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
            fields[k] = int(v.split()[0])
    uss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            uss += int(line.split()[1])
    return {"rss_mb": fields["VmRSS"] / 1024, "anon_mb": fields["RssAnon"] / 1024, "uss_mb": uss / 1024,
            "threads": fields["Threads"]}


def open_files(pid: int) -> dict[str, object]:
    fds = deleted = 0
    deleted_names: list[str] = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        fds += 1
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            deleted += 1
            deleted_names.append(target)
    return {"fds": fds, "deleted_open": deleted, "deleted_examples": sorted(set(deleted_names))[:5]}


def tree(path: Path) -> dict[str, object]:
    size = files = 0
    temporaries: list[str] = []
    for root, _, names in os.walk(path):
        for n in names:
            p = Path(root, n)
            try:
                st = p.lstat()
            except OSError:
                continue
            files += 1
            size += st.st_blocks * 512 if st.st_nlink == 1 else st.st_size // max(1, st.st_nlink)
            if ".tmp" in n or n.startswith("tmp"):
                temporaries.append(str(p.relative_to(path)))
    return {"mb": size / 2**20, "files": files, "temporaries": temporaries[:10], "temporary_count": len(temporaries)}


async def metrics_series(s: aiohttp.ClientSession) -> int:
    async with s.get("/metrics") as r:
        text = await r.text()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


async def writes_info(s: aiohttp.ClientSession) -> dict:
    async with s.get("/info", headers=HEADERS) as r:
        info = await r.json()
    return (info.get("service") or {}).get("writes") or {}


# --- the traffic ---------------------------------------------------------------------------------------------------

class Traffic:
    """The clients' shared record: latencies, statuses, and what each client had acknowledged."""

    def __init__(self, index: Path, seed: int):
        self.rng = random.Random(seed)
        passages = read_jsonl(index / PASSAGES)
        self.texts = [p["text"] for p in passages]
        self.titles = [d["title"] for d in read_jsonl(index / DOCS)]
        self.base_ids = [d["id"] for d in read_jsonl(index / DOCS)]
        self.latency: list[tuple[float, float]] = []  # (when, seconds) of searches answered 200
        self.status: dict[str, dict[str, int]] = {}
        self.acked: dict[str, str | None] = {}  # id -> the title acknowledged last (None: deleted)
        self.counter = 0
        self.stop = asyncio.Event()
        self.folder: Path | None = None

    def count(self, kind: str, status: int | str) -> None:
        by = self.status.setdefault(kind, {})
        by[str(status)] = by.get(str(status), 0) + 1

    def question(self, rng: random.Random) -> str:
        """A new question (a passage's words, plus a number so none repeats)."""
        words = rng.choice(self.texts).split()
        start = rng.randrange(0, max(1, len(words) - 8))
        self.counter += 1
        return f"{rng.choice(['Who', 'What', 'When', 'Where'])} {' '.join(words[start:start + rng.randint(4, 10)])} {self.counter}?"

    def a_filter(self, rng: random.Random) -> dict | None:
        kind = rng.randrange(7)
        if kind == 0:
            return None
        if kind == 1:
            return {"doc_ids": rng.sample(self.base_ids, min(len(self.base_ids), rng.randint(1, 8)))}
        if kind == 2:
            return {"title_prefix": rng.choice(self.titles)[: rng.randint(1, 6)]}
        if kind == 3:
            lo = rng.randint(1900, 2030)
            return {"must": [{"key": "year", "range": {"gte": lo, "lt": lo + rng.randint(1, 50)}}]}
        if kind == 4:
            return {"should": [{"key": "lang", "any": rng.sample(LANGS, rng.randint(1, 3))},
                               {"doc_ids": rng.sample(self.base_ids, min(len(self.base_ids), 2))}]}
        if kind == 5:
            return {"must_not": [{"key": "score", "range": {"gt": rng.random() * 100}}],
                    "must": [{"title_prefix": rng.choice(self.titles)[:2]}]}
        return {"must": [{"key": "tags", "match": f"t{rng.randrange(500)}"}], "should": [{"key": "year", "range": {
            "lte": rng.randint(1950, 2030)}}, {"key": "lang", "match": rng.choice(LANGS)}]}

    def search_body(self, rng: random.Random, has_reader: bool) -> tuple[str, dict]:
        unit = rng.choice(UNITS)
        body: dict = {"query": self.question(rng)} if rng.random() < 0.8 else {
            "queries": [self.question(rng) for _ in range(rng.randint(2, 4))]}
        top_k = rng.randint(1, 30)
        body["top_k"] = top_k
        if rng.random() < 0.4:
            body["offset"] = rng.randint(0, 40)
            if rng.random() < 0.5:
                body["rank_window"] = body["offset"] + top_k + rng.randint(0, 20)
        mode = rng.choice(MODES)
        if mode is not None:
            body["mode"] = mode
        if mode == "hybrid" and rng.random() < 0.3:
            body["fusion"] = rng.choice(["score", "rrf"])
            if body["fusion"] == "score" and unit != "phrase":
                body["lexical_weight"] = round(rng.random() * 3, 3)
        if unit == "phrase" and rng.random() < 0.2:
            body["merge_answers"] = True
        if unit == "phrase" and rng.random() < 0.3:
            body["allow_overlap"] = True
        if rng.random() < 0.15:
            body["full_passage"] = True
        if rng.random() < 0.2:
            body["max_answer_tokens"] = rng.randint(3, 20)
        if rng.random() < 0.1:
            body["unanswerable_prior"] = round(rng.random(), 3)
        if has_reader and rng.random() < 0.08:
            body["read"] = True
            body.pop("fusion", None) if unit == "phrase" else None
            body.pop("merge_answers", None)
        flt = self.a_filter(rng)
        if flt is not None:
            body["filter"] = flt
        return unit, body

    def document(self, rng: random.Random, doc_id: str) -> dict:
        self.counter += 1
        return {"id": doc_id, "title": f"Soak {doc_id} v{self.counter}",
                "paragraphs": [rng.choice(self.texts) for _ in range(rng.randint(1, 3))],
                "meta": {"year": rng.randint(1900, 2030), "lang": rng.choice(LANGS),
                         "tags": [f"t{rng.randrange(500)}" for _ in range(rng.randint(0, 3))],
                         "score": round(rng.random() * 100, 2), "soak": doc_id.split("-")[0],
                         "bucket": rng.randrange(4)}}

    def a_file(self, rng: random.Random, name: str) -> tuple[Path, str]:
        """A small file (Markdown, HTML or PDF) made here; its name and the title it will be read with."""
        assert self.folder is not None
        self.counter += 1
        title = f"File {name} v{self.counter}"
        texts = [rng.choice(self.texts) for _ in range(rng.randint(1, 3))]
        suffix = rng.choice(["md", "html", "pdf"])
        path = self.folder / f"{name}-{self.counter}.{suffix}"
        if suffix == "md":
            path.write_text("\n\n".join([f"# {title}", *texts]) + "\n", encoding="utf-8")
        elif suffix == "html":
            path.write_text(f"<html><head><title>{title}</title></head><body>"
                            + "".join(f"<p>{t}</p>" for t in texts) + "</body></html>", encoding="utf-8")
        else:
            write_pdf({"title": title, "paragraphs": [{"context": t} for t in texts]}, path)
        return path, title


async def call(t: Traffic, kind: str, s: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, object]:
    try:
        async with s.request(method, url, **kw) as r:
            data = await r.read()
            t.count(kind, r.status)
            if r.status == 429:
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            try:
                return r.status, json.loads(data) if data else None
            except ValueError:
                return r.status, data
    except (aiohttp.ClientError, TimeoutError) as e:
        t.count(kind, type(e).__name__)
        await asyncio.sleep(0.5)
        return -1, None


async def client(t: Traffic, s: aiohttp.ClientSession, c: int, has_reader: bool, seed: int) -> None:
    """One closed-loop client. Its write ids are its own (``c{C}-...``), so what it acknowledged is known."""
    rng = random.Random(seed)
    pool = [f"c{c}-{i}" for i in range(40)]
    added = 0
    while not t.stop.is_set():
        x = rng.random()
        if x < 0.62:
            unit, body = t.search_body(rng, has_reader)
            t0 = time.perf_counter()
            status, _ = await call(t, f"search_{unit}", s, "POST", f"/search?unit={unit}", json=body, headers=HEADERS)
            if status == 200:
                t.latency.append((time.monotonic(), time.perf_counter() - t0))
        elif x < 0.72:
            docs = [t.document(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3))]
            docs = list({d["id"]: d for d in docs}.values())
            status, _ = await call(t, "put_documents", s, "PUT", "/documents", json={"documents": docs}, headers=HEADERS)
            if status == 200:
                t.acked.update((d["id"], d["title"]) for d in docs)
        elif x < 0.75:
            added += 1
            doc = t.document(rng, f"c{c}-add{seed}-{added}")
            status, _ = await call(t, "post_documents", s, "POST", "/documents", json={"documents": [doc]},
                                   headers=HEADERS)
            if status == 200:
                t.acked[doc["id"]] = doc["title"]
        elif x < 0.79:
            doc_id = rng.choice(pool + [d for d in t.acked if d.startswith(f"c{c}-add")][-20:])
            status, _ = await call(t, "delete_document", s, "DELETE", f"/documents/{doc_id}", headers=HEADERS)
            if status in (200, 404):
                t.acked[doc_id] = None
        elif x < 0.80:
            body = {"filter": {"must": [{"key": "soak", "match": f"c{c}"}, {"key": "bucket", "match": rng.randrange(4)},
                                        {"key": "year", "range": {"lt": rng.randint(1900, 2030)}}]}}
            status, answer = await call(t, "delete_by_filter", s, "POST", "/documents/delete", json=body,
                                        headers=HEADERS)
            if status == 200 and isinstance(answer, dict):
                t.acked.update((d, None) for d in answer["deleted"])
        elif x < 0.83:
            name = f"up/c{c}-{rng.randrange(15)}"
            path, _ = await asyncio.to_thread(t.a_file, rng, name.replace("/", "-"))
            status, answer = await call(t, "put_file", s, "PUT", f"/files/{name}{path.suffix}",
                                        data=path.read_bytes(), headers=HEADERS)
            path.unlink()
            if status == 200 and isinstance(answer, dict):
                t.acked[answer["id"]] = answer["title"]
        elif x < 0.90:
            params: list[tuple[str, str]] = [("limit", str(rng.randint(1, 200)))]
            if rng.random() < 0.5:
                params.append(("meta", rng.choice([f"lang={rng.choice(LANGS)}", f"soak=c{rng.randrange(8)}",
                                                   f"year={rng.randint(1900, 2030)}"])))
            if rng.random() < 0.5:
                params.append(("after", rng.choice(pool)))
            await call(t, "list_documents", s, "GET", "/documents", params=params, headers=HEADERS)
        elif x < 0.95:
            doc_id = rng.choice(pool + t.base_ids)
            await call(t, "get_document", s, "GET", f"/documents/{doc_id}",
                       params={"meta_only": "true"} if rng.random() < 0.5 else {}, headers=HEADERS)
        elif x < 0.975:
            await call(t, "info", s, "GET", "/info", headers=HEADERS)
        else:
            await call(t, "metrics", s, "GET", "/metrics")


# --- phases --------------------------------------------------------------------------------------------------------

async def sample(s: aiohttp.ClientSession, t: Traffic, proc: subprocess.Popen, live_dir: Path, index: Path,
                 t_start: float, since: float, phase: str) -> dict:
    pid = proc.pid  # `nice` execs the server: the same process
    now = time.monotonic()
    window = [lat for when, lat in t.latency if when >= since]
    row: dict = {"phase": phase, "minute": round((now - t_start) / 60, 2), **memory(pid), **open_files(pid),
                 "children": len(kids := children(pid)), "children_rss_mb": round(sum(map(rss_mb, kids)), 1),
                 "deleted_maps": deleted_maps(pid), "live": tree(live_dir), "index_mb": tree(index)["mb"],
                 "searches": len(window), **{k: round(v, 1) for k, v in percentiles(window).items()},
                 "loadavg_1m": os.getloadavg()[0]}
    try:
        row["metric_series"] = await metrics_series(s)
        row["writes"] = await writes_info(s)
    except (aiohttp.ClientError, TimeoutError) as e:
        row["metric_series"] = None
        row["error"] = type(e).__name__
    w = row.get("writes") or {}
    print(f"[{row['minute']:6.2f} min {phase}] rss {row['rss_mb']:.0f} anon {row['anon_mb']:.0f} uss {row['uss_mb']:.0f}"
          f" MB, fds {row['fds']} (deleted {row['deleted_open']}, maps {row['deleted_maps']}), threads "
          f"{row['threads']}, children {row['children']} ({row['children_rss_mb']:.0f} MB), live {row['live']['mb']:.1f} MB / {row['live']['files']} files "
          f"(tmp {row['live']['temporary_count']}), series {row['metric_series']}, searches {len(window)} p50/p99 "
          f"{row['p50_ms']:.0f}/{row['p99_ms']:.0f} ms (load {row['loadavg_1m']:.1f}), docs {w.get('documents')}, merges {w.get('merges')}",
          file=sys.stderr, flush=True)
    return row


async def drive(args: argparse.Namespace, t: Traffic, s: aiohttp.ClientSession, proc: subprocess.Popen,
                live_dir: Path, index: Path) -> list[dict]:
    samples = []
    t_start = time.monotonic()
    tasks = [asyncio.create_task(client(t, s, c, bool(args.reader), args.seed * 100 + c)) for c in range(args.clients)]
    end = t_start + args.minutes * 60
    since = t_start
    last_compact = last_hup = t_start
    samples.append(await sample(s, t, proc, live_dir, index, t_start, since, "start"))
    while time.monotonic() < end:
        await asyncio.sleep(min(args.sample, max(0.0, end - time.monotonic())))
        now = time.monotonic()
        if now - last_compact >= args.compact_every * 60:
            await call(t, "compact", s, "POST", "/admin/compact", headers=HEADERS)
            last_compact = now
        if now - last_hup >= args.hup_every * 60:
            proc.send_signal(signal.SIGHUP)
            t.count("sighup", "sent")
            last_hup = now
        samples.append(await sample(s, t, proc, live_dir, index, t_start, since, "soak"))
        since = now
    t.stop.set()
    await asyncio.gather(*tasks)
    return samples


async def merged(s: aiohttp.ClientSession, before: int, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        w = await writes_info(s)
        if (w.get("merges") or 0) > before and not w.get("merging"):
            return w
        await asyncio.sleep(2)
    return await writes_info(s)


async def shrink(t: Traffic, s: aiohttp.ClientSession, proc: subprocess.Popen, live_dir: Path,
                 index: Path) -> list[dict]:
    """Delete the soak's documents and all but two of the index's, merge, and sample."""
    t_start = time.monotonic()
    out = []
    for c in range(64):
        await call(t, "shrink_delete", s, "POST", "/documents/delete", json={"filter": {"must": [
            {"key": "soak", "match": f"c{c}"}]}}, headers=HEADERS)
    status, answer = await call(t, "shrink_delete", s, "POST", "/documents/delete", json={"filter": {
        "doc_ids": t.base_ids[2:]}}, headers=HEADERS)
    for doc_id in [d for d in t.acked if d.startswith("up/")]:
        await call(t, "shrink_delete", s, "DELETE", f"/documents/{doc_id}", headers=HEADERS)
    for doc_id in t.acked:
        t.acked[doc_id] = None
    w = await writes_info(s)
    deadline = time.monotonic() + 1800
    while (w.get("segment_documents") or w.get("tombstones")) and time.monotonic() < deadline:
        # a merge already under way holds the documents written before the deletions: merge until none is left
        before = w.get("merges") or 0
        await call(t, "compact", s, "POST", "/admin/compact", headers=HEADERS)
        w = await merged(s, before)
    out.append(await sample(s, t, proc, live_dir, index, t_start, t_start, "after_delete_and_merge"))
    out[-1]["merge"] = w.get("last_merge")
    await asyncio.sleep(30)
    out.append(await sample(s, t, proc, live_dir, index, t_start, t_start, "30s_later"))
    return out


async def graceful_stop(args: argparse.Namespace, t: Traffic, s: aiohttp.ClientSession, proc: subprocess.Popen,
                        live_dir: Path) -> dict:
    """SIGTERM while the clients write: how long the exit takes, what it leaves, and whether a write acknowledged
    before it was lost."""
    t.stop.clear()
    tasks = [asyncio.create_task(client(t, s, c, False, args.seed * 1000 + c)) for c in range(args.clients)]
    await asyncio.sleep(20)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = await asyncio.wait_for(asyncio.to_thread(proc.wait), 60)
        hung = False
    except TimeoutError:
        hung = True
        proc.kill()
        rc = await asyncio.to_thread(proc.wait)
    exit_s = time.monotonic() - t0
    t.stop.set()
    await asyncio.gather(*tasks)
    return {"exit_s": round(exit_s, 2), "returncode": rc, "hung": hung, "live_after_stop": tree(live_dir)}


async def check_acked(t: Traffic, s: aiohttp.ClientSession) -> dict:
    lost, resurrected, checked = [], [], 0
    for doc_id, title in t.acked.items():
        checked += 1
        async with s.get(f"/documents/{doc_id}", params={"meta_only": "true"}, headers=HEADERS) as r:
            got = (await r.json()).get("title") if r.status == 200 else None
        if title is not None and got != title:
            lost.append({"id": doc_id, "acked": title, "found": got})
        if title is None and got is not None:
            resurrected.append({"id": doc_id, "found": got})
    return {"checked": checked, "lost": lost[:20], "lost_count": len(lost), "resurrected": resurrected[:20],
            "resurrected_count": len(resurrected)}


async def run(args: argparse.Namespace) -> dict:
    index = Path(args.index).resolve()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.copy_index:
        shutil.copytree(index, work / "index")
        index = work / "index"
    live_dir = work / "live"
    t = Traffic(index, args.seed)
    t.folder = work / "files"
    t.folder.mkdir()
    port = free_port()
    proc = serve(index, args.model, port, live_dir, args)
    timeout = aiohttp.ClientTimeout(total=600)
    result: dict = {"cpu": cpu_name(), "clients": args.clients, "minutes": args.minutes, "reader": args.reader,
                    "merge_tokens": args.merge_tokens, "index": str(args.index)}
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=args.clients + 4)) as s:
            await wait_ready(s, proc, timeout=READY_S)
            result["samples"] = await drive(args, t, s, proc, live_dir, index)
            if not args.no_shrink:
                result["shrink"] = await shrink(t, s, proc, live_dir, index)
            result["stop"] = await graceful_stop(args, t, s, proc, live_dir)
        proc = serve(index, args.model, port, live_dir, args)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout) as s:
            await wait_ready(s, proc, timeout=READY_S)
            result["after_restart"] = await check_acked(t, s)
    finally:
        if proc.poll() is None:
            stop(proc)
    result["status"] = t.status
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--reader", default="default", help="the server's --reader ('' for none: no read searches)")
    p.add_argument("--workdir", default="work/soak", help="live directory and files (emptied first)")
    p.add_argument("--copy-index", action="store_true", help="serve a copy of --index made in --workdir")
    p.add_argument("--minutes", type=float, default=25, help="how long the mixed traffic runs")
    p.add_argument("--clients", type=int, default=6, help="closed-loop clients")
    p.add_argument("--sample", type=float, default=60, help="seconds between samples")
    p.add_argument("--compact-every", type=float, default=6, help="minutes between POST /admin/compact")
    p.add_argument("--hup-every", type=float, default=9, help="minutes between SIGHUPs (a reload request)")
    p.add_argument("--merge-tokens", type=int, default=20_000, help="the server's merge_tokens")
    p.add_argument("--nice", type=int, default=10, help="the server's nice level")
    p.add_argument("--no-shrink", action="store_true", help="skip deleting most documents and merging at the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/soak.json")
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "shrink")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
