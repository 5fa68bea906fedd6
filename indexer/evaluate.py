"""Evaluate a model (and index) on a SQuAD-format question file.

    spanseek eval --questions dev.json.gz --model default [--index DIR] [--mode hybrid] [--reading-comprehension] --out m.json

Without ``--index`` the corpus is the paragraphs of the question file, indexed (with its lexical part) into a
temporary directory. ``--mode`` and the other search flags apply to every unit's search. Questions without an answer
(SQuAD v2's unanswerable ones) are left out before ``--limit`` samples, so N answerable questions are evaluated; the
metrics count the file's unanswerable ones in ``unanswerable_skipped``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from spanseek.core.evaluate import drop_unanswerable, evaluate, sample_questions
from spanseek.core.io import load_squad, squad_documents, squad_questions, write_corpus, write_json_atomic
from spanseek.core.loading import open_searcher
from spanseek.core.model import model_name
from spanseek.core.params import SearchParams
from spanseek.indexer.build import BuildOptions, build_index


def check_out_file(out: Path) -> None:
    """Refuse a metrics file that cannot be written: a directory, or a path under a file."""
    if out.is_dir():
        raise ValueError(f"{out}: a directory; --out names the metrics file to write")
    folder = next(p for p in out.parents if p.exists())  # the folders below it are made when it is written
    if not folder.is_dir():
        raise ValueError(f"--out {out}: {folder} is a file, not a folder")


def run_eval(
    questions: str | Path,
    model: str | Path,
    index: str | Path | None = None,
    corpus: str | Path | None = None,
    reading_comprehension: bool = False,
    limit: int | None = None,
    out: str | Path | None = None,
    build: BuildOptions | None = None,
    progress: bool = True,
    precision: str = "auto",
    rc_decode: str = "answer",
    params: SearchParams | None = None,
    reader: str | Path | None = None,
    per_question: bool = False,
) -> dict[str, Any]:
    """Evaluate on ``index``; without one, on a temporary index of ``corpus`` (default: the file's paragraphs).
    ``reader`` (with ``params.read``): the reader that reads the top passages, and answers reading comprehension."""
    if out is not None:  # found now, not after the evaluation has run
        check_out_file(Path(out))
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be an integer >= 1 (leave it out to use every question), got {limit}")
    data = load_squad(questions)
    answerable, unanswerable = drop_unanswerable(squad_questions(data))  # before the sample: it takes N of these
    if not answerable:  # found before an index is built
        held = f"none of its {unanswerable} has an answer" if unanswerable else "it holds none"
        raise ValueError(f"{questions}: no questions to evaluate ({held})")
    qs = sample_questions(answerable, limit)
    with tempfile.TemporaryDirectory(prefix="spanseek-eval-") as tmp:
        if index is None:
            if corpus is None:
                corpus = Path(tmp) / "corpus.jsonl"
                write_corpus(corpus, squad_documents(data))
            index = Path(tmp) / "index"
            build_index(corpus, model, index, build or BuildOptions(progress=progress, precision=precision))
        searcher = open_searcher(index, model, precision=precision, reader=reader)
        metrics = evaluate(searcher, qs, reading_comprehension=reading_comprehension, progress=progress,
                           rc_decode=rc_decode, params=params, per_question=per_question,
                           unanswerable_skipped=unanswerable)
        # what was measured: the model that served (an index built by an earlier bundled default is searched with
        # it), and the reader
        served = getattr(getattr(searcher.encoder, "model", None), "source", None)
        metrics["model"] = model_name(served) if served is not None else str(model)
        if reader is not None and searcher.reading is not None:
            metrics["reader"] = str(reader)
    if out is not None:
        write_json_atomic(out, metrics)
    return metrics
