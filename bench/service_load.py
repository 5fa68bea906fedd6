"""Service load benchmark on loopback: throughput and latency at several concurrency levels vs the raw pipeline.

    python bench/service_load.py --index work/demo-index --model default --out runs/bench/service.json
    python bench/service_load.py --synthetic work/bench-synthetic --out runs/bench/service.json   # no trained model
    python bench/service_load.py --synthetic work/bench-synthetic --soak-seconds 300 --out runs/bench/soak.json

It starts ``spanseek serve`` as a subprocess on 127.0.0.1 (a free port), then measures, all bounded in time:

1. raw: the in-process pipeline on batches of --max-batch-size questions, q/s, both sequential
   (``Searcher.search``) and pipelined (encode of batch n + 1 overlapping search of batch n, as the service
   does with ``pipeline`` on); the service is compared with the one it runs (--pipeline auto, on, full or off);
2. closed-loop HTTP load at each --concurrency level (single-question requests): q/s, p50/p95/p99, mean batch
   size (from the service's /metrics), status counts; saturation = the best level's q/s;
3. single-request p50 (concurrency 1) and open-loop (Poisson) load at half the saturation rate: its p99;
4. with --soak-seconds: a closed-loop soak above saturation; every answer other than 200 or a deliberate 429
   counts as an error.

``--synthetic DIR`` builds an untrained model with the real default backbone (same compute as a trained one)
and an index over the first --synthetic-docs documents of the demo corpus, for machines without a trained model.
Speed figures are ratios within one run; the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# Before torch loads (here and in the server subprocess, which inherits it): on shared, oversubscribed CPUs
# OpenMP's default spin-waiting makes a 2-thread forward pass up to 50x slower (measured: 1.8 s vs 28 ms for one
# question on the 2-core dev machine next to a training job). Both the raw pipeline and the service get it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ helpers, even under PYTHONSAFEPATH
from machine import cpu_name  # noqa: E402

from spanseek.core.params import UNITS, SearchParams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEMO_CORPUS = ROOT / "data" / "demo" / "corpus.jsonl.gz"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_synthetic(out: Path, n_docs: int) -> tuple[Path, Path]:
    """An untrained default-architecture model and its index over the first ``n_docs`` demo documents."""
    from spanseek.core.config import EncoderConfig
    from spanseek.core.io import read_corpus
    from spanseek.core.model import PhraseModel
    from spanseek.core.phrase_index import MANIFEST
    from spanseek.indexer.build import BuildOptions, build_index

    model_dir, index_dir = out / "model", out / "index"
    if not (model_dir / "spanseek_config.json").exists():
        import torch

        torch.manual_seed(0)
        PhraseModel(EncoderConfig()).save(model_dir)
    if not (index_dir / MANIFEST).exists():
        corpus = out / "corpus.jsonl"
        with open(corpus, "w", encoding="utf-8") as f:
            for i, doc in enumerate(read_corpus(DEMO_CORPUS)):
                if i >= n_docs:
                    break
                f.write(json.dumps({"id": doc.id, "title": doc.title, "paragraphs": list(doc.paragraphs)}) + "\n")
        print(f"building a synthetic index of {n_docs} documents in {index_dir} ...", file=sys.stderr)
        build_index(corpus, model_dir, index_dir, BuildOptions(progress=False, precision="fp32"))
    return index_dir, model_dir


class Questions:
    """Question-like strings from an index's passages (realistic lengths and vocabulary), made as they are first
    asked for and never the same twice: a reading service remembers its recent reads, so a question asked again
    would time that memory, not reading. ``phase()`` views the questions no earlier phase asked. A small index's
    passages run out of new questions (the tiny test corpus's after about 16,000, a minute of load): from there
    the questions made are asked again, in order, counted in ``repeated``, rather than fail a run at its end."""

    def __init__(self, passages: Sequence[dict], seed: int = 0):
        self.texts = [p["text"] for p in passages]
        self.rng, self.made, self.seen, self.asked = random.Random(seed), [], set(), 0
        self.exhausted, self.repeated = False, 0

    def _make(self) -> str | None:
        """A question not made before, or None when 10,000 tries found none."""
        for _ in range(10_000):
            words = re.findall(r"\w+", self.rng.choice(self.texts))
            if len(words) >= 6:
                start = self.rng.randrange(0, len(words) - 5)
                q = (self.rng.choice(["Who", "What", "When", "Where"]) + " "
                     + " ".join(words[start : start + self.rng.randint(5, 12)]) + "?")
                if q not in self.seen:
                    self.seen.add(q)
                    return q
        return None

    def __getitem__(self, i: int) -> str:
        while len(self.made) <= i and not self.exhausted:
            q = self._make()
            if q is not None:
                self.made.append(q)
                continue
            if not self.made:
                raise ValueError("no passage of the index has the 6 words a question is made of")
            self.exhausted = True
            print(f"warning: the index's passages gave no new question after {len(self.made)}; they are asked "
                  "again from here (questions_repeated in the results), so what follows may time the service's "
                  "memory of them", file=sys.stderr)
        self.asked = max(self.asked, i + 1)
        if i >= len(self.made):
            self.repeated += 1
        return self.made[i % len(self.made)]

    def phase(self) -> Phase:
        return Phase(self, self.asked)


class Phase:
    """The questions from ``start`` on: ``phase[i]`` is the i-th, and marks every one before it as asked."""

    def __init__(self, questions: Questions, start: int):
        self.questions, self.start = questions, start

    def __getitem__(self, i: int) -> str:
        return self.questions[self.start + i]

    def batch(self, i: int, n: int) -> list[str]:
        return [self[i + j] for j in range(n)]


def make_questions(searcher, n: int, seed: int = 0) -> list[str]:
    """``n`` question-like strings from the index's passages, distinct where they give that many."""
    questions = Questions(searcher.index.passages, seed)
    return [questions[i] for i in range(n)]


def percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "p99_ms": float("nan")}
    a = np.asarray(latencies) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "p99_ms": float(np.percentile(a, 99))}


