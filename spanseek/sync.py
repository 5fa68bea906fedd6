"""`spanseek sync`: make a running service's documents those of a folder's files, through ``PUT /files/{name}``.

    spanseek sync docs/ --url http://localhost:8000 [--api-key-file FILE] [--delete] [--meta team=docs] [--dry-run]

The files are those `spanseek corpus from-files` reads (the same walk: .txt .text .md .markdown .html .htm .pdf .docx .pptx .epub .odt .odp
.fodt .fodp .xlsx .xlsm .ods .fods .csv .tsv .eml .rtf,
hidden files and folders skipped; a link to a file outside its folder is refused, named, unless ``--follow-links``,
and of a file and a link to it only the file is sent), and each is named as from-files names it: its path relative to the folder given
(``guide/install.md``), or as given for a file named on the command line. A file is written (the server reads it as
from-files does) unless the service holds a document of that id whose ``sha256`` metadata is the file's: each
written document records the SHA-256 of the bytes sent (read once, so a file saved during the sync is not recorded
with another version's hash), ``synced_from``, the ``--source`` name (default: the first path's name and a hash of
the absolute paths given, ``docs@1f0c9a2e``: two folders named alike are two sources), and ``sync_meta``, a digest of
``--meta`` (changed, every file is written again). What the service holds is read once, before the files: one
``GET /documents?meta=synced_from=SOURCE`` a thousand documents at a time (ids and metadata, no passages), and
``GET /documents/{id}?meta_only=true`` for a file whose id that list lacks (of each file, from a server older than that
list; for ``LIST_ALL_FROM`` such files or more, ``GET /documents`` of every document instead, when the service holds at
most ten for each). Up to ``--jobs`` files are sent at once, each awaiting its answer. A document another ``--source`` wrote is
not replaced (the file is refused, naming that source), nor is a second file of the same name in one run; but with
the default ``--source``, a document whose ``synced_from`` is the first path's bare name (the default before the hash)
and whose id is a file of this run is this sync's, and written once more to record the new name (so that a later
``--delete`` removes it when its file is gone). With ``--delete``, the documents an earlier sync with that
``synced_from`` wrote whose files are gone are deleted (one ``POST /documents/delete``; of those the listing held
when the run began: not one that another run of the folder wrote meanwhile); it deletes nothing when a
folder could not be read, or when no file was found at all (an empty or unmounted folder). A file the server or the
sync refuses (no text, damaged, too large, unreadable: 413, 415, 422) is reported and the others go on; ``--strict``
stops at it: no file after it is sent and nothing is deleted, but the writes already sent are answered, and every
file refused before the run stopped is reported with the counts. Each run prints the files it writes and deletes as it goes, then how many it wrote, left alone, deleted
and refused; the exit status is 0 when it did its work, 1 when a file was refused or ``--delete`` held back, or the
server could not be reached or refused the run (a wrong key, writes off, a write not answered in time), 2 for a usage
error (a flag or path that is wrong: nothing was sent), 130 when stopped by Ctrl-C or SIGTERM. A run stopped part way
(Ctrl-C or SIGTERM, the server gone) says in its last line how many files it had written of how many. ``--dry-run``
reads each file it would write as the server does, within the server's limits (``GET /info`` → ``service.files``:
its size, tokens, title, and the memory and time its reading may take), and reports the files the server would refuse
(the document read checked with the metadata the write gives it, as the write checks it). The
server answers a
file's write once it has read and encoded it: ``--timeout`` (an hour) is how long the sync waits for one answer.

The server needs writes on (``spanseek serve --writes``) and the write key: ``--api-key-file`` (or
``SPANSEEK_API_KEY_FILE``), ``SPANSEEK_API_KEY``, or ``--api-key``, which ``ps`` shows to every user of the machine
(warned of).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from spanseek.indexer.options import (
    DEFAULT_READ_MEMORY,
    DEFAULT_READ_TIMEOUT_S,
    FOLLOW_LINKS_HELP,
    PASSAGE_FIELDS_HELP,
)

if TYPE_CHECKING:
    from spanseek.core.config import EncoderConfig
    from spanseek.core.io import Document
    from spanseek.indexer.ingest import IngestOptions

SOURCE_KEY, HASH_KEY = "synced_from", "sha256"
SETTINGS_KEY = "sync_meta"  # a digest of the --meta a document was written with: changed, the file is written again
MAX_KEPT_IDS = 10_000  # ids one filter's doc_ids list may hold (core.filters); a delete lists the kept ones in such lists
# the server's refusals of one file (not sent in time, too large, no reader, unreadable): the rest go on
REFUSED_STATUSES = (408, 413, 415, 422)
LIST_ALL_FROM = 10  # files of ids this source does not hold from which the service's documents are listed, not asked
# files' writes awaiting their answers at once: the server's default --max-file-uploads (more are answered 429)
DEFAULT_JOBS = 4


class StrictStop(ValueError):
    """``strict``: the run stopped at a refused file, which the message names; the run's report holds every file
    refused before it stopped, and the answers of the writes sent before it."""


class DeleteRefused(ValueError):
    """``delete``: the server refused the request that deletes the documents of gone files (too large for its body
    limit), after the run's writes: the run failed, not its command line (`spanseek sync` exits 1)."""


