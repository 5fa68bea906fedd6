"""PDF and Word files -> passages with their page or heading path (indexer.documents through `corpus from-files`),
the per-passage metadata from the corpus through the index to the hits, and skipped scanned or damaged files.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_documents.py
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from spanseek.core.io import CorpusError, Document, read_corpus, write_corpus
from spanseek.indexer.chunking import ChunkOptions
from spanseek.indexer.documents import Unreadable, extract_pdf
from spanseek.indexer.ingest import IngestError, IngestOptions, from_files
from spanseek.indexer.word import extract_docx

fpdf = pytest.importorskip("fpdf")
docx = pytest.importorskip("docx")

# Short paragraphs (under min_tokens): without the page rule they would be joined across pages.
PAGES = [
    ["The castle was built in 1340 by the count.", "Its walls are twelve metres high."],
    ["The harbour opened in 1872.", "Ships from Norway came every week."],
    ["The museum holds paintings from Delft.", "It opens at ten."],
]
WORDS = IngestOptions(chunk=ChunkOptions(max_tokens=60, overlap=10, min_tokens=32))


def write_pdf(path: Path, pages: list[list[str]], title: str | None = None, footer: bool = False) -> Path:
    """A PDF with one page per list, each string a paragraph (a gap between them); ``footer`` adds page numbers."""
    pdf = fpdf.FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_auto_page_break(False)
    for number, paragraphs in enumerate(pages, start=1):
        pdf.add_page()
        pdf.set_font("helvetica", size=12)
        for text in paragraphs:
            pdf.multi_cell(0, 6, text)
            pdf.ln(8)
        if footer:
            pdf.set_y(-15)
            pdf.cell(0, 10, str(number), align="C")
    pdf.output(str(path))
    return path


def passages_of(path: Path, tmp_path: Path, opts: IngestOptions = WORDS) -> Document:
    from_files([path], tmp_path / "c.jsonl", opts=opts)
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    return doc


def test_pdf_passages_carry_their_page_and_never_mix_two_pages(tmp_path):
    doc = passages_of(write_pdf(tmp_path / "city.pdf", PAGES, title="City guide", footer=True), tmp_path)
    assert doc.title == "City guide" and doc.meta["pages"] == 3
    assert len(doc.paragraphs) == 3  # each page's two short paragraphs joined, but no further
    for passage, meta in zip(doc.paragraphs, doc.passage_meta, strict=True):
        assert passage.split("\n\n") == PAGES[meta["page"] - 1]  # all of its page, in order, and nothing else
    assert [m["page"] for m in doc.passage_meta] == [1, 2, 3]
    assert all(not p.strip().isdigit() for text in doc.paragraphs for p in text.split("\n\n"))  # page numbers dropped


def test_a_paragraph_running_onto_the_next_page_stays_one(tmp_path):
    pages = [["A first paragraph that ends on its page.", "The old bridge over the river was built"],
             ["in 1620 and rebuilt after the flood.", "A new paragraph starts here."]]
    opts = IngestOptions(chunk=ChunkOptions(max_tokens=60, overlap=10, min_tokens=0))  # one passage a paragraph
    doc = passages_of(write_pdf(tmp_path / "bridge.pdf", pages), tmp_path, opts)
    assert list(doc.paragraphs) == ["A first paragraph that ends on its page.",
                                    "The old bridge over the river was built in 1620 and rebuilt after the flood.",
                                    "A new paragraph starts here."]
    assert list(doc.passage_meta) == [{"page": 1}, {"page": 1, "page_end": 2}, {"page": 2}]



@pytest.mark.parametrize(("pitch", "gap"), [(5, 5), (6, 6), (8, 8), (5, 2)], ids=["single", "1.5", "double", "tight"])
def test_a_paragraph_stays_whole_at_any_line_spacing(tmp_path, pitch, gap):
    """At 1.5 or double line spacing pdfminer made every line a text box, and a paragraph was cut mid-sentence into
    passages ("... The lake was discovered by" | "Russian scientists in 1996 ..."); paragraphs only a little further
    apart than their lines ("tight") stay two."""
    from spanseek.indexer.documents import extract_pdf

    paragraphs = ["Lake Vostok is the largest of the subglacial lakes of Antarctica, under the surface of the East "
                  "Antarctic Ice Sheet. The lake was discovered by Russian scientists in 1996, who combined radar "
                  "surveys by Andrey Kapitsa with seismic soundings of the ice above it.",
                  "The Eiffel Tower was built for the World's Fair of 1889 by the engineering company of Gustave "
                  "Eiffel. It was the tallest structure in the world until 1930."]
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for text in paragraphs:
        pdf.multi_cell(0, pitch, text)
        pdf.ln(gap)
    pdf.output(str(tmp_path / "spaced.pdf"))
    assert extract_pdf(tmp_path / "spaced.pdf").paragraphs == paragraphs


def test_short_lines_at_wide_spacing_stay_their_own(tmp_path):
    """A heading, a contents list and list items spaced as the lines of a 1.5-spaced page are not glued onto the
    paragraph after them: only a line that reaches its column's right edge (the text wrapped) goes on."""
    from spanseek.indexer.documents import extract_pdf

    body = ("The survey counted the birds of the northern marshes every spring from 1990 to 2020, and found that "
            "the number of breeding pairs had fallen by half over those thirty years.")
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for line in ["Contents", "1 Introduction 3", "2 Methods 7", "Results of the survey", body]:
        pdf.multi_cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(tmp_path / "short.pdf"))
    assert extract_pdf(tmp_path / "short.pdf").paragraphs == ["Contents", "1 Introduction 3", "2 Methods 7",
                                                              "Results of the survey", body]

