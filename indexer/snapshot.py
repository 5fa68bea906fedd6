"""A consistent copy of an index, and of the live directory a server with writes keeps beside it, taken while both
serve: a backup, or an index to move.

    spanseek index snapshot --index INDEX_DIR --out BACKUP_DIR [--live-dir LIVE_DIR]

The index is copied holding its writer lock shared (``core.integrity.writer_lock``): `spanseek index add`, `upsert`,
`delete` and `compact`, which hold it exclusive, are refused meanwhile, and a snapshot is refused while one of them
runs (naming it); a server with writes holds it shared too and goes on. Files are hard links where ``--out`` is on
the index's file system, copies elsewhere (``indexer.live.link_copy``: the index commands and merges replace files
by renames, never in place, so a link keeps the version it was made to). The copy is then verified, every file
against the manifest's checksums.

The live directory (``indexer.live``) is copied as a start reads it: ``state.json``, then the base it names (a merged
one, linked as the index is) and the write logs it lists (copied, never linked: the writer appends to them; a write
under way as its log is copied is a torn last line, which a start drops, as it drops a write a kill cut short), then
``state.json`` is read again: a merge that changed it meanwhile (a log rotated, a base merged and the one before it
removed) has the live directory copied again. Both land as ``BACKUP_DIR`` and ``BACKUP_DIR.live`` (written as
``*.snapshot.tmp`` and renamed when complete), the path + ``.live`` that `spanseek serve --index BACKUP_DIR --writes`
reads by default: it serves every write acknowledged before the snapshot started.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from spanseek.core import integrity
from spanseek.core.io import unwritable
from spanseek.core.phrase_index import check_index
from spanseek.indexer.build import BuildError
from spanseek.indexer.live import BASES, STATE, WAL_DIR, default_live_dir, hold_index, link_copy, read_state
from spanseek.indexer.live_state import state_base, state_logs
from spanseek.indexer.wal import entry_ids, read_entries

TMP = ".snapshot.tmp"
ATTEMPTS = 5  # copies of the live directory tried while merges keep changing it


def snapshot_index(index: str | Path, out: str | Path, live_dir: str | Path | None = None) -> dict[str, Any]:
    """Copy ``index`` to ``out`` and its live directory (``live_dir``, by default the index path + ``.live``; none is
    copied where it holds no ``state.json``) to ``out`` + ``.live`` (module docstring); returns what was copied.
    BuildError when ``out`` (or its ``.live``) exists, ``out`` is or lies inside the index or the live directory
    (``refuse_inside``), or merges kept changing the live directory; LiveStoreError when an index command is
    changing ``index``."""
    index, out = Path(index), Path(out)
    live = Path(live_dir) if live_dir is not None else default_live_dir(index)
    live_out = default_live_dir(out)
    for path in (out, live_out):
        if path.exists() or path.is_symlink():
            raise BuildError(f"--out {out}: {path} exists; choose a new --out (a snapshot never overwrites one)")
    refuse_inside(out, index, live)
    t0 = time.perf_counter()
    tmp, live_tmp = out.with_name(out.name + TMP), live_out.with_name(live_out.name + TMP)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)  # (once renamed, nothing is left to remove)
        cleanup.callback(shutil.rmtree, live_tmp, ignore_errors=True)
        # (a folder on the way that is a file, one that cannot be made, or one that takes no new directory, as /proc
        # or /sys: named as --out's, not as the temporaries the copy writes first)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            for made in (tmp, live_tmp):
                shutil.rmtree(made, ignore_errors=True)  # what a killed snapshot left
                made.mkdir()
        except OSError as e:
            raise BuildError(f"--out {out}: {unwritable(out, e).strerror}") from None
        copy_index(index, tmp)
        manifest = check_index(tmp)  # the copy is the index, file by file, to the checksum
        state = copy_live(live, index, live_tmp) if (live / STATE).is_file() else None
        if state is not None:
            live_tmp.rename(live_out)
        tmp.rename(out)
    return {"index": str(out), "files": len(manifest.files or {}),
            "live_dir": str(live_out) if state is not None else None,
            "base": state.get("base") if state is not None else None,
            "logs": len(state["wals"]) if state is not None else 0,
            "seconds": round(time.perf_counter() - t0, 2)}


def refuse_inside(out: Path, index: Path, live: Path) -> None:
    """BuildError naming both paths when ``out`` is, or lies inside, the index or its live directory (symlinks
    followed): the copy would land among the files it copies (in a live directory, where a merge removes what its
    state no longer names, or at the path a server with writes over the index takes for its live directory)."""
    target = out.resolve()
    for what, path in (("the index", index), ("the live directory", live)):
        if target == path.resolve() or path.resolve() in target.parents:
            where = "is" if target == path.resolve() else "lies inside"
            raise BuildError(f"--out {out} {where} {what} {path}; write the snapshot somewhere else")


def copy_index(index: Path, dest: Path) -> None:
    """Link or copy ``index`` to ``dest`` (made anew) holding its writer lock shared: no index command changes it
    meanwhile. LiveStoreError naming the process that holds it exclusive (a change under way)."""
    from spanseek.core.phrase_index import Manifest

    Manifest.load(index)  # a clear error for a missing or unfinished index
    with hold_index(index, "run the snapshot again"):
        shutil.rmtree(dest, ignore_errors=True)  # what a killed snapshot left
        link_copy(index, dest)


def copy_live(live: Path, index: Path, dest: Path) -> dict[str, Any]:
    """Copy the live directory ``live`` (its writes made over ``index``) to ``dest`` as a start would read it (module
    docstring): the state, the base it names, the logs it lists. Returns the state copied."""
    for _ in range(ATTEMPTS):
        before = (live / STATE).read_bytes()
        state = read_state(live, index)  # LiveStoreError: a damaged state, or writes made over another index
        shutil.rmtree(dest, ignore_errors=True)
        (dest / WAL_DIR).mkdir(parents=True)
        (dest / BASES).mkdir()
        try:
            if state.get("base") is not None:
                link_copy(live / state["base"], dest / state["base"])
            for name in state["wals"]:
                shutil.copyfile(live / WAL_DIR / name, dest / WAL_DIR / name)
        except OSError as e:  # (shutil.Error too: copytree's list of the files it could not copy)
            if (live / STATE).read_bytes() != before:  # a merge removed what the state named: copied again
                continue
            if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
                # one line naming the first file, not copytree's list of (source, destination, why)
                src, _, why = e.args[0][0]
                raise OSError(f"{src}: cannot be copied: {why}") from None
            raise
        if (live / STATE).read_bytes() != before:
            continue
        (dest / STATE).write_bytes(before)
        check_live(dest, index, state)  # (the state read above: the bytes just written)
        integrity.fsync_path(dest)
        return json.loads(before)
    raise BuildError(f"{live}: merges changed it {ATTEMPTS} times while it was copied; run the snapshot again")


def check_live(live: Path, index: Path, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check the live directory ``live`` (its writes made over ``index``) as a start reads it: its state, the merged
    base it names (every file against its manifest's checksums) and every line of the write logs it lists (a torn
    last line, a write a kill cut short, is dropped as a start drops it). Returns ``{"state", "base": the served base's
    path, "logs": their paths, "writes": lines, "last": {document id: True where the last write naming it put it,
    False where it deleted it}}``. LiveStoreError: a damaged state, writes made over another index, a merged base or
    a log the state names missing; IndexFormatError: a damaged merged base; WalError: a log damaged before its last
    line (each naming the file). ``state``: the one ``read_state`` gave for ``live``, else read here."""
    state = read_state(live, index) if state is None else state
    base = state_base(live, state, index)
    if state.get("base") is not None:
        check_index(base)
    logs = state_logs(live, state)
    writes, last = 0, {}
    for path in logs:
        for entry in read_entries(path, repair=False):
            writes += 1
            for doc_id in entry_ids(entry):
                last[doc_id] = entry["op"] == "upsert"
    return {"state": state, "base": base, "logs": logs, "writes": writes, "last": last}
