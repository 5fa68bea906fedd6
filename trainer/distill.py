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
travel (``bench/gpu/teacher_cache.py``). ``teacher_tensors`` lays a batch's targets out like its student logits;
``run_teacher`` and ``batch_targets`` are what the training loop (trainer.loop) calls.

A teacher may also be a phrase model (``--teacher base``, or ``phrase:DIR``): its logits of a pair are its start and
end question vectors' products with its token vectors of the window's text. Several teachers, comma-separated
(``--teacher default,base``), teach their pooled distribution: the mean of their log-probabilities over the window
(a product of experts, each at weight 1/n), each teacher's logits in a cache of its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.encoding import PassageEncoder, QuestionEncoder
from spanseek.core.model import ModelError, load_model, load_tokenizer, model_fingerprint, resolve_model
from spanseek.core.reader import (
    MISSING_LOGIT,
    READER_CONFIG_NAME,
    READER_WEIGHTS_NAME,
    PassageReader,
    resolve_reader,
)
from spanseek.trainer.arguments import DistInfo, ReaderTrainConfig, TrainingOptions
from spanseek.trainer.data import Batch, TrainWindow, visited_windows
from spanseek.trainer.phrase_cache import (
    CACHE_META,
    CacheError,
    PhraseCache,
    check_cache_dir,
    fill_rows,
    open_or_create,
)

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


class PhraseTeacher:
    """A phrase model as a teacher: a pair's start (end) logit at a window token is the model's q_start (q_end) of the
    question times its vector of the token of its own tokenization that starts at the same character of the window's
    text (MISSING_LOGIT where none does). Each distinct window is encoded once for all its questions in a chunk."""

    def __init__(self, path: Path, device: torch.device | str = "cpu", precision: str = "fp32"):
        model = load_model(path).to(device)
        tokenizer = load_tokenizer(model.config)
        self.passages = PassageEncoder(model, tokenizer, precision)
        self.questions = QuestionEncoder(model, tokenizer, precision)

    def token_logits(self, pairs: list[tuple[str, TrainWindow]]) -> list[np.ndarray]:
        texts: dict[str, int] = {}
        cut = [window_text(w) for _, w in pairs]
        for text, _ in cut:
            texts.setdefault(text, len(texts))
        encoded = self.passages.encode(list(texts))
        q_start, q_end = self.questions.encode([q for q, _ in pairs])
        out = []
        for i, (text, wanted) in enumerate(cut):
            enc = encoded[texts[text]]
            chars = enc.tokens.offsets[:, 0]
            at = np.searchsorted(chars, wanted).clip(0, len(chars) - 1)
            hit = chars[at] == wanted
            logits = np.full((len(wanted), 2), MISSING_LOGIT, dtype=np.float32)
            logits[hit] = enc.vectors[at[hit]] @ np.stack([q_start[i], q_end[i]], axis=1)
            out.append(logits)
        return out


def resolve_teacher(ref: str | Path) -> tuple[str, Path]:
    """("reader" | "phrase", directory) of one ``--teacher``: ``reader:REF`` or ``phrase:REF`` say which; otherwise
    a reader if REF names one (``default`` is the bundled reader), else a phrase model (``base``, a checkpoint);
    ModelError naming REF when it is neither."""
    ref = str(ref)
    kind, _, rest = ref.partition(":")
    if kind in ("reader", "phrase") and rest:
        return kind, resolve_reader(rest) if kind == "reader" else resolve_model(rest)
    try:
        return "reader", resolve_reader(ref)
    except ModelError as as_reader:
        try:
            return "phrase", resolve_model(ref)
        except ModelError:
            raise ModelError(f"--teacher {ref}: neither a reader nor a phrase model ({as_reader})") from None


def teacher_refs(teacher: str | None) -> list[str]:
    """The comma-separated teachers of ``--teacher``."""
    return [t.strip() for t in (teacher or "").split(",") if t.strip()]


def teacher_pairs(windows: list[TrainWindow]) -> tuple[dict[str, tuple[str, TrainWindow]], list[str]]:
    """Every (question, window) pair of ``windows`` by its key, and the keys in a teacher cache's order."""
    pairs = {teacher_key(q, w.input_ids): (q, w) for w in windows for q in w.questions}
    # similar lengths share a batch, and a window's questions lie side by side (a phrase-model teacher encodes the
    # window once for all of them)
    keys = sorted(pairs, key=lambda k: (len(pairs[k][1].input_ids), pairs[k][1].input_ids.tobytes(), k))
    return pairs, keys


