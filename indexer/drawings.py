"""The text of SmartArt diagrams and charts in Office files, which lives in parts of their own, for ``indexer.slides``
and ``indexer.word``.

    spanseek corpus from-files talk.pptx handbook.docx --out corpus.jsonl

A slide's or a Word paragraph's drawing names the part that holds its text by a relationship id (``drawing_ids``): a
SmartArt diagram's data part (``ppt/diagrams/data1.xml``, ``word/diagrams/data1.xml``) or a chart's part
(``ppt/charts/chart1.xml``). ``drawing_texts`` reads it as paragraphs: a diagram's text points (its boxes) in the
diagram's order (each box, then the boxes under it); a chart's title (or the automatic one, its only series' name)
with its category labels ("Sales by region: North, South"; labels of several levels grouped: "Cargo: 2023 (Q1, Q2),
2024 (Q1)"), its axes' titles and the series' names it shows (in a legend, unless it names a pie's slices, or data
labels). The copy of a
diagram drawn as shapes (``diagrams/drawing1.xml``) repeats the data's text and is not read; a chart's numbers are
left out, as a picture's are.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

_DGM = "{http://schemas.openxmlformats.org/drawingml/2006/diagram}"
_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
# the points of a diagram that are boxes of its text (an assistant's too, in an organisation chart); the others are
# the diagram itself, the lines between boxes, and how they are drawn
_BOXES = {"node", "asst"}
# the chart groups whose legend names their points (a pie's slices), not their series (``_points_in_legend``)
_BY_POINT = {f"{_C}pieChart", f"{_C}pie3DChart", f"{_C}doughnutChart", f"{_C}ofPieChart"}
# the elements of a drawing that name a part holding its text (``drawing_ids``)
DRAWINGS = {f"{_DGM}relIds", f"{_C}chart"}


def drawing_ids(element: Any) -> Iterator[str]:
    """The relationship ids of the SmartArt diagrams' data and the charts drawn in an element (a slide's shape, a
    Word run), in order."""
    for found in element.iter(*DRAWINGS):
        rid = found.get(f"{_R}dm") if found.tag == f"{_DGM}relIds" else found.get(f"{_R}id")
        if rid:
            yield rid


def drawing_texts(blob: bytes) -> list[str]:
    """A diagram data part's or a chart part's text as paragraphs (one a box or a title); none for another part, or
    one whose XML is damaged (the rest of the file is read)."""
    from lxml import etree

    try:
        root = etree.fromstring(blob, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return []
    if root.tag == f"{_DGM}dataModel":
        return _diagram(root)
    if root.tag == f"{_C}chartSpace":
        return _chart(root)
    return []


def related_texts(part: Any, rid: str) -> list[str]:
    """``drawing_texts`` of the part a part (a slide, a Word document) relates by this id; none where it relates
    none, or a file outside the package."""
    rel = part.rels.get(rid)
    return [] if rel is None or rel.is_external else drawing_texts(rel.target_part.blob)


def _line(texts: Iterable[str]) -> str:
    return " ".join(" ".join(texts).split())


def _paragraphs(element: Any) -> str:
    """The DrawingML paragraphs (a:p) of a text body on one line."""
    return _line(_line(t.text or "" for t in p.iter(f"{_A}t")) for p in element.iter(f"{_A}p"))


def _title(title: Any) -> str:
    """A chart's or an axis's title: its own text, or the text of the worksheet cell it shows."""
    rich = title.find(f"{_C}tx/{_C}rich")
    if rich is not None:
        return _paragraphs(rich)
    return _line(v.text or "" for v in title.iterfind(f"{_C}tx/{_C}strRef/{_C}strCache/{_C}pt/{_C}v"))


def _chart(root: Any) -> list[str]:
    """A chart's text as it shows it: its title, with its categories' labels after a colon ("Sales by region: North,
    South"; the labels alone where it has no title), its axes' titles, then the names of its series that the chart
    shows (``_named``: in its legend, or in data labels) and no text before gives. The title is its own text or the
    cell it shows; without one (and unless it was deleted: ``autoTitleDeleted``) a chart of one series shows that
    series' name, as Office draws it. A series' name shown nowhere on the slide is not read."""
    chart = root.find(f"{_C}chart")
    if chart is None:
        return []
    series = [(ser, group) for group in chart.iterfind(f"{_C}plotArea/*") for ser in group.iterfind(f"{_C}ser")]
    names = [_line(_values(ser.find(f"{_C}tx"))) for ser, _ in series]
    title = chart.find(f"{_C}title")
    shown = _title(title) if title is not None else ""
    if not shown and len(series) == 1 and not _on(chart.find(f"{_C}autoTitleDeleted")):
        shown = names[0]
    categories = next((labels for ser, _ in series if (labels := _values(ser.find(f"{_C}cat")))), [])
    head = ": ".join(filter(None, [shown, ", ".join(categories)]))
    axes = [label for axis in chart.iterfind(f"{_C}plotArea/*/{_C}title") if (label := _title(axis))]
    named = _named(chart, series)
    legend = ", ".join(name for name, (ser, _) in zip(names, series, strict=True)
                       if name and id(ser) in named and name not in (shown, *axes))
    return [text for text in (head, *axes, legend) if text]


def _on(flag: Any) -> bool:
    """Whether a chart's on-off element (``c:delete``, ``c:showSerName``) is there and on (its ``val`` is true when
    left out)."""
    return flag is not None and flag.get("val", "true") in ("1", "true")


def _named(chart: Any, series: list[tuple[Any, Any]]) -> set[int]:
    """The ids of a chart's series (each with its chart group) whose names it shows: in its legend (``c:legend``,
    but for entries deleted from it; a legend that names points, ``_points_in_legend``, names no series), or in
    data labels that show the series' name (``c:showSerName``: the series' own labels or a point's, else its
    group's; ``c:delete`` hides them)."""
    legend = chart.find(f"{_C}legend")
    hidden = set() if legend is None else {
        entry.find(f"{_C}idx").get("val") for entry in legend.iterfind(f"{_C}legendEntry")
        if entry.find(f"{_C}idx") is not None and _on(entry.find(f"{_C}delete"))}
    named = set()
    for position, (ser, group) in enumerate(series):
        index = ser.find(f"{_C}idx")
        if (legend is not None and not _points_in_legend(group, len(series))
                and (str(position) if index is None else index.get("val")) not in hidden):
            named.add(id(ser))
            continue
        own = ser.find(f"{_C}dLbls")
        if own is not None and any(_on(label.find(f"{_C}showSerName")) and not _on(label.find(f"{_C}delete"))
                                   for label in own.iterfind(f"{_C}dLbl")):
            named.add(id(ser))  # a point's label shows it
            continue
        for labels in (own, group.find(f"{_C}dLbls")):
            if labels is not None and (_on(labels.find(f"{_C}delete")) or labels.find(f"{_C}showSerName") is not None):
                if _on(labels.find(f"{_C}showSerName")) and not _on(labels.find(f"{_C}delete")):
                    named.add(id(ser))
                break
    return named


