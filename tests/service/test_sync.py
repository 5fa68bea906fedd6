"""`spanseek sync` (spanseek.sync): a folder's files made the service's documents through PUT /files/{name}; files
left alone when unchanged, refused ones reported, the documents of removed files deleted (and only those), dry runs
changing nothing; POST /documents/delete's dry_run. A folder changing during the run, another source's documents and
a second file of one name left alone, a delete held back when the walk may have missed files, files and deletes too
large for the server, a write not answered in time.

    .venv/bin/python -m pytest -q tests/service/test_sync.py
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from spanseek.cli import build_parser, main
from spanseek.client import APIError, Client
from spanseek.indexer.ingest import IngestOptions
from spanseek.service.app import create_app
from spanseek.sync import (
    DEFAULT_JOBS,
    HASH_KEY,
    LIST_ALL_FROM,
    MAX_KEPT_IDS,
    SETTINGS_KEY,
    SOURCE_KEY,
    SyncReport,
    _unreadable,
    default_source,
    file_hash,
    stale_filter,
    sync,
)
from tests.service.conftest import NFC_ID, NFD_ID, THIRD_ID, THIRD_NFC
from tests.service.test_writes import DOC, KEY


@pytest.fixture
def url(settings_for, tmp_path, live):
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with live(create_app(settings)) as base:
        yield base


def folder(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_sync_writes_what_changed_leaves_the_rest_and_deletes_what_is_gone(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a.md": "# Bridge\n\nIn 1450 Gala built the harbour bridge.\n",
                                      "guide/b.txt": "In 1460 Hugo built the island church.",
                                      "blank.txt": "  \n\n", "notes.numbers": "not read"})
    with Client(url, api_key="key") as client:
        client.upsert({**DOC, "id": "by-hand"})  # written otherwise: never deleted by a sync
        report = sync(client, [docs], "docs", meta={"team": "ops"})
        assert sorted(report.written) == ["a.md", "guide/b.txt"] and report.unchanged == []
        assert [doc_id for doc_id, _ in report.refused] == ["blank.txt"] and "no text" in report.refused[0][1]
        held = client.get("guide/b.txt")
        settings = held["meta"].pop(SETTINGS_KEY)
        assert held["meta"] == {"source": "guide/b.txt", "team": "ops", SOURCE_KEY: "docs",
                                HASH_KEY: file_hash(docs / "guide/b.txt")}
        again = sync(client, [docs], "docs", meta={"team": "ops"})
        assert again.written == [] and sorted(again.unchanged) == ["a.md", "guide/b.txt"]
        moved = sync(client, [docs], "docs", meta={"team": "web"})  # new --meta: every file written again
        assert sorted(moved.written) == ["a.md", "guide/b.txt"] and client.get("a.md")["meta"]["team"] == "web"
        assert client.get("a.md")["meta"][SETTINGS_KEY] != settings
        assert sorted(sync(client, [docs], "docs", meta={"team": "ops"}).written) == ["a.md", "guide/b.txt"]

        (docs / "a.md").write_text("# Bridge\n\nIn 1455 Gala rebuilt the harbour bridge.\n", encoding="utf-8")
        (docs / "guide/b.txt").unlink()
        (docs / "c.txt").write_text("In 1470 Ida built the mill.", encoding="utf-8")
        (docs / "blank.txt").unlink()
        dry = sync(client, [docs], "docs", delete=True, dry_run=True)
        assert sorted(dry.written) == ["a.md", "c.txt"] and dry.deleted == ["guide/b.txt"]
        assert client.get("guide/b.txt") is not None and client.get("c.txt") is None  # nothing changed
        done = sync(client, [docs], "docs", delete=True)
        assert sorted(done.written) == ["a.md", "c.txt"] and done.deleted == ["guide/b.txt"] and done.deleted_total == 1
        assert client.get("guide/b.txt") is None and "1455" in client.get("a.md")["paragraphs"][0]
        assert client.get("by-hand") is not None  # not synced: not deleted
        # another source's sync deletes only its own documents
        other = folder(tmp_path / "other", {"x.txt": "In 1480 Jan built the tower."})
        assert sync(client, [other], "other", delete=True).deleted == []
        assert client.get("a.md") is not None


def test_the_delete_filter_lists_every_kept_id_in_chunks():
    kept = [f"d{i}" for i in range(MAX_KEPT_IDS + 5)]
    flt = stale_filter("docs", kept)
    assert flt["meta"] == {SOURCE_KEY: "docs"}
    assert [len(c["doc_ids"]) for c in flt["must_not"]] == [MAX_KEPT_IDS, 5]
    assert stale_filter("docs", []) == {"meta": {SOURCE_KEY: "docs"}}


def test_a_delete_dry_run_says_what_it_would_delete_and_deletes_nothing(url):
    import httpx

    with httpx.Client(base_url=url, headers=KEY) as http:
        assert http.put("/documents", json={"documents": [DOC, {**DOC, "id": "new-2", "meta": {"lang": "fr"}}]}
                        ).status_code == 200
        r = http.post("/documents/delete", json={"filter": {"meta": {"lang": "en"}}, "dry_run": True})
        assert r.status_code == 200 and r.json()["dry_run"] is True
        assert "new-1" in r.json()["deleted"] and "new-2" not in r.json()["deleted"]
        assert http.get("/documents/new-1").status_code == 200
        r = http.post("/documents/delete", json={"filter": {"meta": {"lang": "en"}}})
        assert r.json()["dry_run"] is False and "new-1" in r.json()["deleted"]
        assert http.get("/documents/new-1").status_code == 404


def test_a_dry_run_says_which_files_the_server_would_refuse_and_why(url, tmp_path):
    """A dry run counted a file the server refuses (no text, binary, not UTF-8) as one it would write; it now reads
    each as the server does and reports it refused, with the reason the write would be refused for."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge.", "empty.md": ""})
    (docs / "blob.txt").write_bytes(b"\x00\x01binary")
    (docs / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    with Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True)
        done = sync(client, [docs], "docs")
    assert planned.written == done.written == ["a.txt"]
    assert [r for r, _ in planned.refused] == [r for r, _ in done.refused] == ["blob.txt", "empty.md", "latin.txt"]
    assert dict(planned.refused) == {
        "blob.txt": "the server would refuse it: binary file (NUL bytes)",
        "empty.md": "the server would refuse it: no text",
        "latin.txt": "the server would refuse it: not UTF-8 (byte 0xe9 at offset 3); convert it to UTF-8 first"}


def test_a_dry_run_on_a_host_without_the_readers_counts_their_files_as_written(url, tmp_path, monkeypatch):
    """On a client's install (no ``index`` extra) a dry run refused each Markdown and HTML file, "the server would
    refuse it: ... reading Markdown needs markdown-it-py", exit status 1: the server, which has its readers, writes
    them. A file this host cannot read for want of a library is now counted as one the server would write."""
    docs = folder(tmp_path / "docs", {"a.md": "# Bridge\n\nIn 1450 Gala built the harbour bridge.\n",
                                      "b.html": "<html><body><p>In 1460 Hugo built the church.</p></body></html>"})
    for module in ("markdown_it", "markdown_it.rules_block", "trafilatura", "yaml"):
        monkeypatch.setitem(sys.modules, module, None)  # (importing it raises ModuleNotFoundError)
    # (what the dry run's reading process runs for each file, run here, where the libraries are missing, with the
    # counter such a process starts with)
    from spanseek.indexer import read_process
    from spanseek.indexer.chunking import word_token_counter
    from spanseek.sync import FileLimits

    monkeypatch.setattr(read_process, "_count", word_token_counter)

    read = [_unreadable(str(docs / name), name, IngestOptions()) for name in ("a.md", "b.html")]
    assert [FileLimits().refusal(doc, name) for doc, name in zip(read, ("a.md", "b.html"), strict=True)] == [None, None]


