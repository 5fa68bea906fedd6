"""Efficient validation (Kim et al. 2022, §3): a small *hard* corpus that ranks checkpoints like a large one.

    spanseek train valsets --train squad-train.json.gz --out work/valsets
    spanseek train rank-checkpoints --valsets work/valsets --checkpoints RUN/snapshots/* --out ranking.json

From a fixed sample of held-out questions, ``build_validation_sets`` writes four corpora:

- ``hard``: the questions' gold passages plus the top-k passages BM25 finds for each question in the whole file;
- ``gold``: the gold passages only;
- ``random``: the gold passages plus random passages, as many passages as ``hard``;
- ``reference``: every held-out paragraph plus ``reference_extra`` random training paragraphs (the stand-in for
  the full corpus, too slow to validate on repeatedly on CPU).

An --out that does not exist is made; one that holds these files only (an earlier run's, finished or not) is written
over, the scratch files of a killed run removed; any other, a model directory above all, is refused and left alone.
A run holds the lock ``valsets.lock`` in --out while it writes: a second run into it is refused.

``rank_checkpoints`` evaluates each checkpoint (phrase EM@1) on each corpus and reports how well each small
corpus's ranking of the checkpoints agrees with the reference ranking (Kendall's tau).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from spanseek.core.holdout import Holdout
from spanseek.core.integrity import writer_lock
from spanseek.core.io import CorpusError, Document, atomic_path, write_corpus, write_json_atomic
from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME, resolve_model
from spanseek.trainer.data import load_training
from spanseek.trainer.mining import bm25_retriever

log = logging.getLogger(__name__)

SETS = ("hard", "gold", "random", "reference")
QUESTIONS = "questions.json.gz"
COUNTS = "counts.json"  # written last: the sets are complete
OUTPUTS = frozenset({*(f"{name}.jsonl" for name in SETS), QUESTIONS, COUNTS})
LOCK = "valsets.lock"  # held while a run writes: a second run into the same --out is refused


def _is_scratch(name: str) -> bool:
    """The scratch file of an output (``core.io.atomic_path``: ``.NAME.XXXX.tmp``), which a killed run leaves."""
    return name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{out}.") for out in OUTPUTS)


def _is_output(name: str) -> bool:
    """A file ``build_validation_sets`` writes, its lock, or the scratch file of one that a killed run left."""
    return name in OUTPUTS or name == LOCK or _is_scratch(name)


@contextlib.contextmanager
def writing_lock(out: Path) -> Iterator[None]:
    """Make ``out`` and hold its lock while the sets are written: a second run into it is refused, naming the lock.
    The scratch files a killed run left are removed first (none is being written while the lock is held)."""
    out.mkdir(parents=True, exist_ok=True)
    with writer_lock(out, name=LOCK) as locked:
        if not locked:
            raise ValueError(f"--out {out}: another `spanseek train valsets` is writing to it (lock {out / LOCK}); "
                             "wait for it to end or use a new --out")
        for path in out.iterdir():
            if _is_scratch(path.name) and path.is_file():
                path.unlink(missing_ok=True)
        yield


def check_valsets_out(out: Path) -> None:
    """Refuse an ``out`` that is a file, or a directory holding anything but validation sets (a model's directory,
    say): writing into it would mix the sets with its files. A new or empty directory, or an earlier run's output
    (complete or not), is written."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; it names the directory to write the validation sets to")
    if not out.is_dir():
        return
    if (out / CONFIG_NAME).is_file() or (out / WEIGHTS_NAME).is_file():
        raise ValueError(f"--out {out} is a model directory; it is left alone: write the validation sets to a new "
                         "directory")
    others = sorted(p.name for p in out.iterdir() if not (_is_output(p.name) and p.is_file()))
    if others:
        raise ValueError(f"--out {out} holds files that are not validation sets ({', '.join(others[:3])}"
                         f"{', ...' if len(others) > 3 else ''}); it is left alone: write the validation sets to a new "
                         "directory")


def _documents(data: list[dict], keys: set[tuple[int, int]]) -> list[Document]:
    """Group selected (article, paragraph) pairs into one document per article, paragraphs in order."""
    by_art: dict[int, list[int]] = defaultdict(list)
    for a, p in sorted(keys):
        by_art[a].append(p)
    return [
        Document(id=str(a), title=data[a].get("title", f"article-{a}"),
                 paragraphs=tuple(data[a]["paragraphs"][p].get("context", "") for p in ps))
        for a, ps in sorted(by_art.items())
    ]


