"""Files written to a live service (service.files: PUT/POST /files/{name}): the document is the one `corpus
from-files` makes of the same file, searchable when acknowledged and kept across a restart; refusals name the file
and the reason; the body limit for files is max_file_bytes; the Python client's upsert_file / add_file.

    .venv/bin/python -m pytest -q tests/service/test_file_writes.py
"""

from __future__ import annotations

import dataclasses
import logging
from urllib.parse import quote

import pytest

from spanseek.client import AsyncClient, Client
from spanseek.core.io import document_json, read_corpus
from spanseek.core.model import load_tokenizer
from spanseek.indexer.chunking import ChunkOptions, model_token_counter
from spanseek.indexer.ingest import IngestOptions, from_files
from spanseek.service.app import create_app
from tests.indexer.test_hostile_files import BOMB, SHAPE, SLIDE, lxml_runs_out, office_file, word_body
from tests.service.conftest import NFC_ID, NFD_ID, serving
from tests.service.test_writes import KEY, found

GUIDE = """---
lang: en
---
# Harbour guide

In 1450 Gala built the harbour bridge of the island.

## Church

In 1460 Hugo built the island church.

| Name | Year |
|---|---|
| Bridge | 1450 |
"""


def from_files_document(path, tiny_model_dir, opts: IngestOptions | None = None, doc_id: str | None = None):
    """The oracle: the document `corpus from-files` makes of ``path`` with the model's tokenizer, as JSON."""
    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME

    count = model_token_counter(load_tokenizer(EncoderConfig.load(tiny_model_dir / CONFIG_NAME)))
    out = path.parent / "oracle.jsonl"
    from_files([path], out, count, opts or IngestOptions())
    (doc,) = read_corpus(out)
    return document_json(doc if doc_id is None else dataclasses.replace(doc, id=doc_id))


def test_a_written_file_is_the_document_from_files_makes_searchable_and_kept_across_a_restart(
        write_settings, tmp_path, tiny_model_dir):
    path = tmp_path / "guide.md"
    path.write_text(GUIDE, encoding="utf-8")
    settings = write_settings()
    with serving(create_app(settings)) as client:
        r = client.put("/files/docs/guide.md", headers=KEY, content=path.read_bytes())
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["id"] == "docs/guide.md" and body["title"] == "Harbour guide" and body["documents"] == 1
        stored = client.get("/documents/docs/guide.md", headers=KEY).json()
        # the oracle names the file as given (guide.md); the service by the name in the path
        expected = from_files_document(path, tiny_model_dir, doc_id="docs/guide.md")
        expected["meta"]["source"] = "docs/guide.md"
        assert stored == expected
        assert any(m.get("section") == "Church" for m in stored["passage_meta"])
        assert found(client, "docs/guide.md", "passage")
    with serving(create_app(settings)) as client:  # replayed from the log
        assert client.get("/documents/docs/guide.md", headers=KEY).json() == expected


def test_id_meta_and_passage_sizes_are_from_files_options(write_settings, tmp_path, tiny_model_dir):
    path = tmp_path / "notes.txt"
    path.write_text(" ".join(f"word{i}" for i in range(300)) + "\n\nIn 1450 Gala built the harbour bridge.\n",
                    encoding="utf-8")
    with serving(create_app(write_settings())) as client:
        r = client.put("/files/notes.txt", headers=KEY, content=path.read_bytes(),
                       params=[("id", "n-1"), ("meta", "lang=en"), ("meta", "team=docs=ops"), ("max_tokens", "40"),
                               ("overlap", "5")])
        assert r.status_code == 200, r.text
        stored = client.get("/documents/n-1", headers=KEY).json()
        opts = IngestOptions(chunk=ChunkOptions(max_tokens=40, overlap=5), extra_meta={"lang": "en",
                                                                                       "team": "docs=ops"})
        assert stored == from_files_document(path, tiny_model_dir, opts, doc_id="n-1") | {
            "meta": {"source": "notes.txt", "lang": "en", "team": "docs=ops"}}
        assert len(stored["paragraphs"]) > 5  # cut at 40 tokens, not 200
        assert client.get("/documents/notes.txt", headers=KEY).status_code == 404
        bad = [("meta", "lang"), ("meta", "=x")]
        for param in bad:
            r = client.put("/files/notes.txt", headers=KEY, content=b"text", params=[param])
            assert r.status_code == 422 and "KEY=VALUE" in r.text, r.text
        r = client.put("/files/notes.txt", headers=KEY, content=b"text", params=[("meta", "a=1"), ("meta", "a=2")])
        assert r.status_code == 422 and "given twice" in r.text
        r = client.put("/files/notes.txt", headers=KEY, content=b"text", params=[("max_tokens", "4")])
        assert r.status_code == 422 and "query.max_tokens: max_tokens must be between 8 and 512" in r.text, r.text
        r = client.put("/files/notes.txt", headers=KEY, content=b"text", params=[("id", "a\nb")])
        assert r.status_code == 422 and "line break" in r.text


