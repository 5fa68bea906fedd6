"""Append documents to a built index without retraining faiss.

    spanseek index add --index INDEX_DIR --corpus more.jsonl [--model default]

Document ids are the key: an add whose corpus holds an id the index already has (or one id twice) is refused
before anything changes, so running the same add again changes nothing. ``replace=True`` (``spanseek index
upsert``, ``indexer.lifecycle``) instead replaces the documents whose id the index holds: the old ones join the
deletion mask (``deleted.npy``) in the same commit that adds the new ones; a document identical to the one held
(title, metadata, passages) is left alone, so an upsert repeated changes nothing.

The new corpus is encoded into a staging directory (``add.staging``, the build's resumable shards and merge),
then every store is rewritten as ``<name>.add.tmp`` = old rows followed by the new ones (token ids, passage and
document numbers continue after the existing ones), the new tokens (those the filter keeps, when the index was
built with a threshold) are added to the trained faiss index and encoded into the codes store. When all those
files are complete and flushed to disk, a journal (``add.journal.json``) naming them and the new manifest (with
their checksums) is written: that is the commit point. Then each file is renamed over its old version, the
manifest is written and the journal removed. The field index of the documents (``doc_fields.npz``) is rebuilt
over the old and new documents (an index built before it gains one). The lexical (BM25) part, when the index has one, is rebuilt
over the old and new passages as the directory ``lexical.add.tmp`` before the journal. A kill -9 anywhere leaves an index that opens: before the journal,
opening it drops the partial files (roll back); after it, opening it finishes the renames (roll forward;
``core.phrase_index.recover``). An add holds the index's writer lock, so two adds cannot interleave. ``commit`` is that
commit protocol for any writer (upsert, delete and compact use it too).

An add killed or stopped with Ctrl-C or SIGTERM resumes: the staging keeps its finished shards, each keyed by its
passages and the model (``indexer.shards.shard_key``), and the same add run again re-encodes only the others
(``keep_shards``); a stop (not a kill -9) also removes the rest of the staging and ends with one line saying what the
rerun re-uses (``indexer.interrupt``), as a build's. An add that is refused (a held id, a bad corpus) removes the staging, and so does any change
that commits (the add itself, rolled forward or not, or a later delete or compact).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core import integrity, phrase_index
from spanseek.core.encoding import pick_device
from spanseek.core.fieldindex import FieldIndex
from spanseek.core.fine_store import FINE_CODES, FINE_KEPT, open_fine_store
from spanseek.core.ids import held_in, new_id
from spanseek.core.io import (
    CorpusError,
    Document,
    ReadStats,
    atomic_path,
    check_corpus,
    naming,
    new_memmap,
    read_corpus,
    unique_ids,
    write_corpus,
)
from spanseek.core.lexical import analyzer_of
from spanseek.core.loading import index_model
from spanseek.core.model import load_model, model_fingerprint, phrase_fingerprint
from spanseek.core.stopping import checkpoint
from spanseek.indexer.build import (
    BuildError,
    BuildOptions,
    check_ray,
    encode_corpus,
    load_filter_scores,
    merge_shards,
    write_fields,
)
from spanseek.indexer.compress import kept_token_ids, write_codes
from spanseek.indexer.faiss_index import add_vectors, write_faiss
from spanseek.indexer.fine_store_build import encode_fine_rows
from spanseek.indexer.ingest import corpus_problem
from spanseek.indexer.interrupt import Committed, stopped_cleanly
from spanseek.indexer.lexical import write_lexical
from spanseek.indexer.live_state import writes_made_over
from spanseek.indexer.out_dir import lock_refusal, refuse_merged_base
from spanseek.indexer.recall import measure_recall

log = logging.getLogger(__name__)

STAGING = integrity.STAGING
SHARDS = integrity.SHARDS
JOURNAL = integrity.JOURNAL
TMP_SUFFIX = integrity.ADD_SUFFIX


def staged(index_dir: Path, name: str) -> Path:
    """Where a writer puts the new version of the index file ``name`` before its commit."""
    return index_dir / (name + TMP_SUFFIX)


def _concat_npy(old_path: Path, new: np.ndarray, dest: Path) -> None:
    """Write old rows followed by ``new`` rows to ``dest`` through a memory map (bounded memory)."""
    old = np.load(old_path, mmap_mode="r")
    mm = new_memmap(dest, old.dtype, (len(old) + len(new), *old.shape[1:]))
    for a in range(0, len(old), 1 << 20):
        checkpoint()
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


@dataclass(frozen=True)
class Changes:
    """What an add or upsert did: documents added (new ids), replaced (ids the index held) and left unchanged."""

    added: int = 0
    replaced: int = 0
    unchanged: int = 0


def write_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` to exactly ``path`` (np.save appends ``.npy`` to a name without it, such as ``*.add.tmp``)."""
    with naming(path), open(path, "wb") as f:
        np.save(f, array)


