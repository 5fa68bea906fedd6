"""Hostile and malformed files, as a security reviewer sends them, through the readers and ``corpus from-files``:
decompression bombs in Word, PowerPoint and PDF files, a PDF object that is a reference to itself, XML that breaks
Office's schema, HTML nested past the recursion limit or never closing its constructs, and text built to make a
regular expression backtrack. Each is refused or read in bounded time and memory, as a skipped file naming the
reason; the other files of the run are read. The files are made here.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_hostile_files.py
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer import ingest, pdf_layout, word
from spanseek.indexer.documents import Unreadable, extract_pdf
from spanseek.indexer.ingest import IngestError, IngestOptions, from_files, read_document
from spanseek.indexer.markup import extract_html, extract_markdown
from spanseek.indexer.slides import extract_pptx
from spanseek.indexer.word import extract_docx
from tests.indexer.test_documents import pdf_of_objects

pytest.importorskip("docx")
pytest.importorskip("pptx")

BOMB = 80 << 20  # a part of 80 MiB of spaces: some 80 KB compressed (a thousand times smaller)
SMALL = 6 << 20  # as compressible, but of a size ordinary parts have (a screenshot stored as a BMP)
TEXT = b"BT /F1 12 Tf 72 700 Td (The castle was built in 1250.) Tj ET"


WAITING = 10  # a block may wait (not compute) this many times its deadline: a read blocked on a FIFO fails too


@contextmanager
def deadline(seconds: float):
    """TimeoutError when the block spends more than ``seconds`` of this process's CPU time (a reader that loops
    forever fails the test; time the machine gives to other work does not count) or ``WAITING`` times as long on
    the clock (a reader blocked for good). Times below, where a test takes them, are CPU time too."""
    limits = {signal.SIGPROF: (signal.ITIMER_PROF, seconds, "of CPU time"),
              signal.SIGALRM: (signal.ITIMER_REAL, WAITING * seconds, "waiting")}

    def expired(signum, frame):
        _, limit, what = limits[signum]
        raise TimeoutError(f"still reading after {limit} s {what}")

    previous = {sig: signal.signal(sig, expired) for sig in limits}
    for timer, limit, _ in limits.values():
        signal.setitimer(timer, limit)
    try:
        yield
    finally:
        for sig, (timer, _, _) in limits.items():
            signal.setitimer(timer, 0)
            signal.signal(sig, previous[sig])


def test_the_deadline_is_cpu_time_and_a_wait_past_it_many_times_over():
    """On a machine busy with other work (other test workers, other jobs) a read that computes within its deadline
    passes however long it waited for a core; a loop past it fails, and so does a block that only waits."""
    with deadline(0.1):
        time.sleep(0.3)  # waiting, not computing: the clock's 0.3 s count against WAITING * 0.1 only
    with pytest.raises(TimeoutError, match="still reading after"):
        with deadline(0.1):
            while True:
                pass
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still reading after 0\.5 s waiting"):
        with deadline(0.05):
            time.sleep(30)
    assert time.monotonic() - t0 < 20

def office_file(path: Path, part: str, xml: bytes, spaces: int = 0) -> Path:
    """A copy of python-docx's or python-pptx's own empty file at ``path`` whose ``part`` is ``xml``, with ``spaces``
    spaces before its last element's end (a zip bomb when many)."""
    buf = io.BytesIO()
    if path.suffix == ".docx":
        import docx

        docx.Document().save(buf)
    else:
        import pptx

        deck = pptx.Presentation()
        deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "Harbour"
        deck.save(buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            if info.filename != part:
                z.writestr(info, src.read(info))
        with z.open(part, "w") as f:
            head, _, tail = xml.rpartition(b"</")
            f.write(head)
            for _ in range(spaces >> 20):
                f.write(b" " * (1 << 20))
            f.write(b"</" + tail)
    return path


W = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def word_body(body: bytes) -> bytes:
    return b'<?xml version="1.0"?><w:document %s><w:body>%s</w:body></w:document>' % (W, body)


SLIDE = (b'<?xml version="1.0"?><p:sld xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
         b'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"><p:cSld><p:spTree><p:nvGrpSpPr>'
         b'<p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>%s</p:spTree></p:cSld></p:sld>')
SHAPE = (b'<p:sp><p:nvSpPr><p:cNvPr id="2" name="Box"/><p:cNvSpPr/><p:nvPr/></p:nvSpPr><p:spPr><a:xfrm>'
         b'<a:off x="%s" y="0"/><a:ext cx="10" cy="10"/></a:xfrm></p:spPr><p:txBody><a:bodyPr/><a:p><a:r><a:t>Ferry'
         b'</a:t></a:r></a:p></p:txBody></p:sp>')


def test_office_zip_bombs_are_refused_before_they_are_opened(tmp_path):
    paragraph = b"<w:p><w:r><w:t>The ferry leaves at nine.</w:t></w:r></w:p>"
    docx = office_file(tmp_path / "bomb.docx", "word/document.xml", word_body(paragraph), spaces=BOMB)
    pptx = office_file(tmp_path / "bomb.pptx", "ppt/slides/slide1.xml", SLIDE % SHAPE % b"0", spaces=BOMB)
    for path, read, part in ((docx, extract_docx, "word/document.xml"), (pptx, extract_pptx, "ppt/slides/slide1.xml")):
        with pytest.raises(Unreadable, match=f"a zip bomb: its part {part} expands from [0-9,]+ bytes to 8[0-9,]+ or"):
            read(path)
    # the same files, their parts of a size XML has, are read, and so are parts of a few MiB that compress as well
    for spaces in (0, SMALL):
        assert extract_docx(office_file(tmp_path / "ok.docx", "word/document.xml", word_body(paragraph), spaces)
                            ).paragraphs == ["The ferry leaves at nine."]
    assert extract_docx(office_file(tmp_path / "ok.docx", "word/document.xml", word_body(paragraph))).paragraphs == [
        "The ferry leaves at nine."]
    assert "Ferry" in extract_pptx(office_file(tmp_path / "ok.pptx", "ppt/slides/slide1.xml", SLIDE % SHAPE % b"0")
                                   ).paragraphs


def test_office_xml_that_breaks_the_schema_is_a_skipped_file_and_the_run_goes_on(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    office_file(folder / "span.docx", "word/document.xml", word_body(
        b'<w:tbl><w:tblPr/><w:tr><w:tc><w:tcPr><w:gridSpan w:val="abc"/></w:tcPr><w:p><w:r><w:t>Quay</w:t></w:r>'
        b'</w:p></w:tc></w:tr></w:tbl>'))
    office_file(folder / "broken.docx", "word/document.xml", word_body(b'<w:p><w:r><w:t>Pier</w:t></w:r></w:p>'))
    office_file(folder / "offset.pptx", "ppt/slides/slide1.xml", SLIDE % SHAPE % b"far")
    (folder / "fine.md").write_text("# Harbour\n\nThe ferry leaves at nine.\n")
    blocks = word._WordText.blocks

    def breaks_on_pier(self, container, *args):  # python-docx raising on XML past its schema, as it may on any part
        if "Pier" in container.xml:
            raise ValueError("invalid literal for int() with base 10: 'Pier'")
        return blocks(self, container, *args)

    monkeypatch.setattr(word._WordText, "blocks", breaks_on_pier)
    report = from_files([folder], tmp_path / "c.jsonl", opts=IngestOptions())
    # a cell spanning "abc" columns spans one (the table is read from its XML grid): its text is kept
    assert {d.id: d.paragraphs[-1] for d in read_corpus(tmp_path / "c.jsonl")} == {
        "fine.md": "Harbour\n\nThe ferry leaves at nine.", "span.docx": "Quay"}
    reasons = dict(report.skipped)
    assert "breaks Word's rules (ValueError: invalid literal" in reasons[str(folder / "broken.docx")]
    assert "breaks PowerPoint's rules (ValueError: invalid literal" in reasons[str(folder / "offset.pptx")]


def page(content_ref: bytes = b"4 0 R") -> list[bytes]:
    return [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %s /Resources << /Font << /F1 5 0 R >> "
            b">> >>" % content_ref]


def stream(data: bytes, flate: bool = False) -> bytes:
    return b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), b" /Filter /FlateDecode" * flate, data)


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def test_a_pdf_object_that_is_a_reference_to_itself_is_refused_not_followed_forever(tmp_path):
    title = pdf_of_objects(tmp_path / "title.pdf", [*page(), stream(TEXT), FONT, b"6 0 R", b"<< /Title 6 0 R >>"],
                           info=7)
    chain = pdf_of_objects(tmp_path / "chain.pdf", [*page(b"6 0 R"), stream(TEXT), FONT, b"7 0 R", b"6 0 R"])
    with deadline(20):
        with pytest.raises(Unreadable, match=r"object 6 is a reference to itself\)"):
            extract_pdf(title)
        with pytest.raises(Unreadable, match=r"object 6 is a reference to itself \(through object 7\)"):
            extract_pdf(chain)
    # a reference to a reference is followed: the title is the string two references away
    two = pdf_of_objects(tmp_path / "two.pdf", [*page(), stream(TEXT), FONT, b"7 0 R", b"(Harbour report)",
                                                b"<< /Title 6 0 R >>"], info=8)
    assert extract_pdf(two).title == "Harbour report"


