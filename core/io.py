"""Corpus and question-set IO, and atomic file writes.

Corpus format (JSON Lines, one document a line): ``{"id": str, "title": str, "paragraphs": [str, ...]}`` (an id
that is a whole number is read as its digits, ``true`` is refused; a line without one takes its line number), an
optional ``"meta"`` object (any JSON: a URL, a date, tags) and an optional ``"passage_meta"`` list of objects, one
per paragraph (``{"page": 3}``, a heading path; null or ``{}`` for none), which the index stores and returns with hits
(a passage's own keys over its document's). Metadata comes back with every hit, so a document whose ``meta`` or
one of whose ``passage_meta`` objects is longer than ``MAX_META_BYTES`` as JSON, or holds a number that is not a
finite float (NaN, Infinity, an integer beyond about ±1.8e308, which filters cannot compare), is refused, naming it.
Questions are SQuAD-format JSON, optionally gzipped. ``spanseek corpus from-squad IN --out OUT`` converts. Both are
UTF-8 (a leading BOM is allowed).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import glob
import gzip
import json
import logging
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from spanseek.core.filters import unfit_number, value_text
from spanseek.core.ids import new_id

log = logging.getLogger(__name__)
MAX_META_BYTES = 16 * 1024  # a metadata object as JSON: a URL, dates, tags and a heading path fit many times over
# levels of objects and lists in a metadata object (the object itself is the first): the service's JSON renderer of
# answers stops at 255 levels, hits and all, so deeper metadata made every answer holding the document fail
MAX_META_DEPTH = 64


class CorpusError(ValueError):
    """A corpus or question file is malformed; the message names the file and line, and ``field`` the document's
    field at fault (``id``, ``title``, ``paragraphs``, ``meta``, ``passage_meta``) where there is one."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    paragraphs: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)  # carried into the index's document store, returned with hits
    line: int = field(default=0, compare=False)  # its line in the corpus file (0: not read from one)
    id_from_line: bool = field(default=False, compare=False)  # its line had no id: ``id`` is the line number
    # one metadata object per paragraph (a page, a heading path), stored with each passage; () when none has any
    passage_meta: tuple[dict[str, Any], ...] = ()

    def paragraph_meta(self, i: int) -> dict[str, Any]:
        """The metadata of paragraph ``i`` (``{}`` when it has none)."""
        return self.passage_meta[i] if self.passage_meta else {}


@dataclass
class ReadStats:
    """Counts of what a reader skipped, reported by the indexer."""

    documents: int = 0
    paragraphs: int = 0
    empty_documents: int = 0
    empty_paragraphs: int = 0

    @property
    def lines(self) -> int:
        """The documents read, with text or without (the corpus's non-blank lines)."""
        return self.documents + self.empty_documents


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: tuple[str, ...]
    answer_starts: tuple[int | None, ...]  # each answer's character in the context as given (None: none given)
    title: str
    context: str
    doc_index: int  # index of the article in the file
    para_index: int  # index of the paragraph within its article
    doc_id: str | None = None  # the gold document's corpus id, where the question file names it (else by title)


@dataclass
class SquadArticle:
    title: str
    paragraphs: list[dict[str, Any]] = field(default_factory=list)


def open_text(path: str | Path, mode: str = "rt") -> IO[str]:
    """Open a UTF-8 text file, transparently gunzipping ``*.gz``; reading drops a leading BOM."""
    path = Path(path)
    encoding = "utf-8-sig" if "r" in mode else "utf-8"  # utf-8-sig would also *write* a BOM
    if path.suffix == ".gz":
        return gzip.open(path, mode, encoding=encoding)  # type: ignore[return-value]
    return open(path, mode, encoding=encoding)


# what a write refused for want of room raises: no space left on the device, the user's quota spent, or a file over
# the size limit
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextlib.contextmanager
def naming(path: str | Path, temporary: Path | None = None) -> Iterator[None]:
    """Raise a write's ``NO_SPACE`` error that names no file (a file object's write, ``np.save``: "[Errno 28] No
    space left on device"), or names ``path``'s ``temporary``, or is a library's RuntimeError saying so (faiss's
    ``write_index``), as an OSError naming ``path``: the message says which file could not be written, as the user
    knows it, and why in the system's words (no space left, the quota spent, or the file size limit reached:
    ``ulimit -f``)."""
    try:
        yield
    except RuntimeError as e:  # a C++ library's words for it (faiss: "... write error in PATH.tmp: 3014611 != 10403328
        code = space_error(e)  # (No space left on device)")
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from e
    except OSError as e:
        if e.errno is None and _NUMPY_NO_SPACE.match(str(e)):  # numpy's tofile, which allocates first or writes short
            code = errno.EFBIG if _at_size_limit(temporary or Path(path)) else errno.ENOSPC
            raise OSError(code, f"{os.strerror(code)} ({e})", str(path)) from e
        if e.errno not in NO_SPACE or e.filename not in (None, str(temporary)):
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