def test_a_dry_run_reads_in_a_capped_process_and_refuses_a_file_too_large_to_read_within_it(url, tmp_path):
    """A dry run read each file in the sync's own process with no memory cap: a 30 MiB HTML table took ~6 GB there
    (a 5.9 MB one, 819 MB). It now reads them in one process capped at --read-memory-bytes, as the server and
    from-files do: a file whose reading needs more is refused with that reason, and the files after it are read."""
    rows = "<tr><td>cell</td><td>cell</td></tr>" * 40_000
    docs = folder(tmp_path / "docs", {"a.md": "# Bridge\n\nIn 1450 Gala built the harbour bridge.\n",
                                      "b-table.html": f"<html><body><table>{rows}</table></body></html>",
                                      "c.txt": "In 1460 Hugo built the island church."})
    with Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True, read_memory_bytes=160 << 20)  # above the reader's start (~110 MB)
    assert planned.written == ["a.md", "c.txt"]
    assert planned.refused == [("b-table.html", "the server would refuse it: reading it needs more memory than sync "
                                f"--dry-run gives the reading of a file ({160 << 20:,} bytes, --read-memory-bytes); "
                                "split it, or raise the limit")]


def test_the_command_reports_and_its_status_says_whether_a_file_was_refused(url, tmp_path, capsys):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--meta", "team=ops"]) == 0
    assert "wrote 1, unchanged 0, deleted 0, refused 0" in capsys.readouterr().err
    (docs / "empty.md").write_text("")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--delete"]) == 1
    err = capsys.readouterr().err
    assert "refused 1" in err and "refused empty.md:" in err
    # the server refused the run, or could not be reached: it failed (1), as a refused file does; not a usage error (2)
    assert main(["sync", str(docs), "--url", url, "--api-key", "wrong"]) == 1
    assert "401" in capsys.readouterr().err
    assert main(["sync", str(docs), "--url", "http://127.0.0.1:9", "--api-key", "key"]) == 1
    err = capsys.readouterr().err
    assert "\nspanseek sync: error: http://127.0.0.1:9" in err and "Traceback" not in err  # (after --api-key's warning)
    assert main(["sync", str(docs), "--url", url, "--meta", f"{SOURCE_KEY}=x"]) == 2
    capsys.readouterr()
    assert main(["sync", str(docs), "--url", url.removeprefix("http://")]) == 2  # httpx: "unsupported protocol"
    assert "--url takes the service's base URL with its scheme (http://" in capsys.readouterr().err
    assert main(["sync", str(docs), "--url", url]) == 1  # no key: the 401 says how to give one
    assert "give the write key with --api-key-file or SPANSEEK_API_KEY" in capsys.readouterr().err


def test_the_write_key_is_read_from_a_file_and_a_key_on_the_command_line_is_warned_of(url, tmp_path, capsys,
                                                                                      monkeypatch):
    """--api-key shows in `ps` to every user of the machine (a cron job's key too): --api-key-file (or
    SPANSEEK_API_KEY_FILE) reads it from a file, warning when others may read that file; --api-key still works,
    with a warning; a flag (key or file) overrides a variable (key or file), and a key and its file given at one
    level are refused. No message shows the key."""
    monkeypatch.delenv("SPANSEEK_API_KEY", raising=False)
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    key_file = tmp_path / "key"
    key_file.write_text("key\n")
    key_file.chmod(0o600)
    assert main(["sync", str(docs), "--url", url, "--api-key-file", str(key_file)]) == 0
    err = capsys.readouterr().err
    assert "wrote 1" in err and "warning" not in err
    key_file.chmod(0o644)
    monkeypatch.setenv("SPANSEEK_API_KEY_FILE", str(key_file))
    (docs / "a.txt").write_text("In 1451 Gala built the harbour bridge.")
    assert main(["sync", str(docs), "--url", url]) == 0
    err = capsys.readouterr().err
    assert "wrote 1" in err and f"warning: key file {key_file} can be read or changed by users other than its " \
                                f"owner (mode -rw-r--r--); `chmod 600 {key_file}`" in err
    (docs / "a.txt").write_text("In 1452 Gala built the harbour bridge.")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key"]) == 0  # the flag over the variable
    err = capsys.readouterr().err
    assert "wrote 1" in err and "warning: --api-key puts the key on the command line, which `ps` shows" in err
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--api-key-file", str(key_file)]) == 2
    err = capsys.readouterr().err
    assert ("the write key and its file are both given as flags (--api-key, --api-key-file); give the key one way"
            in err) and "wrote" not in err
    monkeypatch.setenv("SPANSEEK_API_KEY", "wrong")
    assert main(["sync", str(docs), "--url", url]) == 2  # both variables: which one was meant?
    assert "both given as environment variables (SPANSEEK_API_KEY, SPANSEEK_API_KEY_FILE)" in capsys.readouterr().err
    monkeypatch.delenv("SPANSEEK_API_KEY_FILE")
    key_file.chmod(0o600)
    (docs / "a.txt").write_text("In 1453 Gala built the harbour bridge.")
    assert main(["sync", str(docs), "--url", url, "--api-key-file", str(key_file)]) == 0  # was refused: both given
    err = capsys.readouterr().err
    assert "wrote 1" in err and "warning" not in err and "wrong" not in err
    monkeypatch.delenv("SPANSEEK_API_KEY")
    key_file.write_text("")
    assert main(["sync", str(docs), "--url", url, "--api-key-file", str(key_file)]) == 2
    assert f"error: --api-key-file {key_file}: holds no key" in capsys.readouterr().err