def _points_in_legend(group: Any, series: int) -> bool:
    """Whether a chart's legend names the points of a chart group (of a chart of ``series`` series), a colour each,
    rather than its series: a pie's or doughnut's slices, or the points of a chart's only series coloured by point
    (``c:varyColors``), named by their categories, which its title's line reads."""
    return group.tag in _BY_POINT or (series == 1 and _on(group.find(f"{_C}varyColors")))


def _values(element: Any) -> list[str]:
    """The labels a chart's series name or categories (``c:tx``, ``c:cat``) show, in order: the cells' cached text,
    or text written in the chart; numbers only as written in the General format (a date's serial number or a
    formatted amount would not read as the chart shows it). Categories of several levels read each outer label
    with the labels under it in brackets, as the chart groups them ("2023 (Q1, Q2), 2024 (Q1)": ``_grouped``)."""
    if element is None:
        return []
    if (v := element.find(f"{_C}v")) is not None:  # a series name written in the chart
        return [text] if (text := _line([v.text or ""])) else []
    levels = element.find(f"*/{_C}multiLvlStrCache")
    if levels is not None:  # its levels are listed innermost first
        labeled = [_labels(level) for level in levels.iterfind(f"{_C}lvl")][::-1]
        count = levels.find(f"{_C}ptCount")
        counted = count.get("val", "") if count is not None else ""
        end = max([int(counted) if counted.isdecimal() else 0, *(i + 1 for level in labeled for i in level)])
        return _grouped(labeled, 0, end) if labeled else []
    sources = [element.find(path) for path in (f"*/{_C}strCache", f"{_C}strLit", f"*/{_C}numCache", f"{_C}numLit")]
    source = next((found for found in sources if found is not None), None)
    if source is None or source.findtext(f"{_C}formatCode", "General") != "General":
        return []
    return [label for _, label in sorted(_labels(source).items())]


