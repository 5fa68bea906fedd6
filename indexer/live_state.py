"""A live directory's state as the index commands read it: which index its writes were made over, the base it serves.

    spanseek index add-lexical INDEX_DIR          # (indexer.lexical) gives the merged base it names the lexical part too
    spanseek index delete --index INDEX_DIR ...   # (indexer.add.locked_index) refused while it holds writes over it

``indexer.live`` (the store of a server with writes) writes ``state.json``; the index commands only read it, so this
module imports none of theirs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanseek.core.integrity import file_digest, text_digest
from spanseek.core.phrase_index import CHECKSUM_FIELD, LEXICAL, MANIFEST

STATE = "state.json"
BASES = "bases"
WAL_DIR = "wal"


class LiveStoreError(RuntimeError):
    """The live directory cannot be used (a damaged state file or log); the message names the file."""


def default_live_dir(index: str | Path) -> Path:
    """The live directory of ``index`` where none is given (``SPANSEEK_LIVE_DIR``): its path with ``.live`` appended."""
    return Path(index).with_name(Path(index).name + ".live")


def index_digest(index: str | Path) -> str | None:
    """What identifies the index a live directory's writes were made over: a digest of its ``manifest.json`` (which
    names every file's checksum) without its lexical (BM25) part, its record, files and the manifest's creation
    time, which `spanseek index add-lexical` rewrites without changing a document, passage or vector that the writes
    and merged bases are made over (their BM25 terms are made again, with the base's analyzer, as the log is
    replayed at start). None where there is none (not an index: opening it says why)."""
    try:
        fields = json.loads((Path(index) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(fields, dict):
        return None
    kept = {k: v for k, v in fields.items() if k not in ("lexical", "created", CHECKSUM_FIELD)}
    if isinstance(kept.get("files"), dict):
        kept["files"] = {rel: v for rel, v in kept["files"].items() if rel.split("/")[0] != LEXICAL}
    return text_digest(json.dumps(kept, sort_keys=True))


def legacy_index_digest(index: str | Path) -> str | None:
    """The digest of the whole of an index's ``manifest.json``: what a live directory's ``state.json`` recorded of
    its index before ``index_digest`` left the lexical part out (taken as the same index, and recorded anew)."""
    try:
        return file_digest(Path(index) / MANIFEST)
    except OSError:
        return None


def read_state(live_dir: Path, index: str | Path) -> dict[str, Any]:
    """The live directory's state (``{"index": digest, "base": path or None, "wals": [names], ...}``), or the
    initial one over ``index``; LiveStoreError when its writes were made over another index than ``index``."""
    path = live_dir / STATE
    digest = index_digest(index)
    if not path.is_file():
        return {"index": digest, "base": None, "wals": ["wal-000001.jsonl"], "merges": 0}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LiveStoreError(f"{path}: cannot be read ({e}); restore it, or move the live directory away") from None
    if not isinstance(state, dict) or not isinstance(state.get("wals"), list):
        raise LiveStoreError(f"{path}: not a live directory's state (no list of write logs); restore it, or move the "
                             "live directory away")
    base = state.get("base")
    in_bases = isinstance(base, str) and Path(base).parent == Path(BASES) and _file_name(Path(base).name)
    absolute = isinstance(base, str) and Path(base).is_absolute()  # as the previous version wrote it (below)
    if not (base is None or in_bases or absolute) or not all(_file_name(w) for w in state["wals"]):
        raise LiveStoreError(f"{path}: not a live directory's state (its base is not a merged base of its bases/ "
                             "folder, or its write logs are not file names of its wal/ folder); restore it, or move "
                             "the live directory away")
    if not state["wals"]:  # a store writes to the last log it lists, so every state it writes lists one
        raise LiveStoreError(f"{path}: not a live directory's state (its list of write logs is empty, where it always "
                             "names the log written to); restore it, or move the live directory away")
    if base is not None and Path(base).is_absolute():  # as the previous version wrote it: the index given, or a
        # merged base of this directory (found by name where both moved together)
        merged = Path(BASES, Path(base).name)
        state["base"] = str(merged) if Path(base).parent.name == BASES and (live_dir / merged).is_dir() else None
    made_over = state.get("index")  # absent in a state written before it was recorded: taken as this index
    if made_over is not None and digest is not None and made_over not in (digest, legacy_index_digest(index)):
        if not holds_writes(live_dir, state):  # nothing served from it would be lost: it is this index's from now on
            return {**state, "index": digest}
        merged = " and the base its merges made from the earlier one" if state.get("base") is not None else ""
        raise LiveStoreError(
            f"{path}: its writes{merged} were made over another index than {index} (whose manifest.json has changed "
            f"since: rebuilt, replaced or changed offline), and would be served in its place; serve the index they "
            f"were made over, or move {live_dir} away to serve {index} without them")
    return state


def _file_name(name: object) -> bool:
    """Whether ``name`` names a file inside a folder (a merged base in bases/, a log in wal/): not a path leading
    elsewhere (``../x``, ``..``), nor empty."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name


