"""The write API (service.writes, service.live): documents written over HTTP are searchable when acknowledged,
refused whole with a 422 naming the field, deleted by id or filter, kept across a restart, merged in the background.

    .venv/bin/python -m pytest -q tests/service/test_writes.py
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from spanseek.core.phrase_index import Manifest
from spanseek.service.app import create_app
from tests.service.conftest import serving

KEY = {"X-API-Key": "key"}
ADMIN = {"X-API-Key": "admin"}
DOC = {"id": "new-1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge of the island.",
                                                        "In 1460 Hugo built the island church."],
       "meta": {"lang": "en", "year": 1450}}


def found(client, doc_id: str, unit: str = "doc", headers=KEY) -> bool:
    r = client.post(f"/search?unit={unit}", headers=headers,
                    json={"query": "who built the harbour bridge?", "top_k": 5, "filter": {"doc_ids": [doc_id]}})
    assert r.status_code == 200, r.text
    return any(h["doc_id"] == doc_id for h in r.json()["results"][0]["hits"])


def test_a_written_document_is_searchable_when_acknowledged_and_a_restart_keeps_it(write_settings):
    settings = write_settings()
    with serving(create_app(settings)) as client:
        r = client.put("/documents", headers=KEY, json={"documents": [DOC]})
        assert r.status_code == 200, r.text
        assert r.json()["documents"] == 1 and r.json()["passages"] == 2 and r.json()["tokens"] > 10
        assert all(found(client, "new-1", unit) for unit in ("phrase", "passage", "doc"))
        assert client.get("/documents/new-1", headers=KEY).json() == DOC
        r = client.put("/documents", headers=KEY, json={**DOC, "id": "d0", "title": "Replaced"})  # one, unwrapped
        assert r.status_code == 200 and client.get("/documents/d0", headers=KEY).json()["title"] == "Replaced"
        info = client.get("/info", headers=KEY).json()
        writes, index = info["service"]["writes"], info["index"]
        assert writes["segment_documents"] == 2 and writes["tombstones"] == 1 and writes["wal_bytes"] > 0
        # what searches see: 6 base documents, one replaced, and one new; on disk, the base and the log
        assert (index["documents"], index["passages"]) == (7, 24 - 4 + 2 + 2)  # d0: 4 passages, then 2
        assert index["size_bytes"] == index["base_size_bytes"] + writes["wal_bytes"] > index["base_size_bytes"] > 0
        metrics = client.get("/metrics").text
        assert "spanseek_documents_written_total 2.0" in metrics and "spanseek_wal_bytes" in metrics
    with serving(create_app(settings)) as client:  # the log is replayed at start
        assert found(client, "new-1") and client.get("/documents/d0", headers=KEY).json()["title"] == "Replaced"


def test_the_base_lets_go_of_its_scan_copy_once_a_segmented_searcher_serves(write_settings, monkeypatch):
    """Until the first write the base index is served (its flat scans keep their transposed copy of the vectors); a
    write publishes a searcher over base + segment, which faiss searches, and the base's copy is let go."""
    from spanseek.core import flat_search

    monkeypatch.setattr(flat_search, "PRODUCT", "pieces")  # the copy is kept on any CPU
    app = create_app(write_settings())
    with serving(app) as client:
        live = app.state.service.live
        assert live.base.dense.transposed_vectors() is not None
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert live.current is not live.base and live.base.dense._transposed is None
        assert found(client, "new-1")


