"""Build a phrase index from a JSONL corpus: encode in shards (resumable), merge, fill faiss, write the manifest.

    spanseek index build --corpus corpus.jsonl --model default --out INDEX_DIR [--factory Flat|auto|IVF1024,SQ8|...]
        [--filter-threshold T] [--gpu/--no-gpu]

The corpus is streamed: passages are encoded in shards of ``shard_passages``; each finished shard is a
directory renamed into place, so a killed build resumes from the first missing shard (the shards do not depend
on the factory, so a build that stopped at the faiss stage can be resumed with another ``--factory``). The merge
writes the final arrays through memory maps; then the factory is resolved (``auto``) and validated against the
number of tokens to index, faiss is trained on a sample (on GPU when faiss has one) and filled chunk by chunk,
compressed indexes get a codes store (``indexer.compress``), and the manifest is written last.

With a filter head and ``filter_threshold`` T, start/end filter probabilities are computed at encode time; faiss
holds only tokens with either probability >= T, while the fine store and codes keep every token.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from spanseek.core import store
from spanseek.core.encoding import PassageEncoder, pick_device, pick_precision
from spanseek.core.io import ReadStats, atomic_path, read_corpus, save_npy_atomic, write_json_atomic
from spanseek.core.model import (
    load_model,
    load_tokenizer,
    model_fingerprint,
    phrase_fingerprint,
    resolve_model,
)
from spanseek.core.text import tokenize_passages
from spanseek.indexer.compress import filter_probabilities, has_codes, kept_token_ids, write_codes
from spanseek.indexer.faiss_index import (
    FactoryError,
    add_vectors,
    create_index,
    default_nprobe,
    parse_factory,
    resolve_factory,
    train_index,
    training_size,
    use_gpu,
    validate_factory,
)
from spanseek.indexer.ingest import corpus_problem

log = logging.getLogger(__name__)

BUILD_STATE = "build_state.json"
SHARDS = "shards"


class BuildError(RuntimeError):
    """The build cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class BuildOptions:
    """How to build: ``factory`` is any faiss factory string or ``auto``; ``gpu`` None = use one if faiss has it;
    ``filter_threshold`` needs a model with a filter head; ``vector_source`` is the searcher's default neighbour
    source recorded in the manifest; ``nprobe`` the IVF default stored in the index (None: ``default_nprobe``)."""

    factory: str = "Flat"
    shard_passages: int = 2000
    max_batch_tokens: int = 8192
    precision: str = "auto"  # bf16 on CPUs/GPUs that support it, else fp32
    max_train: int = 262_144
    device: str = "auto"
    progress: bool = True
    gpu: bool | None = None
    filter_threshold: float | None = None
    vector_source: str = "fine"
    nprobe: int | None = None


def _passages(corpus: Path, stats: ReadStats | None = None) -> Iterator[tuple[int, int, str]]:
    """(doc index, paragraph index, text) for every non-empty passage of the corpus, in order."""
    for d, doc in enumerate(read_corpus(corpus, stats)):
        for p, text in enumerate(doc.paragraphs):
            yield d, p, text


def _shard_dir(out: Path, k: int) -> Path:
    return out / SHARDS / f"{k:06d}"


def _encode_shard(encoder: PassageEncoder, tokenizer, texts: list[str], dest: Path) -> int:
    """Encode one shard of passages into ``dest`` (written to dest.tmp, renamed when complete).

    With a filter head, the shard also gets ``filter.npy`` (n, 2) start/end filter probabilities.
    """
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
    if encoder.model.filter_head is not None:
        np.save(tmp / "filter.npy", filter_probabilities(encoder.model, vecs))
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