@dataclass(frozen=True)
class FileLimits:
    """What the server refuses a file for, as its ``GET /info`` publishes them (``service.files``), which a dry run
    checks each file against: its size (``max_file_bytes``; None: not published), its model tokens
    (``max_file_tokens``, counted with the ``tokenizer`` of that backbone; 0: no limit), and the memory and time its
    reading may take (``file_read_memory_bytes``; ``file_read_timeout_s``, here CPU seconds), and the longest title
    of a document it writes (``max_title_chars``; None: not published). A server that does not publish them is taken
    to have its defaults' reading limits."""

    max_file_bytes: int | None = None
    max_file_tokens: int = 0
    read_memory_bytes: int = DEFAULT_READ_MEMORY
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    tokenizer: str | None = None
    max_title_chars: int | None = None

    @classmethod
    def of_server(cls, client: Any) -> FileLimits:
        """The limits ``client``'s server publishes (``GET /info`` → ``service.files``); the defaults' when it does
        not (a server older than them)."""
        files = (client.info().get("service") or {}).get("files") or {}
        given = {"max_file_bytes": files.get("max_file_bytes"), "max_file_tokens": files.get("max_file_tokens"),
                 "read_memory_bytes": files.get("file_read_memory_bytes"),
                 "read_timeout_s": files.get("file_read_timeout_s"), "tokenizer": files.get("tokenizer"),
                 "max_title_chars": files.get("max_title_chars")}
        return cls(**{name: value for name, value in given.items() if value is not None})

    def too_large(self, size: int) -> str | None:
        """Why the server refuses a file of ``size`` bytes (413), or None."""
        if self.max_file_bytes is None or size <= self.max_file_bytes:
            return None
        return f"{size:,} bytes, more than its max_file_bytes ({self.max_file_bytes:,})"

    def refusal(self, read: FileTokens | str | None, doc_id: str, replacing: bool = False) -> str | None:
        """Why the server refuses a file read as ``read`` (``_unreadable``: its document and tokens, or why it is
        unreadable, or None where this host cannot read it) and written under ``doc_id`` (``replacing``: a document
        the service holds under it): unreadable, more tokens than ``max_file_tokens``, or a document the write refuses
        (``core.written.file_document``: a title over ``max_title_chars``, front matter whose metadata a write cannot
        hold); None if none of these."""
        from spanseek.core.io import CorpusError
        from spanseek.core.written import file_document

        if read is None or isinstance(read, str):
            return read
        if self.max_file_tokens and read.tokens > self.max_file_tokens:
            counted = "" if not read.in_words or self.tokenizer is None else (
                f"; counted a token a word, as this host lacks the server's tokenizer {self.tokenizer}: it counts more")
            return f"{read.tokens:,} tokens, more than its max_file_tokens ({self.max_file_tokens:,}){counted}"
        try:
            file_document(read.doc, doc_id, doc_id, self.max_title_chars, replacing)
        except CorpusError as e:
            return str(e)
        return None

    @property
    def reading_config(self) -> EncoderConfig | None:
        """The model whose tokenizer the dry run's reading process cuts passages and counts tokens with: the server's
        (``tokenizer``) where this host has it (an installed ``package:NAME``, a directory), as the server cuts and
        counts a file (a long paragraph's overlapping windows are counted in its tokens); else None, one token a word,
        which the server's tokenizer gives at least (a file of more words than ``max_file_tokens`` is refused)."""
        from spanseek.core.backbones import resolve_backbone
        from spanseek.core.config import EncoderConfig

        try:
            if self.tokenizer is not None and Path(resolve_backbone(self.tokenizer)).is_dir():
                return EncoderConfig(backbone=self.tokenizer)
        except Exception:  # (not installed here) counted in words
            pass
        return None


class FileTokens(NamedTuple):
    """A file read as the server reads it, in the dry run's reading process (``_unreadable``): its model tokens
    (``indexer.read_process.document_tokens``), ``in_words``: counted a token a word (this host lacks the server's
    tokenizer), and its document, with the metadata the write gives it."""

    tokens: int
    in_words: bool
    doc: Document


