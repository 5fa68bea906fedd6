"""The training recipe's parts: hard-negative mining (resumable), hard negatives in the loss, the token filter,
the efficient-validation corpora."""

from __future__ import annotations

import gzip
import json

import pytest
import torch


def test_bm25_mining_excludes_gold_and_answers_and_resumes(squad_file, tmp_path, monkeypatch):
    from spanseek.core.io import load_squad
    from spanseek.core.metrics import passage_has_answer
    from spanseek.trainer import mining

    out = tmp_path / "hard.jsonl"
    calls = {"n": 0}
    real = mining.select_hard

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] > 12:  # die inside the second chunk
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(mining, "select_hard", failing)
    with pytest.raises(KeyboardInterrupt):
        mining.mine(squad_file, out, chunk=10, progress=False)
    parts = sorted((tmp_path / "hard.jsonl.parts").glob("*.jsonl"))
    assert [p.name for p in parts] == ["00000.jsonl"] and not out.exists()
    monkeypatch.setattr(mining, "select_hard", real)
    mining.mine(squad_file, out, chunk=10, progress=False)
    assert not (tmp_path / "hard.jsonl.parts").exists()
    data = load_squad(squad_file)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    qa = {q["id"]: (a, p, q) for a, art in enumerate(data) for p, para in enumerate(art["paragraphs"]) for q in para["qas"]}
    held = {q for q, (a, _, _) in qa.items() if a % 20 == 7}
    assert len(rows) == len(qa) - len(held) and not held & {r["id"] for r in rows}
    assert any(r["hard"] for r in rows)
    for r in rows:
        a, p, q = qa[r["id"]]
        for ha, hp in r["hard"]:
            assert (ha, hp) != (a, p)
            assert ha % 20 != 7
            assert not passage_has_answer(data[ha]["paragraphs"][hp]["context"], [x["text"] for x in q["answers"]])


def test_hard_negatives_load_from_gzip_like_plain(squad_file, tmp_path):
    from spanseek.core.io import load_squad
    from spanseek.trainer import mining

    out = mining.mine(squad_file, tmp_path / "hard.jsonl", chunk=50, progress=False)
    gz = tmp_path / "hard.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(out.read_text(encoding="utf-8"))
    data = load_squad(squad_file)
    plain = mining.load_hard_negatives(out, data)
    assert plain and mining.load_hard_negatives(gz, data) == plain


def test_hard_negatives_enter_the_unified_loss():
    from spanseek.trainer.losses import HardNegatives, LossConfig, phrase_loss

    torch.manual_seed(0)
    H = torch.randn(2, 5, 4)
    ok = torch.ones(2, 5, dtype=torch.bool)
    q_s, q_e = torch.randn(3, 4), torch.randn(3, 4)
    args = (H, q_s, q_e, ok, ok, torch.tensor([0, 0, 1]), torch.tensor([1, 2, 3]), torch.tensor([1, 3, 4]))
    cfg = LossConfig(kind="unified", lambda_hard=1.0)
    base = phrase_loss(*args, cfg)
    vecs = torch.randn(6, 4)
    allowed_none = HardNegatives(vecs, torch.ones(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool),
                                 torch.zeros(3, 6, dtype=torch.bool))
    assert torch.allclose(phrase_loss(*args, cfg, hard=allowed_none), base)  # all masked: no change
    allowed_all = HardNegatives(vecs, torch.ones(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool),
                                torch.ones(3, 6, dtype=torch.bool))
    assert phrase_loss(*args, cfg, hard=allowed_all) > base  # more negatives in the softmax: larger loss


def test_collate_appends_hard_passages_and_masks_answers(tiny_config):
    from spanseek.core.model import load_tokenizer
    from spanseek.trainer.data import TrainWindow, collate

    tok = load_tokenizer(tiny_config)
    ids = tok("alba built the bridge", add_special_tokens=False, return_tensors="np")["input_ids"][0]
    import numpy as np

    w = TrainWindow(ids, np.full(len(ids), 3, np.uint8), ["who built the bridge?"], [0], [0], [("Alba",)],
                    ["Borin built a castle.", "Alba sailed."])
    b = collate([w], tok, 16, hard_per_batch=2)
    assert b.n_windows == 1 and b.input_ids.shape[0] == 3
    assert b.hard_allowed.tolist() == [[True, False]]  # the second hard passage contains the answer


def test_filter_training_reduces_bce(squad_file, tiny_model_dir, tmp_path):
    from spanseek.core.model import load_model
    from spanseek.trainer.filter import FilterConfig, train_filter

    out = tmp_path / "filtered"
    summary = train_filter(FilterConfig(model=str(tiny_model_dir), train=str(squad_file), out=str(out),
                                        train_windows=60, val_windows=20, epochs=15, device="cpu",
                                        precision="fp32", progress=False))
    assert summary["bce_last_epoch"] < summary["bce_first_epoch"]
    assert 0.0 <= summary["auc_pr_start"] <= 1.0
    model = load_model(out)
    assert model.filter_head is not None and model.config.filter_head and model.config.filter_hidden == 512
    assert summary["train_thresholds"]["0.25"] >= summary["train_thresholds"]["0.5"]