def test_a_pdf_without_a_text_layer_is_skipped_with_a_warning_and_the_others_are_read(tmp_path, caplog):
    from PIL import Image

    image = tmp_path / "scan.png"
    Image.new("RGB", (60, 40), "gray").save(image)
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.image(str(image), x=10, y=10, w=60)
    pdf.add_page()  # and an empty page
    pdf.output(str(tmp_path / "scan.pdf"))
    write_pdf(tmp_path / "good.pdf", PAGES[:1])
    with caplog.at_level(logging.WARNING):
        report = from_files([tmp_path], tmp_path / "out" / "c.jsonl")
    assert report.documents == 1 and [Path(p).name for p, _ in report.skipped] == ["scan.pdf"]
    (warning,) = [r.getMessage() for r in caplog.records if "scan.pdf" in r.getMessage()]
    assert "no text layer in its 2 pages" in warning and "scanned" in warning and "OCR" in warning
    assert [d.id for d in read_corpus(tmp_path / "out" / "c.jsonl")] == ["good.pdf"]


def test_a_blank_pdf_is_skipped_as_having_no_text_not_as_scanned(tmp_path):
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.line(10, 10, 100, 10)  # a rule: drawn, but nothing OCR could read
    pdf.add_page()
    pdf.output(str(tmp_path / "blank.pdf"))
    with pytest.raises(Unreadable) as e:
        extract_pdf(tmp_path / "blank.pdf")
    assert str(e.value).startswith("no text in its 2 pages: they are blank") and "OCR" not in str(e.value)
    one = fpdf.FPDF()
    one.add_page()
    one.output(str(tmp_path / "one.pdf"))
    with pytest.raises(Unreadable, match=r"^no text in its 1 page: it is blank \(no text and no images\)"):
        extract_pdf(tmp_path / "one.pdf")  # (was "its 1 page: they are blank")


