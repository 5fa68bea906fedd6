"""EPUB e-books (.epub: EPUB 2 and 3) -> paragraphs with their chapter and section, for ``indexer.ingest``.

    spanseek corpus from-files novel.epub BOOKS/ --out corpus.jsonl

``META-INF/container.xml`` names the book's package document (the OPF), whose spine lists its XHTML documents in
reading order (those marked ``linear="no"``, such as endnotes, in their place too). Each is read as an HTML file's
blocks are (``markup.html_blocks``: headings open sections, a table row is one paragraph named by its header row,
text a browser hides, by its attributes or by the book's own style sheets' simple rules (``html_styles``), and
``<del>`` text left out), every block of it: an e-book's documents hold no site navigation
to drop. The navigation document (EPUB 3's ``nav``; the table of contents and the cover page that EPUB 2's guide or
EPUB 3's landmarks name) is not read as text, unless the table of contents leads to another place in that document
(a book in one document whose contents open it). Each paragraph carries ``chapter``, its document's number in reading
order from 1 (counting the spine's documents but those not read as text), and ``section``, its heading path there
(before any heading of its document, the document's title in the book's table of contents: EPUB 3's navigation
document, else EPUB 2's NCX), so a passage never mixes two chapters. The OPF's Dublin Core metadata gives the document's ``title`` (the main title where EPUB 3 marks one), its
``author`` (the creators in the author role, or in none; a list where there are several) and ``language``; ``meta``
has those and ``chapters``, the count. A book whose text is encrypted (DRM:
``META-INF/encryption.xml`` naming one of the spine's documents, with anything but the font obfuscation of the IDPF
or Adobe) is ``Unreadable`` (one whose fonts or images alone are encrypted is read), as are a damaged archive, a
package document that is missing or not well-formed XML, and another kind of file renamed; a spine document that is
missing or cannot be decoded is left out with a warning naming it, and the rest of the book is read.
"""

from __future__ import annotations

import codecs
import html
import logging
import posixpath
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from spanseek.indexer.extracted import Extracted, Unreadable
from spanseek.indexer.html_styles import StyleRules
from spanseek.indexer.markup import html_blocks, text_codec
from spanseek.indexer.packaged import Package, xml_of

log = logging.getLogger(__name__)

