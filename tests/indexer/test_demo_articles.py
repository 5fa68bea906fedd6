"""The demo corpus's shortest article written as a PDF, Word, Markdown and HTML file (as ``bench/document_formats.py``
writes them) reads back as its title and paragraphs, byte for byte: the readers' rules for columns, running heads,
footnotes, hyphens, tables and boilerplate leave running text as it is.

    .venv/bin/python -m pytest -q tests/indexer/test_demo_articles.py
"""

from __future__ import annotations

import gzip
import html
import json
from pathlib import Path

import pytest

from spanseek.indexer.documents import extract_pdf
from spanseek.indexer.markup import extract_html, extract_markdown
from spanseek.indexer.word import extract_docx

pytest.importorskip("fpdf")
pytest.importorskip("docx")
document_formats = pytest.importorskip("bench.document_formats")

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "corpus.jsonl.gz"


def write_html(article: dict, path: Path) -> None:
    """A news site's page: navigation, the article with its title, a footer."""
    body = "".join(f"<p>{html.escape(p['context'])}</p>" for p in article["paragraphs"])
    path.write_text(f"<html><head><title>{html.escape(article['title'])}</title></head><body><nav><a href='/'>Home"
                    f"</a> <a href='/about'>About</a></nav><main><article><h1>{html.escape(article['title'])}</h1>"
                    f"{body}</article></main><footer>Copyright 2026 Example News</footer></body></html>")


@pytest.mark.skipif(not DEMO.exists() or not document_formats.FONT.exists(), reason="needs the demo corpus and DejaVu")
@pytest.mark.parametrize("fmt", ["pdf", "docx", "md", "html"])
def test_a_demo_article_reads_back_as_its_paragraphs(tmp_path, fmt):
    with gzip.open(DEMO, "rt", encoding="utf-8") as f:
        doc = min(map(json.loads, f), key=lambda d: sum(map(len, d["paragraphs"])))
    article = {"title": doc["title"], "paragraphs": [{"context": p} for p in doc["paragraphs"]]}
    path = tmp_path / f"article.{fmt}"
    {**document_formats.WRITERS, "html": write_html}[fmt](article, path)
    read = {"pdf": extract_pdf, "docx": extract_docx, "md": lambda p: extract_markdown(p.read_text()),
            "html": lambda p: extract_html(p.read_text())}[fmt](path)
    assert read.title == doc["title"]
    assert read.paragraphs == [doc["title"], *doc["paragraphs"]]