def test_a_key_file_that_cannot_be_used_is_named_by_the_flag_or_variable_that_gave_it(tmp_path, capsys, monkeypatch):
    """A key file that was missing, a folder or empty was said as "key file PATH: ...", naming neither --api-key-file
    nor SPANSEEK_API_KEY_FILE: with one in a script's environment and the other in its command, which was wrong? The
    line now names the one that gave it."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    monkeypatch.delenv("SPANSEEK_API_KEY", raising=False)
    monkeypatch.setenv("SPANSEEK_API_KEY_FILE", str(docs))
    argv = ["sync", str(docs), "--url", "http://127.0.0.1:9"]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"spanseek sync: error: SPANSEEK_API_KEY_FILE {docs}: a directory, not a file\n"
    assert main([*argv, "--api-key-file", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"spanseek sync: error: --api-key-file {tmp_path / 'missing'}: no such file\n"


class EditingClient(Client):
    """A client that runs ``edit`` when the sync first asks the service about one document or writes one (after the
    walk): a folder that changes while it is synced (a file saved, or removed, by someone else)."""

    def __init__(self, *args, edit, **kwargs):
        super().__init__(*args, **kwargs)
        self.edit = edit

    def _edit_once(self):
        if self.edit is not None:
            self.edit, edit = None, self.edit
            edit()

    def get(self, doc_id, **kwargs):
        self._edit_once()
        return super().get(doc_id, **kwargs)

    def upsert_file(self, *args, **kwargs):
        self._edit_once()
        return super().upsert_file(*args, **kwargs)


def test_the_hash_recorded_is_that_of_the_text_written_when_a_file_is_saved_during_the_sync(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    second = "In 1455 Gala rebuilt the harbour bridge."
    with EditingClient(url, api_key="key", edit=lambda: (docs / "a.txt").write_text(second)) as client:
        assert sync(client, [docs], "docs").written == ["a.txt"]
        held = client.get("a.txt")
    first_hash = hashlib.sha256(b"In 1450 Gala built the harbour bridge.").hexdigest()
    # whichever version was sent, the hash says which: never the text of one with the hash of the other
    assert (held["paragraphs"], held["meta"][HASH_KEY]) == (["In 1450 Gala built the harbour bridge."], first_hash)
    with Client(url, api_key="key") as client:  # the file as it is now is written by the next run
        assert sync(client, [docs], "docs").written == ["a.txt"] and client.get("a.txt")["paragraphs"] == [second]


class ListingEditingClient(EditingClient):
    """An ``EditingClient`` that edits when the sync lists what the service holds, after the walk and before it reads
    any file (a file's write may still be in flight when the next file is read)."""

    def documents(self, *args, **kwargs):
        self._edit_once()
        return super().documents(*args, **kwargs)


def test_a_file_gone_or_unreadable_is_refused_and_the_others_are_written(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1460 Hugo built the church.",
                                      "c.txt": "In 1470 Ida built the mill."})
    with Client(url, api_key="key") as client:
        assert sorted(sync(client, [docs], "docs").written) == ["a.txt", "b.txt", "c.txt"]
    (docs / "a.txt").write_text("In 1451 Gala built the bridge.")
    (docs / "c.txt").write_text("In 1471 Ida built the mill.")
    with ListingEditingClient(url, api_key="key", edit=(docs / "b.txt").unlink) as client:  # removed after the walk
        report = sync(client, [docs], "docs", delete=True)
        assert sorted(report.written) == ["a.txt", "c.txt"] and report.deleted == []
        assert [(i, "No such file" in why) for i, why in report.refused] == [("b.txt", True)]
        assert client.get("b.txt") is not None  # kept this time; the next run deletes it
        assert sync(client, [docs], "docs", delete=True).deleted == ["b.txt"]


def test_a_document_of_another_source_or_a_second_file_of_one_name_is_not_replaced(url, tmp_path):
    a = folder(tmp_path / "a", {"shared.txt": "In 1450 Gala built the bridge.", "a.txt": "In 1470 Ida built the mill."})
    b = folder(tmp_path / "b", {"shared.txt": "In 1460 Hugo built the church."})
    with Client(url, api_key="key") as client:
        assert sorted(sync(client, [a], "a").written) == ["a.txt", "shared.txt"]
        report = sync(client, [b], "b", delete=True)
        assert report.written == [] and [i for i, _ in report.refused] == ["shared.txt"]
        assert "synced from 'a'" in report.refused[0][1] and "--source a" in report.refused[0][1]
        assert client.get("shared.txt")["paragraphs"] == ["In 1450 Gala built the bridge."]
        assert sync(client, [a], "a").unchanged == ["a.txt", "shared.txt"]  # not written back and forth
        # two folders in one run: one id, the first folder's file
        report = sync(client, [a, b], "a")
        assert [i for i, _ in report.refused] == ["shared.txt"] and "same name" in report.refused[0][1]
        assert client.get("shared.txt")["paragraphs"] == ["In 1450 Gala built the bridge."]
        # a folder moved (another default source): refused until --source names the old one
        assert sync(client, [a], "a-moved", delete=True).refused != []
        assert sync(client, [a], "a", delete=True).refused == []


def test_delete_holds_back_when_no_file_is_found_or_a_folder_cannot_be_read(url, tmp_path, monkeypatch):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the bridge.",
                                      "locked/b.txt": "In 1460 Hugo built the church."})
    with Client(url, api_key="key") as client:
        assert sorted(sync(client, [docs], "docs").written) == ["a.txt", "locked/b.txt"]
        real_scandir = os.scandir

        def scandir(folder):  # the folder "locked" as a folder without read permission
            if os.path.basename(folder) == "locked":
                raise PermissionError(13, "Permission denied", str(folder))
            return real_scandir(folder)

        monkeypatch.setattr("spanseek.indexer.ingest.os.scandir", scandir)
        report = sync(client, [docs], "docs", delete=True)
        assert report.deleted_total == 0 and "could not be read" in report.not_deleted
        assert client.get("locked/b.txt") is not None
        monkeypatch.undo()
        empty = tmp_path / "empty" / "docs"
        empty.mkdir(parents=True)  # a folder not mounted, say
        report = sync(client, [empty], "docs", delete=True)
        assert report.deleted_total == 0 and "no file was found" in report.not_deleted and "(2)" in report.not_deleted
        assert client.get("a.txt") is not None and client.get("locked/b.txt") is not None


def test_a_file_over_the_servers_limit_is_refused_and_a_delete_too_large_is_said_so(settings_for, tmp_path, live,
                                                                                    capsys):
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_file_bytes=2048, max_body_bytes=1024)
    deep = "/".join(["d" * 200] * 5) + "/a.txt"  # an id (1,010 characters; at most 1,024) over the delete's body
    docs = folder(tmp_path / "docs", {"big.txt": "In 1450 Gala built the bridge. " * 100,
                                      "small.txt": "In 1460 Hugo built the church.", deep: "In 1470 Ida built the mill."})
    with live(create_app(settings)) as base, Client(base, api_key="key") as client:
        report = sync(client, [docs], "docs")
        assert sorted(report.written) == [deep, "small.txt"]
        assert report.refused == [("big.txt", "3,100 bytes, more than its max_file_bytes (2,048)")]
        (docs / "small.txt").unlink()  # a document to delete: the request is sent
        with pytest.raises(ValueError, match="--delete: its request lists the 2 files kept.*--max-body-bytes"):
            sync(client, [docs], "docs", delete=True)
        # the command: the run failed after its writes (status 1), its command line was right (2: a usage error)
        assert main(["sync", str(docs), "--source", "docs", "--url", base, "--api-key", "key", "--delete"]) == 1
        assert "--delete: its request lists the 2 files kept" in capsys.readouterr().err


def test_the_command_prints_each_file_it_writes_and_no_request_log(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    run = subprocess.run([sys.executable, "-m", "spanseek.cli", "sync", str(docs), "--url", url],  # the key: no warning
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "SPANSEEK_API_KEY": "key"})
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == ["  wrote a.txt", "wrote 1, unchanged 0, deleted 0, refused 0"], run.stderr


def test_a_write_without_an_answer_in_time_stops_the_sync_naming_the_file(url, tmp_path, monkeypatch, capsys):
    import asyncio

    from spanseek.service.file_reader import FileReader

    reader = FileReader.read

    async def slow_read(self, *args):  # a long file
        await asyncio.sleep(1.5)
        return await reader(self, *args)

    monkeypatch.setattr(FileReader, "read", slow_read)
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    with Client(url, api_key="key", timeout=0.5) as client, pytest.raises(RuntimeError, match="a.txt: no answer"):
        sync(client, [docs], "docs")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--timeout", "0.5"]) == 1
    assert "a.txt: no answer to its write in time" in capsys.readouterr().err
    # by default a write may take as long as a large file's encoding does (the client's own default is a minute)
    assert build_parser().parse_args(["sync", str(docs), "--url", url]).timeout >= 3600


