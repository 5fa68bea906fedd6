"""Hard-negative mining: passages a retriever ranks high for a training question that do not contain its answer.

    spanseek train mine --train squad-train.json.gz --miner bm25 --out runs/hard-bm25.jsonl
    spanseek train mine --train squad-train.json.gz --miner model --model RUN/last --index TRAIN_INDEX --out ...

Only the training split is mined (held-out articles are never touched). The candidate pool is every paragraph
of the training split. Output: JSON Lines ``{"id": question id, "hard": [[article, paragraph], ...]}`` with
article/paragraph indices into the training file, best first (gzipped when OUT ends in .gz). Mining runs in
chunks, each written atomically to ``OUT.parts/`` with the run's settings; an interrupted run resumes at the first
missing chunk (a run with other settings is refused: its chunks would mix), and the parts are joined at the end.
An OUT that exists and is not such a file (the training file, say) is left alone.
The ``model`` miner searches a phrase index of ``spanseek corpus from-squad TRAIN`` (article i = document id "i");
an --index whose passages are not the paragraphs of --train (built from another file) is refused before mining.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.holdout import Holdout
from spanseek.core.io import CorpusError, Question, atomic_path, read_lines, squad_questions
from spanseek.core.metrics import passage_has_answer
from spanseek.trainer.data import load_training

log = logging.getLogger(__name__)

# retrieve(questions, k) -> (B, k) int array of pool indices, -1 for none
Retriever = Callable[[list[str], int], np.ndarray]


def training_pool(data: list[dict], holdout: Holdout | None = None) -> list[tuple[int, int, str]]:
    """(article index, paragraph index, text) of every paragraph of the training split (a paragraph without a
    context, which SQuAD allows, has the empty text)."""
    holdout = holdout or Holdout()
    return [
        (a, p, para.get("context", ""))
        for a, art in enumerate(data)
        if not holdout.held(a)
        for p, para in enumerate(art["paragraphs"])
    ]


def bm25_retriever(texts: list[str]) -> Retriever:
    """BM25 over the pool texts: the lexical leg of the phrase index (``core.lexical``: stop words, stemming)."""
    from spanseek.core.lexical import LexicalIndex

    lexical = LexicalIndex.build(texts)

    def retrieve(questions: list[str], k: int) -> np.ndarray:
        return lexical.top(questions, k)[0]

    return retrieve


def index_paragraphs(index_dir: str | Path, train: str | Path, data: list[dict]) -> list[tuple[int, int]]:
    """(article, paragraph) of the training file ``data`` (read from ``train``) for each passage of the index in
    ``index_dir``, an index of ``spanseek corpus from-squad TRAIN``: its document ids are article numbers, and a
    document's passages are its article's non-empty paragraphs, in order. Raises ValueError naming both files when a
    passage is not the text of the paragraph it stands for (the index was built from other data); read before the
    index's vectors and the model are loaded."""
    from spanseek.core.phrase_index import DOCS, PASSAGES, check_index, read_jsonl

    index_dir = Path(index_dir)
    check_index(index_dir, contents=False)  # an index, whole (its file sizes); its checksums are read when opened
    docs, passages = read_jsonl(index_dir / DOCS), read_jsonl(index_dir / PASSAGES)
    remedy = (f"build --index from it (`spanseek corpus from-squad {train} --out CORPUS`, then `spanseek index build "
              "--corpus CORPUS`), or give the --train it was built from")
    non_empty: dict[int, list[int]] = {}  # article -> its paragraphs that are passages
    keys = []
    for i, psg in enumerate(passages):
        doc_id = str(docs[psg["doc"]]["id"])
        if not (doc_id.isdecimal() and int(doc_id) < len(data)):
            raise ValueError(f"--index {index_dir} was not built from --train {train}: its document {doc_id!r} is not "
                             f"an article number of --train ({len(data)} articles); {remedy}")
        a = int(doc_id)
        paras = non_empty.setdefault(a, [p for p, para in enumerate(data[a]["paragraphs"])
                                         if para.get("context", "").strip()])
        j = int(psg["para"])
        if j >= len(paras):
            what = f"is past the {len(paras)} non-empty paragraphs of article {a} of --train"
        elif data[a]["paragraphs"][paras[j]].get("context", "") != psg["text"]:
            what = f"is not the text of paragraph {paras[j]} of article {a} of --train"
        else:
            keys.append((a, paras[j]))
            continue
        raise ValueError(f"--index {index_dir} was not built from --train {train}: its passage {i} (paragraph {j} of "
                         f"document {doc_id!r}) {what}; {remedy}")
    return keys


