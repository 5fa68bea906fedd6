"""HTML and Markdown read as a reader sees them (``indexer.markup``): text laid out right to left by <bdo>, controls
set side by side (tabs, buttons).

    .venv/bin/python -m pytest -q tests/indexer/test_markup.py
"""

from __future__ import annotations

import time

import pytest

from spanseek.indexer.markup import extract_html, extract_markdown

ARTICLE = ("<html><head><title>Notes</title></head><body><nav><a href='/'>Home</a></nav><article><h1>Notes</h1>"
           "<p>This page is read for its main content, which is long enough to be kept.</p>{}</article>"
           "<footer>(c) 2026</footer></body></html>")


def _read_alike(html: str, expected: list[str]) -> None:
    """``html`` reads as ``expected`` in a page's main content (its last paragraphs), a page read whole and Markdown."""
    assert extract_html(ARTICLE.format(html)).paragraphs[-len(expected):] == expected
    assert extract_html(html).paragraphs == expected
    assert extract_markdown(html).paragraphs == expected


def test_bdo_right_to_left_text_reads_as_shown():
    """<bdo dir="rtl"> lays its characters out in reverse: Latin written backwards is shown forwards, a right-to-left
    script's words read as written; in a page's main content, in Markdown and in a page read whole."""
    html = "<p>The word <bdo dir='rtl'>ecnatsid (a)</bdo> is shown, and <bdo dir='RTL'>שלום</bdo> too.</p>"
    expected = "The word (a) distance is shown, and שלום too."
    assert expected in extract_html(ARTICLE.format(html)).paragraphs
    assert extract_markdown(f"# Notes\n\n{html}\n").paragraphs == ["Notes", expected]
    assert extract_html("<p>Go <bdo dir=rtl>kcab <b>won</b></bdo>!</p>").paragraphs == ["Go now back!"]
    assert extract_html("<p>Left <bdo dir='ltr'>as is</bdo>.</p>").paragraphs == ["Left as is."]



def test_a_bdo_in_a_bdo_leaves_the_page_s_later_ones_read_as_shown():
    """In a page's main content a <bdo> inside another ended the reading of the page's <bdo>s: those after it read
    backwards ("fed"), while Markdown's HTML read them as shown. Both read them as shown."""
    html = "<p>Go <bdo dir=rtl>cba<bdo dir=rtl>x</bdo></bdo> and <bdo dir=rtl>fed</bdo> then <bdo dir=rtl>ihg</bdo>.</p>"
    expected = "Go xabc and def then ghi."
    assert expected in extract_html(ARTICLE.format(html)).paragraphs
    assert extract_markdown(html).paragraphs == [expected]



@pytest.mark.parametrize(("inner", "expected"), [
    # a left-to-right <bdo> inside a right-to-left one is shown as written, in its place (it read reversed: "zyx")
    ("abc <bdo dir=ltr>xyz (1)</bdo> def", "fed xyz (1) cba"),
    ("a (b) <bdo dir=ltr>c (d)</bdo>", "c (d) (b) a"),  # (was "(d) c (b) a")
    ("abc <bdo dir=rtl>xyz</bdo> def", "fed zyx cba"),  # a right-to-left one in it is reversed with it
    ("abc <bdo>xyz</bdo> def", "fed zyx cba"),  # one of no direction lays nothing out of its own
    ("abc def ", "fed cba"),  # a space at its end, met by the one after it, is one space (Markdown's HTML read two)
])
def test_a_bdo_inside_a_bdo_reads_as_a_browser_shows_it(inner, expected):
    """Unicode's bidirectional algorithm, as a browser applies it to nested <bdo> elements: a page's main content,
    Markdown's HTML and a page read whole read them alike."""
    html = f"<p>Go <bdo dir=rtl>{inner}</bdo> now.</p>"
    assert f"Go {expected} now." in extract_html(ARTICLE.format(html)).paragraphs
    assert extract_markdown(html).paragraphs == [f"Go {expected} now."]
    assert extract_html(html).paragraphs == [f"Go {expected} now."]


