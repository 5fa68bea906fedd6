"""Build a phrase index from a JSONL corpus: encode in shards (resumable), merge, fill faiss, write the manifest.

    spanseek index build --corpus corpus.jsonl --model default --out INDEX_DIR [--factory Flat]

The corpus is streamed: passages are encoded in shards of ``shard_passages``; each finished shard is a
directory renamed into place, so a killed build resumes from the first missing shard. The merge writes the
final arrays through memory maps, then faiss is trained on a sample and filled chunk by chunk, and the manifest
is written last.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from core import store
from core.encoding import PassageEncoder, pick_device, pick_precision
from core.io import ReadStats, atomic_path, read_corpus, save_npy_atomic, write_json_atomic
from core.model import load_model, load_tokenizer, model_fingerprint, resolve_model
from core.text import tokenize_passages
from indexer.faiss_index import add_vectors, create_index, train_index

log = logging.getLogger(__name__)

BUILD_STATE = "build_state.json"
SHARDS = "shards"


class BuildError(RuntimeError):
    """The build cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class BuildOptions:
    factory: str = "Flat"
    shard_passages: int = 2000
    max_batch_tokens: int = 8192
    precision: str = "auto"  # bf16 on CPUs/GPUs that support it, else fp32
    max_train: int = 262_144
    device: str = "auto"
    progress: bool = True


def _passages(corpus: Path, stats: ReadStats | None = None) -> Iterator[tuple[int, int, str]]:
    """(doc index, paragraph index, text) for every non-empty passage of the corpus, in order."""
    for d, doc in enumerate(read_corpus(corpus, stats)):
        for p, text in enumerate(doc.paragraphs):
            yield d, p, text


def _shard_dir(out: Path, k: int) -> Path:
    return out / SHARDS / f"{k:06d}"