@dataclass
class SyncReport:
    """What a sync did: ids written, left alone (unchanged), deleted, and refused (id, the reason); ``not_deleted``
    says why ``--delete`` deleted nothing, when it held back."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # the first 1,000 (``deleted_total``: how many)
    deleted_total: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)
    not_deleted: str | None = None
    adopted: list[str] = field(default_factory=list)  # documents synced under the former default name, taken over
    former: str | None = None  # that name
    files: int = 0  # the files found

    def stopped(self) -> str:
        """What a run that stopped part way had done, and how to go on."""
        return (f"stopped after writing {len(self.written)} of {self.files} files (unchanged "
                f"{len(self.unchanged)}, refused {len(self.refused)}, deleted {self.deleted_total}); the same command "
                f"goes on from there")

    def summary(self, dry_run: bool = False) -> str:
        would = "would write" if dry_run else "wrote"
        line = (f"{would} {len(self.written)}, unchanged {len(self.unchanged)}, "
                f"{'would delete' if dry_run else 'deleted'} {self.deleted_total}, refused {len(self.refused)}")
        held_back = [f"  nothing deleted: {self.not_deleted}"] if self.not_deleted else []
        adopted = [f"  {len(self.adopted)} of these documents were synced under the former default name "
                   f"{self.former!r}: taken as this sync's and written once more under its name"
                   ] if self.adopted else []
        lines = "\n".join([line, *(f"  refused {doc_id}: {why}" for doc_id, why in self.refused), *held_back,
                           *adopted])
        # a name that is not UTF-8 (held as lone surrogates) shown as its escapes: any stream can write the report
        return lines.encode("utf-8", "backslashreplace").decode("utf-8")


def default_source(paths: Sequence[str | Path]) -> str:
    """The ``--source`` a sync of ``paths`` records when none is given: the first path's name and the first 8 hex
    digits of the SHA-256 of the absolute paths, ``docs@1f0c9a2e``. Two folders named alike are two sources, and a
    folder synced from where it is now keeps its name from run to run; moved, or synced from another place, it is
    another source (``--source`` names it for good). A link is not followed: ``current/``, a link switched from one
    release's folder to the next, stays one source."""
    given = [Path(os.path.abspath(p)) for p in paths]
    digest = hashlib.sha256(b"\0".join(os.fsencode(p) for p in given)).hexdigest()[:8]
    return f"{given[0].name or given[0].anchor}@{digest}"


def former_source(paths: Sequence[str | Path]) -> str | None:
    """The default ``--source`` before ``default_source``: the first path's bare name (None for a root)."""
    return Path(paths[0]).resolve().name or None


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unnameable(rel: str) -> str | None:
    """Why no document id may be ``rel`` (a file's name), or None when one may: a line break (``service.writes``:
    GET /documents/{id} could not name it), or bytes that are not UTF-8 (a name from another system's encoding,
    which Python holds as lone surrogates: no request can carry it)."""
    if rel.splitlines() != [rel]:
        return "its name holds a line break, which no document id may hold (GET /documents/{id} could not name it); " \
               "rename it"
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return (f"its name is not UTF-8 (the bytes {os.fsencode(rel)!r}), which no document id may hold; rename it "
                f"(convmv -f latin1 -t utf8 --notest, for a name in Latin-1)")
    return None


def _chunks(ids: Sequence[str]) -> list[dict[str, list[str]]]:
    return [{"doc_ids": list(ids[a : a + MAX_KEPT_IDS])} for a in range(0, len(ids), MAX_KEPT_IDS)]


def stale_filter(source: str, kept: Sequence[str], listed: Sequence[str] | None = None) -> dict[str, Any]:
    """The documents a sync from ``source`` wrote whose ids are not ``kept``: ``must_not`` holds the kept ids in
    lists of at most ``MAX_KEPT_IDS``; with ``listed`` (what the service held of ``source`` when the run began), only
    those ids (``should``): a document another run of the same source wrote since, of a file this run's walk did not
    see, is not deleted."""
    kept_chunks = _chunks(kept)
    kept_ids = set(kept)
    listed_part = {} if listed is None else {"should": _chunks([i for i in listed if i not in kept_ids])}
    return {"meta": {SOURCE_KEY: source}, **({"must_not": kept_chunks} if kept_chunks else {}), **listed_part}


