"""`spanseek sync` (spanseek.sync): a folder's files made the service's documents through PUT /files/{name}; files
left alone when unchanged, refused ones reported, the documents of removed files deleted (and only those), dry runs
changing nothing; POST /documents/delete's dry_run.

    .venv/bin/python -m pytest -q tests/service/test_sync.py
"""

from __future__ import annotations

import pytest

from spanseek.cli import main
from spanseek.client import Client
from spanseek.service.app import create_app
from spanseek.sync import HASH_KEY, MAX_KEPT_IDS, SOURCE_KEY, file_hash, stale_filter, sync
from tests.service.test_writes import DOC, KEY


@pytest.fixture
def url(settings_for, tmp_path, live):
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with live(create_app(settings)) as base:
        yield base


def folder(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_sync_writes_what_changed_leaves_the_rest_and_deletes_what_is_gone(url, tmp_path):
    docs = folder(tmp_path / "docs", {"a.md": "# Bridge\n\nIn 1450 Gala built the harbour bridge.\n",
                                      "guide/b.txt": "In 1460 Hugo built the island church.",
                                      "blank.txt": "  \n\n", "notes.xlsx": "not read"})
    with Client(url, api_key="key") as client:
        client.upsert({**DOC, "id": "by-hand"})  # written otherwise: never deleted by a sync
        report = sync(client, [docs], "docs", meta={"team": "ops"})
        assert sorted(report.written) == ["a.md", "guide/b.txt"] and report.unchanged == []
        assert [doc_id for doc_id, _ in report.refused] == ["blank.txt"] and "no text" in report.refused[0][1]
        held = client.get("guide/b.txt")
        assert held["meta"] == {"source": "guide/b.txt", "team": "ops", SOURCE_KEY: "docs",
                                HASH_KEY: file_hash(docs / "guide/b.txt")}
        again = sync(client, [docs], "docs", meta={"team": "ops"})
        assert again.written == [] and sorted(again.unchanged) == ["a.md", "guide/b.txt"]

        (docs / "a.md").write_text("# Bridge\n\nIn 1455 Gala rebuilt the harbour bridge.\n", encoding="utf-8")
        (docs / "guide/b.txt").unlink()
        (docs / "c.txt").write_text("In 1470 Ida built the mill.", encoding="utf-8")
        (docs / "blank.txt").unlink()
        dry = sync(client, [docs], "docs", delete=True, dry_run=True)
        assert sorted(dry.written) == ["a.md", "c.txt"] and dry.deleted == ["guide/b.txt"]
        assert client.get("guide/b.txt") is not None and client.get("c.txt") is None  # nothing changed
        done = sync(client, [docs], "docs", delete=True)
        assert sorted(done.written) == ["a.md", "c.txt"] and done.deleted == ["guide/b.txt"] and done.deleted_total == 1
        assert client.get("guide/b.txt") is None and "1455" in client.get("a.md")["paragraphs"][0]
        assert client.get("by-hand") is not None  # not synced: not deleted
        # another source's sync deletes only its own documents
        other = folder(tmp_path / "other", {"x.txt": "In 1480 Jan built the tower."})
        assert sync(client, [other], "other", delete=True).deleted == []
        assert client.get("a.md") is not None


def test_the_delete_filter_lists_every_kept_id_in_chunks():
    kept = [f"d{i}" for i in range(MAX_KEPT_IDS + 5)]
    flt = stale_filter("docs", kept)
    assert flt["meta"] == {SOURCE_KEY: "docs"}
    assert [len(c["doc_ids"]) for c in flt["must_not"]] == [MAX_KEPT_IDS, 5]
    assert stale_filter("docs", []) == {"meta": {SOURCE_KEY: "docs"}}


def test_a_delete_dry_run_says_what_it_would_delete_and_deletes_nothing(url):
    import httpx

    with httpx.Client(base_url=url, headers=KEY) as http:
        assert http.put("/documents", json={"documents": [DOC, {**DOC, "id": "new-2", "meta": {"lang": "fr"}}]}
                        ).status_code == 200
        r = http.post("/documents/delete", json={"filter": {"meta": {"lang": "en"}}, "dry_run": True})
        assert r.status_code == 200 and r.json()["dry_run"] is True
        assert "new-1" in r.json()["deleted"] and "new-2" not in r.json()["deleted"]
        assert http.get("/documents/new-1").status_code == 200
        r = http.post("/documents/delete", json={"filter": {"meta": {"lang": "en"}}})
        assert r.json()["dry_run"] is False and "new-1" in r.json()["deleted"]
        assert http.get("/documents/new-1").status_code == 404


def test_the_command_reports_and_its_status_says_whether_a_file_was_refused(url, tmp_path, capsys):
    docs = folder(tmp_path / "docs", {"a.txt": "In 1450 Gala built the harbour bridge."})
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--meta", "team=ops"]) == 0
    assert "wrote 1, unchanged 0, deleted 0, refused 0" in capsys.readouterr().err
    (docs / "empty.md").write_text("")
    assert main(["sync", str(docs), "--url", url, "--api-key", "key", "--delete"]) == 1
    err = capsys.readouterr().err
    assert "refused 1" in err and "refused empty.md:" in err
    assert main(["sync", str(docs), "--url", url, "--api-key", "wrong"]) == 2
    assert "401" in capsys.readouterr().err
    assert main(["sync", str(docs), "--url", "http://127.0.0.1:9", "--api-key", "key"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek sync: error: http://127.0.0.1:9") and "Traceback" not in err
    assert main(["sync", str(docs), "--url", url, "--meta", f"{SOURCE_KEY}=x"]) == 2
