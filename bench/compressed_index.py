"""Exact vs compressed phrase indexes: accuracy, search speed (ratio to exact, same run), bytes per token.

    python bench/compressed_index.py --model runs/default-v1/last --corpus work/train-corpus.jsonl \\
        --questions runs/default-v1/validation.json.gz --limit-questions 500 --workdir work/bench-compressed \\
        --out work/bench-compressed.json
    python bench/compressed_index.py --model default --corpus data/demo/corpus.jsonl.gz \\
        --questions ../shared/data/squad-v1.1-train.json.gz --limit-passages 2000 --out runs/bench/compressed-small.json

The exact (Flat) index of the corpus's first --limit-passages passages is built once (or reused from --workdir);
every compressed factory is then built over the same token vectors with ``indexer.build.reindex`` (no passage
is encoded twice). Factories default to IVF-SQ8 and IVF-SQ4 (accuracy points) and OPQ/IVF/PQ with 8-bit and
4-bit fast-scan codes (size points), nlist from the token count (``auto_nlist``). For each index:

- accuracy with ``core.evaluate.evaluate`` (phrase EM@1/F1@1, passage acc@5, doc acc@5) on the questions, with
  span completion and re-scoring from the fine store (``fine``: fp16, or sq8 / sq4 with ``FACTORY@sq8``) and,
  for compressed indexes (with ``--codes``), from the decoded codes alone (``codes``);
- phrase-search q/s (``Searcher.search_vectors``, batch 64, top-k 10, questions encoded once beforehand) and
  its ratio to the exact index's q/s measured in the same run, at every --nprobes value for IVF indexes, with
  the share of questions whose top phrase equals the exact index's;
- with ``FACTORY@STORE@T``, only tokens whose start or end filter probability reaches T are indexed and
  stored (``--filter-model`` gives the filter head when the exact index was built without one);
- bytes per token in RAM / memory-mapped / on disk (``indexer.verify.memory_per_token``) and build times.

``--speed-only`` reuses the indexes of a finished run and times them again without evaluating, for a run whose
timings shared the machine with other work (accuracy does not depend on load; speed ratios do).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch/faiss: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from spanseek.core.evaluate import evaluate, sample_questions  # noqa: E402
from spanseek.core.faiss_spec import parse_factory  # noqa: E402
from spanseek.core.io import load_squad, read_corpus, squad_questions, write_corpus, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.core.phrase_index import Manifest, PhraseIndex  # noqa: E402
from spanseek.indexer.build import BuildOptions, build_index, reindex  # noqa: E402
from spanseek.indexer.faiss_index import auto_nlist  # noqa: E402
from spanseek.indexer.verify import memory_per_token  # noqa: E402


class CachedEncoder:
    """Encodes each question once; every index variant then searches with the same vectors."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def encode(self, questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        todo = [q for q in dict.fromkeys(questions) if q not in self.cache]
        if todo:
            qs, qe = self.encoder.encode(todo)
            self.cache.update({q: (qs[i], qe[i]) for i, q in enumerate(todo)})
        return (np.stack([self.cache[q][0] for q in questions]), np.stack([self.cache[q][1] for q in questions]))


def limited_corpus(corpus: Path, limit: int | None, dest: Path) -> Path:
    """The corpus cut after its first ``limit`` passages (whole corpus when None)."""
    if limit is None:
        return corpus
    docs, n = [], 0
    for doc in read_corpus(corpus):
        keep = doc.paragraphs[: limit - n]
        docs.append(type(doc)(id=doc.id, title=doc.title, paragraphs=keep))
        n += len(keep)
        if n >= limit:
            break
    write_corpus(dest, docs)
    return dest


def default_factories(tokens: int, dim: int) -> list[str]:
    nlist = auto_nlist(tokens)
    m = dim // 4 if dim % 4 == 0 else dim
    return [f"IVF{nlist},SQ8", f"IVF{nlist},SQ4", f"OPQ{m},IVF{nlist},PQ{m}", f"OPQ{m},IVF{nlist},PQ{m}x4fs"]


def phrase_speed(searcher, q_start: np.ndarray, q_end: np.ndarray, nprobe: int | None, batch: int = 64):
    """(questions/s, top phrase per question) of phrase search at top-k 10, after one warm-up batch."""
    params = SearchParams(unit="phrase", top_k=10, nprobe=nprobe, mode="dense")
    searcher.search_vectors(q_start[:batch], q_end[:batch], params)
    tops = []
    t0 = time.perf_counter()
    for a in range(0, len(q_start), batch):
        hits = searcher.search_vectors(q_start[a : a + batch], q_end[a : a + batch], params)
        tops += [(h[0].passage_id, h[0].start, h[0].end) if h else None for h in hits]
    return len(q_start) / (time.perf_counter() - t0), tops