def is_teacher_cache(ref: str | Path) -> bool:
    """Whether ``--teacher`` names a teacher cache (its logits) rather than a reader."""
    return (Path(ref) / CACHE_META).is_file()


def open_teacher_cache(directory: str | Path, windows: list[TrainWindow]) -> PhraseCache:
    """A teacher cache made elsewhere, standing for its reader: it must be complete and hold every pair of ``windows``
    (a run shorter than the one it was made for reads a part of it); CacheError naming what differs."""
    cache = PhraseCache(directory)
    if not cache.source.startswith(("reader:", "phrase:")):
        raise CacheError(f"{directory}: not a teacher cache (its rows come from {cache.source}, not a teacher)")
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


def fill_teacher_cache(directory: str | Path, teacher_ref: str | Path, windows: list[TrainWindow],
                       device: torch.device | None = None, precision: str = "fp32", batch_pairs: int = 64,
                       shard_pairs: int = 2048, progress: bool = True) -> PhraseCache:
    """The teacher logits of every (question, window) pair of ``windows`` in a cache at ``directory`` (resuming a
    killed fill; CacheError for a cache of another teacher or other pairs). The teacher: a reader or a phrase
    model (``resolve_teacher``)."""
    kind, path = resolve_teacher(teacher_ref)
    pairs, keys = teacher_pairs(windows)
    rows = {k: (pairs[k][1].input_ids, np.zeros(len(pairs[k][1].input_ids), np.uint8)) for k in keys}
    fingerprint = reader_fingerprint(path) if kind == "reader" else model_fingerprint(path)
    cache = open_or_create(Path(directory), keys, rows, 2, fingerprint, shard_pairs, f"{kind}:{path}",
                           dtype=np.float32)
    if cache.complete:
        return cache
    if kind == "reader":
        reader = PassageReader.load(path, device=device or "cpu", precision=precision)
        logits_of = lambda chunk: read_pairs(reader, [pairs[k] for k in chunk])  # noqa: E731
    else:
        teacher = PhraseTeacher(path, device or "cpu", precision)
        logits_of = lambda chunk: teacher.token_logits([pairs[k] for k in chunk])  # noqa: E731
    return fill_rows(cache, "teacher logits", progress, logits_of, batch_pairs)


def _cache_dirs(cfg: TrainingOptions | ReaderTrainConfig) -> list[Path | None]:
    """Each teacher's cache directory (None: the teacher is a cache itself): ``--teacher-cache``, comma-separated
    one a teacher that is not a cache, else OUT/teacher-cache (OUT/teacher-cache-N for the N-th of several)."""
    refs = teacher_refs(cfg.teacher)
    to_fill = [i for i, ref in enumerate(refs) if not is_teacher_cache(ref)]
    given = teacher_refs(cfg.teacher_cache)
    if given and not to_fill:
        raise ValueError(f"--teacher-cache {cfg.teacher_cache}: --teacher {cfg.teacher} is made of teacher caches "
                         "already (their logits are used as they are); leave --teacher-cache out")
    if given and len(given) != len(to_fill):
        raise ValueError(f"--teacher-cache {cfg.teacher_cache}: give one directory for each of the {len(to_fill)} "
                         f"teachers of --teacher {cfg.teacher} that are not caches, comma-separated")
    dirs: list[Path | None] = [None] * len(refs)
    for n, i in enumerate(to_fill):
        default = TEACHER_CACHE if len(refs) == 1 else f"{TEACHER_CACHE}-{i}"
        dirs[i] = Path(given[n]) if given else Path(cfg.out) / default
    return dirs


def check_teacher(cfg: TrainingOptions | ReaderTrainConfig) -> None:
    """Refuse a ``--teacher`` that is neither a reader, a phrase model nor a teacher cache, and ``--teacher-cache``
    directories that do not fit it, when a run starts: the teacher is first read after the data is tokenised (and
    QSFT's phrase cache filled)."""
    if cfg.teacher is None:
        return
    _check_teachers(cfg)
    for directory in teacher_refs(cfg.teacher_cache):  # (not a model's directory: its files would be among the cache's)
        check_cache_dir("--teacher-cache", directory)


def _check_teachers(cfg: TrainingOptions | ReaderTrainConfig) -> None:
    """``check_teacher``'s check of ``--teacher`` and of the number of ``--teacher-cache`` directories."""
    if not teacher_refs(cfg.teacher):
        raise ValueError(f"--teacher {cfg.teacher!r}: name a reader, a phrase model or a teacher cache")
    for ref in teacher_refs(cfg.teacher):
        if not is_teacher_cache(ref):
            resolve_teacher(ref)  # ModelError naming it when it is no teacher
    _cache_dirs(cfg)


