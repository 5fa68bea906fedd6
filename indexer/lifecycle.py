"""Replace, delete and compact documents of a built index, by document id.

    spanseek index upsert  --index INDEX_DIR --corpus docs.jsonl   # replace held ids, add the others
    spanseek index delete  --index INDEX_DIR --ids a,b [--ids-file ids.txt]
    spanseek index compact --index INDEX_DIR                       # drop deleted documents' rows for good

A deleted document stays in the stores until ``compact``: its number joins the deletion mask ``deleted.npy``
(``core.phrase_index``), which the searcher applies inside faiss and the lexical leg (``core.selection``), so it is never
returned (the field index, ``doc_fields.npz``, still holds it: the mask is applied on top of a filter). ``upsert`` is ``index add`` with replacement (``indexer.add``): the new versions are added and the old
ones masked in one commit; documents identical to the held ones are skipped, so repeating it changes nothing.
``delete`` of an id that is not held (or already deleted) changes nothing and reports it.

``compact`` rewrites every store without the deleted documents' rows: the stored token vectors, codes and filter
scores are copied (nothing is encoded again), the trained faiss index is emptied and given the live tokens under
their new ids, and the BM25 part and the field index are rebuilt over the live passages and documents; the mask is then empty. Its results equal
those of a fresh build of the live documents (with the same trained faiss index).

All three hold the index's writer lock and commit through the journal of ``indexer.add.commit``: a kill at any
point leaves the old index or the new one when it is next opened. ``delete`` and ``compact`` stopped by Ctrl-C or
SIGTERM (``indexer.interrupt``) remove their partial files before they end (status 130, one line saying the index is
unchanged and the same command runs it again), or, stopped past the commit point, finish the change and say so.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core import phrase_index
from spanseek.core.fine_store import FINE_KEPT
from spanseek.core.ids import held_in
from spanseek.core.io import naming, new_memmap, read_lines
from spanseek.core.lexical import analyzer_of
from spanseek.core.stopping import checkpoint
from spanseek.indexer.add import commit, live_rows, locked_index, remeasure_recall, staged, write_npy
from spanseek.indexer.build import BuildError, BuildOptions, write_fields
from spanseek.indexer.compress import kept_token_ids
from spanseek.indexer.faiss_index import ADD_CHUNK, add_vectors, write_faiss
from spanseek.indexer.interrupt import stopped_cleanly
from spanseek.indexer.lexical import write_lexical

log = logging.getLogger(__name__)


NO_IDS = "no document ids to delete (give --ids and/or --ids-file)"


def read_ids(ids: str | None = None, ids_file: str | Path | None = None) -> list[str]:
    """Document ids from a comma-separated list and/or a UTF-8 file of one id a line (blank lines skipped), in order,
    each once; a file that is not UTF-8 raises CorpusError naming it and the line."""
    out = [i.strip() for i in (ids or "").split(",") if i.strip()]
    if ids_file is not None:
        out += [line.strip() for _, line in read_lines(ids_file) if line.strip()]
    return list(dict.fromkeys(out))


def counts(index_dir: str | Path) -> dict[str, int]:
    """Live and deleted documents of an index."""
    docs, deleted, live = live_rows(Path(index_dir))
    return {"live_documents": len(live), "deleted_documents": len(deleted)}


def delete_documents(index_dir: str | Path, ids: Iterable[str], live_dir: str | Path | None = None) -> dict[str, Any]:
    """Delete the live documents with these ids; returns ``{"deleted", "not_found", "live_documents",
    "deleted_documents"}``. Ids the index does not hold (or has deleted) are listed, not an error."""
    index_dir = Path(index_dir)
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise ValueError(NO_IDS)
    with stopped_cleanly(f"the delete from {index_dir}"), locked_index(index_dir, "delete", live_dir) as old:
        _, deleted, live = live_rows(index_dir)
        # each id in the spelling a live document holds it in (core.ids.held_id: as given, NFC, NFD or another of the
        # same NFC), as the service finds it
        named = dict(zip(ids, map(held_in(live), ids), strict=True))
        rows = list(dict.fromkeys(live[named[i]] for i in ids if named[i] in live))
        if rows:
            write_npy(staged(index_dir, phrase_index.DELETED), np.union1d(deleted, rows).astype(np.int64))
            commit(index_dir, old, [phrase_index.DELETED], {})
    return {"deleted": len(rows), "not_found": [i for i in ids if named[i] not in live], **counts(index_dir)}


def _select_rows(src: Path, keep: np.ndarray, dest: Path) -> None:
    """Write the rows of the array in ``src`` where ``keep`` is True to ``dest``, through memory maps."""
    old = np.load(src, mmap_mode="r")
    out = new_memmap(dest, old.dtype, (int(keep.sum()), *old.shape[1:]))
    at = 0
    for a in range(0, len(old), ADD_CHUNK):
        checkpoint()
        rows = old[a : a + ADD_CHUNK][keep[a : a + ADD_CHUNK]]
        out[at : at + len(rows)] = rows
        at += len(rows)
    out.flush()
    del out


def _write_jsonl(dest: Path, records: Iterable[dict[str, Any]]) -> None:
    with naming(dest), open(dest, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def disk_bytes(index_dir: Path) -> int:
    """The bytes of every file in ``index_dir`` (and its folders): what the index takes on disk."""
    return sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file())


def export_documents(index_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the index's live documents to ``out`` as a corpus (JSONL, gzipped for a ``.gz`` name; atomically): each
    one's id, title and metadata, its passages as its paragraphs (each with its own metadata), in index order. An
    ``index build`` of it holds the documents the index serves: the way to rebuild an index ``compact`` refuses (a
    quantised store, lists on disk), or with another model or factory. Holds the writer lock, so no change is half
    read; returns the counts."""
    from spanseek.core.io import Document, write_corpus

    index_dir = Path(index_dir)
    if index_dir.resolve() in Path(out).resolve().parents:  # it would replace (or sit among) the index's own files
        raise BuildError(f"--out {out} lies inside the index {index_dir}; write the export somewhere else")
    with locked_index(index_dir, "export"):
        records, _, live = live_rows(index_dir)
        paragraphs: dict[int, list[tuple[int, str, dict[str, Any]]]] = {}
        for p in phrase_index.read_jsonl(index_dir / phrase_index.PASSAGES):
            paragraphs.setdefault(p["doc"], []).append((p["para"], p["text"], p.get("meta", {})))
        docs = []
        for row in sorted(live.values()):
            parts = sorted(paragraphs.get(row, []), key=lambda part: part[0])
            metas = tuple(meta for _, _, meta in parts)
            docs.append(Document(records[row]["id"], records[row]["title"], tuple(text for _, text, _ in parts),
                                 records[row].get("meta", {}), passage_meta=metas if any(metas) else ()))
        written = write_corpus(out, docs)
    return {"documents": written, "passages": sum(len(d.paragraphs) for d in docs), "out": str(out)}


