"""`spanseek sync`: make a running service's documents those of a folder's files, through ``PUT /files/{name}``.

    spanseek sync docs/ --url http://localhost:8000 [--api-key KEY] [--delete] [--meta team=docs] [--dry-run]

The files are those `spanseek corpus from-files` reads (the same walk: .txt .md .markdown .html .htm .pdf .docx,
hidden files and folders skipped), and each is named as from-files names it: its path relative to the folder given
(``guide/install.md``), or as given for a file named on the command line. A file is written (the server reads it as
from-files does) unless the service holds a document of that id whose ``sha256`` metadata is the file's: each
written document records the SHA-256 of the bytes it was read from, and ``synced_from``, the ``--source`` name
(default: the name of the first folder or file given). With ``--delete``, the documents an earlier sync with that
``synced_from`` wrote whose files are gone are deleted (one ``POST /documents/delete``). A file the server refuses
(no text, damaged: 422) is reported and the others go on; ``--strict`` stops at it. Each run prints what it wrote,
left alone, deleted and refused; the exit status is 1 when a file was refused, else 0.

The server needs writes on (``spanseek serve --writes``) and the write key (``--api-key`` or ``SPANSEEK_API_KEY``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE_KEY, HASH_KEY = "synced_from", "sha256"
MAX_KEPT_IDS = 10_000  # ids one filter's doc_ids list may hold (core.filters); a delete lists the kept ones in such lists


@dataclass
class SyncReport:
    """What a sync did: ids written, left alone (unchanged), deleted, and refused (id, the server's reason)."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # the first 1,000 (``deleted_total``: how many)
    deleted_total: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)

    def summary(self, dry_run: bool = False) -> str:
        would = "would write" if dry_run else "wrote"
        line = (f"{would} {len(self.written)}, unchanged {len(self.unchanged)}, "
                f"{'would delete' if dry_run else 'deleted'} {self.deleted_total}, refused {len(self.refused)}")
        return "\n".join([line, *(f"  refused {doc_id}: {why}" for doc_id, why in self.refused)])


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stale_filter(source: str, kept: Sequence[str]) -> dict[str, Any]:
    """The documents a sync from ``source`` wrote whose ids are not ``kept``: ``must_not`` holds the kept ids in
    lists of at most ``MAX_KEPT_IDS``."""
    chunks = [list(kept[a : a + MAX_KEPT_IDS]) for a in range(0, len(kept), MAX_KEPT_IDS)]
    return {"meta": {SOURCE_KEY: source}, **({"must_not": [{"doc_ids": c} for c in chunks]} if chunks else {})}


def sync(client: Any, paths: Sequence[str | Path], source: str, meta: dict[str, str] | None = None,
         delete: bool = False, dry_run: bool = False, strict: bool = False) -> SyncReport:
    """Write the files under ``paths`` that the service (``client``: a ``spanseek.client.Client``) does not hold as
    they are, and with ``delete`` delete what an earlier sync from ``source`` wrote that is gone (module docstring).
    ``dry_run`` asks the service what it holds and changes nothing. An APIError other than a refused file (422,
    415) is raised: the run stops there, and running it again goes on from what is written."""
    from spanseek.client import APIError
    from spanseek.indexer.ingest import IngestError, _files

    report = SyncReport()
    extra = {**(meta or {}), SOURCE_KEY: source}
    problems: list[tuple[Path, str]] = []
    seen: list[str] = []
    for path, rel in _files(paths, problems):
        seen.append(rel)
        digest = file_hash(path)
        held = client.get(rel)
        if held is not None and held.get("meta", {}).get(HASH_KEY) == digest \
                and held["meta"].get(SOURCE_KEY) == source:
            report.unchanged.append(rel)
            continue
        if dry_run:
            report.written.append(rel)
            continue
        try:
            client.upsert_file(path, rel, meta={**extra, HASH_KEY: digest})
        except APIError as e:
            if e.status not in (415, 422) or strict:
                raise
            report.refused.append((rel, e.message))
            continue
        report.written.append(rel)
    if problems and strict:
        raise IngestError(f"{problems[0][0]}: {problems[0][1]}")
    report.refused += [(str(p), why) for p, why in problems]
    if delete:
        deleted = client.delete(filter=stale_filter(source, seen), dry_run=dry_run)
        report.deleted, report.deleted_total = list(deleted), deleted.total
    return report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="make a running service's documents those of a folder's files",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="folders and files, as `spanseek corpus from-files` takes them")
    p.add_argument("--url", required=True, help="the service's base URL (http://host:8000)")
    p.add_argument("--api-key", default=os.environ.get("SPANSEEK_API_KEY"),
                   help="the write key (default: $SPANSEEK_API_KEY)")
    p.add_argument("--source", default=None,
                   help="the name recorded in each document's synced_from (default: the first path's name); "
                        "--delete deletes only documents with this name")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="metadata for every document")
    p.add_argument("--delete", action="store_true", help="delete the documents of files that are gone")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p.add_argument("--strict", action="store_true", help="stop at the first file the server refuses")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import httpx

    from spanseek.client import Client, SpanseekError

    meta: dict[str, str] = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta takes KEY=VALUE, got {item!r}")
        if key in meta or key in (SOURCE_KEY, HASH_KEY):
            raise ValueError(f"--meta {key} given twice, or a key sync sets itself ({SOURCE_KEY}, {HASH_KEY})")
        meta[key] = value
    source = args.source or Path(args.paths[0]).resolve().name
    try:
        with Client(args.url, api_key=args.api_key) as client:
            report = sync(client, args.paths, source, meta, args.delete, args.dry_run, args.strict)
    except (SpanseekError, httpx.HTTPError) as e:  # the service refused, or could not be reached: one line
        raise RuntimeError(f"{args.url}: {e}") from None
    sys.stderr.write(report.summary(args.dry_run) + "\n")
    return 1 if report.refused else 0