def test_a_line_break_in_a_bdo_lays_out_each_line_on_its_own():
    """A browser lays each line of a <bdo> out on its own: "<bdo dir=rtl>cba<br>fed</bdo>" shows "abc" over "def"
    (it read "defabc", the lines reversed as one; in Markdown's HTML, which breaks its paragraph at a <br>, it read
    "cba" and "fed", as written); a line in the source is no line break. A left-to-right <bdo> shows a right-to-left
    word backwards, and it reads so."""
    html = "<p>Go <bdo dir=rtl>cba\nfed<br>ihg <a href='/x'>lkj</a></bdo> now <bdo dir=ltr>שלום</bdo>.</p>"
    assert "Go def abc jkl ghi now םולש." in extract_html(ARTICLE.format(html)).paragraphs
    assert extract_markdown(html).paragraphs == ["Go def abc", "jkl ghi now םולש."]


def test_blocks_in_a_bdo_keep_their_paragraphs_each_laid_out_on_its_own():
    """A browser lays out each block in a <bdo> (a heading, a paragraph, a list item) on lines of its own. In a
    page's main content the <bdo>'s blocks were read as one line, reversed as one: "jklghi defabcRatings". Each
    reads as its own paragraph, reversed in its place, the heading a heading, as Markdown's HTML reads them."""
    html = "<p>Go</p><bdo dir=rtl><h2>sgnitaR</h2><p>cba</p><ul><li>fed <b>ihg</b><li>lkj</ul></bdo><p>End.</p>"
    expected = ["Go", "Ratings", "abc", "ghi def", "jkl", "End."]
    read = extract_html(ARTICLE.format(html))
    assert read.paragraphs[-6:] == extract_markdown(html).paragraphs == expected
    assert read.paragraph_meta[-1] == {"section": "Ratings"}


def test_a_bdo_in_a_pre_lays_out_each_of_its_lines_on_its_own():
    """A <pre>'s lines are lines as a <br> starts them: a <bdo> in one shows each reversed in its place, the code's
    lines kept. In a page's main content they were read as one line, reversed as one ("def abc"; Markdown's HTML
    read "abc" over "def")."""
    html = "<pre>x = 1\n<bdo dir=rtl>cba\nfed<br>ihg</bdo>\ny = 2</pre>"
    expected = "x = 1\nabc\ndef\nghi\ny = 2"
    assert expected in extract_html(ARTICLE.format(html)).paragraphs
    assert extract_html(html).paragraphs == extract_markdown(html).paragraphs == [expected]


@pytest.mark.parametrize("tabs", [
    # sphinx-tabs: ARIA tab buttons
    "<div role='tablist'><button role='tab'>Windows</button><button role='tab'>Linux</button></div>",
    # MkDocs Material: labels of radio inputs
    "<div class='tabbed-labels'><label for='t1'>Windows</label><label for='t2'>Linux</label></div>",
    # links made tabs
    "<div role='tablist'><a role='tab' href='#w'>Windows</a><a role='tab' href='#l'>Linux</a></div>",
])
def test_tab_labels_written_side_by_side_read_apart(tabs):
    page = f"# Install\n\n{tabs}\n\n<div role='tabpanel'><p>Run setup.exe.</p></div>\n"
    assert extract_markdown(page).paragraphs == ["Install", "Windows Linux", "Run setup.exe."]



def test_a_control_in_running_text_keeps_the_punctuation_after_it():
    """Controls were spaced on both sides, so the punctuation after one stood apart ("Name : Ada", "Save ,"); only
    controls set right after each other are read apart, and a page of thousands of them open is read in linear time
    (each end tag searched the open controls)."""
    assert extract_markdown("<label for='n'>Name</label>: Ada\n").paragraphs == ["Name: Ada"]
    assert extract_markdown("Click <button>Save</button>, then <b>quit</b>.\n").paragraphs == ["Click Save, then quit."]
    start = time.process_time()
    extract_markdown("<label>a" * 60_000 + "</label>" * 60_000)
    assert time.process_time() - start < 3

def test_an_article_hidden_until_a_script_shows_it_is_read_behind_a_visible_header():
    """A page that shows its header and reveals its body with a script (the article in a wrapper of "display: none")
    lost the article: its text was read only where none showed. It reads where most of the page's text is hidden; a
    hidden dialog beside a page's shown article stays unread."""
    story = "<article><h2>Harbour</h2><p>The harbour was dredged in 1910 so that the larger ferries could berth.</p>"
    head = "<header><p>Port news</p></header>"
    page = f"<html><body>{head}<div id='app' style='display:none'>{story}</article></div><script>x()</script>"
    assert extract_html(page).paragraphs[-1] == "The harbour was dredged in 1910 so that the larger ferries could berth."
    dialog = "<div hidden><p>Sign up for our newsletter.</p></div>"
    shown = f"<html><body>{head}{story}<p>It was deepened again in 1968 for the container ships.</p></article>{dialog}"
    assert "Sign up for our newsletter." not in extract_html(shown).paragraphs


