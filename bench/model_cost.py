"""What a phrase model costs on this machine: questions/s, indexing tokens/s and index bytes per token, for several
models in one run, each as a ratio to the first.

    python bench/model_cost.py --models default,base --limit-passages 200 --out bench/results/model_cost.json

For each model, on the same passages and questions, at the same precision and thread count:
1. questions/s: ``QuestionEncoder.encode`` on the held-out questions of --questions, in batches of 64 and one at a
   time (the service's two extremes), the best of --repeats passes;
2. indexing tokens/s: ``build_index`` of the first --limit-passages passages of --corpus (exact Flat index),
   timed end to end, and the raw encoder forward over the same batches (``bench/index_throughput.py``'s method);
3. bytes per token: every file of that index over its content tokens, and the two that grow with the vector
   width: the faiss index (fp32 vectors when Flat) and the fine store (``vectors.npy``, fp16 by default).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ helpers when run as a script
from index_throughput import first_passages, recorded_batches, time_raw  # noqa: E402
from machine import cpu_name  # noqa: E402
from search_throughput import SQUAD_TRAIN, bench_questions  # noqa: E402

from spanseek.core.encoding import PassageEncoder, QuestionEncoder, pick_device, pick_precision  # noqa: E402
from spanseek.core.io import write_corpus, write_json_atomic  # noqa: E402
from spanseek.core.model import load_model, load_tokenizer, resolve_model  # noqa: E402
from spanseek.indexer.build import BuildOptions, build_index  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def questions_per_second(encoder: QuestionEncoder, questions: list[str], batch: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a in range(0, len(questions), batch):
            encoder.encode(questions[a : a + batch])
        best = min(best, time.perf_counter() - t0)
    return len(questions) / best


def measure(ref: str, docs: list, questions: list[str], args: argparse.Namespace, device, precision: str) -> dict:
    model_dir = resolve_model(ref)
    model = load_model(model_dir).to(device)
    tokenizer = load_tokenizer(model.config)
    qenc = QuestionEncoder(model, tokenizer, precision)
    qenc.encode(questions[:8])  # warm-up
    q64 = questions_per_second(qenc, questions, 64, args.repeats)
    q1 = questions_per_second(qenc, questions[: args.single_questions], 1, args.repeats)
    texts = [t for d in docs for t in d.paragraphs]
    penc = PassageEncoder(model, tokenizer, precision, args.max_batch_tokens)
    batches, n_tokens = recorded_batches(penc, texts, 2000)  # also the warm-up
    raw = min(time_raw(model, batches, device, precision) for _ in range(args.repeats))
    opts = BuildOptions(max_batch_tokens=args.max_batch_tokens, precision=precision, device=str(device),
                        progress=False)
    with tempfile.TemporaryDirectory(prefix="spanseek-cost-") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, docs)
        t0 = time.perf_counter()
        manifest = build_index(corpus, model_dir, Path(tmp) / "index", opts)
        build = time.perf_counter() - t0
        files = {p.name: p.stat().st_size for p in (Path(tmp) / "index").rglob("*") if p.is_file()}
    faiss_bytes = sum(v for k, v in files.items() if k.endswith(".faiss"))
    fine_bytes = sum(v for k, v in files.items() if k.startswith(("vectors", "fine")))  # the fine store
    return {
        "model": ref, "backbone": model.config.backbone, "dim": model.config.dim,
        "parameters_millions_both_encoders": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "questions_per_second_batch64": round(q64, 1), "questions_per_second_single": round(q1, 1),
        "raw_tokens_per_second": round(n_tokens / raw, 1), "build_tokens_per_second": round(n_tokens / build, 1),
        "tokens": manifest.tokens, "index_bytes_per_token": round(sum(files.values()) / manifest.tokens, 1),
        "faiss_bytes_per_token": round(faiss_bytes / manifest.tokens, 1),
        "fine_store_bytes_per_token": round(fine_bytes / manifest.tokens, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="default,base", help="comma-separated models (directories or bundled names)")
    p.add_argument("--corpus", default=str(ROOT / "data" / "demo" / "corpus.jsonl.gz"), help="JSONL corpus")
    p.add_argument("--limit-passages", type=int, default=200, help="passages indexed per model")
    p.add_argument("--questions", default=str(SQUAD_TRAIN), help="SQuAD-format file of the questions")
    p.add_argument("--split", default="held", choices=["held", "all"], help="its held-out articles, or all")
    p.add_argument("--n-questions", type=int, default=512, help="questions encoded in batches of 64")
    p.add_argument("--single-questions", type=int, default=64, help="of those, encoded one at a time")
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--precision", default="fp32", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=2, help="passes of each timing; the fastest is kept")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)

    device = pick_device(args.device)
    precision = pick_precision(args.precision, device)
    docs = first_passages(Path(args.corpus), args.limit_passages)
    questions = bench_questions(args.questions, args.split, args.n_questions)
    rows = [measure(ref, docs, questions, args, device, precision) for ref in args.models.split(",")]
    first = rows[0]
    for row in rows:
        row["ratio_to_first"] = {k: round(row[k] / first[k], 3) for k in (
            "questions_per_second_batch64", "questions_per_second_single", "build_tokens_per_second",
            "index_bytes_per_token")}
    result = {"benchmark": "model_cost", "cpu": cpu_name(), "device": str(device), "precision": precision,
              "torch_threads": torch.get_num_threads(), "passages": sum(len(d.paragraphs) for d in docs),
              "questions": len(questions), "models": rows}
    write_json_atomic(args.out, result)
    print(f"{'model':<10} {'dim':>4} {'q/s @64':>8} {'q/s @1':>7} {'build tok/s':>11} {'B/token':>8}")
    for r in rows:
        print(f"{r['model']:<10} {r['dim']:>4} {r['questions_per_second_batch64']:>8} "
              f"{r['questions_per_second_single']:>7} {r['build_tokens_per_second']:>11} {r['index_bytes_per_token']:>8}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
