"""Hostile load against `spanseek serve` on loopback: does the service stay fair and responsive?

    python bench/attack.py --index work/demo-index --model default --out bench/results/attack.json
    python bench/attack.py --index work/demo-index --model default --small --out /tmp/attack.json   # minutes

Each part starts its own server (default settings unless said) and measures, bounded in time:

- cost: the per-question cost of deep passage and document searches in-process (16-question batches, seconds
  against 16 default phrase questions), the measurements behind service/cost.py (slow: minutes; --parts cost);
- starvation: 8 normal clients (one question each, honouring Retry-After) alone, then beside one client looping
  the heaviest request the server accepts (unit=doc, the deepest page max_request_cost allows) without back-off;
  checks whether the normal clients keep >= 80% of their throughput, p99 <= 3x;
- flood: the saturation throughput (16 clients honouring Retry-After), then --flood-clients clients that ignore 429;
  checks whether answered q/s >= 60% of saturation, no 5xx, the access log grows <= 1 MB a minute;
- slow: --sockets connections of each kind (a head trickled a byte a second; a body left unread by /health and
  trickled; pipelined answers never read), while 4 normal clients search; checks whether every connection is
  closed within its documented limit (header_timeout_s; LINGER_S after the answer; write_timeout_s once writes
  stall, plus the time to fill the buffers) and the normal clients are still answered;
- reload: 6 normal clients beside 2 clients repeating POST /admin/reload without back-off (with no key, a wrong key,
  then the key), each phase between two phases of the normal clients alone; checks whether goodput changes by <= 10%
  against the mean of the two for the refused ones (with the key, each reload the minimum interval lets through
  loads the index again: reported, not judged);
- metadata: an index whose one document has 1 MB of metadata (built past the corpus limit, as an old index might
  hold), then 32 queries x top_k 100 allow_overlap; checks whether it is refused (400) before the server's RSS grows
  by 100 MB.

The machine's load average is recorded: numbers taken next to other jobs are distorted (ratios within a part less
so). Server connections are counted from /proc/net/tcp (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402
from service_load import DEMO_CORPUS, free_port, percentiles, wait_ready  # noqa: E402
from service_reliability import rss_mb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KEY = "attack-key"
QUESTIONS = [f"Who built the {w} in {1800 + i}?" for i, w in enumerate(
    "castle bridge church railway harbour museum tower palace library canal".split() * 10)]


class Server:
    """``spanseek serve`` in a subprocess with its log in a file; ``async with`` waits until it is ready."""

    def __init__(self, args: argparse.Namespace, workdir: Path, name: str, *flags: str, index: Path | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index or args.index), "--model",
               args.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "info",
               *flags]
        # no question cache: the load repeats its questions, and each must cost an encoder pass as a new one would
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "SPANSEEK_QUESTION_CACHE": "0"}
        self._log_file = open(self.log, "wb")  # noqa: SIM115  (closed in __aexit__)
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._log_file, stderr=subprocess.STDOUT)

    async def __aenter__(self) -> Server:
        async with aiohttp.ClientSession(self.base) as client:
            await wait_ready(client, self.proc)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log_file.close()

    def session(self, connections: int = 0) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(self.base, connector=aiohttp.TCPConnector(limit=connections),
                                     timeout=aiohttp.ClientTimeout(total=120))

    def connections(self, client_ports: set[int]) -> int:
        """Established TCP connections of the server (its side) to these client ports, from /proc/net/tcp."""
        port = f"{self.port:04X}"
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                if f[1].endswith(":" + port) and f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) in client_ports:
                    count += 1
        return count


class Clients:
    """Closed-loop clients of one kind: latencies of their 200s and a count of every status."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.status: Counter[str] = Counter()
        self.answered = 0  # questions answered

    async def run(self, client: aiohttp.ClientSession, stop_at: float, body: dict, unit: str = "phrase",
                  honour_retry_after: bool = True, path: str = "/search", headers: dict | None = None) -> None:
        i = 0
        while time.monotonic() < stop_at:
            i += 1
            search = path == "/search"
            payload = body if "queries" in body or not search else {**body, "query": QUESTIONS[i % len(QUESTIONS)]}
            t0 = time.monotonic()
            try:
                async with client.post(f"{path}?unit={unit}" if search else path, json=payload or None,
                                       headers=headers) as r:
                    await r.read()
                    status, retry = r.status, r.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as e:
                self.status[type(e).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            self.status[str(status)] += 1
            if status == 200:
                self.latencies.append(time.monotonic() - t0)
                self.answered += len(payload.get("queries", [1]))
            elif status == 429 and honour_retry_after and retry:
                await asyncio.sleep(min(float(retry), max(0.0, stop_at - time.monotonic())))

    def summary(self, seconds: float) -> dict:
        return {"answered_qps": round(self.answered / seconds, 2), **{k: round(v, 1) for k, v in
                                                                       percentiles(self.latencies).items()},
                "status": dict(self.status)}


def warmup_seconds(args: argparse.Namespace) -> float:
    """Load before a part's first measured phase (a third of a phase, at most 10 s): a fresh server's first
    seconds run slower, which made the phases after the baseline look faster than it."""
    return min(10.0, args.seconds / 3)


async def closed_loop(server: Server, n: int, seconds: float, body: dict | None = None, **kwargs) -> dict:
    """``n`` closed-loop clients for ``seconds``: their summary."""
    clients = Clients()
    stop_at = time.monotonic() + seconds
    async with server.session() as client:
        await asyncio.gather(*[clients.run(client, stop_at, body or {}, **kwargs) for _ in range(n)])
    return clients.summary(seconds)


# --- parts ---

MAX_COST_DEPTH = 2000  # the deepest page part_cost measures (the demo index's every passage: 1,022)


def part_cost(args: argparse.Namespace) -> dict:
    """Seconds per 16-question batch of deep unit searches against 16 default phrase questions, in-process."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchParams
    from spanseek.service.batcher import run_batch

    searcher = open_searcher(args.index, args.model, device="cpu", precision="fp32")
    m = searcher.index.manifest
    questions = QUESTIONS[:16]

    def seconds(params: SearchParams) -> float:
        run_batch(searcher, [(questions, params)])
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            run_batch(searcher, [(questions, params)])
            best = min(best, time.perf_counter() - t0)
        return best

    base = seconds(SearchParams("phrase", 10))
    out: dict = {"phrase_batch_s": round(base, 4), "documents": m.documents, "passages": m.passages}
    for unit, units in (("doc", m.documents), ("passage", m.passages)):
        for share in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
            depth = max(1, round(share * units))
            if depth > MAX_COST_DEPTH:  # a large index: such pages are beyond any request the service admits
                continue
            params = SearchParams(unit, min(depth, 100), offset=max(0, depth - 100))
            out[f"{unit}_depth_{depth}"] = {"share": round(depth / units, 3), "cost": round(seconds(params) / base, 2)}
    for depth in (100, 200):
        out[f"phrase_depth_{depth}"] = round(seconds(SearchParams("phrase", 100, offset=depth - 100)) / base, 2)
    return out


def heaviest_request(info: dict) -> dict:
    """The most expensive document search the server accepts: the depth and number of queries of the highest total
    cost within max_request_cost."""
    from spanseek.core.params import SearchParams
    from spanseek.service.cost import CostModel

    service, index = info["service"], info["index"]
    cost = CostModel({"passage": index["passages"], "doc": index["documents"] - index["deleted_documents"]},
                     index["tokens"], service["default_top_k"])
    limit, best = service["max_request_cost"], None
    for depth in range(1, service["max_offset_top_k"] + 1):
        top_k = min(depth, service["max_top_k"])
        per_question = cost.question(SearchParams("doc", top_k, offset=depth - top_k))
        n = min(service["max_queries_per_request"], int(limit // per_question))
        if n and (best is None or n * per_question >= best["cost"]):
            best = {"queries": [f"heavy question {i}" for i in range(n)], "top_k": top_k, "offset": depth - top_k,
                    "cost": round(n * per_question, 1)}
    if best is None:
        raise RuntimeError("no document search fits max_request_cost")
    return best


async def part_starvation(args: argparse.Namespace, workdir: Path) -> dict:
    async with Server(args, workdir, "starvation") as server:
        async with server.session() as client:
            async with client.get("/info") as r:
                info = await r.json()
            finding = {"queries": [f"q{i}" for i in range(32)], "top_k": 10, "offset": 190}
            async with client.post("/search?unit=doc", json=finding) as r:
                refused = {"status": r.status, "message": (await r.json()).get("message")}
        heavy = heaviest_request(info)
        await closed_loop(server, 8, warmup_seconds(args))  # not measured: the first phase ran slower
        alone = await closed_loop(server, 8, args.seconds)
        normal, hostile = Clients(), Clients()
        stop_at = time.monotonic() + args.seconds
        # the hostile client has its own connections, as another user does: sharing the normal clients' pool would
        # hand its connections (and so its fair-queueing account, keyed by connection) to them in turn
        async with server.session() as client, server.session() as own:
            await asyncio.gather(*[normal.run(client, stop_at, {}) for _ in range(8)],
                                 hostile.run(own, stop_at, {k: heavy[k] for k in ("queries", "top_k", "offset")},
                                             unit="doc", honour_retry_after=False))
    beside = normal.summary(args.seconds)
    ratio = beside["answered_qps"] / max(alone["answered_qps"], 1e-9)
    p99_ratio = beside["p99_ms"] / max(alone["p99_ms"], 1e-9)
    return {"old_heavy_request": refused, "heaviest_allowed": {k: v for k, v in heavy.items() if k != "queries"}
            | {"queries": len(heavy["queries"])}, "alone": alone, "beside_heavy": beside,
            "heavy_client": hostile.summary(args.seconds), "throughput_kept": round(ratio, 3),
            "p99_ratio": round(p99_ratio, 2), "pass": ratio >= 0.8 and p99_ratio <= 3.0}


async def part_flood(args: argparse.Namespace, workdir: Path) -> dict:
    async with Server(args, workdir, "flood") as server:
        saturation = await closed_loop(server, 16, args.seconds)
        before = server.log.stat().st_size
        flood = await closed_loop(server, args.flood_clients, args.seconds, honour_retry_after=False)
        grown = server.log.stat().st_size - before
        async with server.session() as client, client.get("/metrics") as r:
            metrics = await r.text()
    errors_5xx = sum(v for k, v in flood["status"].items() if k.startswith("5"))
    kept = flood["answered_qps"] / max(saturation["answered_qps"], 1e-9)
    log_mb_per_min = grown / 1e6 / (args.seconds / 60)
    refused = next((line.split()[-1] for line in metrics.splitlines()
                    if line.startswith('spanseek_errors_total{route="/search",type="overloaded"}')), None)
    return {"clients": args.flood_clients, "saturation": saturation, "flood": flood,
            "answered_share_of_saturation": round(kept, 3), "errors_5xx": errors_5xx,
            "log_bytes": grown, "log_mb_per_min": round(log_mb_per_min, 3), "refusals_counted_in_metrics": refused,
            "pass": kept >= 0.6 and errors_5xx == 0 and log_mb_per_min <= 1.0}


async def _slow_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop_at: float) -> None:
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    await _trickle(reader, writer, b"X-Slow: 1\r\n", stop_at)


async def _unread_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop_at: float) -> None:
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nbody")
    await _trickle(reader, writer, b"body", stop_at)


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, stop_at: float) -> None:
    """A byte a second (reading what comes) until the server closes the connection or ``stop_at``."""
    i = 0
    while time.monotonic() < stop_at:
        try:
            writer.write(data[i % len(data): i % len(data) + 1])
            await writer.drain()
            i += 1
            if (await asyncio.wait_for(reader.read(65536), 1.0)) == b"":
                break
        except TimeoutError:
            continue
        except OSError:
            break
    writer.close()


async def _never_read(sock: socket.socket, stop_at: float) -> None:
    """Pipelined requests on a socket with a small receive buffer that is never read."""
    await asyncio.get_running_loop().sock_sendall(sock, b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
    await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
    sock.close()


async def _connect(addr: tuple[str, int]) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # for the reader that never reads: fills at once
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, addr)
    return sock


async def _attack(kind: str, sock: socket.socket, stop_at: float) -> None:
    if kind == "never_read":
        await _never_read(sock, stop_at)
        return
    reader, writer = await asyncio.open_connection(sock=sock)
    await (_slow_head if kind == "slow_head" else _unread_body)(reader, writer, stop_at)


async def part_slow(args: argparse.Namespace, workdir: Path) -> dict:
    from spanseek.service.server import LINGER_S

    limits = {"slow_head": args.header_timeout, "unread_body": LINGER_S, "never_read": args.write_timeout}
    kinds = ("slow_head", "unread_body", "never_read")
    flags = ["--header-timeout-s", str(args.header_timeout), "--write-timeout-s", str(args.write_timeout)]
    out: dict = {"sockets_per_kind": args.sockets, "limits_s": limits}
    async with Server(args, workdir, "slow", *flags) as server:
        out["normal_alone"] = await closed_loop(server, 4, args.seconds)
        for name in kinds:
            stop_at = time.monotonic() + limits[name] + 60
            socks = await asyncio.gather(*[_connect(("127.0.0.1", server.port)) for _ in range(args.sockets)],
                                         return_exceptions=True)
            opened = [s for s in socks if isinstance(s, socket.socket)]
            ports = {s.getsockname()[1] for s in opened}
            t0 = time.monotonic()
            tasks = [asyncio.create_task(_attack(name, s, stop_at)) for s in opened]
            normal = Clients()
            normal_task = asyncio.create_task(_normal_during(server, normal, args.seconds))
            peak, peak_rss, closed_after = 0, 0.0, None
            while time.monotonic() < stop_at:
                held = server.connections(ports)
                peak, peak_rss = max(peak, held), max(peak_rss, rss_mb(server.proc.pid))
                if time.monotonic() - t0 > 1.0 and held <= 0:
                    closed_after = time.monotonic() - t0
                    break
                await asyncio.sleep(0.25)
            await normal_task
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            out[name] = {"opened": len(opened), "peak_held": peak, "all_closed_after_s": closed_after and round(
                closed_after, 1), "limit_s": limits[name], "peak_rss_mb": round(peak_rss),
                "normal_clients": normal.summary(args.seconds)}
    out["pass"] = all(out[k]["all_closed_after_s"] is not None and out[k]["normal_clients"]["answered_qps"] > 0
                      for k in kinds)
    return out


async def _normal_during(server: Server, clients: Clients, seconds: float) -> None:
    stop_at = time.monotonic() + seconds
    async with server.session() as client:
        await asyncio.gather(*[clients.run(client, stop_at, {}) for _ in range(4)])


async def part_reload(args: argparse.Namespace, workdir: Path) -> dict:
    """Each spam phase between two phases of the normal clients alone (half as long), and judged against their mean:
    this machine's rate drifts by 10-20% over minutes, as much as the target."""
    out: dict = {}
    auth = {"X-API-Key": KEY}
    async with Server(args, workdir, "reload", "--api-key", KEY) as server:
        rss0 = rss_mb(server.proc.pid)
        await closed_loop(server, 6, warmup_seconds(args), headers=auth)  # not measured
        alone = [await closed_loop(server, 6, args.seconds / 2, headers=auth)]
        for spam, headers in (("spam_without_key", {}), ("spam_wrong_key", {"X-API-Key": "not-" + KEY}),
                              ("spam_with_key", auth)):
            normal, spammers = Clients(), Clients()
            stop_at = time.monotonic() + args.seconds
            async with server.session() as client:
                await asyncio.gather(*[normal.run(client, stop_at, {}, headers=auth) for _ in range(6)],
                                     *[spammers.run(client, stop_at, {}, path="/admin/reload", headers=headers,
                                                    honour_retry_after=False) for _ in range(2)])
            alone.append(await closed_loop(server, 6, args.seconds / 2, headers=auth))
            baseline = (alone[-2]["answered_qps"] + alone[-1]["answered_qps"]) / 2
            summary = normal.summary(args.seconds)
            out[spam] = {"normal_clients": summary, "reload_requests": dict(spammers.status),
                         "alone_qps_around": [alone[-2]["answered_qps"], alone[-1]["answered_qps"]],
                         "goodput_change": round(summary["answered_qps"] / max(baseline, 1e-9) - 1, 3)}
        out["alone"] = alone[0]
        out["alone_phases_qps"] = [a["answered_qps"] for a in alone]
        out["rss_mb"] = {"ready": round(rss0), "end": round(rss_mb(server.proc.pid))}
    # the target is for refused spam; with the key each accepted reload really loads the index again (informative)
    out["pass"] = all(abs(out[k]["goodput_change"]) <= 0.10 for k in ("spam_without_key", "spam_wrong_key"))
    return out


def build_metadata_index(args: argparse.Namespace, workdir: Path) -> tuple[Path, str]:
    """Three demo documents, one with 1 MB of metadata, indexed past the corpus limit (as an index built before it
    might be); also what the corpus reader says of that document today."""
    import spanseek.core.io as io
    from spanseek.core.io import CorpusError, read_corpus
    from spanseek.core.phrase_index import MANIFEST
    from spanseek.indexer.build import BuildOptions, build_index

    corpus, index = workdir / "meta-corpus.jsonl", workdir / "meta-index"
    with open(corpus, "w", encoding="utf-8") as f:
        for i, doc in enumerate(read_corpus(DEMO_CORPUS)):
            if i >= 3:
                break
            meta = {"scan": "x" * (1 << 20)} if i == 0 else {}
            f.write(json.dumps({"id": doc.id, "title": doc.title, "paragraphs": list(doc.paragraphs[:8]),
                                "meta": meta}) + "\n")
    try:
        list(read_corpus(corpus))
        refused_at_index_time = "accepted"
    except CorpusError as e:
        refused_at_index_time = str(e)
    if not (index / MANIFEST).exists():
        limit, io.MAX_META_BYTES = io.MAX_META_BYTES, 2 << 20
        try:
            build_index(corpus, args.model, index, BuildOptions(progress=False, precision="fp32"))
        finally:
            io.MAX_META_BYTES = limit
    return index, refused_at_index_time


async def part_metadata(args: argparse.Namespace, workdir: Path) -> dict:
    index, at_index_time = build_metadata_index(args, workdir)
    body = {"queries": [f"what is described in part {i}?" for i in range(32)], "top_k": 100, "allow_overlap": True}
    async with Server(args, workdir, "metadata", index=index) as server:
        rss0 = rss_mb(server.proc.pid)
        peak = rss0
        async with server.session() as client:
            t0 = time.monotonic()
            request = asyncio.ensure_future(client.post("/search", json=body))
            while not request.done():
                peak = max(peak, rss_mb(server.proc.pid))
                await asyncio.sleep(0.02)
            r = await request
            answer = await r.json()
            took = time.monotonic() - t0
    growth = peak - rss0
    return {"corpus_reader": at_index_time, "status": r.status, "error": answer.get("error"),
            "message": answer.get("message"), "seconds": round(took, 2), "rss_mb_before": round(rss0),
            "rss_growth_mb": round(growth, 1), "pass": r.status == 400 and growth < 100}


PARTS = ("starvation", "flood", "slow", "reload", "metadata")


def write_json(path: Path, results: dict) -> None:
    """Write ``results`` atomically (after each part, so a failing part keeps the others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(path)


async def run(args: argparse.Namespace) -> dict:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average_start": os.getloadavg(),
                     "small": args.small, "seconds_per_phase": args.seconds, "flood_clients": args.flood_clients,
                     "sockets_per_kind": args.sockets, "index": str(args.index), "parts": {}}
    for part in args.parts:
        t0 = time.monotonic()
        print(f"{part} ...", file=sys.stderr, flush=True)
        if part == "cost":
            results["parts"][part] = part_cost(args)
        else:
            results["parts"][part] = await globals()[f"part_{part}"](args, workdir)
        results["parts"][part]["wall_s"] = round(time.monotonic() - t0, 1)
        results["load_average_end"] = os.getloadavg()
        write_json(args.out, results)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True, help="index to serve (the demo index)")
    p.add_argument("--model", default="default", help="model (default: the bundled one)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=["cost", *PARTS], help="parts to run")
    p.add_argument("--seconds", type=float, default=30.0, help="seconds per measured phase")
    p.add_argument("--flood-clients", type=int, default=256, help="clients that ignore 429 in the flood")
    p.add_argument("--sockets", type=int, default=2000, help="slow connections of each kind")
    p.add_argument("--header-timeout", type=float, default=10.0, help="the server's header_timeout_s")
    p.add_argument("--write-timeout", type=float, default=30.0, help="the server's write_timeout_s")
    p.add_argument("--small", action="store_true",
                   help="a quick check: 6 s phases, 64 flood clients, 40 sockets a kind, 2 s head and write limits")
    p.add_argument("--workdir", default="runs/attack", help="logs and the metadata index")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "attack.json")
    args = p.parse_args(argv)
    if args.small:
        args.seconds, args.flood_clients, args.sockets = 6.0, 64, 40
        args.header_timeout, args.write_timeout = 2.0, 2.0
    results = asyncio.run(run(args))
    print(json.dumps({k: v.get("pass") for k, v in results["parts"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
