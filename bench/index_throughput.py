"""Indexing throughput: `spanseek index build` tokens/s as a ratio of the raw encoder forward on the same batches.

    python bench/index_throughput.py --model default --corpus data/demo/corpus.jsonl.gz --out runs/bench/index.json
    python bench/index_throughput.py --model runs/snap150 --limit-passages 200 --out runs/bench/index-small.json

1. raw: the first --limit-passages passages are tokenised and cut into windows shard by shard exactly as the
   build does (``PassageEncoder.forward_windows``); the padded batches it feeds the phrase encoder are recorded
   on a warm-up pass, then only ``model.encode_passages`` over those batches is timed (no_grad, same precision);
2. build: ``build_index`` of the same passages (read, tokenise, encode, shard files, merge, faiss Flat, manifest)
   into a temporary directory, timed end to end.

Both rates count the passages' content tokens (window overlap and [CLS]/[SEP] are the build's overhead), so
``ratio`` = build tokens/s ÷ raw tokens/s ≤ 1 is the share of encoder speed the indexer keeps. The best of
--repeats runs is kept for each (the machines are shared and noisy; compare ratios within one run).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no per-load reports in the benchmark output

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.encoding import PassageEncoder, autocast, pick_device, pick_precision  # noqa: E402
from spanseek.core.io import Document, read_corpus, write_corpus, write_json_atomic  # noqa: E402
from spanseek.core.model import load_model, load_tokenizer, resolve_model  # noqa: E402
from spanseek.core.text import tokenize_passages  # noqa: E402
from spanseek.indexer.build import BuildOptions, build_index  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def first_passages(corpus: Path, limit: int | None) -> list[Document]:
    """Documents of the corpus, cut so that they hold at most ``limit`` passages in all."""
    docs, n = [], 0
    for doc in read_corpus(corpus):
        if limit is not None and n + len(doc.paragraphs) > limit:
            if limit > n:
                docs.append(Document(doc.id, doc.title, doc.paragraphs[: limit - n]))
            break
        docs.append(doc)
        n += len(doc.paragraphs)
    return docs


def recorded_batches(encoder: PassageEncoder, texts: list[str], shard: int) -> tuple[list, int]:
    """The (ids, mask) batches the build feeds the encoder (shard by shard), and the content token count."""
    batches, n_tokens = [], 0
    model = encoder.model
    forward = model.encode_passages
    model.encode_passages = lambda ids, mask: batches.append((ids, mask)) or forward(ids, mask)
    try:
        for a in range(0, len(texts), shard):
            toks = tokenize_passages(encoder.tokenizer, texts[a : a + shard])
            n_tokens += sum(len(t) for t in toks)
            _, ids, _ = encoder.window_ids(toks)
            for _ in encoder.forward_windows(ids):
                pass
    finally:
        del model.encode_passages  # back to the class method
    return batches, n_tokens


def time_raw(model, batches: list, device: torch.device, precision: str) -> float:
    t0 = time.perf_counter()
    with torch.no_grad(), autocast(device, precision):
        for ids, mask in batches:
            model.encode_passages(ids.to(device), mask.to(device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default", help="model directory or 'default'")
    p.add_argument("--corpus", default=str(ROOT / "data" / "demo" / "corpus.jsonl.gz"), help="JSONL corpus")
    p.add_argument("--limit-passages", type=int, default=None, help="use only the first N passages")
    p.add_argument("--shard-passages", type=int, default=2000)
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=1, help="runs of each measurement; the fastest is kept")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)

    device = pick_device(args.device)
    precision = pick_precision(args.precision, device)
    model_dir = resolve_model(args.model)
    model = load_model(model_dir).to(device)
    encoder = PassageEncoder(model, load_tokenizer(model.config), precision, args.max_batch_tokens)
    docs = first_passages(Path(args.corpus), args.limit_passages)
    texts = [t for d in docs for t in d.paragraphs]
    batches, n_tokens = recorded_batches(encoder, texts, args.shard_passages)  # also the warm-up
    raw = min(time_raw(model, batches, device, precision) for _ in range(args.repeats))

    opts = BuildOptions(shard_passages=args.shard_passages, max_batch_tokens=args.max_batch_tokens,
                        precision=precision, device=str(device), progress=False)
    build = float("inf")
    with tempfile.TemporaryDirectory(prefix="spanseek-bench-") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, docs)
        for r in range(args.repeats):
            t0 = time.perf_counter()
            manifest = build_index(corpus, model_dir, Path(tmp) / f"index-{r}", opts)
            build = min(build, time.perf_counter() - t0)
    assert manifest.tokens == n_tokens, (manifest.tokens, n_tokens)

    window_tokens = sum(int(mask.sum()) for _, mask in batches)
    result = {
        "benchmark": "index_throughput",
        "model": str(args.model), "corpus": str(args.corpus), "device": str(device), "cpu": cpu_name(),
        "precision": precision,
        "torch_threads": torch.get_num_threads(),
        "passages": len(texts), "documents": len(docs), "tokens": n_tokens,
        "windows": sum(len(ids) for ids, _ in batches), "window_tokens": window_tokens, "batches": len(batches),
        "raw_forward_seconds": round(raw, 3), "build_seconds": round(build, 3),
        "raw_tokens_per_second": round(n_tokens / raw, 1), "build_tokens_per_second": round(n_tokens / build, 1),
        "ratio": round(raw / build, 3),
    }
    write_json_atomic(args.out, result)
    print(f"{'stage':<10} {'seconds':>9} {'tokens/s':>10}")
    print(f"{'raw':<10} {raw:>9.2f} {n_tokens / raw:>10.0f}")
    print(f"{'build':<10} {build:>9.2f} {n_tokens / build:>10.0f}")
    print(f"ratio build/raw = {result['ratio']:.3f}  ({len(texts)} passages, {n_tokens} tokens, "
          f"{result['windows']} windows, {window_tokens} window tokens)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
