"""Document ids in one spelling on every route (service.writes, service.files): "café" typed on a Mac (NFD) and on
Linux (NFC) names one document; an id no document can hold is a 422 naming the problem; a document an index holds
under the NFD spelling stays reachable and replaceable.

    .venv/bin/python -m pytest -q tests/service/test_document_ids.py
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
from urllib.parse import quote

import pytest

from spanseek.client import APIError, Client
from spanseek.service.app import create_app
from tests.service.conftest import NFC_ID, NFD_ID, THIRD_ID, THIRD_NFC, THIRD_NFD, _index_holding, serving
from tests.service.test_writes import KEY

TEXT = "In 1460 Hugo built the island church."


def doc(doc_id: str, title: str = "Café") -> dict:
    return {"id": doc_id, "title": title, "paragraphs": [TEXT]}


def path(doc_id: str) -> str:
    return "/documents/" + quote(doc_id, safe="")


def listed(client) -> list[str]:
    return [d["id"] for d in client.get("/documents", headers=KEY).json()["documents"] if d["id"].startswith("caf")]


def by_filter(client, doc_id: str, dry_run: bool = True) -> list[str]:
    r = client.post("/documents/delete", headers=KEY, json={"filter": {"doc_ids": [doc_id]}, "dry_run": dry_run})
    assert r.status_code == 200, r.text
    return r.json()["deleted"]


def searched(client, doc_id: str) -> list[str]:
    r = client.post("/search?unit=doc", headers=KEY, json={"query": "who built the church?", "top_k": 5,
                                                          "filter": {"doc_ids": [doc_id]}})
    assert r.status_code == 200, r.text
    return [h["doc_id"] for h in r.json()["results"][0]["hits"]]


@pytest.mark.parametrize("writes", [True, False])
def test_an_id_no_document_can_hold_is_a_422_naming_it_on_get_and_delete(settings_for, tmp_path, writes):
    """A line break in /documents/{id} was a bare 404 "Not Found" from routing, and bytes that are not UTF-8 a 404
    for an id of U+FFFD characters the client never sent; a blank one (``GET /documents/``) was "no document ''"."""
    settings = settings_for(writes=writes, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        for method in ("GET", "DELETE") if writes else ("GET",):
            for doc_id, says in (("a%0Ab", "holds a line break ('\\n')"), ("a%00b", "holds a NUL"),
                                 ("caf%FF%FE", "the id is not UTF-8"), ("", "the id is blank ('')"),
                                 ("%20", "the id is blank (' ')")):
                r = client.request(method, f"/documents/{doc_id}", headers=KEY)
                assert r.status_code == 422 and r.json()["error"] == "validation_error", (method, doc_id, r.text)
                assert says in r.json()["details"][0]["msg"] and r.json()["details"][0]["loc"] == ["path", "id"]
        r = client.get(path("caf\ufffd"), headers=KEY)  # a U+FFFD the client sent (as UTF-8) is its id's own
        assert r.status_code == 404 and r.json()["message"] == "no document 'caf\ufffd'", r.text
        # a page after such an id was an empty page: after an id of U+FFFD characters, past every other
        r = client.get("/documents?after=caf%FF%FE", headers=KEY)
        assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["query", "after"], r.text
        assert "the query parameter after is not UTF-8" in r.json()["details"][0]["msg"], r.text
        assert client.get("/documents?after=%EF%BF%BD", headers=KEY).status_code == 200
        r = client.get("/documents?meta=lang%3D%FF", headers=KEY)  # (no document's value: an empty list)
        assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["query", "meta"], r.text


def test_an_id_written_in_one_spelling_is_read_replaced_and_deleted_in_the_other(settings_for, tmp_path):
    """Written as NFD through /documents, café.txt was not found as NFC (nor by a filter naming it so), and the NFC
    spelling wrote a second document beside it."""
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        assert client.put("/documents", headers=KEY, json=doc(NFD_ID)).status_code == 200
        for spelling in (NFC_ID, NFD_ID):
            r = client.get(path(spelling), headers=KEY)
            assert r.status_code == 200 and r.json()["id"] == NFC_ID, r.text
            assert client.get(path(spelling), headers=KEY, params={"meta_only": "true"}).json()["id"] == NFC_ID
            assert searched(client, spelling) == [NFC_ID] and by_filter(client, spelling) == [NFC_ID]
        assert listed(client) == [NFC_ID]
        r = client.put("/documents", headers=KEY, json=doc(NFC_ID, "Replaced"))
        assert r.status_code == 200 and listed(client) == [NFC_ID]
        assert client.get(path(NFD_ID), headers=KEY).json()["title"] == "Replaced"
        r = client.post("/documents", headers=KEY, json=doc(NFD_ID))
        assert r.status_code == 409 and NFC_ID in r.json()["message"], r.text
        r = client.put("/documents", headers=KEY, json={"documents": [doc(NFC_ID), doc(NFD_ID)]})
        assert r.status_code == 422 and "is also document 0 of this request (spelled" in r.text, r.text
        r = client.put(f"/files/{quote(NFD_ID)}", headers=KEY, params={"id": NFD_ID}, content=TEXT.encode())
        assert r.status_code == 200 and r.json()["id"] == NFC_ID and listed(client) == [NFC_ID], r.text
        r = client.delete(path(NFD_ID), headers=KEY)
        assert r.status_code == 200 and r.json()["deleted"] == [NFC_ID], r.text
        assert client.get(path(NFC_ID), headers=KEY).status_code == 404 and listed(client) == []


@pytest.mark.parametrize("writes", [True, False])
def test_a_document_an_index_holds_under_the_nfd_spelling_stays_reachable(settings_for, nfd_index, tmp_path, writes):
    """An index built before ids were NFC holds café.txt as NFD: it is found in either spelling, and a write in
    either spelling (PUT /documents, or a file's ``id=``; its name: test_file_writes) replaces it rather than adding
    an NFC document beside it."""
    settings = settings_for(index=nfd_index, writes=writes, api_key="key", live_dir=tmp_path / "live",
                            merge_tokens=0)
    with serving(create_app(settings)) as client:
        for spelling in (NFC_ID, NFD_ID):
            r = client.get(path(spelling), headers=KEY)
            assert r.status_code == 200 and r.json()["id"] == NFD_ID, r.text
            assert searched(client, spelling) == [NFD_ID]
        if not writes:
            return
        for spelling in (NFC_ID, NFD_ID):
            assert by_filter(client, spelling) == [NFD_ID]
            r = client.put("/documents", headers=KEY, json=doc(spelling, f"Replaced as {spelling}"))
            assert r.status_code == 200 and listed(client) == [NFD_ID], r.text
            assert client.get(path(NFD_ID), headers=KEY).json()["title"] == f"Replaced as {spelling}"
            r = client.put("/files/other.txt", headers=KEY, params={"id": spelling}, content=TEXT.encode())
            assert r.status_code == 200 and r.json()["id"] == NFD_ID and listed(client) == [NFD_ID], r.text
        assert client.post("/documents", headers=KEY, json=doc(NFC_ID)).status_code == 409
        r = client.delete(path(NFC_ID), headers=KEY)
        assert r.status_code == 200 and r.json()["deleted"] == [NFD_ID] and listed(client) == [], r.text


def test_the_client_names_a_document_in_either_spelling(settings_for, live, tmp_path):
    """The Python client's get and delete find an id written in the other spelling; an id no document can hold is
    an APIError (422) that says why, not a 404 "Not Found"."""
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        client.upsert(doc(NFD_ID))
        assert client.get(NFC_ID)["id"] == NFC_ID and client.get(NFD_ID, meta_only=True)["id"] == NFC_ID
        assert [d["id"] for d in client.documents() if d["id"].startswith("caf")] == [NFC_ID]
        for call in (client.get, client.delete):
            with pytest.raises(APIError) as e:
                call("a\nb")
            assert e.value.status == 422 and "holds a line break" in str(e.value)
        assert client.delete(NFD_ID) == [NFC_ID] and client.get(NFC_ID) is None


def test_a_python_filter_finds_and_matches_a_document_in_either_spelling(nfd_index, tiny_model_dir):
    """``SearchFilter(doc_ids=...)`` built in Python looks an id up as the HTTP filter does (``core.ids``): the NFC
    spelling finds the document the index holds as NFD, and the other way round. Before, only the HTTP schema added
    the other spellings: a Python filter in NFC passed no document."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchFilter, SearchParams

    searcher = open_searcher(nfd_index, tiny_model_dir, device="cpu", precision="fp32")
    for given in (NFC_ID, NFD_ID):
        flt = SearchFilter(doc_ids=[given, "d1"])
        (hits,) = searcher.search(["Who built the harbour bridge?"], SearchParams("doc", 5, filter=flt))
        assert {h.doc_id for h in hits} == {NFD_ID, "d1"}, given
        assert flt.matches(NFD_ID, "Café", {}) and flt.matches(NFC_ID, "Café", {})
        assert not flt.matches("cafe.txt", "Café", {})
        assert flt.doc_ids == (given, "d1") and flt.to_json()["doc_ids"] == [given, "d1"]  # kept as given


@pytest.mark.parametrize(("held", "given"), [("nfd_index", NFC_ID), ("nfd_index", NFD_ID),
                                             ("third_spelling_index", THIRD_NFC), ("third_spelling_index", THIRD_NFD)])
def test_index_delete_takes_an_id_in_any_spelling(request, tmp_path, held, given):
    """``spanseek index delete --ids`` deletes the document the index holds as NFD when given its NFC spelling, as
    DELETE /documents/{id} does, and one held as "ẹ" + U+0302 (neither NFC nor NFD, the one ``index upsert``
    replaces) given "việt.txt" in either; an id held in no spelling is listed as not found, as given. Before, only
    the spelling held matched, then only the id as given, its NFC and its NFD ("not found" for the third)."""
    import shutil

    from spanseek.cli import main
    from spanseek.indexer.lifecycle import counts, delete_documents

    built = request.getfixturevalue(held)
    index = tmp_path / "index"
    shutil.copytree(built, index)
    done = delete_documents(index, [given, "nai\u0308ve.txt"])
    assert done["deleted"] == 1 and done["not_found"] == ["nai\u0308ve.txt"], done
    shutil.rmtree(index)
    shutil.copytree(built, index)
    assert main(["index", "delete", "--index", str(index), "--ids", given]) in (0, None)
    assert counts(index)["deleted_documents"] == 1


@pytest.mark.parametrize("writes", [True, False])
def test_a_document_held_under_a_third_spelling_is_read_replaced_and_deleted_by_any_spelling(
        settings_for, third_spelling_index, tmp_path, writes):
    """An index holding "việt.txt" as "ẹ" + U+0302 (neither NFC nor NFD): GET, PUT and DELETE /documents/{id} name
    it in any spelling of the same NFC, and a write keeps the spelling held. Before, only the id as given, its NFC
    and its NFD were tried: GET "việt.txt" was a 404, DELETE a 404, and PUT wrote a second document beside it."""
    settings = settings_for(index=third_spelling_index, writes=writes, api_key="key", live_dir=tmp_path / "live",
                            merge_tokens=0)

    def held() -> list[str]:
        return [d["id"] for d in client.get("/documents", headers=KEY).json()["documents"] if d["id"].startswith("vi")]

    with serving(create_app(settings)) as client:
        for spelling in (THIRD_NFC, THIRD_NFD, THIRD_ID):
            r = client.get(path(spelling), headers=KEY)
            assert r.status_code == 200 and r.json()["id"] == THIRD_ID, (spelling, r.text)
        assert client.get(path("viet.txt"), headers=KEY).status_code == 404  # (no accent: another id)
        if not writes:
            return
        r = client.put("/documents", headers=KEY, json=doc(THIRD_NFC, "Replaced"))
        assert r.status_code == 200 and held() == [THIRD_ID], r.text
        assert client.get(path(THIRD_NFD), headers=KEY).json()["title"] == "Replaced"
        r = client.delete(path(THIRD_NFC), headers=KEY)
        assert r.status_code == 200 and r.json()["deleted"] == [THIRD_ID] and held() == [], r.text
        assert client.delete(path(THIRD_NFC), headers=KEY).status_code == 404



def test_a_lookup_by_id_after_a_write_makes_no_pass_over_every_id(settings_for, third_spelling_index, tmp_path):
    """Each write publishes a new snapshot of the index; the first lookup by id on it (GET, PUT, DELETE
    /documents/{id}) made the respellings of every id it held, on the event loop: 13-52 ms a write at 1M documents.
    They are now the base's (made once) joined with the segment's, made as the write publishes: the same answers as
    the whole pass (a third spelling held in the base and, once replaced, in the segment), and the snapshot's own
    pass is never made."""
    from spanseek.core.ids import respellings
    from spanseek.service.live import respelled_ids

    settings = settings_for(index=third_spelling_index, writes=True, api_key="key", live_dir=tmp_path / "live",
                            merge_tokens=0)
    with serving(create_app(settings)) as client:
        live = client.app.state.service.live
        for written in (doc(THIRD_NFC, "Replaced"), doc("na\u00efve.txt"), doc(THIRD_NFD, "Again")):
            assert client.put("/documents", headers=KEY, json=written).status_code == 200
            snapshot = live.store.snapshot
            for spelling in (THIRD_NFC, THIRD_NFD, THIRD_ID):
                r = client.get(path(spelling), headers=KEY)
                assert r.status_code == 200 and r.json()["id"] == THIRD_ID, (spelling, r.text)
            made = respelled_ids(snapshot)  # the base's (made once a base) joined with the segment's: no pass
            assert getattr(made, "first", made) is snapshot.base.fields.respelled
            assert dict(made) == respellings(snapshot.fields.ids) == {THIRD_NFC: [THIRD_ID]}
        assert client.get(path(THIRD_NFC), headers=KEY).json()["title"] == "Again"


@pytest.mark.parametrize("writes", [False, True])
async def test_a_lookup_by_id_holds_up_no_other_request(settings_for, tmp_path, monkeypatch, writes):
    """A server without writes made the respellings of every id (13-52 ms at 1M documents) on the event loop at its
    first lookup by id, and every other request waited; now every lookup by id (GET and DELETE /documents/{id})
    runs off the loop. Here the respellings are held until /health has answered: on the loop, it never did."""
    import asyncio
    import threading

    from spanseek.service import writes as writes_module
    from tests.service.conftest import async_serving

    made = writes_module.respelled_ids
    started, answered, waited = threading.Event(), threading.Event(), []

    def slow_respellings(index):
        started.set()
        waited.append(answered.wait(5))
        return made(index)

    settings = settings_for(writes=writes, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    async with async_serving(create_app(settings)) as client:
        monkeypatch.setattr(writes_module, "respelled_ids", slow_respellings)
        for method in ("GET", "DELETE") if writes else ("GET",):
            started.clear(), answered.clear()
            lookup = asyncio.create_task(client.request(method, path("no such id"), headers=KEY))
            while not started.is_set() and not lookup.done():  # the lookup is under way (or, on the loop, done)
                await asyncio.sleep(0.005)
            health = await client.get("/health")
            answered.set()
            assert health.status_code == 200 and (await lookup).status_code == 404
            assert waited.pop() is True, f"/health waited for the {method} lookup by id"


LONGEST = 1024  # characters of an id a write takes (core.ids.MAX_ID_CHARS)


@pytest.mark.parametrize("route", ["body", "file id", "file name"])
def test_an_id_over_the_limit_is_refused_alike_however_it_comes_and_one_at_it_is_written(write_settings, route):
    """``PUT /documents`` refused an id over 1,024 characters, while ``PUT /files/a.txt?id=`` wrote one of any length
    (and a file's long name was refused for the title it made): one rule, one message, whichever way the id came."""

    def put(doc_id: str):
        if route == "body":
            return client.put("/documents", headers=KEY, json=doc(doc_id))
        if route == "file id":
            return client.put("/files/a.txt", headers=KEY, params={"id": doc_id}, content=TEXT.encode())
        return client.put("/files/" + quote(doc_id, safe=""), headers=KEY, content=TEXT.encode())

    suffix = ".txt" if route == "file name" else ""
    too_long, longest = "x" * (LONGEST + 1 - len(suffix)) + suffix, "y" * (LONGEST - len(suffix)) + suffix
    with serving(create_app(write_settings(max_title_chars=2000))) as client:  # (a file's title is its name's stem)
        r = put(too_long)
        assert r.status_code == 422 and r.json()["error"] == "validation_error", r.text
        (detail,) = r.json()["details"]
        assert detail["msg"].endswith("'id' has 1,025 characters; an id has at most 1,024"), detail
        assert detail["loc"] == {"body": ["body", "documents", "0", "id"], "file id": ["query", "id"],
                                 "file name": ["path", "name"]}[route]
        assert client.get(path(too_long), headers=KEY).status_code == 404  # nothing written
        r = put(longest)
        assert r.status_code == 200, r.text
        assert client.get(path(longest), headers=KEY).json()["id"] == longest


def test_a_held_id_of_any_length_is_read_replaced_and_deleted(settings_for, tmp_path, tiny_model_dir):
    """The limit is a new document's: an index built from a corpus file may hold a longer id, which was read and
    deleted, but ``PUT /documents`` and ``PUT /files/{name}`` of it were a 422 for its length. An add of it is the 409
    of an id held; a new id as long is still refused."""
    long_id = "z" * (LONGEST + 10)
    index = _index_holding(tmp_path, tiny_model_dir, long_id)
    settings = settings_for(index=index, writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        assert client.get(path(long_id), headers=KEY).json()["id"] == long_id
        r = client.put("/documents", headers=KEY, json=doc(long_id))
        assert r.status_code == 200 and r.json()["documents"] == 1, r.text
        assert client.get(path(long_id), headers=KEY).json()["paragraphs"] == [TEXT]
        r = client.put("/files/a.txt", headers=KEY, params={"id": long_id}, content=b"In 1470 Ida built the mill.")
        assert r.status_code == 200 and r.json()["id"] == long_id, r.text
        assert client.post("/documents", headers=KEY, json=doc(long_id)).status_code == 409
        assert [d["id"] for d in client.get("/documents", headers=KEY).json()["documents"]].count(long_id) == 1
        assert client.delete(path(long_id), headers=KEY).json()["deleted"] == [long_id]
        for write in (lambda: client.put("/documents", headers=KEY, json=doc(long_id)),  # gone: a new id again
                      lambda: client.put("/files/a.txt", headers=KEY, params={"id": long_id}, content=TEXT.encode())):
            r = write()
            assert r.status_code == 422 and "'id' has 1,034 characters" in r.text, r.text


@contextlib.contextmanager
def _deleted_as_written(settings_for, root, tiny_model_dir, monkeypatch, held):
    """A client of a server over an index holding ``held``, whose store deletes it as the next write lands (a DELETE
    between that write's lookup of its id and its write)."""
    index = _index_holding(root, tiny_model_dir, held)
    settings = settings_for(index=index, writes=True, api_key="key", live_dir=root / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        store = client.app.state.service.live.store
        upsert = store.upsert

        def deleted_first(*args, **kwargs):
            store.delete([held])
            return upsert(*args, **kwargs)

        monkeypatch.setattr(store, "upsert", deleted_first)
        yield client


def _put(client, route, doc_id):
    """A write of ``doc_id`` with one of another id (``body``), or of a file under it (``file id``)."""
    if route == "body":
        return client.put("/documents", headers=KEY, json={"documents": [doc("short"), doc(doc_id)]})
    return client.put("/files/a.txt", headers=KEY, params={"id": doc_id}, content=TEXT.encode())


@pytest.mark.parametrize("route", ["body", "file id"])
def test_a_held_long_id_deleted_after_a_write_looked_it_up_is_not_written_anew(settings_for, tmp_path, tiny_model_dir,
                                                                               monkeypatch, route):
    """A write of a held id over the limit looked it up before it read the body and encoded it, and wrote later: a
    DELETE in between let it write a new document under an id no write may make. The store checks it as it writes."""
    long_id = "z" * (LONGEST + 10)
    with _deleted_as_written(settings_for, tmp_path, tiny_model_dir, monkeypatch, long_id) as client:
        r = _put(client, route, long_id)
        assert r.status_code == 422 and r.json()["error"] == "validation_error", r.text
        (detail,) = r.json()["details"]
        assert detail["loc"] == {"body": ["body", "documents", "1", "id"], "file id": ["query", "id"]}[route]
        assert "'id' has 1,034 characters; an id has at most 1,024 (a write takes a longer one only to replace" in \
            detail["msg"], detail
        assert client.get(path(long_id), headers=KEY).status_code == 404  # deleted, and not written anew
        assert client.get(path("short"), headers=KEY).status_code == 404  # nothing of the request written


@pytest.mark.parametrize("route", ["body", "file id"])
def test_an_id_held_in_a_longer_spelling_deleted_after_a_write_looked_it_up_is_written_as_the_request_spells_it(
        settings_for, tmp_path, tiny_model_dir, monkeypatch, route):
    """A write of an id of 1,024 characters composed, held decomposed (1,034), looked it up before a DELETE of it
    landed: it was refused as "'id' has 1,034 characters", which the request never sent, where the same write made
    after the delete writes a new document under the id as sent. It is now written so in either order."""
    composed = "\u00e9" * 10 + "z" * (LONGEST - 10)
    held = unicodedata.normalize("NFD", composed)
    with _deleted_as_written(settings_for, tmp_path, tiny_model_dir, monkeypatch, held) as client:
        r = _put(client, route, composed)
        assert r.status_code == 200, r.text
        assert client.get(path(composed), headers=KEY).json()["id"] == composed
        assert client.get(path(held), headers=KEY).json()["id"] == composed  # (one id in either spelling)


@pytest.mark.parametrize("route", ["body", "file id"])
@pytest.mark.parametrize("given", [NFC_ID, NFD_ID])
def test_an_id_held_decomposed_deleted_after_a_write_looked_it_up_is_written_composed(
        settings_for, tmp_path, tiny_model_dir, monkeypatch, route, given):
    """A write of a short id held decomposed (NFD), in either spelling, that looked it up before a DELETE of it landed:
    it was written new under the decomposed spelling, where the same write made after the delete writes a new
    document under the composed one (NFC), as every new document is. It is now written so in either order."""
    with _deleted_as_written(settings_for, tmp_path, tiny_model_dir, monkeypatch, NFD_ID) as client:
        r = _put(client, route, given)
        assert r.status_code == 200, r.text
        if route == "file id":
            assert r.json()["id"] == NFC_ID
        assert NFC_ID in listed(client) and NFD_ID not in listed(client)
        assert client.get(path(given), headers=KEY).json()["id"] == NFC_ID


def test_a_message_quotes_a_long_id_or_file_name_shortened(write_settings):
    """A 404, a 409 and an ``unreadable_file`` quoted the whole id or file name: a kilobyte in the client's message
    and the log, for each. Now its first 100 characters and its length, as every error quotes a request's text."""
    long_id = "k" * 1000
    cut = f"'{'k' * 100}… (1,000 characters)'"
    with serving(create_app(write_settings())) as client:
        for method in ("GET", "DELETE"):
            r = client.request(method, path(long_id), headers=KEY)
            assert r.status_code == 404 and r.json()["message"] == f"no document {cut}", r.text
        assert client.put("/documents", headers=KEY, json=doc(long_id)).status_code == 200
        r = client.post("/documents", headers=KEY, json=doc(long_id))
        assert r.status_code == 409 and cut in r.json()["message"] and len(r.content) < 500, r.text
        name = "n" * 996 + ".txt"
        for body, says in ((b"", "the request has no body"), (b"\x00\x01binary", "binary file")):
            r = client.put("/files/" + name, headers=KEY, content=body)
            assert r.status_code == 422 and r.json()["error"] == "unreadable_file", r.text
            assert r.json()["message"].startswith(f"{'n' * 100}… (1,000 characters): {says}"), r.text


def test_a_documents_refusal_quotes_its_long_id_shortened(write_settings):
    """A document's metadata the corpus reader refuses (not finite, over 16 KiB) was a 422 quoting the document's
    whole id, in its message and again in its details: over 2 KB for an id of 1,000 characters, within the limit."""
    long_id, name = "k" * 1000, "n" * 996 + ".txt"
    with serving(create_app(write_settings())) as client:
        r = client.put("/documents", headers={**KEY, "content-type": "application/json"},
                       content=json.dumps({**doc(long_id), "meta": {"a": float("nan")}}).encode())
        cases = [(r, f"document '{'k' * 100}… (1,000 characters)': its 'meta' holds a number that is not finite")]
        r = client.put("/files/" + name, headers=KEY, params={"meta": "a=" + "v" * 17000}, content=TEXT.encode())
        cases.append((r, f"document '{'n' * 100}… (1,000 characters)': its 'meta' is"))
        for r, says in cases:
            assert r.status_code == 422 and r.json()["error"] == "validation_error", r.text
            assert says in r.json()["message"] and len(r.content) < 1500, r.text


@pytest.mark.parametrize("writes", [True, False])
def test_a_missing_documents_404_quotes_its_id_as_the_client_spelled_it(settings_for, tmp_path, writes):
    """GET's 404 quoted the composed (NFC) spelling it looked up last, DELETE's the id as given: a client that asked
    for "café" typed on a Mac read about another string than it sent, from one route of the two."""
    settings = settings_for(writes=writes, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        for doc_id in (NFD_ID, NFC_ID):
            for method in ("GET", "DELETE") if writes else ("GET",):
                r = client.request(method, path(doc_id), headers=KEY)
                assert r.status_code == 404 and r.json()["message"] == f"no document {doc_id!r}", (method, r.text)
            r = client.get(path(doc_id) + "?meta_only=true", headers=KEY)
            assert r.status_code == 404 and r.json()["message"] == f"no document {doc_id!r}", r.text


def test_a_409_lists_the_first_five_held_ids_each_quoted_shortened():
    """The 409 of an add says what ``HeldDocuments`` says (one wording), each id quoted as every error quotes one."""
    from spanseek.indexer.live import HeldDocuments
    from spanseek.service.writes import held_already

    ids = ["k" * 1000, *"abcdef"]
    e = held_already(HeldDocuments(ids), "PUT /documents")
    assert e.status == 409 and str(e) == (f"7 of the documents are held already: '{'k' * 100}… (1,000 characters)', "
                                          "'a', 'b', 'c', 'd' ...; PUT /documents replaces documents by id")
    assert str(HeldDocuments(ids[1:3])) == "2 of the documents are held already: 'a', 'b'"


def test_a_held_id_over_the_limit_only_in_its_stored_spelling_is_replaced_by_a_file(settings_for, tmp_path,
                                                                                  tiny_model_dir):
    """An index built from a corpus file holds a name decomposed (NFD: 1,204 characters), 604 characters composed.
    ``PUT /documents`` under the composed id replaced it, while ``PUT /files/{name}`` of the same name was a 422 for
    the stored spelling's length, which the client never sent: the limit is the given id's on both routes."""
    nfc = "\u00e9" * 600 + ".txt"
    nfd = unicodedata.normalize("NFD", nfc)
    assert len(nfc) <= LONGEST < len(nfd)
    index = _index_holding(tmp_path, tiny_model_dir, nfd)
    settings = settings_for(index=index, writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        r = client.put("/files/" + quote(nfc, safe=""), headers=KEY, content=b"In 1470 Ida built the mill.")
        assert r.status_code == 200 and r.json()["id"] == nfd, r.text
        assert client.get(path(nfc), headers=KEY).json()["paragraphs"] == ["In 1470 Ida built the mill."]
        assert [d["id"] for d in client.get("/documents", headers=KEY).json()["documents"]].count(nfd) == 1
        r = client.put("/files/a.txt", headers=KEY, params={"id": nfc}, content=b"In 1480 Ida built the mill.")
        assert r.status_code == 200 and r.json()["id"] == nfd, r.text
        r = client.put("/files/" + quote(nfd, safe=""), headers=KEY, content=TEXT.encode())  # (as held: replaced)
        assert r.status_code == 200 and r.json()["id"] == nfd, r.text
