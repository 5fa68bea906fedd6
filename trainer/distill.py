"""Distillation from the cross-attention reader (DensePhrases, Lee et al. 2021, Eq. 7): the teacher's logits.

    spanseek train phrase --train squad-train.json.gz --teacher default --lambda-kl 4 --out runs/distilled

For every (training question, window) the reader (core.reader) reads the question with the window's text and gives
a start and an end logit at each of the window's tokens; the loss (trainer.losses.distill_loss) pulls the phrase
model's start and end distributions over the window towards the reader's. The reader never runs in a training
step: its logits are computed once, before the first step, for the windows the run's steps visit (all of them
from an epoch on), into a teacher cache (the content-addressed row store
of trainer.phrase_cache, two fp32 numbers a token) keyed by the question and the window's token ids and bound to
the reader's fingerprint. A killed fill resumes at the shard it stopped in; a cache made by another reader or for
other windows is refused. A complete cache may also stand for its reader (``--teacher CACHE_DIR``): a teacher too
slow for the machine that trains (a base-size reader on a CPU) fills it where it runs fast, and only the logits
travel (``bench/gpu/teacher_cache.py``). ``teacher_tensors`` lays a batch's targets out like its student logits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.model import model_fingerprint
from spanseek.core.reader import (
    MISSING_LOGIT,
    READER_CONFIG_NAME,
    READER_WEIGHTS_NAME,
    PassageReader,
    resolve_reader,
)
from spanseek.trainer.arguments import ReaderTrainConfig, TrainingOptions
from spanseek.trainer.data import TrainWindow
from spanseek.trainer.phrase_cache import CACHE_META, CacheError, PhraseCache, fill_rows, open_or_create

TEACHER_CACHE = "teacher-cache"  # in the run's --out unless --teacher-cache says otherwise


def teacher_key(question: str, input_ids: np.ndarray) -> str:
    """Content address of one (question, window) pair."""
    h = hashlib.blake2b(question.encode("utf-8"), digest_size=12)
    h.update(b"\x00")
    h.update(np.ascontiguousarray(input_ids, dtype=np.int64).tobytes())
    return h.hexdigest()


def reader_fingerprint(reader_dir: Path) -> str:
    return model_fingerprint(reader_dir, (READER_CONFIG_NAME, READER_WEIGHTS_NAME))


def window_text(window: TrainWindow) -> tuple[str, np.ndarray]:
    """The window's characters of its passage and its tokens' first characters in them."""
    if window.offsets is None or not len(window.offsets):
        raise ValueError("a window without character offsets cannot be read by a teacher")
    c0, c1 = int(window.offsets[0, 0]), int(window.offsets[-1, 1])
    return window.passage[c0:c1], window.offsets[:, 0] - c0


def read_pairs(reader: PassageReader, pairs: list[tuple[str, TrainWindow]]) -> list[np.ndarray]:
    """(n, 2) teacher logits of each (question, window) at the window's tokens."""
    texts, starts = zip(*(window_text(w) for _, w in pairs), strict=True)
    return reader.token_logits([q for q, _ in pairs], list(texts), list(starts))


def teacher_pairs(windows: list[TrainWindow]) -> tuple[dict[str, tuple[str, TrainWindow]], list[str]]:
    """Every (question, window) pair of ``windows`` by its key, and the keys in a teacher cache's order."""
    pairs = {teacher_key(q, w.input_ids): (q, w) for w in windows for q in w.questions}
    keys = sorted(pairs, key=lambda k: (len(pairs[k][1].input_ids), k))  # similar lengths share a batch
    return pairs, keys


def is_teacher_cache(ref: str | Path) -> bool:
    """Whether ``--teacher`` names a teacher cache (its logits) rather than a reader."""
    return (Path(ref) / CACHE_META).is_file()


def open_teacher_cache(directory: str | Path, windows: list[TrainWindow]) -> PhraseCache:
    """A teacher cache made elsewhere, standing for its reader: it must be complete and hold every pair of ``windows``
    (a run shorter than the one it was made for reads a part of it); CacheError naming what differs."""
    cache = PhraseCache(directory)
    if not cache.source.startswith("reader:"):
        raise CacheError(f"{directory}: not a teacher cache (its rows come from {cache.source}, not a reader)")
    if not cache.complete:
        raise CacheError(f"{directory}: incomplete ({len(cache.done_shards())} of {cache.n_shards} shards filled); "
                         "finish it where its reader runs (give that reader as --teacher there)")
    _, keys = teacher_pairs(windows)
    missing = sum(k not in cache for k in keys)
    if missing:
        raise CacheError(f"{directory}: {missing} of the {len(keys)} (question, window) pairs this run trains on are "
                         f"not among its {len(cache.keys)}: it was made for other training data, another tokenizer or "
                         "window size, or a shorter run")
    return cache


