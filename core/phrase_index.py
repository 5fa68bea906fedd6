"""The on-disk phrase index: its manifest, file names, and the reader the searcher uses.

An index directory (written by ``spanseek index build``) holds:

- ``manifest.json``      format version, encoder config + weights fingerprint, faiss factory and parameters,
                         counts, filter threshold, build time. Written last: no manifest = no finished index.
- ``vectors.npy``        (N, d) float16 token vectors in passage order: the fine store (memory-mapped), or with
                         ``manifest.fine_store`` sq8 / sq4 ``fine_codes.npy`` + ``fine_quantizer.faiss`` instead
                         (``core.fine_store``).
- ``token_passage.npy``  (N,) int32 passage of each token.
- ``token_offsets.npy``  (N, 2) int32 character [start, end) of each token in its passage.
- ``token_flags.npy``    (N,) uint8 FLAG_START / FLAG_END (core.text).
- ``passage_tokens.npy`` (P + 1,) int64: tokens of passage p are ids [passage_tokens[p], passage_tokens[p+1]).
- ``passages.jsonl``     one ``{"doc": int, "para": int, "text": str}`` per passage, plus ``"meta": {...}`` when the
                         corpus gives the passage metadata of its own (a page, a heading path).
- ``docs.jsonl``         one ``{"id": str, "title": str}`` per document, plus ``"meta": {...}`` when the corpus
                         gave the document metadata (returned with its hits).
- ``index.faiss``        a faiss index over the (kept) token vectors, faiss ids = token ids.
- ``index.ivfdata``      optional (``--on-disk``): the IVF inverted lists, memory-mapped (faiss OnDiskInvertedLists);
                         the token maps are then memory-mapped too.
- ``codes.npy``          (N, code_size) uint8, optional: every token's faiss code (``sa_encode``) in id order,
                         kept for compressed indexes whose build asked for the ``codes`` neighbour source;
                         decoded with the index's ``sa_decode``.
- ``token_filter.npy``   (N, 2) float16, optional: start/end filter probabilities (models with a filter head).
- ``fine_kept.npy``      optional (``--filter-threshold``): which tokens have a fine-store row, a bit per token;
                         the store then holds the kept tokens' rows only (``core.fine_store.RowMap``).
- ``deleted.npy``        (k,) int64, optional: the sorted document numbers deleted (``spanseek index delete`` or
                         replaced by ``index upsert``); their passages are never returned; ``index compact`` drops them.
- ``doc_fields.npz``     the field index of the documents' ids, titles and metadata and of the passages' own
                         metadata, which filters are evaluated over (``core.fieldindex``); absent in indexes built
                         before it (built in memory at first use; the passages' part, absent in those built before
                         it, likewise at the first filter on passage metadata).
- ``lexical/``           the BM25 index of the passages (``core.lexical``), recorded in ``manifest.lexical`` with
                         the fusion defaults; absent in indexes built before it (``spanseek index add-lexical``).

The manifest records the size and checksum of every other file (``core.integrity``) and a checksum of its own
fields; opening an index compares sizes and, by default, checksums, and refuses a damaged index naming the file.
An ``index add`` interrupted after its journal is rolled forward, and one interrupted before it is rolled back, when
the index is next opened (``recover``).

Neighbour vectors (span completion and re-scoring) come from one of two sources, chosen per PhraseIndex
(``vector_source``; the build records its default in ``manifest.faiss_params["vector_source"]``; a request may
name another, ``core.params.SearchParams``):
``fine`` reads the fine store through a memory map (decoding the gathered rows of an sq8 / sq4 store); ``codes`` decodes the compressed codes of the ids.

Token ids are contiguous per passage, so the L neighbours of a token are the next (or previous) L ids,
clipped to its passage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from spanseek.core import integrity
from spanseek.core.backbones import backbone_fingerprint
from spanseek.core.config import EncoderConfig
from spanseek.core.faiss_spec import FactorySpec, faiss_reason, ivf_of, parse_factory, unmapped, unwrapped
from spanseek.core.fieldindex import FIELDS as FIELDS
from spanseek.core.fieldindex import FieldIndex, FilterTree
from spanseek.core.fine_store import DEFAULT_STORE, STORES, FineStore, open_fine_store, store_files
from spanseek.core.fine_store import VECTORS as VECTORS
from spanseek.core.fine_store import as_float32 as as_float32
from spanseek.core.io import naming_flag, write_json_atomic
from spanseek.core.lexical import DEFAULT_FUSION, LEXICAL_DIR, LexicalIndex
from spanseek.core.params import VECTOR_SOURCES

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKEN_PASSAGE = "token_passage.npy"
TOKEN_OFFSETS = "token_offsets.npy"
TOKEN_FLAGS = "token_flags.npy"
PASSAGE_TOKENS = "passage_tokens.npy"
PASSAGES = "passages.jsonl"
DOCS = "docs.jsonl"
FAISS_INDEX = "index.faiss"
CODES = "codes.npy"
IVFDATA = "index.ivfdata"  # the inverted lists of an on-disk IVF index (build --on-disk), next to index.faiss
FILTER_SCORES = "token_filter.npy"
LEXICAL = LEXICAL_DIR
DELETED = "deleted.npy"


CHECKSUM_FIELD = "checksum"


class IndexFormatError(RuntimeError):
    """An index directory is missing, partial, damaged, or does not match the model; the message names the file."""


def manifest_checksum(d: dict[str, Any]) -> str:
    """Checksum of a manifest's fields (all but the checksum itself), independent of key order and whitespace."""
    fields = json.loads(json.dumps({k: v for k, v in d.items() if k != CHECKSUM_FIELD}))  # as read back from disk
    return integrity.text_digest(json.dumps(fields, sort_keys=True))