def test_a_name_no_id_may_hold_is_refused_and_the_others_are_written(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a\nb.txt": "In 1450 Gala built the bridge.", "c.txt": "In 1470 Ida built the mill."})
    with Client(url, api_key="key") as client:
        report = sync(client, [docs], "docs")
        assert report.written == ["c.txt"] and [i for i, _ in report.refused] == ["a\nb.txt"]
        assert "line break" in report.refused[0][1]
        with pytest.raises(ValueError, match="a\nb.txt: its name holds a line break"):
            sync(client, [docs], "docs", strict=True)


def test_a_first_sync_with_delete_deletes_nothing_and_works(url, tmp_path):
    """The server refuses a filter on a field no document has: a first `sync --delete` (or `--dry-run --delete`),
    before any document held synced_from, failed with that 400."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge.", "blank.txt": " "})
    with Client(url, api_key="key") as client:
        dry = sync(client, [docs], "docs", delete=True, dry_run=True)
        assert dry.written == ["a.txt"] and dry.deleted == [] and client.get("a.txt") is None
        assert dry.refused == [("blank.txt", "the server would refuse it: no text")]  # as the write below is
        only_refused = sync(client, [docs / "blank.txt"], "docs", delete=True)  # every file refused: none held
        assert only_refused.deleted == [] and [r for r, _ in only_refused.refused] == [str(docs / "blank.txt")]
        done = sync(client, [docs], "docs", delete=True)
        assert done.written == ["a.txt"] and done.deleted == []


class Recording(httpx.HTTPTransport):
    """An httpx transport that keeps each request's method and path and each answer's size."""

    def __init__(self):
        super().__init__()
        self.requests: list[tuple[str, str, int]] = []

    def handle_request(self, request):
        response = super().handle_request(request)
        response.read()
        self.requests.append((request.method, request.url.path, len(response.content)))
        return response


def test_a_second_sync_of_an_unchanged_folder_reads_one_list_not_each_document(url, tmp_path):
    """What the service holds of a source is read as one page of ids and metadata (was: GET /documents/{id} of each
    file, every passage of it sent back); a new file's id is asked about without its passages."""
    long = "\n\n".join(f"In {1400 + i} the guild of the harbour built bridge number {i}." for i in range(60))
    docs = folder(tmp_path / "docs", {"big.txt": long, **{f"n{i}.txt": f"In 14{i}0 Ida built mill {i}."
                                                          for i in range(5)}})
    with Client(url, api_key="key") as client:
        assert len(sync(client, [docs], "docs").written) == 6
    recording = Recording()
    with Client(url, api_key="key", transport=recording) as client:
        assert len(sync(client, [docs], "docs").unchanged) == 6
    assert [(m, path) for m, path, _ in recording.requests] == [("GET", "/documents")]
    assert recording.requests[0][2] < len(long)  # ids and metadata, not the passages
    (docs / "new.txt").write_text("In 1490 Jan built the tower.")
    recording.requests.clear()
    with Client(url, api_key="key", transport=recording) as client:
        assert sync(client, [docs], "docs").written == ["new.txt"]
    asked = [(m, path) for m, path, _ in recording.requests]
    assert asked == [("GET", "/documents"), ("GET", "/documents/new.txt"), ("PUT", "/files/new.txt")]


def test_many_new_files_are_looked_up_in_one_listing_not_one_request_each(url, tmp_path):
    """A sync of 20,000 new files asked GET /documents/{id} of each before writing it: a dry run took 39 s. From
    LIST_ALL_FROM such files on, the service's documents are listed once when it holds at most ten for each file
    (here it holds a few); a document of another source among them is still refused."""
    names = {f"n{i:02d}.txt": f"In 14{i:02d} Ida built mill {i}." for i in range(LIST_ALL_FROM)}
    docs = folder(tmp_path / "docs", names)
    with Client(url, api_key="key") as client:
        sync(client, [folder(tmp_path / "other", {"n00.txt": "In 1300 Bo built it."})], "other")
        recording = Recording()
    with Client(url, api_key="key", transport=recording) as client:
        report = sync(client, [docs], "docs", dry_run=True)
    assert report.written == sorted(names)[1:] and [r for r, _ in report.refused] == ["n00.txt"]
    # (and, a dry run, the server's file limits once)
    assert [(m, path) for m, path, _ in recording.requests] == [("GET", "/documents")] * 2 + [("GET", "/info")]


class InFlight(httpx.HTTPTransport):
    """A transport that holds each file's write a while and counts the writes awaiting their answers at once."""

    def __init__(self):
        super().__init__()
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def handle_request(self, request):
        if request.method != "PUT":
            return super().handle_request(request)
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.05)
        try:
            return super().handle_request(request)
        finally:
            with self.lock:
                self.now -= 1


