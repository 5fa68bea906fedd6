"""What a live write's snapshot costs over a large base, with no model: a synthetic in-memory base and segment.

    python bench/live_snapshot_cost.py --passages 1000000 --tokens-per-passage 12 --segment 1000 \
        --out bench/results/live_snapshot_cost.json

The base (random vectors in a flat faiss index, random BM25 terms, documents of --passages-per-doc passages with a
metadata field) is built in memory; --segment one-passage documents are written to it, --tombstones of its documents
replaced. Then, --writes times, one more document is written and its snapshot (``core.segment.LiveIndex``) made,
timed, with the parts that used to grow with the base or the segment timed alone (best of the writes):

- ``snapshot_s``: the whole snapshot (what a write waits for);
- ``lexical_s``: its BM25 part made again (``LiveLexical``: the segment's postings are the runs the snapshot
  built or found built, ``core.segment_log``);
- ``segment_scan_s``: the float32 segment vectors the first flat scan after the write multiplies by the questions
  (``LiveIndex.segment_scan_vectors``);
- ``searcher_s``: the snapshot's ``Searcher`` (its stages), which the service makes for each snapshot;
- ``unit_maps_s``: each unit's passage map the searcher takes (``UNIT_OF_PASSAGE``: the passage -> document array and
  the passage numbers);
- ``copies_s``: its repeated-text table (``core.duplicates.Copies``), which the service makes for each snapshot once
  searches collapse copies (the base's made before);
- ``token_map_s``: the token -> passage map the first filtered IVF search hands faiss (``Layout.token_map``).

Prints one JSON line per run and writes them to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402

from spanseek.core.duplicates import Copies
from spanseek.core.fieldindex import FieldIndex
from spanseek.core.live_lexical import BaseTerms
from spanseek.core.phrase_index import Manifest, PhraseIndex, passage_record
from spanseek.core.search import Searcher
from spanseek.core.segment import EncodedDocument, LiveIndex, empty_like, live_lexical
from spanseek.core.selection import UNIT_OF_PASSAGE, Layout


def synthetic_base(passages: int, per_passage: int, per_doc: int, dim: int, terms: int, vocab: int,
                   rng: np.random.Generator) -> tuple[PhraseIndex, BaseTerms]:
    """A flat in-memory base of ``passages`` passages of ``per_passage`` tokens and its BM25 terms."""
    import faiss
    import scipy.sparse as sp

    n_docs = passages // per_doc
    n = passages * per_passage
    base = object.__new__(PhraseIndex)
    base.dir = Path("synthetic")
    base.docs = [{"id": f"d{d}", "title": f"Title {d}", "meta": {"year": 1900 + d % 100}} for d in range(n_docs)]
    base.passages = [passage_record(p // per_doc, p % per_doc, f"text {p}") for p in range(passages)]
    base.token_passage = np.repeat(np.arange(passages, dtype=np.int32), per_passage)
    base.token_offsets, base.token_flags = np.zeros((n, 2), np.int32), np.full(n, 3, np.uint8)
    base.passage_tokens = np.arange(0, n + 1, per_passage, dtype=np.int64)
    base.deleted_docs = np.zeros(0, np.int64)
    base.vectors = rng.standard_normal((n, dim), dtype=np.float32).astype(np.float16)
    base.faiss = faiss.IndexFlatIP(dim)
    for a in range(0, n, 1 << 20):
        base.faiss.add(base.vectors[a:a + (1 << 20)].astype(np.float32))
    base.default_nprobe, base.codes, base.vector_source = None, None, "fine"
    base.manifest = Manifest(1, {}, "", "", "Flat", {}, n_docs, passages, n, n, None, 0.0, "")
    base._fields = FieldIndex.build(base.docs)
    retriever = SimpleNamespace(k1=1.5, b=0.75, method="lucene")
    base.lexical = SimpleNamespace(retriever=retriever, analyzer="folded", describe=dict,
                                   tokenize=lambda texts: [t.split() for t in texts])
    cols = rng.integers(0, vocab, passages * terms)
    tf = sp.csr_matrix((np.ones(len(cols), np.float32), (np.repeat(np.arange(passages), terms), cols)),
                       shape=(passages, vocab))
    tf.sum_duplicates()
    base_terms = BaseTerms(tf, {f"t{i}": i for i in range(vocab)}, np.full(passages, terms, np.int64))
    base_terms.by_term, base_terms.df  # noqa: B018
    return base, base_terms


def written(i: int, per_passage: int, dim: int, terms: int, rng: np.random.Generator) -> EncodedDocument:
    """A one-passage document of ``per_passage`` tokens; a few of its terms new to the base."""
    words = [f"t{w}" for w in rng.integers(0, 50_000, terms - 2)] + [f"new{i}", f"new{i // 7}"]
    return EncodedDocument({"id": f"w{i}", "title": f"Written {i}", "meta": {"year": 2000 + i % 20}},
                           ({"para": 0, "text": f"written {i}"},),
                           rng.standard_normal((per_passage, dim), dtype=np.float32).astype(np.float16),
                           np.zeros((per_passage, 2), np.int32), np.full(per_passage, 3, np.uint8),
                           np.asarray([per_passage]), np.ones(per_passage, bool), (words,))


def scan_vectors(snap: LiveIndex) -> np.ndarray:
    """The float32 segment vectors a flat scan of ``snap`` multiplies by its questions."""
    return snap.segment_scan_vectors()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=1_000_000)
    p.add_argument("--tokens-per-passage", type=int, default=12)
    p.add_argument("--passages-per-doc", type=int, default=4)
    p.add_argument("--dim", type=int, default=16, help="vector dimensions (small: the costs measured do not "
                                                        "depend on it but the base's memory does)")
    p.add_argument("--terms", type=int, default=30, help="BM25 terms a passage")
    p.add_argument("--segment", default="1000", help="segment sizes (documents written before), comma-separated")
    p.add_argument("--tombstones", type=int, default=100)
    p.add_argument("--writes", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    base, base_terms = synthetic_base(args.passages, args.tokens_per_passage, args.passages_per_doc, args.dim,
                                      args.terms, 100_000, rng)
    template = empty_like(base.faiss)
    print(f"base built in {time.perf_counter() - t0:.1f} s", flush=True)  # noqa: T201
    tombstones = np.arange(args.tombstones, dtype=np.int64) * 3
    results = []
    for size in (int(s) for s in args.segment.split(",")):
        segment = [written(i, args.tokens_per_passage, args.dim, args.terms, rng) for i in range(size)]
        first = LiveIndex(base, segment, tombstones, template, base_terms)  # (each document's parts made once)
        Copies.of(base, base.passage_doc)  # (the base's, as its searcher's warm-up makes them)
        scan_vectors(first)
        best: dict[str, float] = {}
        for w in range(args.writes):
            segment.append(written(size + w, args.tokens_per_passage, args.dim, args.terms, rng))
            t0 = time.perf_counter()
            snap = LiveIndex(base, segment, tombstones, template, base_terms)
            times = {"snapshot_s": time.perf_counter() - t0}
            t0 = time.perf_counter()
            live_lexical(base, base_terms, segment, snap.deleted_docs)
            times["lexical_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            scan_vectors(snap)
            times["segment_scan_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            Searcher(snap, max_answer_tokens=10, length_bias=())
            times["searcher_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            units = {u: f(snap) for u, f in UNIT_OF_PASSAGE.items() if f is not None}
            times["unit_maps_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            Copies.of(snap, units["doc"])
            times["copies_s"] = time.perf_counter() - t0
            layout = Layout(snap, {u: f(snap) for u, f in UNIT_OF_PASSAGE.items() if f is not None})
            t0 = time.perf_counter()
            layout.token_map()
            times["token_map_s"] = time.perf_counter() - t0
            best = {k: min(v, best.get(k, np.inf)) for k, v in times.items()}
        row = {"cpu": cpu_name(), "passages": args.passages, "tokens": int(base.faiss.ntotal), "segment_documents": size,
               "tombstones": args.tombstones, **{k: round(v, 5) for k, v in best.items()}}
        print(json.dumps(row), flush=True)  # noqa: T201
        results.append(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