def build_validation_sets(
    train: str | Path,
    out: str | Path,
    n_questions: int = 500,
    bm25_k: int = 5,
    reference_extra: int = 3000,
    holdout: Holdout | None = None,
    seed: int = 0,
) -> dict[str, int]:
    """Write questions.json.gz and {hard,gold,random,reference}.jsonl to ``out``; returns passage counts. Fewer
    held-out questions than ``n_questions``, or training paragraphs than ``reference_extra``: all of them."""
    for flag, value, low in (("--questions", n_questions, 1), ("--bm25-k", bm25_k, 1),
                             ("--reference-extra", reference_extra, 0)):
        if value < low:
            raise ValueError(f"{flag} must be an integer >= {low}, got {value}")
    out = Path(out)
    check_valsets_out(out)  # before any work
    data = load_training(train)
    rng = random.Random(seed)
    holdout = holdout or Holdout()
    held = [a for a in range(len(data)) if holdout.held(a)]
    qs = [(a, p, qa) for a in held for p, para in enumerate(data[a]["paragraphs"]) for qa in para.get("qas", [])]
    if not qs:
        raise CorpusError(f"{train}: no held-out questions to validate on (held out: article i with i % "
                          f"{holdout.every} == {holdout.offset}, of {len(data)} articles)")
    with writing_lock(out):  # makes out
        qs = rng.sample(qs, min(n_questions, len(qs)))
        pool = [(a, p) for a, art in enumerate(data) for p in range(len(art["paragraphs"]))]
        retrieve = bm25_retriever([data[a]["paragraphs"][p].get("context", "") for a, p in pool])
        found = retrieve([qa["question"] for _, _, qa in qs], bm25_k)
        gold = {(a, p) for a, p, _ in qs}
        hard = gold | {pool[i] for row in found for i in row.tolist() if i >= 0}
        rest = [k for k in pool if k not in gold]
        random_set = gold | set(rng.sample(rest, max(0, len(hard) - len(gold))))
        train_keys = [k for k in pool if not holdout.held(k[0])]
        if reference_extra > len(train_keys):
            log.warning("--reference-extra %d: %s has only %d training paragraphs; the reference corpus takes them all",
                        reference_extra, train, len(train_keys))
        reference = {k for k in pool if holdout.held(k[0])} | set(rng.sample(train_keys, min(reference_extra,
                                                                                                len(train_keys))))
        counts = {}
        for name, keys in zip(SETS, (hard, gold, random_set, reference), strict=True):
            write_corpus(out / f"{name}.jsonl", _documents(data, keys))
            counts[name] = len(keys)
        # the sampled questions in SQuAD format, each under its own article and paragraph
        arts: dict[int, dict] = {}
        for a, p, qa in qs:
            art = arts.setdefault(a, {"title": data[a].get("title", f"article-{a}"), "paragraphs": {}})
            context = data[a]["paragraphs"][p].get("context", "")
            art["paragraphs"].setdefault(p, {"context": context, "qas": []})["qas"].append(qa)
        squad = {"version": "spanseek-valsets", "data": [
            {"title": art["title"], "paragraphs": list(art["paragraphs"].values())} for art in arts.values()
        ]}
        with atomic_path(out / QUESTIONS) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(squad, f)
        write_json_atomic(out / COUNTS, counts)
        return counts


def check_valsets(valsets: str | Path) -> Path:
    """``valsets`` when it is what ``build_validation_sets`` wrote; ValueError naming it and what it lacks."""
    valsets = Path(valsets)
    made_by = "the --out directory of `spanseek train valsets`"
    if not valsets.is_dir():
        raise ValueError(f"--valsets {valsets}: {'a file' if valsets.exists() else 'no such directory'}; give "
                         f"{made_by}")
    missing = [name for name in (QUESTIONS, *(f"{s}.jsonl" for s in SETS)) if not (valsets / name).is_file()]
    if missing:
        raise ValueError(f"--valsets {valsets}: no {', '.join(missing)} in it; give {made_by} (run it first)")
    return valsets


def rank_checkpoints(valsets: str | Path, checkpoints: list[str], out: str | Path | None = None,
                     progress: bool = True) -> dict:
    """Phrase EM@1 of every checkpoint on every corpus, and Kendall's tau of each corpus vs the reference (None where
    it is not defined: one checkpoint, or scores all equal on a corpus)."""
    from scipy.stats import kendalltau

    from spanseek.indexer.evaluate import check_out_file, run_eval

    valsets = check_valsets(valsets)
    if out is not None:  # before minutes of evaluating, and never over the corpora it reads
        read = {(valsets / name).resolve(): name for name in (QUESTIONS, *(f"{s}.jsonl" for s in SETS))}
        if (name := read.get(Path(out).resolve())) is not None:
            raise ValueError(f"--out {out} is the validation sets' {name}, which the ranking reads; write the ranking "
                             "to a new file")
        check_out_file(Path(out), "kendall_tau_vs_reference", "a ranking")
    for ckpt in checkpoints:  # a mistyped one is named before minutes of evaluating the others
        resolve_model(ckpt)
    scores: dict[str, dict[str, float]] = {name: {} for name in SETS}
    for ckpt in checkpoints:
        for name in SETS:
            m = run_eval(valsets / QUESTIONS, ckpt, corpus=valsets / f"{name}.jsonl", progress=progress)
            scores[name][ckpt] = m["phrase"]["em@1"]
    ref = [scores["reference"][c] for c in checkpoints]

    def tau(name: str) -> float | None:  # (scipy warns, and gives NaN, where no order is there to compare)
        ranks = [scores[name][c] for c in checkpoints]
        if len(set(ranks)) < 2 or len(set(ref)) < 2:
            return None
        return round(float(kendalltau(ranks, ref).statistic), 3)

    result = {
        "checkpoints": checkpoints,
        "em@1": scores,
        "kendall_tau_vs_reference": {name: tau(name) for name in SETS if name != "reference"},
    }
    if out is not None:
        write_json_atomic(out, result)
    return result