def _encode_shard(encoder: PassageEncoder, tokenizer, texts: list[str], dest: Path) -> int:
    """Encode one shard of passages into ``dest`` (written to dest.tmp, renamed when complete)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    toks = tokenize_passages(tokenizer, texts)
    enc = encoder.encode_tokens(toks)
    d = encoder.model.dim
    vecs = np.concatenate([e.vectors for e in enc]) if enc else np.zeros((0, d), np.float32)
    np.save(tmp / "vectors.npy", vecs.astype(np.float16))
    np.save(tmp / "offsets.npy", np.concatenate([t.offsets for t in toks]).astype(np.int32).reshape(-1, 2))
    np.save(tmp / "flags.npy", np.concatenate([t.flags for t in toks]).astype(np.uint8))
    np.save(tmp / "ntokens.npy", np.asarray([len(t) for t in toks], dtype=np.int64))
    tmp.rename(dest)
    return len(vecs)


def _build_params(corpus: Path, model_dir: Path, opts: BuildOptions) -> dict:
    st = corpus.stat()
    return {
        "corpus": str(corpus.resolve()),
        "corpus_size": st.st_size,
        "corpus_mtime": int(st.st_mtime),
        "model_fingerprint": model_fingerprint(model_dir),
        "shard_passages": opts.shard_passages,
    }


def build_index(corpus: str | Path, model: str | Path, out: str | Path, opts: BuildOptions = BuildOptions()) -> store.Manifest:
    """Build (or resume building) an index of ``corpus`` with ``model`` in ``out``. Returns its manifest."""
    corpus, out = Path(corpus), Path(out)
    if not corpus.is_file():
        raise BuildError(f"corpus {corpus} does not exist")
    model_dir = resolve_model(model)
    if (out / store.MANIFEST).exists():
        raise BuildError(f"{out} already holds a finished index; remove it or choose another --out")
    params = _build_params(corpus, model_dir, opts)
    state_path = out / BUILD_STATE
    if state_path.exists():
        old = json.loads(state_path.read_text())
        if old != params:
            changed = sorted(k for k in params if old.get(k) != params[k])
            raise BuildError(f"{out} holds a partial build with different {', '.join(changed)}; remove it or choose another --out")
        log.info("resuming the build in %s", out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(state_path, params)

    t_start = time.time()
    device = pick_device(opts.device)
    precision = pick_precision(opts.precision, device)
    phrase_model = load_model(model_dir).to(device)
    tokenizer = load_tokenizer(phrase_model.config)
    encoder = PassageEncoder(phrase_model, tokenizer, precision=precision, max_batch_tokens=opts.max_batch_tokens)

    # 1. encode shards
    stats = ReadStats()
    k, buf = 0, []
    bar = tqdm(desc="encode", unit="passage", disable=not opts.progress)

    def flush() -> None:
        nonlocal k, buf
        dest = _shard_dir(out, k)
        if not dest.exists():
            _encode_shard(encoder, tokenizer, buf, dest)
        bar.update(len(buf))
        k, buf = k + 1, []

    for _, _, text in _passages(corpus, stats):
        buf.append(text)
        if len(buf) == opts.shard_passages:
            flush()
    if buf:  # an empty shard cannot be encoded; a corpus without passages is refused below
        flush()
    bar.close()
    if stats.paragraphs == 0:
        raise BuildError(f"corpus {corpus} has no non-empty passages")
    log.info("corpus: %d documents, %d passages (skipped %d empty documents, %d empty paragraphs)",
             stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs)

    # 2. merge shards into the final arrays
    n_tokens = _merge(out, k, phrase_model.dim, corpus)

    # 3. faiss
    vectors = np.load(out / store.VECTORS, mmap_mode="r")
    ids = np.arange(n_tokens, dtype=np.int64)
    index = create_index(opts.factory, phrase_model.dim, contiguous_ids=True)
    train_index(index, vectors, opts.max_train)
    add_vectors(index, vectors, ids, progress=opts.progress)
    import faiss

    with atomic_path(out / store.FAISS_INDEX) as tmp:
        faiss.write_index(index, str(tmp))

    # 4. manifest last: its presence marks a finished index
    manifest = store.Manifest(
        format_version=store.FORMAT_VERSION,
        encoder=phrase_model.config.to_dict(),
        model_fingerprint=params["model_fingerprint"],
        model_ref=str(model),
        factory=opts.factory,
        faiss_params={"max_train": opts.max_train},
        documents=stats.documents,
        passages=stats.paragraphs,
        tokens=n_tokens,
        indexed_tokens=int(index.ntotal),
        filter_threshold=None,
        build_seconds=round(time.time() - t_start, 2),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    write_json_atomic(out / store.MANIFEST, manifest.to_dict())
    shutil.rmtree(out / SHARDS, ignore_errors=True)
    state_path.unlink(missing_ok=True)
    return manifest


def _merge(out: Path, n_shards: int, dim: int, corpus: Path) -> int:
    """Concatenate shard arrays into the index files via memory maps; write passage and document stores."""
    shards = [_shard_dir(out, k) for k in range(n_shards)]
    ntok = [np.load(s / "ntokens.npy") for s in shards]
    per_shard = [int(x.sum()) for x in ntok]
    n = sum(per_shard)
    passage_tokens = np.concatenate([[0], np.cumsum(np.concatenate(ntok))]).astype(np.int64)
    arrays = {
        store.VECTORS: ((n, dim), np.float16, "vectors.npy"),
        store.TOKEN_OFFSETS: ((n, 2), np.int32, "offsets.npy"),
        store.TOKEN_FLAGS: ((n,), np.uint8, "flags.npy"),
    }
    for name, (shape, dtype, part) in arrays.items():
        with atomic_path(out / name) as tmp:
            mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
            pos = 0
            for s, m in zip(shards, per_shard, strict=True):
                mm[pos : pos + m] = np.load(s / part)
                pos += m
            mm.flush()
            del mm
    save_npy_atomic(out / store.PASSAGE_TOKENS, passage_tokens)
    token_passage = np.repeat(np.arange(len(passage_tokens) - 1, dtype=np.int32), np.diff(passage_tokens))
    save_npy_atomic(out / store.TOKEN_PASSAGE, token_passage)
    with atomic_path(out / store.PASSAGES) as tp, atomic_path(out / store.DOCS) as td:
        with open(tp, "w", encoding="utf-8") as fp, open(td, "w", encoding="utf-8") as fd:
            for d, doc in enumerate(read_corpus(corpus)):
                fd.write(json.dumps({"id": doc.id, "title": doc.title}, ensure_ascii=False) + "\n")
                for p, text in enumerate(doc.paragraphs):
                    fp.write(json.dumps({"doc": d, "para": p, "text": text}, ensure_ascii=False) + "\n")
    return n
