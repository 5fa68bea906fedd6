"""`make demo`: index the bundled demo corpus with the default model (once) and answer example questions.

The index goes to ``work/demo-index`` and is reused by later runs.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "demo" / "corpus.jsonl.gz"
INDEX = ROOT / "work" / "demo-index"
QUESTIONS = [
    "When did the iPod become the leader in digital music device sales?",
    "Until what year was the US the only country with the atomic bomb?",
    "Who was Tito an ally of after the Second World War?",
    "What stadium in Paris was built for the 1998 FIFA World Cup?",
    "What is the capital of the Republic of the Congo?",
]


def ensure_index(corpus: Path = CORPUS, index: Path = INDEX, model: str = "default") -> Path:
    from core.store import MANIFEST
    from indexer.build import BuildOptions, build_index

    if (index / MANIFEST).exists():
        print(f"reusing the demo index in {index}", file=sys.stderr)
    else:
        print(f"building the demo index of {corpus.name} in {index} (a few minutes on 2 cores) ...", file=sys.stderr)
        build_index(corpus, model, index, BuildOptions())
    return index


def main() -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    from core.loading import open_searcher

    searcher = open_searcher(ensure_index(), "default")
    for unit in ("phrase", "passage", "doc"):
        print(f"\n=== unit={unit} ===")
        for q, hits in zip(QUESTIONS, searcher.search(QUESTIONS, unit=unit, top_k=3), strict=True):
            print(f"\nQ: {q}")
            for r, h in enumerate(hits, 1):
                print(f"  {r}. {h.text!r}  [{h.title}]  score={h.score:.2f}")
                if unit != "phrase" and r == 1:
                    ctx = h.passage[max(0, h.start - 150) : h.end + 150]
                    print(textwrap.indent(textwrap.fill("..." + ctx + "...", 100), "     | "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
