"""A shard of an index build: the token vectors and maps of a run of passages, keyed by their content.

A finished shard is a directory renamed into place holding its content key (model, precision and passages), so a
killed build, local (``indexer.build``) or on Ray (``indexer.ray_encode``), re-uses every shard whose key is the
same and encodes only the rest.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xxhash

from spanseek.core.encoding import PassageEncoder, advance
from spanseek.core.integrity import SHARDS
from spanseek.core.io import naming
from spanseek.core.text import tokenize_passages
from spanseek.indexer.compress import filter_probabilities

SHARD_KEY = "key.txt"  # a shard's content key: model, precision and its passages (``shard_key``)
SHARD_PRECISION = "precision.txt"  # the inference precision it was encoded in (fp32 or bf16)


def encode_passages(encoder: PassageEncoder, toks: list, vecs: np.ndarray | None = None,
                    progress: Callable[[float], None] | None = None) -> dict[str, np.ndarray]:
    """Encode tokenised passages (``core.text.tokenize_passages``) into a shard's arrays, in memory: ``vectors``
    (n, d) float16, ``offsets`` (n, 2) int32, ``flags`` (n,) uint8, ``ntokens`` (p,) int64, and with a filter head
    ``filter`` (n, 2) start/end filter probabilities. A live write (``indexer.live``) encodes documents the same way,
    a forward batch at a time (``vecs``: the (tokens, d) float32 token vectors it made). ``progress`` is called after
    each forward batch with the fraction of the passages' tokens encoded so far."""
    if vecs is None and progress is None:
        vecs = encoder.encode_flat(toks)  # (tokens, d) float32
    elif vecs is None:
        steps, total, done = encoder.encode_flat_steps(toks), max(1, sum(len(t) for t in toks)), 0
        while not (step := advance(steps))[0]:
            done += step[1]
            progress(done / total)
        vecs = step[1]
    flags = (np.concatenate([t.flags for t in toks]) if toks else np.zeros(0)).astype(np.uint8)
    out = {
        "vectors": vecs.astype(np.float16),
        "offsets": (np.concatenate([t.offsets for t in toks]) if toks else np.zeros(0)).astype(np.int32).reshape(-1, 2),
        "flags": flags,
        "ntokens": np.asarray([len(t) for t in toks], dtype=np.int64),
    }
    if encoder.model.filter_head is not None:
        out["filter"] = filter_probabilities(encoder.model, vecs, flags)
    return out


def encode_shard(encoder: PassageEncoder, tokenizer, texts: list[str], dest: Path, key: str,
                 progress: Callable[[float], None] | None = None) -> int:
    """Encode one shard of passages into ``dest`` (written to dest.tmp, renamed over any old ``dest`` when
    complete), recording its content ``key``; ``progress`` as ``encode_passages``'s.

    With a filter head, the shard also gets ``filter.npy`` (n, 2) start/end filter probabilities.
    """
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = encode_passages(encoder, tokenize_passages(tokenizer, texts), progress=progress)
    try:
        for name, array in arrays.items():
            with naming(tmp / f"{name}.npy"):
                np.save(tmp / f"{name}.npy", array)
        (tmp / SHARD_PRECISION).write_text(encoder.precision)
        (tmp / SHARD_KEY).write_text(key)
    except BaseException:  # a part of a shard (a full disk) is of no use to a resumed build, and holds its space
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)  # a shard of other passages (the corpus changed since)
    tmp.rename(dest)
    return len(arrays["vectors"])


def has_shard(dest: Path, key: str) -> bool:
    """Whether ``dest`` is a finished shard of exactly these passages (same key)."""
    try:
        return (dest / SHARD_KEY).read_text() == key
    except OSError:
        return False


def shard_precision(dest: Path) -> str | None:
    """The inference precision the finished shard ``dest`` was encoded in; None when there is no such shard (or it
    was written before its precision was recorded)."""
    try:
        held = (dest / SHARD_PRECISION).read_text()
    except OSError:
        return None
    return held if held in ("fp32", "bf16") and (dest / SHARD_KEY).is_file() else None


def shard_dir(out: Path, k: int) -> Path:
    """Where the ``k``-th shard of a build (or an add's staging) in ``out`` is kept."""
    return out / SHARDS / f"{k:06d}"


def shard_key(model_fingerprint: str, precision: str, texts: list[str]) -> str:
    """What a shard's vectors depend on: the model, the inference precision and its passages, hashed."""
    h = xxhash.xxh3_128(f"{model_fingerprint}\0{precision}\0{len(texts)}\0".encode())
    for text in texts:
        h.update(text.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


MERGED_KEY = "merged.txt"  # the content key of the shards the last merge concatenated (``merged_key``)


def merged_key(out: Path, n_shards: int) -> str:
    """One key for the first ``n_shards`` shards of ``out`` in order (their content keys hashed): what the merged
    token vectors are made of, so that what is built from them (an on-disk build's trained index and blocks) is
    re-used only for the very same vectors."""
    h = xxhash.xxh3_128(f"{n_shards}\0".encode())
    for k in range(n_shards):
        h.update((shard_dir(out, k) / SHARD_KEY).read_bytes())
    return h.hexdigest()


def finished_shards(out: Path) -> dict[int, int]:
    """{k: passages} of each finished shard in ``out`` (an interrupted build's or add's), in order; a Ray build
    finishes its shards in any order, so there may be gaps."""
    found = {}
    for path in (out / SHARDS).glob("[0-9]" * 6):
        try:
            found[int(path.name)] = len(np.load(path / "ntokens.npy", mmap_mode="r"))
        except (OSError, ValueError):
            continue
    return dict(sorted(found.items()))


def finished_shard_sizes(out: Path) -> list[int]:
    """The passages of each shard in ``out`` (an interrupted build's or add's) up to its last finished one: the sizes
    a resumed build keeps, with any ``--shard-passages``, so that it re-uses every finished shard, also those a Ray
    build finished past one it had not. A missing shard takes the size of the next finished one (the shards of one
    run have one size), or, where that is the last and shorter (the corpus's end), of the one before it."""
    done = finished_shards(out)
    sizes: list[int] = []
    for k in range(max(done, default=-1) + 1):
        if k in done:
            sizes.append(done[k])
            continue
        after = next(j for j in done if j > k)
        corpus_end = after == max(done) and sizes and done[after] < sizes[-1]
        sizes.append(sizes[-1] if corpus_end else done[after])
    return sizes