def test_files_are_sent_jobs_at_a_time_and_reported_in_their_order(url, tmp_path, capsys):
    """Each file's write waited for its answer before the next was sent, leaving the server idle between files; now
    ``--jobs`` writes (4 by default) await their answers at once, and the lines printed keep the files' order."""
    names = [f"n{i}.txt" for i in range(9)]
    docs = folder(tmp_path / "docs", {n: f"In 14{i}0 Ida built mill {i}." for i, n in enumerate(names)})
    transport = InFlight()
    with Client(url, api_key="key", transport=transport) as client:
        assert sync(client, [docs], "docs").written == names
    assert transport.most == DEFAULT_JOBS
    (docs / "n9.txt").write_text("In 1490 Jan built the tower.")
    for i in range(3):
        (docs / names[i]).write_text(f"In 15{i}0 Ida rebuilt mill {i}.")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--source", "docs",
                 "--jobs", "2"]) == 0
    assert [line.split()[-1] for line in capsys.readouterr().err.splitlines() if line.startswith("  wrote ")] == [
        "n0.txt", "n1.txt", "n2.txt", "n9.txt"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sync", str(docs), "--url", url, "--jobs", "many"])
    assert main(["sync", str(docs), "--url", url, "--jobs", "0"]) == 2
    assert "--jobs takes a number of files >= 1, got 0" in capsys.readouterr().err


class OneUpload(httpx.HTTPTransport):
    """A server that takes one file upload at a time (``--max-file-uploads 1``): a write while another is in
    progress is answered 429, as the service answers one past its uploads."""

    def __init__(self):
        super().__init__()
        self.slot, self.refused = threading.Lock(), 0

    def handle_request(self, request):
        if request.method != "PUT":
            return super().handle_request(request)
        if not self.slot.acquire(blocking=False):
            self.refused += 1
            return httpx.Response(429, headers={"Retry-After": "0"}, json={
                "type": "overloaded", "message": "1 file uploads are in progress, the most this server takes at once"})
        try:
            time.sleep(0.05)
            return super().handle_request(request)
        finally:
            self.slot.release()


def test_a_server_taking_fewer_uploads_than_jobs_gets_each_file_in_turn(url, tmp_path):
    """Against a server taking fewer uploads at once than ``--jobs`` (its ``--max-file-uploads`` lower, or another
    client's uploads), the writes past them were answered 429 and the run stopped ("HTTP 429 ...; stopped after
    writing 1 of 6 files"), where sending one file at a time wrote them all. Such writes are now sent again as the
    run's own are answered, fewer at once from then on; a 429 to a write sent alone still stops the run."""
    names = [f"n{i}.txt" for i in range(6)]
    docs = folder(tmp_path / "docs", {n: f"In 14{i}0 Ida built mill {i}." for i, n in enumerate(names)})
    transport = OneUpload()
    with Client(url, api_key="key", transport=transport, max_retries=0) as client:  # (a 429 is final at once)
        assert sync(client, [docs], "docs").written == names
        assert transport.refused > 0
        (docs / "n0.txt").write_text("In 1500 Ida rebuilt mill 0.")
        with transport.slot:  # another client's upload holds the server's one
            with pytest.raises(APIError) as refused:
                sync(client, [docs], "docs")
    assert refused.value.status == 429


class OlderServer(httpx.HTTPTransport):
    """A server from before GET /documents: it answers the listing 405 (it has PUT and POST /documents), and
    GET /documents/{id} with the whole document whatever the query."""

    def handle_request(self, request):
        if request.method == "GET" and request.url.path == "/documents":
            return httpx.Response(405, headers={"allow": "PUT"}, request=request,
                                  json={"error": "method_not_allowed", "message": "Method Not Allowed"})
        return super().handle_request(request)


def test_a_sync_with_a_server_older_than_the_listing_asks_about_each_file(url, tmp_path):
    """The sync stopped at its first request (405) against a server without GET /documents; it now asks about each
    file as it did before, and takes over the former default name's documents there too."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1460 Hugo built it."})
    with Client(url, api_key="key", transport=OlderServer()) as client:
        assert sorted(sync(client, [docs], "docs").written) == ["a.txt", "b.txt"]
        (docs / "b.txt").write_text("In 1461 Hugo rebuilt it.")
        (docs / "c.txt").write_text("In 1470 Ida built the mill.")
        report = sync(client, [docs], default_source([docs]), adopt="docs")
        assert report.unchanged == [] and sorted(report.written) == ["a.txt", "b.txt", "c.txt"]
        assert sorted(report.adopted) == ["a.txt", "b.txt"] and report.refused == []
        assert {client.get(n)["meta"][SOURCE_KEY] for n in ("a.txt", "b.txt")} == {default_source([docs])}
        assert sync(client, [docs], default_source([docs]), adopt="docs").unchanged == ["a.txt", "b.txt", "c.txt"]


def test_the_default_source_tells_two_folders_of_one_name_apart(url, tmp_path, capsys):
    """Two folders named ``docs`` synced into one service with the default --source are two sources: the second's
    --delete leaves the first's documents alone (it deleted them when the default was the folder's name)."""
    one = folder(tmp_path / "one" / "docs", {"a.txt": "In 1450 Gala built the bridge."})
    two = folder(tmp_path / "two" / "docs", {"b.txt": "In 1460 Hugo built the church."})
    assert default_source([one]) != default_source([two]) and default_source([one]).startswith("docs@")
    assert default_source([one]) == default_source([str(one) + "/"])  # the same folder, however it is written
    assert default_source([one]) != default_source([one, two])  # another set of paths: another source
    assert main(["sync", str(one), "--url", url, "--api-key", "key", "--delete"]) == 0
    assert main(["sync", str(two), "--url", url, "--api-key", "key", "--delete"]) == 0
    assert "deleted 0" in capsys.readouterr().err
    with Client(url, api_key="key") as client:
        assert client.get("a.txt")["meta"][SOURCE_KEY] == default_source([one])
        assert client.get("b.txt")["meta"][SOURCE_KEY] == default_source([two])
    # a given --source still names the sync
    assert main(["sync", str(one), "--url", url, "--api-key", "key", "--source", "handbook"]) == 1
    assert "synced from 'docs@" in capsys.readouterr().err  # the default's documents are not taken over silently


def test_documents_synced_under_the_former_default_name_are_taken_over_and_written_once(url, tmp_path, capsys):
    """A folder synced when the default --source was its bare name: a sync with the new default writes its documents
    once more under the new name (left alone, they kept the former name, and a later --delete never removed them
    once their files were gone), and deletes none of the former name's other documents (another folder of that name
    may have written those)."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1460 Hugo built it.",
                                      "c.txt": "In 1470 Ida built the mill."})
    elsewhere = folder(tmp_path / "elsewhere" / "docs", {"x.txt": "In 1480 Jan built the tower."})
    with Client(url, api_key="key") as client:
        sync(client, [docs], "docs")  # as the default was: the folder's name
        sync(client, [elsewhere], "docs")  # another folder of that name, under the same former default
    args = ["sync", str(docs), "--url", url, "--api-key", "key", "--delete"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "wrote 3, unchanged 0, deleted 0" in err and "3 of these documents were synced under the former " \
        "default name 'docs'" in err
    with Client(url, api_key="key") as client:
        assert {client.get(n, meta_only=True)["meta"][SOURCE_KEY] for n in ("a.txt", "b.txt", "c.txt")} == {
            default_source([docs])}
    assert main(args) == 0
    assert "wrote 0, unchanged 3, deleted 0" in capsys.readouterr().err  # taken over once, not at every run
    (docs / "a.txt").write_text("In 1451 Gala rebuilt the bridge.")
    (docs / "c.txt").unlink()
    assert main(args) == 0
    assert "wrote 1, unchanged 1, deleted 1" in capsys.readouterr().err
    with Client(url, api_key="key") as client:
        assert client.get("c.txt") is None  # its file gone: deleted, as the new name's
        assert client.get("x.txt")["meta"][SOURCE_KEY] == "docs"  # the other folder's: kept
    # a given --source takes nothing over: the documents stay the default source's
    assert main([*args, "--source", "manual"]) == 1
    assert f"synced from {default_source([docs])!r}" in capsys.readouterr().err


def test_a_folder_synced_through_a_link_stays_one_source_when_the_link_moves(url, tmp_path, capsys):
    """``current/`` switched from one release's folder to the next: the same default --source (it named the link's
    target, and every file of the new release was refused as another source's), the changed files written and the
    unchanged ones left alone."""
    v1 = folder(tmp_path / "v1", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1460 Hugo built it."})
    v2 = folder(tmp_path / "v2", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1461 Hugo rebuilt it."})
    current = tmp_path / "current"
    current.symlink_to(v1, target_is_directory=True)
    args = ["sync", str(current), "--url", url, "--api-key", "key", "--delete"]
    assert main(args) == 0
    current.unlink()
    current.symlink_to(v2, target_is_directory=True)
    assert main(args) == 0
    assert "wrote 1, unchanged 1, deleted 0, refused 0" in capsys.readouterr().err
    assert default_source([current]).startswith("current@")


def test_a_name_spelled_nfd_is_one_id_and_its_document_of_an_earlier_sync_is_kept(url, settings_for, nfd_index,
                                                                                  live, tmp_path):
    """macOS's HFS+ spells café.txt with a combining accent (NFD), most others with one character (NFC): the same
    file synced from each was two documents whose ids look alike. Ids are NFC; a document an earlier sync wrote under
    the NFD spelling is the one its file replaces, and --delete keeps it."""
    nfc, nfd = NFC_ID, NFD_ID
    docs = folder(tmp_path / "docs", {nfd: "In 1450 Gala built the harbour bridge."})
    other = folder(tmp_path / "other", {nfc: "In 1450 Gala built the harbour bridge."})
    with Client(url, api_key="key") as client:
        assert sync(client, [docs], "docs").written == [nfc]
        assert sync(client, [other], "docs", delete=True).unchanged == [nfc]
        assert [d["id"] for d in client.documents() if d["id"].startswith("caf")] == [nfc]
    # an index holding the NFD id, as a sync before ids were NFC wrote it
    settings = settings_for(index=nfd_index, writes=True, api_key="key", live_dir=tmp_path / "live-nfd",
                            merge_tokens=0)
    (docs / nfd).write_text("In 1455 Gala rebuilt the harbour bridge.", encoding="utf-8")
    with live(create_app(settings)) as base, Client(base, api_key="key") as client:
        report = sync(client, [docs], "docs", delete=True)
        assert report.written == [nfc] and report.deleted == []
        assert [d["id"] for d in client.documents() if d["id"].startswith("caf")] == [nfd]
        assert "1455" in client.get(nfd)["paragraphs"][0]
        again = sync(client, [docs], "docs", delete=True)
        assert again.written == [] and again.unchanged == [nfc] and again.deleted == []


def test_a_file_replaces_its_document_held_under_a_third_spelling_of_its_name(settings_for, third_spelling_index,
                                                                                live, tmp_path):
    """A document held under a spelling of the file's name that is neither NFC nor NFD ("vi\u1eb9\u0302t.txt") is
    the one its file replaces, as the service's /documents/{id} finds it; not a second document beside it."""
    docs = folder(tmp_path / "docs", {THIRD_NFC: "In 1455 Gala rebuilt the harbour bridge."})
    settings = settings_for(index=third_spelling_index, writes=True, api_key="key", live_dir=tmp_path / "live",
                            merge_tokens=0)
    with live(create_app(settings)) as base, Client(base, api_key="key") as client:
        report = sync(client, [docs], "docs", delete=True)
        assert report.written == [THIRD_NFC] and report.deleted == []
        assert [d["id"] for d in client.documents() if d["id"].startswith("vi")] == [THIRD_ID]
        assert "1455" in client.get(THIRD_ID)["paragraphs"][0]


def test_a_link_to_a_file_outside_the_folder_is_not_sent_unless_links_are_followed(url, tmp_path, capsys):
    """A link planted in a synced folder sent its target (~/.ssh/id_rsa) to the service. It is refused and named (exit
    status 1), and --delete deletes what an earlier sync sent of it; --follow-links sends it. A link inside the folder
    is sent under its own name; of a file and a link to it, the file keeps the id and the link is named."""
    (tmp_path / "id_rsa.txt").write_text("PRIVATE KEY material of the operator")
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge.",
                                      ".drafts/b.txt": "In 1460 Hugo built the island church."})
    (docs / "key.txt").symlink_to(tmp_path / "id_rsa.txt")
    (docs / "b.txt").symlink_to(".drafts/b.txt")
    (docs / "0-latest.txt").symlink_to("a.txt")
    args = ["sync", str(docs), "--url", url, "--api-key", "key", "--source", "docs", "--delete"]
    assert main([*args, "--follow-links"]) == 1  # the duplicate link is still refused
    with Client(url, api_key="key") as client:
        assert client.get("key.txt")["meta"][SOURCE_KEY] == "docs"
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"refused {docs / 'key.txt'}: a link to {tmp_path / 'id_rsa.txt'}, outside the folder {docs}" in err
    assert f"refused {docs / '0-latest.txt'}: the same file as {docs / 'a.txt'}, which is read" in err
    assert "deleted key.txt" in err and "deleted 1, refused 2" in err
    with Client(url, api_key="key") as client:
        assert client.get("key.txt") is None
        assert {d["id"] for d in client.documents({SOURCE_KEY: "docs"})} == {"a.txt", "b.txt"}


def test_a_name_that_is_not_utf8_is_refused_and_the_others_are_written_and_kept(url, tmp_path, capsys):
    """A file named in another system's encoding (Latin-1 bytes, which Python holds as lone surrogates) stopped the
    whole sync with "'utf-8' codec can't encode character '\\udcff'", naming no file, before or after the others."""
    docs = folder(tmp_path / "docs", {"ok.txt": "In 1450 Gala built the harbour bridge."})
    with open(os.path.join(os.fsencode(docs), b"caf\xe9.txt"), "wb") as f:
        f.write(b"In 1460 Hugo built the island church.")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--source", "docs", "--delete"]) == 1
    err = capsys.readouterr().err
    assert "wrote 1, unchanged 0, deleted 0, refused 1" in err
    assert "refused caf\\udce9.txt: its name is not UTF-8 (the bytes b'caf\\xe9.txt')" in err
    with Client(url, api_key="key") as client:
        assert [d["id"] for d in client.documents({SOURCE_KEY: "docs"})] == ["ok.txt"]
        with pytest.raises(ValueError, match="not UTF-8"):
            sync(client, [docs], "docs", strict=True)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, httpx.ConnectError("[Errno 111] Connection refused")])