def test_post_adds_only_and_put_replaces(write_settings):
    with serving(create_app(write_settings())) as client:
        assert client.post("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.").status_code == 200
        r = client.post("/files/a.txt", headers=KEY, content=b"Another text.")
        assert r.status_code == 409 and "a.txt" in r.json()["message"]
        assert client.get("/documents/a.txt", headers=KEY).json()["paragraphs"] == ["In 1450 Gala built the bridge."]
        assert client.put("/files/a.txt", headers=KEY, content=b"Another text.").status_code == 200
        assert client.get("/documents/a.txt", headers=KEY).json()["paragraphs"] == ["Another text."]


def test_refusals_name_the_file_and_the_reason_and_write_nothing(write_settings, tmp_path):
    bomb = office_file(tmp_path / "bomb.docx", "word/document.xml", word_body(b"<w:p/>"), spaces=BOMB)
    far = office_file(tmp_path / "far.pptx", "ppt/slides/slide1.xml", SLIDE % SHAPE % b"far")
    with serving(create_app(write_settings())) as client:
        cases = [
            ("report.xls", b"\xd0\xcf\x11\xe0", 415, ".docx"),  # no reader for the suffix; the message lists them
            ("report", b"text", 415, ".pdf"),
            # a hidden file's name, whose suffix was said to be missing from the list that names it; no name at all
            (".txt", b"text", 415, "a name that is a dot and a suffix alone is a hidden file's"),
            ("guide/.md", b"text", 415, "hidden file's, which has none: name it (notes.txt)"),
            ("", b"text", 422, "'' names no file; give the file's name after /files/"),
            ("guide/", b"text", 422, "'guide/' names no file"),
            ("empty.txt", b"", 422, "no body"),
            ("blank.txt", b"  \n\n \t", 422, "blank.txt: no text"),
            ("binary.txt", b"abc\x00def", 422, "binary.txt: "),
            ("latin.txt", "café".encode("latin-1"), 422, "latin.txt: "),
            ("broken.pdf", b"%PDF-1.4\n1 0 obj <<", 422, "broken.pdf: "),
            ("broken.docx", b"PK\x03\x04 not a zip", 422, "broken.docx: "),
            ("broken.xlsx", b"PK\x03\x04 not a zip", 422, "broken.xlsx: not a readable Excel workbook (.xlsx) file"),
            ("fake.rtf", b"%PDF-1.4", 422, "fake.rtf: a PDF file, not an RTF (.rtf) file; rename it to .pdf"),
            ("notes.eml", b"Just notes.\n", 422, "notes.eml: not an e-mail message (.eml) file: it begins with none"),
            ("open.csv", b'a,b\n1,"2\n', 422, "open.csv: not a readable CSV file: the record from line 2: unexpected end of "),
            ("bad.md", b"---\ntitle: [unclosed\n---\nText.\n", 422, "bad.md"),
            ("bomb.docx", bomb.read_bytes(), 422, "bomb.docx: a zip bomb: its part word/document.xml expands"),
            ("far.pptx", far.read_bytes(), 422, "far.pptx: not a readable PowerPoint (.pptx) file: its XML breaks"),
        ]
        for name, data, status, says in cases:
            r = client.put(f"/files/{name}", headers=KEY, content=data)
            assert r.status_code == status and says in r.text, (name, r.status_code, r.text)
            assert "spanseek-upload-" not in r.text and "/tmp" not in r.text, r.text  # no temporary path shown
        # a compressed file was read compressed: "binary", or damaged
        r = client.put("/files/zipped.txt", headers={**KEY, "content-encoding": "gzip"}, content=b"\x1f\x8b\x08\x00")
        assert r.status_code == 415 and "Content-Encoding: gzip" in r.text, r.text
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0