def raw_throughput(searcher, questions: Phase, batch: int, seconds: float, params: SearchParams) -> float:
    """Questions per second of the in-process pipeline at the given batch size."""
    searcher.search(questions.batch(0, batch), params)  # warm
    done, i, t0 = 0, batch, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        chunk = questions.batch(i, batch)
        searcher.search(chunk, params)
        done += batch
        i += batch
    return done / (time.perf_counter() - t0)


def raw_throughput_pipelined(searcher, questions: Phase, batch: int, seconds: float,
                             params: SearchParams) -> float:
    """The same, with the service's pipeline: batch n + 1 is encoded in one thread while batch n is searched in
    another (at most one batch in each step), which is what the service does with ``pipeline`` on."""
    from concurrent.futures import ThreadPoolExecutor

    encode_pool, search_pool = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    try:
        searcher.search(questions.batch(0, batch), params)  # warm
        done, i, searching, t0 = 0, batch, None, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            chunk = questions.batch(i, batch)
            q_start, q_end = encode_pool.submit(searcher.encoder.encode, chunk).result()
            if searching is not None:
                searching.result()
                done += batch
            searching = search_pool.submit(searcher.search_vectors, q_start, q_end, params, None, chunk)
            i += batch
        if searching is not None:
            searching.result()
            done += batch
        return done / (time.perf_counter() - t0)
    finally:
        encode_pool.shutdown()
        search_pool.shutdown()


_SUMS = {  # what the service's /metrics say about its batches: name -> (sum series, count series)
    "batch_size": ("spanseek_batch_size_sum", "spanseek_batch_size_count"),
    **{f"{stage}_ms": (f'spanseek_stage_duration_seconds_sum{{stage="{stage}"}}',
                       f'spanseek_stage_duration_seconds_count{{stage="{stage}"}}')
       for stage in ("queue", "encode", "search")},
}