@dataclass(frozen=True)
class Manifest:
    """What an index holds and how it was built; ``files`` records every other file's size and checksum."""

    format_version: int
    encoder: dict[str, Any]
    model_fingerprint: str
    model_ref: str
    factory: str
    faiss_params: dict[str, Any]
    documents: int
    passages: int
    tokens: int
    indexed_tokens: int
    filter_threshold: float | None
    build_seconds: float
    created: str
    phrase_fingerprint: str | None = None  # core.model.phrase_fingerprint (absent in indexes built before it)
    # core.backbones.backbone_fingerprint: the backbone's files (a LoRA model's weights hold its adapters only); absent
    # in indexes built before it, and where they were not on disk to identify
    backbone_fingerprint: str | None = None
    # the BM25 part (core.lexical.LexicalIndex.describe) plus "fusion": default mode, fusion and weights; None in
    # indexes built before it
    lexical: dict[str, Any] | None = None
    fine_store: str = DEFAULT_STORE  # core.fine_store kind: fp16 | sq8 | sq4 (fp16 in indexes built before it)
    files: dict[str, dict[str, Any]] | None = None  # relative path -> {"bytes", "xxh3_128"} (absent before checksums)

    @classmethod
    def create(cls, index_dir: Path, fields: dict[str, Any], replaced: dict[str, Path] | None = None,
               kept: dict[str, Any] | None = None) -> Manifest:
        """The manifest of the files now in ``index_dir`` (``replaced``, ``kept``: see ``integrity.describe_files``).

        ``fields`` gives the rest (a fresh build's values, or an old manifest's ``to_dict()`` with changes); the
        format version, creation time and file records are set here, for every writer alike.
        """
        fields = {**fields, "format_version": FORMAT_VERSION,
                  "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                  "files": integrity.describe_files(index_dir, exclude=(MANIFEST,), replaced=replaced, kept=kept)}
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    @classmethod
    def from_dict(cls, d: Any, where: str | Path = MANIFEST) -> Manifest:
        """A manifest from its JSON object, refusing a missing field or a changed value (its checksum)."""
        if not isinstance(d, dict):
            raise IndexFormatError(f"{where}: not a JSON object")
        if d.get("format_version") != FORMAT_VERSION:
            raise IndexFormatError(f"{where}: index format {d.get('format_version')!r} "
                                   f"(this spanseek reads {FORMAT_VERSION})")
        optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        missing = [k for k in cls.__dataclass_fields__ if k not in d and k not in optional]
        if missing:
            raise IndexFormatError(f"{where}: missing field(s) {', '.join(missing)}; the manifest is damaged")
        if "files" in d and CHECKSUM_FIELD not in d:  # manifests have recorded both since checksums were added
            raise IndexFormatError(f"{where}: missing field {CHECKSUM_FIELD}; the manifest is damaged")
        if CHECKSUM_FIELD in d and d[CHECKSUM_FIELD] != manifest_checksum(d):
            raise IndexFormatError(f"{where}: checksum mismatch (the manifest was changed or damaged)")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def load(cls, index_dir: str | Path) -> Manifest:
        """Read ``index_dir``'s manifest; a missing or damaged one raises IndexFormatError naming the file."""
        index_dir = Path(index_dir)
        path = index_dir / MANIFEST
        if index_dir.exists() and not index_dir.is_dir():  # a corpus given as the index, often
            raise IndexFormatError(f"{index_dir}: a file, not an index directory (an index is the --out directory of "
                                   "`spanseek index build`)")
        if not index_dir.is_dir():
            raise IndexFormatError(f"{index_dir}: no such index directory (build one with `spanseek index build`)")
        if not path.is_file() and (index_dir / integrity.SHARDS).is_dir():
            raise IndexFormatError(
                f"{index_dir}: no {MANIFEST}, so the build did not finish; run the same "
                f"`spanseek index build ... --out {index_dir}` again to resume it"
            )
        if not path.is_file():
            raise IndexFormatError(f"{index_dir}: not an index directory (no {MANIFEST} and no unfinished build); "
                                   "build one with `spanseek index build`")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise IndexFormatError(f"{path}: not UTF-8 at byte {e.start}; the manifest is damaged") from None
        except json.JSONDecodeError as e:
            raise IndexFormatError(f"{path}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
                                   "the manifest is damaged") from None
        return cls.from_dict(d, path)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as written to disk (with the checksum of its other fields)."""
        d = {k: v for k, v in self.__dict__.items() if not (k == "files" and v is None)}
        d[CHECKSUM_FIELD] = manifest_checksum(d)
        return d

    def write(self, index_dir: Path) -> None:
        """Write ``manifest.json`` atomically (its presence marks a finished index)."""
        write_json_atomic(index_dir / MANIFEST, self.to_dict())

    @property
    def spec(self) -> FactorySpec:
        """The parsed factory string."""
        return parse_factory(self.factory)

    def built_by(self, fingerprint: str, phrase_fingerprint: str | None = None) -> bool:
        """Whether a model of these fingerprints made this index's token vectors: the whole checkpoint, or its phrase
        side (``check_model``)."""
        return fingerprint == self.model_fingerprint or (
            phrase_fingerprint is not None and phrase_fingerprint == self.phrase_fingerprint)

    def check_model(self, config: EncoderConfig, fingerprint: str, phrase_fingerprint: str | None = None) -> None:
        """Refuse a model whose token vectors differ from the ones this index was built with.

        The weights match when the whole checkpoint is the one that built the index, or when its phrase side is
        (a query-side fine-tuned model; ``phrase_fingerprint`` is recorded by builds since it was added).
        """
        built = EncoderConfig.from_dict(self.encoder)
        diffs = [
            f"{k}: index {built.index_relevant()[k]!r} vs model {v!r}"
            for k, v in config.index_relevant().items()
            if built.index_relevant()[k] != v
        ]
        if not self.built_by(fingerprint, phrase_fingerprint):
            diffs.append(f"phrase-encoder weights: index {self.phrase_fingerprint or self.model_fingerprint} "
                         f"vs model {phrase_fingerprint if self.phrase_fingerprint else fingerprint}")
        elif self.backbone_fingerprint is not None and built.backbone == config.backbone:  # (else named above)
            now = backbone_fingerprint(config.backbone, weights=config.weights == "lora")
            if now is not None and now != self.backbone_fingerprint:
                diffs.append(f"backbone files of {config.backbone}: index {self.backbone_fingerprint} vs now {now}, "
                             "changed since the build (another version installed or written there)")
        if diffs:
            raise IndexFormatError(
                "index was built with a different model (" + "; ".join(diffs) + "); "
                "use the model that built it or rebuild the index"
            )


def doc_record(doc_id: str, title: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of ``docs.jsonl``: the key ``meta`` only when there is metadata (older indexes have none)."""
    return {"id": doc_id, "title": title, **({"meta": meta} if meta else {})}


def passage_record(doc: int, para: int, text: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of ``passages.jsonl``: the key ``meta`` only when the passage has metadata of its own."""
    return {"doc": doc, "para": para, "text": text, **({"meta": meta} if meta else {})}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines store; a bad line raises IndexFormatError naming the file and line."""
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """``read_jsonl`` one object at a time, for a reader that keeps a part of each (the passages' metadata, not
    their text)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                obj = json.loads(raw.decode("utf-8")) if raw.strip() else None
            except UnicodeDecodeError as e:
                raise IndexFormatError(f"{path}:{lineno}: not UTF-8 (byte {e.start}); the store is damaged") from None
            except json.JSONDecodeError as e:
                raise IndexFormatError(f"{path}:{lineno}: invalid JSON at column {e.colno} ({e.msg}); "
                                       "the store is damaged") from None
            if obj is None:
                continue
            if not isinstance(obj, dict):
                raise IndexFormatError(f"{path}:{lineno}: expected a JSON object; the store is damaged")
            yield obj


@contextlib.contextmanager
def c_stdout_to(where: str | int = "stderr") -> Iterator[None]:
    """While inside, what C code prints on standard output (file descriptor 1: faiss's notes on on-disk lists) goes
    to standard error (``where`` "stderr"), nowhere ("devnull") or into the open file descriptor ``where``, not into
    a command's JSON output."""
    import ctypes

    def flush_c() -> None:  # C's own buffer goes where fd 1 points now
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).fflush(None)

    with _STDOUT_LOCK:  # one redirection at a time: a second one would save (and restore) the first's target
        sys.stdout.flush()
        flush_c()
        saved = os.dup(1)
        target = os.open(os.devnull, os.O_WRONLY) if where == "devnull" else where if isinstance(where, int) else 2
        try:
            os.dup2(target, 1)
            yield
        finally:
            flush_c()
            os.dup2(saved, 1)
            os.close(saved)
            if where == "devnull":
                os.close(target)


def read_faiss(path: Path, on_disk: bool = True) -> tuple[Any, str | None]:
    """The faiss index at ``path``, and where its on-disk inverted lists were recorded (None without such lists;
    ``on_disk`` False: an index the manifest says has none, whose standard output is left alone).

    On-disk lists (``index build --on-disk``) are read from ``index.ivfdata`` beside ``path`` wherever the directory
    lies now (``IO_FLAG_ONDISK_SAME_DIR``: moved, copied, mounted elsewhere), never from the place the index recorded,
    and read-only (faiss opens them for writing by default, which a read-only mount or a copy owned by another user
    refuses). faiss names the file it recorded on standard output at each open: that is read here, not printed."""
    import faiss

    flags = faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY
    if not on_disk:
        return faiss.read_index(str(path), flags), None
    with tempfile.TemporaryFile() as said:
        with c_stdout_to(said.fileno()):
            index = faiss.read_index(str(path), flags)
        said.seek(0)
        note = said.read().decode("utf-8", "replace")
    prefix = str(path)[: str(path).rfind("/") + 1]  # what faiss puts before the recorded file's name
    recorded = re.search(rf"updating ondisk filename from (.*) to {re.escape(prefix)}[^/]*$", note, re.MULTILINE)
    return index, recorded.group(1) if recorded else None


_STDOUT_LOCK = threading.Lock()


def _read(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)``, with any failure to read or parse it raised as IndexFormatError naming the file."""
    try:
        return read(path)
    except IndexFormatError:
        raise
    except FileNotFoundError:
        raise IndexFormatError(f"{path.parent}: index is incomplete ({path.name} missing); rebuild it") from None
    except (OSError, ValueError, RuntimeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile, KeyError) as e:
        raise IndexFormatError(f"{path}: cannot be read ({faiss_reason(e)[:200]}); the file is damaged: rebuild or "
                               "restore the index") from None


def _leftovers(index_dir: Path) -> list[Path]:
    """Scratch at the top of a finished index: partial files of killed writes, build shards. Not the add staging:
    the encoded shards an interrupted add left there are re-used when it is run again (``indexer.add``); the next
    change committed (``recover_locked`` rolling forward) removes it."""
    return [p for p in index_dir.iterdir()
            if integrity.is_scratch(p.name) and p.name not in (integrity.LOCK, integrity.STAGING)]


def recover(index_dir: str | Path) -> str | None:
    """Finish or undo an ``index add`` that was killed, and remove scratch; returns "rolled forward", "rolled
    back", "cleaned up" or None (nothing to do).

    With its journal present every new file was complete: rename them over the old ones, write the journal's
    manifest, drop the journal (each step can be repeated, so a crash during recovery is recovered again).
    Without a journal the old files are untouched: drop the add's partial files. Only a finished index (one with a
    manifest) is touched, and nothing while another process holds the writer lock (a running add), except that
    a journal is waited for.
    """
    index_dir = Path(index_dir)
    if not (index_dir / MANIFEST).is_file() or not _leftovers(index_dir):
        return None
    journal = index_dir / integrity.JOURNAL
    with integrity.writer_lock(index_dir, wait=journal.is_file()) as locked:
        if not locked:
            if journal.is_file():
                raise IndexFormatError(f"{journal}: an interrupted `spanseek index add` must be finished, which needs "
                                       f"write access to {index_dir}; open it once as its owner")
            return None  # a running add owns the leftovers
        return recover_locked(index_dir)


def recover_locked(index_dir: Path, committing: bool = False) -> str | None:
    """``recover`` under the writer lock; ``committing``: the caller has just written the journal and rolls its own
    change forward (nothing was interrupted, so nothing is reported)."""
    journal = index_dir / integrity.JOURNAL
    outcome = None
    if journal.is_file():
        pending = _read(journal, lambda p: json.loads(p.read_text(encoding="utf-8")))
        manifest = Manifest.from_dict(pending.get("manifest") if isinstance(pending, dict) else None, journal)
        for name in pending["files"]:
            tmp = index_dir / (name + integrity.ADD_SUFFIX)
            if tmp.is_dir():  # os.replace cannot put a directory over a non-empty one; repeatable if killed here
                shutil.rmtree(index_dir / name, ignore_errors=True)
                tmp.rename(index_dir / name)
            elif tmp.exists():
                os.replace(tmp, index_dir / name)
        manifest.write(index_dir)
        integrity.fsync_path(index_dir)
        # the change is in: an add's encoded shards are not needed again (before the journal goes, so a kill here
        # is finished by the next open)
        shutil.rmtree(index_dir / integrity.STAGING, ignore_errors=True)
        journal.unlink()
        outcome = "rolled forward"
        if not committing:
            log.warning("%s: finished an interrupted `index add` (rolled forward)", index_dir)
    for path in _leftovers(index_dir):
        if path.name.endswith(integrity.ADD_SUFFIX):
            outcome = outcome or "rolled back"
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        outcome = outcome or "cleaned up"
    if outcome == "rolled back":
        log.warning("%s: removed the partial files of an unfinished `index add`, `upsert` or `compact` (rolled back; "
                    "the index is as it was before it)", index_dir)
    return outcome


def given_index(index_dir: str | Path, flag: str | None) -> Manifest:
    """The manifest of ``index_dir``, given as the command's ``flag`` (``--index``, ``--from-index``); a path that is
    no index (missing, a file, a folder without a manifest, an unfinished build, a damaged manifest) is an
    IndexFormatError led by the flag, ``--index runs/: not an index directory ...``, before the command loads a model
    or reads its other files (the path alone left the user to find which of the command's paths it was)."""
    with naming_flag(flag, IndexFormatError):
        return Manifest.load(index_dir)


def check_index(index_dir: str | Path, contents: bool = True, recovered: bool = False) -> Manifest:
    """Recover ``index_dir`` from an interrupted add, read its manifest and compare every recorded file's size and
    (with ``contents``) checksum; returns the manifest or raises IndexFormatError naming the first damaged file.

    Re-reading every file costs about a second per 2 GB; ``contents=False`` compares sizes only. ``recovered``:
    the caller holds the writer lock and has run ``recover_locked``.
    """
    index_dir = Path(index_dir)
    if index_dir.is_dir() and not recovered:
        recover(index_dir)
    manifest = Manifest.load(index_dir)
    if manifest.files is not None:
        problems = integrity.check_files(index_dir, manifest.files, contents=contents)
        if problems:
            more = (f" (and {len(problems) - 1} more; `spanseek index verify {index_dir}` lists them)"
                    if len(problems) > 1 else "")
            raise IndexFormatError(f"damaged index: {problems[0]}{more}; rebuild or restore the index")
    return manifest


def decode_codes(index: Any, codes: np.ndarray) -> np.ndarray:
    """(n, code_size) uint8 faiss codes (``index.sa_encode``) -> (n, d) float32 vectors (``index.sa_decode``).

    IVF-PQ fast-scan indexes are decoded from the index's own parts (coarse centroid if by_residual + PQ decode,
    then the inverse pre-transform, e.g. OPQ), with the same result: their ``sa_decode`` crashes once the index
    has been read back from disk (faiss 1.15). An index behind an id map decodes through the index it wraps.
    """
    import faiss

    index = unmapped(index)
    is_pre = isinstance(index, faiss.IndexPreTransform)
    inner = unwrapped(index)
    if not isinstance(inner, faiss.IndexIVFPQFastScan):
        return index.sa_decode(codes)
    # Any below: these are faiss's low-level SWIG calls (pointer arguments), which its type stubs do not model
    ivf: Any = inner
    cc = ivf.coarse_code_size()
    listno = np.zeros(len(codes), np.int64)
    for i in range(cc):  # the list number, little-endian in the first cc bytes
        listno |= codes[:, i].astype(np.int64) << (8 * i)
    x: Any = ivf.pq.decode(np.ascontiguousarray(codes[:, cc:]))
    if ivf.by_residual:
        x += ivf.quantizer.reconstruct_batch(listno)
    if is_pre:
        pre: Any = index
        out = np.empty((len(x), pre.d), np.float32)
        pre.reverse_chain(len(x), faiss.swig_ptr(np.ascontiguousarray(x, dtype=np.float32)), faiss.swig_ptr(out))
        x = out
    return x


# faiss's exhaustive (flat) search either scans the database once per query, or, for batches, computes
# query x database blocks with BLAS. faiss 1.15 picks BLAS when queries x dim reaches its threshold (default
# 128,000, so service-sized batches never got it) and cuts the database into 1,024-row blocks, too small for
# a sgemm on a few queries. Measured on the 146k-token demo index (d 384, 2 cores), milliseconds per search of
# 2 / 4 / 8 / 16 / 64 queries: 8 / 16 / 32 / 65 / 263 by default; BLAS from 4 queries on 16,384-row blocks:
# 8 / 14 / 20 / 17 / 43. Results are the same up to float rounding.
FAISS_BLAS_MIN_QUERIES = 4
FAISS_BLAS_DATABASE_BLOCK = 16384
# faiss allocates query block x database block floats of scratch: 256 x 16,384 is 16 MiB (its default query
# block of 4,096 would make that 256 MiB for large batches such as mining chunks). Service batches are smaller.
FAISS_BLAS_QUERY_BLOCK = 256


def tune_faiss(dim: int) -> None:
    """Process-wide faiss settings for batched exhaustive search (idempotent)."""
    import faiss

    faiss.cvar.distance_compute_blas_threshold = (FAISS_BLAS_MIN_QUERIES - 1) * dim + 1
    faiss.cvar.distance_compute_blas_database_bs = FAISS_BLAS_DATABASE_BLOCK
    faiss.cvar.distance_compute_blas_query_bs = FAISS_BLAS_QUERY_BLOCK


class PhraseIndex:
    """Read-only view of an index directory: token vectors (memory-mapped), token map, passages, faiss.

    ``vector_source`` picks where neighbour vectors come from: ``fine`` (the fine store, ``token_vectors``) or
    ``codes`` (decoded compressed codes, ``code_vectors``); None takes the manifest's default. With ``mmap`` the
    fine store, the codes and the character offsets stay on disk (page cache); the rest is held in RAM. Opening
    finishes or undoes an interrupted add (``recover``) and refuses a damaged index naming the file;
    ``verify_checksums=False`` skips re-reading every file for its checksum (sizes are still compared).
    """

    def __init__(self, index_dir: str | Path, mmap: bool = True, vector_source: str | None = None,
                 verify_checksums: bool = True):
        self.dir = Path(index_dir)
        self.manifest = check_index(self.dir, contents=verify_checksums)
        mode: Literal["r"] | None = "r" if mmap else None
        d = self.dir
        if self.manifest.fine_store not in STORES:
            raise IndexFormatError(f"{d / MANIFEST}: unknown fine store {self.manifest.fine_store!r} (this spanseek "
                                   f"reads {', '.join(STORES)})")
        fine_file = d / store_files(self.manifest.fine_store)[0]
        self.vectors = _read(fine_file, lambda p: open_fine_store(d, self.manifest.fine_store, mmap))
        maps: Literal["r"] | None = mode if self.manifest.faiss_params.get("on_disk") else None  # held in RAM else
        self.token_passage = _read(d / TOKEN_PASSAGE, lambda p: np.load(p, mmap_mode=maps))
        self.token_offsets = _read(d / TOKEN_OFFSETS, lambda p: np.load(p, mmap_mode=mode))
        self.token_flags = _read(d / TOKEN_FLAGS, lambda p: np.load(p, mmap_mode=maps))
        self.passage_tokens = _read(d / PASSAGE_TOKENS, lambda p: np.load(p, mmap_mode=maps))
        self.passages = _read(d / PASSAGES, read_jsonl)
        self.docs = _read(d / DOCS, read_jsonl)
        self.deleted_docs = _read(d / DELETED, np.load) if self._has(DELETED) else np.zeros(0, np.int64)
        self._fields: FilterTree | None = None
        if self._has(FIELDS):
            self._fields = _read(d / FIELDS, lambda p: FieldIndex.load(p, self.docs, self.passages))
        if len(self.deleted_docs) and (self.deleted_docs.min() < 0 or self.deleted_docs.max() >= len(self.docs)):
            raise IndexFormatError(f"{d / DELETED}: document numbers outside 0..{len(self.docs) - 1}; rebuild the index")
        if not (d / FAISS_INDEX).is_file():  # faiss would raise its own RuntimeError
            raise IndexFormatError(f"{d}: index is incomplete ({FAISS_INDEX} missing); rebuild it")
        if self.manifest.faiss_params.get("on_disk") and not (d / IVFDATA).is_file():
            raise IndexFormatError(f"{d}: index is incomplete ({IVFDATA} missing); rebuild it")
        # on-disk lists are read next to index.faiss wherever the directory lies; ``lists_recorded``: where the index
        # file says they were (an index built before the build recorded the bare name: where it was built)
        on_disk = bool(self.manifest.faiss_params.get("on_disk"))
        self.faiss, self.lists_recorded = _read(d / FAISS_INDEX, lambda p: read_faiss(p, on_disk))
        tune_faiss(self.faiss.d)
        ivf = ivf_of(self.faiss)
        if (ivf is not None) != self.manifest.spec.is_ivf:
            raise IndexFormatError(f"{d / FAISS_INDEX}: {'an IVF' if ivf is not None else 'no IVF'} index, but the "
                                   f"manifest's factory is {self.manifest.factory!r}; rebuild the index")
        self.default_nprobe: int | None = int(ivf.nprobe) if ivf is not None else None
        self.codes = _read(d / CODES, lambda p: np.load(p, mmap_mode=mode)) if self._has(CODES) else None
        n = len(self.token_passage)
        for name, arr in ((fine_file.name, self.vectors), (TOKEN_OFFSETS, self.token_offsets), (TOKEN_FLAGS, self.token_flags),
                          (TOKEN_PASSAGE, self.token_passage)):
            if len(arr) != self.manifest.tokens:
                raise IndexFormatError(f"{d / name}: {len(arr)} rows, the manifest records {self.manifest.tokens} "
                                       "tokens (token arrays disagree in length); rebuild the index")
        if len(self.passages) != self.manifest.passages:
            raise IndexFormatError(f"{d / PASSAGES}: {len(self.passages)} passages, the manifest records "
                                   f"{self.manifest.passages}; rebuild the index")
        if len(self.passage_tokens) != len(self.passages) + 1:
            raise IndexFormatError(f"{d / PASSAGE_TOKENS}: {len(self.passage_tokens)} entries for "
                                   f"{len(self.passages)} passages; rebuild the index")
        if self.codes is not None and len(self.codes) != n:
            raise IndexFormatError(f"{d / CODES}: {len(self.codes)} rows for {n} tokens; rebuild the index")
        source = vector_source or self.manifest.faiss_params.get("vector_source", "fine")
        if source not in VECTOR_SOURCES:
            raise ValueError(f"vector_source must be one of {VECTOR_SOURCES}, got {source!r}")
        if source == "codes" and self.codes is None:
            raise IndexFormatError(
                f"{self.dir}: no compressed codes ({CODES}; factory {self.manifest.factory}); use vector_source='fine'"
            )
        self.vector_source = source
        self.lexical: LexicalIndex | None = None
        if self.manifest.lexical is not None:
            try:
                self.lexical = LexicalIndex.load(self.dir / LEXICAL)
            except (FileNotFoundError, ValueError, KeyError) as e:
                raise IndexFormatError(f"{self.dir}: its lexical index ({LEXICAL}/) is unreadable ({e}); rebuild it "
                                       f"with `spanseek index add-lexical {self.dir}`") from e
            if self.lexical.n_passages != len(self.passages):
                raise IndexFormatError(f"{self.dir}: the lexical index has {self.lexical.n_passages} passages for "
                                       f"{len(self.passages)}; rebuild it with `spanseek index add-lexical {self.dir}`")

    @property
    def fields(self) -> FilterTree:
        """The field index filters are evaluated over: the index's ``doc_fields.npz``, or, in an index built
        before it, one built from the document store at the first use."""
        if self._fields is None:
            log.info("%s: no %s (built before it); building the field index in memory", self.dir, FIELDS)
            self._fields = FieldIndex.build(self.docs, self.passages)
        return self._fields

    @fields.setter
    def fields(self, value: FilterTree) -> None:
        """Set the field index (a copy of the index over other documents: its own)."""
        self._fields = value

    @property
    def passage_doc(self) -> np.ndarray:
        """(P,) int64: each passage's document, read from the passages once for each list of them: a copy of the
        index given other passages (``trainer.calibrate.without_documents``) reads its own, not the original's."""
        made = self.__dict__.get("_passage_doc")
        if made is None or made[0] is not self.passages:
            self.passage_doc = np.asarray([p["doc"] for p in self.passages], dtype=np.int64)
            made = self._passage_doc
        return made[1]

    @passage_doc.setter
    def passage_doc(self, value: np.ndarray) -> None:
        """Set the passages' documents (a live snapshot's: its base's followed by its segment's)."""
        self._passage_doc = (self.passages, value)

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Default mode, fusion and per-unit lexical weights: the manifest's, else ``core.lexical.DEFAULT_FUSION``."""
        fusion = (self.manifest.lexical or {}).get("fusion") or {}
        return {**DEFAULT_FUSION, **fusion, "weights": {**DEFAULT_FUSION["weights"], **fusion.get("weights", {})}}

    @property
    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig.from_dict(self.manifest.encoder)

    @property
    def num_tokens(self) -> int:
        return len(self.token_passage)

    def token_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Fine vectors of token ids (any shape) as float32, shape ids.shape + (d,)."""
        return self._gather(ids, lambda rows: self.vectors[rows])

    def token_scores(self, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q): the fine vectors of token ids ``ids`` (1-D) dot each column of ``queries`` (d, q) (equal
        to ``token_vectors(ids) @ queries``; a rotated store computes it without rotating every row back)."""
        if isinstance(self.vectors, FineStore):
            return self.vectors.dot(ids, queries)
        return self.token_vectors(ids) @ queries  # vectors held as a plain array (a derived in-memory index)

    def code_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of token ids decoded from their compressed codes (faiss ``sa_decode``), shape ids.shape + (d,)."""
        if self.codes is None:
            raise IndexFormatError(f"{self.dir}: no compressed codes ({CODES}) in a {self.manifest.factory} index")
        return self._gather(ids, lambda rows: decode_codes(self.faiss, np.ascontiguousarray(self.codes[rows])))

    def _gather(self, ids: np.ndarray, read) -> np.ndarray:
        """Rows ``read(sorted unique ids)`` scattered back to ids' shape + (d,), as float32 (one batched read)."""
        ids = np.asarray(ids)
        uniq, inverse = np.unique(ids.reshape(-1), return_inverse=True)  # sorted reads suit a memory map
        rows = as_float32(read(uniq)).reshape(len(uniq), self.vectors.shape[1])
        return rows[inverse].reshape(*ids.shape, self.vectors.shape[1])

    def passage_range(self, passage: int) -> tuple[int, int]:
        return int(self.passage_tokens[passage]), int(self.passage_tokens[passage + 1])

    def _has(self, name: str) -> bool:
        """Whether the index has its optional file ``name``: present, and recorded by the manifest when it records
        files (an unrecorded one, e.g. a stray deleted.npy, would silently change what is served)."""
        path = self.dir / name
        if not path.is_file():
            return False
        if self.manifest.files is not None and name not in self.manifest.files:
            raise IndexFormatError(f"{path}: a file the manifest does not record (not written by this index); "
                                   "remove it, or restore the index")
        return True

    @property
    def live_documents(self) -> int:
        """Documents not deleted."""
        return len(self.docs) - len(self.deleted_docs)

    def search_parameters(self, nprobe: int | None, selector: Any = None) -> Any:
        """faiss per-call search parameters for ``nprobe`` (None: the index's stored default) and an optional
        ``faiss.IDSelector`` of the token ids a search may return; None when neither is needed.

        Given per call, never set on the shared index, so one request's nprobe cannot leak into another's.
        """
        ivf = ivf_of(self.faiss)
        if (nprobe is None or ivf is None) and selector is None:
            return None
        return faiss_search_parameters(self.faiss, int(nprobe or (ivf.nprobe if ivf is not None else 1)), selector)


def faiss_search_parameters(index: Any, nprobe: int, selector: Any = None) -> Any:
    """SearchParametersIVF(nprobe) (or plain SearchParameters for a flat index) with ``selector`` as its ``sel``,
    wrapped as the index's layers need: a pre-transform (OPQ) takes its inner index's parameters in
    SearchParametersPreTransform; an id map's inner index is given ``selector`` behind the map's translation of its
    row numbers to the ids ``selector`` reads (token ids)."""
    import faiss

    index = faiss.downcast_index(index)
    params: Any
    if isinstance(index, faiss.IndexPreTransform):
        inner = faiss_search_parameters(index.index, nprobe, selector)
        params = faiss.SearchParametersPreTransform()
        params.index_params = inner
        params.referenced_objects = [inner]  # the C++ side holds a bare pointer: keep the Python object alive
        return params
    if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2):
        # faiss translates a selector's ids itself unless the selector is an IDSelectorTranslated, which it takes to
        # read row numbers already (core.selection's selectors are: token id -> passage), so translate here
        id_map: Any = index.id_map  # (a faiss Int64Vector, which faiss's type stubs do not list here)
        translated = None if selector is None else faiss.IDSelectorTranslated(id_map, selector)
        params = faiss_search_parameters(index.index, nprobe, translated)
        if translated is not None:
            params.referenced_objects = [translated, selector]
        return params
    if ivf_of(index) is not None:
        params = faiss.SearchParametersIVF()
        params.nprobe = nprobe  # its default is 1, not the index's: always set
    else:
        params = faiss.SearchParameters()
    if selector is not None:
        params.sel = selector
        params.referenced_objects = [selector]  # likewise held by a bare pointer
    return params