def looped_xref(path: Path, sections: int) -> tuple[Path, list[int]]:
    """A one-page PDF whose cross-reference table is written ``sections`` times, each section's /Prev the next one's
    byte and the last one's the first's (one section: /Prev is itself); and the sections' bytes."""
    body = pdf_of_objects(path, [*page(), stream(TEXT), FONT]).read_bytes()
    start = int(body.rsplit(b"startxref\n", 1)[1].split()[0])
    table = body[start:body.index(b"trailer", start)]
    trailer = b"trailer\n<< /Size 6 /Root 1 0 R /Prev %010d >>\n"
    starts = [start + i * (len(table) + len(trailer % 0)) for i in range(sections)]
    body = body[:start] + b"".join(table + trailer % starts[(i + 1) % sections] for i in range(sections))
    path.write_bytes(body + b"startxref\n%d\n%%%%EOF\n" % start)
    return path, starts


@pytest.mark.parametrize("sections", [1, 2])
def test_a_pdf_whose_cross_reference_sections_loop_is_read_and_the_loop_named(tmp_path, caplog, sections):
    path, starts = looped_xref(tmp_path / "loop.pdf", sections)
    with caplog.at_level("WARNING", logger="spanseek.indexer.documents"):
        assert extract_pdf(path).paragraphs == ["The castle was built in 1250."]  # was Unreadable (RecursionError)
    back = "itself" if sections == 1 else f"the one at byte {starts[0]}"
    assert f"{path}: the cross-reference section at byte {starts[-1]} leads back (/Prev) to {back} (a loop)" in caplog.text


