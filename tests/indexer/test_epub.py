"""EPUB e-books as publishers and converters write them (EPUB 2 and 3), made here with zipfile, through
``indexer.epub.extract_epub`` and ``corpus from-files``: the spine's reading order, chapters and sections, the OPF's
metadata, the navigation document and the cover left out, DRM refused, damaged and hostile files named.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_epub.py
"""

from __future__ import annotations

import logging
import time
import zipfile
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.chunking import ChunkOptions
from spanseek.indexer.epub import extract_epub
from spanseek.indexer.extracted import Unreadable
from spanseek.indexer.ingest import IngestError, IngestOptions, from_files

CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="{opf}" media-type="application/oebps-package+xml"/></rootfiles>'
             '</container>')
EPUB3_META = ('<dc:title id="t1">The Harbour</dc:title><dc:title id="t0">Harbour Tales</dc:title>'
              '<meta refines="#t0" property="title-type">main</meta>'
              '<dc:creator id="a1">Ann Gala</dc:creator><meta refines="#a1" property="role" scheme="marc:relators">aut'
              '</meta><dc:creator id="e1">Ed Itor</dc:creator><meta refines="#e1" property="role">edt</meta>'
              '<dc:language>en</dc:language>')
NAV = ('<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><body>'
       '<nav epub:type="toc"><h1>Contents</h1><ol><li><a href="text/ch1.xhtml">The bridge</a></li></ol></nav>'
       '<nav epub:type="landmarks"><ol><li><a epub:type="cover" href="text/cover.xhtml">Cover</a></li></ol></nav>'
       '</body></html>')


def page(body: str, head: str = "<title>ignored</title>") -> str:
    return (f'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><head>{head}</head>'
            f"<body>{body}</body></html>")


CHAPTERS = {
    "text/cover.xhtml": page('<div><img src="cover.jpg" alt="Cover of Harbour Tales"/><p>Harbour Tales</p></div>'),
    "text/ch1.xhtml": page("<h1>The bridge</h1><p>In 1450 Gala built the harbour bridge.</p>"
                           '<p style="display: none">A hidden note.</p><h2>Stones</h2><p>Granite from Kellerton.</p>'),
    "text/ch2.xhtml": page("<section><header><h1>The church</h1></header><p>In 1460 Hugo built the church.</p>"
                           "<table><tr><th>Bell</th><th>Cast</th></tr><tr><td>Great Tom</td><td>1462</td></tr></table>"
                           '<aside epub:type="footnote" xmlns:epub="http://www.idpf.org/2007/ops"><p>1. Rebuilt in '
                           "1702.</p></aside></section>"),
}


def write_epub(path: Path, chapters: dict[str, str] | None = None, spine: list[str] | None = None,
               metadata: str = EPUB3_META, extra: str = "", parts: dict[str, str | bytes] | None = None,
               opf_name: str = "OEBPS/content.opf", nav: str | None = NAV, guide: str = "") -> Path:
    """An EPUB (3 where it has a ``nav``) of ``chapters`` (archive paths under OEBPS/ -> XHTML), its spine in the
    order of ``spine`` (the chapters' order by default; the manifest lists them in reverse)."""
    chapters = CHAPTERS if chapters is None else chapters
    spine = list(chapters) if spine is None else spine
    ids = {name: f"item{i}" for i, name in enumerate(chapters)}
    manifest = "".join(f'<item id="{ids[n]}" href="{n}" media-type="application/xhtml+xml"/>' for n in reversed(chapters))
    if nav is not None:
        manifest += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    itemrefs = ('<itemref idref="nav"/>' if nav is not None else "") + "".join(
        f'<itemref idref="{ids[n]}"/>' for n in spine)
    opf = (f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="{3 if nav else 2}.0" '
           f'xmlns:opf="http://www.idpf.org/2007/opf"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">{metadata}'
           f"</metadata><manifest>{manifest}</manifest><spine>{itemrefs}</spine>{guide}</package>{extra}")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER.format(opf=opf_name))
        z.writestr(opf_name, opf)
        if nav is not None:
            z.writestr("OEBPS/nav.xhtml", nav)
        for name, text in chapters.items():
            z.writestr(f"OEBPS/{name}", text)
        for name, data in (parts or {}).items():
            z.writestr(name, data)
    return path


