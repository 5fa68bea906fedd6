"""Verify a built index: every file's checksum, manifest, counts and maps, recall of its faiss index vs exact
search (against what the build measured), bytes per token.

    spanseek index verify INDEX_DIR [--sample 1000] [--k 10] [--nprobe N] [--live-dir LIVE_DIR]

The report counts live and deleted documents (``deleted.npy``: masked until ``spanseek index compact``).

Where a server with writes keeps a live directory beside the index (``--live-dir``, else ``SPANSEEK_LIVE_DIR``, else
the index path + ``.live``, as `spanseek serve --writes` reads it), it is checked as a start reads it
(``indexer.snapshot.check_live``: the state, the merged base's checksums, every line of the write logs), and
``"live"`` counts its writes and the documents a server with writes would serve: a backup taken with `spanseek index
snapshot` is verified whole.

Checksums: each file the manifest records is re-read and compared (a damaged file is named). Recall
(``indexer.recall``) uses a sample of the index's own (fine, fp16) token vectors as queries; the build's own
measurement is repeated with its settings and must not fall more than ``RECALL_DROP`` below the recorded value.

The lexical (BM25) part, when present, must rank a sample of passage-text queries as a fresh BM25 of the passage
store does; an index without one is reported as such (it serves dense search).

An index with its inverted lists on disk reads them from ``index.ivfdata`` beside ``index.faiss``; where the index file
records another place (built before it recorded the bare name, then moved or copied), a note says which is read.

``memory_per_token`` reports what a searcher holds in RAM (the faiss index, the in-RAM token maps and the
passage store) and what stays on disk behind memory maps (fine store, codes, character offsets), per token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core import integrity, phrase_index
from spanseek.core.bf16_scan import keeps_bf16
from spanseek.core.dense import flat_holds_fine
from spanseek.core.faiss_spec import ivf_of
from spanseek.core.fine_store import store_files
from spanseek.core.flat_search import flat_vectors, keeps_transposed
from spanseek.core.phrase_index import IndexFormatError, PhraseIndex
from spanseek.indexer.add import live_rows
from spanseek.indexer.compress import kept_token_ids
from spanseek.indexer.lexical import check_lexical
from spanseek.indexer.lexical import describe as describe_lexical
from spanseek.indexer.live_state import STATE, LiveStoreError, default_live_dir
from spanseek.indexer.recall import exact_topk, measure_recall  # noqa: F401  (exact_topk: re-exported)
from spanseek.indexer.snapshot import ATTEMPTS, check_live
from spanseek.indexer.wal import WalError

log = logging.getLogger(__name__)

RECALL_DROP = 0.05  # the same queries on the same index give the same recall; a larger drop means damage


def _file_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def memory_per_token(index: PhraseIndex) -> dict[str, Any]:
    """Bytes per token a Searcher over ``index`` holds in RAM, maps from disk, and the index's disk total.

    RAM: faiss index (its serialised size, which is its in-memory size up to small headers), arrays loaded into
    memory (not memory-mapped), the passage and document stores (their JSONL size; Python objects add more),
    and the Searcher's passage -> document array, and where a flat index is scanned from a transposed copy of its
    vectors on this CPU (``core.flat_search.keeps_transposed``), that copy, and where small batches are screened
    with a bf16 copy (``core.bf16_scan.keeps_bf16``), that one. Mapped: memory-mapped files (page cache,
    read on demand).
    """
    n = max(1, index.num_tokens)
    d = index.dir
    ram = {"faiss": _file_bytes(d / phrase_index.FAISS_INDEX)}
    mapped = {}
    arrays: dict[str, Any] = {
        store_files(index.manifest.fine_store)[0]: index.vectors, phrase_index.TOKEN_PASSAGE: index.token_passage, phrase_index.TOKEN_OFFSETS: index.token_offsets,
        phrase_index.TOKEN_FLAGS: index.token_flags, phrase_index.PASSAGE_TOKENS: index.passage_tokens,
    }
    if index.codes is not None:
        arrays[phrase_index.CODES] = index.codes
    for name, arr in arrays.items():
        (mapped if getattr(arr, "mapped", isinstance(arr, np.memmap)) else ram)[name] = int(arr.nbytes)
    if (d / phrase_index.IVFDATA).is_file():
        mapped[phrase_index.IVFDATA] = _file_bytes(d / phrase_index.IVFDATA)
    ram["passages+docs"] = _file_bytes(d / phrase_index.PASSAGES) + _file_bytes(d / phrase_index.DOCS)
    ram["searcher"] = 8 * len(index.passages)
    xb = flat_vectors(index.faiss)
    if xb is not None and keeps_transposed(xb):
        ram["flat_transposed"] = int(xb.nbytes)
    if xb is not None and keeps_bf16(xb) and flat_holds_fine(index):
        ram["flat_bf16"] = int(xb.nbytes) // 2
    disk = sum(_file_bytes(p) for p in d.iterdir())
    return {
        "ram_bytes_per_token": round(sum(ram.values()) / n, 2),
        "ram_breakdown": {k: round(v / n, 2) for k, v in ram.items()},
        "mapped_bytes_per_token": round(sum(mapped.values()) / n, 2),
        "mapped_breakdown": {k: round(v / n, 2) for k, v in mapped.items()},
        "disk_bytes_per_token": round(disk / n, 2),
    }


def lists_note(index: PhraseIndex) -> list[str]:
    """Where an on-disk index's inverted lists are read from, where its index file records them elsewhere (an index
    built before the bare name was recorded, moved or copied since): the lists beside ``index.faiss`` are read."""
    recorded, read = index.lists_recorded, index.dir / phrase_index.IVFDATA
    if recorded is None or "/" not in recorded or Path(recorded).resolve() == read.resolve():
        return []
    return [f"{read}: the inverted lists are read here, beside {phrase_index.FAISS_INDEX}; its build recorded them at "
            f"{recorded}, which is not read (an index moved or copied reads its own lists; nothing to do)"]


def recall_vs_exact(
    index: PhraseIndex, sample: int = 1000, k: int = 10, nprobe: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """recall@1 and recall@k of ``index.faiss`` against exact search, queries = a sample of its own vectors; with
    the nprobe searched and the lists there are (an index without lists: nprobe None, whatever was asked)."""
    ids = indexed_ids(index)
    out = measure_recall(index.faiss, index.vectors, ids, sample=sample, k=k, seed=seed,
                         params=index.search_parameters(nprobe))
    ivf = ivf_of(index.faiss)
    lists = {"nprobe": min(int(ivf.nlist), nprobe or index.default_nprobe or 1), "nlist": int(ivf.nlist)} if ivf \
        else {"nprobe": None}
    return {**out, **lists}


def recall_drop(index: PhraseIndex) -> str | None:
    """The build's recall measurement repeated: a problem when it fell more than RECALL_DROP, else None."""
    built = index.manifest.faiss_params.get("recall")
    if not isinstance(built, dict) or "k" not in built:
        return None
    k = int(built["k"])
    now = recall_vs_exact(index, sample=int(built["sample"]), k=k, seed=int(built.get("seed", 0)))
    key = f"recall@{now['k']}"
    if key in built and now[key] < built[key] - RECALL_DROP:
        return (f"{index.dir / phrase_index.FAISS_INDEX}: {key} is {now[key]}, the build measured {built[key]} on the same "
                "queries: the faiss index is damaged or does not match the stored vectors")
    return None


