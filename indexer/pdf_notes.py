"""What pdfminer.six says as it reads a PDF, for ``indexer.documents`` (``extract_pdf``): its warnings kept in the
project's words, with the pages they came on (``reader_notes``, ``ReaderNotes``), for the one warning that names a
damaged file (``pdf_file.damage``), rather than shown in pdfminer's words without the file's name; and how a warning
names pages (``page_list``: "pages 3-41, 57").

    spanseek corpus from-files report.pdf --out corpus.jsonl
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["ReaderNotes", "page_list", "reader_notes"]

# what pdfminer.six's warnings say, in a damage warning's words, by the module that gives them (the last part of its
# logger's name) and, where one module warns of several things, a word of its message; None: no damage to name (a
# stream's data lost in decompressing, which ``damage`` names by its page already; page labels of an unknown style; a
# flag asking readers not to extract text, which a search index, like a screen reader, does not heed)
_NOTED: dict[str, str | None | tuple[tuple[str, str | None], ...]] = {
    "pdfinterp": "instructions in its content that cannot be carried out (damaged, missing or of the wrong kind) are "
                 "passed over",
    # (a font without a box, as many are where no descriptor gives one, is read as well: no damage to name)
    "pdffont": (("fontbbox", None), ("", "a font's glyph widths are damaged: its text is read with default widths")),
    "cmapdb": "part of a font's map to Unicode is damaged: glyphs it leaves out read as nothing",
    "pdfpage": (("extraction", None), ("cropbox", "its crop box (the part of the page a viewer shows) is damaged: the "
                                                  "whole page is read"),
                ("", "its page size is missing or damaged: it is read as US Letter")),
    "pdfdocument": (("label", None), ("", "entries of its cross-reference table cannot be read: their objects are "
                                          "passed over")),
    "pdftypes": None,
}
_NOTED["pdfdevice"] = _NOTED["psparser"] = _NOTED["pdfinterp"]


def page_list(numbers: list[int]) -> str:
    """Pages as a warning names them: "page 3", or "pages 3-41, 57", each run of pages one after another as its
    first and last (a file damaged on every page named each of hundreds of them)."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    shown = ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
    return f"page {shown}" if len(runs) == 1 and runs[0][0] == runs[0][1] else f"pages {shown}"


class ReaderNotes(logging.Handler):
    """pdfminer.six's warnings while a PDF is read (``reader_notes``), kept in the project's words with the pages they
    came on (``page``: the page being read, 1-based; None before the first) rather than shown in pdfminer's, without
    the file's name ("Could not get FontBBox from font descriptor because None cannot be parsed as 4 floats")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.page: int | None = None
        self.found: dict[str, list[int]] = {}  # what was wrong -> the pages it was on (none: the file's structure)

    def emit(self, record: logging.LogRecord) -> None:
        noted = _NOTED.get(record.name.rpartition(".")[2], "damage that the reader passed over")
        if isinstance(noted, tuple):
            message = record.getMessage().casefold()
            noted = next(said for word, said in noted if word in message)
        if noted is not None:
            pages = self.found.setdefault(noted, [])
            pages += [self.page] if self.page is not None and self.page not in pages else []

    def described(self) -> list[str]:
        """What was wrong, on the pages it was on (``page_list``): "on pages 2-5, 9, a font's glyph widths are damaged
        ..., and instructions in its content ... are passed over"."""
        on: dict[tuple[int, ...], list[str]] = {}
        for noted, pages in self.found.items():
            on.setdefault(tuple(pages), []).append(noted)
        return [(f"on {page_list(list(pages))}, " if pages else "") + ", and ".join(said) for pages, said in on.items()]


@contextlib.contextmanager
def reader_notes() -> Iterator[ReaderNotes]:
    """pdfminer.six's warnings while the block runs, kept (``ReaderNotes``) and not passed on to its loggers'
    handlers: a damage warning names the file and says what was wrong in the project's words."""
    logger = logging.getLogger("pdfminer")
    notes, propagate = ReaderNotes(), logger.propagate
    logger.addHandler(notes)
    logger.propagate = False
    try:
        yield notes
    finally:
        logger.removeHandler(notes)
        logger.propagate = propagate