def test_a_damaged_pdf_or_word_file_is_named_and_does_not_stop_the_others(tmp_path, caplog):
    good = write_pdf(tmp_path / "good.pdf", PAGES)
    (tmp_path / "cut.pdf").write_bytes(good.read_bytes()[: len(good.read_bytes()) // 3])  # truncated
    (tmp_path / "junk.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf")
    (tmp_path / "old.docx").write_bytes(b"\xd0\xcf\x11\xe0 an old binary .doc renamed")
    with caplog.at_level(logging.WARNING):
        report = from_files([tmp_path], tmp_path / "out" / "c.jsonl")
    assert report.documents == 1
    reasons = {Path(p).name: why for p, why in report.skipped}
    assert set(reasons) == {"cut.pdf", "junk.pdf", "old.docx"}
    assert reasons["junk.pdf"].startswith("not a readable PDF: ") and "damaged" in reasons["junk.pdf"]
    assert reasons["cut.pdf"].startswith("damaged: ") and "no text could be read" in reasons["cut.pdf"]
    assert reasons["old.docx"].startswith("not a readable Word (.docx) file (")
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert all(str(tmp_path / name) in messages for name in reasons)  # every warning names its file
    assert "Traceback" not in messages
    with pytest.raises(IngestError, match=r"junk\.pdf: not a readable PDF"):
        from_files([tmp_path / "junk.pdf"], tmp_path / "strict.jsonl", opts=IngestOptions(strict=True))


def test_an_encrypted_pdf_is_skipped_as_needing_a_password_and_one_it_can_open_is_read(tmp_path):
    from fpdf.enums import EncryptionMethod

    for name, password in (("locked.pdf", "secret"), ("open.pdf", "")):  # no user password: anyone may open it
        pdf = fpdf.FPDF()
        pdf.add_page()
        pdf.set_font("helvetica", size=12)
        pdf.multi_cell(0, 6, PAGES[0][0])
        pdf.set_encryption(owner_password="owner", user_password=password, encryption_method=EncryptionMethod.RC4)
        pdf.output(str(tmp_path / name))
    (tmp_path / "locked.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))  # how Word stores one
    report = from_files([tmp_path], tmp_path / "out" / "c.jsonl")
    reasons = {Path(p).name: why for p, why in report.skipped}
    # the PDF's reason was "not a readable PDF (PDFPasswordIncorrect: ); ..."
    assert reasons["locked.pdf"].startswith("encrypted PDF: it needs a password to open; remove the password")
    assert "password-protected .docx, or an old .doc" in reasons["locked.docx"]
    assert set(reasons) == {"locked.pdf", "locked.docx"}
    assert [d.paragraphs for d in read_corpus(tmp_path / "out" / "c.jsonl")] == [(PAGES[0][0],)]


def pdf_of_objects(path: Path, objects: list[bytes], info: int | None = None) -> Path:
    """A PDF of these objects (numbered from 1; object 1 the catalog) with a correct cross-reference table and
    object ``info``, when given, its document info."""
    body, offsets = b"%PDF-1.4\n", []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    body += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    info_ref = b"" if info is None else b" /Info %d 0 R" % info
    body += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info_ref, xref)
    path.write_bytes(body)
    return path


def _titled_pdf(path: Path, info: list[bytes]) -> Path:
    """A one-page PDF whose info dictionary is ``info``'s first object (object 6), the others after it."""
    text = b"BT /F1 12 Tf 72 700 Td (The castle was built in 1250.) Tj ET"
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *info,
    ], info=6)


def test_a_pdf_title_held_in_another_object_is_the_title(tmp_path):
    path = _titled_pdf(tmp_path / "ref.pdf", [
        b"<< /Title 7 0 R >>",  # the info: its title a reference, as many PDF writers store it
        b"(A History of the Castle)"])
    doc = passages_of(path, tmp_path)
    assert doc.title == "A History of the Castle" and doc.paragraphs == ("The castle was built in 1250.",)


@pytest.mark.parametrize("title", [b"(\xef\xbb\xbfBurg Kl\xc3\xa4ngen)",
                                   b"<fffe420075007200670020004b006c00e4006e00670065006e00>"])
