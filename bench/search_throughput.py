"""In-process search throughput (questions/s at batch 64) as a ratio of raw question-encoding throughput.

    python bench/search_throughput.py --model default --corpus data/demo/corpus.jsonl.gz --out runs/bench/search.json
    python bench/search_throughput.py --model runs/snap150 --limit-passages 200 --n-questions 128 --out runs/bench/search-small.json
    python bench/search_throughput.py --index work/demo-index --model default --out runs/bench/search.json

The index is --index, or else a temporary exact (Flat) index of the corpus's first --limit-passages passages
built with the model (not timed). Questions are the held-out SQuAD train questions (the demo corpus's articles;
``--split all`` takes every article of --questions), the first --n-questions of a fixed shuffle. After a warm-up
batch it times, over the same batches, in turn in each of ``--repeats`` rounds (the fastest of each kept):

- raw: ``QuestionEncoder.encode`` (tokenise + question encoder forward) alone;
- per unit: ``Searcher.search`` (encode + start/end MIPS + span completion + aggregation/deepening), top-k 10,
  with the searcher's own split of the time into encode / search / aggregate; ``phrase_merged`` is the phrase
  unit with ``merge_answers`` (one hit per distinct answer string, from the best max(64, 4 top_k) phrases).

``ratio`` = search q/s ÷ raw encode q/s (≤ 1): the share of the encoder's speed the whole search keeps.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no per-load reports in the benchmark output

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core import bf16_scan, flat_search  # noqa: E402
from spanseek.core.holdout import split_articles  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_corpus, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import (
    UNITS,  # noqa: E402
    SearchParams,
)
from spanseek.core.plan import StageTimes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SQUAD_TRAIN = ROOT.parent / "shared" / "data" / "squad-v1.1-train.json.gz"
DEMO_CORPUS = ROOT / "data" / "demo" / "corpus.jsonl.gz"


def bench_questions(path: str, split: str, n: int, seed: int = 0) -> list[str]:
    """The first ``n`` questions of a fixed shuffle of the held-out (or all) articles of a SQuAD-format file."""
    data = load_squad(path)
    articles = split_articles(data)[1] if split == "held" else data
    questions = [q.question for q in squad_questions(articles)]
    random.Random(seed).shuffle(questions)
    return questions[:n]


def timed(fn, batches: list[list[str]]) -> float:
    t0 = time.perf_counter()
    for b in batches:
        fn(b)
    return time.perf_counter() - t0


def run(args: argparse.Namespace, index_dir: Path) -> dict:
    load_before = os.getloadavg()
    searcher = open_searcher(index_dir, args.model, device=args.device, precision=args.precision,
                             runtime=args.runtime)
    questions = bench_questions(args.questions, args.split, args.n_questions)
    batches = [questions[a : a + args.batch_size] for a in range(0, len(questions), args.batch_size)]
    searcher.search(batches[0], SearchParams(unit="passage", top_k=args.top_k))  # warm-up (allocations, page cache)
    n = len(questions)
    runs = [(unit, unit, False) for unit in args.units]
    if "phrase" in args.units:
        runs.append(("phrase_merged", "phrase", True))  # merge_answers: one hit per answer string
    # Each repeat times the raw encoder and then every unit, so a ratio compares runs minutes apart at most and a
    # slow spell of a shared machine hits both sides; the fastest of each is kept.
    raw, best = float("inf"), {name: (float("inf"), StageTimes()) for name, _, _ in runs}
    for _ in range(args.repeats):
        raw = min(raw, timed(searcher.encoder.encode, batches))
        for name, unit, merge in runs:
            t, params = StageTimes(), SearchParams(unit=unit, top_k=args.top_k, merge_answers=merge)
            seconds = timed(lambda b, t=t, params=params: searcher.search(b, params, t), batches)
            if seconds < best[name][0]:
                best[name] = (seconds, t)
    result = {
        "benchmark": "search_throughput", "model": str(args.model), "index": str(index_dir),
        "indexed_tokens": int(searcher.index.faiss.ntotal), "passages": len(searcher.index.passages),
        "factory": searcher.index.manifest.factory, "precision": searcher.encoder.precision,
        "runtime": searcher.encoder.passes.name,
        "torch_threads": torch.get_num_threads(),
        "transposed": searcher.dense.transposed_vectors() is not None,  # a flat scan's copy (never on a GPU)
        "bf16_screen": searcher.dense.flat_holds_fine and searcher.dense.half_vectors().used
        and isinstance(searcher.dense.half_vectors(), bf16_scan.Bf16Vectors),
        "questions": n, "batch_size": args.batch_size, "top_k": args.top_k,
        "repeats": args.repeats, "raw_encode_seconds": round(raw, 3), "raw_encode_qps": round(n / raw, 1),
        "units": {}, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
    }
    for name, (seconds, parts) in best.items():
        result["units"][name] = {
            "seconds": round(seconds, 3), "qps": round(n / seconds, 1), "ratio": round(raw / seconds, 3),
            **{f"{k}_seconds": round(getattr(parts, k), 3) for k in ("encode", "search", "aggregate")},
        }
    # other jobs share the machine: its load (1, 5, 15 minutes) before and after, beside the figures
    result["load_average"] = {"before": [round(x, 2) for x in load_before],
                              "after": [round(x, 2) for x in os.getloadavg()]}
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default", help="model directory or 'default'")
    p.add_argument("--corpus", default=str(DEMO_CORPUS), help="JSONL corpus (when no --index)")
    p.add_argument("--limit-passages", type=int, default=None, help="index only the first N passages")
    p.add_argument("--index", default=None, help="an existing index built with --model")
    p.add_argument("--questions", default=str(SQUAD_TRAIN),
                   help="SQuAD-format file the questions come from (default: SQuAD v1.1 train in ../shared/data)")
    p.add_argument("--split", default="held", choices=["held", "all"], help="held-out articles only, or all")
    p.add_argument("--n-questions", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--runtime", default="auto", choices=["auto", "torch", "onnx"], help="forward passes: auto (ONNX Runtime in fp32 on a CPU), torch or onnx")
    p.add_argument("--device", default="auto")
    p.add_argument("--transposed", default="auto", choices=["auto", "off"],
                   help="off: flat scans never keep the vectors transposed (flat_search.TRANSPOSED_BYTES = 0), to compare")
    p.add_argument("--bf16", default="default", choices=["default", "on", "off"],
                   help="on / off: flat scans of small batches screen with a bf16 copy where the CPU has AVX-512 BF16 "
                        "(bf16_scan.BF16_BYTES = 1 GiB) / never (0), to compare; default: as the module says")
    p.add_argument("--repeats", type=int, default=1, help="runs of each measurement; the fastest is kept")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)
    if not Path(args.questions).is_file():  # before the model loads; the default is the SQuAD file of the dev machines
        p.error(f"--questions {args.questions}: no such file; give a SQuAD-format file of questions, e.g. "
                f"--questions runs/validation.json.gz --split all (the held-out questions, as README.md's \"What to "
                f"expect\" writes them)")
    if args.transposed == "off":
        flat_search.TRANSPOSED_BYTES = 0
    if args.bf16 != "default":
        bf16_scan.BF16_BYTES = 1 << 30 if args.bf16 == "on" else 0

    if args.index:
        result = run(args, Path(args.index))
    else:
        from index_throughput import first_passages  # noqa: I001  (bench/ is on sys.path when run as a script)

        from spanseek.indexer.build import BuildOptions, build_index

        with tempfile.TemporaryDirectory(prefix="spanseek-bench-") as tmp:
            corpus = Path(tmp) / "corpus.jsonl"
            write_corpus(corpus, first_passages(Path(args.corpus), args.limit_passages))
            build_index(corpus, args.model, Path(tmp) / "index",
                        BuildOptions(precision=args.precision, device=args.device, progress=False))
            result = run(args, Path(tmp) / "index")
    write_json_atomic(args.out, result)
    print(f"{'stage':<16} {'seconds':>8} {'q/s':>8} {'ratio':>6}   (encode / search / aggregate s)")
    print(f"{'raw encode':<16} {result['raw_encode_seconds']:>8.2f} {result['raw_encode_qps']:>8.1f} {1:>6.3f}")
    for unit, r in result["units"].items():
        split = " / ".join(f"{r.get(f'{k}_seconds', 0):.2f}" for k in ("encode", "search", "aggregate"))
        print(f"{'search ' + unit:<16} {r['seconds']:>8.2f} {r['qps']:>8.1f} {r['ratio']:>6.3f}   ({split})")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