def sync(client: Any, paths: Sequence[str | Path], source: str, meta: dict[str, str] | None = None,
         delete: bool = False, dry_run: bool = False, strict: bool = False,
         progress: Callable[[str], None] | None = None, adopt: str | None = None,
         follow_links: bool = False, report: SyncReport | None = None, jobs: int = DEFAULT_JOBS,
         read_memory_bytes: int | None = None, read_timeout_s: float | None = None) -> SyncReport:
    """Write the files under ``paths`` that the service (``client``: a ``spanseek.client.Client``) does not hold as
    they are, and with ``delete`` delete what an earlier sync from ``source`` wrote that is gone (module docstring).
    ``dry_run`` asks the service what it holds and its file limits (``FileLimits``) and changes nothing: it reads
    each file it would write as the server does, in one process whose memory is capped at ``read_memory_bytes`` and
    whose CPU time is ``read_timeout_s`` a file (None: the server's ``file_read_memory_bytes`` and
    ``file_read_timeout_s``; 0: no limit), and a file the server would refuse (unreadable, over its
    ``max_file_bytes`` or ``max_file_tokens``), or whose reading needs more memory or time than that, is refused;
    ``progress`` is called with a line for each file
    written and each document deleted, as it happens; ``adopt``: a former name of this source, whose documents of
    this run's files are taken as its own; ``follow_links``: also send the files that links in a folder lead to
    outside it (else such a link is refused, named); ``report``: filled in as the run goes (what a run that stopped
    part way did); ``jobs``: how many files' writes may wait for their answers at once (``_Writes``); ``strict``:
    StrictStop at the first file refused (a file the walk refused, such as an old Word .doc, before any is sent).
    An APIError other than a refused file (413, 415, 422) is raised: the run stops there, and running it again goes
    on from what is written."""
    from contextlib import nullcontext

    from spanseek.core.ids import held_in
    from spanseek.indexer.ingest import IngestOptions, _files
    from spanseek.indexer.read_process import ReadProcess

    report = report if report is not None else SyncReport()
    report.former = adopt
    given = dict(meta or {})
    settings = hashlib.sha256(json.dumps(sorted(given.items()), ensure_ascii=False).encode()).hexdigest()[:16]
    extra = {**given, SOURCE_KEY: source, SETTINGS_KEY: settings}
    say = progress or (lambda line: None)
    problems: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    files = list(_files(paths, problems, follow_links))  # a path that is not there is named before the service is asked anything
    # what the service holds of this source (and of its former name): read once, not a document per file; None
    # from a server older than GET /documents, which is asked about each file
    held = _listed(client, source)
    formerly = (_listed(client, adopt) or {}) if adopt and held is not None else {}
    ids: dict[str, str] = {}  # a file's id where a document spells it otherwise
    spelled_as = held_in(held) if held is not None else None  # (the held ids' other spellings indexed once)
    # the files whose ids this source does not hold: new ones, or held by another source. What the service holds of
    # them is asked of each when they are few; else every document's metadata is listed once, when the service holds
    # at most ten for each such file (a page of a thousand is one request): 20,000 new files were 20,000 requests
    held_by_any = None
    if held is not None and spelled_as is not None:
        unlisted = sum(spelled_as(rel) not in held and rel not in formerly for _, rel in files)
        held_by_any = _listed_all(client, 10 * unlisted) if unlisted >= LIST_ALL_FROM else None
    spelled_by_any = held_in(held_by_any) if held_by_any is not None else None
    report.files = len(files)  # (set once the service has answered: a run stopped before it did nothing)

    def refuse(rel: str, why: str) -> None:
        report.refused.append((rel, why))
        if strict:
            raise StrictStop(f"{rel}: {why}")

    if strict and problems:  # the walk's refusals, all known before any file is sent
        report.refused += [(str(p), why) for p, why in problems]
        raise StrictStop(f"{problems[0][0]}: {problems[0][1]}")

    # the dry run's reader: one process for the whole run (started at the first file read), limited as the server's
    limits = FileLimits.of_server(client) if dry_run else FileLimits()
    reader = ReadProcess(limits.reading_config, limits.read_memory_bytes if read_memory_bytes is None else read_memory_bytes,
                         _unreadable, limits.read_timeout_s if read_timeout_s is None else read_timeout_s,
                         who="sync --dry-run") if dry_run else None
    with _Writes(client, jobs, strict, report, say) as writes, reader or nullcontext():
        for path, rel in files:
            if rel in seen:  # two folders given, each with a file of this name: one id, so the first one's
                refuse(rel, f"{path} has the same name as {seen[rel]}, read already; one id cannot hold both: rename "
                            f"one of them")
                continue
            seen[rel] = path
            if (unnamed := unnameable(rel)) is not None:
                refuse(rel, unnamed)
                continue
            try:
                data = path.read_bytes()  # once: the hash recorded is that of the bytes sent
            except OSError as e:  # a file unreadable, or gone since the walk: its document (if any) is kept
                refuse(rel, f"unreadable ({e.strerror or e})")
                continue
            digest = hashlib.sha256(data).hexdigest()
            taken = False  # a document of the former default name, taken over
            # a document written before ids were made NFC (``indexer.ingest._files``) holds its file's name as the file
            # system spelled it (NFD on macOS's HFS+): its file replaces it under that id (``core.ids.held_id``, the
            # service's rule: any spelling of its composed form) rather than writing a second document
            if spelled_as is not None and (spelled := spelled_as(rel)) != rel:
                ids[rel] = spelled
            if held is not None and ids.get(rel, rel) in held:
                held_meta, replacing = held[ids.get(rel, rel)], True
            else:  # a new file, one whose id another source or a hand-written document holds, or no list to look in
                found = formerly.get(rel)
                if found is None:
                    found = (held_by_any.get(spelled_by_any(rel)) if held_by_any is not None and spelled_by_any is not None
                             else _held_meta(client, rel))
                # (replacing: the service holds a document under the file's id, which the write replaces)
                held_meta, replacing = found or {}, found is not None
                if adopt is not None and held_meta.get(SOURCE_KEY) == adopt:
                    held_meta, taken = {**held_meta, SOURCE_KEY: source}, True
                    report.adopted.append(rel)
            owner = held_meta.get(SOURCE_KEY)
            if owner is not None and owner != source:
                refuse(rel, f"the service holds this id as a document synced from {owner!r}; sync with --source "
                            f"{owner} to take it over (a folder moved or renamed), or delete that document first")
                continue
            # a document taken over is written once more, so that it records this source and a later --delete covers it
            if owner == source and held_meta.get(HASH_KEY) == digest and held_meta.get(SETTINGS_KEY) == settings \
                    and not taken:
                report.unchanged.append(rel)
                continue
            if reader is not None:  # the server reads a file as from-files does: one it would refuse is said so, and why
                # (its id as every write's: a new one longer than an id may be is refused, whatever the file holds)
                # (with the metadata the write gives it: its front matter's and the sync's together are checked)
                if (why := _id_refusal(ids.get(rel, rel), replacing) or limits.too_large(len(data)) or limits.refusal(
                        reader.read(path, rel, IngestOptions(extra_meta={**extra, HASH_KEY: digest})),
                        ids.get(rel, rel), replacing)) is not None:
                    refuse(rel, f"the server would refuse it: {why}")
                    continue
                report.written.append(rel)
                say(f"would write {rel}")
            else:
                writes.send(rel, data, ids.get(rel), {**extra, HASH_KEY: digest})
        writes.finish()
    report.refused += [(str(p), why) for p, why in problems]
    if delete:
        kept = [ids.get(rel, rel) for rel in seen if unnameable(rel) is None]  # (no document holds the others)
        _delete_stale(client, source, kept, problems, dry_run, report, say, None if held is None else list(held))
    return report