def compact_index(index_dir: str | Path, opts: BuildOptions | None = None,
                  live_dir: str | Path | None = None) -> dict[str, Any]:
    """Rewrite the index without its deleted documents (see the module docstring); returns what was removed and
    the disk size before and after. An index with nothing deleted is left as it is."""
    import faiss

    index_dir = Path(index_dir)
    opts = opts or BuildOptions(progress=False)
    with stopped_cleanly(f"the compact of {index_dir}"), locked_index(index_dir, "compact", live_dir) as old:
        docs, deleted, live = live_rows(index_dir)
        before = disk_bytes(index_dir)
        if not len(deleted):
            return {"compacted": False, "disk_bytes": before, **counts(index_dir)}
        if not live:
            raise BuildError(f"{index_dir}: every document is deleted; build a new index instead of compacting")
        if old.fine_store != "fp16" or old.faiss_params.get("on_disk") or (index_dir / FINE_KEPT).is_file():
            raise BuildError(f"{index_dir}: compact re-adds the live tokens from an fp16 fine store to in-memory "
                             "lists; this index has a quantised or filtered store or lists on disk: build it again from the live "
                             f"documents instead (`spanseek index export --index {index_dir} --out live.jsonl`, then "
                             "`index build`)")
        t0 = time.time()
        live_doc = np.ones(len(docs), dtype=bool)
        live_doc[deleted] = False
        passages = phrase_index.read_jsonl(index_dir / phrase_index.PASSAGES)
        passage_doc = np.asarray([p["doc"] for p in passages], dtype=np.int64)
        live_passage = live_doc[passage_doc]
        token_passage = np.load(index_dir / phrase_index.TOKEN_PASSAGE)
        live_token = live_passage[token_passage]
        n_live = int(live_token.sum())

        names = [phrase_index.VECTORS, phrase_index.TOKEN_OFFSETS, phrase_index.TOKEN_FLAGS, phrase_index.FILTER_SCORES, phrase_index.CODES]
        names = [n for n in names if (index_dir / n).is_file()]
        for name in names:  # stored rows are copied: nothing is encoded again
            _select_rows(index_dir / name, live_token, staged(index_dir, name))
        new_passage = np.cumsum(live_passage) - 1
        write_npy(staged(index_dir, phrase_index.TOKEN_PASSAGE), new_passage[token_passage[live_token]].astype(np.int32))
        lengths = np.diff(np.load(index_dir / phrase_index.PASSAGE_TOKENS))[live_passage]
        write_npy(staged(index_dir, phrase_index.PASSAGE_TOKENS), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        new_doc = np.cumsum(live_doc) - 1
        _write_jsonl(staged(index_dir, phrase_index.PASSAGES),
                     ({**p, "doc": int(new_doc[p["doc"]])} for p, ok in zip(passages, live_passage, strict=True) if ok))
        _write_jsonl(staged(index_dir, phrase_index.DOCS), (d for d, ok in zip(docs, live_doc, strict=True) if ok))
        write_npy(staged(index_dir, phrase_index.DELETED), np.zeros(0, np.int64))
        write_fields(staged(index_dir, phrase_index.DOCS), staged(index_dir, phrase_index.PASSAGES),
                     staged(index_dir, phrase_index.FIELDS))
        names += [phrase_index.TOKEN_PASSAGE, phrase_index.PASSAGE_TOKENS, phrase_index.PASSAGES, phrase_index.DOCS, phrase_index.DELETED, phrase_index.FIELDS]

        checkpoint()  # (core.stopping: a job asked to stop ends here, or between two of the longer steps below)
        index = faiss.read_index(str(index_dir / phrase_index.FAISS_INDEX))
        index.reset()  # keeps what training learned (coarse quantizer, codebooks, OPQ rotation)
        filter_path = staged(index_dir, phrase_index.FILTER_SCORES)
        scores = np.load(filter_path, mmap_mode="r") if filter_path.is_file() else None
        vectors = np.load(staged(index_dir, phrase_index.VECTORS), mmap_mode="r")
        add_vectors(index, vectors, kept_token_ids(scores, old.filter_threshold, n_live), progress=opts.progress,
                    gpu=False)
        write_faiss(index, staged(index_dir, phrase_index.FAISS_INDEX))
        names.append(phrase_index.FAISS_INDEX)

        checkpoint()
        lexical = old.lexical
        if lexical is not None:
            lexical = write_lexical(index_dir, staged(index_dir, phrase_index.PASSAGES), staged(index_dir, phrase_index.DOCS),
                                    staged(index_dir, phrase_index.LEXICAL), fusion=lexical.get("fusion"),
                                analyzer=analyzer_of(lexical))
            names.append(phrase_index.LEXICAL)

        params = dict(old.faiss_params)
        checkpoint()
        remeasure_recall(index_dir, old, index, params, names, n_live, opts)
        removed = {"documents": len(deleted), "passages": int((~live_passage).sum()),
                   "tokens": int(len(live_token) - n_live)}
        params["compacted"] = [*params.get("compacted", []), {**removed, "seconds": round(time.time() - t0, 2)}]
        commit(index_dir, old, names, {
            "faiss_params": params, "documents": len(live), "passages": int(live_passage.sum()), "tokens": n_live,
            "indexed_tokens": int(index.ntotal), "lexical": lexical,
        })
    return {"compacted": True, "removed": removed, "disk_bytes_before": before, "disk_bytes": disk_bytes(index_dir),
            **counts(index_dir)}
