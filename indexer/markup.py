"""Markdown, HTML and plain text -> paragraphs (with their sections), for ``indexer.ingest`` (which documents the
rules users see).

Markdown is parsed by markdown-it-py (``indexer.markdown_render``: CommonMark and tables) and its tokens read as the
HTML they render to would be, like an HTML page without main-content extraction (``indexer.html_reader``'s
``HTMLText``, ``_read_parts``); an HTML page is reduced to its main content by trafilatura (``indexer.html_main``,
after ``indexer.html_tree`` has made its tree ready), or read the same way when trafilatura finds none. Either way a
table row is one paragraph whose cells are named by the header row (``indexer.html_tables``), a code block one
paragraph of its lines, and each paragraph has its heading path (``Sections``).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import Any

from spanseek.indexer.extracted import (
    Extracted,
    Sections,
)
from spanseek.indexer.front_matter import front_matter
from spanseek.indexer.html_main import MAIN_SHARE, main_content
from spanseek.indexer.html_reader import HTMLText
from spanseek.indexer.html_styles import StyleRules
from spanseek.indexer.markdown_render import markdown_parser, markdown_parts, render_markdown
from spanseek.indexer.pdf_layout import dehyphenate

LINE_END = re.compile(r"\r\n?")  # Windows and old Mac line ends, made "\n" before Markdown and text are read
# codecs Python knows that no web page or e-book is written in (they would turn the page into other text, or stop
# on it with an error of their own)
_NOT_CHARSETS = {"unicode-escape", "raw-unicode-escape", "utf-7", "punycode", "idna", "rot-13", "undefined"}


def text_codec(label: str) -> str:
    """The name of the Python codec of the character encoding an HTML page or an XHTML document declares (``label``:
    a ``<meta charset>``'s, an XML declaration's); LookupError where it names none Python knows, or a codec that is
    no character encoding of documents (``_NOT_CHARSETS``, base64 and the other bytes-to-bytes ones)."""
    codec = codecs.lookup(label)
    if not getattr(codec, "_is_text_encoding", True) or codec.name in _NOT_CHARSETS:
        raise LookupError(f"{label!r} is no character encoding of documents")
    return codec.name


def extract_text(source: str) -> Extracted:
    """Plain text: paragraphs at blank lines, line breaks inside a paragraph read as spaces, a word hyphenated at a
    line's end made whole as a PDF's is (``pdf_layout.dehyphenate``: "infor-\\nmation" reads "information", not
    "infor- mation"); no title."""
    paragraphs = dehyphenate(re.split(r"\n[ \t]*\n", LINE_END.sub("\n", source)))
    return Extracted(None, [" ".join(p.split()) for p in paragraphs if p.strip()])


def extract_html(source: str, where: str = "<html>") -> Extracted:
    """Main-content paragraphs (``main_content``) with their sections, title (<title>, else the first paragraph of
    class "title", as a Google Docs export sets its title, else the first <h1>, else the main content's first heading
    of any level) and
    <meta> tags of an HTML document; every block's paragraphs (``HTMLText``) where trafilatura finds no main content,
    or keeps none of the page's headings (but its title's <h1> and a <form>'s) and at least ``MAIN_SHARE`` of its other
    text: it then dropped the page's structure rather than boilerplate (the headings of a page without <main> or
    <article>, a lone <h2> among them; the lists and tables of sloppy HTML glued into the paragraph left open before them). A page whose text is mostly in elements a
    browser hides (a wrapper <div style="display: none"> around the article, after a header that shows) is one its
    scripts show: its hidden elements are read."""
    main, parser, byline = _page(source, where, hidden=False)
    if not main.texts or _mostly_hidden(parser):
        main, parser, byline = _page(source, where, hidden=True)
    meta = {**byline, **parser.meta}  # the page's own meta tags as written, but ``date`` in the form filters compare
    meta.update({"date": byline["date"]} if "date" in byline else {})
    # without a <title>, a title paragraph or an <h1>, the first heading of the page's text, whatever its level (a
    # page of <h2> sections, as Markdown's first heading is): it was the file's name. Of the text read, not of the
    # page's every block: a heading of its navigation or a sidebar is no title
    first = next((path[0][1] for path in main.paths if path), None)
    return main.extracted(parser.title or parser.title_paragraph or parser.first_h1 or first, meta,
                          title_heading=parser.first_h1)


def _mostly_hidden(parser: HTMLText) -> bool:
    """Whether more of a page's text is in elements a browser hides than shows: its scripts show them."""
    return parser.hidden_text > sum(len(text) - text.count(" ") for text in parser.text.texts)


def html_blocks(source: str, styles: StyleRules | None = None) -> HTMLText:
    """Every block of an HTML document read (``HTMLText``), with no main-content extraction: an e-book's documents
    (``indexer.epub``) hold no site's navigation or footers to drop, so every block of them is the book's text.
    Elements a browser hides (by their attributes, or by the document's style sheets' ``styles``) are left out,
    unless most of the text is in them (as ``extract_html``)."""
    for hidden in (False, True):
        parser = HTMLText(hidden=hidden, styles=styles)
        parser.feed(source)
        parser.close()
        if hidden or not _mostly_hidden(parser):
            break
    return parser