def test_keys_and_writes_off(write_settings):
    with serving(create_app(write_settings())) as client:
        assert client.put("/files/a.txt", content=b"Some text.").status_code == 401
        assert client.put("/files/a.txt", headers={"X-API-Key": "wrong"}, content=b"Some text.").status_code == 401
    with serving(create_app(write_settings(writes=False))) as client:
        r = client.put("/files/a.txt", headers=KEY, content=b"Some text.")
        assert r.status_code == 403 and "writes are off" in r.text


def test_files_have_their_own_body_limit(write_settings):
    text = ("In 1450 Gala built the harbour bridge of the island. " * 40).encode()  # 2,160 bytes
    with serving(create_app(write_settings(max_body_bytes=1024, max_file_bytes=4096))) as client:
        assert client.put("/files/long.txt", headers=KEY, content=text).status_code == 200  # over max_body_bytes
        r = client.put("/files/longer.txt", headers=KEY, content=text * 2)
        assert r.status_code == 413 and "4096" in r.text
        doc = {"id": "j", "title": "t", "paragraphs": [text.decode()]}  # JSON bodies keep max_body_bytes
        assert client.put("/documents", headers=KEY, json=doc).status_code == 413


def test_a_pdf_file_keeps_its_pages(write_settings, tmp_path):
    pytest.importorskip("fpdf")
    from tests.indexer.test_documents import PAGES, write_pdf

    path = write_pdf(tmp_path / "city.pdf", PAGES, title="City guide")
    with serving(create_app(write_settings())) as client:
        r = client.put("/files/city.pdf", headers=KEY, content=path.read_bytes())
        assert r.status_code == 200 and r.json()["title"] == "City guide", r.text
        stored = client.get("/documents/city.pdf", headers=KEY).json()
        assert stored["meta"]["pages"] == 3 and [m["page"] for m in stored["passage_meta"]] == [1, 2, 3]


@pytest.mark.parametrize(("name", "title", "passage_meta"), [
    ("books/tales.epub", "Harbour Tales", {"chapter": 1, "section": "The bridge"}),
    ("guide.odt", "Harbour guide 2026", {"section": "The bridge"}),
    ("tables/prices.xlsx", "Price list", {"sheet": "Prices 2024", "row": 2}),
    ("letters/guide.rtf", "Harbour guide", {"section": "The bridge"})])
def test_epub_odt_xlsx_and_rtf_files_keep_their_chapters_sections_rows_and_metadata(write_settings, tmp_path,
                                                                                     tiny_model_dir, name, title,
                                                                                     passage_meta):
    from tests.indexer.test_epub import write_epub
    from tests.indexer.test_opendocument import write_odt
    from tests.indexer.test_rtf import write_rtf
    from tests.indexer.test_spreadsheet import write_xlsx

    writer = {"epub": write_epub, "odt": write_odt, "xlsx": write_xlsx, "rtf": write_rtf}[name.rsplit(".", 1)[-1]]
    path = writer(tmp_path / name.rsplit("/", 1)[-1])
    with serving(create_app(write_settings())) as client:
        r = client.put(f"/files/{name}", headers=KEY, content=path.read_bytes())
        assert r.status_code == 200 and r.json()["title"] == title, r.text
        stored = client.get(f"/documents/{name}", headers=KEY).json()
        expected = from_files_document(path, tiny_model_dir, doc_id=name)
        expected["meta"]["source"] = name
        assert stored == expected and stored["meta"]["author"] == "Ann Gala"
        assert stored["passage_meta"][0] == passage_meta
        assert found(client, name, "passage")
        if "row" in passage_meta:  # a passage condition on the sheet finds that sheet's rows only
            r = client.post("/search?unit=passage", headers=KEY, json={"query": "what does tea cost?", "top_k": 5,
                            "filter": {"must": [{"passage": {"key": "sheet", "match": "Notes"}}]}})
            assert [h["meta"]["row"] for h in r.json()["results"][0]["hits"]] == [2], r.text