def test_a_pdf_title_in_utf_8_or_utf_16le_with_its_mark_reads_as_written(tmp_path, title):
    """A title property in UTF-8 (PDF 2.0) or UTF-16LE with their byte-order marks read as PDFDocEncoding:
    "\u00ef\u00bb\u00bfBurg Kl\u00c3\u00a4ngen"."""
    path = _titled_pdf(tmp_path / "titled.pdf", [b"<< /Title %s >>" % title])
    assert passages_of(path, tmp_path).title == "Burg Kl\u00e4ngen"


def test_word_passages_carry_their_heading_path(tmp_path):
    document = docx.Document()
    document.add_heading("Field manual", 0)  # the "Title" style: the document's title, not a passage
    document.add_paragraph("Read this first.")
    document.add_heading("Intro", 1)
    document.add_heading("Scope", 2)  # straight after Intro: Intro has no text of its own, and joins Scope's
    document.add_paragraph("The manual covers the harbour cranes.")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("crane", "load"), ("north", "40 t")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    document.add_heading("Audience", 2)
    document.add_paragraph("Crane drivers and their supervisors.")
    document.add_heading("Safety", 1)
    document.add_paragraph("Wear a helmet at all times.")
    document.save(str(tmp_path / "manual.docx"))
    doc = passages_of(tmp_path / "manual.docx", tmp_path)
    assert doc.title == "Field manual"
    assert list(zip(doc.paragraphs, doc.passage_meta, strict=True)) == [
        ("Read this first.", {}),
        ("Intro\n\nScope\n\nThe manual covers the harbour cranes.\n\ncrane load\n\nnorth 40 t",
         {"section": "Intro > Scope"}),
        ("Audience\n\nCrane drivers and their supervisors.", {"section": "Intro > Audience"}),
        ("Safety\n\nWear a helmet at all times.", {"section": "Safety"}),
    ]


def test_passage_meta_round_trips_keeps_its_paragraphs_and_is_checked(tmp_path):
    path = tmp_path / "c.jsonl"
    docs = [Document("a", "A", ("x", "y"), {"src": "a"}, passage_meta=({"page": 1}, {"page": 2})),
            Document("b", "B", ("z",))]
    write_corpus(path, docs)
    assert list(read_corpus(path)) == docs
    assert "passage_meta" not in path.read_text().splitlines()[1]  # none: no key
    path.write_text(json.dumps({"id": "a", "paragraphs": ["x", " ", "y"], "passage_meta": [{"page": 1}, None, None]}))
    (doc,) = read_corpus(path)  # the empty paragraph goes, and its metadata with it
    assert doc.paragraphs == ("x", "y") and doc.passage_meta == ({"page": 1}, {})
    path.write_text('{"id": "a", "paragraphs": ["x"]}\n{"id": "b", "paragraphs": ["x", "y"], "passage_meta": [{}]}\n')
    with pytest.raises(CorpusError, match=r"c\.jsonl:2: 'passage_meta' must be a list of JSON objects .* one per "
                                          r"paragraph \(2\)"):
        list(read_corpus(path))


def test_hits_return_the_page_of_their_passage_and_upsert_sees_a_page_change(tmp_path, tiny_model_dir):
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchParams
    from spanseek.indexer.add import upsert_documents
    from spanseek.indexer.build import BuildOptions, build_index

    from_files([write_pdf(tmp_path / "city.pdf", PAGES)], tmp_path / "c.jsonl", opts=WORDS)
    build_index(tmp_path / "c.jsonl", tiny_model_dir, tmp_path / "index",
                BuildOptions(progress=False, precision="fp32"))
    searcher = open_searcher(tmp_path / "index", tiny_model_dir, device="cpu", precision="fp32")
    hits = searcher.search(["When did the harbour open?"], SearchParams(unit="passage", top_k=3, mode="lexical"))[0]
    assert hits[0].meta == {"source": (tmp_path / "city.pdf").as_posix(), "pages": 3, "page": 2}  # its doc's, and its own
    assert len({h.meta["page"] for h in hits}) >= 2
    for hit in hits:
        assert hit.passage.split("\n\n") == PAGES[hit.meta["page"] - 1]

    opts = BuildOptions(progress=False, precision="fp32")
    assert upsert_documents(tmp_path / "index", tmp_path / "c.jsonl", model=tiny_model_dir, opts=opts)[1].unchanged == 1
    (doc,) = read_corpus(tmp_path / "c.jsonl")  # the same text, but the pages numbered from 2
    write_corpus(tmp_path / "moved.jsonl", [Document(doc.id, doc.title, doc.paragraphs, doc.meta,
                                                     passage_meta=tuple({"page": m["page"] + 1} for m in doc.passage_meta))])
    assert upsert_documents(tmp_path / "index", tmp_path / "moved.jsonl", model=tiny_model_dir, opts=opts)[1].replaced == 1