def fill_teacher_cache(directory: str | Path, reader_ref: str | Path, windows: list[TrainWindow],
                       device: torch.device | None = None, precision: str = "fp32", batch_pairs: int = 64,
                       shard_pairs: int = 2048, progress: bool = True) -> PhraseCache:
    """The teacher logits of every (question, window) pair of ``windows`` in a cache at ``directory`` (resuming a
    killed fill; CacheError for a cache of another reader or other pairs)."""
    path = resolve_reader(reader_ref)
    pairs, keys = teacher_pairs(windows)
    rows = {k: (pairs[k][1].input_ids, np.zeros(len(pairs[k][1].input_ids), np.uint8)) for k in keys}
    cache = open_or_create(Path(directory), keys, rows, 2, reader_fingerprint(path), shard_pairs,
                            f"reader:{path}", dtype=np.float32)
    if cache.complete:
        return cache
    reader = PassageReader.load(path, device=device or "cpu", precision=precision)
    return fill_rows(cache, "teacher logits", progress, lambda chunk: read_pairs(reader, [pairs[k] for k in chunk]),
                 batch_pairs)


def check_teacher(cfg: TrainingOptions | ReaderTrainConfig) -> None:
    """Refuse a ``--teacher`` that is neither a reader nor a teacher cache, and a ``--teacher-cache`` beside a
    cache, when a run starts: the teacher is first read after the data is tokenised (and QSFT's phrase cache
    filled)."""
    if cfg.teacher is None:
        return
    if not is_teacher_cache(cfg.teacher):
        resolve_reader(cfg.teacher)  # ModelError naming it when it is not a reader
    elif cfg.teacher_cache:
        raise ValueError(f"--teacher-cache {cfg.teacher_cache}: --teacher {cfg.teacher} is a teacher cache "
                         "already (its logits are used as they are); leave --teacher-cache out")


def teacher_cache(cfg: TrainingOptions | ReaderTrainConfig, windows: list[TrainWindow], device: torch.device,
                  precision: str) -> PhraseCache:
    """The run's teacher cache (``--teacher-cache``, else OUT/teacher-cache), filled for ``windows`` if it is not."""
    if cfg.teacher is None:
        raise ValueError("no --teacher to distil from")
    check_teacher(cfg)
    if is_teacher_cache(cfg.teacher):
        return open_teacher_cache(cfg.teacher, windows)
    directory = Path(cfg.teacher_cache) if cfg.teacher_cache else Path(cfg.out) / TEACHER_CACHE
    return fill_teacher_cache(directory, cfg.teacher, windows, device, precision, progress=cfg.progress)


def teacher_tensors(windows: list[TrainWindow], cache: PhraseCache, width: int,
                    shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, width) start and end teacher logits of a batch's questions (window by window, as the batch orders
    them), content token k at column k + ``shift``; MISSING_LOGIT elsewhere."""
    n_questions = sum(len(w.questions) for w in windows)
    out = np.full((n_questions, width, 2), MISSING_LOGIT, dtype=np.float32)
    row = 0
    for w in windows:
        for q in w.questions:
            logits, _ = cache.window(teacher_key(q, w.input_ids))
            out[row, shift : shift + len(logits)] = logits
            row += 1
    t = torch.from_numpy(out)
    return t[..., 0], t[..., 1]


def reader_windows(questions: list, windows: Any) -> list[TrainWindow | None]:
    """What a teacher reads of each of a reader's training windows (``core.reader.Windows`` of ``questions``,
    core.io.Question): its passage tokens as a one-question window, which also keys the teacher cache; None for a
    window without passage tokens, and for a window of a pair past ``questions`` (a negative passage: the teacher
    is not asked about it). A reader learns from a teacher as a phrase model does (``--teacher``), the teacher's
    logits at the window's passage tokens."""
    out: list[TrainWindow | None] = []
    for w, off in enumerate(windows.offsets):
        inside = np.flatnonzero(off[:, 0] >= 0)
        if not len(inside) or int(windows.pair[w]) >= len(questions):
            out.append(None)
            continue
        q = questions[int(windows.pair[w])]
        out.append(TrainWindow(input_ids=windows.ids[w][inside], flags=np.zeros(len(inside), np.uint8),
                               questions=[q.question], starts=[], ends=[], answers=[], hard=[], passage=q.context,
                               offsets=off[inside]))
    return out


def reader_teacher_tensors(taught: list[TrainWindow | None], offsets: list[np.ndarray], cache: PhraseCache,
                           width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) start and end teacher logits of a reader's batch of windows (``reader_windows`` of each, and its
    (T, 2) offsets): the teacher's at the passage tokens, MISSING_LOGIT elsewhere."""
    out = np.full((len(taught), width, 2), MISSING_LOGIT, dtype=np.float32)
    for i, (w, off) in enumerate(zip(taught, offsets, strict=True)):
        if w is not None:
            out[i, np.flatnonzero(off[:, 0] >= 0)] = cache.window(teacher_key(w.questions[0], w.input_ids))[0]
    t = torch.from_numpy(out)
    return t[..., 0], t[..., 1]
