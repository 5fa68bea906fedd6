"""Append documents to a built index without retraining faiss.

    spanseek index add --index INDEX_DIR --corpus more.jsonl [--model default]

The new corpus is encoded into a staging directory (``add.staging``, the build's resumable shards and merge),
then every store is rewritten as ``<name>.add.tmp`` = old rows followed by the new ones (token ids, passage and
document numbers continue after the existing ones), the new tokens (those the filter keeps, when the index was
built with a threshold) are added to the trained faiss index and encoded into the codes store. When all those
files are complete a journal (``add.journal.json``) naming them and the new manifest is written; then each file
is renamed over its old version and the manifest is written last. A crash before the journal leaves the old
index intact; a crash after it is rolled forward by the next ``index add`` (or ``finish_pending_add``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from spanseek.core import store
from spanseek.core.encoding import pick_device
from spanseek.core.io import write_json_atomic
from spanseek.core.model import load_model, model_fingerprint, phrase_fingerprint, resolve_model
from spanseek.indexer.build import BuildError, BuildOptions, encode_corpus, load_filter_scores, merge_shards
from spanseek.indexer.compress import kept_token_ids, write_codes
from spanseek.indexer.faiss_index import add_vectors
from spanseek.indexer.ingest import corpus_problem

log = logging.getLogger(__name__)

STAGING = "add.staging"
JOURNAL = "add.journal.json"
TMP_SUFFIX = ".add.tmp"


def _tmp(index_dir: Path, name: str) -> Path:
    return index_dir / (name + TMP_SUFFIX)


def finish_pending_add(index_dir: str | Path) -> bool:
    """Roll an interrupted add forward (rename its complete files, write its manifest). True if there was one."""
    index_dir = Path(index_dir)
    journal = index_dir / JOURNAL
    if not journal.is_file():
        return False
    pending = json.loads(journal.read_text())
    for name in pending["files"]:
        tmp = _tmp(index_dir, name)
        if tmp.exists():
            os.replace(tmp, index_dir / name)
    write_json_atomic(index_dir / store.MANIFEST, pending["manifest"])
    journal.unlink()
    return True


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
    """Append the documents of ``corpus`` to the index in ``index_dir``; returns the new manifest."""
    import faiss

    index_dir, corpus = Path(index_dir), Path(corpus)
    opts = opts or BuildOptions(progress=False)
    if finish_pending_add(index_dir):
        log.info("finished an interrupted add in %s", index_dir)
    old = store.Manifest.load(index_dir)
    problem = corpus_problem(corpus)
    if problem:
        raise BuildError(problem)
    model_dir = resolve_model(model or old.model_ref)
    phrase_model = load_model(model_dir).to(pick_device(opts.device))
    old.check_model(phrase_model.config, model_fingerprint(model_dir), phrase_fingerprint(model_dir))
    t0 = time.time()

    staging = index_dir / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    n_shards, stats = encode_corpus(corpus, staging, phrase_model, opts)
    n_new = merge_shards(staging, n_shards, phrase_model.dim, corpus)
    N, P, D = old.tokens, old.passages, old.documents
    new_vectors = np.load(staging / store.VECTORS, mmap_mode="r")

    names = [store.VECTORS, store.TOKEN_OFFSETS, store.TOKEN_FLAGS]
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

    params = dict(old.faiss_params)
    params["added"] = [*params.get("added", []), {"corpus": str(corpus.resolve()), "documents": stats.documents,
                                                   "tokens": n_new, "seconds": round(time.time() - t0, 2)}]
    manifest = store.Manifest(**{
        **old.to_dict(), "faiss_params": params, "documents": D + stats.documents, "passages": P + stats.paragraphs,
        "tokens": N + n_new, "indexed_tokens": int(index.ntotal),
    })
    write_json_atomic(index_dir / JOURNAL, {"files": names, "manifest": manifest.to_dict()})
    finish_pending_add(index_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return manifest