KIND = "EPUB (.epub) file"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"
_OPS = "{http://www.idpf.org/2007/ops}"
# the encryption an EPUB may apply to its fonts without being DRM-protected (font obfuscation: the IDPF's and Adobe's)
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_DOCUMENTS = {"application/xhtml+xml", "text/html"}  # the spine's media types read as text (not SVG, images)
_NOT_TEXT = {"cover", "toc"}  # the guide's and landmarks' types of the documents not read as text
# an XHTML document's declared encoding (its XML declaration's), and a DOCTYPE's internal subset (entity
# declarations, which the HTML reader would end at their first ">" and read the rest of as text), tried at the
# document's first DOCTYPE only: searched for, it took time growing with the square of a document of "<!DOCTYPE x ["s
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")
_DOCTYPE = re.compile(r"<!DOCTYPE", re.IGNORECASE)
_INTERNAL_SUBSET = re.compile(r"<!DOCTYPE[^\[>]*\[[^\]]*\]\s*>", re.IGNORECASE)
# what a document's head says of its style: a linked sheet (<link ...>) or a <style> element's rules, in order; a
# tag's attributes; where its body starts
# (no "<" inside a tag: a tag left open is not searched for its ">" to the end of the head, from each "<link")
_STYLE_SOURCES = re.compile(r"<link\b(?P<link>[^<>]*)>|<(?P<style>style)\b[^<>]*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""([\w:-]+)\s*=\s*(["'])(.*?)\2""", re.DOTALL)
_BODY = re.compile(r"<body\b", re.IGNORECASE)
_STYLE_END = re.compile(r"</style", re.IGNORECASE)


def extract_epub(path: Path) -> Extracted:
    """The spine's documents' paragraphs in reading order, each with its ``chapter`` and ``section``; the title,
    author and language from the OPF."""
    package = Package(path, KIND, "application/epub+zip")
    try:
        opf_name = _package_document(package)
        opf = package.xml(opf_name)
        documents, titles = _spine_documents(package, opf, opf_name)
        _refuse_drm(package, documents)
        paragraphs: list[str] = []
        metas: list[dict[str, Any]] = []
        first_heading = None
        sheets: dict[str, str] = {}  # the book's style sheets read, by archive path (most documents link the same)
        for chapter, name in enumerate(documents, start=1):
            parser = _read_document(package, path, name, sheets)
            if parser is None:
                continue
            first_heading = first_heading or parser.first_heading
            read = parser.text.extracted(None, {})
            paragraphs += read.paragraphs
            # a document without headings: its passages' section is its title in the book's table of contents
            untitled = {"section": titles[name]} if name in titles else {}
            metas += [{"chapter": chapter, **(meta or untitled)}
                      for meta in read.paragraph_meta or [{}] * len(read.paragraphs)]
    finally:
        package.close()
    title, meta = _metadata(opf)
    return Extracted(title or first_heading, paragraphs, {**meta, "chapters": len(documents)}, metas)


def _refuse_drm(package: Package, documents: list[str]) -> None:
    """Unreadable when ``META-INF/encryption.xml`` encrypts one of the spine's ``documents`` (their archive paths)
    with other than font obfuscation: the book's text is DRM-protected, and cannot be read without the key its shop
    keeps. Other parts encrypted (fonts, as some publishers encrypt them, images) are parts the text does not need:
    the book is read (such a book was refused, though its text was plain)."""
    name = "META-INF/encryption.xml"
    if name not in package.names:
        return
    spine = set(documents)
    encrypted = [(part, (method.get("Algorithm", "?") if method is not None else "?"))
                 for data in package.xml(name).iter(f"{_ENC}EncryptedData")
                 if (ref := data.find(f"{_ENC}CipherData/{_ENC}CipherReference")) is not None
                 and (part := posixpath.normpath(unquote(ref.get("URI", "")).lstrip("/"))) in spine
                 and ((method := data.find(f"{_ENC}EncryptionMethod")) is None
                      or method.get("Algorithm") not in _FONT_OBFUSCATION)]
    if encrypted:
        (part, algorithm), more = encrypted[0], len(encrypted) - 1
        others = f" and {more:,} other document{'s' * (more > 1)} of its text" if more else ""
        raise Unreadable(f"an EPUB whose content is encrypted (DRM: {name} encrypts {part}{others} with "
                         f"{algorithm}); its text cannot be read. Get a DRM-free copy of the book and ingest that")


def _package_document(package: Package) -> str:
    """The path of the package document (the OPF) that ``META-INF/container.xml`` names (its first rootfile of the
    OPF's media type); the archive's one .opf file where the container is missing."""
    name = "META-INF/container.xml"
    if name not in package.names:
        opfs = sorted(n for n in package.names if n.lower().endswith(".opf"))
        if len(opfs) == 1:
            return opfs[0]
        raise Unreadable(f"not a readable {KIND}: it has no {name}, which names the book's package document")
    roots = package.xml(name).iter(f"{_CONTAINER}rootfile")
    paths = [r.get("full-path") for r in roots if r.get("media-type", "application/oebps-package+xml")
             == "application/oebps-package+xml" and r.get("full-path")]
    if not paths:
        raise Unreadable(f"not a readable {KIND}: its {name} names no package document (rootfile full-path)")
    return unquote(paths[0])


def _href(base: str, href: str) -> str:
    """A path in the archive from an href relative to the part at ``base`` (its fragment dropped, %-escapes read)."""
    return _place(base, href)[0]


def _place(base: str, href: str) -> tuple[str, str]:
    """(the archive path, the fragment) an href relative to the part at ``base`` leads to: its query and fragment cut
    off by hand, as urlsplit raises ValueError on an href such as "//[x/ch1.xhtml" (no path in the archive either)."""
    path, _, fragment = href.partition("#")
    path = path.partition("?")[0]
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(path))), fragment