def _page(source: str, where: str, hidden: bool) -> tuple[Sections, HTMLText, dict[str, str]]:
    """An HTML page's paragraphs (``extract_html``), elements a browser hides read too where ``hidden``; the parser
    that read every block (its title and meta tags); and the page's byline."""
    parser = HTMLText(page=True, hidden=hidden)
    parser.feed(source)
    parser.close()
    main, byline = main_content(source, where, hidden)
    full = parser.text
    # the page's sections: its headings but its title's (its first <h1>, which trafilatura takes out of the text as
    # the page's title, or the text of its title): a lone <h2> is a section whose words the page would lose; a
    # form's heading ("Leave a reply") is no section of the page's: trafilatura drops the form as boilerplate
    headings = {text for path in full.paths for _, text in path} - {parser.first_h1, parser.title,
                                                                   parser.title_paragraph} - parser.form_headings
    if main is None or (not any(main.paths) and headings and sum(map(len, main.texts)) >= MAIN_SHARE * (
            sum(map(len, full.texts)) - full.heading_chars)):
        main = full
    return main, parser, byline


def _read_parts(parser: HTMLText, parts: Iterator[list[Any] | str]) -> bool:
    """Reads Markdown's ``markdown_parts`` into ``parser`` as it reads their HTML (markdown-it's renderer's, tag for
    tag, text for text, its line breaks too), but from the tokens: rendering them and parsing the HTML again took
    over half a file's time (Markdown table rows: 2.4 s of 5.4 s for 100 KB). HTML written in the file (its
    ``html_block`` and ``html_inline`` tokens) is fed to ``parser``; False, at once, where such HTML leaves the
    parser inside a construct that goes on past it (a tag not closed, a <script>'s text): the HTML after it would
    read otherwise than the tokens' events, so the file is read from its HTML instead."""
    def tag(tokens: list[Any], i: int) -> None:  # (markdown-it's ``renderToken``)
        token = tokens[i]
        if token.hidden:
            return
        if token.block and token.nesting != -1 and i and tokens[i - 1].hidden:
            parser.handle_data("\n")
        if token.nesting == -1:
            parser.handle_endtag(token.tag)
        else:
            parser.handle_starttag(token.tag, [(name, str(value)) for name, value in token.attrs.items()])
            if token.nesting == 0:  # <hr />, <br />: a start and an end
                parser.handle_endtag(token.tag)
        after = i + 1 < len(tokens) and tokens[i + 1]
        if token.block and not (token.nesting == 1 and after and (
                after.type == "inline" or after.hidden or (after.nesting == -1 and after.tag == token.tag))):
            parser.handle_data("\n")

    def html(text: str) -> bool:
        parser.feed(text)
        return not parser.rawdata and parser.cdata_elem is None

    def read(tokens: list[Any]) -> bool:
        for i, token in enumerate(tokens):
            kind = token.type
            if kind == "inline":
                if not read(token.children or []):
                    return False
            elif kind in ("text", "code_inline"):
                if kind == "code_inline":
                    parser.handle_starttag("code", [])
                parser.handle_data(token.content)
                if kind == "code_inline":
                    parser.handle_endtag("code")
            elif kind == "softbreak":
                parser.handle_data("\n")
            elif kind == "hardbreak":
                parser.handle_starttag("br", [])
                parser.handle_endtag("br")
                parser.handle_data("\n")
            elif kind in ("fence", "code_block"):
                parser.handle_starttag("pre", [])
                parser.handle_starttag("code", [])
                parser.handle_data(token.content)
                parser.handle_endtag("code")
                parser.handle_endtag("pre")
                parser.handle_data("\n")
            elif kind in ("html_block", "html_inline"):
                if not html(token.content):
                    return False
            elif kind == "image":
                parser.handle_starttag("img", [])
            else:
                tag(tokens, i)
        return True

    return all(html(part) if isinstance(part, str) else read(part) for part in parts)


def extract_markdown(source: str, where: str = "<markdown>") -> Extracted:
    """Front matter as metadata; the body parsed (CommonMark + tables) and read as its HTML (``_read_parts``), so the title
    is front matter's ``title`` or the first heading of any level, and paragraphs have their heading path."""
    md = markdown_parser(where)
    meta, title, body, written = front_matter(LINE_END.sub("\n", source), where)
    parser = HTMLText()
    if not _read_parts(parser, markdown_parts(md, body)):  # HTML that reads across its tokens: rendered, read whole
        parser = HTMLText()
        parser.feed(render_markdown(md, body))
    parser.close()
    # the first heading is the title unless front matter gives another (then its words are a section's)
    heading = parser.first_heading if title is None or title == parser.first_heading else None
    extracted = parser.text.extracted(title or parser.first_heading, meta, title_heading=heading)
    extracted.written = written
    return extracted