async def service_sums(client: aiohttp.ClientSession) -> dict[str, tuple[float, float]]:
    """(sum, count) of the batch size and of the queue / encode / search times, from /metrics."""
    async with client.get("/metrics") as r:
        text = await r.text()

    def value(series: str) -> float:
        m = re.search(r"^" + re.escape(series) + r" ([\d.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    return {name: (value(s), value(c)) for name, (s, c) in _SUMS.items()}


def service_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Means over the requests between two ``service_sums``: batch size, and queue / encode / search ms."""
    out = {}
    for name, (s1, c1) in after.items():
        s0, c0 = before[name]
        mean = (s1 - s0) / max(1.0, c1 - c0)
        out[f"mean_{name}"] = mean * 1000 if name.endswith("_ms") else mean
    return out


class Recorder:
    """Latencies of 200s and counts of every status / exception."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.status: dict[str, int] = {}

    def add(self, key: str, latency: float | None = None) -> None:
        self.status[key] = self.status.get(key, 0) + 1
        if latency is not None:
            self.latencies.append(latency)

    def errors(self) -> int:
        """Answers other than 200 and deliberate 429s."""
        return sum(n for k, n in self.status.items() if k not in ("200", "429"))


async def one_request(client: aiohttp.ClientSession, question: str, unit: str, body: dict, rec: Recorder) -> None:
    t0 = time.perf_counter()
    try:
        async with client.post(f"/search?unit={unit}", json={"query": question, **body}) as r:
            await r.read()
        rec.add(str(r.status), time.perf_counter() - t0 if r.status == 200 else None)
        if r.status == 429:
            await asyncio.sleep(0.01)  # a polite client backs off briefly
    except (aiohttp.ClientError, TimeoutError) as e:
        rec.add(type(e).__name__)


async def closed_loop(client: aiohttp.ClientSession, questions: Phase, concurrency: int, seconds: float,
                      unit: str, body: dict) -> dict:
    """``concurrency`` clients, each sending its next request as soon as the last is answered."""
    rec = Recorder()
    before = await service_sums(client)
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = w
        while time.perf_counter() < deadline:
            await one_request(client, questions[i], unit, body, rec)
            i += concurrency

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {"concurrency": concurrency, "seconds": elapsed, "qps": len(rec.latencies) / elapsed,
            **percentiles(rec.latencies), **service_means(before, await service_sums(client)),
            "status": rec.status, "errors": rec.errors()}


async def open_loop(client: aiohttp.ClientSession, questions: Phase, rate: float, seconds: float,
                    unit: str, body: dict, seed: int = 0) -> dict:
    """Poisson arrivals at ``rate`` requests/s regardless of answers (latency as users would see it)."""
    rng = random.Random(seed)
    rec = Recorder()
    tasks = []
    before = await service_sums(client)
    t0 = time.perf_counter()
    next_at, i = t0, 0
    while next_at - t0 < seconds:
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        tasks.append(asyncio.create_task(one_request(client, questions[i], unit, body, rec)))
        i += 1
        next_at += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    return {"rate": rate, "sent": i, **percentiles(rec.latencies), **service_means(before, await service_sums(client)),
            "status": rec.status, "errors": rec.errors()}


def request_body(args: argparse.Namespace) -> dict:
    """The search parameters every request sends."""
    return {"top_k": args.top_k, **({"read": True} if args.read else {})}


def start_server(args: argparse.Namespace, index: Path, model: str, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index), "--model", model,
           "--host", "127.0.0.1", "--port", str(port), "--device", args.device, "--precision", args.precision,
           "--runtime", args.runtime, "--max-batch-size", str(args.max_batch_size), "--max-wait-ms", str(args.max_wait_ms),
           "--max-queue", str(args.max_queue), "--log-level", "warning",
           "--pipeline", args.pipeline]
    if args.torch_threads:
        cmd += ["--torch-threads", str(args.torch_threads)]
    if args.read:
        cmd += ["--reader", args.reader]
    # no question cache: the load repeats its questions, and each must cost an encoder pass as a new one would
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "SPANSEEK_QUESTION_CACHE": "0"}
    return subprocess.Popen(cmd, env=env, cwd=ROOT)


