"""The text of SmartArt diagrams and charts in Office files, which lives in parts of their own, for ``indexer.slides``
and ``indexer.word``.

    spanseek corpus from-files talk.pptx handbook.docx --out corpus.jsonl

A slide's or a Word paragraph's drawing names the part that holds its text by a relationship id (``drawing_ids``): a
SmartArt diagram's data part (``ppt/diagrams/data1.xml``, ``word/diagrams/data1.xml``) or a chart's part
(``ppt/charts/chart1.xml``). ``drawing_texts`` reads it as paragraphs: a diagram's text points (its boxes) in the
diagram's order (each box, then the boxes under it), a chart's title and its axes' titles. The copy of a diagram
drawn as shapes (``diagrams/drawing1.xml``) repeats the data's text and is not read; a chart's numbers and
category labels are left out, as a picture's are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_DGM = "{http://schemas.openxmlformats.org/drawingml/2006/diagram}"
_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
# the points of a diagram that are boxes of its text (an assistant's too, in an organisation chart); the others are
# the diagram itself, the lines between boxes, and how they are drawn
_BOXES = {"node", "asst"}
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
        titles = [root.find(f"{_C}chart/{_C}title"), *root.iterfind(f"{_C}chart/{_C}plotArea/*/{_C}title")]
        return [text for title in titles if title is not None and (text := _title(title))]
    return []


def related_texts(part: Any, rid: str) -> list[str]:
    """``drawing_texts`` of the part a part (a slide, a Word document) relates by this id; none where it relates
    none, or a file outside the package."""
    rel = part.rels.get(rid)
    return [] if rel is None or rel.is_external else drawing_texts(rel.target_part.blob)


def _line(texts: Iterator[str]) -> str:
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