def indexed_ids(index: PhraseIndex) -> np.ndarray:
    """The token ids faiss should hold: those with a fine-store row in a filtered store, else those the filter
    threshold keeps (every token without a filter)."""
    row_map = index.vectors.row_map
    if row_map is not None:
        return np.flatnonzero(np.unpackbits(row_map.bits)[: row_map.n])
    return kept_token_ids(_filter_scores(index), index.manifest.filter_threshold, index.num_tokens)


def _filter_scores(index: PhraseIndex) -> np.ndarray | None:
    path = index.dir / phrase_index.FILTER_SCORES
    return np.load(path, mmap_mode="r") if path.is_file() else None


def check_maps(index: PhraseIndex) -> list[str]:
    """Consistency problems between the manifest, the token maps, the stores and faiss (empty if none)."""
    m, problems = index.manifest, []
    pt, n = index.passage_tokens, index.num_tokens
    if pt[0] != 0 or pt[-1] != n or np.any(np.diff(pt) < 0):
        problems.append(f"passage_tokens is not a non-decreasing 0..{n} offset array")
    elif not np.array_equal(index.token_passage, np.repeat(np.arange(len(pt) - 1, dtype=np.int32), np.diff(pt))):
        problems.append("token_passage disagrees with passage_tokens")
    if len(index.docs) != m.documents:
        problems.append(f"docs.jsonl has {len(index.docs)} documents, the manifest {m.documents}")
    docs = np.asarray([p["doc"] for p in index.passages], dtype=np.int64)
    if len(docs) and (docs.min() < 0 or docs.max() >= len(index.docs) or np.any(np.diff(docs) < 0)):
        problems.append("passages refer to documents out of range or out of order")
    deleted = index.deleted_docs
    if len(deleted) and np.any(np.diff(deleted) <= 0):
        problems.append(f"{phrase_index.DELETED} is not a sorted list of distinct document numbers")
    if index.faiss.ntotal != m.indexed_tokens:
        problems.append(f"faiss holds {index.faiss.ntotal} vectors, the manifest says {m.indexed_tokens} indexed tokens")
    if index.faiss.d != index.vectors.shape[1]:
        problems.append(f"faiss dimension {index.faiss.d} != fine store dimension {index.vectors.shape[1]}")
    if index.codes is not None and index.codes.shape[1] != index.faiss.sa_code_size():
        problems.append(f"codes.npy rows are {index.codes.shape[1]} bytes, faiss codes {index.faiss.sa_code_size()}")
    if m.filter_threshold is not None:
        kept = len(indexed_ids(index))
        if kept != m.indexed_tokens:
            problems.append(f"filter threshold {m.filter_threshold} keeps {kept} tokens, the manifest says {m.indexed_tokens}")
    if len(docs) and not problems:
        lengths = np.asarray([len(p["text"]) for p in index.passages], dtype=np.int64)[index.token_passage]
        offs = np.asarray(index.token_offsets)
        if np.any(offs[:, 0] < 0) or np.any(offs[:, 0] > offs[:, 1]) or np.any(offs[:, 1] > lengths):
            problems.append("token character offsets fall outside their passages")
    return problems


