"""The directory a build writes into (``--out``): refusing one it would damage, holding its writer lock, and
removing what killed steps left there.

    spanseek index build --corpus corpus.jsonl --out INDEX_DIR ...     (indexer.build)

``--out`` must be new, empty or an unfinished build (``check_out_dir``); a build and a reindex hold its writer lock
(``build_lock``) for their life; ``remove_scratch`` clears temporaries before the manifest is written, and the encoded
shards after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from spanseek.core import integrity, phrase_index

SHARDS = integrity.SHARDS


class BuildError(RuntimeError):
    """The build cannot proceed; the message says why and what to do."""


@contextlib.contextmanager
def build_lock(out: Path, command: str = "build") -> Iterator[None]:
    """Hold ``out``'s writer lock (``core.integrity.writer_lock``, the one `index add`, `delete` and `compact` take)
    for a build's life: a second build into the same --out is refused at its start (``lock_refusal``) instead of
    mixing its files with the first's. A build refused before it wrote anything leaves no directory it created."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a parent not writable, a read-only file system: the one line, not a traceback
        raise BuildError(f"--out {out} cannot be made ({e.strerror}); choose another --out") from None
    with integrity.writer_lock(out) as locked:
        if not locked:
            raise lock_refusal(out, command, flag="--out", instead="choose another --out", otherwise="choose another --out")
        try:
            yield
        finally:
            if created and [p.name for p in out.iterdir()] == [integrity.LOCK]:
                (out / integrity.LOCK).unlink()
                out.rmdir()


