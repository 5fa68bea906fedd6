"""The GPU host measurements' data, made from the SQuAD file alone: the held-out questions and a corpus of N passages.

    python bench/gpu/host_data.py --squad squad-v1.1-train.json.gz --passages 14500 --out /tmp/host-data

writes ``OUT/validation.json.gz`` (the 22 held-out articles, SQuAD format: the questions every benchmark asks) and
``OUT/corpus.jsonl`` (the held-out articles first, then the training ones, cut after ``--passages`` paragraphs: 14,500
paragraphs are the 2.15M-token corpus of the scale benchmarks, whose first passages hold every held-out answer).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from spanseek.core.holdout import split_articles
from spanseek.core.io import atomic_path, load_squad, squad_documents, write_corpus


def write_host_data(squad: Path, passages: int, out: Path) -> dict:
    """The two files (see the module docstring); returns their counts."""
    train, held = split_articles(load_squad(squad))
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "validation.json.gz") as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump({"version": "held-out", "data": held}, f)
    docs, n = [], 0
    for doc in squad_documents(held + train):
        keep = doc.paragraphs[: passages - n]
        if keep:
            docs.append(type(doc)(id=doc.id, title=doc.title, paragraphs=keep))
        n += len(keep)
        if n >= passages:
            break
    write_corpus(out / "corpus.jsonl", docs)
    questions = sum(len(p["qas"]) for a in held for p in a["paragraphs"])
    return {"held_out_articles": len(held), "questions": questions, "documents": len(docs), "passages": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squad", type=Path, required=True, help="SQuAD v1.1 train (JSON or .json.gz)")
    ap.add_argument("--passages", type=int, default=14_500, help="paragraphs in the corpus")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(json.dumps(write_host_data(args.squad, args.passages, args.out)))


if __name__ == "__main__":
    main()
