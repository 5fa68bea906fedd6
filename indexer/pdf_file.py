"""A PDF file as pdfminer.six reads it, for ``indexer.documents`` (``extract_pdf``), which lays its pages out: the
document hardened against hostile files (``pdf_document``: objects that are references to themselves, cross-reference
sections that loop, decompression bombs; a file cut short or damaged read from the objects it holds whole, its pages
that can be read read, ``pdf_pages``, and its damage named, ``damage``), the page aggregator that reads a glyph its font's Unicode map leaves out
(``self_coded``, ``glyph_character``), sets a subscript or superscript on its line and sets apart the glyphs turned a
quarter or more from upright (``aggregator``, ``upright_turn``, ``turned_text``), and why a file could not be read
(``pdf_problem``).

    spanseek corpus from-files report.pdf --out corpus.jsonl
"""

from __future__ import annotations

import functools
import logging
import math
import unicodedata
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from spanseek.indexer import pdf_forms
from spanseek.indexer.extracted import (
    MAX_INFLATED,
    MAX_INFLATED_STREAM,
    OLE,
    Unreadable,
    decompression_bomb,
    error_text,
)
from spanseek.indexer.pdf_blocks import script_shift

__all__ = ["SELF_CODED_GLYPHS", "aggregator", "damage", "damaged_object", "glyph_character", "pdf_document",
           "pdf_pages", "pdf_problem", "self_coded", "turned_text", "upright_turn"]

log = logging.getLogger(__name__)

# a font whose map to Unicode gives at least this many glyphs their own numbers as code points numbers its glyphs so
# (``self_coded``): fewer are no evidence
SELF_CODED_GLYPHS = 3