def teacher_cache(cfg: TrainingOptions | ReaderTrainConfig, windows: list[TrainWindow], device: torch.device,
                  precision: str) -> list[PhraseCache]:
    """The run's teacher caches, one a teacher (``--teacher-cache``, else OUT/teacher-cache), each filled for
    ``windows`` if it is not."""
    if cfg.teacher is None:
        raise ValueError("no --teacher to distil from")
    _check_teachers(cfg)  # (its cache directories were checked when the run started, before it wrote any file)
    return [open_teacher_cache(ref, windows) if directory is None else
            fill_teacher_cache(directory, ref, windows, device, precision, progress=cfg.progress)
            for ref, directory in zip(teacher_refs(cfg.teacher), _cache_dirs(cfg), strict=True)]


def run_teacher(cfg: TrainingOptions, windows: list[TrainWindow], steps: int, dist: DistInfo, device: torch.device,
                precision: str) -> list[PhraseCache] | None:
    """The teacher caches of a phrase-model run of ``steps`` steps (None without ``--teacher``): the logits of the
    windows those steps visit (every data-parallel rank's), computed once, by the main rank, before the first step."""
    if not cfg.teacher:
        return None
    taught = visited_windows(windows, cfg.batch_windows, cfg.seed, steps, dist.world)
    if dist.is_main:
        teacher_cache(cfg, taught, device, precision)
    if dist.enabled:
        torch.distributed.barrier()
    return teacher_cache(cfg, taught, device, precision)


def batch_targets(batch: Batch, caches: list[PhraseCache] | None,
                  device: torch.device) -> tuple[torch.Tensor, ...] | None:
    """The teacher's (Q, T) start and end logits of a batch's questions, laid out as its student logits (None
    without a teacher)."""
    if caches is None:
        return None
    width = batch.start_ok.shape[1]
    return tuple(t.to(device) for t in teacher_tensors(batch.windows, caches, width, batch.content_shift))


def pooled_logits(rows: list[np.ndarray]) -> np.ndarray:
    """(n, 2) logits of several teachers of one pair -> their pooled start and end logits: the mean of the teachers'
    log-probabilities over the tokens every teacher read (a product of experts), MISSING_LOGIT where one did not.
    One teacher's logits come back as they are."""
    if len(rows) == 1:
        return rows[0]
    stacked = np.stack(rows).astype(np.float64)  # (teachers, n, 2)
    read = (stacked > MISSING_LOGIT / 2).all(axis=(0, 2))
    out = np.full(rows[0].shape, MISSING_LOGIT, dtype=np.float32)
    if read.any():
        x = stacked[:, read]
        x = x - x.max(axis=1, keepdims=True)
        logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
        out[read] = logp.mean(axis=0)
    return out


def _pair_logits(caches: list[PhraseCache], key: str) -> np.ndarray:
    return pooled_logits([cache.window(key)[0] for cache in caches])


def teacher_tensors(windows: list[TrainWindow], caches: list[PhraseCache], width: int,
                    shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, width) start and end teacher logits of a batch's questions (window by window, as the batch orders
    them; several teachers' pooled), content token k at column k + ``shift``; MISSING_LOGIT elsewhere."""
    n_questions = sum(len(w.questions) for w in windows)
    out = np.full((n_questions, width, 2), MISSING_LOGIT, dtype=np.float32)
    row = 0
    for w in windows:
        for q in w.questions:
            logits = _pair_logits(caches, teacher_key(q, w.input_ids))
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


def reader_teacher_tensors(taught: list[TrainWindow | None], offsets: list[np.ndarray], caches: list[PhraseCache],
                           width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) start and end teacher logits of a reader's batch of windows (``reader_windows`` of each, and its
    (T, 2) offsets): the teacher's at the passage tokens, MISSING_LOGIT elsewhere."""
    out = np.full((len(taught), width, 2), MISSING_LOGIT, dtype=np.float32)
    for i, (w, off) in enumerate(zip(taught, offsets, strict=True)):
        if w is not None:
            out[i, np.flatnonzero(off[:, 0] >= 0)] = _pair_logits(caches, teacher_key(w.questions[0], w.input_ids))
    t = torch.from_numpy(out)
    return t[..., 0], t[..., 1]
