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
from spanseek.core.reader import (
    MAX_BATCH_TOKENS,
    ONNX_BATCH_TOKENS,
    PROBE_WINDOW_TOKENS,
    PassageReader,
    load_reader_model,
)
from spanseek.core.runtime import OnnxForward, SmallPasses, faster_up_to, onnx_forward, pick_runtime

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


def test_faster_up_to_is_the_last_size_of_the_first_run_of_wins():
    sizes = [1, 2, 4, 8, 16]
    fixed_cost = {"onnx": lambda s: 1.0 * s, "torch": lambda s: 5.0 + 0.5 * s}  # crossover between 8 and 16
    assert faster_up_to(sizes, fixed_cost["onnx"], fixed_cost["torch"]) == 8
    assert faster_up_to(sizes, fixed_cost["torch"], fixed_cost["onnx"]) == 0  # loses the first: never
    assert faster_up_to(sizes, lambda s: 1.0, lambda s: 2.0) is None  # wins everywhere: every size
    seen = []
    faster_up_to(sizes, lambda s: seen.append(s) or float(s == 2), lambda s: 0.5)
    assert seen == [1, 2]  # a loss ends the probe: a later win (noise) does not extend the run
    assert SmallPasses().takes(1) is False and SmallPasses().name == "torch"


def test_the_split_probe_times_both_sides_in_turn_so_a_burst_of_load_does_not_pick_torch_for_good(monkeypatch):
    """A start-up probe under load: a burst of other work (a job starting beside the service) that met all of ONNX
    Runtime's timings of one size, taken one side after the other, made it lose that size and every pass ran on torch
    for the life of the process. Timed in turn, the fastest of each side is a quiet one: the split is the quiet one."""
    from types import SimpleNamespace

    clock = {"now": 0.0}
    burst_until = 35.0  # a burst slowing everything 10x for the first 35 simulated seconds
    monkeypatch.setattr(runtime, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))

    def run(cost):
        def call(rows: int) -> None:
            clock["now"] += cost(rows) * (10 if clock["now"] < burst_until else 1)
        return call

    onnx, torch_ = run(lambda r: 1.0 * r), run(lambda r: 5.0 + 0.5 * r)  # quiet crossover between 8 and 16 rows
    sizes = [1, 2, 4, 8, 16]
    assert runtime.probe_split(sizes, onnx, torch_) == 8

    def one_side(call, rows: int) -> float:  # as the probe timed before: one untimed call, the best of 3 timed
        call(rows)
        return min(runtime.seconds_of(lambda: call(rows))() for _ in range(3))

    clock["now"] = 0.0  # timed one side after the other, the burst meets all of ONNX Runtime's calls of one row
    assert faster_up_to(sizes, lambda r: one_side(onnx, r), lambda r: one_side(torch_, r)) == 0
    clock["now"] = 100.0  # no burst: the same split
    assert runtime.probe_split(sizes, onnx, torch_) == 8


@pytest.fixture()
def probed(monkeypatch):
    """``small_passes``'s probe answers ``rows`` (its measurement is the timing of real passes, checked on a real
    model by hand: one question 4.3 against 18.9 ms, 64 at 86.9 ms on torch)."""
    calls = []
    monkeypatch.setattr(runtime, "_SPLITS", {})  # each test probes afresh

    def answer(rows):
        def faster(sizes, seconds_a, seconds_b):
            calls.append(list(sizes))
            seconds_a(sizes[0]), seconds_b(sizes[0])  # both arms run
            return rows
        monkeypatch.setattr(runtime, "faster_up_to", faster)
        return calls
    return answer


def count_onnx_passes(forward: OnnxForward, monkeypatch) -> list[int]:
    passes: list[int] = []
    call = OnnxForward.__call__

    def counted(self, **inputs):
        passes.append(int(inputs["input_ids"].size))
        return call(self, **inputs)

    monkeypatch.setattr(OnnxForward, "__call__", counted)
    return passes


