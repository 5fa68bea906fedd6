"""A directory of text, Markdown and HTML files, end to end: `corpus from-files` -> `index build` -> search in
process, through the CLI, over HTTP and with the Python client; every hit carries its document's metadata.

    .venv/bin/python -m pytest -q tests/service/test_files_end_to_end.py
"""

from __future__ import annotations

import json

import pytest

from spanseek.cli import main
from spanseek.client import Client
from spanseek.core.io import read_corpus
from spanseek.core.loading import open_searcher
from spanseek.core.model import load_tokenizer
from spanseek.core.params import SearchParams
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.chunking import ChunkOptions, model_token_counter
from spanseek.indexer.ingest import IngestOptions, from_files
from spanseek.service.app import create_app
from tests.conftest import make_paragraph

OPTS = BuildOptions(shard_passages=5, progress=False, precision="fp32")
QUESTIONS = ["Who built the castle?", "When was the harbour built?"]


def write_docs(root, rng_seed: int = 0) -> None:
    import random

    rng = random.Random(rng_seed)
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "castle.md").write_text(
        f"---\ntitle: The castle\nurl: https://example.org/castle\ntags: [history]\n---\n# Castle\n\n"
        f"{make_paragraph(rng, 3)}\n\n## Later\n\n{make_paragraph(rng, 4)}\n")
    (root / "harbour.html").write_text(
        f"<html><head><title>Harbour</title><meta name='author' content='Ann'><script>var x = 1;</script></head>"
        f"<body><h1>The harbour</h1><p>{make_paragraph(rng, 3)}</p><p>{make_paragraph(rng, 2)}</p></body></html>")
    (root / "notes.txt").write_text(f"{make_paragraph(rng, 2)}\n\n{make_paragraph(rng, 3)}")


@pytest.fixture(scope="module")
def files_index(tmp_path_factory, tiny_model_dir, tiny_config):
    """(corpus, index directory) of a small directory of files, chunked with the model's tokenizer."""
    root = tmp_path_factory.mktemp("files")
    write_docs(root / "docs")
    count = model_token_counter(load_tokenizer(tiny_config))
    opts = IngestOptions(chunk=ChunkOptions(max_tokens=30, overlap=6, min_tokens=8), extra_meta={"collection": "kb"})
    report = from_files([root / "docs"], root / "corpus.jsonl", count, opts)
    assert report.documents == 3 and report.passages > 3 and not report.skipped
    build_index(root / "corpus.jsonl", tiny_model_dir, root / "index", OPTS)
    return root / "corpus.jsonl", root / "index"


@pytest.fixture(scope="module")
def expected_meta(files_index):
    return {d.id: (d.title, d.meta) for d in read_corpus(files_index[0])}


@pytest.fixture(scope="module")
def hit_meta(files_index, expected_meta):
    """A hit's expected metadata from its document id and passage: its document's, then its passage's own (the
    heading path of a Markdown section)."""
    own = {(d.id, text): d.paragraph_meta(i) for d in read_corpus(files_index[0]) for i, text in enumerate(d.paragraphs)}
    return lambda doc_id, passage: {**expected_meta[doc_id][1], **own[doc_id, passage]}


def test_in_process_search_returns_metadata(files_index, expected_meta, tiny_model_dir):
    searcher = open_searcher(files_index[1], tiny_model_dir, device="cpu", precision="fp32")
    assert expected_meta["guides/castle.md"][1]["url"] == "https://example.org/castle"
    passages = {p["text"]: p.get("meta", {}) for p in searcher.index.passages}
    sections = set()
    for unit in ("phrase", "passage", "doc"):
        for hits in searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3)):
            assert len(hits) == 3
            for h in hits:
                title, meta = expected_meta[h.doc_id]  # the document's metadata, and its passage's own (a section)
                assert h.passage in passages and (h.title, h.meta) == (title, {**meta, **passages[h.passage]})
                sections.add(h.meta.get("section"))
    assert "Castle > Later" in sections  # the Markdown file's second section (front matter gives another title)
    docs = searcher.search(QUESTIONS[:1], SearchParams(unit="doc", top_k=5))[0]
    assert sorted(h.doc_id for h in docs) == ["guides/castle.md", "harbour.html", "notes.txt"]


def test_cli_search_prints_metadata(files_index, hit_meta, tiny_model_dir, capsys):
    assert main(["search", "--index", str(files_index[1]), "--model", str(tiny_model_dir), "--unit", "passage",
                 "--top-k", "2", "--device", "cpu", QUESTIONS[0]]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    hits = json.loads(line)["hits"]
    assert len(hits) == 2 and all(h["meta"] == hit_meta(h["doc_id"], h["passage"]) for h in hits)


def test_http_and_client_return_metadata(files_index, expected_meta, hit_meta, tiny_model_dir, settings_for, live):
    app = create_app(settings_for(index=files_index[1]))
    with live(app) as url:
        with Client(url) as client:
            for unit in ("phrase", "passage", "doc"):
                hits = client.search(QUESTIONS[1], unit=unit, top_k=3).hits
                assert len(hits) == 3
                assert all((h.title, h.meta) == (expected_meta[h.doc_id][0], hit_meta(h.doc_id, h.passage)) for h in hits)
        import httpx

        raw = httpx.post(url + "/search?unit=doc", json={"query": QUESTIONS[0], "top_k": 1}).json()
    assert raw["results"][0]["hits"][0]["meta"]["collection"] == "kb"


def test_added_documents_keep_their_metadata(files_index, tiny_model_dir, tmp_path):
    corpus, _ = files_index
    build_index(corpus, tiny_model_dir, tmp_path / "index", OPTS)
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "bridge.md").write_text("---\nurl: https://example.org/bridge\n---\n# Bridge\n\n"
                                                 "In 1620 Cato built the bridge over the river.")
    from_files([tmp_path / "more"], tmp_path / "more.jsonl")
    add_documents(tmp_path / "index", tmp_path / "more.jsonl", model=tiny_model_dir, opts=OPTS)
    searcher = open_searcher(tmp_path / "index", tiny_model_dir, device="cpu", precision="fp32")
    hits = {h.doc_id: h for h in searcher.search(["Who built the bridge?"], SearchParams(unit="doc", top_k=10))[0]}
    assert hits["bridge.md"].meta == {"source": "bridge.md", "url": "https://example.org/bridge"}
    assert hits["bridge.md"].title == "Bridge" and hits["harbour.html"].meta["author"] == "Ann"
