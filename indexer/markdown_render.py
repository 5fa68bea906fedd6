"""Markdown -> markdown-it's tokens (or HTML) for ``indexer.markup`` (which reads them as HTML): markdown-it-py
(CommonMark, tables and ~~strikethrough~~, footnotes: ``_footnote_definition``; TeX math kept as written:
``_math``; GitHub's alerts: ``_alerts``; MkDocs' admonitions: ``_admonition``; GitHub's task lists: ``_task_marks``), made to read blocks nested past its limit (``markdown_parts``, ``render_markdown``), to scan
link labels in linear time (``_link_label``) and to bound the empty cells a file's tables are filled with
(``_table``).

    spanseek corpus from-files notes.md --out corpus.jsonl
"""

from __future__ import annotations

import bisect
import functools
import html
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

from spanseek.indexer.extracted import IngestError, Unreadable

MARKDOWN_NESTING = 100  # blocks Markdown may nest (lists, quotes) before markdown-it stops rendering the file
_NESTED_PREFIX = re.compile(r"^[ \t>]+")  # a line's indentation and quote markers: what nests its blocks
_DEEP_ROUNDS = 8  # times a block nested past the limit is read again, flatter, before its lines are read as text
# empty cells a Markdown file's tables may be filled with, where rows are shorter than their header: markdown-it
# gives each row all the header's columns (up to 65,536 such cells a table), and each took ~0.1 ms to read, so a
# 20 KB file of a 1,000-column header over rows of "|" held a reader for 7-9 s (tables again and again, minutes).
# A file past it is skipped, named (one such table is still parsed: ~3 s at most); hand-written tables fill a few.
MARKDOWN_FILLED_CELLS = 16_384
_FILLED = "filled_cells"  # the key of the count in a parse's env, carried over every reading of a file
_NOTES, _NUMBERS = "footnotes", "footnote_numbers"  # a parse's footnotes by label, and the numbers of those marked
_NOTE_LINES = "footnote_lines"  # the key of a footnote's lines in the meta of each of its tokens
# footnotes defined inside footnotes read as footnotes this deep; deeper, a definition is read as CommonMark reads it
# (text, or a link's reference). Each depth reads its notes' text again: a line of 16,000 definitions, each inside the
# one before ("[^1]: [^2]: ..."), read a copy of the rest of the line 16,000 times (12 s, a gigabyte, for 150 kB)
_NOTE_DEPTH, _MOST_NOTE_DEPTH = "footnote_depth", 4
_NOTE_DEFINITION = re.compile(r"\[\^([^\]\s]{1,200})\]:[ \t]*")  # "[^1]: text" opens a footnote's definition
_NOTE_MARK = re.compile(r"\[\^([^\]\s]{1,200})\]")  # "[^1]": a footnote's mark, where that footnote is defined
# "see note [^2]": the mark, a word apart from "note", is read as its number; one set on the word ("the release
# notes[^1]") is that word's mark, read as nothing
_NAMES_NOTE = re.compile(r"\b(?:foot)?notes?[ \t]+$", re.I)
_INDENT = re.compile(r"^(?: {1,4}|\t)")  # a footnote's own lines after its first: indented under it
# where "$" may close inline TeX math (as Pandoc and Jupyter read it): after a character that is not a space nor a
# backslash ("\$" is a dollar sign), and not before a digit ("costs $5 or $10" holds no math)
_MATH_CLOSE = re.compile(r"(?<=[^\s\\])\$(?!\d)")
# a GitHub alert's marker, the first line of a quote: "> [!NOTE]", a callout GitHub titles "Note"
_ALERT = re.compile(r"\[!(note|tip|important|warning|caution)\][ \t]*(?:\n|$)", re.I)
# an MkDocs admonition's first line (Python-Markdown's, and pymdown-extensions' collapsible "???" and "???+"): its
# kind (the class words, "note", "danger highlight") and, in quotes, a title of its own ("" for none)
_ADMONITION = re.compile(r'(?:!!!|\?\?\?\+?)[ \t]*([\w-]+(?:[ \t]+[\w-]+)*)(?:[ \t]+"(.*)")?[ \t]*$')
_TASK = re.compile(r"\[([ xX])\][ \t]+(?=\S)")  # a task list item's mark: "[ ]" to do, "[x]" done
TASK_MARKS = {" ": "\u2610", "x": "\u2612", "X": "\u2612"}  # ☐ to do, ☒ done (as a PDF form's ticked box reads)
_LAZY_STOP = re.compile(r"^[ \t]*(?:#|>|```|~~~|[-*+][ \t]|\d{1,9}[.)][ \t])")  # a new block, not a note's line