def test_the_client_writes_files_by_path_or_bytes(write_settings, tmp_path, live):
    path = tmp_path / "guide.md"
    path.write_text(GUIDE, encoding="utf-8")
    with live(create_app(write_settings())) as url, Client(url, api_key="key") as client:
        written = client.upsert_file(path, meta={"team": "docs"})
        assert written["id"] == "guide.md" and written["passages"] >= 2
        assert client.get("guide.md")["meta"]["team"] == "docs"
        assert client.add_file(b"In 1460 Hugo built the church.", "notes/./a b.txt")["id"] == "notes/./a b.txt"
        assert client.get("notes/./a b.txt")["paragraphs"] == ["In 1460 Hugo built the church."]
        with pytest.raises(ValueError, match="needs its name"):
            client.upsert_file(b"text")


async def test_the_async_client_writes_files(write_settings, live):
    with live(create_app(write_settings())) as url:
        async with AsyncClient(url, api_key="key") as client:
            written = await client.upsert_file(b"In 1450 Gala built the harbour bridge.", "a.txt", doc_id="x")
            assert written["id"] == "x" and (await client.get("x"))["meta"] == {"source": "a.txt"}


def test_a_readers_warning_names_the_file_not_its_temporary_copy(write_settings, tmp_path, caplog):
    pytest.importorskip("fpdf")
    import fpdf
    from PIL import Image

    Image.new("RGB", (60, 40), "gray").save(tmp_path / "scan.png")
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(0, 6, "In 1450 Gala built the harbour bridge.")
    pdf.add_page()
    pdf.image(str(tmp_path / "scan.png"), x=10, y=10, w=150)  # a scanned page: the reader warns
    pdf.output(str(tmp_path / "mixed.pdf"))
    with serving(create_app(write_settings())) as client, caplog.at_level(logging.WARNING):
        r = client.put("/files/manuals/mixed.pdf", headers=KEY, content=(tmp_path / "mixed.pdf").read_bytes())
        assert r.status_code == 200, r.text
        clean = client.put("/files/clean.txt", headers=KEY, content=b"In 1460 Hugo built the church.")
    (warning,) = [m for r in caplog.records if "only images" in (m := r.getMessage())]
    assert warning.startswith("manuals/mixed.pdf: page 2 of 2 holds only images"), warning
    assert r.json()["warnings"] == [warning]  # the uploader is told too, not only the server's log
    assert clean.json()["warnings"] == []


def test_files_are_read_in_a_process_of_their_own_at_a_lower_priority(write_settings):
    """Reading (pure Python for a PDF) held the server's GIL in a thread of its own: it runs in a worker process
    now, file_nice lower in CPU priority, and one that stops on a file is replaced for the next."""
    import os

    with serving(create_app(write_settings(file_nice=5))) as client:
        assert client.put("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.").status_code == 200
        reader = client.app.state.service.live.file_reader
        pid = reader.worker_pid
        assert pid != os.getpid()
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
        os.kill(pid, 9)  # the worker gone (killed for its memory, say): that upload is refused, the next is read
        r = client.put("/files/b.txt", headers=KEY, content=b"In 1460 Hugo built the church.")
        if r.status_code != 200:  # the kill was seen as this file's reading stopped
            assert r.status_code == 422 and "b.txt: its reader stopped" in r.text, r.text
            r = client.put("/files/b.txt", headers=KEY, content=b"In 1460 Hugo built the church.")
        assert r.status_code == 200, r.text