def append_fields(index_dir: Path, old_docs: list[dict[str, Any]], staging: Path, dest: Path) -> None:
    """Write to exactly ``dest`` the field index of the index's documents (``old_docs``, its document store's records)
    and passages followed by the new ones encoded in ``staging``: its ``doc_fields.npz`` with the new records appended
    (``FieldIndex.appended``: the same file as one written whole, its passage store not read), or, where that file is
    missing, unreadable or written before it held the passages' fields, the field index of the stores written whole
    (``write_fields``, which reads the new stores staged beside the index's)."""
    try:
        old = FieldIndex.load(index_dir / phrase_index.FIELDS, old_docs, passages=None)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        write_fields(staged(index_dir, phrase_index.DOCS), staged(index_dir, phrase_index.PASSAGES), dest)
        return
    new_docs = phrase_index.read_jsonl(staging / phrase_index.DOCS)
    old.appended(new_docs, phrase_index.iter_jsonl(staging / phrase_index.PASSAGES)).save(dest)


def live_rows(index_dir: Path) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, int]]:
    """The index's document records, its deleted document numbers, and {id: number} of the live documents."""
    docs = phrase_index.read_jsonl(index_dir / phrase_index.DOCS)
    deleted = np.load(index_dir / phrase_index.DELETED) if (index_dir / phrase_index.DELETED).is_file() else np.zeros(0, np.int64)
    dead = set(deleted.tolist())
    return docs, deleted, {d["id"]: i for i, d in enumerate(docs) if i not in dead}


@contextlib.contextmanager
def locked_index(index_dir: Path, command: str,
                 live_dir: str | Path | None = None) -> Iterator[phrase_index.Manifest]:
    """Hold the index's writer lock, finish a change that was interrupted, and yield the manifest (file sizes
    checked; each writer re-reads what it rewrites). Raises BuildError naming ``command`` when another process
    holds the lock, or when a change (any ``command`` but ``export``) would orphan the writes of the live directory
    of the index (``live_dir``, else the index path + ``.live``: ``indexer.live_state.writes_made_over``),
    IndexFormatError for a missing or unfinished index."""
    phrase_index.Manifest.load(index_dir)  # a clear error for a missing or unfinished index
    if command != "export":
        refuse_merged_base(index_dir, command)
    with integrity.writer_lock(index_dir) as locked:
        if not locked:
            raise lock_refusal(index_dir, command)
        if command != "export" and (live := writes_made_over(index_dir, live_dir)) is not None:
            raise BuildError(f"{index_dir}: the live directory {live} holds the writes a server with writes made over "
                             f"this index; changed offline, its next start would refuse them as made over another "
                             f"index: start it (`spanseek serve --writes`) and send it the change as a write instead, "
                             f"or move {live} away to change the index without those writes; `spanseek index "
                             f"{command}` changed nothing")
        if phrase_index.recover_locked(index_dir) == "rolled forward":
            log.info("finished an interrupted change of %s", index_dir)
        old = phrase_index.check_index(index_dir, contents=False, recovered=True)
        try:
            yield old
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: past the commit point the change is finished, not resumed
            committed = _committed(index_dir, old)
            try:
                phrase_index.recover_locked(index_dir, committing=committed)  # rolls back, or forward once committed
                finished = True
            except OSError:
                finished = False  # (the next open finishes it)
            if committed:
                raise Committed(str(e), finished) from None
            raise
        except BaseException:  # a change that failed (a full disk) leaves no partial files filling the disk
            with contextlib.suppress(OSError):
                phrase_index.recover_locked(index_dir)  # (rolls forward instead once the journal is written)
            raise