def model_retriever(index_dir: str | Path, model: str | Path, pool: list[tuple[int, int, str]],
                    train: str | Path, data: list[dict]) -> Retriever:
    """Passage search with a phrase model over an index of the whole training file ``data`` (read from ``train``;
    ``index_paragraphs`` checks that the index is of it before anything is loaded)."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchParams

    key = index_paragraphs(index_dir, train, data)  # index passage -> (article, paragraph)
    to_pool = {(a, p): i for i, (a, p, _) in enumerate(pool)}
    covered, passages = sum(k in to_pool for k in set(key)), sum(1 for *_, text in pool if text.strip())
    if covered < passages:
        log.warning("--index %s holds %d of the %d paragraphs of the training split of %s: negatives come from those "
                    "only", index_dir, covered, passages, train)
    searcher = open_searcher(index_dir, model)

    def retrieve(questions: list[str], k: int) -> np.ndarray:
        out = np.full((len(questions), k), -1, dtype=np.int64)
        for b, hits in enumerate(searcher.search(questions, SearchParams(unit="passage", top_k=k, mode="dense"))):
            ids = [to_pool.get(key[h.passage_id], -1) for h in hits]
            out[b, : len(ids)] = ids
        return out

    return retrieve


def select_hard(q: Question, candidates: np.ndarray, pool: list[tuple[int, int, str]], keep: int) -> list[list[int]]:
    """The first ``keep`` candidates that are not the gold paragraph and do not contain a gold answer."""
    hard = []
    for c in candidates.tolist():
        if c < 0:
            continue
        a, p, text = pool[c]
        if (a, p) == (q.doc_index, q.para_index) or passage_has_answer(text, q.answers):
            continue
        hard.append([a, p])
        if len(hard) == keep:
            break
    return hard


MINE_SETTINGS = "settings.json"  # in OUT.parts: what its chunks were mined with


def check_mine_out(out: Path, train: str | Path) -> None:
    """Refuse an ``out`` that is the training file, a directory, or an existing file that is not hard negatives
    (its first line is not a ``mine`` row): writing it would destroy it. An earlier run's output is replaced."""
    if out.resolve() == Path(train).resolve():
        raise ValueError(f"--out {out} is the --train file; write the hard negatives to a new file")
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory; it names the JSON Lines file to write")
    if not out.exists():
        return
    try:
        first = next((line for _, line in read_lines(out) if line.strip()), None)
        row = None if first is None else json.loads(first)
    except (CorpusError, json.JSONDecodeError, RecursionError):
        row = {}
    if row is not None and not (isinstance(row, dict) and {"id", "hard"} <= row.keys()):
        raise ValueError(f"--out {out} exists and is not a file of hard negatives (`spanseek train mine` output); "
                         "it is left alone: write to a new file")


def check_parts(parts: Path, settings: dict) -> None:
    """Record ``settings`` in ``parts``, or refuse to resume into chunks mined with other settings."""
    path = parts / MINE_SETTINGS
    if path.is_file():
        theirs = json.loads(path.read_text(encoding="utf-8"))
        differ = [f"{k} {theirs.get(k)!r} (this run: {v!r})" for k, v in settings.items() if theirs.get(k) != v]
        if differ:
            raise ValueError(f"{parts} holds the chunks of a run with other settings: {'; '.join(differ)}; run with "
                             f"those settings to resume it, or remove {parts} to start over")
        return
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(settings), encoding="utf-8")


