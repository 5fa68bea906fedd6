"""CLI for corpus conversion, index building, search and evaluation (registered into `spanseek`)."""

from __future__ import annotations

import argparse
import json
import sys


def _from_squad(args: argparse.Namespace) -> int:
    from core.io import from_squad

    n = from_squad(args.input, args.out)
    print(f"wrote {n} documents to {args.out}", file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> int:
    from indexer.build import BuildOptions, build_index

    opts = BuildOptions(
        factory=args.factory, shard_passages=args.shard_passages, max_batch_tokens=args.max_batch_tokens,
        precision=args.precision, device=args.device, progress=not args.quiet,
    )
    if args.filter_threshold is not None:
        from core.model import load_model

        if load_model(args.model).filter_head is None:
            raise ValueError(f"--filter-threshold needs a model with a filter head; {args.model} has none "
                             "(train one with `spanseek train filter`)")
    m = build_index(args.corpus, args.model, args.out, opts)
    print(json.dumps(m.to_dict(), indent=2))
    return 0


def _search(args: argparse.Namespace) -> int:
    from core.loading import open_searcher

    searcher = open_searcher(args.index, args.model, device=args.device)
    questions = args.questions or [line.strip() for line in sys.stdin if line.strip()]
    results = searcher.search(questions, unit=args.unit, top_k=args.top_k, nprobe=args.nprobe)
    for q, hits in zip(questions, results, strict=True):
        print(json.dumps({"query": q, "unit": args.unit, "hits": [h.to_dict() for h in hits]}, ensure_ascii=False))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from indexer.evaluate import run_eval

    m = run_eval(args.questions, args.model, index=args.index, reading_comprehension=args.reading_comprehension,
                 limit=args.limit, out=args.out, progress=not args.quiet)
    print(json.dumps(m, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    corpus = sub.add_parser("corpus", help="corpus conversion").add_subparsers(dest="corpus_command", required=True)
    p = corpus.add_parser("from-squad", help="SQuAD-format JSON(.gz) -> JSONL corpus (one document per article)")
    p.add_argument("input")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_from_squad)

    index = sub.add_parser("index", help="build and inspect phrase indexes").add_subparsers(dest="index_command", required=True)
    p = index.add_parser("build", help="encode a corpus and build its phrase index (resumes a killed build)")
    p.add_argument("--corpus", required=True, help="JSONL corpus")
    p.add_argument("--model", default="default", help="model directory or 'default'")
    p.add_argument("--out", required=True, help="index directory")
    p.add_argument("--factory", default="Flat", help="faiss factory string (inner product), e.g. Flat, IVF256,SQ8")
    p.add_argument("--shard-passages", type=int, default=2000, help="passages per resumable shard")
    p.add_argument("--max-batch-tokens", type=int, default=8192, help="tokens per encoder forward pass")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--filter-threshold", type=float, default=None, help="drop tokens below this filter score")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_build)

    p = sub.add_parser("search", help="search an index; prints one JSON line per question")
    p.add_argument("questions", nargs="*", help="questions (default: one per line on stdin)")
    p.add_argument("--index", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--unit", default="phrase", choices=["phrase", "passage", "doc"])
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--nprobe", type=int, default=None)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=_search)

    p = sub.add_parser("eval", help="phrase/passage/doc accuracy on SQuAD-format questions")
    p.add_argument("--questions", required=True, help="SQuAD-format JSON(.gz)")
    p.add_argument("--model", default="default")
    p.add_argument("--index", default=None, help="index to search (default: the question file's paragraphs)")
    p.add_argument("--reading-comprehension", action="store_true", help="also answer within the gold passage")
    p.add_argument("--limit", type=int, default=None, help="a fixed random sample of N questions")
    p.add_argument("--out", default=None, help="metrics JSON")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_eval)