def test_from_files_keeps_what_is_at_out_and_never_writes_over_its_input(tmp_path):
    """A run that yields no document leaves an existing corpus at --out as it was (it was deleted before), and an
    --out that is one of the inputs is refused before anything is read (the input was overwritten before)."""
    out = tmp_path / "existing.jsonl"
    write_corpus(out, [Document(id="a", title="A", paragraphs=("kept",))])
    before = out.read_bytes()
    (tmp_path / "zero.pdf").write_bytes(b"")
    with pytest.raises(IngestError, match="no documents in"):
        from_files([tmp_path / "zero.pdf"], out)
    assert out.read_bytes() == before
    text = tmp_path / "in.txt"
    text.write_text("some text")
    with pytest.raises(IngestError, match="is one of the files to read"):
        from_files([text], tmp_path / "." / "in.txt")
    assert text.read_text() == "some text"
    with pytest.raises(IngestError, match="is one of the files to read"):  # a file the folder given holds
        from_files([tmp_path], tmp_path / "in.txt")
    assert text.read_text() == "some text"


def test_word_heading_paths_follow_levels_not_positions(tmp_path):
    """A heading closes the open ones of its level and deeper, whatever levels came before it: two Heading 2s
    without a Heading 1 are siblings, and a Heading 3 under a Heading 1 is one step below it."""
    document = docx.Document()
    for style, text in [(2, "Install"), (0, "Run the installer."), (2, "Upgrade"), (0, "Run it again."),
                        (1, "Use"), (3, "Search"), (0, "Ask a question."), (2, "Serve"), (0, "Start the service.")]:
        if style:
            document.add_heading(text, style)
        else:
            document.add_paragraph(text)
    document.save(str(tmp_path / "guide.docx"))
    extracted = extract_docx(tmp_path / "guide.docx")
    sections = {p: m.get("section") for p, m in zip(extracted.paragraphs, extracted.paragraph_meta, strict=True)}
    assert sections["Run it again."] == "Upgrade"
    assert sections["Ask a question."] == "Use > Search" and sections["Start the service."] == "Use > Serve"


def test_a_pdf_whose_lettering_is_drawn_as_outlines_is_sent_to_ocr_not_called_blank(tmp_path):
    """A PDF whose text is drawn as shapes (a print export with its fonts converted to outlines) has no text layer and
    no images, and was called blank, "nothing to read"; OCR reads its lettering, so it is named as one that needs it."""
    outlines = (b"72 700 m 72 740 l 78 740 l 78 723 l 92 723 l 92 740 l 98 740 l 98 700 l 92 700 l 92 717 l 78 717 l "
                b"78 700 l h f 104 700 m 104 728 l 110 728 l 110 700 l h f 107 736 m 111 736 111 742 107 742 c "
                b"103 742 103 736 107 736 c f")  # "Hi", lettered
    path = pdf_of_objects(tmp_path / "poster.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(outlines), outlines),
    ])
    with pytest.raises(Unreadable) as e:
        extract_pdf(path)
    assert str(e.value).startswith("no text layer in its 1 page") and "run OCR" in str(e.value)