# numpy's words for a full disk: its allocation refused ("Not enough free space to write 96 bytes after offset 128"),
# or, where it allocates nothing first (tmpfs, a file size limit), its write cut short ("8125824 requested and 1521600
# written", in items)
_NUMPY_NO_SPACE = re.compile(r"Not enough free space to write|\d+ requested and \d+ written$")


def _at_size_limit(path: Path) -> bool:
    """Whether ``path`` has grown to the process's file size limit (RLIMIT_FSIZE, ``ulimit -f``): a write cut short
    there met the limit, not a full disk (numpy's words for a short write name neither)."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    try:
        return limit != resource.RLIM_INFINITY and path.stat().st_size >= limit
    except OSError:
        return False


def space_error(error: BaseException) -> int | None:
    """The ``NO_SPACE`` error number of a write refused for want of room, whichever library raised it: an OSError,
    an error raised while handling one (torch.save into a file object: "unexpected pos 768 vs 662"), or an error that
    only carries the system's words in its text (safetensors: "I/O error: No space left on device (os error 28)";
    faiss: "(File too large)"); None for any other error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return seen.errno
        if not isinstance(seen, OSError):
            for code in NO_SPACE:
                if os.strerror(code) in str(seen):
                    return code
        seen = seen.__cause__ or seen.__context__
    return None


def no_space(error: BaseException) -> bool:
    """Whether ``error`` is a write refused for want of room (``NO_SPACE``, ``space_error``)."""
    return space_error(error) is not None


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only if the block succeeds (the temporary
    file is removed either way). An existing ``path`` that is no regular file nor folder (``/dev/null``, ``/dev/stdout``,
    a named pipe), or a link to a file the process holds open (``/dev/stdout`` redirected to a file, ``/dev/fd/N``), is
    written in place: renaming over it would replace the device, pipe or link with a file.

    A folder or temporary that cannot be made, or a temporary the block cannot open, is an OSError naming ``path``
    (the path the caller was given) and why, never the hidden temporary: ``out/m.json: cannot be written: out is a
    file, not a folder``; so is a write the disk has no room for."""
    path = Path(path)
    if _written_in_place(path):
        with naming(path):
            yield path
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise unwritable(path, e) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with naming(path, tmp_path):
            try:
                yield tmp_path
            except OSError as e:
                if e.filename is None or Path(os.fsdecode(e.filename)) != tmp_path or e.filename2 is not None:
                    raise
                raise unwritable(path, e) from None
        os.chmod(tmp_path, 0o644)  # mkstemp makes 0600; results are meant to be shared (e.g. a service user)
        os.replace(tmp_path, path)  # its error names ``path`` as filename2
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _written_in_place(path: Path) -> bool:
    """Whether ``path`` exists and is, its links followed, neither a regular file nor a folder (a device, a pipe or a
    socket), or is reached through a link to a file a process holds open (``/dev/stdout`` -> ``/proc/self/fd/1``, a
    shell's ``> m.json``), open or closed: renaming over such a link would replace the link, not write the file it
    stands for (a closed one is then refused, as it is opened)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return True
    for _ in range(40):  # (the kernel's own bound on a chain of links)
        folder = Path(os.path.realpath(path.parent))
        if folder.name == "fd" and folder.parts[:2] == ("/", "proc"):  # /proc/PID/fd/N: an open file's link
            return True
        if not path.is_symlink():
            return False
        path = path.parent / os.readlink(path)
    return False


def write_faiss(index: Any, path: str | Path) -> None:
    """Write the faiss ``index`` (or quantiser) to ``path`` atomically (``atomic_path``): a full disk is an OSError
    naming ``path`` (not faiss's own words about a hidden temporary), and neither a half-written file nor an older
    ``path`` replaced by one is left. Every faiss file of an index is written through it."""
    import faiss

    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))