def built_by(m: phrase_index.Manifest) -> dict[str, Any]:
    """Which model built the index: the reference it was built with, its fingerprints and backbone, the bundled model
    that makes the same token vectors (``bundled``: ``default``, an earlier default kept under a dated name such as
    ``default-2026-11``, ``base``, or None; a query-side fine-tune of the builder makes them too) and whether that is
    the current default (``bundled_default``), so an index built by an earlier default or another model is told
    apart. Both are None for an index that records no phrase fingerprint."""
    from spanseek.core.loading import bundled_builder

    bundled = bundled_builder(m)
    return {"ref": m.model_ref, "fingerprint": m.model_fingerprint, "phrase_fingerprint": m.phrase_fingerprint,
            "backbone": m.encoder.get("backbone"), "bundled": bundled,
            "bundled_default": bundled == "default" if m.phrase_fingerprint else None}


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def live_ids(index: PhraseIndex) -> list[str]:
    """The ids of ``index``'s documents that are not deleted."""
    dead = set(index.deleted_docs.tolist())
    return [d["id"] for row, d in enumerate(index.docs) if row not in dead]


def verify_live(index: PhraseIndex, live: Path, problems: list[str]) -> dict[str, Any] | None:
    """The live directory ``live`` of a server with writes over ``index`` checked as a start reads it (``check_live``),
    its problem appended to ``problems``: ``{"dir", "base", "logs", "writes", "documents"}``, documents the live ones
    a server with writes would serve (the base's, less those the writes deleted, with those they put); None where
    ``live`` holds no ``state.json``. Checked again when a merge of the server that writes there committed
    meanwhile (its ``state.json`` changed: the base and logs it named removed), as a snapshot copies it again."""
    if not (live / STATE).is_file():
        return None
    for attempt in range(1, ATTEMPTS + 1):
        before = _read_or_none(live / STATE)
        problem = None
        try:
            checked = check_live(live, index.dir)
            # the ids of the base's live documents: the index's, open already, else those of the merged base's
            # document store and deletions alone (opening it whole loaded its faiss index and maps to count them:
            # +255 MB and 0.3-0.5 s at the demo index's size)
            held = (live_ids(index) if checked["base"] == index.dir.resolve()
                    else list(live_rows(checked["base"])[2]))
        except (LiveStoreError, IndexFormatError, WalError, OSError) as e:
            problem = str(e)
        # a commit meanwhile removed what the state read named: a failure, or a log not read yet that read as empty
        # (writes counted from half of one state), so the check is made again over the new state
        if attempt < ATTEMPTS and _read_or_none(live / STATE) != before:
            continue
        if problem is not None:
            problems.append(problem)
            return {"dir": str(live), "base": None, "logs": None, "writes": None, "documents": None}
        break
    last = checked["last"]
    served = {i for i in map(str, held) if last.get(i, True)} | {i for i, put in last.items() if put}
    return {"dir": str(live), "base": checked["state"].get("base"), "logs": len(checked["logs"]),
            "writes": checked["writes"], "documents": len(served)}