def _held_meta(client: Any, doc_id: str) -> dict[str, Any] | None:
    """The metadata of the document the service holds under ``doc_id`` (``GET /documents/{id}``), or None when it
    holds none."""
    record = client.get(doc_id, meta_only=True)
    return None if record is None else record.get("meta") or {}


def _id_refusal(doc_id: str, replacing: bool) -> str | None:
    """Why a write refuses ``doc_id`` (a file's name) as an id (``core.written.id_problem``: longer than a new
    document's id may be, unless it is ``replacing`` a document the service holds under it), or None."""
    from spanseek.core.written import id_problem

    return None if (problem := id_problem(doc_id, replacing)) is None else f"'id' {problem}"


def _unreadable(path: str, rel: str, opts: IngestOptions) -> FileTokens | str | None:
    """The file at ``path`` read as the server reads it (``indexer.ingest.read_document``, its passages cut with the
    reading process's counter: the server's tokenizer where this host has it, ``FileLimits.reading_config``), its
    tokens counted as the server counts them, for ``FileLimits.refusal``; or why the server would refuse it as
    unreadable (no text, binary, not UTF-8, damaged, front matter it cannot read); None when this host lacks the
    library that reads its format (the ``index`` extra: a client's install), which the server has. Run in the dry
    run's reading process (``indexer.read_process.ReadProcess``), whose memory and CPU time are limited as the
    server's are: a file whose reading needs more is refused there."""
    from spanseek.indexer.chunking import word_token_counter
    from spanseek.indexer.ingest import IngestError, read_document
    from spanseek.indexer.read_process import document_tokens, worker_counter

    try:
        count = worker_counter()
    except Exception:  # (the server's tokenizer, found here, could not be loaded) counted in words
        count = word_token_counter
    try:
        doc = read_document(Path(path), rel, count, opts)
    except ImportError:  # (a reader's library imported as it reads: pdfminer, PyYAML)
        return None
    except IngestError as e:  # ("reading Markdown needs markdown-it-py", raised from the ImportError)
        # (named as the server names the file: by its name, not its path here)
        return None if isinstance(e.__context__, ImportError) else str(e).replace(path, rel)
    return doc.replace(path, rel) if isinstance(doc, str) else FileTokens(document_tokens(doc, count), count is word_token_counter, doc)


