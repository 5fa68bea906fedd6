"""An on-disk cache of token vectors of passage windows from one phrase encoder (``PhraseCache``).

Query-side fine-tuning (trainer.qsft) trains against it because its phrase encoder is frozen. Joint training
(trainer.train, ``--stale-cache``) reads hard-negative passages from it instead of encoding them every step: there
the cache is *stale* (made by the model the run started from), and a target corrector (trainer.corrector) learns
to map its vectors towards the current encoder's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import autocast, padded_length, window_batch
from spanseek.core.io import new_memmap, other_files, write_json_atomic
from spanseek.core.model import PhraseModel, phrase_fingerprint
from spanseek.core.text import FLAG_END, FLAG_START, tokenize_passages
from spanseek.trainer.data import Batch, TrainWindow, hard_allowed, pick_hard, question_tensors
from spanseek.trainer.losses import HardNegatives

log = logging.getLogger(__name__)

CACHE_META = "cache.json"
CACHE_VECTORS = "vectors.npy"
CACHE_FLAGS = "flags.npy"
CACHE_DONE = "done.json"


class CacheError(RuntimeError):
    """A phrase cache directory belongs to another model or other windows; the message says which."""


CACHE_FILES = (CACHE_META, CACHE_VECTORS, CACHE_FLAGS, CACHE_DONE)


def check_cache_dir(flag: str, directory: str | Path) -> None:
    """CacheError naming ``flag`` when ``directory`` cannot hold a cache: a file, or a directory of other files (a
    model's, an index's: the cache's files would be written among them). A directory that is new, empty or a cache's
    (filled or not: a killed fill resumes) is fine. Checked when a run starts, not once the data is tokenised."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise CacheError(f"{flag} {directory} is a file, not a cache directory: give a new directory (or a cache's)")
    if not path.is_dir() or (path / CACHE_META).is_file():
        return
    if other := other_files(path, CACHE_FILES):
        raise CacheError(f"{flag} {directory} holds other files ({other}), not a cache: a cache is written into a "
                         "directory of its own; give a new directory (or a cache's)")


def window_key(input_ids: np.ndarray) -> str:
    """Content address of a window: a hash of its token ids (no [CLS]/[SEP])."""
    return hashlib.blake2b(np.ascontiguousarray(input_ids, dtype=np.int64).tobytes(), digest_size=12).hexdigest()


class PhraseCache:
    """Token vectors of passage windows from one frozen phrase encoder, addressed by ``window_key``.

    ``cache.json`` lists the keys with their row offsets and the phrase fingerprint; ``vectors.npy`` (N, d) fp16
    and ``flags.npy`` (N,) uint8 hold the content tokens of all windows, one after the other. ``done.json`` lists
    the shards of windows already encoded, so a killed fill resumes where it stopped.
    """

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        meta = json.loads((self.dir / CACHE_META).read_text())
        self.fingerprint: str = meta["fingerprint"]
        self.keys: list[str] = meta["keys"]
        self.offsets = np.asarray(meta["offsets"], dtype=np.int64)  # (K + 1,)
        self.shard_windows: int = meta["shard_windows"]
        self.source: str = meta.get("source", "model")  # "model" (encoded) or the index it was read from
        self.row = {k: i for i, k in enumerate(self.keys)}
        self.vectors = np.load(self.dir / CACHE_VECTORS, mmap_mode="r")
        self.flags = np.load(self.dir / CACHE_FLAGS, mmap_mode="r")

    def __contains__(self, key: str) -> bool:
        return key in self.row

    def window(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(n, d) vectors (fp16; a teacher cache's logits fp32) and (n,) flags of one window."""
        i = self.row[key]
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.vectors[a:b], self.flags[a:b]

    def done_shards(self) -> set[int]:
        path = self.dir / CACHE_DONE
        return set(json.loads(path.read_text())) if path.exists() else set()

    @property
    def n_shards(self) -> int:
        return math.ceil(len(self.keys) / self.shard_windows)

    @property
    def complete(self) -> bool:
        return len(self.done_shards()) == self.n_shards


def open_or_create(directory: Path, keys: list[str], uniq: dict[str, tuple[np.ndarray, np.ndarray]], dim: int,
                    fingerprint: str, shard_windows: int, source: str, dtype: type = np.float16) -> PhraseCache:
    """The cache at ``directory`` for these windows and this phrase encoder (or teacher) and source, created empty
    (zeros) if there is none; CacheError if the one there was made otherwise."""
    if (directory / CACHE_META).exists():
        cache = PhraseCache(directory)
        if cache.fingerprint != fingerprint:
            raise CacheError(f"{directory}: made with model {cache.fingerprint}, this one is {fingerprint}; delete "
                             "it or choose another cache directory")
        if cache.source != source:
            raise CacheError(f"{directory}: its vectors come from {cache.source}, not {source}; delete it or choose "
                             "another cache directory")
        if cache.keys != keys:
            raise CacheError(f"{directory}: holds {len(cache.keys)} other windows (different training data or hard "
                             "negatives); delete it or choose another cache directory")
        return cache
    directory.mkdir(parents=True, exist_ok=True)
    lengths = np.asarray([len(uniq[k][0]) for k in keys], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    new_memmap(directory / CACHE_VECTORS, dtype, (int(offsets[-1]), dim)).flush()  # a full disk: an error, no SIGBUS
    np.save(directory / CACHE_FLAGS, np.concatenate([uniq[k][1] for k in keys]).astype(np.uint8))
    write_json_atomic(directory / CACHE_META, {  # last: its presence means the files above are complete
        "fingerprint": fingerprint, "dim": dim, "shard_windows": shard_windows, "source": source,
        "keys": keys, "offsets": offsets.tolist(),
    })
    return PhraseCache(directory)


def fill_rows(cache: PhraseCache, desc: str, progress: bool,
          vectors_of: Callable[[list[str]], list[np.ndarray]], batch_windows: int) -> PhraseCache:
    """Write the vectors of every shard not done yet (``vectors_of``: a chunk of keys -> each window's (n, d)
    vectors), marking each shard done once flushed; returns the reopened cache."""
    done = cache.done_shards()
    todo = [s for s in range(cache.n_shards) if s not in done]
    if not todo:
        return cache
    keys, per = cache.keys, cache.shard_windows
    vectors = np.load(cache.dir / CACHE_VECTORS, mmap_mode="r+")
    bar = tqdm(total=sum(min(per, len(keys) - s * per) for s in todo), desc=desc, unit="window", disable=not progress)
    try:
        for shard in todo:
            shard_keys = keys[shard * per : (shard + 1) * per]
            for a in range(0, len(shard_keys), batch_windows):
                chunk = shard_keys[a : a + batch_windows]
                for k, v in zip(chunk, vectors_of(chunk), strict=True):
                    i = cache.row[k]
                    vectors[cache.offsets[i] : cache.offsets[i + 1]] = v
                bar.update(len(chunk))
            vectors.flush()
            done.add(shard)
            write_json_atomic(cache.dir / CACHE_DONE, sorted(done))
    except KeyboardInterrupt:  # Ctrl-C: say what is kept, and how to go on
        bar.close()
        log.warning("%s: stopped with %d of %d shards of %d windows filled; the same command resumes from there",
                    cache.dir, len(done), cache.n_shards, per)
        raise
    bar.close()
    return PhraseCache(cache.dir)


def _distinct(windows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The distinct windows by ``window_key``, ordered by length (less padding), and each key's window."""
    uniq: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for win_ids, win_flags in windows:
        uniq.setdefault(window_key(win_ids), (win_ids, win_flags))
    return sorted(uniq, key=lambda k: (len(uniq[k][0]), k)), uniq


def fill_cache(
    directory: str | Path,
    model: PhraseModel,
    model_dir: Path,
    tokenizer,
    windows: list[tuple[np.ndarray, np.ndarray]],
    batch_windows: int = 32,
    shard_windows: int = 512,
    device: torch.device | None = None,
    precision: str = "fp32",
    progress: bool = True,
) -> PhraseCache:
    """Encode the distinct ``windows`` (content ids, flags) into a PhraseCache at ``directory`` (resuming).

    An existing cache is reused if it was made by the same phrase encoder for the same windows; otherwise
    CacheError names the difference.
    """
    device = device or torch.device("cpu")
    keys, uniq = _distinct(windows)
    cache = open_or_create(Path(directory), keys, uniq, model.dim, phrase_fingerprint(model_dir), shard_windows,
                            "model")
    model.eval()

    def encode(chunk: list[str]) -> list[np.ndarray]:
        ids, mask = window_batch([uniq[k][0] for k in chunk], tokenizer)
        with torch.no_grad(), autocast(device, precision):
            H = model.encode_passages(ids.to(device), mask.to(device)).float().cpu().numpy()
        return [H[r, 1 : len(uniq[k][0]) + 1] for r, k in enumerate(chunk)]

    return fill_rows(cache, "phrase cache", progress, encode, batch_windows)


def fill_cache_from_index(
    directory: str | Path,
    index_dir: str | Path,
    model_dir: Path,
    config: EncoderConfig,
    windows: list[tuple[str, int, np.ndarray]],
    shard_windows: int = 512,
    progress: bool = True,
) -> tuple[PhraseCache, int]:
    """A PhraseCache of the distinct ``windows`` (passage text, first token, content ids) read from a built index
    instead of encoded: each token's vector as the index's searches score it (its fine store, decoded) and its
    flags as the index has them (cleared where a token filter dropped the token, whose vector reads as zeros).

    Training the question encoder against these vectors makes it quantisation-aware: it learns to rank the
    compressed vectors. The index must have been built with ``model_dir``'s phrase encoder. Windows of passages the
    index does not hold are left out; returns the cache and how many windows were.
    """
    from spanseek.core.loading import check_index_model
    from spanseek.core.phrase_index import PhraseIndex

    index = PhraseIndex(index_dir, verify_checksums=False)
    check_index_model(index, model_dir, config)
    where: dict[str, int] = {}
    for p, passage in enumerate(index.passages):
        where.setdefault(passage["text"], p)
    found: list[tuple[np.ndarray, np.ndarray]] = []
    rows: dict[str, int] = {}  # window key -> its first token in the index
    missing = 0
    for text, first, ids in windows:
        if text not in where:
            missing += 1
            continue
        a, b = index.passage_range(where[text])
        if first + len(ids) > b - a:
            raise CacheError(f"{index_dir}: passage {where[text]} has {b - a} tokens, a window reaches token "
                             f"{first + len(ids)}: was the index built with this tokenizer?")
        key = window_key(ids)
        rows.setdefault(key, a + first)
        found.append((ids, np.asarray(index.token_flags[a + first : a + first + len(ids)], np.uint8)))
    keys, uniq = _distinct(found)
    manifest = index.manifest
    source = f"index {Path(index_dir).resolve()} ({manifest.factory}, {manifest.fine_store} store, {manifest.created})"
    cache = open_or_create(Path(directory), keys, uniq, index.vectors.shape[1], phrase_fingerprint(model_dir), shard_windows,
                            source)

    def read(chunk: list[str]) -> list[np.ndarray]:
        return [np.asarray(index.vectors[rows[k] : rows[k] + len(uniq[k][0])], np.float32) for k in chunk]

    return fill_rows(cache, "phrase cache from index", progress, read, 256), missing


def as_indexed(windows: list[TrainWindow], cache: PhraseCache) -> tuple[list[TrainWindow], dict[str, int]]:
    """The windows of an index-filled cache with the index's flags, and what was left out: windows it does not hold
    (``not_in_index``, counted in questions) and questions whose gold start or end token the index's filter dropped
    (``gold_filtered``: no kept vector to score)."""
    kept: list[TrainWindow] = []
    skipped = {"not_in_index": 0, "gold_filtered": 0}
    for w in windows:
        key = window_key(w.input_ids)
        if key not in cache:
            skipped["not_in_index"] += len(w.questions)
            continue
        flags = np.asarray(cache.window(key)[1])
        ok = [bool(flags[i] & FLAG_START and flags[j] & FLAG_END) for i, j in zip(w.starts, w.ends, strict=True)]
        skipped["gold_filtered"] += ok.count(False)
        if any(ok):
            pick = [i for i, good in enumerate(ok) if good]
            kept.append(replace(w, flags=flags, questions=[w.questions[i] for i in pick],
                                starts=[w.starts[i] for i in pick], ends=[w.ends[i] for i in pick],
                                answers=[w.answers[i] for i in pick]))
    return kept, skipped


def hard_windows(windows: list[TrainWindow], tokenizer, enc: EncoderConfig) -> tuple[list[tuple], dict[str, str]]:
    """The first window (content ids, flags) of every hard passage of ``windows``, and each passage's cache key."""
    texts = sorted({t for w in windows for t in w.hard})
    pairs = [(t.input_ids[: enc.max_seq_len - 2], t.flags[: enc.max_seq_len - 2])
             for t in tokenize_passages(tokenizer, texts)]
    return pairs, {t: window_key(ids) for t, (ids, _) in zip(texts, pairs, strict=True)}


def cached_hard(
    batch: list[TrainWindow], cache: PhraseCache, hard_keys: dict[str, str], n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cached tokens of up to ``n`` hard passages of a batch (``pick_hard``).

    Returns vectors (M, d) float32, start_ok and end_ok (M,), and allowed (Q, M): False where the token's passage
    contains the question's answer. Questions are in batch order (window by window).
    """
    answers = [a for w in batch for a in w.answers]
    texts = [t for t in pick_hard(batch, n) if t in hard_keys]
    rows = [cache.window(hard_keys[t]) for t in texts]
    d = cache.vectors.shape[1]
    hv = np.concatenate([v for v, _ in rows]) if rows else np.zeros((0, d), np.float16)
    hf = np.concatenate([f for _, f in rows]) if rows else np.zeros(0, np.uint8)
    lengths = torch.tensor([len(f) for _, f in rows], dtype=torch.long)
    allowed = hard_allowed(texts, answers)
    return (torch.from_numpy(hv.astype(np.float32)), torch.from_numpy((hf & FLAG_START) > 0),
            torch.from_numpy((hf & FLAG_END) > 0),
            allowed.repeat_interleave(lengths, dim=1))


def cached_windows(batch: list[TrainWindow], cache: PhraseCache, T: int, first: int = 0) -> torch.Tensor:
    """(P, T, d) float32 cached vectors of the batch's windows, content token k at position ``first`` + k."""
    d = cache.vectors.shape[1]
    H = torch.zeros((len(batch), T, d))
    for p, w in enumerate(batch):
        v, _ = cache.window(window_key(w.input_ids))
        H[p, first : first + len(v)] = torch.from_numpy(np.asarray(v, dtype=np.float32))
    return H


def cached_batch(
    windows: list[TrainWindow], cache: PhraseCache, hard_keys: dict[str, str], hard_per_batch: int, tokenizer,
    max_query_len: int,
) -> Batch:
    """A batch whose token vectors come from the cache: the windows' (P, T, d), content token k at position k (no
    [CLS]), and the tokens of up to ``hard_per_batch`` hard passages (``cached_hard``)."""
    T = padded_length(max(len(w.input_ids) for w in windows))
    flags = torch.zeros((len(windows), T), dtype=torch.uint8)
    for p, w in enumerate(windows):
        flags[p, : len(w.flags)] = torch.from_numpy(np.array(w.flags))
    hard_vectors, hard_start_ok, hard_end_ok, hard_allowed = cached_hard(windows, cache, hard_keys, hard_per_batch)
    return Batch(
        start_ok=(flags & FLAG_START) > 0,
        end_ok=(flags & FLAG_END) > 0,
        **question_tensors(windows, tokenizer, max_query_len, shift=0),
        n_windows=len(windows),
        content_shift=0,
        windows=windows,
        vectors=cached_windows(windows, cache, T),
        hard=HardNegatives(hard_vectors, hard_start_ok, hard_end_ok, hard_allowed) if len(hard_vectors) else None,
    )