def test_a_sync_stopped_part_way_says_how_far_it_got_and_the_rerun_writes_only_the_rest(url, tmp_path, capsys,
                                                                                       monkeypatch, stop):
    """Ctrl-C, or the server gone, part way: the last line said only "interrupted" or the connection error, not what
    was written nor that the same command goes on; the rerun writes only the files not written yet."""
    docs = folder(tmp_path / "docs", {f"{n}.txt": f"In 14{n}0 Gala built bridge {n}." for n in range(4)})
    real = Client.upsert_file
    sent = []

    def upsert_file(self, *args, **kwargs):
        if len(sent) == 2:
            raise stop
        sent.append(args[1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Client, "upsert_file", upsert_file)
    args = ["sync", str(docs), "--url", url, "--api-key", "key", "--delete"]
    assert main(args) == (130 if stop is KeyboardInterrupt else 1)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("spanseek sync: ") and last.endswith(
        "stopped after writing 2 of 4 files (unchanged 0, refused 0, deleted 0); the same command goes on from there")
    monkeypatch.undo()
    assert main(args) == 0
    assert capsys.readouterr().err.splitlines()[-1] == "wrote 2, unchanged 2, deleted 0, refused 0"


@pytest.mark.slow  # a process of its own (the test's would end at SIGTERM), which imports the client: 3-9 s
def test_a_sync_stopped_by_sigterm_says_how_far_it_got(url, tmp_path):
    """SIGTERM (kill, a scheduler's stop) ended a sync at once, without a line saying what it had written; it now
    stops as Ctrl-C does, with that line and status 130, at once: a write still awaiting its answer (here one the
    server would take ten minutes to encode) does not hold the process until it comes."""
    docs = folder(tmp_path / "docs", {f"{n}.txt": f"In 14{n}0 Gala built bridge {n}." for n in range(4)})
    script = (
        "import os, signal, sys, time\n"
        "from spanseek.cli import main\n"
        "from spanseek.client import Client\n"
        "real, sent = Client.upsert_file, []\n"
        "def upsert_file(self, *args, **kwargs):\n"
        "    if len(sent) == 2:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(600)\n"
        "    sent.append(args[1])\n"
        "    return real(self, *args, **kwargs)\n"
        "Client.upsert_file = upsert_file\n"
        f"sys.exit(main(['sync', {str(docs)!r}, '--url', {url!r}, '--api-key', 'key', '--jobs', '1']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)  # (not 600)
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "spanseek sync: interrupted: stopped by SIGTERM; stopped after writing 2 of 4 files (unchanged 0, refused 0, "
        "deleted 0); the same command goes on from there")


def test_delete_spares_what_another_run_of_the_folder_wrote_since_it_began(url, tmp_path):
    """Two runs of one folder at once (cron starting the next before the last ended): a file that appeared after
    the first run's walk, written by the second, had its document deleted by the first's --delete, the file there."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the bridge.", "b.txt": "In 1460 Hugo built it."})
    with Client(url, api_key="key") as client:
        assert sorted(sync(client, [docs], "docs", delete=True).written) == ["a.txt", "b.txt"]
    (docs / "a.txt").write_text("In 1451 Gala rebuilt the bridge.")
    (docs / "old.txt").write_text("In 1470 Ida built the mill.")
    with Client(url, api_key="key") as client:
        assert sync(client, [docs], "docs").written == ["a.txt", "old.txt"]
    (docs / "old.txt").unlink()

    def second_run():
        (docs / "new.txt").write_text("In 1490 Jan built the tower.")
        with Client(url, api_key="key") as other:
            assert sync(other, [docs], "docs").written == ["b.txt", "new.txt"]

    (docs / "b.txt").write_text("In 1461 Hugo rebuilt it.")
    with EditingClient(url, api_key="key", edit=second_run) as client:  # after this run's walk and listing
        report = sync(client, [docs], "docs", delete=True)
        assert report.written == ["b.txt"] and report.deleted == ["old.txt"]  # still deletes what is gone
        assert client.get("new.txt") is not None
        assert sorted(d["id"] for d in client.documents({SOURCE_KEY: "docs"})) == ["a.txt", "b.txt", "new.txt"]


def test_a_dry_run_refuses_a_file_whose_path_is_over_the_id_limit_as_the_write_does(url, tmp_path):
    """A file's path is its id, and a write takes one of at most 1,024 characters: the write refused a longer one,
    while a dry run said it would write it."""
    deep = "/".join(["d" * 200] * 6) + "/a.txt"  # 1,211 characters
    docs = folder(tmp_path / "docs", {"small.txt": "In 1460 Hugo built the church.", deep: "In 1470 Ida built the mill."})
    with Client(url, api_key="key") as client:
        dry = sync(client, [docs], "docs", dry_run=True)
        real = sync(client, [docs], "docs")
    assert dry.written == real.written == ["small.txt"]
    assert [rel for rel, _ in dry.refused] == [rel for rel, _ in real.refused] == [deep]
    assert "'id' has 1,211 characters; an id has at most 1,024" in dry.refused[0][1], dry.refused


def test_a_dry_run_passes_a_file_whose_long_path_a_held_document_has_as_the_write_replaces_it(settings_for, tmp_path,
                                                                                                 live, tiny_model_dir):
    """The write replaces a document an index holds under an id over 1,024 characters (one built from a corpus file
    may hold such an id), and refuses only a new id that long; a dry run refused both files for their paths' length,
    though the sync then wrote the held one."""
    from tests.service.conftest import _index_holding

    held, new = ("/".join([c * 200] * 6) + "/a.txt" for c in "dn")  # 1,211 characters each
    index = _index_holding(tmp_path, tiny_model_dir, held)  # (synced from "docs", another digest)
    docs = folder(tmp_path / "docs", {held: "In 1470 Ida built the mill.", new: "In 1480 Ida built the weir."})
    settings = settings_for(index=index, writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        dry = sync(client, [docs], "docs", dry_run=True)
        real = sync(client, [docs], "docs")
        assert client.get(held)["paragraphs"] == ["In 1470 Ida built the mill."]
    assert dry.written == real.written == [held]
    assert [rel for rel, _ in dry.refused] == [rel for rel, _ in real.refused] == [new]
    assert dry.refused[0][1] == "the server would refuse it: 'id' has 1,211 characters; an id has at most 1,024"


def test_a_read_memory_cap_the_reading_process_cannot_start_under_is_refused_naming_the_flag(tmp_path, capsys):
    docs = folder(tmp_path / "docs", {"a.md": "In 1450 Gala built the harbour bridge."})
    assert main(["sync", str(docs), "--url", "http://127.0.0.1:9", "--dry-run", "--read-memory-bytes", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek sync: error: --read-memory-bytes: 5 bytes is too little") and err.count("\n") == 1


def test_a_dry_run_refuses_the_files_the_server_refuses_for_its_size_and_tokens_as_the_write_does(settings_for,
                                                                                                  tmp_path, live):
    """A dry run counted a file over the server's max_file_bytes or max_file_tokens as one it would write, which the
    write then refused (413): /info did not say them. /info now publishes them (service.files), and the dry run
    refuses what the write refuses, counting tokens with the server's tokenizer."""
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_file_bytes=2048, max_file_tokens=40)
    docs = folder(tmp_path / "docs", {"big.txt": "In 1450 Gala built the harbour bridge. " * 80,
                                      "many.txt": "Gala's harbour-bridge, 1450. " * 10,  # 40 words, some 80 tokens
                                      "ok.txt": "In 1460 Hugo built the island church."})
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        files = client.info()["service"]["files"]
        planned = sync(client, [docs], "docs", dry_run=True)
        done = sync(client, [docs], "docs")
    assert files == {"max_file_bytes": 2048, "max_file_tokens": 40, "max_file_uploads": 4, "max_title_chars": 1000,
                     "file_read_memory_bytes": settings.file_read_memory_bytes,
                     "file_read_timeout_s": settings.file_read_timeout_s, "tokenizer": files["tokenizer"]}
    assert planned.written == done.written == ["ok.txt"]
    assert [r for r, _ in planned.refused] == [r for r, _ in done.refused] == ["big.txt", "many.txt"]
    assert dict(planned.refused)["big.txt"] == "the server would refuse it: 3,120 bytes, more than its " \
                                               "max_file_bytes (2,048)"
    tokens = dict(done.refused)["many.txt"].split(": ")[-1].split(" tokens")[0]  # the server's count
    assert dict(planned.refused)["many.txt"] == f"the server would refuse it: {tokens} tokens, more than its " \
                                                f"max_file_tokens (40)"