def markdown_parser(where: str) -> Any:
    """A markdown-it parser of CommonMark, tables and strikethrough (GitHub's ``~~struck~~``) that nests blocks ``MARKDOWN_NESTING`` deep (its default, 20,
    lost the rest of a file past a list 10 deep) and finds link labels with ``_link_label``."""
    try:
        from markdown_it import MarkdownIt
        from markdown_it.rules_block import table
    except ImportError:
        raise IngestError(f"{where}: reading Markdown needs markdown-it-py (pip install 'spanseek[index]')") from None
    md = MarkdownIt("commonmark", {"maxNesting": MARKDOWN_NESTING}).enable(["table", "strikethrough"])
    md.block.ruler.before("reference", "footnote_definition", _footnote_definition, {"alt": ["paragraph", "reference"]})
    md.inline.ruler.before("link", "footnote_mark", _footnote_mark)
    md.inline.ruler.before("escape", "math", _math)
    md.core.ruler.after("inline", "footnotes", _footnotes_at_end)
    md.core.ruler.after("block", "alerts", _alerts)
    md.core.ruler.after("alerts", "task_marks", _task_marks)
    md.block.ruler.before("code", "admonition", _admonition, {"alt": ["paragraph", "reference", "blockquote", "list"]})
    md.block.ruler.at("table", functools.partial(_table, table),
                      {"alt": ["paragraph", "reference"]})  # (a table ends those, as markdown-it's does)
    # md.helpers is the module markdown_it.helpers, shared by every parser: this parser gets its own
    md.helpers = types.SimpleNamespace(**{name: getattr(md.helpers, name) for name in md.helpers.__all__})
    md.helpers.parseLinkLabel = _link_label
    return md


def _footnote_definition(state: Any, start_line: int, end_line: int, silent: bool) -> bool:
    """A footnote's definition ("[^1]: text", its next lines indented under it or run on from it, as GitHub and Pandoc
    read it) kept in the parse's ``env`` to be read at the document's end (``_footnotes_at_end``), not where it is
    written: it read as a stray line "[^1]: text". The first definition of a label is its footnote."""
    first = state.bMarks[start_line] + state.tShift[start_line]
    found = state.sCount[start_line] - state.blkIndent < 4 and state.env.get(_NOTE_DEPTH, 0) < _MOST_NOTE_DEPTH and (
        _NOTE_DEFINITION.match(state.src, first, state.eMarks[start_line]))
    if not found or silent:
        return bool(found)
    lines = [state.src[found.end():state.eMarks[start_line]]]
    line = start_line + 1
    while line < end_line:
        text = state.src[state.bMarks[line]:state.eMarks[line]]
        indented = state.sCount[line] - state.blkIndent >= 4
        if state.isEmpty(line):  # a blank line: the note goes on if the next line that is not is indented under it
            after = line + 1
            while after < end_line and state.isEmpty(after):
                after += 1
            if after >= end_line or state.sCount[after] - state.blkIndent < 4:
                break
            lines.append("")
        elif indented:
            lines.append(_INDENT.sub("", text))
        elif not lines[-1].strip() or _NOTE_DEFINITION.match(text.strip()) or _LAZY_STOP.match(text):
            break
        else:  # a line run on from the note's paragraph
            lines.append(text)
        line += 1
    state.env.setdefault(_NOTES, {}).setdefault(found.group(1), "\n".join(lines))
    state.line = line
    return True


def _footnote_mark(state: Any, silent: bool) -> bool:
    """A defined footnote's mark ("high[^1] today") read as nothing, as the superscript a reader skips ("high today"),
    or as the footnote's number a space after a word that names a note ("see note [^2]" reads "see note 2"; set on
    the word, "notes[^1]", it is that word's mark); numbered in the order the marks come, as a renderer numbers them. An undefined one reads as written."""
    found = state.src[state.pos:state.pos + 2] == "[^" and _NOTE_MARK.match(state.src, state.pos, state.posMax)
    if not found or found.group(1) not in state.env.get(_NOTES, {}):
        return False
    numbers = state.env.setdefault(_NUMBERS, {})
    number = numbers.setdefault(found.group(1), len(numbers) + 1)
    if not silent and _NAMES_NOTE.search(state.src[max(0, state.pos - 32):state.pos]):
        state.push("text", "", 0).content = str(number)
    state.pos = found.end()
    return True


