"""ONNX Runtime forward passes (core.runtime): the same outputs as torch, exported once, chosen only where they run."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from spanseek.core import runtime
from spanseek.core.encoding import ONNX_QUESTION_TOKENS, QuestionEncoder, length_passes
from spanseek.core.model import load_model, load_tokenizer
from spanseek.core.reader import MAX_BATCH_TOKENS, ONNX_BATCH_TOKENS, PassageReader, load_reader_model
from spanseek.core.runtime import OnnxForward, Passes, onnx_forward, pick_runtime

QUESTIONS = ["who built the castle?", "when", "which painter wrote the novel about the railway harbour in 1410?"]
PASSAGES = ["In 1410 Alba built the castle river.", "In 1200 Cato built the music empire and the bridge.",
            "Dara built it. " * 30]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "ONNX_CACHE", tmp_path / "onnx")
    return tmp_path / "onnx"


def test_auto_picks_onnx_runtime_only_for_fp32_on_a_cpu():
    assert pick_runtime("auto", "cpu", "fp32") == "onnx"
    assert pick_runtime("auto", "cpu", "bf16") == "torch"
    assert pick_runtime("auto", "meta", "fp32") == "torch"
    assert pick_runtime("torch", "cpu", "fp32") == "torch"
    with pytest.raises(ValueError, match="fp32 on a CPU"):
        pick_runtime("onnx", "cpu", "bf16")
    with pytest.raises(ValueError, match="runtime must be one of"):
        pick_runtime("tensorrt", "cpu", "fp32")


def test_questions_encode_as_on_torch_in_padded_batches(tiny_model_dir, cache):
    model = load_model(tiny_model_dir)
    tokenizer = load_tokenizer(model.config)
    fast, slow = QuestionEncoder(model, tokenizer, "fp32", "auto"), QuestionEncoder(model, tokenizer, "fp32")
    assert fast.onnx is not None and slow.onnx is None
    many = [f"{q} {' and more' * (i % 7)}" for i, q in enumerate(QUESTIONS * 30)]  # several passes, out of order
    assert len(length_passes([len(x) for x in tokenizer(many)["input_ids"]], ONNX_QUESTION_TOKENS)) > 3
    for batch in (QUESTIONS, QUESTIONS[:1], QUESTIONS[1:] * 5, many):  # lengths differ: rows are padded
        for a, b in zip(fast.encode(batch), slow.encode(batch), strict=True):
            assert a.dtype == np.float32 and a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)
    # a question's vectors do not depend on the others padded beside it
    alone = fast.encode(QUESTIONS[1:2])[0][0]
    np.testing.assert_allclose(fast.encode(QUESTIONS)[0][1], alone, atol=1e-5, rtol=1e-4)


def test_a_reader_reads_the_same_spans_as_on_torch(tiny_reader, cache):
    fast = PassageReader.load(tiny_reader)
    slow = PassageReader.load(tiny_reader, runtime="torch")
    assert fast.onnx is not None and slow.onnx is None
    assert (fast.max_batch_tokens, slow.max_batch_tokens) == (ONNX_BATCH_TOKENS, MAX_BATCH_TOKENS)  # by runtime
    a = fast.read(QUESTIONS, PASSAGES, k=3)
    b = slow.read(QUESTIONS, PASSAGES, k=3)
    for x, y in zip(a, b, strict=True):
        assert [(s.start, s.end) for s in x] == [(s.start, s.end) for s in y]
        np.testing.assert_allclose([s.score for s in x], [s.score for s in y], atol=1e-4)


def test_a_graph_is_exported_once_and_found_by_its_weights(tiny_reader, cache, monkeypatch):
    model = load_reader_model(tiny_reader)
    example = {"input_ids": torch.ones((2, 8), dtype=torch.long), "attention_mask": torch.ones((2, 8), dtype=torch.long),
               "token_type_ids": torch.zeros((2, 8), dtype=torch.long)}
    first = OnnxForward(model, example, ("start", "end"))
    path = first.export()
    assert path.parent == cache and [p.name for p in cache.iterdir()] == [path.name]

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    assert OnnxForward(load_reader_model(tiny_reader), example, ("start", "end")).export() == path
    with torch.no_grad():  # other weights: another graph
        model.qa_head.bias.add_(1.0)
    with pytest.raises(AssertionError, match="exported again"):
        OnnxForward(model, example, ("start", "end")).export()
    assert [p.name for p in cache.iterdir()] == [path.name]  # the failed export left nothing behind


def test_the_cache_keeps_the_graphs_used_last_within_its_bound(tiny_reader, cache, monkeypatch):
    """Every trained checkpoint exported its own 90 MB graph and nothing removed any (1.2 GB after a few training
    runs): an export now trims the graphs used longest ago, never the one just made or found, and stale part-written
    exports; a graph found again counts as used."""
    import os
    import time

    cache.mkdir()
    old = time.time() - 7200
    for name, age in (("a.onnx", 400), ("b.onnx", 300), ("c.onnx", 200), ("x.onnx.1.2.tmp", 0)):
        (cache / name).write_bytes(b"\0" * 1000)
        os.utime(cache / name, (old + age, old + age))
    os.utime(cache / "a.onnx", (old + 5000, old + 5000))  # found again since: the last to go
    monkeypatch.setenv("SPANSEEK_ONNX_CACHE_BYTES", "2500")
    model = load_reader_model(tiny_reader)
    example = {"input_ids": torch.ones((2, 8), dtype=torch.long), "attention_mask": torch.ones((2, 8), dtype=torch.long),
               "token_type_ids": torch.zeros((2, 8), dtype=torch.long)}
    path = OnnxForward(model, example, ("start", "end")).export()
    assert path.stat().st_size > 2500  # over the bound alone, and kept
    assert sorted(p.name for p in cache.iterdir()) == [path.name]
    (cache / "a.onnx").write_bytes(b"\0" * 1000)
    os.utime(cache / "a.onnx", (old, old))
    monkeypatch.setenv("SPANSEEK_ONNX_CACHE_BYTES", str(10**9))
    assert runtime.trim_cache(cache, runtime.cache_bytes(), keep=path) == []
    assert runtime.trim_cache(cache, 0, keep=path) == [cache / "a.onnx"]
    # a graph another process trimmed between finding and loading it is exported again
    forward = OnnxForward(model, example, ("start", "end"))
    forward.export()
    path.unlink()
    assert forward(**{k: v.numpy() for k, v in example.items()})[0].shape == (2, 8) and path.is_file()


def test_a_trim_leaves_a_graph_another_process_has_just_chosen(tmp_path, monkeypatch):
    """A process that finds its graph touches it, then loads it: a trim by another process removed it meanwhile when
    it was over the bound (the first process then exported it again, 90 MB and some 10 s). A graph used within
    RECENT_USE_SECONDS is left, even when it was touched after the trim listed the cache."""
    import os
    import time

    cache = tmp_path / "onnx"
    cache.mkdir()
    old = time.time() - 3600
    for name in ("old.onnx", "chosen.onnx", "late.onnx", "mine.onnx"):
        (cache / name).write_bytes(b"\0" * 1000)
        os.utime(cache / name, (old, old))
    os.utime(cache / "chosen.onnx")  # another process found it just now, and is loading it
    os.utime(cache / "mine.onnx")
    listed = Path.iterdir

    def touched_while_listed(self):  # another process finds late.onnx after the trim has listed the cache
        entries = list(listed(self))
        os.utime(cache / "late.onnx")
        return iter(entries)

    monkeypatch.setattr(Path, "iterdir", touched_while_listed)
    assert runtime.trim_cache(cache, 0, keep=cache / "mine.onnx") == [cache / "old.onnx"]
    assert sorted(p.name for p in listed(cache)) == ["chosen.onnx", "late.onnx", "mine.onnx"]
    monkeypatch.setattr(runtime, "RECENT_USE_SECONDS", 0)  # their time passed: trimmed to the bound as before
    assert sorted(runtime.trim_cache(cache, 0, keep=cache / "mine.onnx")) == [
        cache / "chosen.onnx", cache / "late.onnx"]


def test_a_cache_bound_that_is_not_a_number_is_warned_of(monkeypatch, caplog):
    monkeypatch.setenv("SPANSEEK_ONNX_CACHE_BYTES", "2GB")
    with caplog.at_level(logging.WARNING, logger="spanseek.core.runtime"):
        assert runtime.cache_bytes() == runtime.ONNX_CACHE_BYTES
    assert "SPANSEEK_ONNX_CACHE_BYTES='2GB' is not a number of bytes" in caplog.text
    monkeypatch.setenv("SPANSEEK_ONNX_CACHE_BYTES", "0")
    assert runtime.cache_bytes() == 0


def test_a_module_that_does_not_export_stays_on_torch_under_auto(tiny_reader, cache, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(torch.onnx, "export", broken)
    with caplog.at_level(logging.WARNING, logger="spanseek.core.runtime"):
        reader = PassageReader.load(tiny_reader)
    assert reader.onnx is None and "did not export" in caplog.text
    assert reader.read(QUESTIONS[:1], PASSAGES[:1])[0]  # it reads, on torch
    with pytest.raises(RuntimeError, match="unsupported operator"):
        PassageReader.load(tiny_reader, runtime="onnx")


def test_the_session_follows_torchs_thread_count(tiny_reader, cache):
    model = load_reader_model(tiny_reader)
    forward = onnx_forward("onnx", "cpu", "fp32", model, {"input_ids": torch.ones((2, 8), dtype=torch.long),
                                                          "attention_mask": torch.ones((2, 8), dtype=torch.long),
                                                          "token_type_ids": torch.zeros((2, 8), dtype=torch.long)},
                           ("start", "end"))
    assert forward is not None
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = forward.session()
        assert one.get_session_options().intra_op_num_threads == 1
        torch.set_num_threads(threads)
        assert forward.session() is not one
    finally:
        torch.set_num_threads(threads)


def count_onnx_passes(forward: OnnxForward, monkeypatch) -> list[int]:
    passes: list[int] = []
    call = OnnxForward.__call__

    def counted(self, **inputs):
        passes.append(int(inputs["input_ids"].size))
        return call(self, **inputs)

    monkeypatch.setattr(OnnxForward, "__call__", counted)
    return passes


def test_bf16_questions_encode_on_onnx_runtime_alone_or_in_any_batch_to_the_same_bits(tiny_model_dir, cache,
                                                                                      monkeypatch):
    """Under ``auto`` on a CPU in bf16, every question pass runs on ONNX Runtime in fp32, unmeasured: a question's
    vectors are the same bits alone as in a large batch of mixed lengths, at any place in it, on any number of
    threads. (Split by size between ONNX Runtime in fp32 and torch in bf16, a question's vectors were 1.5% apart
    alone and in a batch of 64, enough to change its hits.)"""
    model = load_model(tiny_model_dir)
    tokenizer = load_tokenizer(model.config)
    encoder = QuestionEncoder(model, tokenizer, "bf16", "auto")
    fp32 = QuestionEncoder(model, tokenizer, "fp32")
    passes = count_onnx_passes(encoder.onnx, monkeypatch)
    many = [f"{q} {' and more' * (i % 7)}" for i, q in enumerate(QUESTIONS * 30)]  # 90 questions, mixed lengths
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            batch = encoder.encode(many)
            for i in (0, 1, 2, 44, 89):
                alone = encoder.encode(many[i : i + 1])
                for got, want in zip(batch, alone, strict=True):
                    np.testing.assert_array_equal(got[i], want[0])
    finally:
        torch.set_num_threads(threads)
    assert len(passes) > 10  # every pass on ONNX Runtime
    assert encoder.passes.name == "onnx"
    for a, b in zip(encoder.encode(many), fp32.encode(many), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)  # fp32's vectors, not bf16's


@pytest.mark.parametrize("precision, runtime_, name", [
    ("bf16", "auto", "onnx"),    # bf16 on a CPU: every question pass on ONNX Runtime (fp32), no probe
    ("bf16", "torch", "torch"),  # asked for torch: torch
    ("fp32", "auto", "onnx"),    # fp32 on a CPU: every pass
])
def test_which_passes_run_where(tiny_model_dir, cache, precision, runtime_, name):
    model = load_model(tiny_model_dir)
    encoder = QuestionEncoder(model, load_tokenizer(model.config), precision, runtime_)
    assert encoder.passes.name == name and (encoder.onnx is None) == (name == "torch")
    assert encoder.encode(QUESTIONS)[0].shape[0] == len(QUESTIONS)


def test_a_bf16_reader_reads_every_pass_on_onnx_runtime_alone_or_among_others_to_the_same_bits(tiny_reader, cache,
                                                                                                monkeypatch):
    """Under ``auto`` on a CPU in bf16 the reader, like the question encoder, runs every pass on ONNX Runtime in fp32,
    with nothing timed at load: a pair's spans and scores are the same bits read alone as among 24 pairs (a long
    passage in several windows), on any number of threads. (Split by size at a start-up timing's choice, small
    passes ran in fp32 and large ones in bf16 on torch: a pair's scores were a bf16 rounding apart alone and among
    others, and the split moved from process to process.)"""
    monkeypatch.setattr(runtime, "probe_split", lambda *a, **k: pytest.fail("timed at load"), raising=False)
    reader = PassageReader.load(tiny_reader, precision="bf16")
    assert reader.passes == Passes(reader.onnx) and reader.passes.name == "onnx"
    assert reader.max_batch_tokens == ONNX_BATCH_TOKENS
    fp32 = PassageReader.load(tiny_reader, runtime="torch")
    assert fp32.passes.name == "torch" and fp32.max_batch_tokens == MAX_BATCH_TOKENS
    passes = count_onnx_passes(reader.onnx, monkeypatch)
    many = ([f"{q} {'and more ' * (i % 4)}" for i, q in enumerate(QUESTIONS * 8)], PASSAGES * 8)
    threads = torch.get_num_threads()

    def spans(found):
        return [[(s.start, s.end, s.score, s.null) for s in x] for x in found]
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            together = spans(reader.read(*many, k=3))
            for i in (0, 2, 13, 23):
                assert spans(reader.read([many[0][i]], [many[1][i]], k=3)) == [together[i]], (n_threads, i)
    finally:
        torch.set_num_threads(threads)
    assert len(passes) > 8
    want = spans(fp32.read(*many, k=3))  # fp32's scores, not bf16's
    assert [[x[:2] for x in row] for row in together] == [[x[:2] for x in row] for row in want]
    np.testing.assert_allclose([x[2] for row in together for x in row], [x[2] for row in want for x in row], atol=1e-4)