def test_a_dry_run_reads_a_file_within_the_servers_time_limit_and_refuses_one_that_takes_longer(settings_for,
                                                                                                tmp_path, live):
    """A dry run read each file for as long as its reading took (32 MiB of Markdown table rows: some 20 minutes),
    where the server gives a file file_read_timeout_s. It now gives each file that much CPU time (or
    --read-timeout-s): a file that takes longer is refused, and the files after it are read."""
    rows = "| a | b |\n|---|---|\n" + "| cell | cell |\n" * 5_000  # some 0.3 s of CPU time to read
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            file_read_timeout_s=0.1)
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge.",
                                      "b-table.md": rows, "c.txt": "In 1460 Hugo built the island church."})
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True)
    assert planned.written == ["a.txt", "c.txt"]
    assert planned.refused == [("b-table.md", "the server would refuse it: not read within 0.1 s of CPU time "
                                "(--read-timeout-s); a damaged or hostile file, or one too large to read in that "
                                "time: split it, or raise the limit")]


def test_strict_stops_at_the_first_file_refused_and_reports_every_refusal_and_write_before_it(url, tmp_path,
                                                                                             capsys):
    """--strict raised at the first refusal it took: the answers of the writes still in flight were dropped (a file
    the server refused, sent before the one the sync refused itself, went unreported), and a refusal by the server
    ended the run as an error naming the URL (exit status 2, no counts). It now takes the answers of the writes sent,
    reports every refusal and write with the counts, names the file it stopped at and exits 1, as a refused file
    does; the files after it are not sent."""
    docs = folder(tmp_path / "docs", {"a.txt": "", "b\nc.txt": "In 1450 Gala built the harbour bridge.",
                                      "d.txt": "In 1460 Hugo built the island church."})
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "wrote 0, unchanged 0, deleted 0, refused 2" in err and "refused a.txt: a.txt: the request has no body" in err
    assert err.endswith("stopped at the first file refused (--strict): b\nc.txt: its name holds a line break, which "
                        "no document id may hold (GET /documents/{id} could not name it); rename it\n")
    (docs / "b\nc.txt").unlink()
    (docs / "c.txt").write_text("In 1470 Ida built the mill.")
    with Client(url, api_key="key") as client:
        report = SyncReport()
        with pytest.raises(ValueError, match="^a.txt: a.txt: the request has no body"):  # (sync.StrictStop)
            sync(client, [docs], "docs", strict=True, report=report)  # (a.txt's answer comes with the others in flight)
        assert report.written == ["c.txt", "d.txt"] and [r for r, _ in report.refused] == ["a.txt"]