def _math(state: Any, silent: bool) -> bool:
    """TeX math, "$x_1 + y_1$" or "$$\\int_0^1 x\\,dx$$" (Jupyter's, Pandoc's, GitHub's), read as written: CommonMark's
    escapes and emphasis mangled it ("$x1 + y1$", "x,dx"). "$" opens math where a character that is not a space
    follows it and a "$" closes it (``_MATH_CLOSE``) in the same paragraph; "$$" to the next "$$"."""
    src, start = state.src, state.pos
    if src[start:start + 1] != "$":
        return False
    if src[start:start + 2] == "$$":
        end = src.find("$$", start + 2, state.posMax)
        end = end + 2 if end > start + 2 else -1
    elif start + 1 < state.posMax and not src[start + 1].isspace():
        # each close found once a parse of this text (the first after each "$"): a search from each "$" would
        # scan to the end again and again ("$a $a $a ..." holds no math)
        seen = vars(state)
        if "math_closes" not in seen:
            seen["math_closes"] = [found.start() for found in _MATH_CLOSE.finditer(src)]
        closes = seen["math_closes"]
        at = bisect.bisect_left(closes, start + 2)
        end = closes[at] + 1 if at < len(closes) and closes[at] < state.posMax else -1
    else:
        end = -1
    if end < 0:
        return False
    if not silent:
        state.push("text", "", 0).content = src[start:end]
    state.pos = end
    return True


def _alerts(state: Any) -> None:
    """A GitHub alert ("> [!NOTE]" over a quote's text) read as GitHub shows it: its title ("Note") a paragraph of its
    own before the quote's text, as an admonition's title in Sphinx's and MkDocs' HTML reads; the marker read as
    written was "[!NOTE] Use a virtual environment."."""
    from markdown_it.token import Token

    tokens = state.tokens
    for i in range(len(tokens) - 3, -1, -1):  # (from the end: the tokens inserted are after those still to see)
        opened, paragraph, inline = tokens[i:i + 3]
        found = opened.type == "blockquote_open" and paragraph.type == "paragraph_open" and _ALERT.match(inline.content)
        if not found:
            continue
        inline.content = inline.content[found.end():]
        title = [Token("paragraph_open", "p", 1), Token("inline", "", 0), Token("paragraph_close", "p", -1)]
        for token in title:
            token.block, token.level, token.map = True, paragraph.level + (token.type == "inline"), paragraph.map
        title[1].content, title[1].children = found.group(1).capitalize(), []
        if not inline.content.strip():  # the marker alone in its paragraph: the text is in the next
            tokens[i + 1:i + 4] = title
        else:
            tokens[i + 1:i + 1] = title


def _admonition(state: Any, start_line: int, end_line: int, silent: bool) -> bool:
    """An MkDocs admonition ('!!! note "Be careful"' over a body indented four spaces, or pymdown-extensions'
    collapsible "???") read as MkDocs shows it: a <div> of its title's paragraph (its own, else its kind's first word
    capitalised, "Note"; none where it is "") and then its body's blocks. Read as written, the marker line ran into
    the body's first paragraph ('!!! note "Be careful" Use a virtual environment.'), and a body after a blank line
    read as a code block."""
    first = state.bMarks[start_line] + state.tShift[start_line]
    found = state.sCount[start_line] - state.blkIndent < 4 and _ADMONITION.match(
        state.src[first:state.eMarks[start_line]])
    if not found or silent:
        return bool(found)
    indent = state.sCount[start_line] + 4  # the body: the lines after it indented under it, blank lines between them
    line = last = start_line + 1
    while line < end_line and (state.isEmpty(line) or state.sCount[line] >= indent):
        line += 1
        last = line if not state.isEmpty(line - 1) else last
    title = found.group(1).split()[0].capitalize() if found.group(2) is None else found.group(2).strip()
    opened = state.push("admonition_open", "div", 1)
    opened.attrs, opened.map = {"class": f"admonition {found.group(1)}"}, [start_line, last]
    if state.level >= state.md.options.maxNesting:  # left empty, as a quote is there: ``markdown_parts`` reads
        title = ""  # its lines again, its title with them (pushed here, it left its body unread)
    if title:
        state.push("paragraph_open", "p", 1).map = [start_line, start_line + 1]
        inline = state.push("inline", "", 0)
        inline.content, inline.map, inline.children = title, [start_line, start_line + 1], []
        state.push("paragraph_close", "p", -1)
    old = state.parentType, state.blkIndent, state.lineMax
    state.parentType, state.blkIndent, state.lineMax = "admonition", indent, last
    state.md.block.tokenize(state, start_line + 1, last)
    state.parentType, state.blkIndent, state.lineMax = old
    state.push("admonition_close", "div", -1)
    state.line = last
    return True