def _labels(source: Any) -> dict[int, str]:
    """A cache's (or one level's) labels by their points' indexes, empty ones left out."""
    labels = {}
    for pt in source.iterfind(f"{_C}pt"):
        idx = pt.get("idx", "0")
        if label := _line([pt.findtext(f"{_C}v") or ""]):
            labels[int(idx) if idx.isdecimal() else 0] = label
    return labels


def _grouped(levels: list[dict[int, str]], start: int, end: int) -> list[str]:
    """The labels of categories ``start`` to ``end`` (not included) of several ``levels`` (each one's labels by the
    index of the first category it spans, the outermost first): each outer label with the labels under it in
    brackets; inner labels under no outer one alone. Each level's labels are walked once, in order, not the indexes
    between them (a file sets those at will)."""
    return _grouped_in([sorted(level) for level in levels], levels, start, end)


def _grouped_in(keys: list[list[int]], levels: list[dict[int, str]], start: int, end: int) -> list[str]:
    """``_grouped`` over the levels' indexes in order (``keys``)."""
    outer, inner = levels[0], levels[1:]
    starts = keys[0][bisect.bisect_left(keys[0], start):bisect.bisect_left(keys[0], end)]
    if not inner:
        return [outer[i] for i in starts]
    first = starts[0] if starts else end
    out = _grouped_in(keys[1:], inner, start, first) if first > start else []
    for i, j in itertools.pairwise([*starts, end]) if starts else ():
        under = _grouped_in(keys[1:], inner, i, j)
        out.append(f"{outer[i]} ({', '.join(under)})" if under else outer[i])
    return out


def _diagram(root: Any) -> list[str]:
    """A diagram's boxes' text in its order: from the diagram's root, each box then the boxes under it, in their order
    (``srcOrd``); boxes no connection reaches after them, in the order the part lists them."""
    points = {p.get("modelId"): p for p in root.iterfind(f"{_DGM}ptLst/{_DGM}pt")}
    children: dict[str | None, list[tuple[int, str]]] = {}
    for cxn in root.iterfind(f"{_DGM}cxnLst/{_DGM}cxn"):
        if cxn.get("type", "parOf") == "parOf":
            order = cxn.get("srcOrd", "0")
            children.setdefault(cxn.get("srcId"), []).append((int(order) if order.isdecimal() else 0, cxn.get("destId")))
    ordered: dict[str, None] = {}  # the points in reading order, each once (a connection loop reads nothing twice)
    stack = [i for i, p in points.items() if p.get("type") == "doc"][::-1]
    while stack:
        point = stack.pop()
        if point in ordered or point not in points:
            continue
        ordered[point] = None
        stack += [dest for _, dest in sorted(children.get(point, []), key=lambda c: c[0])][::-1]  # first on top
    ordered |= dict.fromkeys(points)
    texts = []
    for point in ordered:
        body = points[point].find(f"{_DGM}t")
        if points[point].get("type", "node") in _BOXES and body is not None and (text := _paragraphs(body)):
            texts.append(text)
    return texts