def with_ncx(path: Path, label: str, src: str) -> Path:
    """An EPUB 2 book at ``path`` given an NCX (its table of contents) of one entry, ``label`` leading to ``src``."""
    ncx = ('<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><navMap><navPoint id="p1"><navLabel>'
           f'<text>{label}</text></navLabel><content src="{src}"/></navPoint></navMap></ncx>')
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    parts["OEBPS/toc.ncx"] = ncx.encode()
    parts["OEBPS/content.opf"] = parts["OEBPS/content.opf"].replace(b"<spine>", b'<spine toc="ncx">').replace(
        b"</manifest>", b'<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/></manifest>')
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return path

def test_the_spine_reads_in_order_with_chapters_sections_and_the_opf_metadata(tmp_path):
    """The spine's order, not the manifest's; each document's headings, tables, hidden text and footnotes as an HTML
    file's; the nav document and the cover the landmarks name not read; the main title, the author (not the
    editor) and the language in meta."""
    ext = extract_epub(write_epub(tmp_path / "b.epub", spine=["text/cover.xhtml", "text/ch2.xhtml", "text/ch1.xhtml"]))
    assert ext.title == "Harbour Tales"
    assert ext.meta == {"title": "Harbour Tales", "author": "Ann Gala", "language": "en", "chapters": 2}
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("The church", {"chapter": 1, "section": "The church"}),
        ("In 1460 Hugo built the church.", {"chapter": 1, "section": "The church"}),
        ("Bell: Great Tom; Cast: 1462", {"chapter": 1, "section": "The church"}),
        ("1. Rebuilt in 1702.", {"chapter": 1, "section": "The church"}),
        ("The bridge", {"chapter": 2, "section": "The bridge"}),
        ("In 1450 Gala built the harbour bridge.", {"chapter": 2, "section": "The bridge"}),
        ("Stones", {"chapter": 2, "section": "The bridge > Stones"}),
        ("Granite from Kellerton.", {"chapter": 2, "section": "The bridge > Stones"}),
    ]


def test_an_epub2_book_leaves_out_its_guide_s_cover_and_contents_and_reads_opf_roles(tmp_path):
    chapters = {"text/cover.xhtml": CHAPTERS["text/cover.xhtml"],
                "text/toc.xhtml": page('<h1>Contents</h1><p><a href="ch1.xhtml">The bridge</a></p>'),
                "text/ch1.xhtml": CHAPTERS["text/ch1.xhtml"]}
    guide = ('<guide><reference type="cover" href="text/cover.xhtml" title="Cover"/><reference type="toc" '
             'href="text/toc.xhtml#top" title="Contents"/></guide>')
    metadata = ('<dc:title>Harbour Tales</dc:title><dc:creator opf:role="aut">Ann Gala</dc:creator>'
                '<dc:creator opf:role="aut">Hugo Berg</dc:creator><dc:creator opf:role="ill">Ida Drew</dc:creator>'
                "<dc:language>nb</dc:language>")
    ext = extract_epub(write_epub(tmp_path / "b.epub", chapters, nav=None, guide=guide, metadata=metadata))
    assert ext.meta == {"title": "Harbour Tales", "author": ["Ann Gala", "Hugo Berg"], "language": "nb",
                        "chapters": 1}
    assert ext.paragraphs[:2] == ["The bridge", "In 1450 Gala built the harbour bridge."]
    assert {m["chapter"] for m in ext.paragraph_meta} == {1}


