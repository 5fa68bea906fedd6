"""Query-side fine-tuning (trainer.qsft): the phrase cache holds what the phrase encoder gives, resumes after a
kill and refuses another model's or other windows' cache; QSFT lowers the loss while leaving the phrase side
(and so the phrase fingerprint) unchanged, and an index built with the input model serves the tuned one. A cache
read from a built index (quantisation-aware QSFT) holds what its searches score: the encoded vectors for an exact
index, the decoded store and the filter's flags for a compact one.

    .venv/bin/python -m pytest -q tests/trainer/test_qsft.py
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

from spanseek.core.integrity import writer_lock
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.loading import open_searcher
from spanseek.core.model import PhraseModel, load_model, load_tokenizer, model_fingerprint, phrase_fingerprint
from spanseek.core.phrase_index import IndexFormatError, PhraseIndex
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.trainer.data import build_windows, collate
from spanseek.trainer.losses import LossConfig, phrase_loss
from spanseek.trainer.phrase_cache import as_indexed, fill_cache_from_index
from spanseek.trainer.qsft import CacheError, PhraseCache, QsftConfig, fill_cache, train_qsft, window_key
from spanseek.trainer.rundir import RUN_LOCK


def _windows(model_dir, tiny_squad):
    model = load_model(model_dir, for_inference=False)
    tok = load_tokenizer(model.config)
    c = model.config
    windows, _ = build_windows(squad_questions(load_squad(tiny_squad)), tok, c.max_seq_len, c.stride,
                               c.max_answer_tokens)
    return model, tok, windows


def test_the_cache_holds_the_phrase_encoders_vectors_and_resumes_after_a_kill(
    tmp_path, tiny_model_dir, tiny_squad, monkeypatch, caplog
):
    model, tok, windows = _windows(tiny_model_dir, tiny_squad)
    pairs = [(w.input_ids, w.flags) for w in windows]
    calls = []
    encode = model.encode_passages

    def dies_in_call_3(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return encode(*args, **kwargs)

    monkeypatch.setattr(model, "encode_passages", dies_in_call_3)
    with pytest.raises(KeyboardInterrupt), caplog.at_level(logging.WARNING, logger="spanseek.trainer.phrase_cache"):
        fill_cache(tmp_path / "cache", model, tiny_model_dir, tok, pairs, batch_windows=2, shard_windows=2,
                   progress=False)  # shards of 2 windows, batches of 2: two shards are done
    assert PhraseCache(tmp_path / "cache").done_shards() == {0, 1}
    n_shards = PhraseCache(tmp_path / "cache").n_shards
    assert (f"{tmp_path / 'cache'}: stopped with 2 of {n_shards} shards of 2 windows filled; the same command resumes "
            "from there") in caplog.text
    monkeypatch.setattr(model, "encode_passages", encode)
    calls.clear()
    counted = []
    monkeypatch.setattr(model, "encode_passages", lambda *a, **k: counted.append(1) or encode(*a, **k))
    cache = fill_cache(tmp_path / "cache", model, tiny_model_dir, tok, pairs, batch_windows=2, shard_windows=2,
                       progress=False)
    assert cache.complete and len(counted) == cache.n_shards - 2  # finished shards were not encoded again
    assert len(cache.keys) == len({window_key(ids) for ids, _ in pairs})

    # oracle: each window encoded alone ([CLS] ids [SEP]) by the phrase encoder
    batch = collate(windows, tok, model.config.max_query_len)
    with torch.no_grad():
        H = encode(batch.input_ids, batch.attention_mask).numpy()
    for p, w in enumerate(windows):
        vecs, flags = cache.window(window_key(w.input_ids))
        n = len(w.input_ids)
        np.testing.assert_allclose(vecs.astype(np.float32), H[p, 1 : n + 1], atol=2e-3, rtol=2e-3)
        np.testing.assert_array_equal(flags, w.flags)


def test_a_cache_of_another_model_or_other_windows_is_refused(tmp_path, tiny_model_dir, tiny_squad, tiny_config):
    model, tok, windows = _windows(tiny_model_dir, tiny_squad)
    pairs = [(w.input_ids, w.flags) for w in windows]
    fill_cache(tmp_path / "cache", model, tiny_model_dir, tok, pairs, progress=False)
    with pytest.raises(CacheError, match="other windows"):
        fill_cache(tmp_path / "cache", model, tiny_model_dir, tok, pairs[:-1], progress=False)
    torch.manual_seed(1)  # other random LoRA A matrices: another phrase side
    other_dir = PhraseModel(tiny_config).save(tmp_path / "other")
    other = load_model(other_dir, for_inference=False)
    with pytest.raises(CacheError, match="made with model"):
        fill_cache(tmp_path / "cache", other, other_dir, tok, pairs, progress=False)


def _loss_on_all(model_dir, tiny_squad) -> float:
    model, tok, windows = _windows(model_dir, tiny_squad)
    batch = collate(windows, tok, model.config.max_query_len)
    model.eval()
    with torch.no_grad():
        H = model.encode_passages(batch.input_ids, batch.attention_mask)
        qs, qe = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
        return phrase_loss(H, qs, qe, batch.start_ok, batch.end_ok, batch.q_passage, batch.gold_start,
                           batch.gold_end, LossConfig(lambda_inb=32.0, lambda_pre=32.0)).item()


def test_qsft_lowers_the_loss_keeps_the_phrase_side_and_serves_the_old_index(
    tmp_path, tiny_model_dir, tiny_squad, tiny_index
):
    cfg = QsftConfig(model=str(tiny_model_dir), train=str(tiny_squad), out=str(tmp_path / "run"), epochs=15,
                     batch_windows=4, lr=5e-3, checkpoint_every=5, val_questions=0,
                     precision="fp32", device="cpu", progress=False)
    summary = train_qsft(cfg)
    tuned = tmp_path / "run" / "last"
    assert summary["steps"] > 0 and summary["cache_windows"] == summary["train_windows"]
    assert model_fingerprint(tuned) != model_fingerprint(tiny_model_dir)  # the question side changed ...
    assert phrase_fingerprint(tuned) == phrase_fingerprint(tiny_model_dir)  # ... the phrase side did not
    before, after = _loss_on_all(tiny_model_dir, tiny_squad), _loss_on_all(tuned, tiny_squad)
    assert after < 0.8 * before, (before, after)

    # the index built with the input model serves the tuned model; a model with another phrase side is refused
    hits = open_searcher(tiny_index, tuned, device="cpu", precision="fp32").search(["Who built the castle?"])
    assert hits and hits[0]
    torch.manual_seed(2)
    stranger = PhraseModel(load_model(tiny_model_dir, for_inference=False).config).save(tmp_path / "stranger")
    with pytest.raises(IndexFormatError, match="phrase-encoder weights"):
        PhraseIndex(tiny_index).manifest.check_model(load_model(stranger).config, model_fingerprint(stranger),
                                                     phrase_fingerprint(stranger))


# --- quantisation-aware: the cache read from a built index ------------------------------------------------------


@pytest.fixture(scope="module")
def squad_indexes(tmp_path_factory, tiny_squad, filter_model_dir):
    """Indexes of the tiny SQuAD file's articles built with the filter model: exact (fp16), and a compact one
    (sq4 store, the filter dropping tokens) over the same vectors."""
    from spanseek.core.io import from_squad
    from spanseek.indexer.build import BuildOptions, build_index, reindex

    root = tmp_path_factory.mktemp("qat")
    from_squad(tiny_squad, root / "corpus.jsonl")
    opts = BuildOptions(progress=False, precision="fp32", gpu=False, factory="Flat")
    build_index(root / "corpus.jsonl", filter_model_dir, root / "exact", opts)
    reindex(root / "exact", root / "compact", BuildOptions(progress=False, precision="fp32", gpu=False,
                                                            factory="Flat", store="sq4", filter_threshold=0.5),
            filter_model=filter_model_dir)
    return root / "exact", root / "compact"


def _index_windows(windows):
    return [(w.passage, w.first, w.input_ids) for w in windows]


def test_a_cache_read_from_an_exact_index_holds_its_vectors_as_encoded(tmp_path, filter_model_dir, tiny_squad,
                                                                        squad_indexes):
    model, tok, windows = _windows(filter_model_dir, tiny_squad)
    encoded = fill_cache(tmp_path / "encoded", model, filter_model_dir, tok, [(w.input_ids, w.flags) for w in windows],
                         progress=False)
    stranger = (windows[0].passage + " An unindexed sentence.", 0, np.concatenate([windows[0].input_ids, [1000]]))
    read, missing = fill_cache_from_index(tmp_path / "read", squad_indexes[0], filter_model_dir, model.config,
                                          _index_windows(windows) + [stranger], progress=False)
    assert missing == 1 and read.keys == encoded.keys and read.source.startswith("index ")
    index = PhraseIndex(squad_indexes[0])
    where = {p["text"]: i for i, p in enumerate(index.passages)}
    whole = 0
    for w in windows:
        a, b = index.passage_range(where[w.passage])
        ids = np.arange(a + w.first, a + w.first + len(w.input_ids))
        (v_enc, f_enc), (v_read, f_read) = encoded.window(window_key(w.input_ids)), read.window(window_key(w.input_ids))
        np.testing.assert_array_equal(v_read, index.token_vectors(ids))
        np.testing.assert_array_equal(f_read, f_enc)
        if len(w.input_ids) == b - a:  # the passage is this one window: the index holds the window's encoding
            whole += 1
            np.testing.assert_allclose(v_read.astype(np.float32), v_enc.astype(np.float32), atol=2e-3, rtol=2e-3)
    assert 0 < whole < len(windows)  # both kinds are here: tokens of longer passages come from their best window
    with pytest.raises(CacheError, match="come from"):  # an encoded cache is not taken for an index's
        fill_cache_from_index(tmp_path / "encoded", squad_indexes[0], filter_model_dir, model.config,
                              _index_windows(windows), progress=False)


def test_a_cache_read_from_a_compact_filtered_index_holds_its_decoded_store_and_flags(
    tmp_path, filter_model_dir, tiny_squad, squad_indexes
):
    model, _, windows = _windows(filter_model_dir, tiny_squad)
    index = PhraseIndex(squad_indexes[1])
    cache, missing = fill_cache_from_index(tmp_path / "c", squad_indexes[1], filter_model_dir, model.config,
                                           _index_windows(windows), progress=False)
    assert missing == 0
    where = {p["text"]: i for i, p in enumerate(index.passages)}
    dropped = 0
    for w in windows:
        a = index.passage_range(where[w.passage])[0] + w.first
        ids = np.arange(a, a + len(w.input_ids))
        vecs, flags = cache.window(window_key(w.input_ids))
        np.testing.assert_array_equal(vecs, index.token_vectors(ids).astype(np.float16))  # sq4 decoded, 0 if dropped
        np.testing.assert_array_equal(flags, index.token_flags[ids])
        dropped += int((~index.vectors.row_map.lookup(ids)[1]).sum())
    assert dropped > 0  # the filter dropped tokens of these windows

    kept, skipped = as_indexed(windows, cache)
    want = sum(bool(f[i] & FLAG_START and f[j] & FLAG_END) for w in windows
               for f in [cache.window(window_key(w.input_ids))[1]] for i, j in zip(w.starts, w.ends, strict=True))
    assert sum(len(w.questions) for w in kept) == want and skipped["gold_filtered"] > 0
    assert skipped["gold_filtered"] + want == sum(len(w.questions) for w in windows)
    for w in kept:  # what is left trains on the index's flags, each gold start and end allowed
        assert all(w.flags[i] & FLAG_START and w.flags[j] & FLAG_END for i, j in zip(w.starts, w.ends, strict=True))


def test_qsft_from_an_index_trains_against_it_and_refuses_another_models_index(
    tmp_path, filter_model_dir, tiny_model_dir, tiny_squad, squad_indexes
):
    cfg = QsftConfig(model=str(filter_model_dir), train=str(tiny_squad), out=str(tmp_path / "run"), epochs=3,
                     batch_windows=4, checkpoint_every=5, val_questions=0, precision="fp32",
                     device="cpu", progress=False, from_index=str(squad_indexes[1]))
    summary = train_qsft(cfg)
    assert summary["steps"] > 0 and summary["skipped"]["gold_filtered"] > 0
    assert summary["skipped"]["not_in_index"] == 0 and summary["cache_windows"] > 0
    assert phrase_fingerprint(tmp_path / "run" / "last") == phrase_fingerprint(filter_model_dir)
    assert PhraseCache(tmp_path / "run" / "phrase-cache").source.startswith("index ")
    with pytest.raises(IndexFormatError, match="different model"):
        train_qsft(replace(cfg, model=str(tiny_model_dir), out=str(tmp_path / "other")))


def test_a_second_qsft_run_into_the_same_out_is_refused(tmp_path, tiny_model_dir, tiny_squad):
    out = tmp_path / "run"
    out.mkdir()
    cfg = QsftConfig(model=str(tiny_model_dir), train=str(tiny_squad), out=str(out), epochs=1, device="cpu")
    with writer_lock(out, name=RUN_LOCK) as locked:  # what a running training holds for its life
        assert locked
        with pytest.raises(ValueError, match="another run holds it"):
            train_qsft(cfg)
    assert [p.name for p in out.iterdir()] == [RUN_LOCK]