def _task_marks(state: Any) -> None:
    """A task list item's mark ("- [ ] buy milk", "- [x] write code") read as the box GitHub shows: "☐ buy milk",
    "☒ write code", not as the brackets written, "[ ] buy milk"."""
    tokens = state.tokens
    for i in range(2, len(tokens)):
        inline = tokens[i]
        if inline.type == "inline" and tokens[i - 1].type == "paragraph_open" and (
                tokens[i - 2].type == "list_item_open") and (found := _TASK.match(inline.content)):
            inline.content = f"{TASK_MARKS[found.group(1)]} {inline.content[found.end():]}"


def _footnotes_at_end(state: Any) -> None:
    """The footnotes' paragraphs at the end of the document, as a renderer sets them: those marked in the order of
    their marks, then any never marked, in the order they are defined."""
    notes: dict[str, str] = state.env.get(_NOTES, {})
    done: set[str] = set()
    while len(done) < len(notes):  # (again for the footnotes defined inside footnotes, ``_MOST_NOTE_DEPTH`` deep)
        state.env[_NOTE_DEPTH] = state.env.get(_NOTE_DEPTH, 0) + 1
        for label in [label for label in dict.fromkeys([*state.env.get(_NUMBERS, {}), *notes]) if label not in done]:
            done.add(label)
            first, lines = len(state.tokens), notes[label].split("\n")
            state.md.block.parse(notes[label], state.md, state.env, state.tokens)
            for token in state.tokens[first:]:
                token.meta[_NOTE_LINES] = lines  # (its map numbers the note's lines: ``markdown_parts``)
                if token.type == "inline":
                    token.children = []
                    state.md.inline.parse(token.content, state.md, state.env, token.children)


def _table(table: Callable[..., bool], state: Any, start_line: int, end_line: int, silent: bool) -> bool:
    """markdown-it's table rule (``table``), counting the empty cells it fills rows shorter than their header with (a row of n
    "|" writes at most n + 1 cells) into the parse's ``env``: ``Unreadable`` once a file's are more than
    ``MARKDOWN_FILLED_CELLS``, before its tables are rendered and read."""
    first = len(state.tokens)
    found = table(state, start_line, end_line, silent)
    if not found or silent:
        return found
    tokens = state.tokens[first:]
    columns = sum(token.type == "th_open" for token in tokens)
    rows = [token.map[0] for token in tokens if token.type == "tr_open" and token.map and token.map[0] > start_line]
    filled = sum(max(0, columns - 1 - state.src.count("|", state.bMarks[line], state.eMarks[line])) for line in rows)
    state.env[_FILLED] = filled = state.env.get(_FILLED, 0) + filled
    if filled > MARKDOWN_FILLED_CELLS:
        raise Unreadable(f"its tables' rows lack at least {filled:,} of their header's cells (one table has {columns:,} "
                         f"columns over {len(rows):,} rows), more than the {MARKDOWN_FILLED_CELLS:,} a Markdown file is "
                         "read with (each is filled in as an empty cell); give the rows their cells, or split the table")
    return True


def _link_label(state: Any, start: int, disable_nested: bool = False) -> int:
    """Where the link label opened by the "[" at ``start`` ends (its "]"), or -1: markdown-it's ``parseLinkLabel``,
    with its result, in linear time. That one steps token by token (``skipToken``, cached per position) to the
    "]" that closes the label, from each "[" again: a run of "[" nests links until ``maxNesting``, so each "[" stepped
    through a hundred cached ones, and 100,000 of them took 4-18 s ("![" and "[[a]" four times as long). Here each
    step but one over a "[" that opens a token (a nested link, which ends a label with ``disable_nested``) is kept
    as a jump: where it leads, the levels it adds ("[" of text +1, "]" -1) and the lowest it goes; a scan takes the
    jumps that cannot close its label, and joins the ones it took into one. A "[" after the text's last "]" opens no
    label: -1 at once (the steps are cached for labels only)."""
    seen = vars(state)
    if "last_bracket" not in seen:
        seen["last_bracket"] = state.src.rfind("]")
    if start >= seen["last_bracket"]:
        return -1
    jumps: dict[int, tuple[int, int, int]] = seen.setdefault("label_jumps", {})  # at -> (to, levels, lowest)
    src, end, old = state.src, state.posMax, state.pos
    pos, level, found = start + 1, 1, -1
    run: list[tuple[int, tuple[int, int, int]]] = []  # the jumps taken since the last token
    try:
        while pos < end:
            jump = jumps.get(pos)
            if jump is None or level + jump[2] <= 0:  # a step, or a jump that may pass the label's "]": one step
                marker = src[pos]
                if marker == "]" and level == 1:
                    found = pos
                    break
                state.pos = pos
                state.md.inline.skipToken(state)
                if marker == "[" and state.pos != pos + 1:  # a token: a link (or an image) inside the label
                    if disable_nested:
                        break
                    _join(jumps, run, pos)
                    pos = state.pos
                    continue
                jump = (state.pos, 1, _HIGH) if marker == "[" else (state.pos, -1, -1) if marker == "]" else (
                    state.pos, 0, _HIGH)
                jumps.setdefault(pos, jump)
            run.append((pos, jump))
            level += jump[1]
            pos = jump[0]
    finally:
        _join(jumps, run, pos)
        state.pos = old
    return found