async def wait_ready(client: aiohttp.ClientSession, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with {proc.returncode}")
        try:
            async with client.get("/ready") as r:
                if r.status == 200:
                    return
        except (aiohttp.ClientError, TimeoutError):  # aiohttp's timeouts are the builtin TimeoutError
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError("the service did not become ready")
        await asyncio.sleep(0.2)


async def run_service(args: argparse.Namespace, base: str, proc: subprocess.Popen, questions: Questions) -> dict:
    # The load generator shares the machine's cores with the service, so it must be cheap: aiohttp spends
    # ~0.3 ms of CPU a request here where httpx spent ~3.5 ms (0.45 of the 2 cores at 115 q/s, which the
    # service then lacked). Client idle expiry (2 s) stays below the server's keep-alive, as a well-behaved
    # client keeps it.
    connector = aiohttp.TCPConnector(limit=max(args.concurrency) * 2 + 16, keepalive_timeout=2.0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as client:
        await wait_ready(client, proc)
        # each phase asks questions no phase asked before (Questions)
        await closed_loop(client, questions.phase(), min(args.concurrency), 1.0, args.unit,
                          request_body(args))  # warm connections
        levels = []
        for c in args.concurrency:
            levels.append(await closed_loop(client, questions.phase(), c, args.seconds, args.unit, request_body(args)))
            print(json.dumps(levels[-1]), file=sys.stderr)
        single = await closed_loop(client, questions.phase(), 1, args.seconds, args.unit, request_body(args))
        saturation = max(levels, key=lambda lv: lv["qps"])
        rate = args.open_loop_rate or saturation["qps"] / 2
        half = await open_loop(client, questions.phase(), rate, args.seconds, args.unit, request_body(args))
        print(json.dumps({"half_load": half}), file=sys.stderr)
        soak = None
        if args.soak_seconds > 0:
            over = max(args.concurrency) * 2  # above saturation: the queue bound must answer 429, nothing else
            soak = await closed_loop(client, questions.phase(), over, args.soak_seconds, args.unit,
                                     request_body(args))
            soak["non_429_errors"] = soak["errors"]
        return {"levels": levels, "single": single, "saturation": saturation, "half_load": half, "soak": soak}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, help="index directory (or use --synthetic)")
    p.add_argument("--model", default="default")
    p.add_argument("--synthetic", type=Path, help="build/reuse an untrained model + small index in this directory")
    p.add_argument("--synthetic-docs", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="encoder precision of both the raw pipeline and the service (auto: as the service defaults)")
    p.add_argument("--runtime", default="auto", choices=["auto", "torch", "onnx"], help="forward passes: auto (ONNX Runtime in fp32 on a CPU), torch or onnx")
    p.add_argument("--unit", default="passage", choices=UNITS)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--read", action="store_true", help="requests read their top passages (the server gets --reader)")
    p.add_argument("--reader", default="default", help="with --read: the reader directory")
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=0.0)
    p.add_argument("--max-queue", type=int, default=256)
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads of the raw pipeline and the service (default: torch's, all cores)")
    p.add_argument("--pipeline", default="auto", choices=["auto", "on", "full", "off"],
                   help="the service's encode/search pipeline; unless off, the raw pipeline is compared overlapped too")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64, 128])
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each measurement")
    p.add_argument("--open-loop-rate", type=float, default=None,
                   help="open-loop rate in q/s (default: half the saturation rate), e.g. to compare settings at one load")
    p.add_argument("--soak-seconds", type=float, default=0.0, help="bounded soak above saturation (0 = none)")
    p.add_argument("--out", type=Path, required=True, help="JSON results")
    args = p.parse_args(argv)
    if args.synthetic:
        index, model_dir = build_synthetic(args.synthetic, args.synthetic_docs)
        model = str(model_dir)
    elif args.index:
        index, model = args.index, args.model
    else:
        p.error("give --index or --synthetic")

    from spanseek.core.loading import open_searcher

    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    searcher = open_searcher(index, model, device=args.device, precision=args.precision,
                             reader=args.reader if args.read else None, runtime=args.runtime)
    runtime = searcher.encoder.passes.name  # onnx or torch
    precision = searcher.encoder.precision  # what "auto" chose here (the server picks the same on this host)
    questions = Questions(searcher.index.passages)
    params = SearchParams(unit=args.unit, top_k=args.top_k, read=args.read)
    raw_sequential = raw_throughput(searcher, questions.phase(), args.max_batch_size, args.seconds, params)
    raw_pipelined = raw_throughput_pipelined(searcher, questions.phase(), args.max_batch_size, args.seconds, params)
    raw = raw_pipelined if args.pipeline != "off" else raw_sequential  # like for like with the service
    print(f"raw pipeline: {raw_sequential:.1f} q/s sequential, {raw_pipelined:.1f} q/s pipelined, at batch "
          f"{args.max_batch_size}", file=sys.stderr)
    del searcher  # free the cores' caches and memory for the server

    port = free_port()
    proc = start_server(args, index, model, port)
    try:
        service = asyncio.run(run_service(args, f"http://127.0.0.1:{port}", proc, questions))
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    sat = service["saturation"]
    result = {
        "index": str(index), "model": model, "device": args.device, "precision": precision, "runtime": runtime,
        "unit": args.unit,
        "top_k": args.top_k, "read": args.read,
        "max_batch_size": args.max_batch_size, "max_wait_ms": args.max_wait_ms, "pipeline": args.pipeline,
        "torch_threads": args.torch_threads,
        "raw_qps": raw, "raw_sequential_qps": raw_sequential, "raw_pipelined_qps": raw_pipelined, **service,
        "service_over_raw": sat["qps"] / raw, "service_over_raw_sequential": sat["qps"] / raw_sequential,
        "half_load_p99_over_single_p50": service["half_load"]["p99_ms"] / service["single"]["p50_ms"],
        "questions_repeated": questions.repeated,
        "cpu": cpu_name(), "cpu_count": os.cpu_count(), "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\n{'concurrency':>11} {'q/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'batch':>6} {'errors':>6}")
    for lv in service["levels"]:
        print(f"{lv['concurrency']:>11} {lv['qps']:>8.1f} {lv['p50_ms']:>8.1f} {lv['p95_ms']:>8.1f} {lv['p99_ms']:>8.1f} "
              f"{lv['mean_batch_size']:>6.1f} {lv['errors']:>6}")
    print(f"raw pipeline {raw:.1f} q/s; service at saturation {sat['qps']:.1f} q/s = {result['service_over_raw']:.2f} x raw")
    print(f"single p50 {service['single']['p50_ms']:.1f} ms; p99 at half load {service['half_load']['p99_ms']:.1f} ms "
          f"= {result['half_load_p99_over_single_p50']:.2f} x")
    if service["soak"]:
        print(f"soak {args.soak_seconds:.0f} s: status {service['soak']['status']}, errors other than 429: "
              f"{service['soak']['non_429_errors']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
