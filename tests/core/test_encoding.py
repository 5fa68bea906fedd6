"""Inference encoders (core.encoding): long paragraphs are windowed, never truncated, and every token's vector
is the one its best window gives it; batching and padding do not change vectors.

    .venv/bin/python -m pytest -q tests/core/test_encoding.py
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from spanseek.core.encoding import (
    PassageEncoder,
    QuestionCache,
    QuestionEncoder,
    autocast,
    length_passes,
    pick_device,
    pick_precision,
)
from spanseek.core.model import load_model, load_tokenizer
from spanseek.core.text import best_window, tokenize_passages, window_starts
from tests.conftest import make_paragraph


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    model = load_model(tiny_model_dir)
    return model, load_tokenizer(model.config)


@pytest.fixture(scope="module")
def long_text() -> str:
    rng = random.Random(3)
    return " ".join(make_paragraph(rng, 1) for _ in range(45))  # > 512 tokens: past BERT's position limit


def test_long_paragraph_is_encoded_fully_from_its_best_windows(model_and_tokenizer, long_text):
    model, tok = model_and_tokenizer
    encoder = PassageEncoder(model, tok, precision="fp32")
    [enc] = encoder.encode([long_text])
    n = len(tok(long_text, add_special_tokens=False, verbose=False)["input_ids"])
    assert n > 512 and len(enc.tokens) == n and enc.vectors.shape == (n, model.dim)
    assert np.isfinite(enc.vectors).all()

    window, stride = model.config.max_seq_len - 2, model.config.stride
    starts = window_starts(n, window, stride)
    win, pos = best_window(n, starts, window)
    ids = enc.tokens.input_ids
    for w, s in enumerate(starts):  # each window encoded alone, [CLS] window [SEP], straight through the model
        alone = torch.tensor([[tok.cls_token_id, *ids[s : s + window].tolist(), tok.sep_token_id]])
        with torch.no_grad():
            h = model.encode_passages(alone, torch.ones_like(alone))[0, 1:-1].numpy()
        mine = win == w
        assert mine.any()
        np.testing.assert_allclose(enc.vectors[mine], h[pos[mine]], rtol=1e-4, atol=1e-5)
        others = [o for o in starts if o != s]
        only_here = [t for t in range(s, min(n, s + window)) if not any(o <= t < o + window for o in others)]
        assert (win[only_here] == w).all()  # tokens well inside a window take their vector from it
    assert win[starts[1]] == 0  # window 1's first token has more context at the end of window 0


def test_batching_does_not_change_vectors(model_and_tokenizer, long_text):
    model, tok = model_and_tokenizer
    rng = random.Random(4)
    texts = [make_paragraph(rng, rng.randint(1, 5)) for _ in range(12)] + [long_text, "Short."]
    big = PassageEncoder(model, tok, precision="fp32", max_batch_tokens=8192).encode(texts)
    small = PassageEncoder(model, tok, precision="fp32", max_batch_tokens=64).encode(texts)  # 2 windows a batch
    single = [PassageEncoder(model, tok, precision="fp32").encode([t])[0] for t in texts]
    for a, b, c in zip(big, small, single, strict=True):
        np.testing.assert_allclose(a.vectors, b.vectors, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a.vectors, c.vectors, rtol=1e-4, atol=1e-5)


def test_empty_inputs(model_and_tokenizer):
    model, tok = model_and_tokenizer
    assert PassageEncoder(model, tok).encode([]) == []
    [enc] = PassageEncoder(model, tok).encode_tokens(tokenize_passages(tok, [""]))
    assert enc.vectors.shape == (0, model.dim)
    qs, qe = QuestionEncoder(model, tok).encode([])
    assert qs.shape == qe.shape == (0, model.dim)


def test_question_encoding_is_padding_invariant_and_truncates(model_and_tokenizer):
    model, tok = model_and_tokenizer
    enc = QuestionEncoder(model, tok, precision="fp32")
    questions = ["Who?", "When did Alba build the river castle near the harbour?", "castle " * 500]
    qs, qe = enc.encode(questions)
    assert qs.shape == qe.shape == (3, model.dim) and qs.dtype == np.float32
    for i, q in enumerate(questions):
        s1, e1 = enc.encode([q])
        np.testing.assert_allclose(qs[i], s1[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(qe[i], e1[0], rtol=1e-4, atol=1e-5)


def test_device_and_precision_choices():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type in ("cpu", "cuda")
    with pytest.raises(ValueError, match="got 'gpu0'"):
        pick_device("gpu0")
    if not torch.cuda.is_available():  # a CUDA device this machine lacks: said so, not an assertion deep in torch
        with pytest.raises(ValueError, match="device 'cuda': no CUDA GPU is usable here.*use cpu or auto"):
            pick_device("cuda")
    else:
        with pytest.raises(ValueError, match="CUDA GPU"):
            pick_device(f"cuda:{torch.cuda.device_count()}")
    assert pick_precision("fp32", torch.device("cpu")) == "fp32"
    assert pick_precision("auto", torch.device("cpu")) in ("fp32", "bf16")
    with pytest.raises(ValueError, match="precision must be"):
        autocast("cpu", "fp16")
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, got 'fp8'"):
        pick_precision("fp8", torch.device("cpu"))


def test_open_searcher_refuses_bad_settings_before_loading(tiny_index, monkeypatch):
    """precision="fp8" opened, and the first search failed; unanswerable_prior=2.0 made every confidence 0; a bad
    runtime or device was refused after the model had loaded, and index_dir None was pathlib's TypeError."""
    from spanseek.core import loading

    monkeypatch.setattr(loading, "PhraseIndex", lambda *a, **k: pytest.fail("loaded the index"))
    for kwargs, words in (({"precision": "fp8"}, "precision must be one of auto, fp32, bf16, got 'fp8'"),
                          ({"reader_precision": "half"}, "reader_precision must be one of"),
                          ({"unanswerable_prior": 2.0}, r"unanswerable_prior must be a number in \[0, 1\], got 2.0"),
                          ({"unanswerable_prior": -1}, "unanswerable_prior must be"),
                          ({"unanswerable_prior": True}, "unanswerable_prior must be"),
                          ({"runtime": "tensorrt"}, "runtime must be one of auto, torch, onnx, got 'tensorrt'"),
                          ({"runtime": None}, "runtime must be one of"),
                          ({"device": "gpu"}, "device must be auto, cpu, cuda or cuda:N.*got 'gpu'"),
                          ({"device": None}, "device must be auto, cpu, cuda or cuda:N.*got None"),
                          ({"device": "cuda:99"}, "device 'cuda:99'"),  # no machine here has 100 GPUs
                          ({"search_device": "gpu"}, "search device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
                          ({"search_device": None}, "search device must be"),
                          ({"search_device": "cuda:99"}, "search_device 'cuda:99'")):  # it searched on the CPU
        with pytest.raises(ValueError, match=words):
            loading.open_searcher(tiny_index, None, **kwargs)
    for args, kwargs, words in (((None, None), {}, "index_dir must be a path .str or Path., got NoneType"),
                                ((7, "default"), {}, "index_dir must be a path .str or Path., got int"),
                                ((tiny_index, 3), {}, "model must be a path .str or Path., got int"),
                                ((tiny_index, None), {"reader": True}, "reader must be a path")):
        with pytest.raises(TypeError, match=words):
            loading.open_searcher(*args, **kwargs)


@pytest.mark.parametrize("vendor, amx, avx512_bf16, capability, picked", [
    ("AuthenticAMD", False, True, "AVX512", "bf16"),   # Zen 4: native bf16 dot products, 1.7x faster
    ("GenuineIntel", False, True, "AVX512", "fp32"),   # a Xeon with AVX-512 bf16 but no AMX: 1.7x slower
    ("GenuineIntel", True, True, "AVX512", "bf16"),    # AMX (torch names such CPUs AVX512)
    ("AuthenticAMD", False, False, "AVX512", "fp32"),  # Zen 3 and older: emulated
    ("AuthenticAMD", False, True, "AVX2", "fp32"),     # torch's kernels held to AVX2: emulated
])
def test_auto_precision_on_a_cpu_follows_its_features_not_a_timing(monkeypatch, vendor, amx, avx512_bf16, capability,
                                                                   picked):
    """Every process on one machine picks the same precision, however busy the cores are when it starts: a timing
    probe here picked fp32 in one of six processes and bf16 in the others, and their vectors were 1.5% apart."""
    from spanseek.core import encoding, flat_search

    cpu = torch.device("cpu")
    monkeypatch.setattr(flat_search, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(encoding, "cpu_has_amx", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    for speedup in (0.5, 1.0, 4.0):  # what a probe beside other jobs measured: nothing of it decides
        monkeypatch.setattr(encoding, "cpu_bf16_speedup", lambda s=speedup: s, raising=False)
        assert pick_precision("auto", cpu) == picked
    assert pick_precision("fp32", cpu) == "fp32" and pick_precision("bf16", cpu) == "bf16"  # asked: as asked


@pytest.mark.parametrize("budget", [1, 10, 64, 10_000])
def test_length_passes_cover_every_row_shortest_first_within_the_budget(budget):
    """Every row in exactly one pass; passes in order of length; a pass of several rows pads within the budget."""
    rng = np.random.default_rng(budget)
    lengths = rng.integers(1, 30, size=50).tolist()
    passes = length_passes(lengths, budget)
    flat = [r for p in passes for r in p]
    assert sorted(flat) == list(range(50))
    assert [lengths[r] for r in flat] == sorted(lengths)
    assert all(len(p) == 1 or len(p) * max(lengths[r] for r in p) <= budget for p in passes)
    for p, after in zip(passes, passes[1:], strict=False):  # each pass as long as the budget allows
        assert (len(p) + 1) * lengths[after[0]] > budget
    if budget == 10_000:
        assert len(passes) == 1


def test_a_cached_question_keeps_its_first_vectors_whatever_it_is_batched_with(model_and_tokenizer, monkeypatch):
    """bf16 passes round a question's vectors by its batch's padding: with the cache, a question asked again gets the
    bits of its first encoding in any batch, each new question is encoded once (duplicates too), and the least
    recently asked is evicted beyond the cache's size."""
    model, tok = model_and_tokenizer
    enc = QuestionEncoder(model, tok, precision="bf16", cache=QuestionCache(3))
    first = enc.encode(["Who?"])
    passes: list[list[str]] = []
    encode = enc._encode
    monkeypatch.setattr(enc, "_encode", lambda qs: passes.append(list(qs)) or encode(qs))
    long = "When did Alba build the river castle near the harbour, and who paid for its walls?"
    qs, qe = enc.encode([long, "Who?", long, "Where?"])
    assert passes == [[long, "Where?"]]  # "Who?" from the cache, the repeated question once
    assert np.array_equal(qs[1], first[0][0]) and np.array_equal(qe[1], first[1][0])
    assert np.array_equal(qs[0], qs[2]) and (enc.cache.hits, enc.cache.misses) == (1, 4)
    enc.encode(["What?"])  # four asked, three kept: "Who?" was asked least recently
    assert len(enc.cache) == 3 and enc.encode(["Who?"]) is not None and passes[-1] == ["Who?"]
    with pytest.raises(ValueError, match="at least 0"):
        QuestionCache(-1)