def aggregator(base: type) -> type:
    """pdfminer's PDFPageAggregator (``base``), reading a glyph that its font's Unicode map leaves out as its
    character where the font tells it (``glyph_character``) rather than as "(cid:64257)", which is left out, and
    setting a subscript or superscript on the line of the glyph before it (``pdf_blocks.script_shift``) before the
    page's layout is analysed."""

    class Aggregator(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.self_coded: dict[int, bool] = {}  # each font's (by id): whether it numbers glyphs by code point
            # the page's glyphs set turned a quarter or more from upright (a margin's vertical note, a label up a
            # table's column, or every glyph of a page turned as a whole, upside down too) and how many are
            # upright: its layout analysis reads turned glyphs letter by letter, out of order, into the text
            self.turned: list[Any] = []
            self.upright: list[Any] = []  # where it has turned glyphs: its upright ones

        def begin_page(self, page: Any, ctm: Any) -> None:
            super().begin_page(page, ctm)
            self.page_ctm = ctm  # (the device's ctm is the content's, which "cm" changes)

        def end_page(self, page: Any) -> None:
            pdf_forms.draw_fields(self, page, self.page_ctm)  # a filled form's values, where a viewer shows them
            self.cur_item, self.turned, self.upright = _set_turned_apart(self.cur_item)
            _set_scripts_on_their_lines(self.cur_item)  # before the page's layout is analysed
            super().end_page(page)

        def render_char(self, matrix: Any, font: Any, fontsize: float, scaling: float, rise: float, cid: int,
                        ncs: Any, graphicstate: Any) -> float:
            # a glyph keeps no colour space or graphic state: nothing reads them, and pdfminer gives each text-showing
            # operator a copy of its state, which a page setting each glyph apart (one "Tj" a glyph, as many programs
            # write) kept once a glyph: a fifth of the page's memory
            return float(super().render_char(matrix, font, fontsize, scaling, rise, cid, None, None))

        def handle_undefined_char(self, font: Any, cid: int) -> str:
            known = self.self_coded.get(id(font))
            if known is None:
                known = self.self_coded[id(font)] = self_coded(font)
            return (glyph_character(cid) if known else None) or super().handle_undefined_char(font, cid)

    return Aggregator


def _set_turned_apart(page: Any) -> tuple[Any, list[Any], list[Any]]:
    """A page (pdfminer's LTPage, before its layout is analysed) without its turned glyphs, those glyphs, and, where
    it has any, its upright ones (``_upright``), on the page and in its form XObjects (figures: a stamped or imposed
    page's whole content is one, and a stamp up its margin does not turn it). The page is rebuilt only where it has
    turned glyphs."""
    from pdfminer.layout import LTChar, LTFigure, LTPage

    glyphs = [item for item in page if isinstance(item, LTChar)]
    turned = [glyph for glyph in glyphs if not _upright(glyph)]
    if not turned:
        return page, [], []
    kept = LTPage(page.pageid, page.bbox, page.rotate)
    apart = {id(glyph) for glyph in turned}
    for item in page:
        if id(item) not in apart:
            kept.add(item)
    upright, figures = [glyph for glyph in glyphs if id(glyph) not in apart], [item for item in page if isinstance(
        item, LTFigure)]
    while figures:
        figure = figures.pop()
        upright += (item for item in figure if isinstance(item, LTChar) and _upright(item))
        figures += (item for item in figure if isinstance(item, LTFigure))
    return kept, turned, upright


def _upright(glyph: Any) -> bool:
    """Whether a glyph is upright as pdfminer has it and not upside down (a baseline running right to left: a page
    turned half round, which pdfminer's layout reads line by line from the foot up)."""
    return bool(glyph.upright and glyph.matrix[0] > 0)


def _direction(glyph: Any) -> tuple[int, float, float]:
    """A glyph's direction, its baseline's angle in quarters of a turn (0 upright, 1 up the page, 2 upside down, 3
    down), and its place along that direction and across it (the greater, the earlier its line is read)."""
    a, b, _, _, e, f = glyph.matrix
    if not all(map(math.isfinite, (a, b, e, f))):  # (a hostile file's numbers past a float's range)
        return 0, 0.0, 0.0
    norm = math.hypot(a, b) or 1.0
    x, y = a / norm, b / norm
    return round(math.degrees(math.atan2(y, x)) / 90) % 4, e * x + f * y, f * x - e * y


def upright_turn(device: Any, rotate: int) -> int | None:
    """The page rotation (``PDFPage.rotate``, now ``rotate``) that sets the page's text upright where most of its
    glyphs are turned one way, in more lines than its upright glyphs are (a landscape page, or a page rotated in a
    viewer), so that its layout is read as for any page; None where most are upright or none is turned so, or where
    the turned glyphs are in fewer lines (a long stamp up the margin of a page of a few short lines)."""
    turns = [_direction(glyph)[0] for glyph in device.turned]
    turn = max(set(turns), key=turns.count, default=0)
    if not turn or turns.count(turn) <= len(device.upright):
        return None
    turned = [glyph for glyph, way in zip(device.turned, turns, strict=True) if way == turn]
    if _line_count(turned, turn) <= _line_count(device.upright, 0):
        return None
    return (rotate + 90 * turn) % 360


def _line_count(glyphs: list[Any], turn: int) -> int:
    """How many lines glyphs set one way (``turn``, ``_direction``) are in: places across their baselines more than
    0.3 of a glyph's height apart."""
    count, line = 0, None
    for across, height in sorted((_direction(glyph)[2], _across(glyph, turn)) for glyph in glyphs):
        if line is None or across - line > 0.3 * height:
            count, line = count + 1, across
    return count


def turned_text(glyphs: list[Any]) -> list[str]:
    """The text of a page's turned glyphs (``Aggregator.turned``), a paragraph for each run of lines set in one
    direction one after another (lines at most 2 line heights apart): each line's glyphs along their baseline,
    a space where they stand apart, and its lines in reading order."""
    placed = sorted(((*_direction(glyph), glyph) for glyph in glyphs), key=lambda p: (p[0], -p[2], p[1]))
    lines: list[list[tuple[int, float, float, Any]]] = []
    for item in placed:
        turn, _, across, glyph = item
        height = _across(glyph, turn)
        if lines and lines[-1][0][0] == turn and abs(lines[-1][0][2] - across) <= 0.3 * height:
            lines[-1].append(item)
        else:
            lines.append([item])
    paragraphs: list[str] = []
    before: tuple[int, float, float] | None = None  # the line before's direction, place across and height
    for line in lines:
        line.sort(key=lambda p: p[1])
        turn, across, height = line[0][0], line[0][2], _across(line[0][3], line[0][0])
        text, end = "", None
        for _, along, _, glyph in line:
            gap = end is not None and along - end > 0.25 * height
            text += (" " if gap and not text.endswith(" ") else "") + glyph.get_text()
            end = along + glyph.adv * math.hypot(*glyph.matrix[:2])
        text = " ".join(text.split())
        if text and before is not None and before[0] == turn and before[1] - across <= 2 * before[2] and paragraphs:
            paragraphs[-1] += " " + text
        elif text:
            paragraphs.append(text)
        before = (turn, across, height)
    return paragraphs


def _across(glyph: Any, turn: int) -> float:
    """A turned glyph's height: its box's extent across its baseline."""
    return (glyph.x1 - glyph.x0) if turn % 2 else (glyph.y1 - glyph.y0)


def _set_scripts_on_their_lines(container: Any) -> None:
    """Set each subscript or superscript glyph of a page (or of a figure on it) on the line of the glyph set before it
    (``pdf_blocks.script_shift``), in the order the glyphs were set, so a script's next glyphs follow it."""
    from pdfminer.layout import LTChar, LTFigure

    previous = None
    for item in container:
        if isinstance(item, LTFigure):
            _set_scripts_on_their_lines(item)
        elif isinstance(item, LTChar) and isinstance(previous, LTChar) and (
                shift := script_shift(previous, item)):
            item.set_bbox((item.x0, item.y0 + shift, item.x1, item.y1 + shift))
            item.script_shift = shift
        previous = item


def self_coded(font: Any) -> bool:
    """Whether a font numbers its glyphs by their characters' code points: a two-byte (CID) font whose map to Unicode
    (ToUnicode) gives each of the glyphs it maps, ``SELF_CODED_GLYPHS`` at least, its own number as code point (or
    that character's letters: 64257, "ﬁ", as "fi"). Some programs write text so, and leave a glyph or two out of the
    map (a ligature's). A one-byte font's codes and another two-byte font's glyph numbers say nothing of the
    characters: their unmapped glyphs stay unread."""
    from pdfminer.pdffont import PDFCIDFont

    mapped = getattr(getattr(font, "unicode_map", None), "cid2unichr", None)
    if not isinstance(font, PDFCIDFont) or not isinstance(mapped, dict):
        return False
    mapped = {cid: text for cid, text in mapped.items() if text}  # (a surrogate's code maps to nothing)
    return len(mapped) >= SELF_CODED_GLYPHS and all(
        0 <= cid <= 0x10FFFF and text in (chr(cid), unicodedata.normalize("NFKC", chr(cid)))
        for cid, text in mapped.items())


def glyph_character(code: int) -> str | None:
    """The character of code point ``code`` where it is one a text shows (no control, format, private-use,
    surrogate or unassigned code point); None otherwise."""
    if not 0 <= code <= 0x10FFFF:
        return None
    character = chr(code)
    return None if unicodedata.category(character).startswith("C") else character


def _inflated_size(data: bytes, limit: int) -> int:
    """The bytes zlib ``data`` expands to, counted in 1 MiB pieces (none kept), up to just past ``limit``; a damaged
    stream counts what expands before the damage (what pdfminer reads of it)."""
    d, size, pending, i = zlib.decompressobj(), 0, b"", 0
    try:
        while size <= limit and not d.eof:
            if not pending:
                if i >= len(data):
                    break
                pending, i = data[i:i + (1 << 16)], i + (1 << 16)
            size += len(d.decompress(pending, 1 << 20))
            pending = d.unconsumed_tail
    except zlib.error:
        pass
    return size


# what ends the reading of a PDF where an object that cannot be read is otherwise passed over as damaged: memory
# run out, or a decompression bomb (``Unreadable``: met again for each object in it, at a quarter of a second each, a
# page tree of 20 pages in one took 8 s, and was named damaged)
_FATAL = (MemoryError, Unreadable)


@functools.cache
def pdf_document() -> type:
    """pdfminer's PDFDocument, hardened against hostile files. An object that is a reference to itself (``6 0 obj 6
    0 R``, or a chain of references back to where it starts) is a PDFSyntaxError: pdfminer follows references until
    it finds an object that is none (``resolve1``), so such a file held its reader forever; an object that is a
    reference is given as the object it leads to. Cross-reference sections are read in a loop where pdfminer
    recurses from one to the next (its ``/Prev``, one for each incremental save: a file saved 500 times went past
    Python's recursion limit); where one leads back to one read already (to itself, or two that lead to each other)
    the sections up to the loop are the document's, and ``xref_loop`` says where it is. A stream is measured before
    pdfminer expands it (``zlib.decompress``, in memory at once): ``Unreadable`` when it is a decompression bomb
    (``decompression_bomb``: it expands past ``MAX_INFLATE_RATIO`` times), expands past ``MAX_INFLATED_STREAM``, or
    the document's streams past ``MAX_INFLATED``. A file whose cross-reference table cannot be read (cut short,
    damaged) is read from the objects it holds whole (``_recovered_xref``; its catalog found among them where no
    trailer names it), as a viewer reads it, and ``damaged`` says why."""
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser, PDFSyntaxError
    from pdfminer.pdftypes import LITERALS_FLATE_DECODE, PDFObjRef, PDFStream, dict_value
    from pdfminer.psexceptions import PSEOF

    class Parser(PDFParser):
        """pdfminer's parser of a PDF, each stream it reads measured by its ``Document`` (``measure``): pdfminer's scan
        of a file whose cross-reference table cannot be read (``_recovered_xref``) expands the object streams it finds
        as it finds them, not through ``getobj``: a file cut short with a decompression bomb among them was expanded
        whole (a 300 KB file took 947 MiB)."""

        def do_keyword(self, pos: int, token: Any) -> None:
            super().do_keyword(pos, token)
            if token is self.KEYWORD_STREAM and self.curstack and isinstance(self.curstack[-1][1], PDFStream):
                self.doc.measure(self.curstack[-1][1])

    class Document(PDFDocument):
        inflated = 0  # what the streams expanded so far expand to
        xref_loop: str | None = None  # how the cross-reference sections loop, where they do
        damaged: str | None = None  # how the file is damaged (``_cut_short``), where it is read from the objects it
        # holds whole
        passed_over = 0  # the nodes of its page tree that could not be read (``pdf_pages``)

        @classmethod
        def of_file(cls, fp: Any) -> Any:
            """The document of the PDF open as binary file ``fp``, read by its ``Parser``."""
            return cls(Parser(fp))

        def __init__(self, parser: Any) -> None:
            self.broken: list[int] = []  # the compressed streams that cannot be expanded whole (damaged), as read
            try:
                super().__init__(parser)
            except (PSEOF, PDFSyntaxError) as e:
                if self.catalog or (xref := _recovered_xref(parser)) is None:
                    raise
                self.xrefs = [xref]
                if "Root" not in xref.trailer:  # no trailer names the catalog (the root of the page tree): found
                    catalogs = (objid for objid in xref.get_objids() if self._catalog(objid))
                    if (root := next(catalogs, None)) is None:
                        raise
                    xref.trailer = {"Root": PDFObjRef(self, root)}
                self.damaged = _cut_short(parser.fp) or "the table, or the pointer to it at the file's end, is damaged"
                log.debug("pdfminer.six could not read the cross-reference table: %s", error_text(e))
                self.catalog = dict_value(xref.trailer["Root"])
                self.info = [dict_value(xref.trailer["Info"])] if "Info" in xref.trailer else []

        def _catalog(self, objid: int) -> bool:
            """Whether object ``objid`` is a catalog; False where it cannot be read."""
            from pdfminer.pdfdocument import LITERAL_CATALOG

            try:
                found = self.getobj(objid)
            except Exception as e:  # (pdfminer raises many types on a damaged object: it is passed over)
                if isinstance(e, _FATAL):
                    raise
                return False
            return isinstance(found, dict) and found.get("Type") is LITERAL_CATALOG

        def read_xref_from(self, parser: Any, start: int, xrefs: list[Any]) -> None:
            pending: list[int] | None = vars(self).get("xref_pending")
            if pending is not None:  # pdfminer's call for the section's /XRefStm or /Prev: read in the loop below
                pending.append(start)
                return
            read: list[int] = vars(self).setdefault("xref_starts", [])
            sections = [start]  # the sections to read, the next last (pdfminer's order: a section's /XRefStm and
            while sections:  # the sections it leads to, then its /Prev and those)
                start = sections.pop()
                if start in read:  # the sections read so far are the document's
                    back = "itself" if start == read[-1] else f"the one at byte {start}"
                    self.xref_loop = f"the cross-reference section at byte {read[-1]} leads back (/Prev) to {back}"
                    continue
                read.append(start)
                self.xref_pending = []
                try:
                    super().read_xref_from(parser, start, xrefs)
                    sections += reversed(self.xref_pending)
                finally:
                    del self.xref_pending

        def getobj(self, objid: int) -> object:
            obj, seen = super().getobj(objid), [objid]
            while isinstance(obj, PDFObjRef):
                if obj.objid in seen:
                    through = f" (through object {', '.join(map(str, seen[1:]))})" if seen[1:] else ""
                    raise damaged_object()(f"object {obj.objid} is a reference to itself{through}")
                seen.append(obj.objid)
                obj = super().getobj(obj.objid)
            if isinstance(obj, PDFStream):
                self.measure(obj)
            return obj

        def measure(self, stream: Any) -> None:
            """``stream`` measured when pdfminer expands it (``measured``), once."""
            if "decode" not in vars(stream):
                setattr(stream, "decode", functools.partial(self.measured, stream, stream.decode))  # noqa: B010

        def measured(self, stream: Any, decode: Any) -> None:
            data = stream.rawdata
            if stream.decipher:
                data = stream.decipher(stream.objid, stream.genno, data, stream.attrs)
            for kind, _ in stream.get_filters():  # its FlateDecode filters first (a bomb may be one inside another)
                if kind not in LITERALS_FLATE_DECODE:
                    break
                size = _inflated_size(data, MAX_INFLATED_STREAM)
                self.inflated += size
                why = decompression_bomb(len(data), size) or (
                    f"expands past {MAX_INFLATED_STREAM >> 20} MiB" if size > MAX_INFLATED_STREAM else
                    f"expands past {MAX_INFLATED >> 20} MiB with the others" if self.inflated > MAX_INFLATED else None)
                if why is not None:
                    which = f"object {stream.objid}" if stream.objid is not None else "one found reading the file through"
                    raise Unreadable(f"a decompression bomb: its compressed stream ({which}) {why}; not read")
                try:
                    data = zlib.decompressobj().decompress(data, MAX_INFLATED_STREAM)
                except zlib.error as e:  # damaged: pdfminer reads what it can of it
                    if "incorrect data check" not in str(e):  # (but a wrong checksum after the whole data)
                        self.broken.append(stream.objid)
                    break
            decode()

    return Document


@functools.cache
def damaged_object() -> type:
    """The error of an object of a PDF that ``pdf_document`` refuses (a reference to itself): a PDFSyntaxError, as
    pdfminer's own errors of a damaged file are, whose message says what is wrong in the project's words
    (``pdf_problem`` gives it)."""
    from pdfminer.pdfparser import PDFSyntaxError

    class DamagedObject(PDFSyntaxError):
        pass

    return DamagedObject


def _recovered_xref(parser: Any) -> Any:
    """The objects of a PDF whose cross-reference table cannot be read (a file cut short, whose table and trailer
    were at its end, or a damaged table) found as a viewer finds them, by reading the file through: pdfminer's own
    scan, which stopped at an object the file ends inside, with those before it. None where an object in between
    cannot be parsed, or where the file is encrypted (its key is in the trailer): then it is no PDF to recover."""
    from pdfminer.pdfdocument import PDFNoValidXRef, PDFXRefFallback
    from pdfminer.psexceptions import PSEOF, PSException

    xref = PDFXRefFallback()
    parser.fallback = True
    try:
        xref.load(parser)
    # the file ends inside an object, or inside its trailer (pdfminer's "Unexpected EOF": the file was refused,
    # though it held every page whole): those before it are read
    except (PSEOF, PDFNoValidXRef):
        pass
    except (PSException, ValueError, TypeError, KeyError):  # (pdfminer's scan parses each object it finds)
        return None
    return None if "Encrypt" in xref.trailer else xref


def pdf_pages(document: Any) -> Iterator[Any]:
    """The pages of a PDF's page tree in order, as pdfminer's ``PDFPage.create_pages`` gives them (their inherited
    attributes, their labels; every page object in the file where the catalog has no tree), but where a page or a
    branch of the tree cannot be read (an object missing or damaged) it is passed over: pdfminer's error ended the
    reading of the whole file ("PDFObjectNotFound: 97")."""
    import itertools

    from pdfminer.pdfdocument import PDFNoPageLabels
    from pdfminer.pdfpage import LITERAL_PAGE, LITERAL_PAGES, PDFPage
    from pdfminer.pdftypes import dict_value, list_value

    try:
        labels: Iterator[str | None] = document.get_page_labels()
    except PDFNoPageLabels:
        labels = itertools.repeat(None)
    found, visited = False, set()
    todo = [(document.catalog["Pages"], document.catalog)] if "Pages" in document.catalog else []
    while todo:  # (a stack, not pdfminer's recursion: the tree's kids last to first)
        node, parent = todo.pop()
        try:
            objid = node if isinstance(node, int) else node.objid
            attrs = dict_value(document.getobj(objid) if isinstance(node, int) else node).copy()
        except Exception as e:  # (pdfminer raises many types on a damaged object)
            if isinstance(e, _FATAL):
                raise
            document.passed_over += 1
            continue
        if objid in visited:
            continue
        visited.add(objid)
        attrs.update({k: v for k, v in parent.items() if k in PDFPage.INHERITABLE_ATTRS and k not in attrs})
        kind = attrs.get("Type", attrs.get("type"))
        if kind is LITERAL_PAGES and "Kids" in attrs:
            todo += [(kid, attrs) for kid in reversed(list_value(attrs["Kids"]))]
        elif kind is LITERAL_PAGE:
            found = True
            yield PDFPage(document, objid, attrs, next(labels))
        else:  # (a kid of the tree is a page or a branch: this one's object is damaged)
            document.passed_over += 1
    for objid in [] if found else [objid for xref in document.xrefs for objid in xref.get_objids()]:
        try:  # no page tree: the page objects the file holds
            page = document.getobj(objid)
        except Exception as e:
            if isinstance(e, _FATAL):
                raise
            continue
        if isinstance(page, dict) and page.get("Type") is LITERAL_PAGE:
            yield PDFPage(document, objid, page, next(labels))


def damage(document: Any, read: int, broken: str = "", passed_over: Sequence[str] = ()) -> str | None:
    """How a PDF read as ``document`` (``pdf_document``) is damaged, its ``read`` pages read: its cross-reference
    table missing or damaged (read from the objects it holds whole, ``_recovered_xref``), pages of its page tree
    that could not be read (``pdf_pages``; how many, by the count the tree gives), ``broken``, the pages ("page
    2") whose content is in a compressed stream that cannot be expanded whole, and ``passed_over``, what the reader
    passed over (``pdf_notes.ReaderNotes.described``); None where it is whole."""
    from pdfminer.pdftypes import dict_value, resolve1

    try:
        listed = resolve1(dict_value(document.catalog.get("Pages")).get("Count"))
    except Exception as e:
        if isinstance(e, _FATAL):
            raise
        listed = None
    # (a count the tree gives wrong, as sloppy files do, is no damage where every node of it is read)
    lost = document.passed_over and (listed - read if isinstance(listed, int) and listed > read else None)
    found = [
        (f"its cross-reference table is missing or cannot be read ({document.damaged}), so it is read from the "
         "objects it holds whole") if document.damaged is not None else "",
        (f"{lost} of the {listed} pages its page tree lists cannot be read" if lost else
         "pages of its page tree cannot be read" if document.passed_over else ""),
        f"the content of {broken} cannot be expanded whole (its compressed data is damaged): what could be read of "
        "it is read" if broken else "", *passed_over]
    if document.damaged is None and found[1]:
        found[1] += " (their objects are missing or damaged)"
    return f"damaged: {'; '.join(filter(None, found))}" if any(found) else None


# how a PDF begins (within its first KiB, as viewers allow: a header or stray bytes before it), and how other files a
# PDF may be found renamed from begin
_PDF_HEADER = b"%PDF-"
_OTHER_KINDS = ((b"PK\x03\x04", "a zip archive (a Word, PowerPoint or OpenDocument file renamed?)"),
                (OLE, "an OLE file (an old Word or PowerPoint file renamed?)"), (b"{\\rtf", "an RTF file"),
                (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"II*\x00", "a TIFF image"),
                (b"MM\x00*", "a TIFF image"))


def pdf_problem(e: Exception, path: Path) -> str:
    """Why pdfminer could not read a PDF: it is empty or no PDF (what it begins with), it needs a password, its
    encryption is not supported, or it is damaged."""
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect
    from pdfminer.psexceptions import PSException

    if isinstance(e, PDFPasswordIncorrect):  # raised with no message
        return ("encrypted PDF: it needs a password to open; remove the password (for example `qpdf --decrypt "
                "--password=PASSWORD in.pdf out.pdf`) and ingest the result")
    log.debug("pdfminer.six could not read %s: %s", path, error_text(e))  # (its words, for a maintainer)
    if isinstance(e, PDFEncryptionError):
        return ("encrypted PDF whose encryption the reader does not support (an unknown filter, algorithm or "
                "revision); remove the encryption (`qpdf --decrypt`) first")
    with open(path, "rb") as f:
        head, cut = f.read(1024), _cut_short(f)
    if not head:
        return "an empty file (0 bytes), not a PDF"
    if _PDF_HEADER not in head:
        kind = next((name for start, name in _OTHER_KINDS if head.startswith(start)), None)
        if kind is None and head.lstrip()[:1] == b"<":
            kind = "an HTML or XML file"
        if kind is not None:
            return f"not a PDF but {kind}: a PDF begins with %PDF-"
        shown = head[:16].decode("latin-1").encode("unicode_escape").decode("ascii")
        return f"not a PDF: it begins with \"{shown}\", and a PDF begins with %PDF-"
    if isinstance(e, damaged_object()):
        found = f"it is damaged ({e})"
    elif isinstance(e, PSException):  # (pdfminer's syntax errors, an end of file where an object goes on)
        found = ("no page could be found in it: its cross-reference table and catalog (the root of its pages) are "
                 "missing or damaged")
    else:
        found = "it is damaged where the reader cannot go past"
    return f"not a readable PDF: {found}" + (f"; {cut}" if cut else "")


def _cut_short(f: Any) -> str | None:
    """Why a PDF's cross-reference table (at its end) cannot be read, by how the open file ``f`` ends: cut short
    (without the end-of-file marker a PDF ends with, within its last KiB, as a download or copy stopped part way
    leaves it); None where it ends as a PDF does."""
    size = f.seek(0, 2)
    f.seek(max(0, size - 1024))
    if b"%%EOF" not in f.read():
        return f"the file is cut short: its {size:,} bytes end without the end-of-file marker (%%EOF) a PDF ends with"
    return None