def saved_incrementally(path: Path, saves: int) -> Path:
    """A one-page PDF saved ``saves`` times more, as an editor saves incrementally: each save appends a new version of
    the document's info (its title "Harbour report, save n") and a cross-reference section whose /Prev is the last."""
    body = pdf_of_objects(path, [*page(), stream(TEXT), FONT, b"<< /Title (Harbour report) >>"], info=6).read_bytes()
    xref = int(body.rsplit(b"startxref\n", 1)[1].split()[0])
    for n in range(1, saves + 1):
        at = len(body)
        body += b"6 0 obj\n<< /Title (Harbour report, save %d) >>\nendobj\n" % n
        prev, xref = xref, len(body)
        body += b"xref\n6 1\n%010d 00000 n \ntrailer\n<< /Size 7 /Root 1 0 R /Info 6 0 R /Prev %d >>\n" % (at, prev)
        body += b"startxref\n%d\n%%%%EOF\n" % xref
    path.write_bytes(body)
    return path


def test_a_pdf_saved_hundreds_of_times_is_read_whole(tmp_path, caplog):
    """pdfminer reads a cross-reference section's /Prev by calling itself: a file saved incrementally some 500 times
    went past Python's recursion limit and was skipped as "not a readable PDF (RecursionError ...)". Its sections
    are read in a loop: every save is read, the last one's title is the title; so is a long chain that loops."""
    limit = sys.getrecursionlimit()
    with deadline(60):
        doc = extract_pdf(saved_incrementally(tmp_path / "saved.pdf", 3 * limit))
        assert doc.title == f"Harbour report, save {3 * limit}" and doc.paragraphs == ["The castle was built in 1250."]
        path, starts = looped_xref(tmp_path / "loop.pdf", 2 * limit)
        with caplog.at_level("WARNING", logger="spanseek.indexer.documents"):
            assert extract_pdf(path).paragraphs == ["The castle was built in 1250."]
    assert f"section at byte {starts[-1]} leads back (/Prev) to the one at byte {starts[0]} (a loop)" in caplog.text
    assert sys.getrecursionlimit() == limit