class _Writes:
    """The files' writes (``PUT /files/{name}``), up to ``jobs`` sent and waiting for their answers at once: the
    server reads and encodes a file before it answers, several at a time (its ``--max-file-uploads``), so a sync that
    waited for each answer before sending the next file left it idle between files. The answers are taken in the
    order the files were sent: the report and the lines printed are in the files' order, and a run that stops keeps
    no later file's answer. A refusal (``REFUSED_STATUSES``) is reported and the others go on (``strict``:
    StrictStop, once the writes sent before it are answered, as they are when the run stops at a file the sync
    refuses itself);
    any other APIError, or no answer within the client's timeout, stops the run: the writes not yet sent are not
    sent, and the writes in flight end with the client's connections. Each write waits in a thread of its own that
    does not hold the process at its exit: a run stopped (Ctrl-C, SIGTERM) ends at once, not when the server answers
    the writes it is still encoding."""

    def __init__(self, client: Any, jobs: int, strict: bool, report: SyncReport, say: Callable[[str], None]):
        self.client, self.strict, self.report, self.say = client, strict, report, say
        self.jobs = max(1, jobs)
        self.waiting: deque[_Write] = deque()
        self.limits: FileLimits | None = None  # the server's, asked at its first 413 (``_refusal``)

    def __enter__(self) -> _Writes:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and issubclass(kind, StrictStop):  # the writes sent are answered and reported
            self.strict = False
            self.finish()
        for write in self.waiting:
            write.future.cancel()

    def send(self, rel: str, data: bytes, doc_id: str | None, meta: dict[str, Any]) -> None:
        """Send one file's write, once fewer than ``jobs`` are waiting (taking the oldest answer first)."""
        while len(self.waiting) >= self.jobs:
            self._answer()
        write = _Write(rel, len(data), functools.partial(_in_thread, self.client.upsert_file, data, rel,
                                                         doc_id=doc_id, meta=meta))
        self._start(write)
        self.waiting.append(write)

    def finish(self) -> None:
        """Take every answer still awaited."""
        while self.waiting:
            self._answer()

    def _answer(self) -> None:
        import httpx

        from spanseek.client import APIError

        write = self.waiting.popleft()
        rel, size = write.rel, write.size
        try:
            warnings = self._result(write).get("warnings", [])
        except httpx.TimeoutException:
            raise RuntimeError(f"{rel}: no answer to its write in time (the server may still be reading and "
                               f"encoding it: the next run finds it written if so); --timeout waits longer") from None
        except APIError as e:
            if e.status not in REFUSED_STATUSES:
                raise
            why = self._refusal(e, size)
            self.report.refused.append((rel, why))
            if self.strict:
                raise StrictStop(f"{rel}: {why}") from None
            return
        self.report.written.append(rel)
        self.say(f"wrote {rel}")
        for warning in warnings:  # what the server could not read of it (a PDF's scanned pages)
            self.say(f"  {warning}")

    def _refusal(self, e: Any, size: int) -> str:
        """Why the server refused a file of ``size`` bytes (``e``: its APIError, one of ``REFUSED_STATUSES``): its own
        message, which names the file and what was too much (its tokens, the memory its reading needs), save where
        the file's size is the reason, which only the sync knows: a body over the server's ``max_file_bytes``, said
        as a dry run says it (``FileLimits.too_large``; the server's limits are asked once, at the first 413), and a
        body not sent in time (408)."""
        if e.status == 408:
            return f"{size:,} bytes, not sent within the server's --body-timeout-s: {e.message}"
        if e.status == 413:
            if self.limits is None:
                self.limits = FileLimits.of_server(self.client)
            if (too_large := self.limits.too_large(size)) is not None:
                return too_large
        return str(e.message)

    def _start(self, write: _Write) -> None:
        write.alone = not self._running()
        write.future = write.start()

    def _running(self) -> list[Future[dict[str, Any]]]:
        """The writes of this run in progress: sent, not yet answered."""
        return [write.future for write in self.waiting if not write.future.done()]

    def _result(self, write: _Write) -> dict[str, Any]:
        """A write's answer. A 429 (the server's uploads all taken, through the client's retries) to a write sent
        while others of this run were in progress means the server takes fewer at once than ``jobs`` (its
        ``--max-file-uploads`` is lower, or another client holds some): from then on only as many as are still in
        progress are sent, and this write is sent again once one of them is answered. A 429 to a write sent alone is
        raised, as one file at a time met it."""
        from spanseek.client import APIError

        while True:
            try:
                return write.future.result()
            except APIError as e:
                if e.status != 429 or write.alone:
                    raise
                running = self._running()
                self.jobs = max(1, len(running))
                if running:
                    wait(running, return_when=FIRST_COMPLETED)
                self._start(write)


@dataclass
class _Write:
    """One file's write: ``start`` sends it (again), ``future`` is its answer, ``alone`` whether it was sent while no
    other write of the run was in progress."""

    rel: str
    size: int
    start: Callable[[], Future[dict[str, Any]]]
    future: Future[dict[str, Any]] = field(init=False)
    alone: bool = field(init=False)