def _committed(index_dir: Path, old: phrase_index.Manifest) -> bool:
    """Whether a change of ``index_dir`` begun at manifest ``old`` has passed its commit point: its journal is
    written, or it has been renamed into place and its manifest written."""
    if (index_dir / JOURNAL).is_file():
        return True
    try:
        return phrase_index.Manifest.load(index_dir).to_dict() != old.to_dict()
    except (OSError, phrase_index.IndexFormatError):
        return False


def commit(index_dir: Path, old: phrase_index.Manifest, names: Iterable[str], fields: dict[str, Any]) -> phrase_index.Manifest:
    """Make the ``<name>.add.tmp`` version of each of ``names`` the index's, with ``old``'s manifest updated by
    ``fields``: the files are flushed, the journal naming them and the new manifest is written (the commit point),
    then they are renamed into place (``core.phrase_index.recover_locked``, which also finishes a commit killed midway).
    The caller holds the writer lock."""
    names = list(names)
    replaced = {name: staged(index_dir, name) for name in names}
    for path in replaced.values():  # on disk before the commit point
        integrity.fsync_path(path)
    manifest = phrase_index.Manifest.create(index_dir, {**old.to_dict(), **fields}, replaced=replaced, kept=old.files)
    with atomic_path(index_dir / JOURNAL) as tmp:  # the commit point
        tmp.write_text(json.dumps({"files": names, "manifest": manifest.to_dict()}, ensure_ascii=False))
        integrity.fsync_path(tmp)
    integrity.fsync_path(index_dir)
    phrase_index.recover_locked(index_dir, committing=True)  # roll forward: rename the files, write the manifest, drop the journal
    return manifest


def remeasure_recall(index_dir: Path, old: phrase_index.Manifest, index: Any, params: dict[str, Any], names: list[str],
                     n_tokens: int, opts: BuildOptions) -> None:
    """Measure the build's recall again over the index's tokens as committed (``names``' new versions), for
    ``index verify`` to repeat; nothing when the build did not measure it."""
    if "recall" not in params or not opts.recall_sample or params["recall"].get("exact"):
        return  # (an exact index records no measurement: indexer.recall)

    def current(name: str) -> Path:
        return staged(index_dir, name) if name in names else index_dir / name

    fine = FINE_CODES if old.fine_store != "fp16" else phrase_index.VECTORS
    vectors = open_fine_store(index_dir, old.fine_store, rows=current(fine))
    filter_path = current(phrase_index.FILTER_SCORES)
    scores = np.load(filter_path, mmap_mode="r") if filter_path.is_file() else None
    kept = kept_token_ids(scores, old.filter_threshold, n_tokens)
    params["recall"] = measure_recall(index, vectors, kept, sample=int(params["recall"].get("sample", 200)))


def add_documents(
    index_dir: str | Path, corpus: str | Path, model: str | Path | None = None, opts: BuildOptions | None = None,
    replace: bool = False,
) -> phrase_index.Manifest:
    """Append the documents of ``corpus`` to the index in ``index_dir``; returns the new manifest.

    Raises CorpusError (file and line) when a document id is already in the index (unless ``replace``) or repeated
    in the corpus, BuildError when another writer holds the index; the index is then unchanged. With ``replace``
    the documents whose id the index holds replace the old ones (``upsert_documents`` also reports the changes).
    """
    return upsert_documents(index_dir, corpus, model, opts, replace)[0]