def test_validation_sets(squad_file, tmp_path):
    from spanseek.core.io import read_corpus
    from spanseek.trainer.validation import build_validation_sets

    counts = build_validation_sets(squad_file, tmp_path, n_questions=10, bm25_k=3, reference_extra=5)
    gold = {p for d in read_corpus(tmp_path / "gold.jsonl") for p in d.paragraphs}
    hard = {p for d in read_corpus(tmp_path / "hard.jsonl") for p in d.paragraphs}
    rand = {p for d in read_corpus(tmp_path / "random.jsonl") for p in d.paragraphs}
    assert gold <= hard and gold <= rand
    assert counts["random"] == counts["hard"] > counts["gold"]


def test_filter_features_from_a_built_index(squad_file, tiny_model_dir, tmp_path):
    import numpy as np
    import pytest

    from spanseek.core.holdout import Holdout
    from spanseek.core.io import from_squad, load_squad
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.indexer.build import BuildOptions, build_index
    from spanseek.trainer.filter import FilterConfig, index_features, train_filter

    corpus = tmp_path / "corpus.jsonl"
    from_squad(squad_file, corpus)
    build_index(corpus, tiny_model_dir, tmp_path / "idx", BuildOptions(progress=False, precision="fp32", gpu=False))
    data = load_squad(squad_file)
    train, held = index_features(tmp_path / "idx", data, Holdout())
    idx = PhraseIndex(tmp_path / "idx")
    rows: dict[bool, list[int]] = {True: [], False: []}
    starts: dict[bool, list[bool]] = {True: [], False: []}
    for p, passage in enumerate(idx.passages):  # oracle: a token starts a gold answer iff its offset is one
        para = data[int(idx.docs[passage["doc"]]["id"])]["paragraphs"][passage["para"]]
        if not para["qas"]:
            continue
        a, b = idx.passage_range(p)
        gold = {ans["answer_start"] for qa in para["qas"] for ans in qa["answers"]}
        held_out = Holdout().held(int(idx.docs[passage["doc"]]["id"]))
        rows[held_out] += range(a, b)
        starts[held_out] += [int(o) in gold for o in idx.token_offsets[a:b, 0]]
    assert len(rows[True]) and len(rows[False])  # articles 7 and 27 are the held-out side
    for side, got in ((False, train), (True, held)):
        assert np.array_equal(got["x"].numpy(), np.asarray(idx.token_vectors(np.array(rows[side])), np.float16))
        assert got["ys"].tolist() == starts[side] and got["ys"].any() and got["ye"].any()
    summary = train_filter(FilterConfig(model=str(tiny_model_dir), train=str(squad_file), out=str(tmp_path / "f"),
                                        from_index=str(tmp_path / "idx"), epochs=15, device="cpu",
                                        precision="fp32", progress=False))
    assert summary["bce_last_epoch"] < summary["bce_first_epoch"]
    assert summary["train_tokens"] == len(rows[False]) and summary["val_tokens"] == len(rows[True])
    data[0]["title"] = "Another article"
    with pytest.raises(ValueError, match="Another article"):
        index_features(tmp_path / "idx", data, Holdout())


def test_filter_features_of_a_file_with_answers_without_their_answer_start(tiny_model_dir, tmp_path):
    """An answer without an answer_start stopped `train filter --from-index` with KeyError: 'answer_start'. It, and
    an answer whose answer_start is not at its text, now mark no gold token, as training leaves such answers out;
    the other answers of the paragraph still mark theirs."""
    from spanseek.core.holdout import Holdout
    from spanseek.core.io import from_squad
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.indexer.build import BuildOptions, build_index
    from spanseek.trainer.filter import index_features
    from tests.conftest import make_squad

    squad = make_squad(n_articles=2, n_paras=1)
    qas = squad["data"][0]["paragraphs"][0]["qas"]
    assert len(qas) >= 3
    del qas[0]["answers"][0]["answer_start"]
    qas[1]["answers"][0]["answer_start"] += 1  # not at its text
    (tmp_path / "q.json").write_text(json.dumps(squad))
    from_squad(tmp_path / "q.json", tmp_path / "corpus.jsonl")
    build_index(tmp_path / "corpus.jsonl", tiny_model_dir, tmp_path / "idx",
                BuildOptions(progress=False, precision="fp32", gpu=False, factory="Flat"))
    train, held = index_features(tmp_path / "idx", squad["data"], Holdout(2, 1))
    idx = PhraseIndex(tmp_path / "idx")
    a, b = idx.passage_range(next(p for p, passage in enumerate(idx.passages) if idx.docs[passage["doc"]]["id"] == "0"))
    gold = {ans["answer_start"] for qa in qas[2:] for ans in qa["answers"]}  # (the first two place none)
    assert train["ys"].tolist() == [int(o) in gold for o in idx.token_offsets[a:b, 0]] and any(train["ys"].tolist())
    assert len(held["ys"]) > 0