NOTES = """# Tides

The tide is high[^noon] today; see note [^range] for the range.

[^noon]: Measured at noon
from the pier.

    Its second paragraph.

[^range]: Two metres at springs.

Next paragraph, with an undefined mark [^x].
"""


def test_markdown_footnotes_read_as_a_renderer_sets_them():
    """A footnote's mark read literally ("high[^noon]") and its definition as a stray line ("[^noon]: ..."): a mark
    now reads as nothing (as its number after a word naming a note, numbered in the marks' order), and each footnote
    as paragraphs at the document's end, marked ones first; a mark of no footnote reads as written, as in a renderer."""
    assert extract_markdown(NOTES).paragraphs == [
        "Tides", "The tide is high today; see note 2 for the range.",
        "Next paragraph, with an undefined mark [^x].",
        "Measured at noon from the pier.", "Its second paragraph.", "Two metres at springs."]
    assert extract_markdown("Code:\n\n```\n[^1]: not a note\n```\n").paragraphs == ["Code:", "[^1]: not a note"]



def test_a_footnote_mark_set_on_the_word_note_reads_as_nothing():
    """A mark set on the word "notes" or "note" (a superscript on it, as any word's) read as its number: "the release
    notes1". Only a mark a space after such a word is the note it names: "see note 1"."""
    source = "See the release notes[^a], a note[^b] and footnote [^a].\n\n[^a]: Version 2.\n\n[^b]: Short.\n"
    assert extract_markdown(source).paragraphs == [
        "See the release notes, a note and footnote 1.", "Version 2.", "Short."]


def test_a_footnote_nested_past_the_limit_reads_its_own_lines():
    """A footnote whose quote nests past markdown-it's limit was read again from the file's first lines (its lines'
    numbers are the note's, read at the end): "Tides" again, in place of the note's text. It reads its own text, as
    such a quote in the body does."""
    body = "# Tides\n\nThe tide is high[^1] today.\n\n"
    deep = "> " * 120 + "Two metres at springs.\n"
    assert extract_markdown(f"{body}[^1]: {deep}").paragraphs == [
        "Tides", "The tide is high today.", "Two metres at springs."]
    assert extract_markdown(f"{body}{deep}").paragraphs == ["Tides", "The tide is high[^1] today.", "Two metres at springs."]

def test_footnote_marks_and_definitions_are_read_in_linear_time():
    start = time.process_time()
    for source in ["[^" * 50_000, "a[^1]" * 20_000 + "\n\n[^1]: x\n", "[^1]: x\n" * 20_000]:
        extract_markdown(source)
    assert time.process_time() - start < 3



def test_footnotes_defined_inside_footnotes_are_read_in_linear_time():
    """A line of definitions, each inside the one before ("[^1]: [^2]: ..."), read the rest of the line again at each
    one: 12,000 took seconds. Footnotes inside footnotes read as such a few deep, and the rest as text."""
    assert extract_markdown("A[^1].\n\n[^1]: One.\n\n    [^2]: Two, inside one.\n").paragraphs == [
        "A.", "One.", "Two, inside one."]
    start = time.process_time()
    extract_markdown("".join(f"[^{n}]: " for n in range(12_000)) + "x\n")
    assert time.process_time() - start < 2

