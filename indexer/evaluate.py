"""Evaluate a model (and index) on a question file: SQuAD-format JSON, or open-domain questions and answers (JSON
Lines, CSV, TSV: ``core.questions``).

    spanseek eval --questions dev.json.gz --model default [--index DIR] [--mode hybrid] [--reading-comprehension] --out m.json
    spanseek eval --questions nq-open.jsonl --index DIR --out m.json

Without ``--index`` the corpus is the paragraphs of the question file, indexed (with its lexical part) into a
temporary directory; open-domain questions have no paragraphs, so they need ``--index`` or ``--corpus``, every one
needs answers, and reading comprehension (which reads each question's gold passage) is refused for them. ``--mode`` and the other search flags apply to every unit's search. Questions without an answer
(SQuAD v2's unanswerable ones) are left out before ``--limit`` samples, so N answerable questions are evaluated; the
metrics count the file's unanswerable ones in ``unanswerable_skipped``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from spanseek.core.evaluate import drop_unanswerable, evaluate, sample_questions
from spanseek.core.io import check_overwrite, squad_documents, write_corpus, write_json_atomic
from spanseek.core.loading import open_searcher, reading_dir
from spanseek.core.model import given_model, model_name
from spanseek.core.params import SearchParams
from spanseek.core.questions import FORMAT_NAMES, QuestionFile, read_questions
from spanseek.indexer.build import BuildOptions, build_index


def check_out_file(out: Path, key: str = "n_questions", what: str = "eval's metrics") -> None:
    """Refuse a metrics file that cannot be written: a directory, a path under a file, or a file there that is not
    ``what`` an earlier run wrote (a JSON object with ``key``), which writing it would destroy."""
    if out.is_dir():
        raise ValueError(f"{out}: a directory; --out names the file to write {what} to")
    folder = next(p for p in out.parents if p.exists())  # the folders below it are made when it is written
    if not folder.is_dir():
        raise ValueError(f"--out {out}: {folder} is a file, not a folder")
    check_overwrite("--out", out, key, what)


def check_open_domain(qf: QuestionFile, reading_comprehension: bool, has_corpus: bool) -> None:
    """Refuse what open-domain questions (no passage: JSON Lines, CSV, TSV, plain text) cannot be evaluated with,
    naming the file: no answers to score, reading comprehension, or no index or corpus to search."""
    kind = FORMAT_NAMES[qf.format]
    if qf.format == "text":
        raise ValueError(f"{qf.path}: {kind} questions have no answers to score; give them with their answers as "
                         "JSON Lines ({\"question\": ..., \"answers\": [...]}), CSV/TSV or SQuAD-format JSON")
    if (line := qf.without_answers()) is not None:
        raise ValueError(f"{qf.path}:{line}: the question has no answers, and eval scores each question against its "
                         "answers; give every question its answers (`spanseek search --questions` reads questions "
                         "without)")
    if reading_comprehension:
        raise ValueError(f"{qf.path}: --reading-comprehension answers each question from its gold passage, which a "
                         f"{kind} question file does not hold; leave the flag out to evaluate open-domain, or give "
                         "SQuAD-format JSON (its paragraphs are the gold passages)")
    if not has_corpus:
        raise ValueError(f"{qf.path}: {kind} questions hold no passages to index; give the index to search "
                         "(--index DIR) or a corpus to index (--corpus CORPUS.jsonl)")


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
    if reader is not None:  # a mistyped or unfitted reader is named now, not once an index is built and searched
        reading_dir(reader)
    qf = read_questions(questions)
    if qf.open_domain:  # found before a model loads
        check_open_domain(qf, reading_comprehension, has_corpus=index is not None or corpus is not None)
    answerable, unanswerable = drop_unanswerable(qf.questions)  # before the sample: it takes N of these
    if not answerable:  # found before an index is built
        held = f"none of its {unanswerable} has an answer" if unanswerable else "it holds none"
        raise ValueError(f"{questions}: no questions to evaluate ({held})")
    given_model(model, "--model")  # the files given, then the model: named before an index is built for it
    qs = sample_questions(answerable, limit)
    with tempfile.TemporaryDirectory(prefix="spanseek-eval-") as tmp:
        if index is None:
            if corpus is None:
                corpus = Path(tmp) / "corpus.jsonl"
                write_corpus(corpus, squad_documents(qf.articles))
            index = Path(tmp) / "index"
            try:
                build_index(corpus, model, index, build or BuildOptions(progress=progress, precision=precision))
            except KeyboardInterrupt as e:  # the build's own message offers a resume from a folder removed now
                how = "stopped by SIGTERM; " if str(e).startswith("stopped by SIGTERM") else ""
                raise KeyboardInterrupt(f"{how}the temporary index of the questions' passages is removed: the same "
                                        "command builds it again (`spanseek index build` builds one to keep and "
                                        "resume, for --index)") from None
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