def current_form(state: dict[str, Any], index: str | Path) -> dict[str, Any]:
    """``state`` (as ``read_state`` took it over ``index``) as this version records it: the index by ``index_digest``,
    where a state of the previous version recorded ``legacy_index_digest`` (which `spanseek index add-lexical`, by
    rewriting the manifest, would no longer match) or none. A start records it so, and so does add-lexical."""
    return {**state, "index": index_digest(index) or state.get("index")}


def serving_live_dir(base: str | Path) -> Path | None:
    """The live directory whose ``state.json`` names ``base`` as the merged base it serves (``LIVE_DIR/bases/NAME``),
    or None: no lock keeps the index commands out of it (a server with writes holds its index's), so they ask this."""
    path = Path(base).resolve()
    live = path.parent.parent
    if path.parent.name != BASES:
        return None
    try:
        named = json.loads((live / STATE).read_text(encoding="utf-8")).get("base")
    except (OSError, ValueError, AttributeError):  # no state, a damaged one (a start says so), not an object
        return None
    return live if isinstance(named, str) and (live / named).resolve() == path else None


def holds_writes(live_dir: str | Path, state: dict[str, Any]) -> bool:
    """Whether a live directory in ``state`` holds writes: a merged base, or a write log with an entry (a server
    with writes that took none leaves an empty log)."""
    if state.get("base") is not None:
        return True
    logs = (Path(live_dir) / WAL_DIR / str(name) for name in state.get("wals", []))
    return any(log.is_file() and log.stat().st_size > 0 for log in logs)


def writes_made_over(index: str | Path, live_dir: str | Path | None = None) -> Path | None:
    """The live directory (``live_dir``, else the index path + ``.live``) when it holds writes (``holds_writes``) a
    server made over ``index`` (``read_state``): a change of the index's documents would have its next start refuse
    it, with every write it holds; None otherwise."""
    live = Path(live_dir) if live_dir is not None else default_live_dir(index)
    if not (live / STATE).is_file():
        return None
    try:
        state = read_state(live, index)
    except LiveStoreError:  # made over another index already (or damaged): a start says so; a change loses nothing
        return None
    return live if holds_writes(live, state) else None


def state_base(live_dir: str | Path, state: dict[str, Any], index: str | Path) -> Path:
    """The base ``state`` names: a merged base under the live directory (a path relative to it; an absolute one in
    a state written before), or the index given (None)."""
    base = state.get("base")
    if base is None:
        return Path(index).resolve()
    path = (Path(live_dir) / base).resolve()  # an absolute path stays itself
    if not path.is_dir():
        raise LiveStoreError(f"{Path(live_dir) / STATE} names the merged base {base}, which is missing (a copy of "
                             "the live directory taken while a merge swapped its base, or the base removed); restore "
                             "the live directory whole (`spanseek index snapshot` copies it consistently), or move "
                             f"{live_dir} away to serve {index} without its writes")
    return path


def state_logs(live_dir: Path, state: dict[str, Any]) -> list[Path]:
    """The write logs ``state`` lists, in order; LiveStoreError naming the first one missing where ``state.json``
    exists (every log it lists was made before it was listed: a missing one was moved or deleted, and its writes
    with it)."""
    logs = [live_dir / WAL_DIR / name for name in state["wals"]]
    missing = [p for p in logs if not p.is_file()] if (live_dir / STATE).is_file() else []
    if missing:
        raise LiveStoreError(f"{missing[0]}: the write log {live_dir / STATE} lists is missing, and the writes it "
                             "held with it; put it back, or move the live directory away to serve the base index "
                             "without them")
    return logs