SPHINX = """<html><head><title>Install</title></head><body><div class="body" role="main"><section id="install">
<h1>Install<a class="headerlink" href="#install" title="Link to this heading">¶</a></h1>
<p>Foo needs Python 3.11 or newer and a C compiler to build its extension.</p>
<h2 id="pypi">From PyPI<a href="#pypi" title="Permanent link">&para;</a></h2>
<p>The wheel is built for Linux<a href="#fn1" class="footnote-ref" id="fnref1" role="doc-noteref"><sup>1</sup></a>
and macOS<sup><a href="#fn2">[2]</a></sup>; see <a href="#pypi">2</a> pages on.</p>
<div class="highlight"><pre><span></span><code><a id="l1" name="l1" href="#l1"></a>pip install foo
<a id="l2" name="l2" href="#l2"></a>foo --version
</code></pre></div>
<section class="footnotes" role="doc-endnotes"><hr><ol><li id="fn1"><p>Any recent glibc.<a href="#fnref1"
class="footnote-back" role="doc-backlink">↩︎</a></p></li><li id="fn2"><p>Intel and ARM.<a href="#fnref2">↩</a></p>
</li></ol></section></section></div></body></html>"""


TABS = {
    "sphinx-tabs": "<div role='tablist'><button role='tab' aria-controls='p1'>Windows</button><button role='tab' "
                   "aria-controls='p2'>Linux</button></div><div role='tabpanel' id='p1'><p>{0}</p></div>"
                   "<div role='tabpanel' id='p2' hidden><p>{1}</p></div>",
    "sphinx-design": "<div class='sd-tab-set'><input checked id='t1' name='s' type='radio'><label for='t1'>Windows"
                     "</label><div class='sd-tab-content'><p>{0}</p></div><input id='t2' name='s' type='radio'>"
                     "<label for='t2'>Linux</label><div class='sd-tab-content'><p>{1}</p></div></div>",
    "mkdocs": "<div class='tabbed-set'><input checked id='m1' name='m' type='radio'><input id='m2' name='m' "
              "type='radio'><div class='tabbed-labels'><label for='m1'>Windows</label><label for='m2'>Linux</label>"
              "</div><div class='tabbed-content'><div class='tabbed-block'><p>{0}</p></div><div class='tabbed-block'>"
              "<p>{1}</p></div></div></div>",
}


@pytest.mark.parametrize("kind", TABS)
def test_a_tab_reads_as_its_panels_title_in_a_pages_main_content(kind):
    """In a page's main content (trafilatura) tabs' labels were dropped, buttons and labels alike: each panel read
    without the tab that says what it is for. Each tab's label reads at the top of its panel."""
    steps = ["Run setup.exe as administrator from the downloaded folder.", "Run sudo apt install foo in a terminal."]
    intro = "<p>Pick your system below and follow the steps for it carefully, one at a time.</p>"
    page = f"<html><body><article><h1>Install</h1>{intro}{TABS[kind].format(*steps)}</article></body></html>"
    assert extract_html(page).paragraphs == ["Install", intro[3:-4], "Windows", steps[0], "Linux", steps[1]]


def test_permalinks_note_marks_and_backlinks_are_passed_over_as_a_reader_does():
    """Sphinx's and MkDocs' permalink read into each heading ("Install¶"), Pandoc's and Wikipedia's note marks into
    the sentence ("Linux1") and the notes' links back into the notes ("↩︎"); MkDocs' empty anchor on each line of
    code lost the code block. A reader passes over all of them; an in-page link of words or a number in the running
    text reads. In a page's main content and in Markdown's HTML (read as a page without one is) alike."""
    expected = ["Install", "Foo needs Python 3.11 or newer and a C compiler to build its extension.", "From PyPI",
                "The wheel is built for Linux and macOS; see 2 pages on.", "pip install foo\nfoo --version",
                "1. Any recent glibc.", "2. Intel and ARM."]  # (the notes' list numbers them, as a browser shows it)
    assert extract_html(SPHINX).paragraphs == expected
    body = SPHINX.split('role="main">')[1]
    assert extract_markdown(body).paragraphs == expected



def test_a_superscript_left_open_does_not_hide_the_next_paragraph_s_links():
    """A <sup> left open ("m<sup>2" and the paragraph's end) counted as open for the rest of the file, so an in-page
    link to a numbered step in a later paragraph was taken for a note's mark and not read ("See step below.")."""
    source = 'The area is 4 m<sup>2.\n\nSee step <a href="#s3">3</a> below.\n'
    assert extract_markdown(source).paragraphs == ["The area is 4 m2.", "See step 3 below."]