def test_a_malformed_document_is_refused_whole_naming_the_field(write_settings):
    with serving(create_app(write_settings())) as client:
        bad = [
            ({"documents": [DOC, {"id": "x", "paragraphs": ["ok", 3]}]}, ["body", "documents", "1", "paragraphs"]),
            ({"documents": [DOC, {"id": "x", "title": "\ud800", "paragraphs": ["ok"]}]},
             ["body", "documents", "1", "title"]),
            ({"documents": [DOC, {"id": "x", "paragraphs": ["ok"], "meta": {"big": "x" * 20000}}]},
             ["body", "documents", "1", "meta"]),
            ({"documents": [DOC, {"id": "x", "paragraphs": ["  "]}]}, ["body", "documents", "1", "paragraphs"]),
            ({"documents": [DOC, DOC]}, ["body", "documents", "1", "id"]),
            ({"documents": [DOC, {"id": "   ", "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
            ({"documents": [DOC, {"id": True, "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
            ({"documents": [DOC, {"id": 1.5, "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
            # JSON the corpus reader (and so a merge) refuses: a lone surrogate or a number that is not finite
            ({"documents": [DOC, {"id": "x", "paragraphs": ["ok"], "meta": {"k": "\ud800"}}]},
             ["body", "documents", "1", "meta"]),
            ({"documents": [DOC, {"id": "x", "paragraphs": ["ok"], "meta": {"\udfff": 1}}]},
             ["body", "documents", "1", "meta"]),
            ({"documents": [DOC, {"id": "x", "paragraphs": ["ok"], "passage_meta": [{"k": "\udfff"}]}]},
             ["body", "documents", "1", "passage_meta"]),
            # a document whose id is a field's name: the field at fault is named, not the id
            ({"documents": [DOC, {"id": "title", "paragraphs": ["ok"], "meta": {"k": "\ud800"}}]},
             ["body", "documents", "1", "meta"]),
            ({"documents": [DOC, {"id": "meta", "paragraphs": ["ok", "\ud800"]}]},
             ["body", "documents", "1", "paragraphs"]),
            # written, then never found by id: GET and DELETE /documents/line%0Abreak were 404s
            ({"documents": [DOC, {"id": "line\nbreak", "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
            ({"documents": [DOC, {"id": "a\u2028b", "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
            ({"documents": [DOC, {"id": "nul\u0000", "paragraphs": ["ok"]}]}, ["body", "documents", "1", "id"]),
        ]
        for body, loc in bad:
            r = client.put("/documents", headers={**KEY, "Content-Type": "application/json"},
                           content=json.dumps(body))  # (escaped: a lone surrogate is sent as \\ud800)
            assert r.status_code == 422, r.text
            assert any(d["loc"][: len(loc)] == loc for d in r.json()["details"]), (loc, r.json()["details"])
        for number in ("NaN", "Infinity", "-Infinity", "1e400"):
            body = '{"documents": [{"id": "x", "paragraphs": ["ok"], "meta": {"score": NUMBER}}]}'
            r = client.put("/documents", headers={**KEY, "Content-Type": "application/json"},
                           content=body.replace("NUMBER", number))
            assert r.status_code == 422 and "not finite" in r.json()["details"][0]["msg"], (number, r.text)
        # a key given twice in one object: the parser took the last ("new-1" was written as "x"), with no word
        for body, loc in [('{"documents": [{"id": "new-1", "paragraphs": ["ok"], "id": "x"}]}', "documents.0.id"),
                          ('{"id": "new-1", "paragraphs": ["ok"], "meta": {"k": 1, "\\u006b": 2}}', "meta.k")]:
            r = client.put("/documents", headers={**KEY, "Content-Type": "application/json"}, content=body)
            assert r.status_code == 422 and f"body.{loc}: given more than once" in r.json()["message"], r.text
        assert client.get("/documents/new-1", headers=KEY).status_code == 404  # nothing of them was written
        assert not found(client, "new-1")
        # a whole-number id is its digits, as on a corpus line (it was a 422)
        assert client.put("/documents", headers=KEY, json={**DOC, "id": 7}).status_code == 200
        assert client.get("/documents/7", headers=KEY).json()["id"] == "7"


def test_metadata_nested_deeper_than_answers_render_is_refused_and_what_is_written_is_served(write_settings):
    """Metadata nested 300 levels deep was written (200); then GET /documents/{id}, and every search answer holding
    the document, was a 500 (the JSON renderer stops at 255 levels). It is a 422 naming the field, and nothing is
    written; metadata at the limit is written, returned by id and rendered with its hits."""
    from spanseek.service.schemas import MAX_META_DEPTH

    def nested(levels: int) -> dict:  # levels of objects and lists, the metadata object the first
        return {"a": json.loads("[" * (levels - 1) + "]" * (levels - 1))}

    with serving(create_app(write_settings())) as client:
        for field, value in (("meta", nested(300)), ("meta", nested(MAX_META_DEPTH + 1)),
                             ("passage_meta", [None, nested(MAX_META_DEPTH + 1)])):
            r = client.put("/documents", headers=KEY, json={**DOC, field: value})
            assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["body", "documents", "0", field], r.text
            assert f"nested more than {MAX_META_DEPTH} levels" in r.json()["message"]
        assert client.get("/documents/new-1", headers=KEY).status_code == 404
        deepest = {**DOC, "meta": nested(MAX_META_DEPTH), "passage_meta": [nested(MAX_META_DEPTH), None]}
        assert client.put("/documents", headers=KEY, json=deepest).status_code == 200
        assert client.get("/documents/new-1", headers=KEY).json()["meta"] == deepest["meta"]
        r = client.post("/search?unit=passage", headers=KEY, json={"query": "who built the harbour bridge?",
                                                                  "filter": {"doc_ids": ["new-1"]}})
        assert r.status_code == 200 and r.json()["results"][0]["hits"], r.text
        assert any(h["meta"]["a"] == deepest["meta"]["a"] for h in r.json()["results"][0]["hits"])


def test_front_matter_nested_too_deeply_is_refused_as_a_file(write_settings):
    """A Markdown file's front matter becomes the document's metadata: nested 300 levels deep it was written by
    PUT /files/{name} (200), then every answer holding the document was a 500. It is a 422 naming the file."""
    from spanseek.service.schemas import MAX_META_DEPTH

    def front(levels: int) -> bytes:  # the metadata object, then a list in a list...
        return f"---\nx: {'[' * (levels - 1)}{']' * (levels - 1)}\n---\n\nGala built the harbour bridge.\n".encode()

    with serving(create_app(write_settings())) as client:
        r = client.put("/files/deep.md", headers=KEY, content=front(300))
        assert r.status_code == 422 and r.json()["error"] == "unreadable_file", r.text
        message = r.json()["message"]
        assert message.startswith("deep.md: ") and "its 'meta' is nested more than" in message, r.text
        assert client.get("/documents/deep.md", headers=KEY).status_code == 404
        assert client.put("/files/flat.md", headers=KEY, content=front(MAX_META_DEPTH)).status_code == 200
        assert client.get("/documents/flat.md", headers=KEY).status_code == 200


def test_an_add_writes_new_ids_only_and_refuses_held_ones_whole(write_settings):
    """POST /documents is `index add` over HTTP: PUT replaced a held document silently, so a client could not add
    without overwriting, nor retry an add whose answer it lost without writing the document twice."""
    with serving(create_app(write_settings())) as client:
        assert client.post("/documents", headers=KEY, json={"documents": [DOC]}).json()["documents"] == 1
        assert found(client, "new-1")
        other = {**DOC, "id": "new-2", "title": "Other"}
        for held in ({**DOC, "title": "Replaced"}, {"id": "d0", "paragraphs": ["In 1300 Dara built a mill."]}):
            r = client.post("/documents", headers=KEY, json={"documents": [other, held]})
            assert r.status_code == 409 and r.json()["error"] == "conflict", r.text
            assert repr(held["id"]) in r.json()["message"] and "PUT /documents replaces" in r.json()["message"]
            assert client.get("/documents/new-2", headers=KEY).status_code == 404  # nothing of it written
        assert client.get("/documents/new-1", headers=KEY).json()["title"] == DOC["title"]
        assert client.delete("/documents/new-1", headers=KEY).status_code == 200
        assert client.post("/documents", headers=KEY, json=DOC).status_code == 200  # deleted: new again
        assert 'spanseek_errors_total{route="/documents",type="conflict"} 2.0' in client.get("/metrics").text


def test_a_write_over_max_write_tokens_is_refused_naming_its_largest_document_before_encoding(write_settings,
                                                                                             monkeypatch):
    """A body of max_body_bytes may hold a token a byte (a megabyte of punctuation is a million tokens, minutes of
    encoding): PUT and POST /documents took it whole, where a file of as many tokens was refused (max_file_tokens)."""
    from spanseek.indexer.live import DocumentEncoder

    encoded = []
    steps = DocumentEncoder.chunk_steps
    monkeypatch.setattr(DocumentEncoder, "chunk_steps", lambda self, toks: encoded.append(1) or steps(self, toks))
    small = {"id": "small", "paragraphs": ["! " * 20]}  # a token a "!"
    big = {"id": "big", "paragraphs": ["! " * 40]}
    with serving(create_app(write_settings(max_write_tokens=50))) as client:
        for route in (client.put, client.post):
            r = route("/documents", headers=KEY, json={"documents": [small, big]})
            assert r.status_code == 413 and r.json()["error"] == "payload_too_large", r.text
            assert r.json()["message"] == (
                "the 2 documents of this write (the largest, document 1 ('big'), 40): 60 tokens, more than this "
                "server encodes of one write (max_write_tokens 50); split it, or raise the limit"), r.text
            r = route("/documents", headers=KEY, json={"documents": [{**big, "paragraphs": ["! " * 51]}]})
            assert r.status_code == 413 and r.json()["message"].startswith(
                "document 0 ('big'): 51 tokens, more than this server encodes of one write (max_write_tokens 50)")
        assert encoded == []  # refused before any forward pass
        assert client.get("/documents/small", headers=KEY).status_code == 404
        assert client.put("/documents", headers=KEY, json={"documents": [small, {**big, "id": "b2", "paragraphs": [
            "! " * 30]}]}).status_code == 200  # 50: within it
    with serving(create_app(write_settings(max_write_tokens=0))) as client:  # 0: no limit
        assert client.put("/documents", headers=KEY, json={"documents": [small, big]}).status_code == 200


def test_delete_by_id_and_by_filter(write_settings):
    with serving(create_app(write_settings())) as client:
        docs = [{**DOC, "id": f"w{i}", "meta": {"lang": lang, "year": 2000 + i}}
                for i, lang in enumerate(["en", "fr", "en", "de"])]
        assert client.put("/documents", headers=KEY, json={"documents": docs}).status_code == 200
        r = client.delete("/documents/w0", headers=KEY)
        assert r.status_code == 200 and r.json()["deleted"] == ["w0"] and r.json()["count"] == 1
        assert not found(client, "w0")
        assert client.delete("/documents/w0", headers=KEY).status_code == 404
        r = client.post("/documents/delete", headers=KEY,
                        json={"filter": {"must": [{"key": "lang", "match": "en"}]}})
        assert r.status_code == 200 and r.json()["deleted"] == ["w2"]
        r = client.post("/documents/delete", headers=KEY,
                        json={"filter": {"must": [{"key": "year", "range": {"gte": 2003}}]}})
        assert r.json()["deleted"] == ["w3"] and found(client, "w1") and not found(client, "w3")
        r = client.post("/documents/delete", headers=KEY, json={"filter": {"meta": {"colour": "red"}}})
        assert r.status_code == 400 and "colour" in r.json()["message"]
        r = client.post("/documents/delete", headers=KEY,  # named at its place, as a search names it
                        json={"filter": {"must": [{"key": "lang", "match": "en"}, {"key": "year", "match": "2001"}]}})
        assert r.status_code == 400 and r.json()["message"].startswith("filter.must[1]: filter field 'year'"), r.text
        r = client.post("/documents/delete", headers=KEY, json={"filter": {}})  # would pass every document
        assert r.status_code == 400 and "empty" in r.json()["message"] and found(client, "w1")


def test_a_delete_by_a_filter_that_constrains_nothing_is_refused_and_deletes_nothing(write_settings):
    """An empty meta or title prefix, or a nested filter that passes everything, is no condition: such a filter
    passes every document, and deleting by it is refused (400) as the empty filter is."""
    with serving(create_app(write_settings())) as client:
        assert client.put("/documents", headers=KEY, json=DOC).status_code == 200
        for flt in ({"meta": {}}, {"title_prefix": ""}, {"must": [{}]}, {"should": [{}]}, {"must_not": [{"not": {}}]},
                    {"must": [{"meta": {}}, {"title_prefix": ""}]}):
            r = client.post("/documents/delete", headers=KEY, json={"filter": flt})
            assert r.status_code == 400 and "passes every document" in r.json()["message"], (flt, r.text)
        r = client.post("/documents/delete", headers=KEY, json={"filter": {"must_not": [{"meta": {}}]}})
        assert r.status_code == 200 and r.json()["count"] == 0  # passes nothing
        assert found(client, "new-1") and all(client.get(f"/documents/d{i}", headers=KEY).status_code == 200
                                              for i in range(6))


def test_must_not_keeps_the_documents_without_the_key_once_one_document_has_it(write_settings):
    """A key no document has is refused wherever it appears (likely misspelt); once a document holds it, a document
    without it matches no condition on it, so must_not keeps it (docs/service.md)."""
    every = {f"d{i}" for i in range(6)}
    query = {"query": "who built the harbour bridge?", "top_k": 10}
    with serving(create_app(write_settings())) as client:
        flt = {"must_not": [{"key": "lang", "match": "en"}]}
        r = client.post("/search?unit=doc", headers=KEY, json={**query, "filter": flt})
        assert r.status_code == 400 and "filter field 'lang': no document has it" in r.json()["message"], r.text
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200  # lang: en
        for flt, ids in [({"must_not": [{"key": "lang", "match": "en"}]}, every),
                         ({"must_not": [{"key": "lang", "match": "fr"}]}, every | {"new-1"}),
                         ({"must": [{"key": "lang", "match": "en"}]}, {"new-1"})]:
            r = client.post("/search?unit=doc", headers=KEY, json={**query, "filter": flt})
            assert r.status_code == 200, r.text
            assert {h["doc_id"] for h in r.json()["results"][0]["hits"]} == ids, flt


def test_a_delete_answer_counts_every_document_but_lists_a_bounded_number(write_settings, monkeypatch):
    monkeypatch.setattr("spanseek.service.writes.MAX_LISTED_DELETES", 2)
    with serving(create_app(write_settings())) as client:
        docs = [{**DOC, "id": f"d{i}", "meta": {"lang": "en"}} for i in range(3)]
        assert client.put("/documents", headers=KEY, json={"documents": docs}).status_code == 200
        r = client.post("/documents/delete", headers=KEY, json={"filter": {"must": [{"key": "lang", "match": "en"}]}})
        body = r.json()
        assert r.status_code == 200 and body["count"] == 3 and len(body["deleted"]) == 2
        assert set(body["deleted"]) < {"d0", "d1", "d2"} and not any(found(client, f"d{i}") for i in range(3))
        assert client.delete("/documents/new-1", headers=KEY).status_code == 404


def test_writes_need_the_write_key(write_settings, settings_for):
    with serving(create_app(write_settings(admin_api_key="admin"))) as client:
        assert client.put("/documents", json=DOC).status_code == 401
        r = client.put("/documents", headers=KEY, json=DOC)  # the API key only reads: 403 saying so, not "wrong key"
        assert r.status_code == 403 and "writes need the admin key" in r.json()["message"]
        for call in (lambda h: client.delete("/documents/d1", headers=h),
                     lambda h: client.post("/admin/compact", headers=h)):
            assert call(KEY).status_code == 403 and call({"X-API-Key": "nope"}).status_code == 401
        assert client.put("/documents", headers=ADMIN, json=DOC).status_code == 200
        assert client.get("/documents/new-1", headers=KEY).status_code == 200 and found(client, "new-1", headers=ADMIN)
        assert client.post("/admin/reload", headers=ADMIN).status_code == 403  # the index changes by writes
    with serving(create_app(settings_for(api_key="key"))) as client:
        assert client.put("/documents", headers=KEY, json=DOC).status_code == 403  # writes off


def test_a_read_only_server_serves_documents_by_id_as_a_writing_one_does(write_settings, settings_for, tiny_index,
                                                                        tmp_path):
    """GET /documents/{id} is a read: a server without writes answers it from the served index (was a 403 "writes
    are off"), with the body a writing server gives, 404 for an id no live document has (a deleted one too), and the
    API key the other reads need."""
    import shutil

    from spanseek.indexer.lifecycle import delete_documents

    with serving(create_app(write_settings())) as client:
        written = {i: client.get(f"/documents/{i}", headers=KEY).json() for i in ("d0", "d3", "d5")}
    with serving(create_app(settings_for(api_key="key", admin_api_key="admin"))) as client:
        assert {i: client.get(f"/documents/{i}", headers=KEY).json() for i in written} == written
        assert client.get("/documents/d0", headers=ADMIN).json() == written["d0"]
        assert client.get("/documents/d0").status_code == 401
        r = client.get("/documents/nope", headers=KEY)
        assert r.status_code == 404 and r.json()["error"] == "not_found" and "'nope'" in r.json()["message"]
        assert client.delete("/documents/d0", headers=ADMIN).status_code == 403  # writes stay off
    shutil.copytree(tiny_index, tmp_path / "index")
    delete_documents(tmp_path / "index", ["d3"])
    with serving(create_app(settings_for(index=tmp_path / "index"))) as client:  # no key: every client reads
        assert client.get("/documents/d5").json() == written["d5"]
        assert client.get("/documents/d3").status_code == 404
        r = client.put("/documents", json={"documents": [DOC]})  # both missing pieces named, not only the key
        assert r.status_code == 403 and "writes are off" in r.json()["message"], r.json()
        assert "need a key" in r.json()["message"]


def test_a_merge_gives_the_memory_it_freed_back_to_the_system(write_settings, monkeypatch):
    """glibc keeps what a merge freed (the old base, the segment) in its heaps: 1,147 MB anonymous after merging a
    300-document base down to 2, against 858-894 MB trimmed. A finished merge trims (``heap.give_back``, as it
    settles the heap)."""
    from spanseek.service import heap

    trims: list[int] = []
    with serving(create_app(write_settings())) as client:
        monkeypatch.setattr(heap, "give_back", lambda: trims.append(
            client.app.state.service.live.store.state["merges"]) or True)
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert not trims  # a write alone does not trim
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 120
        while client.post("/admin/compact", headers=KEY).json()["live"]["merges"] < 1 or not trims:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert trims == [1]  # once, after the merge was done


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="thread priorities are Linux's")
def test_a_merge_collects_the_heap_at_the_service_s_cpu_priority_not_the_merge_s(write_settings, monkeypatch):
    """A collection stops every thread while it runs: run at the merge's lowered priority (``merge_nice``) beside busy
    native threads, it held them all more than twice as long (1.8 s against 0.8 s). A finished merge collects at
    the service's priority."""
    from spanseek.service import live

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    service_nice, collected = niceness(), []
    monkeypatch.setattr(live, "settle", lambda thaw=False: collected.append((niceness(), thaw)))
    with serving(create_app(write_settings(merge_nice=5))) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        client.app.state.service.live.merge_thread.join(60)
    assert collected == [(service_nice, True)]


def test_compact_merges_in_the_background_and_keeps_serving(write_settings, monkeypatch):
    from spanseek.core.segment import LiveIndex
    from spanseek.service import live as service_live

    def slow_base_searcher(searcher, index):  # a merged base's searcher takes its time: /info is read meanwhile
        if not isinstance(index, LiveIndex):
            time.sleep(0.3)
        return searcher_over(searcher, index)

    searcher_over = service_live.searcher_over
    monkeypatch.setattr(service_live, "searcher_over", slow_base_searcher)
    with serving(create_app(write_settings())) as client:
        live_writes = client.app.state.service.live
        describe = live_writes.on_merged
        live_writes.on_merged = lambda searcher: (describe(searcher), time.sleep(0.3))  # and so does what follows
        first = client.get("/info", headers=KEY).json()["index"]
        before = first["documents"]
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.delete("/documents/d1", headers=KEY).status_code == 200
        written = client.get("/info", headers=KEY).json()["index"]  # over the first base and the segment
        r = client.post("/admin/compact", headers=KEY)
        assert r.status_code == 202 and r.json()["merging"]
        statuses, described = [], []  # /info read during the merge: (merges, the index's dir and date)
        deadline = time.monotonic() + 120
        while client.post("/admin/compact", headers=KEY).json()["live"]["merges"] < 1:
            assert time.monotonic() < deadline
            statuses.append(client.post("/search", headers=KEY, json={"query": "who built it?"}).status_code)
            info = client.get("/info", headers=KEY).json()
            described.append((info["service"]["writes"]["merges"], info["index"]["dir"], info["index"]["created"]))
        live = client.post("/admin/compact", headers=KEY).json()["live"]
        assert live["segment_documents"] == 0 and live["tombstones"] == 0 and live["last_merge"]["documents"] == 1
        assert set(statuses) <= {200} and found(client, "new-1") and not found(client, "d1")
        assert client.get("/documents/d0", headers=KEY).status_code == 200
        # /info and the gauge show the index searches see: its documents now, over the merged base, described as
        # soon as the merge is counted (one swap: no answer counts the merge and describes the first base)
        index = client.get("/info", headers=KEY).json()["index"]
        merged_created = Manifest.load(Path(index["dir"])).created
        described.append((1, index["dir"], index["created"]))
        assert {(dir_, created) for merges, dir_, created in described if merges == 0} <= {
            (first["dir"], first["created"])}
        assert {(Path(dir_).name, created) for merges, dir_, created in described if merges == 1} == {
            ("base-000001", merged_created)}
        assert index["documents"] == before + 1 - 1 and index["dir"].endswith("base-000001")
        # its passages and tokens too (they stayed the first base's): the merged base's, as they were before it
        merged = Manifest.load(Path(index["dir"]))
        assert (written["passages"], written["tokens"]) == (index["passages"], index["tokens"]) == (
            merged.passages, merged.tokens)
        metrics = client.get("/metrics").text
        assert f"spanseek_index_documents {float(before)}" in metrics
        assert f"spanseek_index_passages {float(merged.passages)}" in metrics
        assert f"spanseek_index_tokens {float(merged.tokens)}" in metrics
        # and the rest of the description is the new base's (it stayed the first one's: size, date, vectors)
        assert (index["created"], index["indexed_tokens"]) == (merged.created, merged.indexed_tokens)
        assert f"spanseek_index_vectors {float(merged.indexed_tokens)}" in metrics
        # how long it took, too: timed once the merge thread has removed the old base, after the merge is served
        counted = 'spanseek_merge_duration_seconds_count{outcome="ok"} 1.0'
        deadline = time.monotonic() + 30
        while counted not in metrics:
            assert time.monotonic() < deadline, "the merge's duration was never observed"
            time.sleep(0.01)
            metrics = client.get("/metrics").text
        last = live["last_merge"]
    with serving(create_app(write_settings())) as client:  # a restart remembers the last merge
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["last_merge"] == last


def test_info_shows_a_caller_without_a_key_no_server_path_after_a_merge(write_settings, tmp_path):
    """With writes on and only an admin key, /info answers everyone: the last merge's base was shown in full (the
    served base beside it cut to its last component), where server paths are for key holders only."""
    with serving(create_app(write_settings(api_key=None, admin_api_key="admin"))) as client:
        assert client.put("/documents", headers=ADMIN, json=DOC).status_code == 200
        assert client.post("/admin/compact", headers=ADMIN).status_code == 202
        deadline = time.monotonic() + 120
        while client.get("/info").json()["service"]["writes"]["merges"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        hidden, shown = client.get("/info"), client.get("/info", headers=ADMIN)
        assert hidden.json()["service"]["writes"]["last_merge"]["base"] == ".../base-000001", hidden.text
        assert str(tmp_path) not in hidden.text and str(tmp_path.resolve()) not in hidden.text
        assert shown.json()["service"]["writes"]["last_merge"]["base"] == str((tmp_path / "live/bases/base-000001")
                                                                              .resolve())


def test_after_a_merge_the_first_base_is_let_go_and_info_describes_the_merged_one(write_settings):
    """Before: the searcher the service started with stayed referenced, and with it the first base (its arrays in
    memory, its files' disk space once the merge removed them: RSS 1.22 -> 1.57 GB on the demo index); /info's
    deleted_documents and the vectors gauge were the live snapshot's at the merge (tombstones, segment tokens). The
    first base, frozen out of the cyclic collector at the start, is collected once the merge is done even through a
    reference cycle (it stayed frozen for good), and the merged base is frozen in turn (full collections visited all
    of it: 96 ms each after a merge of the demo index)."""
    import gc
    import weakref

    with serving(create_app(write_settings())) as client:
        state = client.app.state.service
        first = weakref.ref(state.live.store.base)
        state.live.store.base.cycle = [state.live.store.base]  # (frozen with it at the start)
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.delete("/documents/d1", headers=KEY).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 120
        while client.post("/admin/compact", headers=KEY).json()["live"]["merges"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.delete("/documents/d0", headers=KEY).status_code == 200  # a tombstone over the merged base
        assert client.put("/documents", headers=KEY, json={"documents": [{**DOC, "id": "new-2"}]}).status_code == 200
        state.live.merge_thread.join(60)  # (past its merge, it settles the heap)
        gc.collect()  # (an ordinary collection skips frozen objects)
        assert first() is None
        base = state.live.store.base
        assert not any(o is base.passages or o is base.docs for o in gc.get_objects())  # frozen
        index = client.get("/info", headers=KEY).json()["index"]
        merged = Manifest.load(Path(index["dir"]))
        assert index["deleted_documents"] == 0 and index["indexed_tokens"] == merged.indexed_tokens
        assert f"spanseek_index_vectors {float(merged.indexed_tokens)}" in client.get("/metrics").text


@pytest.mark.parametrize(("settings", "merges_after"), [
    ({"merge_deleted_share": 0.3, "merge_log_bytes": 0}, 2),  # 2 of the base's 6 documents deleted
    ({"merge_deleted_share": 0, "merge_log_bytes": 1}, 1),  # the first write fills the log past 1 byte
    ({"merge_deleted_share": 0.3, "merge_log_bytes": 1, "merge_tokens": 0}, None),  # 0 tokens: only compact
])
def test_deletions_and_a_long_log_start_a_merge_too(write_settings, settings, merges_after):
    """Before, only the segment's size started one: deletes and replacements grew the log (replayed at every start)
    and the base's masked documents without end."""
    with serving(create_app(write_settings(**{"merge_tokens": 10**9, **settings}))) as client:
        for n, doc_id in enumerate(["d0", "d1", "d2"], start=1):
            assert client.delete(f"/documents/{doc_id}", headers=KEY).status_code == 200
            due = merges_after is not None and n >= merges_after
            deadline = time.monotonic() + 60
            while due and client.get("/info", headers=KEY).json()["service"]["writes"]["merges"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            if merges_after is None or n < merges_after:
                time.sleep(0.2)  # a merge that is not due does not start
                assert client.get("/info", headers=KEY).json()["service"]["writes"]["merges"] == 0
        assert not found(client, "d0") and not found(client, "d2")


def test_a_restart_shows_what_searches_see_and_merges_a_log_past_its_threshold(write_settings):
    """After a restart the gauges were the base's (deleted documents included) until the next write, and a log
    replayed past merge_tokens (a merge a kill cut short) was merged only after another write."""
    with serving(create_app(write_settings())) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.delete("/documents/d1", headers=KEY).status_code == 200
    with serving(create_app(write_settings(merge_tokens=1))) as client:
        index = client.get("/info", headers=KEY).json()["index"]
        metrics = client.get("/metrics").text
        for name in ("documents", "passages", "tokens"):
            assert f"spanseek_index_{name} {float(index[name])}" in metrics, name
        deadline = time.monotonic() + 120  # no write: the start itself merges
        while client.get("/info", headers=KEY).json()["service"]["writes"]["merges"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert found(client, "new-1") and not found(client, "d1")


def test_a_missing_write_log_stops_the_start_naming_it(write_settings, tmp_path):
    """A log state.json lists, moved away, was skipped without a word: its acknowledged writes were gone."""
    with serving(create_app(write_settings())) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
    wal = tmp_path / "live" / "wal" / "wal-000001.jsonl"
    wal.rename(tmp_path / "elsewhere.jsonl")
    with TestClient(create_app(write_settings())) as client:
        deadline = time.monotonic() + 30
        while (r := client.get("/ready")).json()["message"].startswith("the model and index are still loading"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.status_code == 503 and "wal-000001.jsonl: the write log" in r.json()["message"], r.text
        assert "is missing, and the writes it held with it" in r.json()["message"]
    (tmp_path / "elsewhere.jsonl").rename(wal)
    with serving(create_app(write_settings())) as client:
        assert client.get("/ready").status_code == 200 and found(client, "new-1")


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="thread niceness is a Linux scheduler setting")
@pytest.mark.parametrize("merge_nice", [0, 7])
def test_a_merge_runs_at_the_lower_cpu_priority_it_is_given(write_settings, monkeypatch, merge_nice):
    """The merge thread is merge_nice nicer than the service's threads (searches and writes keep the cores while
    it builds), and the threads serving requests are not: their priority is unchanged after it."""
    from spanseek.indexer.live import LiveStore

    seen = []
    real_merge = LiveStore.merge

    def merge(self, *args, **kwargs):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real_merge(self, *args, **kwargs)

    monkeypatch.setattr(LiveStore, "merge", merge)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with serving(create_app(write_settings(merge_nice=merge_nice))) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 120
        while client.post("/admin/compact", headers=KEY).json()["live"]["merges"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert found(client, "new-1")
    assert seen and set(seen) == {min(19, mine + merge_nice)}  # every merge the polling compacts started
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_the_python_client_upserts_gets_and_deletes(write_settings, live):
    from spanseek.client import APIError, Client
    from spanseek.core.filters import SearchFilter

    with live(create_app(write_settings())) as url, Client(url, api_key="key") as client:
        written = client.upsert(DOC)
        assert written["documents"] == 1 and written["passages"] == 2 and written["tokens"] > 10
        assert client.get("new-1") == DOC and client.get("nope") is None
        assert client.search("harbour bridge", unit="doc", filter=SearchFilter(doc_ids=("new-1",))).hits
        assert client.delete("nope") == [] and client.delete("new-1") == ["new-1"] and client.get("new-1") is None
        client.upsert([{**DOC, "id": "a", "meta": {"lang": "fr"}}, {**DOC, "id": "b"}])
        assert client.delete(filter={"meta": {"lang": "fr"}}) == ["a"] and client.get("b") is not None
        odd = ["guide/install.md", "a/../b", ".", "..", "x?y#z", "50% off", "é/ü"]  # ids as from-files makes them
        client.upsert([{**DOC, "id": i} for i in odd])
        assert [client.get(i)["id"] for i in odd] == odd
        assert [client.delete(i) for i in odd] == [[i] for i in odd] and client.get("guide/install.md") is None
        client.upsert([{**DOC, "id": f"m{i}", "meta": {"lang": "nl"}} for i in range(3)])
        deleted = client.delete(filter={"meta": {"lang": "nl"}})
        assert sorted(deleted) == ["m0", "m1", "m2"] and deleted.total == 3  # the answer's count, not dropped
        assert client.add({**DOC, "id": "fresh"})["documents"] == 1
        with pytest.raises(APIError, match="held already") as held:
            client.add([{**DOC, "id": "fresh2"}, {**DOC, "id": "fresh"}])
        assert held.value.status == 409 and client.get("fresh2") is None
    # a 404 that is no "no such document" (a wrong base URL) is an error, not None
    with live(create_app(write_settings())) as url, Client(url + "/wrong-prefix", api_key="key") as client:
        with pytest.raises(APIError):
            client.get("new-1")


def test_a_failed_merge_keeps_serving_and_its_error_is_kept_across_restarts(write_settings, monkeypatch):
    from spanseek.indexer import live as live_store

    def fails(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(live_store, "build_merged", fails)
    with serving(create_app(write_settings())) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 60
        # the store records the error (last_merge) a moment before the service counts the merge, then times it
        while (client.get("/info", headers=KEY).json()["service"]["writes"]["last_merge"] is None or
               'spanseek_merge_duration_seconds_count{outcome="failed"} 1.0' not in (metrics := client.get(
                   "/metrics").text)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 'spanseek_merges_total{outcome="failed"} 1.0' in metrics
        assert 'spanseek_merge_duration_seconds_count{outcome="failed"} 1.0' in metrics
        assert found(client, "new-1")  # the segment keeps serving
    monkeypatch.undo()
    with serving(create_app(write_settings())) as client:
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert writes["last_merge"] == {"error": "RuntimeError: disk full"} and writes["merges"] == 0
        assert found(client, "new-1")


def test_a_service_that_stops_during_a_merge_stops_it_and_removes_its_partial_base(write_settings, monkeypatch):
    """A stop (SIGTERM: the app's shutdown) during a merge made slow asks the merge to stop: it ends at its next
    step, the service's stop waits for it (well within MERGE_STOP_S), and no ``bases/base-N.tmp`` (the size of the
    base) is left on disk. Before, the merge ran on in a thread the exit cut off, its partial base left until the
    next start. The writes are served again after the restart."""
    from spanseek.core.stopping import checkpoint
    from spanseek.indexer import lifecycle

    merging = threading.Event()

    def endless_compact(*args, **kwargs):  # a merge made slow: it never ends by itself
        merging.set()
        while True:
            checkpoint()
            time.sleep(0.01)

    monkeypatch.setattr(lifecycle, "compact_index", endless_compact)
    settings = write_settings()
    bases = settings.live_dir / "bases"
    with serving(create_app(settings)) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        assert merging.wait(60)
        assert "base-000001.tmp" in {p.name for p in bases.iterdir()}  # (and its corpus file)
        t0 = time.monotonic()
    took = time.monotonic() - t0
    assert list(bases.iterdir()) == [], "the stopped merge left its partial base"
    assert took < 5.0, f"the stop took {took:.1f} s"
    monkeypatch.undo()
    with serving(create_app(write_settings())) as client:
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert writes["last_merge"] is None and writes["merges"] == 0 and writes["segment_documents"] == 1
        assert found(client, "new-1")


def test_a_merge_refused_for_want_of_room_logs_one_line_not_a_traceback(write_settings, monkeypatch, caplog):
    """A merge the disk has no room for is tried again after each write: its refusal is one line naming the reason,
    where each one logged a whole traceback; another failure keeps its traceback."""
    import errno
    import logging

    from spanseek.indexer import live as live_store

    reason = {"error": OSError(errno.ENOSPC, "No space left on device: a merge writes about 9 MB", "/data/bases")}

    def fails(*args, **kwargs):
        raise reason["error"]

    def merged_once(client):
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 60
        while not (records := [r for r in caplog.records if r.getMessage().startswith("merge failed")]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)  # (a second record, were there one, would be in by now)
        records = [r for r in caplog.records if r.getMessage().startswith("merge failed")]
        caplog.clear()
        return records

    monkeypatch.setattr(live_store, "build_merged", fails)
    with serving(create_app(write_settings())) as client, caplog.at_level(logging.ERROR):
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        [record] = merged_once(client)
        assert record.exc_info is None and "No space left on device: a merge writes about 9 MB" in record.getMessage()
        reason["error"] = OSError(errno.EIO, "Input/output error", "/data/bases")
        [record] = merged_once(client)
        assert record.exc_info is not None


def test_documents_are_listed_by_metadata_a_page_at_a_time_without_their_passages(write_settings, settings_for):
    """GET /documents: the live documents' ids, titles and metadata in id order, ``meta=KEY=VALUE`` selecting,
    ``after`` and ``next`` paging; GET /documents/{id}?meta_only=true: one of them without its paragraphs."""
    with serving(create_app(write_settings())) as client:
        docs = [{**DOC, "id": i, "meta": {"team": team}} for i, team in (("w3", "a"), ("w1", "a"), ("w2", "a"),
                                                                         ("w0", "b"))]
        assert client.put("/documents", headers=KEY, json={"documents": docs}).status_code == 200
        first = client.get("/documents", headers=KEY, params={"meta": "team=a", "limit": 2}).json()
        assert first == {"documents": [{"id": "w1", "title": DOC["title"], "meta": {"team": "a"}},
                                       {"id": "w2", "title": DOC["title"], "meta": {"team": "a"}}], "next": "w2"}
        rest = client.get("/documents", headers=KEY, params={"meta": "team=a", "after": "w2", "limit": 2}).json()
        assert [d["id"] for d in rest["documents"]] == ["w3"] and rest["next"] is None
        client.delete("/documents/w1", headers=KEY)
        client.put("/documents", headers=KEY, json={**DOC, "id": "w2", "meta": {"team": "b"}})  # replaced
        listed = client.get("/documents", headers=KEY, params={"meta": "team=a"}).json()
        assert [d["id"] for d in listed["documents"]] == ["w3"]
        every = [d["id"] for d in client.get("/documents", headers=KEY).json()["documents"]]
        assert every == sorted(every) and {"w0", "w2", "w3", "d0"} <= set(every) and "w1" not in every
        # a key no document has lists none (a first sync asks for its source before any document holds it)
        assert client.get("/documents", headers=KEY, params={"meta": "nope=1"}).json() == {"documents": [],
                                                                                             "next": None}
        assert client.get("/documents", headers=KEY, params={"meta": "team"}).status_code == 422
        r = client.get("/documents", headers=KEY, params={"limit": 0})
        assert r.status_code == 400 and "limit must be between 1 and 1000" in r.json()["message"]
        assert client.get("/documents").status_code == 401
        assert client.get("/documents/w3", headers=KEY, params={"meta_only": "true"}).json() == {
            "id": "w3", "title": DOC["title"], "meta": {"team": "a"}}
        assert client.get("/documents/w1", headers=KEY, params={"meta_only": "true"}).status_code == 404
        written = client.get("/documents/d0", headers=KEY).json()
    with serving(create_app(settings_for(api_key="key"))) as client:  # writes off: the served index is listed
        listed = client.get("/documents", headers=KEY, params={"limit": 1}).json()
        assert listed["documents"][0]["id"] == listed["next"] == "d0"
        assert client.get("/documents/d0", headers=KEY, params={"meta_only": "true"}).json() == {
            "id": "d0", "title": written["title"], "meta": written.get("meta", {})}


class CountedDocs(list):
    """An index's document records, counting the reads of them."""

    reads = 0

    def __getitem__(self, i):
        CountedDocs.reads += 1
        return super().__getitem__(i)


class ListedIndex:
    """What ``listed`` reads of an index: its documents, their fields, the deleted ones."""

    def __init__(self, docs: list[dict], deleted: list[int]):
        from spanseek.core.fieldindex import FieldIndex

        self.docs, self.fields = CountedDocs(docs), FieldIndex.build(docs)
        self.deleted_docs = np.asarray(deleted, dtype=np.int64)


def test_listing_every_page_reads_each_document_a_few_times_not_once_a_page():
    """Each page of GET /documents read every document's id (a dict of all of them, then the smallest after
    ``after``): listing 20,000 documents in pages of 1,000 took 0.6 s, 80,000 11.7 s (now 0.8 s). The id order is
    made once for an index; the pages still agree with a brute-force listing: id order, deletions left out, a
    repeated id's last document, the metadata selecting."""
    import random

    from spanseek.service.writes import listed

    rng = random.Random(0)
    docs = [{"id": f"d{rng.randrange(2500)}", "title": "t", "meta": {"team": rng.choice("ab")}} for _ in range(3000)]
    deleted = rng.sample(range(3000), 300)
    index = ListedIndex(docs, deleted)
    live = {d["id"]: d for r, d in enumerate(docs) if r not in set(deleted)}  # a repeated id: its last
    for where in ({}, {"team": "a"}):
        expected = sorted(i for i, d in live.items() if all(d["meta"].get(k) == v for k, v in where.items()))
        CountedDocs.reads = 0
        got, after = [], None
        while True:
            page = listed(index, where, after, 100)
            got += [d.id for d in page.documents]
            if (after := page.next) is None:
                break
        assert got == expected
        assert CountedDocs.reads < 3 * len(docs)  # was about a read per document for every page: 30 times that
def test_a_title_over_the_limit_is_refused_naming_the_field_and_not_quoted(write_settings):
    with serving(create_app(write_settings())) as client:
        long = {"id": "x", "title": "t" * 500_000, "paragraphs": ["ok"]}
        r = client.put("/documents", headers=KEY, json={"documents": [DOC, long]})
        assert r.status_code == 422 and len(r.content) < 2_000, r.text[:300]
        assert r.json()["details"][0]["loc"] == ["body", "documents", "1", "title"], r.text
        assert r.json()["message"] == ("the request does not match the API schema: body.documents.1.title: a title of "
                                       "500,000 characters; at most 1,000 (max_title_chars)"), r.text
        assert client.get(f"/documents/{DOC['id']}", headers=KEY).status_code == 404  # nothing of it written
        r = client.put("/documents", headers=KEY, json={**long, "title": "t" * 1000})
        assert r.status_code == 200, r.text
    with serving(create_app(write_settings(max_title_chars=10))) as client:  # the server's setting is the bound
        for route in (client.put, client.post):
            r = route("/documents", headers=KEY, json={**long, "title": "t" * 11})
            assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["body", "documents", "0", "title"], r.text
            assert "a title of 11 characters; at most 10 (max_title_chars)" in r.json()["message"], r.text
        assert client.put("/documents", headers=KEY, json={**long, "title": "t" * 10}).status_code == 200
def test_a_write_the_disk_has_no_room_for_is_a_507_naming_the_file_and_searches_go_on(write_settings, monkeypatch):
    """No space left for the log: the write is refused whole (not a bare 500), searches still answer, and once there
    is space again the log goes on and a restart replays exactly the writes that were acknowledged."""
    settings = write_settings()
    app = create_app(settings)
    with serving(app) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        wal = app.state.service.live.store.wal

        def full(entry):  # as indexer.wal raises it, the log cut back to its last whole line
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(wal.path))

        monkeypatch.setattr(wal, "append", full)
        for r in (client.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}),
                  client.delete("/documents/new-1", headers=KEY)):
            assert r.status_code == 507, r.text
            assert r.json()["error"] == "insufficient_storage"
            assert r.json()["message"].startswith(f"{wal.path}: No space left on device")
        assert found(client, "new-1") and not found(client, "new-2")  # searches go on; nothing refused was applied
        metrics = client.get("/metrics").text
        for route in ("/documents", "/documents/{doc_id}"):
            assert f'spanseek_errors_total{{route="{route}",type="insufficient_storage"}} 1.0' in metrics
        monkeypatch.undo()
        assert client.put("/documents", headers=KEY, json={**DOC, "id": "new-3"}).status_code == 200
    with serving(create_app(settings)) as client:
        assert found(client, "new-1") and found(client, "new-3") and not found(client, "new-2")


def merged(client, merges: int) -> dict:
    """POST /admin/compact, then wait (up to 120 s) until /info counts ``merges`` merges; the writes' description."""
    assert client.post("/admin/compact", headers=KEY).status_code == 202
    deadline = time.monotonic() + 120
    while (writes := client.get("/info", headers=KEY).json()["service"]["writes"])["merges"] < merges:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return writes


def test_a_merged_base_whose_searcher_cannot_be_made_is_tried_once_and_said_until_the_next_merge(write_settings,
                                                                                                 monkeypatch, caplog):
    """The searcher of a merged base failed to be made: every later write made it again (its dense leg, selections,
    unit maps over the whole base) and described the base again, logging the traceback each time. It is tried once a
    base; searches go on (the snapshot over the merged base, with the first base's searcher's settings), /info and
    spanseek_merged_base_searcher_failed say why, until a merge gives another base."""
    from spanseek.core.segment import LiveIndex
    from spanseek.service import live as service_live

    tries, failing = [], [True]

    def base_searcher(searcher, index):
        if not isinstance(index, LiveIndex):
            tries.append(index)
            if failing[0]:
                raise MemoryError("cannot allocate 96 MB")
        return searcher_over(searcher, index)

    searcher_over = service_live.searcher_over
    monkeypatch.setattr(service_live, "searcher_over", base_searcher)
    with caplog.at_level("ERROR", logger="spanseek.service"), serving(create_app(write_settings())) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        merged(client, 1)
        for n in range(3):
            doc = {**DOC, "id": f"after-{n}"}
            assert client.put("/documents", headers=KEY, json={"documents": [doc]}).status_code == 200
            assert found(client, f"after-{n}") and found(client, "new-1")  # served, over the merged base
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert len(tries) == 1 and writes["base_searcher_error"] == "MemoryError: cannot allocate 96 MB"
        assert "spanseek_merged_base_searcher_failed 1.0" in client.get("/metrics").text
        assert caplog.text.count("the merged base's searcher could not be made") == 1
        failing[0] = False  # the next merge's base gets a searcher of its own
        writes = merged(client, 2)
        assert len(tries) == 2 and tries[1] is not tries[0] and writes["base_searcher_error"] is None
        assert "spanseek_merged_base_searcher_failed 0.0" in client.get("/metrics").text
        assert all(found(client, f"after-{n}") for n in range(3))


def failing_snapshots(monkeypatch) -> list[bool]:
    """Make the searcher over a new snapshot of the live writes fail (memory) while the flag returned is set."""
    from spanseek.core.segment import LiveIndex
    from spanseek.service import live as service_live

    failing = [False]
    searcher_over = service_live.searcher_over

    def snapshot_searcher(searcher, index):
        if failing[0] and isinstance(index, LiveIndex):
            raise MemoryError("cannot allocate 64 MB")
        return searcher_over(searcher, index)

    monkeypatch.setattr(service_live, "searcher_over", snapshot_searcher)
    return failing


def test_a_logged_write_whose_snapshot_cannot_be_served_is_not_answered_as_failed(write_settings, monkeypatch):
    """The searcher over a new snapshot could not be made (memory): the write, logged (fsynced) and applied, was
    answered with a 500, and the next write or a restart served it all the same. Now it is answered as written;
    /info's ``publish_error`` says why searches lag until the next write publishes a snapshot holding it."""
    failing = failing_snapshots(monkeypatch)
    with serving(create_app(write_settings())) as client:
        failing[0] = True
        r = client.put("/documents", headers=KEY, json={"documents": [DOC]})
        assert r.status_code == 200, r.text
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert writes["publish_error"] == "MemoryError: cannot allocate 64 MB" and not found(client, "new-1")
        assert writes["unpublished_merge"] is None  # (a write's snapshot, not a merge's)
        failing[0] = False
        assert client.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
        assert found(client, "new-1") and found(client, "new-2")
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["publish_error"] is None


class _MergingStore:
    """A live store whose merges commit without their snapshot being served (``view`` is what searches see):
    ``merge`` commits the next result, or fails with ``error`` once given one; ``before_view`` and ``after_view`` run
    as ``describe`` reads the view (a merge committing and publishing meanwhile)."""

    def __init__(self) -> None:
        self.state: dict = {"merges": 0, "last_merge": None}
        self.view: dict = {"merges": 0, "last_merge": None}
        self.error: Exception | None = None
        self.before_view = self.after_view = lambda: None

    def merge(self) -> dict:
        if self.error is not None:
            self.state = {**self.state, "last_merge": {"error": repr(self.error)}}
            self.view = {**self.view, "last_merge": self.state["last_merge"]}
            raise self.error
        n = self.state["merges"] + 1
        self.state = {"merges": n, "last_merge": {"base": f"base-{n:06d}", "documents": n}}
        return self.state["last_merge"]

    @property
    def last_merge(self) -> dict | None:  # (the store's: the last merge's result, or error)
        return self.state["last_merge"]

    def publish(self) -> None:
        self.view = dict(self.state)

    def describe(self) -> dict:
        self.before_view()
        view = self.view
        self.after_view()
        return dict(view)


def _writes_over(store: _MergingStore):
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.live import LiveWrites
    from spanseek.service.metrics import ServiceMetrics

    live = object.__new__(LiveWrites)  # (only what merging and /info's writes use)
    live.store, live.base_problem, live.committed_merge = store, None, None
    live.settings = type("S", (), {"merge_nice": 0})()
    live.metrics = ServiceMetrics()
    live.gauges = lambda: None
    live.write_pool = ThreadPoolExecutor(max_workers=1)  # (a finished merge collects the heap in it)
    return live


def test_a_compact_asked_as_a_merge_thread_returns_its_memory_starts_a_merge_of_its_own():
    """A merge counted in /info went on in its thread (returning the merged-away memory, updating gauges); a POST
    /admin/compact in that time was told a merge runs, and none merged what was written since. It now waits for that
    thread, milliseconds, and merges."""
    import threading

    store = _MergingStore()
    live = _writes_over(store)
    live.merge_thread = None
    live._merge_over = threading.Event()
    tail, release = threading.Event(), threading.Event()

    def slow_gauges() -> None:  # the first merge thread, past its merge, held here until released
        tail.set()
        release.wait(10)

    live.gauges = slow_gauges
    assert live.maybe_merge(force=True)
    assert tail.wait(10) and store.state["merges"] == 1
    live.gauges = lambda: None
    threading.Timer(0.2, release.set).start()
    assert live.maybe_merge(force=True)
    live.merge_thread.join(10)
    assert store.state["merges"] == 2


def test_unpublished_merge_names_the_committed_merge_after_a_later_one_failed_and_never_a_served_one():
    """/info's unpublished_merge compared the store's last result with the view's: a merge committed but not served,
    then a merge that failed (its error replacing the result), read as no merge pending while state.json named the
    merged base; and a merge served while /info was read named the one served before it as pending."""
    store = _MergingStore()
    live = _writes_over(store)
    live._merge()  # merge 1 commits; its snapshot is not served (a failed publish)
    assert live.describe()["unpublished_merge"] == {"merges": 1, "last_merge": {"base": "base-000001",
                                                                               "documents": 1}}
    store.error = MemoryError("cannot allocate 64 MB")
    live._merge()  # merge 2 fails before its commit: merge 1 is still done and not served
    writes = live.describe()
    assert writes["merges"] == 0 and "error" in writes["last_merge"]
    assert writes["unpublished_merge"] == {"merges": 1, "last_merge": {"base": "base-000001", "documents": 1}}
    store.error = None
    store.publish()  # merge 1 served (the next write's snapshot)
    assert live.describe()["unpublished_merge"] is None

    def merged_and_served() -> None:  # the next merge commits and is served while /info is read
        live._merge()
        store.publish()

    store.before_view = merged_and_served
    writes = live.describe()  # merge 2 served before the view was read: nothing pending (merge 1 was named)
    assert writes["merges"] == 2 and writes["unpublished_merge"] is None, writes
    store.before_view, store.after_view = (lambda: None), merged_and_served
    writes = live.describe()  # merge 3 committed after the view was read: pending as to that view, and named
    assert writes["merges"] == 2, writes
    assert writes["unpublished_merge"] == {"merges": 3, "last_merge": {"base": "base-000003", "documents": 3}}


@pytest.mark.slow
def test_a_merge_past_its_commit_point_whose_snapshot_cannot_be_served_is_not_failed(write_settings, monkeypatch):
    """state.json names the merged base: the merge is done even when the snapshot over it cannot be served. It was
    counted as failed, its error recorded over its result in state.json (and shown after restarts), and the old logs
    were left; now it counts as done, and a restart serves its base and the writes."""
    failing = failing_snapshots(monkeypatch)
    settings = write_settings()
    with serving(create_app(settings)) as client:
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        failing[0] = True
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 60
        while not any(f'merge_duration_seconds_count{{outcome="{outcome}"}} 1.0' in (metrics := client.get(
                "/metrics").text) for outcome in ("ok", "failed")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 'spanseek_merges_total{outcome="ok"} 1.0' in metrics
        assert 'spanseek_merges_total{outcome="failed"} 0.0' in metrics
        # /info said no merge had run (merges 0, last_merge null) while state.json named the merged base: it says
        # the merge is done but not served, and why
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert writes["merges"] == 0 and writes["last_merge"] is None and writes["segment_documents"] == 1
        assert writes["publish_error"] == "MemoryError: cannot allocate 64 MB"
        assert writes["unpublished_merge"]["merges"] == 1, writes
        assert writes["unpublished_merge"]["last_merge"]["documents"] == 1, writes
        failing[0] = False
        assert client.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200  # served now
        writes = client.get("/info", headers=KEY).json()["service"]["writes"]
        assert writes["merges"] == 1 and writes["unpublished_merge"] is None and writes["publish_error"] is None
        assert writes["last_merge"]["documents"] == 1 and writes["segment_documents"] == 1  # (new-2)
    state = json.loads((settings.live_dir / "state.json").read_text())
    assert state["merges"] == 1 and state["last_merge"]["documents"] == 1 and "error" not in state["last_merge"]
    assert len(list((settings.live_dir / "wal").iterdir())) == 1  # the old log removed, as after any merge
    with serving(create_app(settings)) as client:
        assert found(client, "new-1")
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["last_merge"]["documents"] == 1


def test_a_merge_due_shows_until_one_commits(write_settings, monkeypatch):
    """spanseek_merge_due is 1 from the write that makes a merge due until a merge commits, through a failed one (tried
    again only after a write: with none since, the writes stay unmerged), and 0 with merges only on request."""
    from spanseek.indexer import live as live_store

    def due(client) -> str:
        return next(line for line in client.get("/metrics").text.splitlines() if line.startswith("spanseek_merge_due "))

    def fails(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(live_store, "build_merged", fails)
    with serving(create_app(write_settings(merge_tokens=1))) as client:
        assert due(client) == "spanseek_merge_due 0.0"
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        deadline = time.monotonic() + 60
        while 'spanseek_merges_total{outcome="failed"} 1.0' not in client.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert due(client) == "spanseek_merge_due 1.0"  # failed: still due
        monkeypatch.undo()
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        while due(client) != "spanseek_merge_due 0.0":  # (set as the merge thread ends, after it counted the merge)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 'spanseek_merges_total{outcome="ok"} 1.0' in client.get("/metrics").text
    with serving(create_app(write_settings())) as client:  # merge_tokens 0: merges on request only, never due
        assert client.put("/documents", headers=KEY, json={"documents": [{**DOC, "id": "new-2"}]}).status_code == 200
        assert due(client) == "spanseek_merge_due 0.0"


def test_a_running_merge_shows_in_spanseek_merging_until_it_ends_failed_too(write_settings, monkeypatch):
    """spanseek_merging is 1 while a merge runs (its new base takes as much disk as the base served, which
    SpanseekLiveDiskLow leaves alone meanwhile) and 0 once it ended, a failed one included."""
    from spanseek.indexer import live as live_store

    running, release = threading.Event(), threading.Event()

    def builds_then_fails(*args, **kwargs):
        running.set()
        release.wait(30)
        raise OSError(errno.ENOSPC, "No space left on device")

    def merging(client) -> str:
        return next(line for line in client.get("/metrics").text.splitlines() if line.startswith("spanseek_merging "))

    monkeypatch.setattr(live_store, "build_merged", builds_then_fails)
    with serving(create_app(write_settings())) as client:
        assert merging(client) == "spanseek_merging 0.0"
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        assert running.wait(30)
        assert merging(client) == "spanseek_merging 1.0"
        release.set()
        deadline = time.monotonic() + 30
        while 'spanseek_merges_total{outcome="failed"} 1.0' not in client.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert merging(client) == "spanseek_merging 0.0"


def test_a_merge_logs_its_start_and_its_end(write_settings, caplog):
    """A merge runs for minutes on a large base: its start is logged (what it merges, where, the log writes go on in)
    as well as its end, so the log shows one under way; before, only its end or its failure was."""
    import logging

    with serving(create_app(write_settings())) as client, caplog.at_level(logging.INFO, logger="spanseek"):
        assert client.put("/documents", headers=KEY, json={"documents": [DOC]}).status_code == 200
        assert client.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 60
        while not any(r.getMessage().startswith("merged 1 documents") for r in caplog.records):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    [start] = [r for r in caplog.records if r.getMessage().startswith("merging ")]
    assert start.levelno == logging.INFO and start.getMessage() == (
        f"merging 1 documents and 0 deletions into {write_settings().live_dir / 'bases' / 'base-000001'} "
        "(writes go on in wal-000002.jsonl)")


def test_writes_over_an_index_of_another_analyzer_are_made_with_its_analyzer(write_settings, tiny_index, tmp_path):
    """A server with writes over an index whose lexical part is ``folded2`` (not the analyzer new indexes get) makes
    its written documents' BM25 terms with ``folded2`` too, as its questions' are: "2" is a term there (``folded``
    drops one-character words, and the written passage would not match)."""
    import shutil

    from spanseek.indexer.lexical import add_lexical

    index = tmp_path / "older"
    shutil.copytree(tiny_index, index)
    add_lexical(index, analyzer="folded2")
    doc = {"id": "asked", "title": "Asked", "paragraphs": ["World War 2, quoth the owl."]}
    with serving(create_app(write_settings(index=index))) as client:
        assert client.get("/info", headers=KEY).json()["service"]["lexical_analyzer"] == "folded2"
        assert client.put("/documents", headers=KEY, json={"documents": [doc]}).status_code == 200
        r = client.post("/search?unit=doc", headers=KEY, json={"query": "2", "top_k": 3, "mode": "lexical"})
        assert r.status_code == 200, r.text
        assert "asked" in [h["doc_id"] for h in r.json()["results"][0]["hits"]]


def test_a_stopping_server_names_the_write_it_leaves_and_the_write_step_it_runs(write_settings, monkeypatch):
    """The threads of the writes are named with their job in the warning of a server stopping past busy threads, as
    the encoder's and the reloader's are (they were left out of it)."""
    import functools

    from spanseek.core import encoding
    from spanseek.indexer.live import LiveStore

    gate, entered = threading.Event(), threading.Event()

    def held(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            entered.set()
            gate.wait(30)
            return fn(*args, **kwargs)
        return run

    for held_step in (False, True):
        gate.clear()
        entered.clear()
        with monkeypatch.context() as m:
            if held_step:
                m.setattr("spanseek.service.live.advance", held(encoding.advance))
            else:
                m.setattr(LiveStore, "upsert", held(LiveStore.upsert))
            app = create_app(write_settings())
            with serving(app) as client:
                writer = threading.Thread(target=client.put, args=("/documents",),
                                          kwargs={"headers": KEY, "json": {"documents": [DOC]}})
                writer.start()
                try:
                    assert entered.wait(10)
                    busy = app.state.service.unfinished(0.05)
                finally:
                    gate.set()
                    writer.join(30)
        expected = ("spanseek-write-steps_0 (a step of a write's encoding, " if held_step
                    else "spanseek-write_0 (writing documents, ")
        assert any(line.startswith(expected) for line in busy), busy