def mine(
    train: str | Path,
    out: str | Path,
    miner: str = "bm25",
    top_k: int = 20,
    keep: int = 4,
    chunk: int = 2000,
    index: str | Path | None = None,
    model: str | Path | None = None,
    limit_questions: int | None = None,
    holdout: Holdout | None = None,
    progress: bool = True,
) -> Path:
    """Mine hard negatives for the training split of ``train`` into ``out`` (resumable). Returns ``out``."""
    for flag, value in (("--top-k", top_k), ("--keep", keep), ("chunk", chunk), ("--limit-questions", limit_questions)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    out = Path(out)
    check_mine_out(out, train)  # before any work
    data = load_training(train)
    holdout = holdout or Holdout()
    pool = training_pool(data, holdout)
    # question positions must refer to the full file, so flatten it and drop held-out articles afterwards
    questions = [q for q in squad_questions(data) if not holdout.held(q.doc_index)]
    if not questions:
        raise CorpusError(f"{train}: no questions to mine for (none in its {len(data)} articles, held-out ones "
                          "excluded)")
    if limit_questions:
        questions = questions[:limit_questions]
    if miner == "bm25":
        retrieve = bm25_retriever([t for _, _, t in pool])
    elif miner == "model":
        if index is None or model is None:
            raise ValueError("the model miner needs --index (an index of the training file) and --model")
        retrieve = model_retriever(index, model, pool, train, data)
    else:
        raise ValueError(f"miner must be 'bm25' or 'model', got {miner!r}")
    parts = out.with_name(out.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    check_parts(parts, {"train": str(Path(train).resolve()), "questions": len(questions), "first": questions[0].id,
                        "last": questions[-1].id, "miner": miner, "top_k": top_k, "keep": keep, "chunk": chunk,
                        "index": None if index is None else str(Path(index).resolve()),
                        "model": None if model is None else str(model), "holdout": [holdout.every, holdout.offset]})
    n_chunks = (len(questions) + chunk - 1) // chunk
    for c in tqdm(range(n_chunks), desc=f"mine ({miner})", unit="chunk", disable=not progress):
        part = parts / f"{c:05d}.jsonl"
        if part.exists():
            continue
        qs = questions[c * chunk : (c + 1) * chunk]
        cands = retrieve([q.question for q in qs], top_k)
        with atomic_path(part) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for q, row in zip(qs, cands, strict=True):
                f.write(json.dumps({"id": q.id, "hard": select_hard(q, row, pool, keep)}) + "\n")
    opener = gzip.open if out.suffix == ".gz" else open  # `--hard-negatives` reads a .gz name as gzip
    with atomic_path(out) as tmp, opener(tmp, "wt", encoding="utf-8") as f:
        for c in range(n_chunks):
            f.write((parts / f"{c:05d}.jsonl").read_text(encoding="utf-8"))
    shutil.rmtree(parts)
    return out


def check_hard_negatives_file(path: str | Path) -> None:
    """Refuse a ``--hard-negatives`` that is missing or a directory, naming the flag, when a run starts (the file
    is read once the training file is, and for QSFT once the model has loaded)."""
    if not Path(path).exists():
        raise ValueError(f"--hard-negatives {path}: no such file (`spanseek train mine` writes one)")
    if Path(path).is_dir():
        raise ValueError(f"--hard-negatives {path} is a directory; it names the JSON Lines file of `spanseek train "
                         "mine`")


def load_hard_negatives(path: str | Path, data: list[dict], holdout: Holdout | None = None) -> dict[str, list[str]]:
    """Question id -> hard-negative passage texts, from a file written by ``mine`` for the training file ``data``
    (plain or gzipped JSON Lines; blank lines are skipped).

    Raises CorpusError naming the file and line for a line that is not ``{"id": ..., "hard": [[article, paragraph],
    ...]}``, for a pair that is not a paragraph of ``data`` (a file mined from another training file) or that is in
    a held-out article (its text would reach training), and when no id is a training question of ``data``. Logs a
    warning when fewer than half of them are.
    """
    holdout = holdout or Holdout()
    out: dict[str, list[str]] = {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line.rstrip())  # a position past the line's end would point at the next line
        except json.JSONDecodeError as e:
            raise CorpusError(f"{where}: invalid JSON ({e.msg.removesuffix(' at')} at column {e.colno})") from None
        except RecursionError:
            raise CorpusError(f"{where}: JSON nested too deeply to read") from None
        qid, hard = (row.get("id"), row.get("hard")) if isinstance(row, dict) else (None, None)
        if type(qid) not in (str, int) or type(hard) is not list:
            raise CorpusError(f'{where}: expected {{"id": question id, "hard": [[article, paragraph], ...]}} '
                              f"(a line of `spanseek train mine`), got {line.strip()[:80]}")
        texts = []
        for pair in hard:
            if type(pair) is not list or len(pair) != 2 or any(type(i) is not int for i in pair):
                raise CorpusError(f"{where}: each hard negative must be [article, paragraph] (two whole numbers), "
                                  f"got {json.dumps(pair)}")
            a, p = pair
            if a < 0 or p < 0:
                raise CorpusError(f"{where}: [{a}, {p}]: article and paragraph indices must be >= 0")
            if a >= len(data) or p >= len(data[a]["paragraphs"]):
                has = (f"{len(data)} articles" if a >= len(data)
                       else f"article {a} has {len(data[a]['paragraphs'])} paragraphs")
                raise CorpusError(f"{where}: [{a}, {p}] is not a paragraph of the training file ({has}): the hard "
                                  "negatives were mined from another file")
            if holdout.held(a):
                raise CorpusError(f"{where}: [{a}, {p}] is in held-out article {a} (i % {holdout.every} == "
                                  f"{holdout.offset}), whose text must not reach training: mine with this split")
            if text := data[a]["paragraphs"][p].get("context", ""):
                texts.append(text)
        out[str(qid)] = texts
    train_ids = {q.id for q in squad_questions(data) if not holdout.held(q.doc_index)}
    matched = sum(qid in train_ids for qid in out)
    if not out:
        raise CorpusError(f"{path}: no hard negatives (an empty file)")
    if not matched:
        raise CorpusError(f"{path}: none of its {len(out)} question ids is a question of the training split: the "
                          "hard negatives were mined from another training file")
    if matched < len(out) / 2:
        log.warning("%s: only %d of its %d question ids are questions of the training split (mined from another "
                    "file?)", path, matched, len(out))
    return out