def encode_corpus(corpus: Path, out: Path, phrase_model, opts: BuildOptions) -> tuple[int, ReadStats]:
    """Encode ``corpus`` into shards under ``out`` (skipping finished ones). Returns (shard count, read stats)."""
    device = next(phrase_model.parameters()).device
    tokenizer = load_tokenizer(phrase_model.config)
    encoder = PassageEncoder(phrase_model, tokenizer, precision=pick_precision(opts.precision, device),
                             max_batch_tokens=opts.max_batch_tokens)
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
    return k, stats


def load_filter_scores(index_dir: Path) -> np.ndarray | None:
    """The (N, 2) filter probabilities of an index or staging directory, or None when the model has no filter."""
    path = index_dir / store.FILTER_SCORES
    return np.load(path, mmap_mode="r") if path.is_file() else None


def fill_faiss(out: Path, dim: int, opts: BuildOptions) -> tuple[str, dict, int]:
    """Resolve and validate the factory, train, add the kept tokens, write index.faiss (+ codes.npy).

    Returns (factory, faiss_params for the manifest, tokens indexed). Raises FactoryError before any training when the
    corpus is too small for the factory.
    """
    import faiss

    vectors = np.load(out / store.VECTORS, mmap_mode="r")
    scores = load_filter_scores(out)
    if opts.filter_threshold is not None and scores is None:
        raise BuildError(f"{out} has no filter scores ({store.FILTER_SCORES}): its model has no filter head")
    ids = kept_token_ids(scores, opts.filter_threshold, len(vectors))
    factory = resolve_factory(opts.factory, dim, len(ids))
    try:
        spec = validate_factory(factory, dim, len(ids))
    except FactoryError as e:
        raise FactoryError(f"{e} (the encoded shards in {out} are kept: rerun with another --factory to resume)") from None
    contiguous = len(ids) == len(vectors)
    index = create_index(factory, dim, contiguous_ids=contiguous)
    gpu = use_gpu(opts.gpu)
    n_train = training_size(spec, len(ids), opts.max_train)
    train_seconds = train_index(index, vectors, n_train, gpu=gpu, pool=None if contiguous else ids)
    t1 = time.perf_counter()
    add_vectors(index, vectors, ids, progress=opts.progress, gpu=gpu)
    add_seconds = time.perf_counter() - t1
    params = {
        "max_train": opts.max_train, "train_size": n_train, "requested_factory": opts.factory, "gpu": gpu,
        "train_seconds": round(train_seconds, 2), "add_seconds": round(add_seconds, 2),
        "vector_source": opts.vector_source,
    }
    if spec.nlist:
        nprobe = opts.nprobe or default_nprobe(spec.nlist)
        faiss.extract_index_ivf(index).nprobe = nprobe  # stored in index.faiss: the search-time default
        params.update(nlist=spec.nlist, nprobe=nprobe)
    if has_codes(factory):
        t2 = time.perf_counter()
        params["code_size"] = write_codes(index, vectors, out / store.CODES, progress=opts.progress)
        params["codes_seconds"] = round(time.perf_counter() - t2, 2)
    elif opts.vector_source == "codes":
        raise FactoryError(f"vector_source 'codes' needs a compressed index; {factory!r} has no codes")
    with atomic_path(out / store.FAISS_INDEX) as tmp:
        faiss.write_index(index, str(tmp))
    return factory, params, int(index.ntotal)


