"""Paired accuracy of compressed indexes against the exact one, on every question whose gold passage is indexed.

    python bench/paired_accuracy.py --exact work/acc2m/Flat --questions runs/validation.json.gz \
        --indexes work/acc2m/OPQ16_IVF2048_HNSW32_PQ16-pq192-0.02675 --out paired.json

An entry INDEX@MODEL asks that index with another model's question encoder (one fine-tuned against it with
`train qsft --from-index`, sharing the phrase side); the exact index keeps --model's. ``--exact-cache FILE`` keeps
the exact index's per-question results, reused while the index, model and questions are the same.

`compressed_index.py` compares layouts on a fixed sample of 1,000 questions; a difference of half a point there
is within its noise. This bench asks every question of the file (dense mode, the same question vectors for every
index) and reports, per index, phrase EM@1 and passage acc@5, their difference from the exact index with a 95%
bootstrap interval over articles (questions of one article move together), and how many questions the index gets
right that the exact one misses and the other way round (with McNemar's z).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch/faiss: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from spanseek.core.evaluate import answer_scores, document_groups  # noqa: E402
from spanseek.core.io import atomic_path, load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.metrics import cluster_bootstrap_ci, mcnemar_z, passage_has_answer  # noqa: E402
from spanseek.core.model import model_fingerprint, resolve_model  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.core.phrase_index import PhraseIndex  # noqa: E402
from spanseek.core.search import Searcher  # noqa: E402

BATCH = 64


def per_question(searcher: Searcher, questions, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(EM@1 of the top phrase, whether a top-5 passage holds an answer), one entry per question."""
    em, acc = [], []
    for b in range(0, len(questions), BATCH):
        qs, qe = q_start[b : b + BATCH], q_end[b : b + BATCH]
        phrases = searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=10, mode="dense"))
        passages = searcher.search_vectors(qs, qe, SearchParams(unit="passage", top_k=20, mode="dense"))
        for i, q in enumerate(questions[b : b + BATCH]):
            em.append(answer_scores(phrases[i][0].text if phrases[i] else None, q.answers)[0])
            acc.append(float(any(passage_has_answer(h.passage, q.answers) for h in passages[i][:5])))
    return np.asarray(em), np.asarray(acc)


def exact_results(exact: Searcher, model: str, questions, q_start, q_end, cache: str | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``per_question`` of the exact index, read from ``cache`` when it was made for this index, model and
    questions (else computed and written there)."""
    key = np.frombuffer(hashlib.blake2b("\n".join([
        exact.index.manifest.created, model_fingerprint(resolve_model(model)), *(q.id for q in questions)]).encode(),
        digest_size=16).digest(), np.uint8)
    if cache and Path(cache).is_file():
        with np.load(cache) as z:
            if np.array_equal(z["key"], key):
                return z["em"], z["acc"]
    em, acc = per_question(exact, questions, q_start, q_end)
    if cache:
        with atomic_path(Path(cache)) as tmp, open(tmp, "wb") as f:
            np.savez(f, key=key, em=em, acc=acc)
    return em, acc


def run(args: argparse.Namespace) -> dict:
    exact = open_searcher(args.exact, args.model)
    indexed = {(exact.index.docs[p["doc"]]["title"], p["text"]) for p in exact.index.passages}
    questions = [q for q in squad_questions(load_squad(args.questions)) if (q.title, q.context) in indexed]
    q_start, q_end = exact.encoder.encode([q.question for q in questions])
    groups = document_groups(questions)  # (questions of one document move together, as in ``spanseek eval``)
    t0 = time.perf_counter()
    e_em, e_acc = exact_results(exact, args.model, questions, q_start, q_end, args.exact_cache)
    result: dict = {"questions": len(questions), "articles": len(set(groups)), "exact": {
        "index": str(args.exact), "model": args.model, "em@1": round(100 * e_em.mean(), 1),
        "acc@5": round(100 * e_acc.mean(), 1), "seconds": round(time.perf_counter() - t0)}, "indexes": []}
    print(result["exact"], flush=True)
    for entry in args.indexes:
        d, _, model = entry.partition("@")
        t0 = time.perf_counter()
        if model:  # another question encoder: the questions are encoded again
            searcher = open_searcher(d, model)
            qs, qe = searcher.encoder.encode([q.question for q in questions])
        else:
            searcher, qs, qe = Searcher(PhraseIndex(d), exact.encoder), q_start, q_end
        em, acc = per_question(searcher, questions, qs, qe)
        gained, lost = int(((em == 1) & (e_em == 0)).sum()), int(((em == 0) & (e_em == 1)).sum())
        row = {"index": d, "model": model or args.model, "em@1": round(100 * em.mean(), 1), "acc@5": round(100 * acc.mean(), 1),
               "em_delta": round(100 * (em - e_em).mean(), 1), "em_delta_ci95": cluster_bootstrap_ci(em - e_em, groups),
               "acc5_delta": round(100 * (acc - e_acc).mean(), 1),
               "acc5_delta_ci95": cluster_bootstrap_ci(acc - e_acc, groups),
               "em_gained": gained, "em_lost": lost, "em_mcnemar_z": mcnemar_z(gained, lost),
               "seconds": round(time.perf_counter() - t0)}
        result["indexes"].append(row)
        print(row, flush=True)
        if args.out:
            write_json_atomic(args.out, result)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exact", required=True, help="the exact (Flat) index")
    p.add_argument("--indexes", nargs="+", required=True,
                   help="indexes over the same corpus to compare with it: INDEX or INDEX@MODEL")
    p.add_argument("--questions", required=True, help="SQuAD-format questions (those with an indexed passage are asked)")
    p.add_argument("--model", default="default", help="the model that encodes the questions")
    p.add_argument("--out", default=None, help="JSON results, written after every index")
    p.add_argument("--exact-cache", default=None, help="npz file keeping the exact index's per-question results")
    args = p.parse_args()
    result = run(args)
    if args.out:
        write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