def test_a_pdf_decompression_bomb_is_refused_before_it_is_expanded(tmp_path):
    bomb = zlib.compress(TEXT + b" " * BOMB, 9)
    path = pdf_of_objects(tmp_path / "bomb.pdf", [*page(), stream(bomb, flate=True), FONT])
    with pytest.raises(Unreadable, match=r"a decompression bomb: its compressed stream \(object 4\) expands from "
                                         r"[0-9,]+ bytes to [0-9,]+ or more \(over 100 times\)"):
        extract_pdf(path)
    # a page's content compressed as a PDF writer compresses it is read, and so is one of a few MiB that compresses
    # as well as the bomb (a scanned page's one-bit image inline in its content)
    inline = pdf_of_objects(tmp_path / "inline.pdf", [*page(), stream(zlib.compress(TEXT + b" " * SMALL, 9), True), FONT])
    assert "The castle was built in 1250." in extract_pdf(inline).paragraphs[0]
    plain = zlib.compress(b"\n".join(TEXT.replace(b"72 700", b"72 %d" % y) for y in range(700, 100, -14)), 9)
    path = pdf_of_objects(tmp_path / "ok.pdf", [*page(), stream(plain, flate=True), FONT])
    assert "The castle was built in 1250." in extract_pdf(path).paragraphs[0]


def test_a_pdf_cut_short_with_a_decompression_bomb_in_an_object_stream_is_refused_before_it_is_expanded(tmp_path):
    """A PDF without a cross-reference table to read (cut short, or its /startxref wrong) is read through for its
    objects, and the object streams met on the way were expanded whole, unmeasured: a 300 KB file took 947 MiB. Its
    bomb is refused as one in a whole file is."""
    bomb = zlib.compress(b"7 0 " + b" " * BOMB + b"<< /Kind /Junk >>", 9)
    whole = pdf_of_objects(tmp_path / "whole.pdf", [*page(), stream(TEXT), FONT, b"<< /Type /ObjStm /N 1 /First 4 "
                                                    b"/Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream"
                                                    % (len(bomb), bomb)]).read_bytes()
    cut = whole[:whole.rindex(b"xref")]
    for name, data in (("cut.pdf", cut), ("pointed.pdf", cut + b"startxref\n%d\n%%%%EOF\n" % (len(cut) - 20))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(Unreadable, match=r"a decompression bomb: its compressed stream \(one found reading the "
                                             r"file through\) expands from [0-9,]+ bytes to [0-9,]+ or more"):
            extract_pdf(tmp_path / name)
    assert extract_pdf(tmp_path / "whole.pdf").paragraphs == ["The castle was built in 1250."]  # (never expanded)


def test_a_page_tree_whose_pages_lie_in_a_decompression_bomb_is_refused_at_once(tmp_path):
    """A page tree whose pages are objects in an object stream that is a decompression bomb: each page that could not
    be read was passed over as damaged, measuring the bomb again for each (a quarter of a second each: 20 pages,
    8 s), and the file was named damaged. It is refused as a bomb, at the first."""
    kids = list(range(10, 30))
    head = b" ".join(b"%d 0" % kid for kid in kids) + b" "
    packed = zlib.compress(head + b"<< /Type /Page /Parent 2 0 R >>" + b" " * BOMB, 9)
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % kid for kid in kids), len(kids)),
               3: b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream"
                  % (len(kids), len(head), len(packed), packed)}
    body, at = b"%PDF-1.5\n", {}
    for number, obj in objects.items():
        at[number] = len(body)
        body += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    size = kids[-1] + 2  # the cross-reference stream is the last object: type 1 at an offset, 2 in object 3
    rows = b"".join(b"\x01%s\x00\x00" % at[n].to_bytes(4, "big") if n in at else
                    b"\x02\x00\x00\x00\x03%s" % kids.index(n).to_bytes(2, "big") if n in kids else bytes(7)
                    for n in range(size - 1)) + b"\x01%s\x00\x00" % len(body).to_bytes(4, "big")
    body += b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n%s\nendstream\nendobj\n" % (
        size - 1, size, len(rows), rows) + b"startxref\n%d\n%%%%EOF\n" % len(body)
    (tmp_path / "tree.pdf").write_bytes(body)
    t0 = time.process_time()
    with pytest.raises(Unreadable, match=r"a decompression bomb: its compressed stream \(object 3\) expands from"):
        extract_pdf(tmp_path / "tree.pdf")
    assert time.process_time() - t0 < 2.0