def build_index(corpus: str | Path, model: str | Path, out: str | Path, opts: BuildOptions = BuildOptions()) -> store.Manifest:
    """Build (or resume building) an index of ``corpus`` with ``model`` in ``out``. Returns its manifest."""
    corpus, out = Path(corpus), Path(out)
    problem = corpus_problem(corpus)  # a directory, a Markdown or SQuAD file...: say which command converts it
    if problem:
        raise BuildError(problem)
    model_dir = resolve_model(model)
    if (out / store.MANIFEST).exists():
        raise BuildError(f"{out} already holds a finished index; remove it or choose another --out")
    if opts.factory != "auto":
        parse_factory(opts.factory)  # syntax errors before any encoding; sizes are checked after it
    if opts.vector_source not in store.VECTOR_SOURCES:
        raise BuildError(f"vector_source must be one of {store.VECTOR_SOURCES}, got {opts.vector_source!r}")
    params = _build_params(corpus, model_dir, opts)
    state_path = out / BUILD_STATE
    if state_path.exists():
        old = json.loads(state_path.read_text())
        if old != params:
            changed = sorted(k for k in params if old.get(k) != params[k])
            raise BuildError(f"{out} holds a partial build with different {', '.join(changed)}; remove it or choose another --out")
        log.info("resuming the build in %s", out)

    t_start = time.time()
    phrase_model = load_model(model_dir).to(pick_device(opts.device))
    if opts.filter_threshold is not None and phrase_model.filter_head is None:
        raise BuildError(f"--filter-threshold needs a model with a filter head; {model} has none "
                         "(train one with `spanseek train filter`)")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(state_path, params)

    n_shards, stats = encode_corpus(corpus, out, phrase_model, opts)  # 1. encode shards
    n_tokens = merge_shards(out, n_shards, phrase_model.dim, corpus)  # 2. merge shards into the final arrays
    factory, faiss_params, indexed = fill_faiss(out, phrase_model.dim, opts)  # 3. faiss (+ codes)

    # 4. manifest last: its presence marks a finished index
    manifest = store.Manifest(
        format_version=store.FORMAT_VERSION,
        encoder=phrase_model.config.to_dict(),
        model_fingerprint=params["model_fingerprint"],
        model_ref=str(model),
        factory=factory,
        faiss_params=faiss_params,
        documents=stats.documents,
        passages=stats.paragraphs,
        tokens=n_tokens,
        indexed_tokens=indexed,
        filter_threshold=opts.filter_threshold,
        build_seconds=round(time.time() - t_start, 2),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        phrase_fingerprint=phrase_fingerprint(model_dir),
    )
    write_json_atomic(out / store.MANIFEST, manifest.to_dict())
    shutil.rmtree(out / SHARDS, ignore_errors=True)
    state_path.unlink(missing_ok=True)
    return manifest


def reindex(src: str | Path, out: str | Path, opts: BuildOptions) -> store.Manifest:
    """A new index in ``out`` over the token vectors of the built index ``src`` with another faiss factory.

    The stores are hard-linked (copied across file systems), so no passage is encoded again; only faiss is
    trained and filled (benchmarks compare factories this way). The filter scores, if any, are reused.
    """
    src, out = Path(src), Path(out)
    old = store.Manifest.load(src)
    if (out / store.MANIFEST).exists():
        raise BuildError(f"{out} already holds a finished index; remove it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in (store.MANIFEST, store.FAISS_INDEX, store.CODES):
            (out / f.name).unlink(missing_ok=True)
            try:
                os.link(f, out / f.name)
            except OSError:
                shutil.copy2(f, out / f.name)
    t0 = time.time()
    factory, faiss_params, indexed = fill_faiss(out, int(old.encoder["dim"]), opts)
    manifest = store.Manifest(**{
        **old.to_dict(), "factory": factory, "faiss_params": faiss_params, "indexed_tokens": indexed,
        "filter_threshold": opts.filter_threshold, "build_seconds": round(time.time() - t0, 2),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    })
    write_json_atomic(out / store.MANIFEST, manifest.to_dict())
    return manifest


def merge_shards(out: Path, n_shards: int, dim: int, corpus: Path) -> int:
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
    if shards and (shards[0] / "filter.npy").is_file():
        arrays[store.FILTER_SCORES] = ((n, 2), np.float16, "filter.npy")
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
                fd.write(json.dumps(store.doc_record(doc.id, doc.title, doc.meta), ensure_ascii=False) + "\n")
                for p, text in enumerate(doc.paragraphs):
                    fp.write(json.dumps({"doc": d, "para": p, "text": text}, ensure_ascii=False) + "\n")
    return n