def given_path(path: str, flag: str, file: bool = False) -> str:
    """``path``, given as the command's ``flag`` (``--questions``), when it exists; else FileNotFoundError naming the
    flag with it, ``--questions q.json: No such file or directory``, before a model is loaded for it (a command's
    line named the path alone, and left the user to find which of its files it was). ``file``: the flag takes a file,
    and a directory is refused as well, ``--questions runs/: a directory, not a file``."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), f"{flag} {path}")
    if file and os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file", f"{flag} {path}")
    return path


@contextlib.contextmanager
def naming_flag(flag: str | None, *kinds: type[Exception]) -> Iterator[None]:
    """The errors of ``kinds`` raised inside, their message led by ``flag``, the command's flag (or setting) that gave
    the path they name: ``--index work/idx: no such index directory``, as ``given_path`` names a missing file's flag
    (the path alone left the user to find which of the command's paths it was). Each kind takes its message as its
    one argument. ``flag`` None (a path given as an operand, or by a library caller): they are left as they are."""
    try:
        yield
    except kinds as e:
        if flag is None:
            raise
        raise type(e)(f"{flag} {e}") from None


def check_writable(path: str | Path) -> None:
    """Raise the OSError that writing a file or folder at ``path`` would meet, naming ``path`` (``unwritable``): a
    folder on its way that is a file, or a folder that refuses a new entry (read-only, not the user's). Found before a
    long job starts, not at its end. A directory that is there is written into; else its nearest folder that is. A
    path written in place (``atomic_path``: ``/dev/null``, ``/dev/stdout``, a named pipe) needs only to be writable
    itself: its folder (``/dev``) takes no new entry but root's."""
    path = Path(path)
    if _written_in_place(path):
        if not os.access(path, os.W_OK):
            raise unwritable(path, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
        return
    # the folders below the nearest one that exists are made
    folder = path if path.is_dir() else next(p for p in path.absolute().parents if os.path.lexists(p))
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise unwritable(path, e) from None
    os.close(fd)
    os.unlink(probe)


def other_files(directory: str | Path, own: Iterable[str]) -> str:
    """The files in ``directory`` other than ``own`` and hidden ones (a desktop's or a file system's own), as a
    refusal to write among them lists them: the first three, then ``...``; empty when there are none (or no
    directory)."""
    path, own = Path(directory), set(own)
    other = sorted(p.name for p in path.iterdir() if p.name not in own and not p.name.startswith(".")) \
        if path.is_dir() else []
    return ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")


def check_overwrite(flag: str, path: str | Path | None, key: str, what: str) -> None:
    """ValueError naming ``flag`` when ``path`` is a file that is not ``what`` an earlier run wrote (a JSON object
    with ``key``), which writing the command's output over it would destroy: another command's input, a model's
    config. An empty file, or none (``path`` None too), is fine."""
    if path is not None and Path(path).is_file() and not _json_with(Path(path), key):
        raise ValueError(f"{flag} {path} exists and is not {what} (a JSON object with {key!r}); it is left alone: "
                         "write to a new file, or remove it first")


def _json_with(path: Path, key: str) -> bool:
    """Whether ``path`` is empty or a JSON object with ``key``."""
    if path.stat().st_size > 64 << 20:  # no file of ours that this guards is this large: a corpus, an index's file
        return False
    try:
        text = path.read_text(encoding="utf-8")
        return not text.strip() or key in (json.loads(text) if text.lstrip().startswith("{") else {})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, RecursionError):
        return False


def unwritable(path: Path, error: OSError) -> OSError:
    """``error``, met writing ``path`` (or a temporary beside it), as an OSError of its kind that names ``path``: the
    folder on its way that is a file, else the system's reason (``Permission denied``, ``Read-only file system``)."""
    existing = next((p for p in path.absolute().parents if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        return NotADirectoryError(errno.ENOTDIR, f"cannot be written: {existing} is a file, not a folder", str(path))
    return OSError(error.errno, f"cannot be written: {error.strerror or error}", str(path))


REPLACED = "replaced-"  # in the names of the old copies replace_dir moves aside: no name a user would give a backup


def replace_dir(tmp: Path, out: Path) -> None:
    """Put the finished directory ``tmp`` at ``out``; an old ``out`` is moved aside first (to a new hidden name,
    ``.OUT.replaced-XXXXXXXX.old``, so no backup of the user's, ``out.old`` or another hidden one, is ever touched)
    and removed only after, with any that a removal stopped midway left (``remove_replaced``)."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.{REPLACED}", suffix=".old", dir=out.parent))
        old.rmdir()  # the name is reserved for this call; rename needs it free
        out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            old.rename(out)  # the old directory back where it was, not left under its hidden name
            raise
    else:
        tmp.rename(out)
    remove_replaced(out)


def remove_replaced(out: Path) -> None:
    """Remove the old copies of ``out`` that ``replace_dir`` moved aside and a stopped removal (Ctrl-C, a kill)
    left, once ``out`` is in place: never while it is missing, when one of them may be the only copy (a kill between
    the two renames). One that cannot be removed (its permissions) is left with a warning: the save that found it
    goes on. The earlier name of those copies, ``.OUT.XXXXXXXX.old``, is never removed: nothing proves such a one
    ours (a user's hidden backup ``.OUT.20261201.old`` has that name, and a copy of ``out``'s files too), and
    removing a backup loses data where a leftover costs only space (docs/indexing.md tells users how to find them)."""
    if not out.is_dir():
        return
    moved_aside = re.compile(rf"\.{re.escape(out.name)}\.{REPLACED}[a-z0-9_]{{8}}\.old")  # tempfile.mkdtemp's names
    for path in out.parent.glob(f".{glob.escape(out.name)}.{REPLACED}*.old"):
        if moved_aside.fullmatch(path.name) and path.is_dir() and not path.is_symlink():
            try:
                shutil.rmtree(path)
            except OSError as e:
                log.warning("%s: an old copy of %s could not be removed (%s); remove it by hand", path, out,
                            e.strerror or e)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty directory beside ``path`` (``path.tmp``; what a process killed outright left there is removed
    first) to write a directory's files into; put it at ``path`` (``replace_dir``) only if the block succeeds. A block
    that fails or is stopped (Ctrl-C) removes it, so neither a half-written ``path.tmp`` is left nor an older
    ``path`` replaced."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    remove_replaced(path)  # what a stopped replace left: room on the disk before the new copy is written
    try:
        tmp.mkdir(parents=True)
        yield tmp
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON at ``path``, atomically; a number that is not finite (NaN, infinity: a rank
    correlation of constant scores) is written as null, which every JSON reader takes (``NaN`` is not JSON)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_finite(obj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _finite(obj: Any) -> Any:
    """``obj`` with every float that is not finite replaced by None (in nested dicts, lists and tuples)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def new_memmap(path: str | Path, dtype: Any, shape: tuple[int, ...]) -> np.memmap:
    """``np.lib.format.open_memmap(path, "w+", ...)`` with the file's blocks allocated before a row is written: a
    memory map of a sparse file that the disk has no room for kills the process with SIGBUS when a page is written
    (no message, no clean-up); allocated first, a full disk is an OSError naming ``path`` here instead."""
    with naming(path):
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        if hasattr(os, "posix_fallocate"):  # (not on macOS: there the map is written as it is)
            try:
                with open(path, "r+b") as f:
                    os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # (a file system that cannot)
                    del mm
                    raise
    return mm


def save_npy_atomic(path: str | Path, array) -> None:
    """np.save to ``path`` atomically (np.save on a file object adds no suffix)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def decode_line(path: str | Path, lineno: int, raw: bytes, final: bool = True) -> str:
    """Line ``lineno`` of a UTF-8 file as text, a BOM at the start of line 1 dropped; CorpusError naming the file
    and line if it is not UTF-8. With ``final`` False, a character cut off at the end is left out."""
    if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return codecs.utf_8_decode(raw, "strict", final)[0]
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}:{lineno}: not UTF-8 (byte {e.start} of the line, 0x{raw[e.start]:02x}); "
                          "save the file as UTF-8") from None


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file (a leading BOM dropped), gunzipping ``*.gz``; bad bytes or a damaged
    gzip stream raise CorpusError naming the file and line."""
    path = Path(path)
    for lineno, raw in raw_lines(path):
        yield lineno, decode_line(path, lineno, raw)


def raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a file, gunzipping ``*.gz``; a damaged gzip stream raises CorpusError naming the file
    and line."""
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            for lineno, raw in enumerate(f, start=1):
                yield lineno, raw
    except gzip.BadGzipFile as e:
        raise CorpusError(f"{path}: not a gzip file ({e}); remove the .gz suffix if it is plain text") from None
    except EOFError:
        raise CorpusError(f"{path}:{lineno + 1}: the gzip stream ends early (a truncated file); "
                          "copy or compress it again") from None
    except FileNotFoundError:
        raise
    except IsADirectoryError:  # (no line of it was read: "path:1: cannot be read ([Errno 21] ...)" said one was)
        raise CorpusError(f"{path}: a directory, not a file") from None
    except (OSError, zlib.error) as e:
        raise CorpusError(f"{path}:{lineno + 1}: cannot be read ({e})") from None


def read_head(path: str | Path, size: int = 65536) -> str:
    """The text in the first ``size`` bytes of a UTF-8 file (gunzipped if ``*.gz``, a leading BOM dropped), to
    sniff its format; CorpusError naming the file (and line, for bytes that are not UTF-8) if it cannot be read."""
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            raw = f.read(size)
    except gzip.BadGzipFile as e:
        raise CorpusError(f"{path}: not a gzip file ({e}); remove the .gz suffix if it is plain text") from None
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise CorpusError(f"{path}: a directory, not a file") from None
    except (OSError, EOFError, zlib.error) as e:
        raise CorpusError(f"{path}: cannot be read ({e})") from None
    lines = raw.split(b"\n")
    whole = len(raw) < size  # else the last line may end inside a character
    return "\n".join(decode_line(path, n, line, final=whole or n < len(lines)) for n, line in enumerate(lines, 1))


class _NotFinite(ValueError):
    """NaN, Infinity or a number too large for a float in a corpus line: not JSON, and not printable as JSON."""


def loads_json(text: str, where: str, whole_file: bool = False, **hooks: Any) -> Any:
    """``json.loads(text, **hooks)``; CorpusError starting with ``where`` for JSON it cannot read (the line and column
    of a syntax error: a ``whole_file`` is often one line, so the column is what finds the place), NaN or Infinity
    (refused by ``hooks``), an integer longer than Python converts, or nesting too deep."""
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError as e:
        # e.msg may end in "at" ("Unterminated string starting at"): the position completes it
        at = f"line {e.lineno}, column {e.colno}" if whole_file else f"column {e.colno}"
        raise CorpusError(f"{where}: invalid JSON ({e.msg.removesuffix(' at')} at {at})") from None
    except _NotFinite as e:
        raise CorpusError(f"{where}: invalid JSON ({e} is not a finite number)") from None
    except ValueError:  # the one other ValueError of json.loads: int() refusing a literal over the limit
        raise CorpusError(f"{where}: invalid JSON (an integer of more than {sys.get_int_max_str_digits()} digits, "
                          "too long to read as a number; write it as a string)") from None
    except RecursionError:
        raise CorpusError(f"{where}: JSON nested too deeply to read") from None


def _refuse_constant(name: str) -> float:
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def read_corpus(path: str | Path, stats: ReadStats | None = None) -> Iterator[Document]:
    """Stream documents from a JSONL corpus, skipping (and counting) empty paragraphs and documents.

    Raises CorpusError naming the file and line for invalid JSON (NaN, Infinity and integers too long to read
    included), bytes that are not UTF-8, a damaged gzip stream or a wrong shape (``document_from_json``).
    """
    stats = stats if stats is not None else ReadStats()
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = loads_json(line, where, parse_constant=_refuse_constant, parse_float=_finite_float)
        doc = document_from_json(obj, where, lineno, stats, len(line))
        if doc is not None:
            yield doc


_INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp")  # control and format characters and spaces: nothing to read or answer
_VISIBLE_ASCII = re.compile(r"[!-~]")


def has_text(text: str) -> bool:
    """Whether ``text`` has a character to read: not only whitespace, control characters and invisible format
    characters (zero-width spaces and joiners, soft hyphens, bidi marks)."""
    if text.isascii():
        return _VISIBLE_ASCII.search(text) is not None
    return not all(unicodedata.category(c) in _INVISIBLE for c in text)


def document_from_json(obj: Any, where: str, lineno: int = 0, stats: ReadStats | None = None,
                       size: int | None = None) -> Document | None:
    """The corpus document of one JSON value (a corpus line, or a document sent to ``PUT /documents``), empty
    paragraphs (no character to read: ``has_text``) dropped; None (counted in ``stats``) when none is left. Raises CorpusError starting with ``where``
    and naming the field for a wrong shape, text that is not valid Unicode, or metadata over MAX_META_BYTES
    (``size``: the JSON's length in characters, when known, skips that check for short lines)."""
    stats = stats if stats is not None else ReadStats()
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    paragraphs = obj.get("paragraphs")
    if not isinstance(paragraphs, list) or not all(isinstance(p, str) for p in paragraphs):
        raise CorpusError(f"{where}: 'paragraphs' must be a list of strings", "paragraphs")
    doc_id = obj.get("id", str(lineno))
    if type(doc_id) not in (str, int):  # type(): true and false are ints to isinstance
        raise CorpusError(f"{where}: 'id' must be a string (a whole number is read as its digits), got "
                          f"{_json_type(doc_id)}", "id")
    title = obj.get("title", "")
    if not isinstance(title, str):
        raise CorpusError(f"{where}: 'title' must be a string, got {_json_type(title)}", "title")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise CorpusError(f"{where}: 'meta' must be a JSON object, got {type(meta).__name__}", "meta")
    passage_meta = obj.get("passage_meta") or [None] * len(paragraphs)
    if (not isinstance(passage_meta, list) or len(passage_meta) != len(paragraphs)
            or not all(m is None or isinstance(m, dict) for m in passage_meta)):
        raise CorpusError(f"{where}: 'passage_meta' must be a list of JSON objects (or nulls), one per paragraph "
                          f"({len(paragraphs)})", "passage_meta")
    if isinstance(doc_id, str) and not doc_id.strip():
        raise CorpusError(f"{where}: 'id' is blank; give each document an id with a visible character", "id")
    _check_meta(where, doc_id, [("meta", "'meta'", meta)] + [
        ("passage_meta", f"'passage_meta' {i}", m) for i, m in enumerate(passage_meta) if m],
        size is None or 4 * size > MAX_META_BYTES, size is None or size > 2 * MAX_META_DEPTH)
    for i, text in enumerate([str(doc_id), title, *paragraphs]):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            key = ("id", "title")[i] if i < 2 else "paragraphs"
            part = f"'{key}'" if i < 2 else f"paragraph {i - 2}"
            raise CorpusError(f"{where}: {part} holds an unpaired surrogate ({text[e.start]!a}), "
                              "which is not valid Unicode text", key) from None
    keep = [i for i, p in enumerate(paragraphs) if has_text(p)]
    kept = tuple(paragraphs[i] for i in keep)
    kept_meta = tuple(passage_meta[i] or {} for i in keep) if any(passage_meta) else ()
    stats.empty_paragraphs += len(paragraphs) - len(kept)
    if not kept:
        stats.empty_documents += 1
        return None
    stats.documents += 1
    stats.paragraphs += len(kept)
    return Document(id=str(doc_id), title=title, paragraphs=kept, meta=meta, line=lineno, passage_meta=kept_meta,
                    id_from_line="id" not in obj)


def _check_meta(where: str, doc_id: object, metas: list[tuple[str, str, dict[str, Any]]], may_be_large: bool,
                may_be_deep: bool = True) -> None:
    """CorpusError naming the document and the key when one of its metadata objects holds a number that is not a
    finite float (NaN, Infinity: a merge's corpus reader would refuse it; an integer beyond a float's range, which
    the field index and filters cannot compare) or an unpaired surrogate (not valid Unicode text), or, where
    ``may_be_large`` (a line short enough cannot be), is over MAX_META_BYTES as JSON, or, where ``may_be_deep``,
    is nested more than MAX_META_DEPTH levels deep."""
    for key, name, meta in metas:  # (the document's field, how the message names it, the metadata)
        if may_be_deep and nesting_depth(meta) > MAX_META_DEPTH:
            raise CorpusError(f"{where}: document {doc_id!r}: its {name} is nested more than {MAX_META_DEPTH} levels "
                              "deep (objects and lists); keep metadata flat enough to filter on and return with hits",
                              key)
        unfit = _first_unfit_number(meta)
        if unfit is not None:
            at, value = unfit
            raise CorpusError(f"{where}: document {doc_id!r}: its {name} holds a number that is not finite as a float "
                              f"({value_text(value)}, at {at}); filters compare metadata numbers as floats, so each "
                              "must be finite and within about ±1.8e308", key)
        try:
            size = len(json.dumps(meta, ensure_ascii=False).encode("utf-8"))
        except UnicodeEncodeError as e:
            raise CorpusError(f"{where}: document {doc_id!r}: its {name} holds an unpaired surrogate "
                              f"({e.object[e.start]!a}), which is not valid Unicode text", key) from None
        if may_be_large and size > MAX_META_BYTES:
            raise CorpusError(f"{where}: document {doc_id!r}: its {name} is {size} bytes as JSON, over the limit of "
                              f"{MAX_META_BYTES} (metadata is returned with every hit; keep large values such as "
                              "full texts or images out of it)", key)


def nesting_depth(value: Any) -> int:
    """Levels of objects and lists in a JSON value (a scalar: 0, ``{"a": [1]}``: 2), counted without recursion:
    metadata may be nested as deep as the JSON parser reads."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _first_unfit_number(meta: dict[str, Any]) -> tuple[str, Any] | None:
    """The place (``["year"]``, ``["tags"][2]``) and value of the first number in ``meta`` that has no finite float
    (``unfit_number``), or None. Iterative: metadata may be nested as deep as the JSON parser reads."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), meta)]
    while stack:
        at, value = stack.pop()
        if isinstance(value, dict):
            stack += reversed([((*at, k), v) for k, v in value.items()])
        elif isinstance(value, list):
            stack += reversed([((*at, i), v) for i, v in enumerate(value)])
        elif unfit_number(value):
            return "".join(f"[{json.dumps(k)}]" for k in at), value  # (ASCII: a key may hold a lone surrogate)
    return None


def without_nonfinite(value: Any) -> Any:
    """``value`` (parsed JSON) with every number that has no finite float (NaN, Infinity, an integer beyond about
    ±1.8e308) made null: for documents written before such numbers were refused, whose log still holds them."""
    if unfit_number(value):
        return None
    if isinstance(value, dict):
        return {k: without_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nonfinite(v) for v in value]
    return value


def unique_ids(docs: Iterable[Document], path: str | Path, existing: Iterable[str] = (),
               existing_name: str = "") -> Iterator[Document]:
    """Pass ``docs`` through, raising CorpusError (file and line) at a document id seen before in ``path`` or
    among the ``existing`` ids (``existing_name`` says where those are). An id's Unicode spellings are one id
    (``core.ids``: "café" composed or decomposed), compared by the composed one."""
    held = {new_id(i) for i in existing}
    seen: dict[str, tuple[int, bool]] = {}  # (line, id_from_line) of each id: not the document, so none is kept
    for doc in docs:
        key = new_id(doc.id)
        if key in held:
            raise CorpusError(f"{path}:{doc.line}: {_id_of(doc)} is already in {existing_name}")
        if (first := seen.get(key)) is not None:
            line, from_line = first
            used = (f"was already given on line {line} to the document there, which has no id (a document "
                    "without one takes its line number)" if from_line else f"was already used on line {line}")
            raise CorpusError(f"{path}:{doc.line}: {_id_of(doc)} {used}; document ids must be unique")
        seen[key] = (doc.line, doc.id_from_line)
        yield doc


def _id_of(doc: Document) -> str:
    """A document's id as an error names it: one its line did not give is said to be the line number."""
    if doc.id_from_line:
        return f"this document has no id, and its line number, {doc.id!r}, which it takes as its id,"
    return f"document id {doc.id!r}"


def check_corpus(path: str | Path, existing: Iterable[str] = (), existing_name: str = "") -> ReadStats:
    """Read every document of the JSONL corpus ``path`` once, keeping none: the CorpusError (file and line) of the
    first that ``read_corpus`` or ``unique_ids`` refuses (invalid JSON, a wrong shape, metadata numbers a filter
    cannot compare, an id used twice or among ``existing``), so a command that encodes the corpus refuses it before
    it loads a model, not at the line once the passages before it are encoded. Returns what was read (``ReadStats``:
    the documents and passages with text, and those skipped), so the pass that encodes the corpus needs no other
    read to know its size."""
    stats = ReadStats()
    for _ in unique_ids(read_corpus(path, stats), path, existing, existing_name):
        pass
    return stats


def write_corpus(path: str | Path, docs: Iterable[Document]) -> int:
    """Write documents as JSONL (gzipped if the name ends in .gz), atomically. Returns the count."""
    n = 0
    path = Path(path)
    with atomic_path(path) as tmp:
        opener = gzip.open(tmp, "wt", encoding="utf-8") if path.suffix == ".gz" else open(tmp, "w", encoding="utf-8")
        with opener as f:
            for d in docs:
                f.write(json.dumps(document_json(d), ensure_ascii=False))
                f.write("\n")
                n += 1
    return n


def document_json(doc: Document) -> dict[str, Any]:
    """A document as one corpus line's JSON object (``meta`` and ``passage_meta`` only when given)."""
    out: dict[str, Any] = {"id": doc.id, "title": doc.title, "paragraphs": list(doc.paragraphs)}
    if any(doc.passage_meta):
        out["passage_meta"] = list(doc.passage_meta)
    if doc.meta:
        out["meta"] = doc.meta
    return out


SQUAD_SHAPE = ("SQuAD-format question files are one JSON object: {\"data\": [{\"title\": ..., \"paragraphs\": "
               "[{\"context\": ..., \"qas\": [{\"id\": ..., \"question\": ..., \"answers\": [{\"text\": ..., "
               "\"answer_start\": ...}]}]}]}]} (docs/training.md shows how to convert questions kept in other forms)")


def load_squad(path: str | Path) -> list[dict[str, Any]]:
    """Load the ``data`` list of a SQuAD-format file (optionally gzipped), checking its shape (``check_squad``). An
    empty file, JSON Lines, CSV and a JSON list are refused as what they are, with the shape that is wanted."""
    text = "".join(line for _, line in read_lines(path))
    if not text.strip():
        raise CorpusError(f"{path}: the file is empty; {SQUAD_SHAPE}")
    try:
        obj = loads_json(text, str(path), whole_file=True)
    except CorpusError:
        other = _other_format(text)
        if other is None:
            raise
        raise CorpusError(f"{path}: {other}, not SQuAD-format JSON; {SQUAD_SHAPE}") from None
    if isinstance(obj, list):
        raise CorpusError(f"{path}: a JSON list, not SQuAD format; {SQUAD_SHAPE}")
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        raise CorpusError(f"{path}: not SQuAD format (expected an object with a 'data' list); {SQUAD_SHAPE}")
    check_squad(data, path)
    return data


def _other_format(text: str) -> str | None:
    """What a question file that is not JSON looks like: JSON Lines (its first line a whole JSON object), or comma-
    or tab-separated values (a first line of several fields, not JSON); None when it looks like neither."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        first = json.loads(lines[0])
    except (ValueError, RecursionError):
        first = None
    if isinstance(first, dict) and len(lines) > 1:
        return f"JSON Lines (one object a line, the first with the keys {', '.join(map(repr, list(first)[:6]))})"
    if first is None and not lines[0].lstrip().startswith(("{", "[")):
        for sep, name in (("\t", "tab"), (",", "comma")):
            if sep in lines[0]:
                return f"{name}-separated values (a first line of {len(lines[0].split(sep))} fields)"
    return None


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true or false", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _wrong(path: str | Path, where: str, obj: Any, key: str, want: str) -> CorpusError:
    """The CorpusError for ``obj[key]`` (at ``where`` in ``path``) that is missing or not ``want``."""
    if not isinstance(obj, dict):
        return CorpusError(f"{path}: {where}: must be an object (got {_json_type(obj)})")
    got = f"got {_json_type(obj[key])}" if key in obj else "missing"
    return CorpusError(f'{path}: {where}: "{key}" must be {want} ({got})')


def check_squad(data: list[Any], path: str | Path) -> None:
    """Raise CorpusError at the first part of a SQuAD ``data`` list of the wrong type, naming the file and the place
    (``data[0].paragraphs[2].qas[5]``). Checked: articles' ``title`` (optional) and ``paragraphs``; paragraphs'
    ``context`` and ``qas`` (both optional); questions' ``question``, ``id`` (optional) and ``answers`` (optional,
    may be empty as in SQuAD v2); answers' ``text`` and ``answer_start`` (optional). Other keys are not read."""
    for i, art in enumerate(data):
        if not isinstance(art, dict) or not isinstance(art.get("title", ""), str):
            raise _wrong(path, f"data[{i}]", art, "title", "a string")
        if not isinstance(art.get("paragraphs"), list):
            raise _wrong(path, f"data[{i}]", art, "paragraphs", "a list")
        for j, para in enumerate(art["paragraphs"]):
            if not isinstance(para, dict) or not isinstance(para.get("context", ""), str):
                raise _wrong(path, f"data[{i}].paragraphs[{j}]", para, "context", "a string")
            if not isinstance(para.get("qas", []), list):
                raise _wrong(path, f"data[{i}].paragraphs[{j}]", para, "qas", "a list")
            # The hot loop (87,599 questions in SQuAD train): no enumerate, and type() rather than isinstance (json
            # gives exact types; it also keeps out a bool where an int is wanted); positions are found on error.
            for qa in para.get("qas", ()):
                if type(qa) is not dict or type(qa.get("question")) is not str:
                    raise _wrong(path, _place(i, j, para, qa), qa, "question", "a string")
                if type(qa.get("id", "")) not in (str, int):
                    raise _wrong(path, _place(i, j, para, qa), qa, "id", "a string")
                answers = qa.get("answers") or []  # SQuAD v2: empty for unanswerable questions
                if type(answers) is not list:
                    raise _wrong(path, _place(i, j, para, qa), qa, "answers", "a list")
                for ans in answers:
                    if type(ans) is not dict or type(ans.get("text")) is not str:
                        raise _wrong(path, _place(i, j, para, qa, ans), ans, "text", "a string")
                    if type(ans.get("answer_start", 0)) is not int:
                        raise _wrong(path, _place(i, j, para, qa, ans), ans, "answer_start", "a whole number")


_QUESTION = object()  # _place's ``ans`` when the place is the question's own


def _place(i: int, j: int, para: dict[str, Any], qa: Any, ans: Any = _QUESTION) -> str:
    """Where question ``qa`` (and its answer ``ans``) of ``data[i].paragraphs[j]`` is, found by identity: the first
    match is the one, as any earlier identical item would have failed the check first."""
    k = next(k for k, x in enumerate(para["qas"]) if x is qa)
    if ans is _QUESTION:
        return f"data[{i}].paragraphs[{j}].qas[{k}]"
    return f"data[{i}].paragraphs[{j}].qas[{k}].answers[{next(m for m, x in enumerate(qa['answers']) if x is ans)}]"


def squad_documents(data: list[dict[str, Any]]) -> Iterator[Document]:
    """Each SQuAD article as a corpus document, its paragraphs in order (empty ones kept out later)."""
    for i, art in enumerate(data):
        title = art.get("title", f"article-{i}")
        yield Document(id=str(i), title=title, paragraphs=tuple(p.get("context", "") for p in art["paragraphs"]))


def squad_questions(data: list[dict[str, Any]], keep: Callable[[int], bool] | None = None) -> list[Question]:
    """Flatten a SQuAD ``data`` list into questions with their gold context, title and position; with ``keep``, those
    of the articles ``i`` where ``keep(i)`` (a split's), each still placed by its article's index in ``data`` (as a
    message names it: ``data[12].paragraphs[3]``, not its place among the articles kept)."""
    out: list[Question] = []
    for di, art in enumerate(data):
        if keep is not None and not keep(di):
            continue
        title = art.get("title", f"article-{di}")
        for pi, para in enumerate(art["paragraphs"]):
            ctx = para.get("context", "")
            for qa in para.get("qas", []):
                answers = qa.get("answers") or []
                out.append(
                    Question(
                        id=str(qa.get("id", f"{di}-{pi}-{len(out)}")),
                        question=qa["question"],
                        answers=tuple(a["text"] for a in answers),
                        answer_starts=tuple(a.get("answer_start") for a in answers),  # (ints: checked above)
                        title=title,
                        context=ctx,
                        doc_index=di,
                        para_index=pi,
                    )
                )
    return out


def from_squad(in_path: str | Path, out_path: str | Path) -> int:
    """Convert a SQuAD-format file into a JSONL corpus (one document per article). Returns the count."""
    if Path(out_path).resolve() == Path(in_path).resolve():
        raise CorpusError(f"{out_path} is the SQuAD file to read; write the corpus somewhere else")
    data = load_squad(in_path)
    if not data:
        raise CorpusError(f"{in_path}: no articles (its 'data' list is empty)")
    missing = [(i, j) for i, art in enumerate(data) for j, para in enumerate(art["paragraphs"]) if "context" not in para]
    if missing:  # optional in the format, but a passage with no text: nothing to index, nothing to answer from
        i, j = missing[0]
        log.warning("%s: %d paragraph%s without a \"context\" (the first: data[%d].paragraphs[%d]) become empty "
                    "passages, which the index leaves out", in_path, len(missing), "s" * (len(missing) != 1), i, j)
    return write_corpus(out_path, squad_documents(data))