def test_a_pdf_line_of_one_long_word_is_read_in_linear_time():
    word = "a" * 12_000  # the old patterns tried the word from each of its letters: some 12 s
    t0 = time.process_time()
    assert pdf_layout.dehyphenate([f"{word}\n", "infor-\nmation, information and well-\nknown well-known\n"]) == [
        f"{word}\n", "information, information and well-known well-known\n"]
    assert time.process_time() - t0 < 1.0


def test_html_nested_past_the_recursion_limit_or_never_closing_its_constructs_is_read(tmp_path):
    deep = "<ul><li>" * 5000 + "The ferry leaves at nine." + "</li></ul>" * 5000
    assert extract_html(deep).paragraphs == ["The ferry leaves at nine."]
    for unclosed in ("<?", "<!--", "<!"):  # Python's parser searched to the end once for each: 200 KB took 16 s
        t0 = time.process_time()
        assert extract_html(f"<p>Quay</p>{unclosed * 100_000}").paragraphs[0] == "Quay"
        assert time.process_time() - t0 < 5.0, unclosed
    assert extract_html("<p>Quay</p><![<![<![ x>").paragraphs == ["Quay"]  # Python's parser raised AssertionError
    row = "<table><tr><th>Name</th><th>Berths</th></tr><tr><td colspan='1%s'>Pier</td><td>2</td></tr></table>"
    # int() refuses 5,000 digits; such a span reads as one across the table
    assert extract_html(row % ("0" * 5000)).paragraphs == extract_html(row.replace("1%s", "2")).paragraphs


