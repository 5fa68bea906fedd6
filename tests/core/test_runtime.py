"""ONNX Runtime forward passes (core.runtime): the same outputs as torch, exported once, chosen only where they run."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from spanseek.core import runtime
from spanseek.core.encoding import ONNX_QUESTION_TOKENS, QuestionEncoder, length_passes
from spanseek.core.model import load_model, load_tokenizer
from spanseek.core.reader import MAX_BATCH_TOKENS, ONNX_BATCH_TOKENS, PassageReader, load_reader_model
from spanseek.core.runtime import OnnxForward, onnx_forward, pick_runtime

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