def running_command(pid: int) -> str | None:
    """The `spanseek` command process ``pid`` runs (``spanseek index add``, ``spanseek serve``) from its command line
    (``/proc/PID/cmdline``: the program ``spanseek``, run itself or by Python, or ``python -m spanseek``), or None where
    it cannot be told (not Linux, another user's process hidden, not a `spanseek` command: a program given a path
    named ``spanseek`` as an argument is not one)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return None
    program = _spanseek_program(argv)
    if program is None:
        return None
    rest = argv[program + 1:]
    while rest[:1] in (["-v"], ["--verbose"]):  # `spanseek -v serve`: the program's flag (spanseek.cli) before its command
        rest = rest[1:]
    words = [w for w in rest[:2] if w]
    if not words or words[0].startswith("-"):
        return "spanseek"
    group = words[0] in ("index", "corpus", "train") and len(words) > 1 and not words[1].startswith("-")
    return "spanseek " + " ".join(words if group else words[:1])


def _spanseek_program(argv: list[str]) -> int | None:
    """Where the `spanseek` program stands in a command line: first (run itself), the script Python runs (its
    options before it), or the module after ``-m``; None for any other program."""
    if Path(argv[0]).name == "spanseek":
        return 0
    if not Path(argv[0]).name.startswith("python"):
        return None
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return i + 1 if argv[i + 1:i + 2] in (["spanseek"], ["spanseek.cli"]) else None
        if not arg.startswith("-"):  # the script (or, after an option taking a value, not a command to tell)
            return i if Path(arg).name == "spanseek" else None
    return None


def lock_refusal(index_dir: Path, command: str, instead: str = "send it the change as a write instead",
                 flag: str = "", otherwise: str = "") -> BuildError:
    """Why `spanseek index COMMAND` changed nothing, in one line: ``index_dir`` (given as ``flag``, --out for a build)
    is read-only, or another process holds its writer lock, named where the kernel's table of locks tells it, with
    the command it runs (``running_command``): a server with writes over the index, which holds it shared for its
    life (``instead``: what to do about that server), or another build or index command (wait for it to end;
    ``otherwise``: what else to do)."""
    subject = f"{flag} {index_dir}".lstrip()
    changed = f"`spanseek index {command}` changed nothing"
    if not os.access(index_dir, os.W_OK):
        return BuildError(f"{subject} is read-only; {changed}")
    # 0: how the kernel's table shows a holder this process cannot see (another container's, or one that ended
    # while a child it forked still holds the lock): no process to name
    pid = integrity.lock_holder(index_dir) or None
    running = running_command(pid) if pid is not None else None
    holder = "another process" if pid is None else f"process {pid}" + (f" (`{running}`)" if running else "")
    wait = f"wait for it to end{f', or {otherwise}' if otherwise else ''}"
    if running == "spanseek serve":
        why = f"a server with writes over it: {instead}"
    elif running is not None:
        why = wait
    else:
        why = (f"another `spanseek index` command or build ({wait}), or a server with writes over it "
               f"(`spanseek serve --writes`: {instead})")
    return BuildError(f"{subject}: {holder} holds its lock ({index_dir / integrity.LOCK}): {why}; {changed}")


def refuse_merged_base(index_dir: Path, command: str) -> None:
    """BuildError when ``index_dir`` is the merged base a live directory serves (``live_state.serving_live_dir``): a
    server with writes serves it with no lock held on it, its merges copy it, and servers following the live
    directory reload it when its manifest changes, so a change made there offline bypasses the write log (the writer
    keeps serving what it loaded) or lands in a half-copied merge. The change belongs to the index the writes were
    made over: add-lexical there gives this base the part too; documents change as writes."""
    from spanseek.indexer.live_state import serving_live_dir

    live = serving_live_dir(index_dir)
    if live is None:
        return
    index = live.with_name(live.name.removesuffix(".live")) if live.name.endswith(".live") else None
    target = str(index) if index is not None and (index / phrase_index.MANIFEST).is_file() else "INDEX"
    instead = (f"run `spanseek index add-lexical {target}` on the index its writes were made over, with the server "
               "stopped: it gives this base the part too" if command == "add-lexical" else
               "send the change to the server with writes as a write (PUT or DELETE /documents, `spanseek sync`), "
               "which merges it into a new base")
    raise BuildError(f"{index_dir} is the merged base that the live directory {live} serves (made by a server with "
                     f"writes), not an index to change offline: {instead}; `spanseek index {command}` changed nothing")


def check_out_dir(out: Path, corpus: Path) -> None:
    """Refuse an ``out`` the build would damage: a finished index, a file, a directory holding the corpus, or one
    that holds other files and no unfinished build (the build writes its stores there and removes ``*.tmp``).

    An unfinished build is recognised by its ``shards`` directory, or, killed before its first shard, by nothing
    but scratch (the temporary passage and document stores); such a directory is resumed.
    """
    if (out / phrase_index.MANIFEST).exists() and (out / SHARDS).is_dir():  # killed once its manifest was written
        raise BuildError(f"--out {out} already holds a finished index: the build there was stopped once the index was "
                         "complete (the shards it kept are removed when it is next opened); nothing needs a rerun. "
                         "To build another, remove it or choose another --out")
    refuse_finished(out)
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file, not a directory; choose another --out")
    if (above := next((p for p in out.parents if p.exists()), None)) is not None and not above.is_dir():
        raise BuildError(f"--out {out} cannot be made: {above} is a file, not a directory; choose another --out")
    out_dir = out.resolve()
    if any(out_dir == d or out_dir in d.parents for d in (corpus.absolute().parent.resolve(), corpus.resolve().parent)):
        raise BuildError(f"--corpus {corpus} is inside --out {out}, where the build writes the index's files; "
                         "choose another --out")
    if not out.is_dir() or (out / SHARDS).is_dir():
        return
    own = tuple(f".{name}." for name in (phrase_index.PASSAGES, phrase_index.DOCS))  # atomic_path's temporaries of the stores
    others = sorted(p.name for p in out.iterdir() if not (
        p.name in integrity.SCRATCH_DIRS or p.name in integrity.SCRATCH_FILES
        or (p.name.startswith(own) and p.name.endswith(".tmp"))))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise BuildError(f"--out {out} is not empty ({shown}) and is neither an index nor an unfinished build of "
                         "one; choose a new or empty directory")


def remove_scratch(out: Path) -> None:
    """Remove what killed writes left in ``out``: ``*.tmp`` files and shard directories, an old build state; the
    encoded shards too once the manifest is written (until then a killed build resumes from them)."""
    for path in out.iterdir():
        if path.name == integrity.BUILD_STATE or (path.is_file() and path.name.endswith(".tmp")):
            path.unlink()
    shards = out / SHARDS
    if (out / phrase_index.MANIFEST).is_file():
        shutil.rmtree(shards, ignore_errors=True)
        shutil.rmtree(out / integrity.IVF_BLOCKS, ignore_errors=True)
    elif shards.is_dir():
        for path in shards.glob("*.tmp"):
            shutil.rmtree(path, ignore_errors=True)


def refuse_finished(out: Path) -> None:
    """BuildError when ``out`` already holds a finished index (its manifest)."""
    if (out / phrase_index.MANIFEST).exists():
        raise BuildError(f"--out {out} already holds a finished index; remove it or choose another --out")