def run(args: argparse.Namespace) -> dict:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    corpus = limited_corpus(Path(args.corpus), args.limit_passages, work / "corpus.jsonl")
    exact_dir = work / "Flat"
    t0 = time.perf_counter()
    if not (exact_dir / "manifest.json").exists():
        build_index(corpus, args.model, exact_dir, BuildOptions(factory="Flat", progress=not args.quiet))
    exact_m = Manifest.load(exact_dir)
    encode_seconds = time.perf_counter() - t0
    dim = int(exact_m.encoder["dim"])
    factories = args.factories.split(";") if args.factories else default_factories(exact_m.tokens, dim)
    builds = {"Flat": exact_m.build_seconds}
    result: dict = {}
    base = open_searcher(exact_dir, args.model)
    indexed = {(base.index.docs[p["doc"]]["title"], p["text"]) for p in base.index.passages}
    # only questions whose gold passage is in the (possibly --limit-passages cut) index
    pool = [q for q in squad_questions(load_squad(args.questions)) if (q.title, q.context) in indexed]
    questions = sample_questions(pool, args.limit_questions)
    encoder = CachedEncoder(base.encoder)
    q_start, q_end = encoder.encode([q.question for q in questions])
    nprobes = [int(x) for x in args.nprobes.split(",")]

    rows = []
    exact_qps, exact_tops = None, None
    if args.exact_from:  # the exact row of an earlier run over the same corpus and questions (the slow one)
        earlier = json.loads(Path(args.exact_from).read_text())
        same = (earlier["tokens"], earlier["questions"], earlier["model"]) == (exact_m.tokens, len(questions),
                                                                               str(args.model))
        if not same or earlier["rows"][0]["factory"] != "Flat":
            raise SystemExit(f"{args.exact_from}: not an exact row over this corpus ({exact_m.tokens} tokens), "
                             f"these {len(questions)} questions and model {args.model}")
        rows.append(earlier["rows"][0])
    for f in ["Flat", *factories][1 if args.exact_from else 0 :]:
        d = exact_dir if f == "Flat" else work / f.replace(",", "_").replace("@", "-")
        factory, _, rest = f.partition("@")
        fine_store, _, threshold = rest.partition("@")
        if not (d / "manifest.json").exists():  # built here, one at a time, so early rows are written early
            m = reindex(exact_dir, d, BuildOptions(factory=factory, max_train=args.max_train, progress=not args.quiet,
                                                   store=fine_store or None,
                                                   keep_codes=args.codes and parse_factory(factory).has_codes,
                                                   filter_threshold=float(threshold) if threshold else None),
                        filter_model=args.filter_model)
            print(f"built {f} in {m.build_seconds:.1f}s", flush=True)
        builds[f] = Manifest.load(d).build_seconds
        index = PhraseIndex(d)
        searcher = type(base)(index, encoder)
        mem = memory_per_token(index)
        man = index.manifest
        is_ivf = man.spec.is_ivf
        default_nprobe = man.faiss_params.get("nprobe")
        sweep = []
        speed_at = [] if args.no_speed else nprobes if is_ivf else [None]
        for nprobe in speed_at:
            qps, tops = phrase_speed(searcher, q_start, q_end, nprobe)
            if exact_qps is None:
                exact_qps, exact_tops = qps, tops
            same = float(np.mean([a == b for a, b in zip(tops, exact_tops, strict=True)]))
            sweep.append({"nprobe": nprobe, "qps": round(qps, 1), "speed_x_exact": round(qps / exact_qps, 2),
                          "top1_same_as_exact": round(100 * same, 1)})
            print(f"{f:<28} nprobe {nprobe!s:>5}: {qps:8.1f} q/s  x{qps / exact_qps:6.2f}  top-1 = exact {100 * same:5.1f}%",
                  flush=True)
        nprobe = args.eval_nprobe or default_nprobe
        for source in (["fine", "codes"] if index.codes is not None else ["fine"]):
            if args.speed_only:  # accuracy does not depend on machine load; re-time a finished run on a quiet machine
                metrics = {"phrase": {"em@1": float("nan"), "f1@1": float("nan")},
                           "passage": {"acc@5": float("nan")}, "doc": {"acc@5": float("nan")}}
            else:
                metrics = evaluate(searcher, questions, progress=False,
                                   params=SearchParams(nprobe=nprobe, vector_source=source, mode="dense"))
            qps = float("nan") if args.no_speed else phrase_speed(searcher, q_start, q_end, nprobe)[0]
            rows.append({
                "factory": f, "fine_store": man.fine_store, "vector_source": source, "nprobe": nprobe,
                "phrase_em@1": metrics["phrase"]["em@1"], "phrase_f1@1": metrics["phrase"]["f1@1"],
                "passage_acc@5": metrics["passage"]["acc@5"], "doc_acc@5": metrics["doc"]["acc@5"],
                "qps": round(qps, 1),
                "ram_bytes_per_token": mem["ram_bytes_per_token"], "mapped_bytes_per_token": mem["mapped_bytes_per_token"],
                "disk_bytes_per_token": mem["disk_bytes_per_token"], "memory": mem,
                "build_seconds": builds[f], "faiss_params": man.faiss_params, "nprobe_sweep": sweep,
            })
        result = {"corpus": str(corpus), "model": str(args.model), "questions": len(questions),
                  "tokens": exact_m.tokens, "passages": exact_m.passages, "dim": dim,
                  "exact_build_seconds": round(encode_seconds, 1), "rows": with_deltas(rows)}
        if args.out:  # after every index, so a long run that is stopped still leaves its rows
            write_json_atomic(args.out, result)
    return result


