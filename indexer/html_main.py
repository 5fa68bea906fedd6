"""An HTML page's main content, as trafilatura finds it, -> paragraphs with their sections, for ``indexer.markup``
(``extract_html``): navigation, footers, asides and other boilerplate dropped (``main_content``), the page's tree
made ready first (``html_tree.ready_for_main_content``), trafilatura's output read in the order the page reads
(``_main_runs``), and its byline as metadata (``_byline``).

    spanseek corpus from-files page.html --out corpus.jsonl
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spanseek.indexer.extracted import IngestError, Sections
from spanseek.indexer.html_tables import TableRows
from spanseek.indexer.html_tree import (
    CELL,
    SHOWN_LATER,
    SPANNED,
    code_lines,
    hidden_element,
    one_line,
    ready_for_main_content,
    unread_link,
)


class _Quiet(logging.Filter):
    """Drops the log records trafilatura's loggers emit in a thread inside ``_quiet_trafilatura``: what it says of its
    own extraction ("discarding data: None" at warning level for a page it finds no main content in) is no news to
    the user, whose page is then read whole; its records elsewhere, and ours, pass."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread not in self.threads


_QUIET = _Quiet()


@contextmanager
def _quiet_trafilatura() -> Iterator[None]:
    """While trafilatura extracts a page for us (this thread): its log records dropped (``_Quiet``)."""
    for name in list(logging.root.manager.loggerDict):  # its modules' loggers, imported by now (filters are per logger)
        if name == "trafilatura" or name.startswith("trafilatura."):
            logger = logging.getLogger(name)
            if _QUIET not in logger.filters:
                logger.addFilter(_QUIET)
    _QUIET.threads.add(threading.get_ident())
    try:
        yield
    finally:
        _QUIET.threads.discard(threading.get_ident())


@functools.cache
def _trafilatura_config():
    from trafilatura.settings import use_config

    config = use_config()
    # keep what the main-content extraction finds however short (a page of one paragraph is a page), rather than
    # falling back to the whole page's text
    config.set("DEFAULT", "MIN_EXTRACTED_SIZE", "1")
    config.set("DEFAULT", "MIN_OUTPUT_SIZE", "1")
    return config


# trafilatura's output elements that are one paragraph each (a table row's cells go on one line)
_MAIN_BLOCKS = {"p", "head", "item", "row", "quote", "code"}
_TEXT_BLOCKS = {"p", "head", "item"}  # trafilatura's blocks of running text
_INLINE = {"code", "quote"}  # inline in running text (`x`, <q>), blocks of their own elsewhere
MAIN_SHARE = 0.85  # trafilatura's main content is read where it drops more than this share of a page's text
_MAIN_HEADING = re.compile(r"h([1-6])")  # a <head>'s rend: the heading it was (a <summary> made a <head> has none)


def _main_runs(body: Any) -> Iterator[tuple[Any, str]]:
    """trafilatura's body as (block, text) in the order the page reads: a block's own text (``_MAIN_BLOCKS``; text
    loose in the body counts as the body's) is cut where a block inside it is (sloppy HTML: a list in an unclosed
    <p>, a <p> in a <blockquote>), so the text after that block comes after it, not before it; a row or code block
    is one, its text read whole; an element that is no block reads in its block's text, with its inline elements'
    text as written around them ("run <code>foo --version</code>." reads "run foo --version."), as does a code or
    quote inline in running text. No recursion: lists nested thousands deep."""
    runs: list[list[str]] = [[body.text or ""]]  # the open blocks' text since the last block inside each
    blocks, texts = [body], 0  # the open blocks, outermost first; how many of them are running text
    stack: list[tuple[Any, Iterator[Any]]] = [(body, iter(body))]
    while stack:
        el, children = stack[-1]
        child = next(children, None)
        if child is None:  # el ends: its text since the block inside it, then its tail in its own block's text
            stack.pop()
            if el is blocks[-1]:
                yield el, "".join(runs.pop())
                blocks.pop()
                texts -= el.tag in _TEXT_BLOCKS
            if stack:
                runs[-1].append(" " + (el.tail or "") if el.tag in CELL else el.tail or "")
            continue
        block = child.tag in _MAIN_BLOCKS and not (child.tag in _INLINE and texts)
        if block and child.tag in ("row", "code"):
            yield blocks[-1], "".join(runs[-1])
            runs[-1] = []
            yield child, ""
            runs[-1].append(child.tail or "")
            continue
        if block:
            yield blocks[-1], "".join(runs[-1])
            runs[-1] = []
            runs.append([])
            blocks.append(child)
            texts += child.tag in _TEXT_BLOCKS
        # a table's cells trafilatura leaves loose in a block (a table in a list item): spaced, not glued together
        runs[-1].append(" " + (child.text or "") if child.tag in CELL else child.text or "")
        stack.append((child, iter(child)))