def test_from_files_reads_epubs_in_folders_and_never_mixes_two_chapters(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    write_epub(folder / "tales.epub", metadata="<dc:language>en</dc:language>")  # no title: the first heading
    out = tmp_path / "c.jsonl"
    report = from_files([folder], out, opts=IngestOptions(chunk=ChunkOptions(max_tokens=200)))
    (doc,) = read_corpus(out)
    assert report.documents == 1 and doc.id == "tales.epub" and doc.title == "The bridge"
    assert doc.meta == {"source": "tales.epub", "language": "en", "chapters": 2}
    assert [m["chapter"] for m in doc.passage_meta] == sorted(m["chapter"] for m in doc.passage_meta)
    assert {m["chapter"] for m in doc.passage_meta} == {1, 2}
    assert all(("Hugo" in p) == (m["chapter"] == 2) for p, m in zip(doc.paragraphs, doc.passage_meta, strict=True))


def test_a_drm_protected_book_is_refused_naming_the_file_and_font_obfuscation_is_read(tmp_path, caplog):
    def encryption(algorithm: str, uri: str) -> str:
        return ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:EncryptionMethod '
                f'Algorithm="{algorithm}"/><enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData>'
                "</enc:EncryptedData></encryption>")

    folder = tmp_path / "books"
    folder.mkdir()
    write_epub(folder / "fonts.epub", parts={"META-INF/encryption.xml": encryption(
        "http://www.idpf.org/2008/embedding", "OEBPS/fonts/serif.otf")})
    write_epub(folder / "locked.epub", parts={"META-INF/encryption.xml": encryption(
        "http://www.w3.org/2001/04/xmlenc#aes128-cbc", "OEBPS/text/ch1.xhtml")})
    with caplog.at_level(logging.WARNING):
        report = from_files([folder], tmp_path / "c.jsonl")
    assert report.documents == 1 and [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["fonts.epub"]
    ((path, why),) = report.skipped
    assert path == str(folder / "locked.epub")
    assert "encrypted (DRM: META-INF/encryption.xml encrypts OEBPS/text/ch1.xhtml with" in why and "aes128" in why
    with pytest.raises(IngestError, match="locked.epub: an EPUB whose content is encrypted"):
        from_files([folder / "locked.epub"], tmp_path / "d.jsonl", opts=IngestOptions(strict=True))


def test_a_book_whose_fonts_alone_are_encrypted_is_read(tmp_path):
    """A book whose encryption.xml encrypts its fonts with a real cipher (AES, as some publishers protect the fonts
    they license), its text plain, was refused as DRM: it is read; one whose chapter is encrypted is still refused,
    named by the chapter, however the encryption names its path."""
    def encrypted(*uris: str) -> str:
        return ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                'xmlns:enc="http://www.w3.org/2001/04/xmlenc#">' + "".join(
                    '<enc:EncryptedData><enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
                    f'<enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>'
                    for uri in uris) + "</encryption>")

    fonts = write_epub(tmp_path / "fonts.epub", parts={
        "META-INF/encryption.xml": encrypted("OEBPS/fonts/serif.otf", "OEBPS/fonts/sans.otf"),
        "OEBPS/fonts/serif.otf": b"\x93\x11 ciphertext", "OEBPS/fonts/sans.otf": b"\x07 ciphertext"})
    assert extract_epub(fonts).paragraphs[:2] == ["The bridge", "In 1450 Gala built the harbour bridge."]
    locked = write_epub(tmp_path / "locked.epub", parts={
        "META-INF/encryption.xml": encrypted("OEBPS/fonts/serif.otf", "OEBPS/text/../text/ch%31.xhtml")})
    with pytest.raises(Unreadable, match=r"encrypts OEBPS/text/ch1\.xhtml with http://www\.w3\.org/2001/04/xmlenc"
                                         r"#aes128-cbc\); its text cannot be read"):
        extract_epub(locked)