def test_a_dry_run_works_from_a_script_without_a_main_guard(url, tmp_path):
    """The dry run's reading process is spawned, and spawn ran the caller's main module again in it: a script that
    called sync(dry_run=True) without an ``if __name__ == "__main__":`` guard ran a second time there (its requests
    to the service too), failed to start a process of its own, and every file was refused as one "its reader
    stopped while reading". The reading process now leaves the caller's __main__ alone: the script runs once."""
    docs = folder(tmp_path / "docs", {"a.txt": "In 1460 Hugo built the island church.", "empty.md": ""})
    runs = tmp_path / "runs"
    script = tmp_path / "mine.py"
    script.write_text(f"""
from spanseek.client import Client
from spanseek.sync import sync

with open({str(runs)!r}, "a") as f:
    f.write("ran\\n")
with Client({url!r}, api_key="key") as client:
    report = sync(client, [{str(docs)!r}], "docs", dry_run=True)
print(report.written, [r for r, _ in report.refused])
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['a.txt'] ['empty.md']\n" and runs.read_text() == "ran\n"


def test_a_dry_run_counts_a_files_tokens_over_the_passages_the_server_cuts(settings_for, tmp_path, live):
    """A dry run cut a file's passages a word a token and counted the model tokens of those: a long paragraph's
    overlapping windows, cut by the server in model tokens, share other words, so a file the server counted 960 tokens
    was counted fewer, and one just over max_file_tokens was said to be written, which the write refused (413). The
    dry run's reading process now cuts and counts with the server's tokenizer: its count is the write's."""
    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME
    from spanseek.indexer.chunking import backbone_token_counter
    from spanseek.indexer.ingest import read_document
    from spanseek.indexer.read_process import document_tokens

    docs = folder(tmp_path / "docs", {"long.txt": "Gala's harbour-bridge, built 1450, spans the inlet. " * 40})
    count = backbone_token_counter(EncoderConfig.load(Path(settings_for().model) / CONFIG_NAME))  # (the server's)
    tokens = document_tokens(read_document(docs / "long.txt", "long.txt", count, IngestOptions()), count)
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_file_tokens=tokens - 1)
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True)
        done = sync(client, [docs], "docs")
    assert planned.written == done.written == []
    assert [r for r, _ in planned.refused] == [r for r, _ in done.refused] == ["long.txt"]
    assert dict(planned.refused)["long.txt"] == (f"the server would refuse it: {tokens:,} tokens, more than its "
                                                 f"max_file_tokens ({tokens - 1:,})")
    assert f"{tokens:,} tokens" in dict(done.refused)["long.txt"]  # (the write's own count)


def test_a_dry_run_refuses_a_title_too_long_and_front_matter_the_write_cannot_hold_as_the_write_does(settings_for,
                                                                                                    tmp_path, live):
    """A dry run passed a file whose title (its heading, or its front matter's title) was over the server's
    max_title_chars, and one whose front matter's metadata fit alone but not with what the sync writes beside it: each
    write was then refused (422). /info now publishes max_title_chars, and the dry run checks the document read, with
    the sync's metadata, as the write does: the same files are refused, for the same reasons."""
    from spanseek.core.io import MAX_META_BYTES

    bridge = "\n\nIn 1450 Gala built the harbour bridge.\n"
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_title_chars=20)
    docs = folder(tmp_path / "docs", {
        "heading.md": "# The harbour bridge of Gala and Hugo" + bridge,
        "front.md": f"---\ntitle: {'T' * 30}\n---{bridge}",
        "meta.md": f"---\nnote: {'x' * (MAX_META_BYTES - 120)}\n---{bridge}",  # (fits alone, not with the sync's)
        "ok.md": "# Bridge" + bridge})
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True)
        done = sync(client, [docs], "docs")
    assert planned.written == done.written == ["ok.md"]
    assert dict(planned.refused) == {rel: f"the server would refuse it: {why}" for rel, why in done.refused}
    assert dict(done.refused)["heading.md"] == ("heading.md: a title of 35 characters; at most 20 (max_title_chars); "
                                                "give the file a shorter one")
    assert "front.md: a title of 30 characters" in dict(done.refused)["front.md"]
    assert f"over the limit of {MAX_META_BYTES}" in dict(done.refused)["meta.md"]


def test_a_file_refused_for_its_tokens_is_said_so_not_as_too_many_bytes(settings_for, tmp_path, live):
    """A file the server refused for its tokens (413) was reported as "290 bytes, too large for the server: ...",
    though its bytes were well within the server's max_file_bytes. It is now reported with the server's reason (its
    tokens and the limit); a file over max_file_bytes is said so as a dry run says it, with its size and the limit."""
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_file_bytes=2048, max_file_tokens=40)
    docs = folder(tmp_path / "docs", {"many.txt": "Gala's harbour-bridge, 1450. " * 10,
                                      "big.txt": "In 1450 Gala built the harbour bridge. " * 80})
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        planned = sync(client, [docs], "docs", dry_run=True)
        done = sync(client, [docs], "docs")
    refused = dict(done.refused)
    assert "bytes" not in refused["many.txt"]
    assert refused["many.txt"].startswith("many.txt: ") and "tokens, more than this server encodes of one file " \
                                                               "(max_file_tokens 40)" in refused["many.txt"]
    assert refused["big.txt"] == "3,120 bytes, more than its max_file_bytes (2,048)"
    assert dict(planned.refused)["big.txt"] == f"the server would refuse it: {refused['big.txt']}"
