"""Append documents to a built index without retraining faiss.

    spanseek index add --index INDEX_DIR --corpus more.jsonl [--model default]

Document ids are the key: an add whose corpus holds an id the index already has (or one id twice) is refused
before anything changes, so running the same add again changes nothing. (Replacing documents by id is not
supported: remove them by rebuilding.)

The new corpus is encoded into a staging directory (``add.staging``, the build's resumable shards and merge),
then every store is rewritten as ``<name>.add.tmp`` = old rows followed by the new ones (token ids, passage and
document numbers continue after the existing ones), the new tokens (those the filter keeps, when the index was
built with a threshold) are added to the trained faiss index and encoded into the codes store. When all those
files are complete and flushed to disk, a journal (``add.journal.json``) naming them and the new manifest (with
their checksums) is written: that is the commit point. Then each file is renamed over its old version, the
manifest is written and the journal removed. The lexical (BM25) part, when the index has one, is rebuilt
over the old and new passages as the directory ``lexical.add.tmp`` before the journal. A kill -9 anywhere leaves an index that opens: before the journal,
opening it drops the partial files (roll back); after it, opening it finishes the renames (roll forward;
``core.store.recover``). An add holds the index's writer lock, so two adds cannot interleave.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np

from spanseek.core import integrity, store
from spanseek.core.encoding import pick_device
from spanseek.core.finestore import FINE_CODES, open_fine_store
from spanseek.core.io import atomic_path
from spanseek.core.model import load_model, model_fingerprint, phrase_fingerprint, resolve_model
from spanseek.indexer.build import BuildError, BuildOptions, encode_corpus, load_filter_scores, merge_shards
from spanseek.indexer.compress import kept_token_ids, write_codes
from spanseek.indexer.faiss_index import add_vectors
from spanseek.indexer.fine_store import encode_fine_rows
from spanseek.indexer.ingest import corpus_problem
from spanseek.indexer.lexical import write_lexical
from spanseek.indexer.recall import measure_recall

log = logging.getLogger(__name__)

STAGING = integrity.STAGING
JOURNAL = integrity.JOURNAL
TMP_SUFFIX = integrity.ADD_SUFFIX


def _tmp(index_dir: Path, name: str) -> Path:
    return index_dir / (name + TMP_SUFFIX)


def _concat_npy(old_path: Path, new: np.ndarray, dest: Path) -> None:
    """Write old rows followed by ``new`` rows to ``dest`` through a memory map (bounded memory)."""
    old = np.load(old_path, mmap_mode="r")
    mm = np.lib.format.open_memmap(dest, mode="w+", dtype=old.dtype, shape=(len(old) + len(new), *old.shape[1:]))
    for a in range(0, len(old), 1 << 20):
        b = min(len(old), a + (1 << 20))
        mm[a:b] = old[a:b]
    mm[len(old) :] = new
    mm.flush()
    del mm


def _concat_jsonl(old_path: Path, new_path: Path, dest: Path, doc_offset: int | None) -> None:
    """Copy old lines then new ones (their ``doc`` numbers shifted by ``doc_offset`` for passages)."""
    with open(dest, "w", encoding="utf-8") as out:
        with open(old_path, encoding="utf-8") as f:
            shutil.copyfileobj(f, out)
        with open(new_path, encoding="utf-8") as f:
            for line in f:
                if doc_offset is not None:
                    obj = json.loads(line)
                    obj["doc"] += doc_offset
                    line = json.dumps(obj, ensure_ascii=False) + "\n"
                out.write(line)


def add_documents(
    index_dir: str | Path, corpus: str | Path, model: str | Path | None = None, opts: BuildOptions | None = None
) -> store.Manifest:
    """Append the documents of ``corpus`` to the index in ``index_dir``; returns the new manifest.

    Raises CorpusError (file and line) when a document id is already in the index or repeated in the corpus,
    BuildError when another add holds the index; the index is then unchanged.
    """
    index_dir, corpus = Path(index_dir), Path(corpus)
    opts = opts or BuildOptions(progress=False)
    store.Manifest.load(index_dir)  # a clear error for a missing or unfinished index
    problem = corpus_problem(corpus)  # a directory, a Markdown or SQuAD file...: say which command converts it
    if problem:
        raise BuildError(problem)
    with integrity.writer_lock(index_dir) as locked:
        if not locked:
            raise BuildError(f"{index_dir} is being changed by another `spanseek index add` (or is read-only)")
        if store.recover_locked(index_dir) == "rolled forward":
            log.info("finished an interrupted add in %s", index_dir)
        staging = index_dir / STAGING
        try:
            return _add_locked(index_dir, corpus, model, opts, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _add_locked(index_dir: Path, corpus: Path, model: str | Path | None, opts: BuildOptions,
                staging: Path) -> store.Manifest:
    """``add_documents`` under the writer lock."""
    import faiss

    old = store.check_index(index_dir, contents=False, recovered=True)  # sizes; every file is re-read below anyway
    if old.faiss_params.get("on_disk"):
        raise BuildError(f"{index_dir} keeps its inverted lists on disk ({store.IVFDATA}), which `index add` would "
                         "change in place; build the index again with the new documents")
    model_dir = resolve_model(model or old.model_ref)
    phrase_model = load_model(model_dir).to(pick_device(opts.device))
    fingerprint = model_fingerprint(model_dir)
    old.check_model(phrase_model.config, fingerprint, phrase_fingerprint(model_dir))
    t0 = time.time()

    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    held = (d["id"] for d in store.read_jsonl(index_dir / store.DOCS))
    n_shards, stats = encode_corpus(corpus, staging, phrase_model, opts, fingerprint, held,
                                    f"the index {index_dir} (`index add` refuses ids it holds; nothing was changed)")
    n_new = merge_shards(staging, n_shards, phrase_model.dim)
    N, P, D = old.tokens, old.passages, old.documents
    new_vectors = np.load(staging / store.VECTORS, mmap_mode="r")

    names = [store.VECTORS, store.TOKEN_OFFSETS, store.TOKEN_FLAGS]
    if old.fine_store != "fp16":  # a quantised fine store: the new rows encoded with the index's quantiser
        names[0] = FINE_CODES
        encode_fine_rows(index_dir, new_vectors, staging / FINE_CODES)
    for name in names:
        _concat_npy(index_dir / name, np.load(staging / name, mmap_mode="r"), _tmp(index_dir, name))
    _concat_npy(index_dir / store.TOKEN_PASSAGE, np.load(staging / store.TOKEN_PASSAGE) + P,
                _tmp(index_dir, store.TOKEN_PASSAGE))
    _concat_npy(index_dir / store.PASSAGE_TOKENS, np.load(staging / store.PASSAGE_TOKENS)[1:] + N,
                _tmp(index_dir, store.PASSAGE_TOKENS))
    _concat_jsonl(index_dir / store.PASSAGES, staging / store.PASSAGES, _tmp(index_dir, store.PASSAGES), D)
    _concat_jsonl(index_dir / store.DOCS, staging / store.DOCS, _tmp(index_dir, store.DOCS), None)
    names += [store.TOKEN_PASSAGE, store.PASSAGE_TOKENS, store.PASSAGES, store.DOCS]

    new_filter = load_filter_scores(staging)
    if (index_dir / store.FILTER_SCORES).is_file() and new_filter is not None:
        _concat_npy(index_dir / store.FILTER_SCORES, new_filter, _tmp(index_dir, store.FILTER_SCORES))
        names.append(store.FILTER_SCORES)

    index = faiss.read_index(str(index_dir / store.FAISS_INDEX))
    ids = kept_token_ids(new_filter, old.filter_threshold, n_new, offset=N)
    add_vectors(index, new_vectors, ids, progress=opts.progress, gpu=False, id_offset=N)
    faiss.write_index(index, str(_tmp(index_dir, store.FAISS_INDEX)))
    names.append(store.FAISS_INDEX)
    if (index_dir / store.CODES).is_file():
        old_codes = np.load(index_dir / store.CODES, mmap_mode="r")
        write_codes(index, new_vectors, _tmp(index_dir, store.CODES), old_codes=old_codes)
        names.append(store.CODES)

    lexical = old.lexical
    if lexical is not None:  # an index without one stays without (`spanseek index add-lexical` adds it)
        lexical = write_lexical(index_dir, _tmp(index_dir, store.PASSAGES), _tmp(index_dir, store.DOCS),
                                _tmp(index_dir, store.LEXICAL), fusion=lexical.get("fusion"))
        names.append(store.LEXICAL)

    params = dict(old.faiss_params)
    if "recall" in params and opts.recall_sample:  # re-measured over all tokens, for `index verify` to repeat
        all_vectors = open_fine_store(index_dir, old.fine_store, rows=_tmp(index_dir, names[0]))
        scores = load_filter_scores(index_dir) if store.FILTER_SCORES not in names else \
            np.load(_tmp(index_dir, store.FILTER_SCORES), mmap_mode="r")
        kept = kept_token_ids(scores, old.filter_threshold, N + n_new)
        params["recall"] = measure_recall(index, all_vectors, kept, sample=int(params["recall"].get("sample", 200)))
    params["added"] = [*params.get("added", []), {"corpus": str(corpus.resolve()), "documents": stats.documents,
                                                   "tokens": n_new, "seconds": round(time.time() - t0, 2)}]
    replaced = {name: _tmp(index_dir, name) for name in names}
    for path in replaced.values():  # on disk before the commit point
        integrity.fsync_path(path)
    manifest = store.Manifest.create(index_dir, {
        **old.to_dict(), "faiss_params": params, "documents": D + stats.documents, "passages": P + stats.paragraphs,
        "tokens": N + n_new, "indexed_tokens": int(index.ntotal), "lexical": lexical,
    }, replaced=replaced)
    with atomic_path(index_dir / JOURNAL) as tmp:  # the commit point
        tmp.write_text(json.dumps({"files": names, "manifest": manifest.to_dict()}, ensure_ascii=False))
        integrity.fsync_path(tmp)
    integrity.fsync_path(index_dir)
    store.recover_locked(index_dir)  # roll forward: rename the files, write the manifest, drop the journal
    return manifest