def upsert_documents(
    index_dir: str | Path, corpus: str | Path, model: str | Path | None = None, opts: BuildOptions | None = None,
    replace: bool = True, live_dir: str | Path | None = None,
) -> tuple[phrase_index.Manifest, Changes]:
    """``add_documents`` returning what changed as well; by default it replaces documents whose id is held.
    ``live_dir``: the live directory of a server with writes over the index (``locked_index``)."""
    index_dir, corpus = Path(index_dir), Path(corpus)
    opts = opts or BuildOptions(progress=False)
    problem = corpus_problem(corpus)  # a directory, a Markdown or SQuAD file...: say which command converts it
    if problem:
        raise BuildError(problem)
    check_ray(opts)
    command = "upsert" if replace else "add"
    staging = index_dir / STAGING
    with stopped_cleanly(f"the {command} into {index_dir}", staging), locked_index(index_dir, command, live_dir) as old:
        try:
            done = _add_locked(index_dir, old, corpus, model, opts, staging, replace)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished shards stay for the rerun, as a kill -9 leaves them
            keep_shards(staging)
            raise
        except BaseException:  # refused (a held id, a bad corpus...): nothing is left behind
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(staging, ignore_errors=True)
        return done


def keep_shards(staging: Path) -> None:
    """Reduce an interrupted add's staging to its finished encoded shards (``staging/shards/NNNNNN``, each keyed by
    its passages and the model, so a rerun re-uses exactly those it encodes again); everything else, which the rerun
    writes afresh (stores, merged arrays, a half-written shard), is removed. No shard: no staging."""
    shards = staging / SHARDS
    if not staging.is_dir():
        return
    for path in staging.iterdir():
        if path.is_dir() and path != shards:
            shutil.rmtree(path)
        elif not path.is_dir():
            path.unlink()
    for path in shards.glob("*.tmp"):
        shutil.rmtree(path, ignore_errors=True)
    if not any(shards.glob("*")):
        shutil.rmtree(staging, ignore_errors=True)


def _same_document(doc: Document, record: dict[str, Any], passages: list[tuple[str, dict[str, Any]]]) -> bool:
    """Whether a corpus document is the one an index holds (its ``docs.jsonl`` record and its passages' texts and
    metadata)."""
    return (doc.title == record["title"] and (doc.meta or {}) == record.get("meta", {})
            and [(text, doc.paragraph_meta(i)) for i, text in enumerate(doc.paragraphs)] == passages)


def _all_held(corpus: Path, index_dir: Path, live: dict[str, int]) -> CorpusError | None:
    """The refusal of an add whose every document the index already holds (the add ran before: one stopped after
    its commit point is complete), which says so rather than naming the first held id; None otherwise."""
    try:
        ids = [doc.id for doc in read_corpus(corpus)]
    except CorpusError:
        return None
    held = held_in(live)
    if not ids or not all(held(i) in live for i in ids):
        return None
    return CorpusError(f"every document of {corpus} ({len(ids)}) is already in the index {index_dir}, as after an add "
                       "of it that finished: there is nothing to add and nothing was changed (`index upsert` "
                       "replaces held documents)")


def _plan_upsert(index_dir: Path, corpus: Path, live: dict[str, int]) -> tuple[list[Document], list[int], int]:
    """The corpus documents to add (new or changed), the document numbers they replace, and how many are unchanged.

    A document held under another Unicode spelling of its id (``core.ids.held_id``) is the one replaced, and its
    new version keeps the held spelling, as ``PUT /documents`` does. Repeated ids in the corpus raise CorpusError
    naming the file and line, before anything changes."""
    passages: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for p in phrase_index.read_jsonl(index_dir / phrase_index.PASSAGES):
        passages.setdefault(p["doc"], []).append((p["text"], p.get("meta", {})))
    records = phrase_index.read_jsonl(index_dir / phrase_index.DOCS)
    new, replaced, unchanged = [], [], 0
    held_spelling = held_in(live)
    for doc in unique_ids(read_corpus(corpus), corpus):
        held = held_spelling(doc.id)
        row = live.get(held)
        if row is not None and held != doc.id:
            doc = dataclasses.replace(doc, id=held)
        if row is not None and _same_document(doc, records[row], passages.get(row, [])):
            unchanged += 1
            continue
        new.append(doc)
        if row is not None:
            replaced.append(row)
    return new, sorted(replaced), unchanged