def test_damaged_books_and_other_files_renamed_are_named_with_what_is_wrong(tmp_path):
    def why(name: str, data: bytes) -> str:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(Unreadable) as e:
            extract_epub(tmp_path / name)
        return str(e.value)

    good = write_epub(tmp_path / "good.epub").read_bytes()
    assert why("empty.epub", b"") == "an empty file (0 bytes), not an EPUB (.epub) file"
    assert why("page.epub", b"<html>...</html>") == "not an EPUB (.epub) file: one is a zip archive, and this is none"
    assert why("cut.epub", good[: len(good) // 2]).startswith("not a readable EPUB (.epub) file: its zip archive is "
                                                             "truncated or damaged")
    bad_opf = write_epub(tmp_path / "x.epub", extra="<oops").read_bytes()
    assert why("opf.epub", bad_opf).startswith("not a readable EPUB (.epub) file: its part OEBPS/content.opf is not "
                                               "well-formed XML (")
    no_opf = write_epub(tmp_path / "y.epub", opf_name="OEBPS/missing.opf").read_bytes()
    with zipfile.ZipFile(tmp_path / "z.epub", "w") as z:  # the container names a package document it lacks
        with zipfile.ZipFile(tmp_path / "y.epub") as y:
            for name in y.namelist():
                if name != "OEBPS/missing.opf":
                    z.writestr(name, y.read(name))
    assert no_opf and why("lost.epub", (tmp_path / "z.epub").read_bytes()) == (
        "not a readable EPUB (.epub) file: it has no part OEBPS/missing.opf")
    with zipfile.ZipFile(tmp_path / "doc.epub", "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
    assert why("doc.epub", (tmp_path / "doc.epub").read_bytes()).startswith(
        "an Office Open XML file (Word, PowerPoint or Excel), not an EPUB (.epub) file")
    with zipfile.ZipFile(tmp_path / "odt.epub", "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
    assert why("odt.epub", (tmp_path / "odt.epub").read_bytes()) == (
        "an OpenDocument text (.odt), not an EPUB (.epub) file; rename it to .odt")


def test_a_missing_or_undecodable_chapter_is_named_and_the_rest_of_the_book_is_read(tmp_path, caplog):
    path = write_epub(tmp_path / "b.epub", chapters={
        **CHAPTERS, "text/ch3.xhtml": page("<p>caf\xe9</p>").replace("utf-8", "ascii")})
    with zipfile.ZipFile(path) as z:
        kept = {n: z.read(n) for n in z.namelist() if n != "OEBPS/text/ch1.xhtml"}
    with zipfile.ZipFile(path, "w") as z:
        for name, data in kept.items():
            z.writestr(name, data)
    with caplog.at_level(logging.WARNING):
        ext = extract_epub(path)
    assert "In 1460 Hugo built the church." in ext.paragraphs and ext.meta["chapters"] == 3
    assert {m["chapter"] for m in ext.paragraph_meta} == {2}  # its place in the book, whatever is lost before it
    assert "it has no part OEBPS/text/ch1.xhtml; the rest of it is read" in caplog.text
    assert "its part OEBPS/text/ch3.xhtml is not valid ascii (byte 0xc3" in caplog.text


def test_entity_bombs_are_not_expanded_and_zip_bombs_are_refused(tmp_path):
    """A billion laughs in a chapter reads in bounded time and memory, its entities never expanded; one in the package
    document is refused naming it (libxml2 stops at the amplification); a chapter that inflates a thousand times is
    a zip bomb, as a .docx part is."""
    laughs = ('<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(10)) + "]>")
    chapter = laughs.replace("lolz", "html") + page("<p>Safe &lol9; text.</p>").split("?>", 1)[1]
    path = write_epub(tmp_path / "laughs.epub", chapters={"text/ch1.xhtml": chapter})
    start = time.process_time()
    ext = extract_epub(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs == ["Safe &lol9; text."] and ext.title == "Harbour Tales"
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    opf = parts["OEBPS/content.opf"].replace(b'<?xml version="1.0"?>', laughs.encode())
    parts["OEBPS/content.opf"] = opf.replace(b"Harbour Tales</dc:title>", b"&lol9;</dc:title>")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    start = time.process_time()
    with pytest.raises(Unreadable, match="its part OEBPS/content.opf is not well-formed XML .*amplification"):
        extract_epub(path)
    assert time.process_time() - start < 1
    bomb = write_epub(tmp_path / "bomb.epub", chapters={"text/ch1.xhtml": page("<p>x</p>" + " " * (80 << 20))})
    with pytest.raises(Unreadable, match="a zip bomb: its part OEBPS/text/ch1.xhtml expands from"):
        extract_epub(bomb)


def test_a_chapter_without_headings_takes_its_title_in_the_table_of_contents(tmp_path):
    """EPUB 3's navigation document, or EPUB 2's NCX, names each document: a passage before any heading of its
    document has that title as its section (a heading's path otherwise)."""
    chapters = {"text/ch1.xhtml": page('<p class="chapter-title">I</p><p>In 1450 Gala built the bridge.</p>'),
                "text/ch2.xhtml": CHAPTERS["text/ch2.xhtml"]}
    nav = NAV.replace('<li><a href="text/ch1.xhtml">', '<li><a href="text/ch2.xhtml">Church</a></li><li><a href="'
                      'text/ch1.xhtml#start">')
    ext = extract_epub(write_epub(tmp_path / "three.epub", chapters, nav=nav))
    assert ext.paragraph_meta[:2] == [{"chapter": 1, "section": "The bridge"}] * 2
    assert ext.paragraph_meta[2] == {"chapter": 2, "section": "The church"}
    path = with_ncx(write_epub(tmp_path / "two.epub", chapters, nav=None), "Book One: The Bridge", "text/ch1.xhtml")
    assert extract_epub(path).paragraph_meta[0] == {"chapter": 1, "section": "Book One: The Bridge"}


def test_a_book_in_one_document_whose_contents_open_it_is_read(tmp_path):
    """The guide (EPUB 2) or the landmarks (EPUB 3) name the contents at the head of the book's one document
    (``book.xhtml#toc``), and the table of contents leads to its chapters further on: the document is read, not left
    out as a contents page."""
    book = {"text/book.xhtml": page('<h1 id="toc">Contents</h1><p>The bridge</p><h1 id="c1">The bridge</h1>'
                                    "<p>In 1450 Gala built the harbour bridge.</p>")}
    guide = '<guide><reference type="toc" title="Contents" href="text/book.xhtml#toc"/></guide>'
    nav = NAV.replace("text/ch1.xhtml", "text/book.xhtml#c1").replace(
        'epub:type="cover" href="text/cover.xhtml"', 'epub:type="toc" href="text/book.xhtml#toc"')
    ext = extract_epub(write_epub(tmp_path / "three.epub", book, nav=nav))
    assert ext.paragraphs[-1] == "In 1450 Gala built the harbour bridge." and ext.meta["chapters"] == 1
    path = with_ncx(write_epub(tmp_path / "two.epub", book, nav=None, guide=guide), "The bridge", "text/book.xhtml#c1")
    assert extract_epub(path).paragraphs[-1] == "In 1450 Gala built the harbour bridge."
    # a contents page of its own, the table of contents leading past it, is still left out
    ext = extract_epub(write_epub(tmp_path / "toc.epub", book | {"text/ch1.xhtml": CHAPTERS["text/ch1.xhtml"]},
                                  nav=None, guide=guide.replace("book.xhtml#toc", "book.xhtml")))
    assert "Contents" not in ext.paragraphs and ext.meta["chapters"] == 1


def test_a_chapter_of_unclosed_doctypes_reads_in_bounded_time(tmp_path):
    """A chapter of many "<!DOCTYPE html [" that none closes (320 KB) reads in time linear in its size: only its
    first DOCTYPE can hold an internal subset to leave out."""
    chapter = "<!DOCTYPE html [" * 20_000 + page("<p>In 1450 Gala built the harbour bridge.</p>")
    path = write_epub(tmp_path / "doctypes.epub", chapters={"text/ch1.xhtml": chapter})
    start = time.process_time()
    ext = extract_epub(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs == ["In 1450 Gala built the harbour bridge."]


def test_a_spine_of_many_documents_reads_in_time_linear_in_its_length(tmp_path, caplog):
    """A package document whose spine names 20,000 documents (160 KB zipped; those missing from the archive are
    warned of) reads in bounded time: each is looked up once, not against every one before it."""
    count = 20_000
    manifest = "".join(f'<item id="i{i}" href="t/c{i}.xhtml" media-type="application/xhtml+xml"/>' for i in range(count))
    spine = "".join(f'<itemref idref="i{i}"/>' for i in range(count))
    path = tmp_path / "long.epub"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER.format(opf="content.opf"))
        z.writestr("content.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0">'
                   f"<metadata/><manifest>{manifest}</manifest><spine>{spine}</spine></package>")
        z.writestr("t/c7.xhtml", page("<p>Seventh.</p>"))
    caplog.set_level(logging.ERROR, logger="spanseek.indexer.epub")  # (the 19,999 warnings are not what is timed)
    start = time.process_time()
    ext = extract_epub(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs == ["Seventh."] and ext.paragraph_meta == [{"chapter": 8}] and ext.meta["chapters"] == count


def test_a_chapter_declaring_no_character_encoding_is_named_and_the_rest_of_the_book_is_read(tmp_path, caplog):
    """A chapter whose XML declaration names a codec that is no character encoding of documents ("undefined", which
    raised an error that stopped the whole run; "unicode_escape", which read its escapes as markup) is left out with
    a warning naming it, as an HTML page declaring one is skipped."""
    for codec in ("undefined", "unicode_escape", "base64"):
        chapters = {**CHAPTERS, "text/ch3.xhtml": page(r"<p>\x3cscript\x3e</p>").replace("utf-8", codec)}
        with caplog.at_level(logging.WARNING):
            ext = extract_epub(write_epub(tmp_path / f"{codec}.epub", chapters))
        assert ext.paragraphs[-1] == "1. Rebuilt in 1702." and {m["chapter"] for m in ext.paragraph_meta} == {1, 2}
        assert (f"its part OEBPS/text/ch3.xhtml declares the encoding {codec!r}, which is no character encoding this "
                "reader knows; the rest of it is read") in caplog.text


def test_a_malformed_link_in_the_guide_the_navigation_or_the_manifest_is_a_missing_document(tmp_path, caplog):
    """An href urlsplit refuses ("//[x/toc.xhtml": ValueError, which stopped the whole run) leads to no document of
    the archive: the book is read without it."""
    guide = '<guide><reference type="toc" href="//[x/toc.xhtml"/></guide>'
    nav = NAV.replace('href="text/ch1.xhtml"', 'href="//[x#c1"')
    chapters = {**CHAPTERS, "//[x?.xhtml": page("<p>Never read.</p>")}
    with caplog.at_level(logging.WARNING):
        ext = extract_epub(write_epub(tmp_path / "links.epub", chapters, guide=guide, nav=nav))
    assert ext.paragraphs[:2] == ["The bridge", "In 1450 Gala built the harbour bridge."]
    assert "Never read." not in ext.paragraphs and "it has no part //[x; the rest of it is read" in caplog.text


def test_many_landmarks_and_contents_entries_read_in_time_linear_in_their_count(tmp_path):
    """A navigation document of 8,000 contents entries and 8,000 landmarks naming a contents page (7 KB zipped) reads
    in bounded time: each landmark is looked up among the contents' places, not compared with every entry."""
    nav = NAV.replace("</a></li></ol></nav><nav", "</a></li>" + '<li><a href="text/x.xhtml#a">x</a></li>' * 8000
                      + "</ol></nav><nav").replace("Cover</a></li>", "Cover</a></li>" + '<li><a epub:type="toc" '
                                                   'href="text/y.xhtml#t">t</a></li>' * 8000)
    path = write_epub(tmp_path / "navs.epub", nav=nav)
    start = time.process_time()
    ext = extract_epub(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs[0] == "The bridge" and ext.meta["chapters"] == 2


def test_links_in_nested_navigation_lists_are_taken_once(tmp_path):
    """A navigation document of 20,000 links inside 200 nested <nav> lists (5 KB zipped) reads in bounded time and
    memory: each link is taken once, with its innermost list's type (it was taken once for each list around it)."""
    nav = NAV.replace('<nav epub:type="toc">', '<nav epub:type="toc">' * 200 + '<a href="text/x.xhtml#a">x</a>' * 20_000
                      + "</nav>" * 199)
    path = write_epub(tmp_path / "nested.epub", nav=nav)
    start = time.process_time()
    ext = extract_epub(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs[0] == "The bridge" and ext.meta["chapters"] == 2


def test_text_the_book_s_own_style_sheets_hide_is_left_out(tmp_path):
    """Text hidden by the book's style sheets (``display: none`` on a class in a linked sheet: a quiz's answers, an
    id's ``visibility: hidden``) was read, where an inline style's was left out. A simple selector's rule (an element,
    a class, an id, or one of each) in a linked sheet or a <style> element hides as an inline style does; a later
    rule that shows it, or a more specific one, wins; rules for print (an at-rule's) and selectors that need more
    than the element (``div p``, ``p:first-child``) are passed over."""
    head = ('<title>x</title><link rel="stylesheet" type="text/css" href="../css/book.css"/>'
            '<link href="../css/missing.css" rel="stylesheet"/><style>.later { display: block }</style>')
    chapter = page('<h1>The bridge</h1><p>In 1450 Gala built the bridge.</p><p class="answer">The answer is 42.</p>'
                   '<div id="solutions"><p>Solution text.</p></div><aside><p>Printed only on screen.</p></aside>'
                   '<p class="note later">A note shown again.</p><p class="answer shown">An answer shown.</p>'
                   '<p class="first">A first paragraph.</p><p style="visibility: hidden">Inline hidden.</p>'
                   "<p>The bridge still stands.</p>", head)
    css = ("/* the book's style */ @import url(fonts.css); .answer { color: red; display: none !important }\n"
           "#solutions{visibility:hidden} @media print { aside { display:none } .x { color: red } }\n"
           "p.shown { display: block } .note { display: none } div p, p:first-child { display: none }")
    path = write_epub(tmp_path / "quiz.epub", {"text/ch1.xhtml": chapter}, nav=None,
                      parts={"OEBPS/css/book.css": css})
    assert extract_epub(path).paragraphs == [
        "The bridge", "In 1450 Gala built the bridge.", "Printed only on screen.", "A note shown again.",
        "An answer shown.", "A first paragraph.", "The bridge still stands."]


def test_an_element_visibility_visible_shows_inside_one_visibility_hidden_hides(tmp_path):
    """Visibility is inherited and a browser shows an element that says ``visibility: visible`` inside one that says
    ``visibility: hidden``: its text was left out with the hidden one's. Inside ``display: none`` it stays hidden, and
    the rest of the hidden element stays out."""
    chapter = page('<h1>The ferry</h1><p>The ferry leaves the harbour at noon every day of the year.</p>'
                   '<div style="visibility: hidden"><p style="visibility: visible">Tickets are sold at the quay.</p>'
                   '<p>A placeholder.</p><div style="display: none"><p style="visibility: visible">Gone.</p></div>'
                   '<p><span style="visibility: visible">Dogs travel <b>free</b></span> unseen.</p></div>'
                   "<p>The crossing takes an hour.</p>")
    path = write_epub(tmp_path / "ferry.epub", {"text/ch1.xhtml": chapter}, nav=None)
    assert extract_epub(path).paragraphs == [
        "The ferry", "The ferry leaves the harbour at noon every day of the year.", "Tickets are sold at the quay.",
        "Dogs travel free", "The crossing takes an hour."]


def test_a_large_style_sheet_and_many_classes_read_in_bounded_time(tmp_path):
    """A sheet of 20,000 rules and a document of 2,500 elements of 50 classes each read in time linear in their
    size; a head of 10,000 "<link"s without their ends is not searched to its end from each."""
    css = "".join(f".c{i} {{ display: none }} .d{i} p {{ display: none }}\n" for i in range(10_000))
    classes = " ".join(f"k{i}" for i in range(50))
    body = "".join(f'<p class="{classes} c{i}">Hidden {i}.</p>' * (i % 4 == 0) + f'<p class="{classes}">Shown {i}.</p>'
                   for i in range(2000))
    head = '<link rel="stylesheet" href="../big.css"/>' + "<link " * 10_000 + ">"
    path = write_epub(tmp_path / "big.epub", {"text/ch1.xhtml": page(body, head)}, nav=None,
                      parts={"OEBPS/big.css": css})
    start = time.process_time()
    paragraphs = extract_epub(path).paragraphs
    assert time.process_time() - start < 1.0  # (some 0.25 s)
    assert paragraphs == [f"Shown {i}." for i in range(2000)]


def test_a_style_sheet_whose_rules_are_inside_an_at_rule_reads_in_time_linear_in_its_size(tmp_path):
    """A sheet whose rules sit in one ``@media`` block (720 KB) took seconds to read, each rule's selector sought from
    the block's start; the rules after the block still hide, those inside it are passed over."""
    css = "@media screen {" + ".shown { display: none }" * 30_000 + "} .answer { display: none }"
    chapter = page('<p class="shown">The bridge was built in 1450.</p><p class="answer">Hidden.</p>',
                   '<link rel="stylesheet" href="../big.css"/>')
    path = write_epub(tmp_path / "media.epub", {"text/ch1.xhtml": chapter}, nav=None, parts={"OEBPS/big.css": css})
    start = time.process_time()
    paragraphs = extract_epub(path).paragraphs
    assert time.process_time() - start < 1.0  # (some 0.05 s; it was 2 s and more)
    assert paragraphs == ["The bridge was built in 1450."]


def test_a_note_s_mark_that_links_to_the_endnotes_document_is_not_read_into_its_word(tmp_path):
    """An e-book's note marks link to its endnotes in another document ("notes.xhtml#n1"): only a link within the
    document was taken for a note's mark, and these read glued to their words, "froze1", "again2" (a search for
    "froze" missed the passage). A mark in <sup>, or a link the book marks as a note's, is passed over; the note's
    own number, linking back, is read."""
    chapters = {"text/ch1.xhtml": page(
        '<p>The harbour froze<sup><a epub:type="noteref" href="notes.xhtml#n1" xmlns:epub="http://www.idpf.org/2007/ops">'
        '1</a></sup> in 1901, and again<a href="notes.xhtml#n2" role="doc-noteref">[2]</a> in 1902, as the '
        '<a href="notes.xhtml#log">log</a> says.</p>'),
        "text/notes.xhtml": page('<aside id="n1"><p><a href="ch1.xhtml#r1">1</a>. The ice was a metre thick.</p></aside>')}
    assert extract_epub(write_epub(tmp_path / "notes.epub", chapters, nav=None)).paragraphs == [
        "The harbour froze in 1901, and again in 1902, as the log says.", "1. The ice was a metre thick."]