def _spine_documents(package: Package, opf: Any, opf_name: str) -> tuple[list[str], dict[str, str]]:
    """The archive paths of the spine's XHTML documents in reading order, but the navigation document and the pages
    the guide or the landmarks name as the cover or the table of contents (unless the table of contents leads to
    another place in one: a book in one document whose contents open it); and the documents' titles in the table of
    contents (EPUB 3's navigation document, else EPUB 2's NCX), each document's first entry's."""
    items = {item.get("id"): item for item in opf.iterfind(f"{_OPF}manifest/{_OPF}item")}
    named = [_place(opf_name, ref.get("href", "")) for ref in opf.iterfind(f"{_OPF}guide/{_OPF}reference")
             if ref.get("type", "").lower() in _NOT_TEXT]  # (document, place in it) of the cover and contents pages
    skipped: set[str] = set()
    contents: list[tuple[str, str, str]] = []  # the table of contents: (document, place in it, title) each entry
    for item in items.values():
        if "nav" in (item.get("properties") or "").split():
            nav = _href(opf_name, item.get("href", ""))
            skipped.add(nav)
            for kind, types, href, text in _nav_links(package, nav):
                if kind == "landmarks" and _NOT_TEXT.intersection(types):
                    named.append(_place(nav, href))
                elif kind == "toc":
                    contents.append((*_place(nav, href), text))
    spine = opf.find(f"{_OPF}spine")
    ncx = items.get(spine.get("toc") if spine is not None else None)
    if not contents and ncx is not None and ncx.get("href"):  # EPUB 2's table of contents
        contents = _ncx_entries(package, _href(opf_name, ncx.get("href")))
    places: dict[str, set[str]] = {}  # each document's places the table of contents leads to
    titles: dict[str, str] = {}
    for name, place, text in contents:
        places.setdefault(name, set()).add(place)
        if text:
            titles.setdefault(name, text)
    skipped |= {name for name, place in named if not places.get(name, set()) - {place}}
    documents: dict[str, None] = {}  # (a dict: each document once, in order, found in constant time)
    for ref in opf.iterfind(f"{_OPF}spine/{_OPF}itemref"):
        item = items.get(ref.get("idref"))
        if item is None or item.get("media-type") not in _DOCUMENTS or not item.get("href"):
            continue
        name = _href(opf_name, item.get("href"))
        if name not in skipped:
            documents[name] = None
    return list(documents), titles


def _navigation_xml(package: Package, name: str) -> Any:
    """The XML of a navigation part (EPUB 3's navigation document, EPUB 2's NCX); None where it is missing or not
    well-formed: the book is read without it."""
    from lxml import etree

    try:
        return xml_of(package.read(name))
    except (Unreadable, etree.XMLSyntaxError):
        return None


def _nav_links(package: Package, nav: str) -> list[tuple[str, list[str], str, str]]:
    """The links of the navigation document's ``<nav>`` lists: (the epub:type of the list it is in, its innermost,
    "toc" or "landmarks"; the link's epub:types; its href, relative to the navigation document; its text). One walk
    of the document: a link in nested lists was taken once for each, which took gigabytes for a few kilobytes."""
    from lxml import etree

    root = _navigation_xml(package, nav)
    links: list[tuple[str, list[str], str, str]] = []
    kinds: list[list[str]] = [[]]  # the epub:types of the <nav> lists around the element walked, innermost last
    for event, element in etree.iterwalk(root, events=("start", "end")) if root is not None else ():
        name = etree.QName(element).localname if isinstance(element.tag, str) else ""
        if name == "nav" and event == "start":
            kinds.append((element.get(f"{_OPS}type") or "").split())
        elif name == "nav":
            kinds.pop()
        elif name == "a" and event == "start":
            links += [(kind, (element.get(f"{_OPS}type") or "").split(), element.get("href", ""), _text(element))
                      for kind in kinds[-1]]
    return links


def _ncx_entries(package: Package, ncx: str) -> list[tuple[str, str, str]]:
    """The entries of an EPUB 2 NCX, its navPoints: (the document, the place in it, the label)."""
    root = _navigation_xml(package, ncx)
    return [(*_place(ncx, content.get("src", "")), _text(label) if label is not None else "")
            for point in (root.iter("{*}navPoint") if root is not None else ())
            if (content := point.find("{*}content")) is not None
            for label in [point.find("{*}navLabel/{*}text")]]