def test_tex_math_in_markdown_reads_as_written():
    """Jupyter's, Pandoc's and GitHub's TeX math was mangled by CommonMark's escapes and emphasis: "$x_1 + y_1$" read
    "$x1 + y1$" (emphasis) and "\\\\," "," (an escape). Math reads as written; prices are no math."""
    source = ("# Means\n\nThe mean of $x_1 + x_2$ and $y_1$ is *small*:\n\n$$\\bar{x} = \\frac{1}{n}\\sum_i x_i\\,dx$$\n\n"
              "A ticket costs $5, or $10 for two; a \\$ sign reads.\n")
    assert extract_markdown(source).paragraphs == [
        "Means", "The mean of $x_1 + x_2$ and $y_1$ is small:", "$$\\bar{x} = \\frac{1}{n}\\sum_i x_i\\,dx$$",
        "A ticket costs $5, or $10 for two; a $ sign reads."]
    start = time.process_time()
    for hostile in ["$a " * 50_000, "$" * 100_000, "$$a " * 30_000]:  # (each "$" searched for its close once)
        extract_markdown(hostile)
    assert time.process_time() - start < 3


def test_a_github_alert_reads_its_title_before_its_text():
    """GitHub's alerts ("> [!NOTE]" over a quote) read their marker as written: "[!NOTE] Use a virtual environment.".
    The title GitHub shows ("Note") reads as a paragraph before the text, as an admonition's title in Sphinx's or
    MkDocs' HTML does; a marker that is not alone on the quote's first line reads as written, as on GitHub."""
    source = ("# Install\n\n> [!NOTE]\n> Use a virtual environment.\n\n> [!warning]\n>\n> Back up first.\n\n"
              "> [!NOTE] not alone\n\n> A plain quote.\n")
    assert extract_markdown(source).paragraphs == [
        "Install", "Note", "Use a virtual environment.", "Warning", "Back up first.", "[!NOTE] not alone",
        "A plain quote."]


def test_an_mkdocs_admonition_reads_its_title_then_its_body():
    """An MkDocs admonition read as written ran its marker into its body ('!!! note "Be careful" Use a virtual
    environment.') and read a body after a blank line as code. It reads as MkDocs shows it: its title (its own, or
    its kind's, "Tip"; none for ""), then its body's blocks; the lines after it that are not indented are not in it."""
    source = ('# Install\n\n!!! note "Be careful"\n    Use a virtual environment.\n\n    - one step\n\n!!! tip\n'
              '    Upgrade pip.\nAfter it.\n\n??? warning ""\n    Back up first.\n\n!!! Wow, not an admonition\n')
    assert extract_markdown(source).paragraphs == [
        "Install", "Be careful", "Use a virtual environment.", "one step", "Tip", "Upgrade pip.", "After it.",
        "Back up first.", "!!! Wow, not an admonition"]


def test_admonitions_nested_past_the_limit_read_every_title_and_body():
    """markdown-it reads no deeper than its nesting limit; an admonition nested past it (with its title, as most
    are) lost its body and every admonition in it, "body 99" on. Each reads, in order, as quotes nested so deep do."""
    source = "".join(f"{'    ' * i}!!! note \"T{i}\"\n{'    ' * (i + 1)}body {i}\n\n" for i in range(150))
    assert extract_markdown(source).paragraphs == [text for i in range(150) for text in (f"T{i}", f"body {i}")]


def test_a_task_list_item_reads_its_box_and_its_text():
    """GitHub shows a task list item's mark ("- [ ] buy milk") as a check box: it reads as one, "☐ buy milk" (to
    do) or "☒ write code" (done), not as the brackets written; brackets outside a list item, or with no text after
    them, read as written."""
    source = "- [ ] buy milk\n- [x] write code\n1. [X] ship it\n- [ ]\n\n[ ] not a task\n"
    assert extract_markdown(source).paragraphs == [
        "\u2610 buy milk", "\u2612 write code", "1. \u2612 ship it", "[ ]", "[ ] not a task"]