def with_deltas(rows: list[dict]) -> list[dict]:
    """Add speed ratio, RAM fraction and accuracy deltas relative to the first (exact) row (same run)."""
    exact = rows[0]
    for r in rows:
        r["speed_x_exact"] = round(r["qps"] / exact["qps"], 2)
        r["ram_fraction_of_exact"] = round(r["ram_bytes_per_token"] / exact["ram_bytes_per_token"], 4)
        r["em_delta_vs_exact"] = round(r["phrase_em@1"] - exact["phrase_em@1"], 1)
        r["acc5_delta_vs_exact"] = round(r["passage_acc@5"] - exact["passage_acc@5"], 1)
    return rows


def print_table(result: dict) -> None:
    print(f"\n{result['tokens']} tokens, {result['passages']} passages, {result['questions']} questions")
    head = (f"{'factory':<28} {'source':<6} {'nprobe':>6} {'EM@1':>6} {'dEM':>5} {'acc@5':>6} {'dacc5':>6} "
            f"{'q/s':>7} {'x exact':>7} {'RAM B/tok':>9} {'RAM/exact':>9} {'disk B/tok':>10} {'build s':>8}")
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        print(f"{r['factory']:<28} {r['vector_source']:<6} {r['nprobe']!s:>6} {r['phrase_em@1']:>6.1f} "
              f"{r['em_delta_vs_exact']:>5.1f} {r['passage_acc@5']:>6.1f} {r['acc5_delta_vs_exact']:>6.1f} {r['qps']:>7.1f} "
              f"{r['speed_x_exact']:>7.2f} {r['ram_bytes_per_token']:>9.1f} {r['ram_fraction_of_exact']:>9.3f} "
              f"{r['disk_bytes_per_token']:>10.1f} {r['build_seconds']:>8.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--corpus", required=True, help="JSONL corpus")
    p.add_argument("--questions", required=True, help="SQuAD-format questions (JSON or .json.gz)")
    p.add_argument("--limit-passages", type=int, default=None, help="index only the first N passages")
    p.add_argument("--limit-questions", type=int, default=500, help="a fixed random sample of N questions")
    p.add_argument("--factories", default=None,
                   help="';'-separated factory strings, each optionally @fp16|sq8|sq4 for its fine store and "
                        "then @T for a token filter threshold (e.g. 'Flat@sq8;IVF1024,SQ8@sq4;Flat@sq4@0.2'; "
                        "default: see the docstring)")
    p.add_argument("--filter-model", default=None,
                   help="model with a filter head (same phrase encoder) whose scores filter the @T variants when "
                        "the exact index has none")
    p.add_argument("--codes", action=argparse.BooleanOptionalAction, default=True,
                   help="keep each compressed index's codes.npy and evaluate the codes neighbour source too")
    p.add_argument("--nprobes", default="4,16,64", help="nprobe values for the q/s sweep")
    p.add_argument("--eval-nprobe", type=int, default=None, help="nprobe for accuracy (default: the index's)")
    p.add_argument("--max-train", type=int, default=65_536, help="faiss training sample bound")
    p.add_argument("--workdir", default="work/bench-compressed", help="indexes are built (and reused) here")
    p.add_argument("--out", default=None, help="JSON results")
    p.add_argument("--speed-only", action="store_true",
                   help="reuse the built indexes and time them again without evaluating (accuracy reads NaN)")
    p.add_argument("--no-speed", action="store_true",
                   help="accuracy and sizes only (no q/s passes: for large corpora on a busy machine)")
    p.add_argument("--exact-from", default=None, metavar="JSON",
                   help="take the exact (Flat) row from this earlier --out of the same corpus, model and questions "
                        "instead of evaluating it again (with --no-speed)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.exact_from and not args.no_speed:
        p.error("--exact-from takes accuracy only: add --no-speed (speed ratios need the exact index timed in the same run)")
    result = run(args)
    print_table(result)
    if args.out:
        write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
