"""Hot reload: POST /admin/reload and alias switches swap the index under load without losing a request; a reload
that cannot serve (foreign model, damaged files, no index) keeps the old index serving and says why.

    .venv/bin/python -m pytest -q tests/service/test_reload.py
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import shutil
import threading
import time
import weakref
from pathlib import Path

import httpx
import pytest

from spanseek.cli import main
from spanseek.core.alias import AliasError, resolve_alias, switch_alias
from spanseek.core.phrase_index import VECTORS
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.service.app import create_app
from spanseek.service.errors import ReloadFailed
from tests.conftest import make_corpus

KEY = "admin-key"
AUTH = {"X-API-Key": KEY}
OPTS = BuildOptions(shard_passages=7, progress=False, precision="fp32")


@pytest.fixture(scope="module")
def index_b(tmp_path_factory, tiny_model_dir):
    """An index of other documents (ids b0..b5, unlike the tiny index's d0..d5) built by the same model."""
    root = tmp_path_factory.mktemp("index-b")
    docs = [{**d, "id": "b" + d["id"][1:]} for d in make_corpus(seed=3)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    build_index(root / "corpus.jsonl", tiny_model_dir, root / "index", OPTS)
    return root / "index"


@pytest.fixture(scope="module")
def foreign_index(tmp_path_factory, tiny_config, tiny_corpus):
    """A valid index built by another model (same config, other weights)."""
    import torch

    from spanseek.core.model import PhraseModel

    root = tmp_path_factory.mktemp("foreign")
    torch.manual_seed(1)
    model = PhraseModel(tiny_config).save(root / "model")
    build_index(tiny_corpus, model, root / "index", OPTS)
    return root / "index"


def docs_of(response: httpx.Response) -> set[str]:
    """The first letter of every hit's document id: {"d"} from the tiny index, {"b"} from index_b."""
    assert response.status_code == 200, response.text
    return {h["doc_id"][0] for r in response.json()["results"] for h in r["hits"]}


def search(client, question: str = "Who built the castle?"):
    return client.post("/search?unit=doc", json={"query": question, "top_k": 3}, headers=AUTH)


def test_reload_under_load_loses_no_request(settings_for, live, tiny_index, index_b, tmp_path):
    """Four clients search without pause while the index is swapped five times: every answer is a 200 from one
    index or the other, and every request sent after a reload returned is answered by the new index."""
    alias = switch_alias(tmp_path / "current", tiny_index).path
    app = create_app(settings_for(index=alias, api_key=KEY, warmup=True, max_queue_wait_ms=0))
    answers: list[tuple[float, float, int, frozenset[str]]] = []  # (sent, received, status, doc id letters)
    stop = threading.Event()

    def client_loop(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while not stop.is_set():
                sent = time.monotonic()
                r = search(c, f"Who built the castle number {n}?")
                got = frozenset(docs_of(r)) if r.status_code == 200 else frozenset()
                answers.append((sent, time.monotonic(), r.status_code, got))

    swaps: list[tuple[float, float, str]] = []  # (sent, returned, letter now served)
    with live(app) as url:
        threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.3)
            with httpx.Client(base_url=url, timeout=120, headers=AUTH) as admin:
                # a path in the body is served from then on; no body: the served path (the alias) resolved again
                for target, letter in [(index_b, "b"), (alias, "d"), (index_b, "b"), (alias, "d"), (None, "d")]:
                    body = {"json": {"index": str(target)}} if target is not None else {}
                    sent, r = time.monotonic(), admin.post("/admin/reload", **body)
                    assert r.status_code == 200, r.text
                    assert r.json()["index"]["dir"] == str((index_b if letter == "b" else tiny_index).resolve())
                    assert r.json()["index"]["released_previous"] is True
                    swaps.append((sent, time.monotonic(), letter))
                    time.sleep(0.3)  # and at least two answers to requests sent since, however loaded the machine
                    deadline = time.monotonic() + 60
                    while sum(a[0] > swaps[-1][1] for a in answers) < 2 and time.monotonic() < deadline:
                        time.sleep(0.05)
                info = admin.get("/info").json()
                metrics = admin.get("/metrics").text
        finally:
            stop.set()
            for t in threads:
                t.join(60)
    assert len(answers) > 40 and {status for _, _, status, _ in answers} == {200}
    assert all(len(letters) == 1 for *_, letters in answers)  # each answer comes from one index
    for (_, returned, letter), nxt in zip(swaps, [*swaps[1:], None], strict=True):
        after = [a for a in answers if a[0] > returned and (nxt is None or a[1] < nxt[0])]
        assert after and all(a[3] == {letter} for a in after)
    during = [a for a in answers if any(a[0] < returned and a[1] > sent for sent, returned, _ in swaps)]
    assert during  # requests were in flight during the swaps
    assert info["service"]["reload"]["reloads"] == 5 and info["service"]["reload"]["last"]["outcome"] == "ok"
    assert info["index"]["path"] == str(alias) and info["index"]["alias"] == "symlink"
    assert info["index"]["manifest_checksum"] and info["index"]["loaded_at"]
    assert 'spanseek_index_reloads_total{outcome="ok"} 5.0' in metrics


async def test_a_failing_reload_keeps_the_old_index(settings_for, async_serve, foreign_index, index_b, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(index_b, damaged)
    with open(damaged / VECTORS, "r+b") as f:  # same size, other bytes: only the checksum can tell
        f.seek(-2, 2)
        last = f.read(2)
        f.seek(-2, 2)
        f.write(bytes(b ^ 0xFF for b in last))
    bad_pointer = tmp_path / "pointer"
    bad_pointer.write_text("no-such-dir\n")
    app = create_app(settings_for(api_key=KEY))
    async with async_serve(app) as client:
        before = (await client.get("/info", headers=AUTH)).json()["index"]
        cases = [(foreign_index, "index was built with a different model"), (damaged, "vectors.npy: checksum mismatch"),
                 (tmp_path / "nowhere", "no such index directory"), (bad_pointer, "names"),
                 (tmp_path, "no manifest.json")]
        for path, reason in cases:
            r = await client.post("/admin/reload", json={"index": str(path)}, headers=AUTH)
            assert r.status_code == 409 and r.json()["error"] == "reload_failed", r.text
            assert reason in r.json()["message"] and "still serving the previous index" in r.json()["message"]
            assert docs_of(await search(client)) == {"d"}
        r = await client.post("/admin/reload", json={"index": str(index_b), "extra": 1}, headers=AUTH)
        assert r.status_code == 422
        info = (await client.get("/info", headers=AUTH)).json()
        assert (await client.get("/ready")).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert info["index"] == before
    reload = info["service"]["reload"]
    assert (reload["reloads"], reload["failed"], reload["last"]["outcome"]) == (0, len(cases), "failed")
    assert f'spanseek_index_reloads_total{{outcome="failed"}} {len(cases)}.0' in metrics
    assert 'spanseek_errors_total{route="/admin/reload",type="reload_failed"} 5.0' in metrics


async def test_alias_switches_are_picked_up(settings_for, async_serve, until, tiny_index, index_b, foreign_index,
                                            tmp_path):
    """A pointer-file alias, switched with `spanseek index switch`: the watcher swaps to the new index, and skips
    (once, with the reason in /info) a switch to an index of another model."""
    pointer = tmp_path / "current"
    switch_alias(pointer, tiny_index, pointer=True)
    app = create_app(settings_for(index=pointer, index_poll_s=0.02))
    state = app.state.service
    async with async_serve(app) as client:
        assert docs_of(await search(client)) == {"d"}
        assert main(["index", "switch", str(pointer), str(index_b)]) == 0
        await until(lambda: state.info["index"]["dir"] == str(index_b.resolve()))
        assert docs_of(await search(client)) == {"b"}
        assert main(["index", "switch", str(pointer), str(foreign_index)]) == 0
        await until(lambda: state.reloader.failures == 1)
        await asyncio.sleep(0.2)  # ten more polls: the failed switch is not retried
        info = (await client.get("/info")).json()
        assert docs_of(await search(client)) == {"b"}
    assert info["index"]["dir"].endswith("index") and info["index"]["alias"] == "pointer"
    reload = info["service"]["reload"]
    assert (reload["reloads"], reload["failed"]) == (1, 1) and "different model" in reload["last"]["error"]
    assert str(tmp_path) not in json.dumps(info)  # no key configured: no server paths shown


async def test_a_service_whose_index_failed_to_load_recovers(settings_for, until, tiny_index, foreign_index,
                                                             tmp_path):
    """Started on an alias naming an index of another model: not ready; a reload to a missing index still fails;
    pointing the alias at a good index makes it ready without a restart."""
    alias = switch_alias(tmp_path / "current", foreign_index).path
    app = create_app(settings_for(index=alias, index_poll_s=0.02, api_key=KEY))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            await until(lambda: app.state.service.status == "failed")
            for path in ("/ready", "/info", "/search"):  # every route says why, none says to keep waiting
                r = await (client.get(path, headers=AUTH) if path != "/search" else search(client))
                assert r.status_code == 503 and "loading failed" in r.json()["message"], (path, r.text)
                assert "different model" in r.json()["message"], path
            r = await client.post("/admin/reload", json={"index": str(tmp_path / "nowhere")}, headers=AUTH)
            assert r.status_code == 409 and "still not serving" in r.json()["message"]
            assert (await client.get("/ready")).status_code == 503
            switch_alias(alias, tiny_index)  # the watcher still follows the alias, not the failed body's path
            await until(lambda: app.state.service.status == "ready")
            assert docs_of(await search(client)) == {"d"}
            reload = (await client.get("/info", headers=AUTH)).json()["service"]["reload"]
    assert (reload["reloads"], reload["failed"]) == (1, 1) and reload["last"]["reason"] == "alias changed"


async def test_reload_needs_the_api_key(settings_for, async_serve, index_b):
    async with async_serve(create_app(settings_for(api_key=KEY))) as client:
        assert (await client.post("/admin/reload")).status_code == 401
        assert (await client.post("/admin/reload", headers={"X-API-Key": "wrong"})).status_code == 401
        r = await client.post("/admin/reload", json={"index": "a\x00b"}, headers={"X-API-Key": KEY})
        assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["body", "index"], r.text
        r = await client.post("/admin/reload", json={"index": str(index_b)}, headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.json()["reload"]["reloads"] == 1
        assert docs_of(await search(client)) == {"b"}
    async with async_serve(create_app(settings_for())) as client:  # no key configured: reloads on request are off
        for body in ({"json": {"index": str(index_b)}}, {}):
            r = await client.post("/admin/reload", **body)
            message = r.json()["message"]
            assert r.status_code == 403 and "SPANSEEK_API_KEY" in message
            assert "SPANSEEK_INDEX_POLL_S" in message and "SIGHUP" in message  # the ways that remain
        assert (await client.get("/info")).json()["service"]["reload"]["reloads"] == 0


async def test_reload_needs_the_admin_key_where_one_is_set(settings_for, async_serve, index_b):
    """A reload serves any index path on the server and says what it found there: where SPANSEEK_ADMIN_API_KEY is
    set the API key only searches and reads (it reloaded, to any path, as the admin key does), and the admin key
    sees the paths in full as the API key does."""
    admin = {"X-API-Key": "admin"}
    settings = dict(api_key=KEY, admin_api_key="admin", reload_refusal_delay_s=0)
    async with async_serve(create_app(settings_for(**settings))) as client:
        r = await client.post("/admin/reload", json={"index": str(index_b)}, headers=AUTH)
        assert r.status_code == 403 and "needs the admin key" in r.json()["message"], r.text
        assert (await client.post("/admin/reload", headers={"X-API-Key": "wrong"})).status_code == 401
        assert (await client.post("/admin/reload")).status_code == 401
        assert docs_of(await search(client)) == {"d"}  # still the first index
        r = await client.post("/admin/reload", json={"index": str(index_b)}, headers=admin)
        assert r.status_code == 200 and r.json()["index"]["path"] == str(index_b), r.text
        assert docs_of(await search(client)) == {"b"}
        assert (await client.get("/info", headers=admin)).json()["index"]["path"] == str(index_b)
    settings = dict(admin_api_key="admin", reload_refusal_delay_s=0)  # searches need no key, reloads the admin key
    async with async_serve(create_app(settings_for(**settings))) as client:
        assert (await client.post("/admin/reload", json={"index": str(index_b)})).status_code == 401
        r = await client.post("/admin/reload", json={"index": str(index_b)}, headers=admin)
        assert r.status_code == 200 and r.json()["reload"]["reloads"] == 1, r.text


async def test_reloads_on_request_are_shared_and_spaced(settings_for, async_serve):
    """A reload reads and checksums the whole index and holds two copies: concurrent requests share one reload, and
    one that comes within reload_min_interval_s of the last gets 429 with Retry-After. Before, a bare POST (no key
    needed) started a reload each time, and a few clients repeating it halved the service's throughput."""
    app = create_app(settings_for(api_key=KEY, reload_min_interval_s=60, reload_refusal_delay_s=0.5))
    state = app.state.service
    async with async_serve(app) as client:
        together = await asyncio.gather(*[client.post("/admin/reload", headers=AUTH) for _ in range(5)])
        assert [r.status_code for r in together] == [200] * 5
        assert state.reloader.reloads == 1
        t0 = time.monotonic()
        r = await client.post("/admin/reload", headers=AUTH)
        assert r.status_code == 429 and "reload_min_interval_s" in r.json()["message"]
        assert 50 <= int(r.headers["Retry-After"]) <= 60 and state.reloader.reloads == 1
        metrics = (await client.get("/metrics")).text  # not load shedding, which the overload alert watches
        assert r.json()["error"] == "reload_throttled" and 'spanseek_errors_total{route="/admin/reload",type="reload_throttled"} 1.0' in metrics
        assert 'spanseek_errors_total{route="/search",type="overloaded"} 0.0' in metrics
        r = await client.post("/admin/reload")
        assert r.status_code == 401 and time.monotonic() - t0 >= 2 * 0.5  # refusals answered after the delay
        t0 = time.monotonic()
        assert (await client.get("/ready")).status_code == 200 and time.monotonic() - t0 < 0.5  # nothing else



async def test_info_says_while_a_reload_is_under_way(settings_for, async_serve, until, index_b):
    """While a reload loaded its index (minutes, for a large one), /info said nothing of it: ``service.reload.last``
    was the attempt before, and a client could not tell a reload in progress from none. ``running`` names it, and
    /health, /ready and ``last`` stay the served index's until the swap."""
    app = create_app(settings_for(api_key=KEY))
    reloader = app.state.service.reloader
    gate, reopen = threading.Event(), reloader.reopener

    def held(*args):
        gate.wait(30)
        return reopen(*args)

    reloader.reopener = held
    async with async_serve(app) as client:
        assert (await client.get("/info", headers=AUTH)).json()["service"]["reload"]["running"] is None
        reloading = asyncio.create_task(client.post("/admin/reload", headers=AUTH, json={"index": str(index_b)}))
        await until(lambda: reloader.under_way is not None)
        shown = (await client.get("/info", headers=AUTH)).json()["service"]["reload"]
        assert shown["running"]["index"] == str(index_b) and shown["running"]["reason"] == "request", shown
        assert shown["running"]["since"] and shown["last"] is None
        assert (await client.get("/health")).json()["detail"] == "ready"
        assert (await client.get("/ready")).status_code == 200
        gate.set()
        assert (await reloading).status_code == 200
        shown = (await client.get("/info", headers=AUTH)).json()["service"]["reload"]
        assert shown["running"] is None and shown["last"]["outcome"] == "ok"


async def test_info_hides_the_path_of_a_reload_under_way_as_it_hides_the_served_one(settings_for, async_serve, until,
                                                                                   tiny_index, monkeypatch):
    """A served path given relative (SPANSEEK_INDEX=index) showed whole in ``running`` to a caller without a key,
    where ``index.path``, the same path made absolute, showed cut to its last part: it is absolute now, and hidden
    alike. A failed reload clears it too."""
    monkeypatch.chdir(tiny_index.parent)
    app = create_app(settings_for(index=Path(tiny_index.name)))
    reloader = app.state.service.reloader
    gate = threading.Event()

    def held(*args):
        gate.wait(30)
        raise OSError("the disk went away")

    reloader.reopener = held
    async with async_serve(app) as client:
        reloading = asyncio.create_task(reloader.reload(reason="SIGHUP"))
        await until(lambda: reloader.under_way is not None)
        info = (await client.get("/info")).json()
        assert info["service"]["reload"]["running"]["index"] == info["index"]["path"] == f".../{tiny_index.name}"
        gate.set()
        with pytest.raises(ReloadFailed):
            await reloading
        shown = (await client.get("/info")).json()["service"]["reload"]
        assert shown["running"] is None and shown["last"]["outcome"] == "failed", shown


async def test_a_reload_that_fails_fast_does_not_hold_off_the_next(settings_for, async_serve, tmp_path):
    """A mistyped path fails at once: the corrected request right after it reloads (it got 429 for the whole
    reload_min_interval_s); a successful reload still spaces the next."""
    app = create_app(settings_for(api_key=KEY, reload_min_interval_s=60, reload_refusal_delay_s=0.1))
    state = app.state.service
    async with async_serve(app) as client:
        r = await client.post("/admin/reload", headers=AUTH, json={"index": str(tmp_path / "no-such-index")})
        assert r.status_code == 409 and state.reloader.failures == 1
        r = await client.post("/admin/reload", headers=AUTH)
        assert r.status_code == 200 and state.reloader.reloads == 1, r.text
        r = await client.post("/admin/reload", headers=AUTH)
        assert r.status_code == 429 and 50 <= int(r.headers["Retry-After"]) <= 60

async def test_batches_slowed_by_a_reload_do_not_teach_admission(settings_for, async_serve, counting_factory,
                                                                  hold_worker):
    """While a reload loads and warms up its index it shares the cores and the encoder thread: batches run slower
    then, and learning their time would refuse requests (429) after it for nothing. Before, 40 reloads under load
    gave 25 refusals; now the batch rate measured before the reload stays."""
    factory, encoder = counting_factory()
    app = create_app(settings_for(max_wait_ms=1), factory)
    state = app.state.service
    async with async_serve(app) as client:
        batcher = state.batcher
        batcher.observe_batch(1, 0.01)
        before = batcher.cost.seconds_for(16, 16)
        with batcher.learning_paused():
            busy = await hold_worker(client, encoder)
            await asyncio.sleep(0.3)  # a batch held 300 ms, as one behind a reload's warm-up
            encoder.gate.set()
            assert (await busy).status_code == 200
        assert batcher.cost.seconds_for(16, 16) == before
        assert (await search(client)).status_code == 200
        assert batcher.cost.seconds_for(16, 16) != before  # outside a reload it learns again


async def test_a_batch_taken_before_the_swap_finishes_on_the_old_index(settings_for, async_serve, counting_factory,
                                                                       hold_worker, until, index_b, tiny_index,
                                                                       tmp_path):
    """A batch held in the encoder while the index is swapped is searched on the index it started with; the next
    one on the new index; the old searcher is freed once that batch is done."""
    factory, encoder = counting_factory()
    alias = switch_alias(tmp_path / "current", tiny_index).path
    app = create_app(settings_for(index=alias, max_wait_ms=1, api_key=KEY), factory)
    state = app.state.service
    async with async_serve(app) as client:
        client.headers.update(AUTH)  # every request of this test, the held search's too
        assert (await client.post("/admin/reload")).status_code == 200  # a searcher that only the app holds
        old = weakref.ref(state.searcher)
        busy = await hold_worker(client, encoder)
        switch_alias(alias, index_b)
        reload = asyncio.create_task(client.post("/admin/reload"))
        await until(lambda: state.info["index"]["dir"] == str(index_b.resolve()))
        assert not reload.done()  # it waits for the held batch before releasing the old index
        encoder.gate.set()
        assert docs_of(await busy) == {"d"}
        assert (await reload).json()["index"]["released_previous"] is True
        assert docs_of(await search(client)) == {"b"}
        assert old() is None


def test_switch_alias_kinds_and_errors(tmp_path, tiny_index, index_b):
    link = switch_alias(tmp_path / "link", tiny_index)
    assert (link.kind, link.target) == ("symlink", tiny_index.resolve())
    assert switch_alias(tmp_path / "link", index_b).target == index_b.resolve() and (tmp_path / "link").is_symlink()
    local = tmp_path / "v1"
    shutil.copytree(tiny_index, local)
    pointer = switch_alias(tmp_path / "ptr", local, pointer=True)
    assert (tmp_path / "ptr").read_text() == "v1\n" and pointer.kind == "pointer"  # relative: survives a move
    assert switch_alias(tmp_path / "ptr", index_b).kind == "pointer"  # stays a pointer file
    assert resolve_alias(local).kind == "directory"
    with pytest.raises(AliasError, match="an index directory, not an alias"):
        switch_alias(local, index_b)
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(AliasError, match="dangling symlink"):
        resolve_alias(tmp_path / "dangling")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "relative").symlink_to("../old/gone")  # quoted as the absolute path it names
    with pytest.raises(AliasError, match=rf"dangling symlink \(it points to {re.escape(str(tmp_path.resolve() / 'old' / 'gone'))}, "):
        resolve_alias(tmp_path / "sub" / "relative")
    (tmp_path / "empty").write_text("")
    with pytest.raises(AliasError, match="empty pointer file"):
        resolve_alias(tmp_path / "empty")
    secret = "token=" + "s" * 1000  # a file whose first line is too long to be a path: its text is never quoted
    (tmp_path / "secrets.env").write_text(secret + "\n")
    with pytest.raises(AliasError, match="names no directory") as refused:
        resolve_alias(tmp_path / "secrets.env")
    assert "token=" not in str(refused.value)
    (tmp_path / "notes.txt").write_text("my notes\n")  # a file that names no directory is not replaced: it may
    (tmp_path / "stale").write_text("removed-index\n")  # be anyone's, though it could be a stale pointer too
    for other in (tmp_path / "notes.txt", tmp_path / "empty", tmp_path / "stale"):
        before = other.read_text()
        with pytest.raises(AliasError, match="not a pointer to an index directory; not replaced"):
            switch_alias(other, index_b)
        assert other.read_text() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_alias_error_never_quotes_the_file_it_read(tmp_path):
    """A path given to reload that is some other file is refused by name: its content never reaches the caller
    (a multi-line file, a NUL-separated one like /proc/self/environ, which reports a size of 0, a large one)."""
    secret = "SPANSEEK_API_KEY=s3cret"
    files = {"passwd": f"{secret}:x:0:0\nother:x:1:1\n", "environ": f"HOME=/root\0{secret}\0", "big": secret * 400}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [tmp_path / name for name in files] + [Path("/proc/self/environ")]
    for path in paths:
        with pytest.raises(AliasError) as err:
            resolve_alias(path)
        assert path.name in str(err.value) and "s3cret" not in str(err.value) and "HOME" not in str(err.value)


def test_index_switch_refuses_a_damaged_index(tmp_path, tiny_index, index_b, capsys):
    alias = tmp_path / "current"
    assert main(["index", "switch", str(alias), str(tiny_index)]) == 0
    assert json.loads(capsys.readouterr().out)["target"] == str(tiny_index.resolve())
    damaged = tmp_path / "damaged"
    shutil.copytree(index_b, damaged)
    (damaged / "docs.jsonl").write_text((damaged / "docs.jsonl").read_text().replace("b0", "x0"))
    assert main(["index", "switch", str(alias), str(damaged)]) == 2
    assert "docs.jsonl" in capsys.readouterr().err and resolve_alias(alias).target == tiny_index.resolve()


async def test_the_served_searcher_is_frozen_and_a_replaced_one_collected(settings_for, async_serve, index_b):
    """Full collections skip the loaded searcher (service.heap); a reload lets the old one go even when it sits in a
    reference cycle, and freezes the new one."""
    app = create_app(settings_for(api_key=KEY))
    state = app.state.service
    async with async_serve(app) as client:
        assert (await client.post("/admin/reload", headers=AUTH)).status_code == 200  # one only the app holds
        first = state.searcher
        assert not any(o is first for o in gc.get_objects())
        first.cycle = first  # only the cyclic collector can free it now
        old = weakref.ref(first)
        del first
        r = await client.post("/admin/reload", json={"index": str(index_b)}, headers=AUTH)
        assert r.status_code == 200 and r.json()["index"]["released_previous"] is True
        assert old() is None
        assert not any(o is state.searcher for o in gc.get_objects())
        assert docs_of(await search(client)) == {"b"}


async def test_a_failed_reload_of_a_relative_path_hides_it_from_a_caller_without_a_key(settings_for, async_serve,
                                                                                      tiny_index, monkeypatch, tmp_path):
    """The server started in a folder, a reload given a relative alias that fails (a dangling symlink, a pointer file
    naming no directory): ``last.error`` quoted the path as given, whole, to a caller without a key, where every other
    error cuts a server path to its last part."""
    (tmp_path / "aliases").mkdir()
    (tmp_path / "aliases" / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "aliases" / "pointer").write_text("no-such-dir\n")
    (tmp_path / "aliases" / "relative").symlink_to("../retired/gone")  # its target quoted whole, as stored, before
    monkeypatch.chdir(tmp_path)
    app = create_app(settings_for())
    reloader = app.state.service.reloader
    async with async_serve(app) as client:
        for given, says in ((Path("aliases/dangling"), "dangling symlink"), (Path("aliases/pointer"), "names no"),
                            (Path("aliases/relative"), "points to .../gone,")):
            with pytest.raises(ReloadFailed):
                await reloader.reload(given, reason="SIGHUP")
            error = (await client.get("/info")).json()["service"]["reload"]["last"]["error"]
            assert says in error and f".../{given.name}" in error, error
            assert "aliases" not in error and "retired" not in error, error


async def test_a_start_that_fails_on_a_relative_alias_hides_it_from_a_caller_without_a_key(settings_for, until,
                                                                                          monkeypatch, tmp_path):
    """Started on a relative alias that names nothing (SPANSEEK_INDEX=aliases/current, a dangling symlink): /ready
    and /health quoted the path as given, whole, to a caller without a key."""
    (tmp_path / "aliases").mkdir()
    (tmp_path / "aliases" / "current").symlink_to(tmp_path / "gone")
    monkeypatch.chdir(tmp_path)
    app = create_app(settings_for(index=Path("aliases/current")))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            await until(lambda: app.state.service.status == "failed")
            ready = (await client.get("/ready")).json()["message"]
            health = (await client.get("/health")).json()["detail"]
    for said in (ready, health):
        assert "dangling symlink" in said and ".../current" in said and "aliases" not in said, said


@pytest.mark.parametrize("damage", ["state", "file"])
async def test_a_start_that_fails_on_the_live_directory_of_a_relative_index_hides_it_from_a_caller_without_a_key(
        settings_for, until, monkeypatch, tmp_path, tiny_index, damage):
    """Started with writes on a relative index path (SPANSEEK_INDEX=srv/idx), its live directory (by default that path
    + ``.live``) damaged: a state.json that is no JSON, or a file where the folder should be. /ready and /health
    quoted the live directory as the path gave it, whole (``srv/idx.live/state.json``), to a caller without a key."""
    (tmp_path / "srv").mkdir()
    shutil.copytree(tiny_index, tmp_path / "srv" / "idx")
    live = tmp_path / "srv" / "idx.live"
    if damage == "file":
        live.write_text("not a folder\n")
    else:
        for folder in (live / "wal", live / "bases"):
            folder.mkdir(parents=True)
        (live / "state.json").write_text("{")
    monkeypatch.chdir(tmp_path)
    app = create_app(settings_for(index=Path("srv/idx"), writes=True, api_key="key"))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            await until(lambda: app.state.service.status == "failed")
            said = [(await client.get("/ready")).json()["message"], (await client.get("/health")).json()["detail"]]
    for text in said:
        assert ".../" in text and "srv" not in text, text


async def test_reloads_of_one_index_named_relative_or_not_are_shared(settings_for, async_serve, tiny_index,
                                                                     monkeypatch):
    """Served by a relative path, a reload asked with that path and one asked with none (the served path: SIGHUP, a
    bare POST) are of one index, and share one reload; the second was refused (429, "a reload of another index is
    under way"), its path compared as given with the served one, made absolute."""
    monkeypatch.chdir(tiny_index.parent)
    app = create_app(settings_for(index=Path(tiny_index.name), api_key=KEY, reload_min_interval_s=60))
    async with async_serve(app) as client:
        asked = [client.post("/admin/reload", headers=AUTH, json={"index": tiny_index.name}) if i % 2 else
                 client.post("/admin/reload", headers=AUTH) for i in range(4)]
        together = await asyncio.gather(*asked)
        assert [r.status_code for r in together] == [200] * 4, [r.text for r in together]
        assert app.state.service.reloader.reloads == 1


async def test_a_request_run_in_parts_is_answered_from_one_index_across_a_reload(settings_for, async_serve,
                                                                               counting_factory, until, index_b,
                                                                               tiny_index, tmp_path):
    """A request of more than half a batch runs in parts (service.batcher); a reload that swaps the index after its
    first part was taken and before the others were answered them from the new index: one answer, two indexes
    (hits of documents d* for the first questions, b* for the rest). Its later parts now run on the index its first
    part ran on, and the old index is released once they are done."""
    factory, encoder = counting_factory(block=True)
    alias = switch_alias(tmp_path / "current", tiny_index).path
    app = create_app(settings_for(index=alias, max_batch_size=2, max_wait_ms=1, max_queries_per_request=6,
                                  api_key=KEY), factory)
    state = app.state.service
    encoder.gate.set()
    async with async_serve(app) as client:
        client.headers.update(AUTH)
        assert (await client.post("/admin/reload")).status_code == 200  # a searcher that only the app holds
        old = weakref.ref(state.searcher)
        encoder.gate.clear()
        encoder.entered.clear()
        questions = [f"Who built the castle number {i}?" for i in range(6)]
        parts = asyncio.create_task(client.post("/search?unit=doc", json={"queries": questions, "top_k": 3}))
        await until(encoder.entered.is_set)  # its first batch (two parts of one question) is being encoded
        switch_alias(alias, index_b)
        reload = asyncio.create_task(client.post("/admin/reload"))
        await until(lambda: state.info["index"]["dir"] == str(index_b.resolve()))
        encoder.gate.set()
        answer = await asyncio.wait_for(parts, 30)
        assert answer.status_code == 200, answer.text
        assert [{h["doc_id"][0] for h in r["hits"]} for r in answer.json()["results"]] == [{"d"}] * 6
        assert (await reload).json()["index"]["released_previous"] is True
        assert docs_of(await search(client)) == {"b"}  # the next request is the new index's
        assert old() is None
        assert state.batcher.depth == 0 and not state.batcher._inflight


async def _held_only_in_a_cycle(client, state) -> weakref.ref:
    """Reload the served index, so that only the app holds its searcher, and put that searcher in a reference cycle
    (only the cyclic collector frees it): a weak reference to it."""
    client.headers.update(AUTH)
    assert (await client.post("/admin/reload")).status_code == 200
    searcher = state.searcher
    searcher.cycle = searcher
    return weakref.ref(searcher)


async def test_a_batch_whose_clients_left_still_holds_the_old_index_until_it_ends(settings_for, async_serve,
                                                                                 counting_factory, until, index_b):
    """A reload waits for the batches still running on the old index before it collects it (``released_previous``).
    A batch whose clients all left while it was encoded still runs on the old index: the reload counted it as done,
    collected and froze the old index while that batch held it, and answered ``released_previous: true``; the old
    index, in a reference cycle, then stayed in memory once the batch ended. Now the reload waits for that batch."""
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(api_key=KEY), factory)
    state = app.state.service
    encoder.gate.set()
    async with async_serve(app) as client:
        old = await _held_only_in_a_cycle(client, state)
        encoder.gate.clear()
        encoder.entered.clear()
        gone = asyncio.create_task(search(client))
        await until(encoder.entered.is_set)  # its batch is being encoded on the old index
        gone.cancel()  # and its client leaves
        await until(lambda: not state.batcher._inflight[0].live())
        reload = asyncio.create_task(client.post("/admin/reload", json={"index": str(index_b)}))
        await until(lambda: state.info["index"]["dir"] == str(index_b.resolve()))
        assert state.batcher.serves(old)  # its batch is still being encoded on the old index
        await asyncio.sleep(0.2)
        assert not reload.done()  # so the reload waits for it before it collects the old index
        encoder.gate.set()
        answer = await asyncio.wait_for(reload, 30)
        assert answer.status_code == 200 and answer.json()["index"]["released_previous"] is True
        assert old() is None
        assert docs_of(await search(client)) == {"b"}


async def test_a_reload_collects_the_old_index_only_once_the_batchers_threads_let_go_of_it(
        settings_for, async_serve, counting_factory, until, index_b, monkeypatch):
    """A pool's thread keeps a job's arguments (the searcher of the batch it ran) a moment after the job's answer has
    come back, until it takes its next job; the reload waits for that too before it collects the old index. Before,
    it collected while the thread still held the old searcher, answered ``released_previous: true``, and the old
    index, in a reference cycle, stayed in memory (a busy host, whose threads lag, made that happen)."""
    from concurrent.futures import thread

    lingering = threading.Event()
    run = thread._WorkItem.run

    def run_then_linger(self) -> None:  # the thread's lag after a job, made long: the job is let go of only after it
        run(self)
        if lingering.is_set() and threading.current_thread().name.startswith("spanseek-encode"):
            time.sleep(0.3)

    monkeypatch.setattr(thread._WorkItem, "run", run_then_linger)
    factory, encoder = counting_factory(block=False)
    app = create_app(settings_for(api_key=KEY, pipeline="off", warmup=False), factory)
    state = app.state.service
    async with async_serve(app) as client:
        old = await _held_only_in_a_cycle(client, state)
        lingering.set()
        assert docs_of(await search(client)) != set()  # a batch on the old index: its thread lingers with it
        answer = await asyncio.wait_for(client.post("/admin/reload", json={"index": str(index_b)}), 30)
        lingering.clear()
        assert answer.status_code == 200 and answer.json()["index"]["released_previous"] is True
        assert old() is None
        assert docs_of(await search(client)) == {"b"}