def test_a_reader_that_cannot_start_is_a_503_counted_and_the_next_upload_is_read(write_settings, monkeypatch):
    """A reading process that could not start answered each upload 422 unreadable_file ('a damaged file'): the
    user's file blamed, and a client that does not resend a 4xx dropped it. A 503 saying why, with Retry-After."""
    from spanseek.service import file_reader

    real, starts = file_reader.FileReader._started, []

    async def fails_once(self, pool):
        starts.append(pool)
        if len(starts) == 1:
            raise file_reader.ReaderUnavailable("the process that reads uploaded files could not start (no fork)")
        return await real(self, pool)

    monkeypatch.setattr(file_reader.FileReader, "_started", fails_once)
    with serving(create_app(write_settings())) as client:
        r = client.put("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 503 and r.json()["error"] == "reader_unavailable", r.text
        assert "could not start (no fork)" in r.json()["message"] and int(r.headers["retry-after"]) >= 1
        assert client.get("/documents/a.txt", headers=KEY).status_code == 404
        assert 'spanseek_errors_total{route="/files/{name}",type="reader_unavailable"} 1.0' in client.get("/metrics").text
        r = client.put("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 200, r.text


def test_a_file_over_max_file_tokens_is_refused_naming_both_counts_before_encoding(write_settings):
    words = " ".join(f"w{i}" for i in range(60))  # a token or more each: over 20
    with serving(create_app(write_settings(max_file_tokens=20))) as client:
        r = client.put("/files/long.txt", headers=KEY, content=words.encode())
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large", r.text
        message = r.json()["message"]
        assert message.startswith("long.txt: ") and "max_file_tokens 20" in message, message
        assert int(message.split(": ")[1].split(" tokens")[0].replace(",", "")) > 20, message
        assert client.get("/documents/long.txt", headers=KEY).status_code == 404
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0
        assert client.put("/files/short.txt", headers=KEY, content=b"In 1450 Gala built it.").status_code == 200
    with serving(create_app(write_settings(max_file_tokens=0))) as client:  # 0: no limit
        assert client.put("/files/long.txt", headers=KEY, content=words.encode()).status_code == 200


def test_a_file_whose_title_is_too_long_is_refused_naming_the_title(write_settings):
    def markdown(title: str) -> bytes:
        return f"---\ntitle: {title}\n---\nIn 1450 Gala built the bridge.\n".encode()

    with serving(create_app(write_settings())) as client:
        r = client.put("/files/long.md", headers=KEY, content=markdown("t" * 1001))
        assert r.status_code == 422 and r.json()["error"] == "unreadable_file", r.text
        assert r.json()["message"] == ("long.md: a title of 1,001 characters; at most 1,000 (max_title_chars); give "
                                       "the file a shorter one"), r.text
        assert client.get("/documents/long.md", headers=KEY).status_code == 404
        r = client.put("/files/ok.md", headers=KEY, content=markdown("t" * 1000))
        assert r.status_code == 200 and r.json()["title"] == "t" * 1000
    with serving(create_app(write_settings(max_title_chars=20))) as client:  # the server's setting is the bound
        r = client.put("/files/long.md", headers=KEY, content=markdown("t" * 21))
        assert r.status_code == 422 and "a title of 21 characters; at most 20 (max_title_chars)" in r.text, r.text
        assert client.put("/files/ok.md", headers=KEY, content=markdown("t" * 20)).status_code == 200


def hold_slow_reads(monkeypatch):
    """(held, reading): the upload named ``slow.txt`` sets ``reading`` as its reading starts, then holds its upload
    slot until ``held`` is set."""
    import asyncio

    from spanseek.service.file_reader import FileReader

    held, reading = asyncio.Event(), asyncio.Event()
    read = FileReader.read

    async def slow_read(self, data, name, opts):
        if name == "slow.txt":
            reading.set()
            await held.wait()
        return await read(self, data, name, opts)

    monkeypatch.setattr(FileReader, "read", slow_read)
    return held, reading


async def test_uploads_past_max_file_uploads_are_429_with_retry_after(write_settings, monkeypatch):
    import asyncio

    from tests.service.conftest import async_serving

    held, reading = hold_slow_reads(monkeypatch)
    async with async_serving(create_app(write_settings(max_file_uploads=1))) as client:
        slow = asyncio.create_task(client.put("/files/slow.txt", headers=KEY, content=b"In 1450 Gala built it."))
        await asyncio.wait_for(reading.wait(), 30)
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built it.")
        assert r.status_code == 429 and "max_file_uploads" in r.text and int(r.headers["retry-after"]) >= 1, r.text
        held.set()
        assert (await slow).status_code == 200
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built it.")
        assert r.status_code == 200, r.text


async def test_with_every_slot_taken_a_body_of_declared_length_is_refused_before_it_is_read(write_settings,
                                                                                            monkeypatch):
    """Before, the 429 came only once the whole body had arrived (20 MB sent to be refused). A body of no declared
    length is still taken in (a slot may free while it arrives), and the refusal reserves none of the bytes bound."""
    import asyncio

    from tests.service.conftest import async_serving

    held, reading = hold_slow_reads(monkeypatch)
    sent: list[bytes] = []
    never = asyncio.Event()

    async def body():
        for part in (b"In 1460 Hugo ", b"built the church."):
            sent.append(part)
            yield part
            await never.wait()  # the rest of the body does not come until the server reads on

    app = create_app(write_settings(max_file_uploads=1))
    async with async_serving(app) as client:
        slow = asyncio.create_task(client.put("/files/slow.txt", headers=KEY, content=b"In 1450 Gala built it."))
        await asyncio.wait_for(reading.wait(), 30)
        reader = app.state.service.live.file_reader
        bytes_held = reader.bytes_held
        r = await asyncio.wait_for(client.put("/files/next.txt", content=body(),
                                              headers={**KEY, "Content-Length": "29"}), 10)
        assert r.status_code == 429 and "max_file_uploads" in r.text and int(r.headers["retry-after"]) >= 1, r.text
        assert len(sent) <= 1 and reader.bytes_held == bytes_held and reader.in_progress == 1
        held.set()
        assert (await slow).status_code == 200
        assert reader.bytes_held == 0 and reader.in_progress == 0
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built the church.")
        assert r.status_code == 200, r.text


async def test_a_body_still_arriving_holds_no_upload_slot(write_settings):
    """A client trickling its file held an upload slot from its first byte until body_timeout_s: with one slot, a
    complete upload behind it was a 429 for up to 30 s. The slot is taken once the body is in."""
    import asyncio

    from tests.service.conftest import async_serving

    more = asyncio.Event()
    first, rest = b"In 1450 Gala ", b"built the bridge."

    async def trickle():
        yield first
        await more.wait()
        yield rest

    async with async_serving(create_app(write_settings(max_file_uploads=1))) as client:
        slow = asyncio.create_task(client.put("/files/slow.txt", content=trickle(),
                                              headers={**KEY, "Content-Length": str(len(first + rest))}))
        await asyncio.sleep(0.5)  # (the slow upload's first bytes taken)
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built the church.")
        assert r.status_code == 200, r.text
        more.set()
        r = await slow
        assert r.status_code == 200 and r.json()["id"] == "slow.txt", r.text


async def test_bodies_held_past_the_uploads_memory_are_429_naming_the_bytes(write_settings):
    """What the slot taken at the first byte bounded, bodies held in memory, is bounded apart: max_file_uploads x
    max_file_bytes bytes (a body of no declared length counts max_file_bytes), the next body refused before it is
    read."""
    import asyncio

    from tests.service.conftest import async_serving

    more = asyncio.Event()

    async def trickle():
        yield b"In 1450 Gala "
        await more.wait()
        yield b"built the bridge." + b" " * 3000

    async with async_serving(create_app(write_settings(max_file_uploads=1, max_file_bytes=4096))) as client:
        slow = asyncio.create_task(client.put("/files/slow.txt", headers={**KEY, "Content-Length": "3030"},
                                              content=trickle()))
        await asyncio.sleep(0.5)
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built the church." * 40)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text
        assert "holding 3,030 bytes" in r.text and "1,200" in r.text and "(max_file_uploads x max_file_bytes)" in r.text
        more.set()
        assert (await slow).status_code == 200
        r = await client.put("/files/next.txt", headers=KEY, content=b"In 1460 Hugo built the church." * 40)
        assert r.status_code == 200, r.text


def test_a_file_that_needs_more_memory_to_read_than_the_limit_is_a_413_and_the_next_file_is_read(write_settings):
    """The reading process had no memory cap: a 30 MiB HTML page of 1.5M table cells took it to 5.9 GB, and a larger
    one could bring in the kernel's OOM killer, which may pick the server. Past file_read_memory_bytes the read fails
    with a 413 naming the file and the limit, and a new process reads the next file."""
    row = b"<tr>" + b"<td>x</td>" * 50 + b"</tr>"
    # 2 MiB: over twice the most rows read within the limit (about 1,500), and half the time of twice as many
    cells = b"<html><body><article><table>" + row * 4000 + b"</table></article></body></html>"
    limit = 256 << 20
    with serving(create_app(write_settings(file_read_memory_bytes=limit, max_file_bytes=4 << 20))) as client:
        r = client.put("/files/cells.html", headers=KEY, content=cells)
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "payload_too_large"
        assert "cells.html" in r.json()["message"] and f"{limit:,} bytes, file_read_memory_bytes" in r.json()["message"]
        r = client.put("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 200, r.text


def test_file_names_are_refused_clearly_or_taken_in_one_spelling(write_settings):
    """A line break in the name was a bare 404 from routing, bytes that are not UTF-8 became U+FFFD in the id without
    a word, and the NFC and NFD spellings of café.txt (file systems differ) two documents whose ids look alike."""
    nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
    with serving(create_app(write_settings())) as client:
        for path, says in (("/files/a%0Ab.txt", "line break"), ("/files/caf%FF%FE.txt", "not UTF-8")):
            r = client.put(path, headers=KEY, content=b"In 1450 Gala built the bridge.")
            assert r.status_code == 422 and r.json()["error"] == "validation_error", (path, r.text)
            assert says in r.text, r.text
        assert client.put("/files/caf%EF%BF%BD.txt", headers=KEY, content=b"Text.").json()["id"] == "caf\ufffd.txt"
        for name in (nfd, nfc):
            r = client.put(f"/files/{quote(name)}", headers=KEY, content=b"In 1460 Hugo built the church.")
            assert r.status_code == 200 and r.json()["id"] == nfc, r.text
        held = [d for d in client.get("/documents", headers=KEY).json()["documents"] if d["id"].startswith("caf")]
        assert sorted(d["id"] for d in held) == sorted([nfc, "caf\ufffd.txt"])
        assert next(d for d in held if d["id"] == nfc)["meta"]["source"] == nfc


def test_an_id_given_blank_or_not_utf8_is_refused_naming_it(write_settings):
    """``?id=`` wrote a document under the empty id (which PUT /documents refuses, and no /documents/{id} names), and
    an id (or metadata) whose bytes are not UTF-8 one under U+FFFD characters, where the same id in the path is a
    422."""
    with serving(create_app(write_settings())) as client:
        for query, expected in (("id=", "query.id: the id is blank"), ("id=%20%09", "query.id: the id is blank"),
                                ("meta=a%3Db&id=%ED%A0%80", "query.id: the query parameter id is not UTF-8 (invalid "
                                                            "continuation byte at its byte 0xed)"),
                                ("meta=lang%3D%FF", "query.meta: the query parameter meta is not UTF-8")):
            r = client.put(f"/files/a.txt?{query}", headers=KEY, content=b"In 1450 Gala built the bridge.")
            assert r.status_code == 422 and r.json()["error"] == "validation_error", r.text
            assert expected in r.json()["message"], r.text
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0
        r = client.put("/files/a.txt?id=caf%C3%A9%EF%BF%BD", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 200 and r.json()["id"] == "caf\u00e9\ufffd", r.text  # (U+FFFD sent as UTF-8 is its own)


def test_a_file_s_document_passes_the_checks_of_put_documents(write_settings):
    """``?meta=%00=1`` wrote a metadata key holding a NUL, and metadata over 16 KiB given as ``meta=`` was blamed on
    the file (422 unreadable_file, after reading it): the request's part of the document is checked as PUT /documents
    checks a document (422 validation_error at query.meta, before the body is read), and the document read from the
    file (its front matter's keys) too."""
    with serving(create_app(write_settings())) as client:
        r = client.put("/documents", headers=KEY, json={"id": "d", "paragraphs": ["x y z"], "meta": {"a\x00": "1"}})
        assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["body", "documents", "0", "meta"], r.text
        assert "its meta key 'a\\x00' holds a NUL" in r.json()["details"][0]["msg"]
        for query, says in (("meta=%00=1", "holds a NUL"), ("meta=k=" + "v" * 20_000, "over the limit of 16384")):
            r = client.put(f"/files/a.txt?{query}", headers=KEY, content=b"In 1450 Gala built the bridge.")
            assert r.status_code == 422 and r.json()["error"] == "validation_error", r.text
            assert r.json()["details"][0]["loc"] == ["query", "meta"] and says in r.text, r.text
        r = client.put("/files/b.md", headers=KEY, content=b'---\n"k\\0": 1\n---\nIn 1450 Gala built the bridge.\n')
        assert r.status_code == 422 and r.json()["error"] == "unreadable_file" and "holds a NUL" in r.text, r.text
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0
        r = client.put("/files/c.txt?meta=k=%C3%A9", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 200 and client.get("/documents/c.txt", headers=KEY).json()["meta"]["k"] == "\u00e9"


def test_a_document_held_under_an_nfd_name_is_replaced_by_its_file(settings_for, nfd_index, tmp_path):
    """Written before names were made NFC, a document whose id is café.txt spelled NFD is still the one its file
    replaces, not left beside a new one."""
    settings = settings_for(index=nfd_index, writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        for name in (NFD_ID, NFC_ID):  # whichever spelling the client's file system gives it
            r = client.put(f"/files/{quote(name)}", headers=KEY, content=b"In 1460 Hugo built the church.")
            assert r.status_code == 200 and r.json()["id"] == NFD_ID, r.text
        held = client.get("/documents", headers=KEY).json()["documents"]
        assert [d["id"] for d in held if d["id"].startswith("caf")] == [NFD_ID]


def _reads_rows_out_of_memory(data, name, opts, timeout_s):
    """The worker's reading, where the reader of ``rows.html`` runs out of memory inside lxml (``lxml_runs_out``)."""
    from spanseek.indexer import ingest
    from spanseek.service.file_reader import _read_in_worker

    extract = ingest.extract_file
    ingest.extract_file = lxml_runs_out if name == "rows.html" else extract
    try:
        return _read_in_worker(data, name, opts, timeout_s)
    finally:
        ingest.extract_file = extract


@pytest.mark.slow  # (two reader processes started: about 30 s on 2 busy cores)
def test_a_file_whose_reading_runs_out_of_memory_inside_lxml_is_a_413_naming_the_limit(write_settings, monkeypatch):
    """lxml reports memory running out inside libxml2 (a 12,000-row HTML table read at file_read_memory_bytes) as an
    XPath or parse error of its own, and the upload was answered as an error of the server, not as a file too large
    to read here: it is a 413 naming the file and the limit, and the next file is read."""
    from spanseek.service import file_reader

    monkeypatch.setattr(file_reader, "_read_in_worker", _reads_rows_out_of_memory)
    with serving(create_app(write_settings())) as client:
        r = client.put("/files/rows.html", headers=KEY, content=b"<table><tr><td>x</td></tr></table>")
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large", r.text
        assert "rows.html" in r.json()["message"] and "file_read_memory_bytes" in r.json()["message"], r.text
        r = client.put("/files/a.txt", headers=KEY, content=b"In 1450 Gala built the bridge.")
        assert r.status_code == 200, r.text