def verify_index(
    index_dir: str | Path, sample: int = 1000, k: int = 10, nprobe: int | None = None,
    live_dir: str | Path | None = None, flag: str | None = None,
) -> dict[str, Any]:
    """Check an index and measure it: ``{"ok", "problems", "manifest": counts, "model": built_by, "documents",
    "live", "recall", "memory"}``.

    Problems name the file: a checksum or size that differs from the manifest's record, a store that cannot be
    read, maps that disagree, or a recall far below the build's; and in the live directory of a server with writes
    over the index (``live_dir``, by default the index path + ``.live``; ``"live"`` is None where it holds no
    ``state.json``), what a start with writes would refuse (``check_live``). ``sample``, ``k`` and ``nprobe`` must
    be integers >= 1 (ValueError, before the index is read). ``flag``: the command's flag that gave ``index_dir``
    (``--index``), which leads the problem of a path that is no index (``core.phrase_index.given_index``).
    """
    for name, value in (("sample", sample), ("k", k), ("nprobe", nprobe)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    index_dir = Path(index_dir)
    try:
        if index_dir.is_dir():
            phrase_index.recover(index_dir)
        manifest = phrase_index.given_index(index_dir, flag)
    except IndexFormatError as e:
        return {"ok": False, "problems": [str(e)]}
    problems = integrity.check_files(index_dir, manifest.files) if manifest.files is not None else []
    notes = [] if manifest.files is not None else ["the manifest records no checksums (built by an older version)"]
    try:  # the checksums were just compared; opening checks the rest
        index = PhraseIndex(index_dir, verify_checksums=False)
    except IndexFormatError as e:
        return {"ok": False, "problems": problems or [str(e)], "notes": notes}
    if problems:
        return {"ok": False, "problems": problems, "notes": notes}
    problems = check_maps(index)
    problems += check_lexical(index)
    m = index.manifest
    out: dict[str, Any] = {
        "ok": not problems,
        "problems": problems,
        "manifest": {"factory": m.factory, "fine_store": m.fine_store, "documents": m.documents, "passages": m.passages, "tokens": m.tokens,
                     "indexed_tokens": m.indexed_tokens, "filter_threshold": m.filter_threshold},
        "model": built_by(m),
        # documents replaced (`index upsert`) or deleted stay in the stores, masked, until `index compact`
        "documents": {"live": index.live_documents, "deleted": len(index.deleted_docs)},
        "lexical": describe_lexical(index),
    }
    live_problems: list[str] = []  # the index's recall is measured all the same: a damaged log is not its damage
    out["live"] = verify_live(index, Path(live_dir) if live_dir is not None else default_live_dir(index_dir),
                              live_problems)
    notes += lists_note(index)
    if notes:
        out["notes"] = notes
    if not problems and m.indexed_tokens > 0:
        out["recall"] = recall_vs_exact(index, sample, k, nprobe)
        if (drop := recall_drop(index)) is not None:
            problems.append(drop)
    problems += live_problems
    out["ok"] = not problems
    out["memory"] = memory_per_token(index)
    return out