@pytest.mark.parametrize(("items", "expected"), [
    ("<ol><li>Open the valve<li>Close the tap</ol>", ["1. Open the valve", "2. Close the tap"]),
    ("<ol start=3 type=a><li>x<li value=9>y<li>z</ol>", ["c. x", "i. y", "j. z"]),
    ("<ol type=I start=4><li>x<li hidden>h<li>y</ol>", ["IV. x", "V. y"]),  # (a hidden item is not counted)
    ("<ol reversed start=2><li>x<li>y</ol>", ["2. x", "1. y"]),
    # reversed with no start: down from its number of items, which a page read whole and Markdown learn only at its
    # end (they read it unnumbered), an item's value going on from there; a reversed list inside one counts its own
    ("<ol reversed><li>x<li>y<li value=7>z<li>w</ol>", ["4. x", "3. y", "7. z", "6. w"]),
    ("<ol reversed><li>x<ol reversed type=a><li>y<li>z</ol><li>w</ol>", ["2. x", "b. y", "a. z", "1. w"]),
    # a start or value read as a browser reads an integer, what follows its digits passed over; one that is no number
    # ("--5") counts on from the item before (it raised ValueError)
    ("<ol start=' 2nd'><li value='--5'>x<li value='+7 '>y<li>z</ol>", ["2. x", "7. y", "8. z"]),
    ("<ul><li>x<li>y</ul>", ["x", "y"]),
])
def test_an_ordered_list_s_items_read_their_numbers(items, expected):
    """A browser shows an ordered list's items numbered ("1. Open the valve"), as Word's list numbers read; the
    numbers were lost ("Open the valve"), so "step 2" found nothing. They read, in the list's type, from its start,
    in a page's main content, in a page read whole and in Markdown."""
    assert extract_html(ARTICLE.format(items)).paragraphs[-len(expected):] == expected
    assert extract_html(items).paragraphs == expected
    assert extract_markdown(f"Steps:\n\n{items}\n").paragraphs == ["Steps:", *expected]
    assert extract_markdown("1. Open\n2. Close\n   1. Turn\n\n7) Wait\n\n- Done\n").paragraphs == [
        "1. Open", "2. Close", "1. Turn", "7. Wait", "Done"]


def test_a_rendered_task_list_reads_its_boxes_as_markdown_s_does():
    """GitHub's and MkDocs' HTML of a task list (a check box in each item) read without the boxes' state ("write
    code"), while the same list in Markdown reads "☒ write code": a check box reads as the box shown, ticked or not,
    in a page's main content, in a page read whole and in Markdown's HTML; a hidden one reads as nothing."""
    items = ('<ul class="contains-task-list"><li class="task-list-item"><input type="checkbox" disabled> buy milk</li>'
             '<li class="task-list-item"><input type="checkbox" checked disabled>write code</li></ul>'
             '<p>Done<input type="checkbox" hidden> <input type="text" value="x"></p>')
    expected = ["\u2610 buy milk", "\u2612 write code", "Done"]
    _read_alike(items, expected)
    assert extract_markdown("- [ ] buy milk\n- [x] write code\n\nDone\n").paragraphs == expected


def test_a_google_docs_export_is_titled_by_its_title_paragraph():
    """A Google Docs HTML export has no <title>; its title is a paragraph in the Title style (class "title"), which
    was passed over for the first <h1>. It is the title now, where the page has no <title>."""
    page = ('<html><head><meta content="text/html; charset=UTF-8" http-equiv="content-type"></head>'
            '<body class="c5 doc-content"><p class="c3 title" id="h.t"><span class="c1">Harbour report</span></p>'
            '<p class="c3 subtitle"><span>Spring 2026</span></p><h1 class="c2" id="h.x1"><span>Tides</span></h1>'
            '<p class="c0"><span>The tide is high today and the harbour is full of boats.</span></p></body></html>')
    assert extract_html(page).title == "Harbour report"
    titled = page.replace("<head>", "<head><title>Report</title>")
    assert extract_html(titled).title == "Report"
    assert extract_markdown(page.split("<body")[1].split(">", 1)[1]).title == "Tides"  # (Markdown: its first heading)