def _add_locked(index_dir: Path, old: phrase_index.Manifest, corpus: Path, model: str | Path | None, opts: BuildOptions,
                staging: Path, replace: bool) -> tuple[phrase_index.Manifest, Changes]:
    """``upsert_documents`` under the writer lock."""
    import faiss

    if old.faiss_params.get("on_disk"):
        raise BuildError(f"{index_dir} keeps its inverted lists on disk ({phrase_index.IVFDATA}), which `index add` would "
                         "change in place; build the index again with the new documents")
    if (index_dir / FINE_KEPT).is_file():
        raise BuildError(f"{index_dir} has a filtered fine store ({FINE_KEPT}: rows of the kept tokens only), which "
                         "`index add` does not extend; build the index again with the new documents")
    old_docs, old_deleted, live = live_rows(index_dir)
    source, unchanged = corpus, 0
    replaced: list[int] = []
    checked: ReadStats | None = None  # what a read of the corpus counted: sizes the progress bar without another
    if replace:
        docs, replaced, unchanged = _plan_upsert(index_dir, corpus, live)
        if not docs:  # every document is already there as given: nothing to do
            return old, Changes(unchanged=unchanged)
        keep_shards(staging)  # an interrupted add's encoded shards are re-used
        staging.mkdir(exist_ok=True)
        source = staging / "upsert.jsonl"
        write_corpus(source, docs)
        checked = ReadStats(documents=len(docs), paragraphs=sum(len(d.paragraphs) for d in docs))  # (all with text)
    held_where = (f"the index {index_dir} (`index add` refuses ids it holds; `index upsert` replaces them; nothing "
                  "was changed)")
    if not replace:  # a held or repeated id is refused from the ids alone, before the model loads
        try:
            checked = check_corpus(corpus, live, held_where)
        except CorpusError as e:
            raise _all_held(corpus, index_dir, live) or e from None
    model_dir = index_model(old, model, index_dir)  # None: the model recorded in the manifest
    phrase_model = load_model(model_dir).to(pick_device(opts.device))
    fingerprint = model_fingerprint(model_dir)
    old.check_model(phrase_model.config, fingerprint, phrase_fingerprint(model_dir))
    checkpoint()  # (core.stopping: a job asked to stop ends here, or between two of its longer steps below)
    t0 = time.time()

    if not replace:
        keep_shards(staging)
        staging.mkdir(exist_ok=True)
    replacing = set(replaced)
    # ids the corpus may not use: not those it replaces, in any spelling (an index built before spellings were one id
    # may hold "café" composed and decomposed: replacing one, the other is no repeat of it)
    replaced_ids = {new_id(i) for i, row in live.items() if row in replacing}
    held = (i for i, row in live.items() if row not in replacing and new_id(i) not in replaced_ids)
    n_shards, stats = encode_corpus(source, staging, phrase_model, opts, fingerprint, held, held_where, checked=checked)
    n_new = merge_shards(staging, n_shards, phrase_model.dim)
    N, P, D = old.tokens, old.passages, old.documents
    new_vectors = np.load(staging / phrase_index.VECTORS, mmap_mode="r")

    names = [phrase_index.VECTORS, phrase_index.TOKEN_OFFSETS, phrase_index.TOKEN_FLAGS]
    if old.fine_store != "fp16":  # a quantised fine store: the new rows encoded with the index's quantiser
        names[0] = FINE_CODES
        encode_fine_rows(index_dir, new_vectors, staging / FINE_CODES)
    for name in names:
        _concat_npy(index_dir / name, np.load(staging / name, mmap_mode="r"), staged(index_dir, name))
    _concat_npy(index_dir / phrase_index.TOKEN_PASSAGE, np.load(staging / phrase_index.TOKEN_PASSAGE) + P,
                staged(index_dir, phrase_index.TOKEN_PASSAGE))
    _concat_npy(index_dir / phrase_index.PASSAGE_TOKENS, np.load(staging / phrase_index.PASSAGE_TOKENS)[1:] + N,
                staged(index_dir, phrase_index.PASSAGE_TOKENS))
    _concat_jsonl(index_dir / phrase_index.PASSAGES, staging / phrase_index.PASSAGES, staged(index_dir, phrase_index.PASSAGES), D)
    _concat_jsonl(index_dir / phrase_index.DOCS, staging / phrase_index.DOCS, staged(index_dir, phrase_index.DOCS), None)
    append_fields(index_dir, old_docs, staging, staged(index_dir, phrase_index.FIELDS))  # also for an index without one
    names += [phrase_index.TOKEN_PASSAGE, phrase_index.PASSAGE_TOKENS, phrase_index.PASSAGES, phrase_index.DOCS, phrase_index.FIELDS]

    new_filter = load_filter_scores(staging)
    if (index_dir / phrase_index.FILTER_SCORES).is_file() and new_filter is not None:
        _concat_npy(index_dir / phrase_index.FILTER_SCORES, new_filter, staged(index_dir, phrase_index.FILTER_SCORES))
        names.append(phrase_index.FILTER_SCORES)

    index = faiss.read_index(str(index_dir / phrase_index.FAISS_INDEX))
    ids = kept_token_ids(new_filter, old.filter_threshold, n_new, offset=N)
    add_vectors(index, new_vectors, ids, progress=opts.progress, gpu=False, id_offset=N)
    write_faiss(index, staged(index_dir, phrase_index.FAISS_INDEX))
    names.append(phrase_index.FAISS_INDEX)
    if (index_dir / phrase_index.CODES).is_file():
        old_codes = np.load(index_dir / phrase_index.CODES, mmap_mode="r")
        write_codes(index, new_vectors, staged(index_dir, phrase_index.CODES), old_codes=old_codes)
        names.append(phrase_index.CODES)

    checkpoint()
    lexical = old.lexical
    if lexical is not None:  # an index without one stays without (`spanseek index add-lexical` adds it)
        lexical = write_lexical(index_dir, staged(index_dir, phrase_index.PASSAGES), staged(index_dir, phrase_index.DOCS),
                                staged(index_dir, phrase_index.LEXICAL), fusion=lexical.get("fusion"),
                                analyzer=analyzer_of(lexical))
        names.append(phrase_index.LEXICAL)

    if replaced:  # the old versions are deleted in the same commit
        write_npy(staged(index_dir, phrase_index.DELETED), np.union1d(old_deleted, replaced).astype(np.int64))
        names.append(phrase_index.DELETED)

    params = dict(old.faiss_params)
    checkpoint()
    remeasure_recall(index_dir, old, index, params, names, N + n_new, opts)
    record = {"corpus": str(corpus.resolve()), "documents": stats.documents, "tokens": n_new,
              "seconds": round(time.time() - t0, 2), **({"replaced": len(replaced)} if replace else {})}
    params["added"] = [*params.get("added", []), record]
    manifest = commit(index_dir, old, names, {
        "faiss_params": params, "documents": D + stats.documents, "passages": P + stats.paragraphs,
        "tokens": N + n_new, "indexed_tokens": int(index.ntotal), "lexical": lexical,
    })
    return manifest, Changes(added=stats.documents - len(replaced), replaced=len(replaced), unchanged=unchanged)