def _read_document(package: Package, path: Path, name: str, sheets: dict[str, str]) -> Any:
    """A spine document read as HTML (``html_blocks``), what its style sheets hide left out (``_style_rules``;
    ``sheets``, those read before); None, with a warning naming it, where it is missing, damaged or not in the
    encoding it declares."""
    try:
        data = package.read(name)
    except Unreadable as e:
        log.warning("%s: %s; the rest of it is read", path, str(e).split(": ", 1)[-1])
        return None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        declared = _XML_ENCODING.match(data.lstrip(codecs.BOM_UTF8))
        encoding = declared.group(1).decode("ascii") if declared else "utf-8"
    try:
        codec = text_codec(encoding)
    except LookupError:
        log.warning("%s: its part %s declares the encoding %r, which is no character encoding this reader knows; the "
                    "rest of it is read", path, name, encoding)
        return None
    try:
        text = data.decode("utf-8-sig" if codec == "utf-8" else codec)
    except UnicodeDecodeError as e:
        log.warning("%s: its part %s is not valid %s (byte 0x%02x at offset %d); the rest of it is read", path, name,
                    encoding, data[e.start], e.start)
        return None
    text = _without_internal_subset(text)
    return html_blocks(text, _style_rules(package, name, text, sheets))


def _style_rules(package: Package, name: str, text: str, sheets: dict[str, str]) -> StyleRules:
    """The rules that hide elements (``html_styles``) of a document's style sheets: those its head links (``<link
    rel="stylesheet">``, read from the book; one missing or not UTF-8 is passed over) and its ``<style>`` elements,
    in their order; ``sheets``, the book's sheets read so far, by archive path."""
    rules = StyleRules()
    head = text[:body.start()] if (body := _BODY.search(text)) else text
    for tag in _STYLE_SOURCES.finditer(head):
        if tag.group("style") is not None:  # its rules run to its end tag (to the head's end where it has none)
            end = _STYLE_END.search(head, tag.end())
            rules.add(head[tag.end():end.start() if end else len(head)])
            if end is None:
                break
            continue
        attrs = {key.lower(): value for key, _, value in _ATTRIBUTE.findall(tag.group("link"))}
        if "stylesheet" not in attrs.get("rel", "").lower().split() or not attrs.get("href"):
            continue
        sheet = _href(name, html.unescape(attrs["href"]))
        if sheet not in sheets:
            try:
                sheets[sheet] = package.read(sheet).decode("utf-8-sig", "replace")
            except Unreadable:  # (a sheet the book lacks: a browser shows the text)
                sheets[sheet] = ""
        rules.add(sheets[sheet])
    return rules


def _without_internal_subset(text: str) -> str:
    """An XHTML document without its DOCTYPE's internal subset (``_INTERNAL_SUBSET``), if it has one."""
    doctype = _DOCTYPE.search(text)
    subset = _INTERNAL_SUBSET.match(text, doctype.start()) if doctype else None
    return text[:subset.start()] + text[subset.end():] if subset else text


def _text(element: Any) -> str:
    return " ".join("".join(element.itertext()).split())


def _metadata(opf: Any) -> tuple[str | None, dict[str, Any]]:
    """The book's title and its ``meta`` (``title``, ``author``, ``language``, those it gives) from the OPF's Dublin
    Core elements: the title EPUB 3 refines as the main one, else the first; the creators whose role (EPUB 2's
    ``opf:role``, EPUB 3's refining ``role``) is author ("aut") or unstated; the first language."""
    metadata = opf.find(f"{_OPF}metadata")
    if metadata is None:
        return None, {}
    refines: dict[tuple[str, str], str] = {}  # (the element's id, the property) -> the value an EPUB 3 meta gives
    for m in metadata.iter(f"{_OPF}meta"):
        if (target := m.get("refines", "")).startswith("#") and m.get("property"):
            refines[(target[1:], m.get("property"))] = _text(m)
    titles = [t for t in metadata.iterfind(f"{_DC}title") if _text(t)]
    main = [t for t in titles if refines.get((t.get("id", ""), "title-type")) == "main"]
    title = _text((main or titles)[0]) if titles else None
    authors = [_text(c) for c in metadata.iterfind(f"{_DC}creator") if _text(c) and (
        c.get(f"{_OPF}role") or refines.get((c.get("id", ""), "role")) or "aut").strip().lower() == "aut"]
    languages = [_text(lang) for lang in metadata.iterfind(f"{_DC}language") if _text(lang)]
    meta: dict[str, Any] = {"title": title} if title else {}
    if authors:
        meta["author"] = authors[0] if len(authors) == 1 else authors
    if languages:
        meta["language"] = languages[0]
    return title, meta