@pytest.mark.parametrize(("body", "title"), [
    ("<h2>Harbour fees</h2><p>The harbour charges a fee for each berth, paid by the month.</p>", "Harbour fees"),
    ("<nav><h2>Menu</h2><ul><li><a href='/'>Home</a></li></ul></nav><main><h2>Harbour fees</h2><p>The harbour "
     "charges a fee for each berth.</p><h2>Ferries</h2><p>The ferry leaves at noon every day.</p></main>",
     "Harbour fees"),  # the first heading of the page's text, not its menu's
    ("<h3>Notes</h3><p>A short note on the fees.</p><h1>Harbour guide</h1><p>The harbour charges a fee.</p>",
     "Harbour guide"),  # an <h1> first, wherever it is
    ("<p>The harbour charges a fee for each berth, paid by the month.</p>", None),  # no heading: the file's name
])
def test_a_page_without_title_or_h1_is_titled_by_its_first_heading(body, title):
    """A page with no <title> and no <h1> but an <h2> was titled by its file's name, where a Markdown file is titled
    by its first heading of any level: the first heading of the page's text is its title."""
    extracted = extract_html(f"<html><body>{body}</body></html>")
    assert extracted.title == title
    assert extract_html(f"<html><head><title>Fees</title></head><body>{body}</body></html>").title == "Fees"


@pytest.mark.parametrize(("html", "expected"), [
    ("<p>He said <q>yes, <q>quite</q> so</q>.</p>", "He said \u201cyes, \u2018quite\u2019 so\u201d."),
    ("<ol><li><q>Stop</q> means stop</ol>", "1. \u201cStop\u201d means stop"),
    ("<p>Read <ruby>漢<rp>(</rp><rt>かん</rt><rp>)</rp>字<rt>じ</rt></ruby> aloud.</p>", "Read 漢(かん)字(じ) aloud."),
    ("<p>Read <ruby>漢字<rp>（<rt>かんじ<rp>）</ruby> aloud.</p>", "Read 漢字(かんじ) aloud."),  # (end tags left out)
    ("<p>Read <ruby>東京<rt> </rt></ruby> aloud.</p>", "Read 東京 aloud."),
])
def test_a_quotation_reads_in_its_marks_and_a_ruby_annotation_after_its_base(html, expected):
    """A browser sets a <q>'s text in quotation marks (single ones inside double): they were lost ("He said yes").
    A ruby annotation (<rt>, the reading set over its base text) was lost in a page's main content and read glued to
    the text after it elsewhere ("字じ"): it reads after its base in brackets, as Word's phonetic guides do, the
    page's own <rp> brackets not read (half-width or full-width, or none); an empty one reads as nothing. In a page's
    main content, in a page read whole and in Markdown."""
    assert extract_html(ARTICLE.format(html)).paragraphs[-1] == expected
    assert extract_html(html).paragraphs == [expected]
    assert extract_markdown(html).paragraphs == [expected]


def test_a_time_in_a_sentence_is_read_and_still_dates_the_page():
    """trafilatura removes a <time> whole, as it removes a form's controls: a date or time in a page's main content
    was lost ("The meeting is on at noon."). It reads where it is, as in a page read whole and in Markdown, and a
    page's <time datetime> still gives its date."""
    html = '<p>The meeting is on <time datetime="2026-05-04">4 May</time> at <time><b>noon</b></time>.</p>'
    expected = "The meeting is on 4 May at noon."
    page = extract_html(ARTICLE.format(html))
    assert page.paragraphs[-1] == expected and page.meta["date"] == "2026-05-04"
    assert extract_html(html).paragraphs == [expected]
    assert extract_markdown(html).paragraphs == [expected]


def test_a_mathml_formula_reads_as_shown_without_its_annotation():
    """trafilatura removes a MathML formula whole ("The energy of a body."), and the other readers read its TeX
    annotation after it, which a browser does not show ("E=mc2E=mc^2"): it reads as shown, in its place, in a page's
    main content, a page read whole and Markdown; an annotation left open ends with its formula."""
    html = ('<p>The energy <math><semantics><mrow><mi>E</mi><mo>=</mo><mi>m</mi><msup><mi>c</mi><mn>2</mn></msup>'
            '</mrow><annotation encoding="application/x-tex">E=mc^2</annotation></semantics></math> of a body.</p>')
    expected = "The energy E=mc2 of a body."
    assert extract_html(ARTICLE.format(html)).paragraphs[-1] == expected
    assert extract_html(html).paragraphs == [expected]
    assert extract_markdown(html).paragraphs == [expected]
    assert extract_markdown("<p>x <math><mi>y</mi><annotation>y</math> z</p>").paragraphs == ["x y z"]