def _in_thread(call: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> Future[dict[str, Any]]:
    """``call(*args, **kwargs)`` started in a daemon thread, its answer or error the Future's. (A
    ThreadPoolExecutor's threads are waited for as Python exits: a sync stopped with writes in flight lingered until
    the server answered them, for as long as ``--timeout``.)"""
    future: Future[dict[str, Any]] = Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(call(*args, **kwargs))
            except BaseException as e:  # (the Future holds it: the waiting thread raises it)
                future.set_exception(e)

    threading.Thread(target=run, name="sync-write", daemon=True).start()
    return future


def _listed_all(client: Any, most: int) -> dict[str, dict[str, Any]] | None:
    """The metadata of every document the service holds, by id, when it holds at most ``most`` (one ``GET
    /documents`` a thousand at a time); None when it holds more."""
    listed: dict[str, dict[str, Any]] = {}
    for doc in client.documents():
        if len(listed) >= most:
            return None
        listed[doc["id"]] = doc.get("meta") or {}
    return listed


def _listed(client: Any, source: str) -> dict[str, dict[str, Any]] | None:
    """The metadata of each document synced from ``source``, by id (``GET /documents``); None when the server is
    older than that route (405: it has PUT and POST /documents only)."""
    from spanseek.client import APIError

    try:
        return {d["id"]: d.get("meta") or {} for d in client.documents({SOURCE_KEY: source})}
    except APIError as e:
        if e.status == 405:
            return None
        raise


def _delete_where(client: Any, flt: dict[str, Any], dry_run: bool) -> Any:
    """``client.delete(filter=flt)``; none deleted when no document holds the sync's metadata yet (a first sync, or
    one whose every file was refused): the server refuses a filter on a field no document has."""
    from spanseek.client import APIError, Deleted

    try:
        return client.delete(filter=flt, dry_run=dry_run)
    except APIError as e:
        if e.status == 400 and f"filter field {SOURCE_KEY!r}: no document has it" in e.message:
            return Deleted([], 0)
        raise


def _delete_stale(client: Any, source: str, kept: list[str], problems: list[tuple[Path, str]], dry_run: bool,
                  report: SyncReport, say: Callable[[str], None], listed: list[str] | None) -> None:
    """``--delete``: the documents from ``source`` whose files are not ``kept``; none when the walk may have
    missed files (a folder it could not read, or no file at all), which would delete documents whose files exist."""
    from spanseek.client import APIError, Deleted

    if folders := [p for p, _ in problems if p.is_dir()]:  # (the other problems are files: .doc, named as refused)
        report.not_deleted = (f"{folders[0]} could not be read, and the documents of its files would be deleted; "
                              f"make it readable and sync again")
        return
    if not kept:
        held = _delete_where(client, stale_filter(source, []), dry_run=True).total
        if held:
            report.not_deleted = (f"no file was found, and every document synced from {source!r} ({held}) would be "
                                  f"deleted; if that is what you want, POST /documents/delete with the filter "
                                  f"{json.dumps({'meta': {SOURCE_KEY: source}}, ensure_ascii=False)}")
        return
    try:
        flt = stale_filter(source, kept, listed)
        # none listed at the start is gone: nothing to delete (an empty should would pass nothing, but costs a request)
        deleted = Deleted([], 0) if flt.get("should") == [] else _delete_where(client, flt, dry_run)
    except APIError as e:
        if e.status != 413:
            raise
        raise DeleteRefused(f"--delete: its request lists the {len(kept)} files kept, and the server refused it as too "
                         f"large ({e.message}); start the server with a larger --max-body-bytes, or sync the folder "
                         f"in parts, each with its own --source") from None
    report.deleted, report.deleted_total = list(deleted), deleted.total
    for doc_id in deleted:
        say(f"{'would delete' if dry_run else 'deleted'} {doc_id}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="make a running service's documents those of a folder's files",
                       description=__doc__.split("\n\n")[0].replace("``", "`") + " " + PASSAGE_FIELDS_HELP)
    p.add_argument("paths", nargs="+", help="folders and files, as `spanseek corpus from-files` takes them")
    p.add_argument("--url", required=True, help="the service's base URL (http://host:8000)")
    p.add_argument("--api-key", default=None,
                   help="the write key (default: $SPANSEEK_API_KEY, or the file $SPANSEEK_API_KEY_FILE names); on the "
                        "command line `ps` shows it to every user of the machine: prefer --api-key-file or the variable")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="a file holding the write key on one line, readable by you only (chmod 600), or a pipe "
                        "(<(pass show KEY)); default: $SPANSEEK_API_KEY_FILE, or $SPANSEEK_API_KEY; either flag "
                        "overrides both variables")
    p.add_argument("--source", default=None,
                   help="the name recorded in each document's synced_from (default: the first path's name and a "
                        "hash of the absolute paths given, as docs@1f0c9a2e: a folder moved, or synced from "
                        "another place, is another source unless this names it); --delete deletes only documents "
                        "with this name, and documents with another are not replaced")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="metadata for every document")
    p.add_argument("--delete", action="store_true", help="delete the documents of files that are gone")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p.add_argument("--strict", action="store_true", help="stop at the first file refused")
    p.add_argument("--read-memory-bytes", type=int, default=None, metavar="BYTES",
                   help="with --dry-run: most memory the process that reads the files may take (Linux): a file whose "
                        "reading needs more is reported refused, and the files after it are read; 0: no limit "
                        "(default: the server's file_read_memory_bytes, as GET /info gives it; "
                        f"{DEFAULT_READ_MEMORY} from a server that does not)")
    p.add_argument("--read-timeout-s", type=float, default=None, metavar="SECONDS",
                   help="with --dry-run: most CPU time the reading of one file may take: a file that takes longer is "
                        "reported refused, and the files after it are read; 0: no limit (default: the server's "
                        "file_read_timeout_s, as GET /info gives it; "
                        f"{DEFAULT_READ_TIMEOUT_S:g} from a server that does not)")
    p.add_argument("--follow-links", action="store_true", help=FOLLOW_LINKS_HELP)
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                   help=f"files sent at once, each awaiting its answer (default: {DEFAULT_JOBS}, the server's "
                        f"default --max-file-uploads; the server reads and encodes them meanwhile; 1 sends one file "
                        f"at a time)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="how long one file's write may take, in seconds (default: 3600): the server reads and "
                        "encodes the file before it answers (a megabyte of text, 215k tokens, took 107 s on 2 CPU "
                        "cores)")
    # the files written and deleted are its output: not a log line per HTTP request
    p.set_defaults(func=_run, quiet_log_level=logging.WARNING)


