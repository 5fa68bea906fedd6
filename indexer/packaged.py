"""Zip packages of XML parts that no Office library opens for us, for ``indexer.epub`` and ``indexer.opendocument``:
the archive opened under the limits every zipped format is read with (``extracted.zip_bomb``), what a file that is
no such package is instead, and a part's XML parsed as python-docx and python-pptx parse theirs (no entity
expanded, nothing fetched, no nesting past libxml2's 256 levels).

    spanseek corpus from-files book.epub minutes.odt DOCS/ --out corpus.jsonl
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from spanseek.indexer.extracted import OLE, PACKAGE_SUFFIXES, Unreadable, error_text, zip_bomb

# what a package's ``mimetype`` says it is
_KINDS = {"application/epub+zip": "an EPUB e-book (.epub)",
          "application/vnd.oasis.opendocument.text": "an OpenDocument text (.odt)",
          "application/vnd.oasis.opendocument.presentation": "an OpenDocument presentation (.odp)",
          "application/vnd.oasis.opendocument.spreadsheet": "an OpenDocument spreadsheet (.ods)"}


def xml_of(data: bytes) -> Any:
    """XML bytes as an lxml element: entities left unexpanded (an entity bomb is text it never becomes), no DTD or
    other file fetched, nesting past 256 levels refused (lxml's limit without ``huge_tree``); XMLSyntaxError for XML
    that is not well-formed."""
    from lxml import etree

    return etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False))


class Package:
    """A zip package of XML parts (an EPUB, an OpenDocument file; with no ``mimetype``, an Office Open XML file such
    as an Excel workbook) opened for reading: ``kind`` names it in every reason a file is skipped ("EPUB (.epub)
    file"). Unreadable, saying what the file is instead, where it is no zip, a decompression bomb, or a package of
    another kind (``mimetype``)."""

    def __init__(self, path: Path, kind: str, mimetype: str | None) -> None:
        self.kind = kind
        if (bomb := zip_bomb(path)) is not None:
            raise Unreadable(bomb)
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, ValueError, EOFError) as e:
            raise Unreadable(_not_a_zip(path, kind, e)) from None
        self.names = set(self.zip.namelist())
        if "mimetype" in self.names:
            declared = self.read("mimetype").decode("ascii", "replace").strip()
            if declared != mimetype:
                what = _KINDS.get(declared) or (f"an OpenDocument file ({declared})" if declared.startswith(
                    "application/vnd.oasis.opendocument") else f"a package of type {declared!r}")
                own = PACKAGE_SUFFIXES.get(declared)  # one from-files reads under its own suffix
                raise Unreadable(f"{what}, not an {kind}" + (f"; rename it to {own}" if own else ""))
        elif mimetype is None and "[Content_Types].xml" not in self.names:
            raise Unreadable(f"not an {kind}: a zip archive with no [Content_Types].xml part, which every Office file "
                             "has")
        elif mimetype is not None and "[Content_Types].xml" in self.names:
            raise Unreadable(f"an Office Open XML file (Word, PowerPoint or Excel), not an {kind}; rename it to its "
                             "own suffix (.docx, .pptx)")

    def read(self, name: str) -> bytes:
        """A part's bytes; Unreadable naming it where the archive's copy is damaged (a bad CRC, bad data)."""
        try:
            return self.zip.read(name)
        except KeyError:
            raise Unreadable(f"not a readable {self.kind}: it has no part {name}") from None
        except Exception as e:  # the zip reader raises many types on a damaged member (BadZipFile, zlib.error, ...)
            raise Unreadable(f"not a readable {self.kind}: its part {name} is damaged ({error_text(e)})") from None

    def xml(self, name: str) -> Any:
        """A part's XML (``xml_of``); Unreadable naming the part and what is wrong with it."""
        from lxml import etree

        try:
            return xml_of(self.read(name))
        except etree.XMLSyntaxError as e:
            raise Unreadable(f"not a readable {self.kind}: its part {name} is not well-formed XML ({e.msg})") from None

    def close(self) -> None:
        self.zip.close()


def _not_a_zip(path: Path, kind: str, e: Exception) -> str:
    """Why a file meant to be a zip package (``kind``) cannot be opened as one, by its first bytes."""
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        return f"an empty file (0 bytes), not an {kind}"
    if head.startswith(OLE):
        return f"not a readable {kind} (an OLE file: an old Office file or a password-protected one renamed)"
    if head.startswith(b"%PDF"):
        return f"a PDF file, not an {kind}; rename it to .pdf"
    if head.startswith(b"PK"):
        return f"not a readable {kind}: its zip archive is truncated or damaged ({error_text(e)})"
    return f"not an {kind}: one is a zip archive, and this is none"
