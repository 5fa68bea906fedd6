"""The write-ahead log of live writes: one JSON object a line, each flushed and fsynced before it is acknowledged.

    {"op": "upsert", "docs": [{"id": ..., "title": ..., "paragraphs": [...], ...}, ...]}
    {"op": "delete", "ids": ["a", "b"]}

A line is one write, applied whole or not at all: an upsert of many documents is one line, and a delete by filter is
logged as the ids it matched when it was applied (so replaying it deletes the same documents, whatever was written
after). A kill -9 while a line is written leaves it without its newline or cut in its JSON: that write was never
acknowledged, and ``replay`` drops it and truncates the file there, so later appends start on a clean line. A bad
line before the last one is damage, not a torn write: ``WalError`` names the file and line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.core.integrity import fsync_path


class WalError(RuntimeError):
    """A write-ahead log is damaged before its last line; the message names the file and line."""


def read_entries(path: Path, repair: bool = True) -> Iterator[dict[str, Any]]:
    """The entries of the log ``path`` in order; a torn last line is dropped (and cut off the file if ``repair``)."""
    if not path.is_file():
        return
    with open(path, "rb") as f:
        data = f.read()
    pos, lineno = 0, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        lineno += 1
        line = data[pos:] if end < 0 else data[pos:end]
        try:
            entry = json.loads(line.decode("utf-8")) if end >= 0 else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            entry = None
        if not _is_entry(entry):
            if data.find(b"\n", end + 1 if end >= 0 else len(data)) >= 0:
                raise WalError(f"{path}:{lineno}: not a log entry, and lines follow it: the log is damaged (restore "
                               "it, or move it away to start from the base index)")
            if repair:  # the torn last write of a killed process: never acknowledged
                with open(path, "r+b") as f:
                    f.truncate(pos)
                    os.fsync(f.fileno())
            return
        yield entry
        pos = end + 1


def _is_entry(entry: Any) -> bool:
    """Whether a line's JSON is a log entry: an upsert of documents (objects with an id) or a delete of ids; what a
    start (and ``entry_ids``) reads of it is there."""
    if not isinstance(entry, dict):
        return False
    if entry.get("op") == "upsert":
        docs = entry.get("docs")
        return isinstance(docs, list) and all(isinstance(d, dict) and "id" in d for d in docs)
    return entry.get("op") == "delete" and isinstance(entry.get("ids"), list)


def entry_ids(entry: dict[str, Any]) -> list[str]:
    """The document ids a log entry names: those an upsert puts, or those a delete removes."""
    return [str(d.get("id")) for d in entry["docs"]] if entry["op"] == "upsert" else [str(i) for i in entry["ids"]]


class WriteAheadLog:
    """Appends entries to one log file, each fsynced before ``append`` returns."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115  (held open for the process's life)
        self._size = os.fstat(self._file.fileno()).st_size
        self._torn = False  # a failed append's part may follow the last whole line (its cut failed too)
        if new:
            fsync_path(path.parent)  # the new file's name is durable too

    def append(self, entry: dict[str, Any]) -> int:
        """Write ``entry`` as one line and fsync it; returns the log's size in bytes.

        A write or fsync that fails (no space left on the device) raises an OSError naming the log, and the log is
        cut back to its last whole line: the refused write is never replayed, and the next line starts clean.
        """
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        fd = self._file.fileno()
        try:
            if self._torn:
                self._cut(fd)
            view = memoryview(line)
            while view:  # (a write may take part of the line, then fail with the next)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            self._torn = True
            with contextlib.suppress(OSError):  # (cutting a file needs no space; should it fail, the next append cuts)
                self._cut(fd)
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        self._size += len(line)
        return self._size

    def _cut(self, fd: int) -> None:
        os.ftruncate(fd, self._size)
        os.fsync(fd)
        self._torn = False

    @property
    def size(self) -> int:
        return self._size

    def close(self) -> None:
        self._file.close()