def _byline(found: Any) -> dict[str, str]:
    """The author and date trafilatura finds for a page (its byline, ``<meta name="author">``,
    ``article:published_time``, ``<time datetime>``, JSON-LD), as metadata: ``author`` as the page names them (several
    "; " apart), ``date`` an ISO-8601 date (2026-05-04), as filters compare dates; keys it does not find are absent."""
    return {key: value for key in ("author", "date") if isinstance(value := getattr(found, key, None), str) and value}


def main_content(source: str, where: str, hidden: bool = False) -> tuple[Sections | None, dict[str, str]]:
    """The paragraphs of an HTML page's main content (trafilatura: navigation, footers, asides and other
    boilerplate dropped; elements a browser hides too, unless ``hidden``), with sections from its headings, table
    rows named by their header row (trafilatura marks the cells of a table's first row with <th> cells
    ``role="head"``) and code blocks' lines, None when it finds none; and its author and date (``_byline``)."""
    try:
        import trafilatura
    except ImportError:
        raise IngestError(f"{where}: reading HTML needs trafilatura (pip install 'spanseek[index]')") from None
    from lxml import etree, html

    try:  # parsed here to lift libxml2's depth limit: a page nested past 255 elements lost everything below it
        tree = html.document_fromstring(source.encode("utf-8"), parser=html.HTMLParser(
            huge_tree=True, encoding="utf-8", remove_comments=True, remove_pis=True))
    except (etree.ParserError, ValueError):  # no element at all
        return None, {}
    for unread in [el for el in tree.iter() if isinstance(el.tag, str) and (
            el.tag == "del" or (not hidden and hidden_element(el.attrib)))]:
        if unread.tag not in SHOWN_LATER:
            unread.drop_tree()  # (its tail, the text after it, stays)
    for link in [a for a in tree.iter("a") if unread_link(a.attrib, a.text_content(), a.find(".//sup") is not None
                                                            or any(up.tag == "sup" for up in a.iterancestors()))]:
        link.drop_tree()  # (its tail stays)
    ready_for_main_content(tree)
    try:
        with _quiet_trafilatura():
            # with its metadata: the byline it takes out of the text (the author, the date) is kept as such;
            # dates only where the page marks them (meta tags, <time>, the byline), not guessed from its text
            found = trafilatura.bare_extraction(tree, fast=True, favor_recall=True, include_comments=False,
                                                include_tables=True, with_metadata=True, config=_trafilatura_config(),
                                                date_extraction_params={"extensive_search": False,
                                                                        "original_date": True})
    except RecursionError:  # lists nested thousands deep: the page is read whole (``HTMLText`` does not recurse)
        return None, {}
    byline = _byline(found)
    body = getattr(found, "body", None)
    if body is None:
        return None, byline
    for br in body.iter("lb"):  # a line break inside a paragraph reads as a space, inside code as a new line
        br.tail = ("\n" if any(a.tag == "code" for a in br.iterancestors()) else " ") + (br.tail or "")
    out, table, rows = Sections(), None, TableRows()
    for el, own in _main_runs(body):
        if el.tag not in ("row", "code") and not own.strip():
            continue
        if el.tag != "row" or el.getparent() is not table:  # a table's rows end: its unused header row is kept
            for text in rows.end():
                out.add(text)
            table, rows = (el.getparent() if el.tag == "row" else None), TableRows()
        if el.tag == "row":
            texts = [one_line(" ".join(cell.itertext())) for cell in el.findall("cell")]
            heads = [cell.get("role") == "head" for cell in el.findall("cell")]
            cells: list[tuple[str, bool, str]] = []
            for text, head in zip(texts, heads, strict=True):
                spanned = text == SPANNED and cells
                cells.append(("", head, cells[-1][2]) if spanned else (text.replace(SPANNED, ""), head, text))
            for text in rows.row(cells):
                out.add(text)
        elif el.tag == "code":
            out.add(code_lines("".join(el.itertext()).replace(SPANNED, "")))
        else:
            level = _MAIN_HEADING.fullmatch(el.get("rend") or "") if el.tag == "head" else None
            out.add(one_line(own.replace(SPANNED, "")), int(level.group(1)) if level else 0)
    for text in rows.end():
        out.add(text)
    return out if out.texts else None, byline