_HIGH = 1 << 62  # the lowest level a jump without a "]" goes to: never


def _join(jumps: dict[int, tuple[int, int, int]], run: list[tuple[int, tuple[int, int, int]]], to: int) -> None:
    """Each jump of ``run`` (consecutive: each leads to the next's start) made to lead to ``to``, with the levels
    it and the ones after it add and the lowest they go to; ``run`` emptied."""
    levels, lowest = 0, _HIGH
    for at, (_, add, low) in reversed(run):
        levels, lowest = add + levels, min(low, add + lowest)
        jumps[at] = (to, levels, lowest)
    run.clear()


def render_markdown(md: Any, body: str, rounds: int = _DEEP_ROUNDS, counts: dict[str, Any] | None = None) -> str:
    """``body`` rendered to HTML by ``md``: its ``markdown_parts``, the token runs rendered."""
    return "".join(part if isinstance(part, str) else md.renderer.render(part, md.options, {})
                   for part in markdown_parts(md, body, rounds, counts))


def markdown_parts(md: Any, body: str, rounds: int = _DEEP_ROUNDS,
                   counts: dict[str, Any] | None = None) -> Iterator[list[Any] | str]:
    """``body`` parsed by ``md``, in the order it reads: runs of markdown-it's block tokens, and HTML in their place
    where a block nests past the limit. markdown-it does not parse inside a block nested past its ``maxNesting``
    and skips that block's lines, for a list item the rest of the file: such a block's lines are rendered again in
    its place with their indentation and quote markers removed (a list nested 60 deep reads as a flat list), and
    after ``rounds`` such readings as lines of text. Inside quotes only, each line loses only the markers of the
    quotes open around it, so the quotes it nests deeper stay (a quote 150 deep whose every level has a line keeps
    its lines apart: they ran into one paragraph), except in the last reading. ``counts``: what the file's readings
    counted so far (``_table``'s filled cells), carried into each reading so that the limits are the file's."""
    counts = {} if counts is None else counts
    env: dict[str, Any] = dict(counts)
    tokens = md.parse(body, env)
    if _FILLED in env:
        counts[_FILLED] = env[_FILLED]
    lines = body.split("\n")
    done = 0
    opened: list[str] = []  # the blocks open at each token, outermost first
    for i, token in enumerate(tokens[:-1]):
        if token.nesting == 1:
            opened.append(token.type)
        elif token.nesting == -1 and opened:
            opened.pop()
        if (token.type in ("blockquote_open", "list_item_open", "admonition_open") and token.map and tokens[i + 1].nesting == -1
                and token.level >= MARKDOWN_NESTING - 2):  # a container opened at the limit, left empty
            a, b = token.map
            # the lines its map numbers: the file's, or a footnote's, read at the end (their lines were the file's
            # first lines, read again in the footnote's place)
            source = token.meta.get(_NOTE_LINES, lines)
            quotes = rounds > 1 and all(kind == "blockquote_open" for kind in opened)  # the last reading: flat
            prefix = re.compile(rf"^(?:[ \t]{{0,3}}>[ \t]?){{0,{len(opened)}}}") if quotes else _NESTED_PREFIX
            skipped = [prefix.sub("", line) for line in source[a:b]]
            # the whole text again, nothing removed (markers of nesting all on its lines: "- > - > ..."): read again,
            # it would nest past the limit in the same place, so it skips to the first reading that differs, with
            # fewer markers removed: as lines of text (each such reading took a parse: 60 us a character)
            again = skipped == source
            yield tokens[done : i + 1]
            if rounds > 0 and not (again and prefix is _NESTED_PREFIX):
                yield from markdown_parts(md, "\n".join(skipped), 1 if again else rounds - 1, counts)
            else:
                yield "".join(f"<p>{html.escape(line)}</p>" for line in skipped if line.strip())
            done = i + 1
    yield tokens[done:]