def test_a_fifo_or_device_named_like_a_file_is_named_and_never_read(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "fine.md").write_text("The ferry leaves at nine.\n")
    os.mkfifo(folder / "pipe.txt")  # reading it waited for a writer forever, had the walk taken it
    (folder / "zero.txt").symlink_to("/dev/zero")  # endless; a link outside the folder, followed here
    with deadline(20):
        report = from_files([folder], tmp_path / "c.jsonl", opts=IngestOptions(follow_links=True))
        with pytest.raises(IngestError, match="pipe.txt: not a regular file"):  # was "no such file or directory"
            from_files([folder / "pipe.txt"], tmp_path / "d.jsonl")
    assert [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["fine.md"]
    assert {Path(p).name: why for p, why in report.skipped} == {
        "pipe.txt": "not a regular file (a FIFO, a socket or a device); not read",
        "zero.txt": "not a regular file (a FIFO, a socket or a device); not read"}


def test_html_table_spans_past_the_table_are_cut_to_it():
    """trafilatura padded each spanned column with an empty cell and counted the row again at each cell: a row of
    5,000 cells spanning 100 took 30-45 s. Spans are cut to what the table holds, which reads the same as a table
    written with those spans."""
    spans = ("<table><tr><th>Name</th><th>Berths</th><th>Depth</th></tr>%s<tr><td>Quay</td><td>4</td><td>9 m</td>"
             "</tr></table>")
    wide = ("<tr><td colspan='50' rowspan='7'>Pier</td><td>2</td></tr>", "<tr><td>Pier</td><td colspan='9'>2</td></tr>")
    cut = ("<tr><td colspan='3' rowspan='2'>Pier</td><td>2</td></tr>", "<tr><td>Pier</td><td colspan='2'>2</td></tr>")
    for hostile, fitting in zip(wide, cut, strict=True):
        assert extract_html(spans % hostile).paragraphs == extract_html(spans % fitting).paragraphs
    row = "".join(f"<td colspan='100'>cell {i}</td>" for i in range(5000))
    t0 = time.process_time()
    with deadline(60):
        read = extract_html(f"<article><p>Berths</p><table><tr>{row}</tr></table></article>")
    assert any("cell 4999" in text for text in read.paragraphs)
    assert time.process_time() - t0 < 8.0


def test_cells_spanning_rows_past_each_other_are_read_once():
    """A cell spanning rows reads in each of them, but where every row's cells span the rows below, each row's cells
    are pushed past the last row's and the copies outnumber the table's own cells (this table's 40 cells would make
    several hundred, and a page of 10,000 took a minute and a half and gave 11 MB of text for 150 KB): then each
    cell reads once, in its first row, as written."""
    rows = "".join("<tr>" + "".join(f"<td rowspan='20'>r{r}c{c}</td>" for c in range(4)) + "</tr>" for r in range(10))
    table = f"<table>{rows}</table>"
    fill = "<p>" + "The harbour authority publishes its tide tables every spring for the ferry crews. " * 4 + "</p>"
    for read in (extract_html(f"<html><body><main><h1>T</h1>{fill}{table}</main></body></html>").paragraphs[2:],
                 extract_markdown(f"# T\n\n{table}\n").paragraphs[1:]):
        words = " ".join(read).split()
        assert {f"r{r}c{c}" for r in range(10) for c in range(4)} <= set(words) and len(words) <= 2 * 40


def test_a_table_of_a_thousand_header_rows_is_read_in_bounded_time_and_size():
    """Header rows under one another name their columns together ("Tide / high"), up to four of them: a table of a
    thousand rows of header cells named each column by a thousand names, in one paragraph of 500 KB, and took
    20-40 s to read."""
    rows = "".join("<tr>" + "".join(f"<th>h{r}c{c}</th>" for c in range(50)) + "</tr>" for r in range(1000))
    table = f"<table>{rows}<tr>" + "<td>x</td>" * 50 + "</tr></table>"
    with deadline(30):
        for read in (extract_html(f"<html><body><main><p>Berths</p>{table}</main></body></html>"),
                     extract_markdown(f"# Berths\n\n{table}\n")):
            assert max(map(len, read.paragraphs)) < 5000


def lxml_runs_out(path):
    """What lxml does where memory runs out inside libxml2 (an HTML page's cells searched by XPath, as trafilatura
    does, at a memory cap): it raises its own error, an XPathEvalError "unknown error" whose log names ERR_NO_MEMORY,
    not a MemoryError."""
    import resource

    from lxml import html

    tree = html.document_fromstring("<table>" + "<tr><td>x</td></tr>" * 200_000 + "</table>")
    held = next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmData:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (held, hard))
    try:
        tree.xpath('count(//td[. = "x"])')
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    raise AssertionError("lxml had the memory")


def test_memory_that_runs_out_inside_lxml_is_a_memory_error_not_a_damaged_file(tmp_path, monkeypatch):
    """Where memory runs out inside libxml2 (a 12,000-row HTML table read under the service's
    file_read_memory_bytes), lxml raises an XPath or parse error of its own: it escaped the reading as that, or was
    taken for a damaged file. Reading the file raises MemoryError, as memory that runs out in Python does (the
    service answers 413 naming its limit); a damaged file is still a skipped file with its reason."""
    import subprocess

    from lxml import etree

    path = tmp_path / "rows.html"
    path.write_text("<table><tr><td>x</td></tr></table>")
    # In an interpreter of its own: the cap is the process's data memory as it stands, and the heap that earlier
    # tests in this process freed (a test worker's) could hold what libxml2 asks for.
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parents[2])!r})\n"
              "from pathlib import Path\n"
              "from spanseek.indexer import ingest\n"
              "from tests.indexer.test_hostile_files import lxml_runs_out\n"
              "ingest.extract_file = lxml_runs_out\n"
              "try:\n"
              f"    ingest.read_document(Path({str(path)!r}), 'rows.html', len, ingest.IngestOptions())\n"
              "except MemoryError as e:\n"
              "    print('MemoryError:', e)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "MemoryError: rows.html: memory ran out" in run.stdout, run.stdout + run.stderr

    def damaged(path):
        try:
            etree.fromstring(b"<w:document")
        except etree.XMLSyntaxError:
            raise Unreadable("damaged (its XML does not parse)") from None

    monkeypatch.setattr(ingest, "extract_file", damaged)
    assert read_document(path, "rows.html", len, IngestOptions()) == "damaged (its XML does not parse)"