def _api_key(args: argparse.Namespace) -> str | None:
    """The write key: from the flags ``--api-key`` or ``--api-key-file`` when either is given, else from the variables
    ``SPANSEEK_API_KEY`` or ``SPANSEEK_API_KEY_FILE`` (the command line over the environment, as ``spanseek serve``
    takes its settings); a key file is read once. Both of one level given is an error (which one was meant?). A key
    given as a flag is warned of (``ps`` shows it), as is a key file that others may read."""
    from spanseek.core.keys import key_file_warning, key_flag_warning, key_level, read_key_file

    key, path = key_level([("as flags (--api-key, --api-key-file)", args.api_key, args.api_key_file),
                           ("as environment variables (SPANSEEK_API_KEY, SPANSEEK_API_KEY_FILE)",
                            os.environ.get("SPANSEEK_API_KEY"), os.environ.get("SPANSEEK_API_KEY_FILE"))],
                          "the write key", "its file")
    if key is not None and key == args.api_key:
        sys.stderr.write(f"warning: {key_flag_warning('--api-key', 'SPANSEEK_API_KEY')}\n")
    if path is None:
        return None if key is None else str(key)
    if (warning := key_file_warning(str(path))) is not None:
        sys.stderr.write(f"warning: {warning}\n")
    # (named as the flag or the variable that gave it: which of the two was wrong)
    return read_key_file(str(path), "--api-key-file" if path == args.api_key_file else "SPANSEEK_API_KEY_FILE")


def _run(args: argparse.Namespace) -> int:
    import httpx

    from spanseek.cli import CommandFailed
    from spanseek.client import Client, SpanseekError, url_problem
    from spanseek.indexer.ingest import parse_meta
    from spanseek.indexer.interrupt import taking_stops
    from spanseek.indexer.read_process import check_memory_cap, check_time_limit

    meta = parse_meta(args.meta)
    if own := sorted(meta.keys() & {SOURCE_KEY, HASH_KEY, SETTINGS_KEY}):
        raise ValueError(f"--meta {own[0]}: a key sync sets itself ({SOURCE_KEY}, {HASH_KEY}, {SETTINGS_KEY})")
    if args.read_memory_bytes is not None:
        check_memory_cap(args.read_memory_bytes, "--read-memory-bytes")
    if args.read_timeout_s is not None:
        check_time_limit(args.read_timeout_s, "--read-timeout-s")
    if args.jobs < 1:
        raise ValueError(f"--jobs takes a number of files >= 1, got {args.jobs}")
    if not 0 < args.timeout < float("inf"):
        raise ValueError(f"--timeout must be a number of seconds > 0, got {args.timeout}")
    if not args.url.lower().startswith(("http://", "https://")):
        raise ValueError(f"--url takes the service's base URL with its scheme (http://{args.url}), got {args.url!r}")
    if (problem := url_problem(args.url)) is not None:
        raise ValueError(f"--url {args.url!r} {problem}")
    if args.source is not None and not args.source.strip():  # (taken for no --source: the default, silently)
        raise ValueError(f"--source names the documents this sync writes (their {SOURCE_KEY}), got {args.source!r}; "
                         "give a name, or leave --source out for the default")
    api_key = _api_key(args)
    source = args.source or default_source(args.paths)
    adopt = None if args.source else former_source(args.paths)

    def progress(line: str) -> None:
        sys.stderr.write(f"  {line}\n")
        sys.stderr.flush()

    report = SyncReport()

    def went() -> str:  # the last line of a run that stopped part way says how far it got
        return f"; {report.stopped()}" if report.files and not args.dry_run else ""

    try:  # SIGTERM (kill, a scheduler's stop) ends the run as Ctrl-C does, saying how far it got
        with taking_stops(), Client(args.url, api_key=api_key, timeout=args.timeout) as client:
            sync(client, args.paths, source, meta, args.delete, args.dry_run, args.strict, progress, adopt,
                 args.follow_links, report, args.jobs, args.read_memory_bytes, args.read_timeout_s)
    except StrictStop as e:
        sys.stderr.write(f"{report.summary(args.dry_run)}\nstopped at the first file refused (--strict): "
                         f"{str(e).encode('utf-8', 'backslashreplace').decode('utf-8')}\n")
        return 1
    except KeyboardInterrupt as e:
        how = "stopped by SIGTERM" if str(e) == "SIGTERM" else ""
        if went():
            raise KeyboardInterrupt(f"{how}{'; ' if how else ''}{report.stopped()}") from None
        raise KeyboardInterrupt(how) from None
    except (SpanseekError, httpx.HTTPError) as e:  # the service refused, or could not be reached: one line, status 1
        hint = "; give the write key with --api-key-file or SPANSEEK_API_KEY" if (
            getattr(e, "status", None) == 401 and not api_key) else ""
        raise CommandFailed(f"{args.url}: {e}{hint}{went()}") from None
    except DeleteRefused as e:  # after the writes, all answered
        raise CommandFailed(str(e)) from None
    except RuntimeError as e:  # a write not answered in time
        raise CommandFailed(f"{e}{went()}") from None
    sys.stderr.write(report.summary(args.dry_run) + "\n")
    return 1 if report.refused or report.not_deleted else 0