def test_a_page_s_lone_heading_below_its_title_is_kept():
    """trafilatura takes a page's first heading out of its text as the page's title: a page with no <main> whose one
    heading is an <h2> (or an <h1> under another <title>'s words) lost that heading. It reads as the page's section;
    a lone <h1> that is the page's title stays its title."""
    body = ("<p>First unpack the box carefully and check that every part is present.</p>"
            "<p>Then attach the base plate with the four screws supplied.</p>")
    for page in (f"<html><body><h2>Installing the widget</h2>{body}</body></html>",
                 f"<html><head><title>Widgets</title></head><body><h2>Installing the widget</h2>{body}</body></html>"):
        ext = extract_html(page)
        assert ext.paragraphs[0] == "Installing the widget"
        assert [m["section"] for m in ext.paragraph_meta] == ["Installing the widget"] * 3
    titled = extract_html(f"<html><body><h1>Installing the widget</h1>{body}</body></html>")
    assert titled.title == "Installing the widget" and "Installing the widget" not in titled.paragraphs


def test_a_form_s_heading_does_not_read_a_page_whole():
    """A page with no <h1> whose only heading is a form's (a comment form's "Leave a reply", a search box's) was read
    whole, the form with it, as though trafilatura had lost a section of the page: the form is boilerplate and is
    dropped, as it is where the page has no heading at all."""
    body = ("<p>First unpack the box carefully and check that every part is present before you start.</p>"
            "<p>Then attach the base plate with the four screws supplied, and tighten them by hand.</p>")
    forms = ("<form><h3>Leave a reply</h3><p>Your email address will not be published.</p><label>Comment</label>"
             "<textarea></textarea><button>Post comment</button></form>",
             "<div class='search'><form><h2>Search this site</h2><input><button>Go</button></form></div>")
    for form in forms:
        for page in (f"<html><head><title>Widgets</title></head><body><article>{body}{form}</article></body></html>",
                     f"<html><head><title>Widgets</title></head><body><div>{body}</div>{form}</body></html>"):
            assert extract_html(page).paragraphs == extract_html(page.replace(form, "")).paragraphs, page


def test_a_wikipedia_formula_shown_as_an_image_reads_as_its_alt_text():
    """Wikipedia hides a formula's MathML (``display: none``) and shows its image, whose alt text (its TeX) is the
    only text a reader sees: the formula was lost ("The identity holds"). It reads as that TeX, out of its
    ``\\displaystyle`` wrapper; where the MathML shows, it reads as shown and the image is not read again. In a page's
    main content, a page read whole and Markdown."""
    html = ('<p>The identity <span class="mwe-math-element"><span class="mwe-math-mathml-inline" style="display: none;">'
            '<math><semantics><mrow><msup><mi>x</mi><mn>2</mn></msup></mrow><annotation encoding="application/x-tex">'
            '{\\displaystyle x^2}</annotation></semantics></math></span><img src="f.svg" alt="{\\displaystyle x^{2}}" '
            'class="mwe-math-fallback-image-inline mw-invert"></span> holds.</p>')
    _read_alike(html, ["The identity x^{2} holds."])
    _read_alike(html.replace(' style="display: none;"', ""), ["The identity x2 holds."])
    assert extract_html('<p>A <img src="logo.png" alt="company logo"> page.</p>').paragraphs == ["A page."]


def test_a_form_s_controls_read_as_shown_apart_from_the_text_beside_them():
    """Controls set in a page's content read as a reader sees them: a fieldset's legend a paragraph, labels, buttons,
    a list's options and a text area's text each apart from the words beside them. trafilatura dropped them,
    gluing their neighbours ("Picknow"), and the other readers ran them together ("CardVisaMastercard"). A <form>
    in a page's main content is boilerplate (a search box, a comment form), as trafilatura reads it; a page that is
    only a form is read whole."""
    html = ("<fieldset><legend>Shipping</legend><label>Street</label><input><label>City</label><input></fieldset>"
            "<p>Pick<select><optgroup label='Cards'><option>Visa<option>Mastercard</optgroup></select>or "
            "<textarea>Notes here</textarea><button>Order</button><button>Cancel</button></p>")
    _read_alike(html, ["Shipping", "Street City", "Pick Visa Mastercard or Notes here Order Cancel"])
    comment = "<form><p><label>Your name</label><input><button>Post comment</button></p></form>"
    assert not any("comment" in text for text in extract_html(ARTICLE.format(comment)).paragraphs)
    assert extract_html(comment).paragraphs == ["Your name Post comment"]