def test_bf16_questions_encode_on_onnx_runtime_alone_or_in_any_batch_to_the_same_bits(tiny_model_dir, cache, probed,
                                                                                      monkeypatch):
    """Under ``auto`` on a CPU in bf16, every question pass runs on ONNX Runtime in fp32, unmeasured: a question's
    vectors are the same bits alone as in a large batch of mixed lengths, at any place in it, on any number of
    threads. (Split by size between ONNX Runtime in fp32 and torch in bf16, a question's vectors were 1.5% apart
    alone and in a batch of 64, enough to change its hits.)"""
    model = load_model(tiny_model_dir)
    tokenizer = load_tokenizer(model.config)
    probes = probed(2)  # were passes split by size, ONNX Runtime would take the passes of up to two rows
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
    assert len(passes) > 10 and probes == []  # every pass on ONNX Runtime, unmeasured
    assert encoder.passes.name == "onnx" and encoder.passes.max_tokens is None
    for a, b in zip(encoder.encode(many), fp32.encode(many), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)  # fp32's vectors, not bf16's


@pytest.mark.parametrize("precision, runtime_, name", [
    ("bf16", "auto", "onnx"),    # bf16 on a CPU: every question pass on ONNX Runtime (fp32), no probe
    ("bf16", "torch", "torch"),  # asked for torch: torch
    ("fp32", "auto", "onnx"),    # fp32 on a CPU: every pass
])
def test_which_passes_run_where(tiny_model_dir, cache, probed, precision, runtime_, name):
    model = load_model(tiny_model_dir)
    probes = probed(2)
    encoder = QuestionEncoder(model, load_tokenizer(model.config), precision, runtime_)
    assert encoder.passes.name == name and (encoder.onnx is None) == (name == "torch")
    assert probes == []
    assert encoder.encode(QUESTIONS)[0].shape[0] == len(QUESTIONS)


def test_a_bf16_reader_reads_small_passes_on_onnx_and_large_ones_on_torch(tiny_reader, cache, probed, monkeypatch):
    probed(3)
    mixed = PassageReader.load(tiny_reader, precision="bf16")
    assert mixed.passes.max_tokens == 3 * PROBE_WINDOW_TOKENS and mixed.max_batch_tokens == MAX_BATCH_TOKENS
    fp32 = PassageReader.load(tiny_reader, runtime="torch")
    bf16 = PassageReader.load(tiny_reader, precision="bf16", runtime="torch")
    passes = count_onnx_passes(mixed.onnx, monkeypatch)
    one = mixed.read(QUESTIONS[:1], PASSAGES[:1], k=3)[0]  # one short window: ONNX Runtime, fp32
    assert len(passes) == 1 and passes[0] <= 3 * PROBE_WINDOW_TOKENS
    want = fp32.read(QUESTIONS[:1], PASSAGES[:1], k=3)[0]
    assert [(s.start, s.end) for s in one] == [(s.start, s.end) for s in want]
    np.testing.assert_allclose([s.score for s in one], [s.score for s in want], atol=1e-4)
    many = (QUESTIONS * 8, PASSAGES * 8)  # 24 pairs, the long passage in several windows: torch, bf16
    got, want = mixed.read(*many, k=3), bf16.read(*many, k=3)
    assert len(passes) == 1
    assert [[(s.start, s.end, s.score) for s in x] for x in got] == [[(s.start, s.end, s.score) for s in x] for x in want]


def test_models_of_one_architecture_split_passes_alike_in_a_process(tiny_reader, cache, probed):
    probes = probed(3)
    first = PassageReader.load(tiny_reader, precision="bf16")
    second = PassageReader.load(tiny_reader, precision="bf16")  # probed once, not twice
    assert len(probes) == 1 and first.passes.max_tokens == second.passes.max_tokens == 3 * PROBE_WINDOW_TOKENS
