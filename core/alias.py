"""Index aliases: a stable path that names the index directory in use, switched atomically.

An alias is either a symlink to an index directory (``ln -sfn index-v2 current``) or a small pointer file whose
first line is the index directory (relative paths are read from the file's folder). A plain index directory is
its own target. The service serves an alias and swaps indexes when it is switched (docs/service.md); switching
builds the new link or file beside the alias and renames it over the alias, so a reader sees the old target or
the new one, never a half-written one.

    spanseek index switch work/current work/index-v2      # point the alias at a new index
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

AliasKind = Literal["symlink", "pointer", "directory"]
POINTER_MAX_BYTES = 4096  # a pointer file holds one path; anything longer is not a pointer file


class AliasError(ValueError):
    """An alias is dangling, unreadable, or names something that is not a directory; the message names it."""


@dataclass(frozen=True)
class Resolved:
    """Where an alias points now: its kind and the real path of the index directory."""

    path: Path  # the alias (or directory) as given
    kind: AliasKind
    target: Path  # real path of the index directory (symlinks resolved)


def _read_pointer(path: Path) -> Path:
    """The directory a pointer file names. Errors name the file, never quote it: a path handed to the service's
    reload must not read any file back to its caller."""
    with open(path, "rb") as f:  # read, not stat: /proc and pipe-like files report a size of 0
        raw = f.read(POINTER_MAX_BYTES + 1)
    not_pointer = f"{path}: not an index directory or a pointer file (one line naming the index directory)"
    if len(raw) > POINTER_MAX_BYTES:
        raise AliasError(f"{not_pointer}; it holds over {POINTER_MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AliasError(f"{not_pointer}; it is not UTF-8 text") from None
    lines = text.splitlines()
    name = lines[0].strip() if lines else ""
    if not name:
        raise AliasError(f"{path}: an empty pointer file; its first line must name the index directory")
    if any(not ch.isprintable() for ch in name):
        raise AliasError(f"{not_pointer}; its first line holds control characters")
    return path.parent / name  # an absolute name replaces the parent


def resolve_alias(path: str | Path) -> Resolved:
    """Follow ``path`` (symlink, pointer file or directory) to the real index directory it names now.

    A path that does not exist is returned as a directory (opening it then says what is missing). Raises
    AliasError when a symlink dangles or a pointer file names no directory. One level
    of pointer file is followed (a pointer naming another pointer file is refused, so cycles cannot happen).
    """
    path = Path(path)
    kind: AliasKind = "symlink" if path.is_symlink() else "directory"
    if not path.exists():
        if kind == "symlink":  # its target as an absolute path (a relative one is read from the link's folder), as
            # every other path an error quotes: a caller without a key sees it cut to its last part (service.routes)
            gone = os.path.normpath(path.absolute().parent.resolve() / os.readlink(path))
            raise AliasError(f"{path}: a dangling symlink (it points to {gone}, which does not exist)")
        return Resolved(path, kind, path.absolute())  # opening it says what is missing and what to run
    target = path
    if path.is_file():  # (a symlink to a pointer file is read as that pointer file)
        kind = "pointer"
        target = _read_pointer(path.resolve())
        try:
            named = target.is_dir()
        except OSError:  # a line too long to be a path: the error would quote the file's text (any file's)
            named = False
        if not named:
            raise AliasError(f"{path}: the first line of this pointer file names no directory (it must hold the "
                             "index directory's path, relative to the file's folder or absolute)")
    return Resolved(path, kind, target.resolve())


def switch_alias(alias: str | Path, target: str | Path, pointer: bool | None = None) -> Resolved:
    """Point ``alias`` at the directory ``target`` atomically; returns the new resolution.

    An existing symlink stays a symlink and an existing pointer file a pointer file; a new alias is a symlink
    unless ``pointer``. The stored path is relative to the alias's folder when the target lies under it, so the
    alias still resolves when that folder is mounted elsewhere (a container volume). A real directory at
    ``alias``, or a file that is not a pointer file naming a directory, is refused rather than replaced.
    """
    alias, target = Path(alias), Path(target)
    if not target.is_dir():
        raise AliasError(f"{target}: no such directory")
    if alias.is_dir() and not alias.is_symlink():
        raise AliasError(f"{alias}: an index directory, not an alias; serve an alias (a symlink or pointer file) "
                         "to switch indexes without a restart")
    if alias.is_file() and not alias.is_symlink():  # only a pointer file naming a directory is replaced: one line
        try:  # of text alone could be anyone's file ("hi")
            resolve_alias(alias)
        except AliasError:
            raise AliasError(f"{alias}: a file that is not a pointer to an index directory; not replaced (give "
                             "a new path, or remove the file first)") from None
    if pointer is None:
        pointer = alias.is_file() and not alias.is_symlink()
    parent = alias.absolute().parent
    real = target.resolve()
    stored = os.path.relpath(real, parent.resolve()) if real.is_relative_to(parent.resolve()) else str(real)
    tmp = parent / f".{alias.name}.switch-{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    if pointer:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(stored + "\n")
            f.flush()
            os.fsync(f.fileno())
    else:
        tmp.symlink_to(stored, target_is_directory=True)
    os.replace(tmp, alias)  # rename(2): readers see the old alias or the new one
    return resolve_alias(alias)
