"""Checksums of an index directory's files, the names of its scratch files, and an exclusive lock for writers.

A finished index records, in its manifest, the size and a streamed xxh3-128 checksum of every file under its
directory except the manifest and scratch (build shards, add staging, journals, ``*.tmp``), so a store added
later (by a build step) is covered without naming it here. ``check_files`` compares a directory with that record;
``spanseek index verify`` and every index load use it (``PhraseIndex``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import xxhash

CHECKSUM = "xxh3_128"
CHUNK_BYTES = 8 << 20  # streamed: memory stays flat whatever the file size

# Scratch: present only while a build or an add runs (or after one was killed); never part of a finished index.
SHARDS = "shards"  # build: encoded shards
BUILD_STATE = "build_state.json"  # build: written by earlier versions
STAGING = "add.staging"  # add: the new documents' build
JOURNAL = "add.journal.json"  # add: written once every new file is complete; names them and the new manifest
ADD_SUFFIX = ".add.tmp"  # add: the new version of a file, renamed over it when the journal is there
LOCK = "index.lock"  # writers' exclusive lock
IVF_BLOCKS = "ivf_blocks"  # build --on-disk: the trained index and the per-block indexes merged into index.ivfdata
SCRATCH_DIRS = (SHARDS, STAGING, IVF_BLOCKS)
SCRATCH_FILES = (BUILD_STATE, JOURNAL, LOCK)


def is_scratch(rel: str) -> bool:
    """Whether a path relative to the index directory is scratch (see the module docstring)."""
    parts = Path(rel).parts
    name = parts[-1]
    return (parts[0] in SCRATCH_DIRS or name in SCRATCH_FILES or name.endswith(".tmp")
            or any(p.endswith(".tmp") for p in parts[:-1]))


def file_digest(path: str | Path, hasher: Callable[[], Any] = xxhash.xxh3_128, chunk: int = CHUNK_BYTES) -> str:
    """Hex digest of a file (xxh3-128 unless another ``hashlib``-style ``hasher``), read in ``chunk`` blocks."""
    h = hasher()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """xxh3-128 hex digest of a string's UTF-8 bytes (lone surrogates kept, so no text is refused)."""
    return xxhash.xxh3_128(text.encode("utf-8", "surrogatepass")).hexdigest()


def index_files(index_dir: Path, exclude: tuple[str, ...] = ()) -> list[str]:
    """Relative paths (POSIX) of the regular files under ``index_dir`` that are not scratch or ``exclude``d."""
    out = []
    for path in sorted(index_dir.rglob("*")):
        rel = path.relative_to(index_dir).as_posix()
        if path.is_file() and not is_scratch(rel) and rel not in exclude:
            out.append(rel)
    return out


def describe_files(index_dir: Path, exclude: tuple[str, ...] = (), replaced: Mapping[str, Path] | None = None,
                   kept: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", CHECKSUM}}`` for every file of ``index_dir``.

    ``replaced`` maps a relative path to the file or directory that will take its place (an add's ``*.add.tmp``):
    it is described under the final name, whether or not the name exists yet; a directory replaces every file
    under the old one. ``kept``: the recorded files of the index before a change; a file the change does not
    replace keeps its record (of the same size) instead of being read again, so a file damaged before the change
    is still found damaged after it, not recorded afresh as it now is.
    """
    paths = {rel: index_dir / rel for rel in index_files(index_dir, exclude)}
    for rel, new in (replaced or {}).items():
        paths = {k: v for k, v in paths.items() if not (k == rel or k.startswith(rel + "/"))}
        if new.is_dir():
            paths.update({f"{rel}/{p.relative_to(new).as_posix()}": p for p in new.rglob("*") if p.is_file()})
        else:
            paths[rel] = new
    out = {}
    for rel in sorted(paths):
        size, record = paths[rel].stat().st_size, (kept or {}).get(rel)
        digest = (record[CHECKSUM] if isinstance(record, dict) and paths[rel] == index_dir / rel
                  and record.get("bytes") == size and CHECKSUM in record else file_digest(paths[rel]))
        out[rel] = {"bytes": size, CHECKSUM: digest}
    return out


def check_files(index_dir: Path, files: Mapping[str, Any], contents: bool = True) -> list[str]:
    """Problems of ``index_dir`` against its recorded ``files``, each naming the file (empty when it matches).

    Sizes are always compared; ``contents`` also re-reads every file for its checksum.
    """
    problems = []
    for rel, rec in files.items():
        path = index_dir / rel
        if not isinstance(rec, dict) or not isinstance(rec.get("bytes"), int):
            problems.append(f"{index_dir / 'manifest.json'}: malformed file record for {rel}")
        elif not path.is_file():
            problems.append(f"{path}: index is incomplete ({rel} missing)")
        elif path.stat().st_size != rec["bytes"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, the manifest records {rec['bytes']} "
                            "(truncated or replaced)")
        elif contents and file_digest(path) != rec.get(CHECKSUM):
            problems.append(f"{path}: checksum mismatch (the file is damaged)")
    return problems


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory with every file under it, to stable storage."""
    if path.is_dir():
        for sub in path.iterdir():
            fsync_path(sub)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_holder(index_dir: Path, name: str = LOCK) -> int | None:
    """The id of the process that holds ``index_dir``'s writer lock (the file ``name``), from the kernel's table of
    locks (``/proc/locks``; nothing is written to tell it), for a refusal to name the writer; None where it cannot be
    told (no such table: not Linux; the lock is free; a file system that names the file otherwise)."""
    try:
        st = (index_dir / name).stat()
        with open("/proc/locks", encoding="ascii") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError):
        return None
    file_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1281 fe:00:2211959 0 EOF" (a waiter's has "->" after "1:")
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == file_id and fields[4].isdigit():
            return int(fields[4])
    return None


class LockUnsupported(OSError):
    """A writer lock on a file system that does not lock files (``flock``): raised, not taken as held."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


@contextlib.contextmanager
def writer_lock(index_dir: Path, wait: bool = False, name: str = LOCK, shared: bool = False) -> Iterator[bool]:
    """Hold ``index_dir``'s exclusive writer lock (the file ``name``) while open; yields False when another process
    holds it (and ``wait`` is False) or the directory is read-only; LockUnsupported where its file system cannot
    lock files. The lock dies with its process, so a killed writer never leaves it held.

    ``shared``: hold it shared instead, beside other shared holders but never beside an exclusive one: what a
    process takes to keep the writers out while it reads the whole index (a server with writes over it, a
    snapshot); a lock file that exists is taken so even where it cannot be written (a read-only mount)."""
    try:
        fd = os.open(index_dir / name, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise
        try:
            fd = os.open(index_dir / name, os.O_RDONLY) if shared else -1
        except OSError:
            fd = -1
        if fd < 0:
            yield False
            return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError as e:  # NFS without its lock service, some FUSE mounts: no lock, so no telling who writes
            raise LockUnsupported(e.errno, f"cannot be locked ({e.strerror}): its file system does not lock files "
                                  "(flock), so a second writer could not be told from the first: use a local "
                                  "file system", str(index_dir / name)) from None
        yield True
    finally:
        os.close(fd)  # closing releases the lock
