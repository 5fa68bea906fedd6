"""Distillation from the reader (trainer.distill, trainer.losses.distill_loss).

The distillation term is the KL divergence of a brute-force computation; the reader's logits at another
tokenizer's tokens are those of the window where the token has the most context; a step with the teacher's logits
from the cache has the loss of one that reads them in the step; a killed cache fill resumes where it stopped; a
cache of another reader is refused; `spanseek train phrase --teacher` trains through the shared loop. A phrase model
teaches its own products at the window's tokens; several teachers teach the mean of their log-probabilities.

    .venv/bin/python -m pytest -q tests/trainer/test_distill.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spanseek.core.encoding import PassageEncoder, QuestionEncoder
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.model import ModelError, load_model, load_tokenizer
from spanseek.core.reader import MISSING_LOGIT, PassageReader, ReaderModel, make_windows
from spanseek.trainer import distill as distill_module
from spanseek.trainer import loop as loop_module
from spanseek.trainer.arguments import LossConfig, TrainConfig
from spanseek.trainer.data import TrainWindow, build_windows, collate, epoch_batches, visited_windows
from spanseek.trainer.distill import (
    PhraseTeacher,
    fill_teacher_cache,
    pooled_logits,
    resolve_teacher,
    teacher_key,
    teacher_tensors,
    window_text,
)
from spanseek.trainer.losses import distill_loss, phrase_loss, span_distill_loss
from spanseek.trainer.phrase_cache import CacheError
from spanseek.trainer.train import JointMode, train_phrase


def test_distill_loss_is_the_kl_divergence_from_the_teacher():
    g = torch.Generator().manual_seed(0)
    Q, P, T, d = 5, 3, 9, 4
    q, H = torch.randn(Q, d, generator=g), torch.randn(P, T, d, generator=g)
    ok = torch.rand(P, T, generator=g) > 0.3
    q_passage = torch.tensor([0, 0, 1, 2, 2])
    teacher = torch.randn(Q, T, generator=g) * 3
    teacher[1, :4] = MISSING_LOGIT
    ok[2] = False  # the window of questions 3 and 4: nothing to distil
    for tau in (1.0, 2.0):
        kls = []
        for i in range(Q):
            valid = [t for t in range(T) if ok[q_passage[i], t] and teacher[i, t] > MISSING_LOGIT / 2]
            if not valid:
                continue
            s = np.array([float(q[i] @ H[q_passage[i], t]) for t in valid]) / tau
            u = np.array([float(teacher[i, t]) for t in valid]) / tau
            ps, pt = np.exp(s - s.max()) / np.exp(s - s.max()).sum(), np.exp(u - u.max()) / np.exp(u - u.max()).sum()
            kls.append(float((pt * np.log(pt / ps)).sum()))
        assert len(kls) == Q - 2
        got = distill_loss(q, H, ok, q_passage, teacher, tau)
        assert got.item() == pytest.approx(np.mean(kls) * tau**2, rel=1e-4)
    student = torch.einsum("qd,qtd->qt", q, H[q_passage])
    assert distill_loss(q, H, ok, q_passage, student, 1.0).item() == pytest.approx(0.0, abs=1e-5)


def test_span_distill_loss_is_the_kl_divergence_over_the_spans_the_decoder_picks_from():
    g = torch.Generator().manual_seed(1)
    Q, P, T, d, L = 5, 3, 9, 4, 3
    q_start, q_end, H = torch.randn(Q, d, generator=g), torch.randn(Q, d, generator=g), torch.randn(P, T, d, generator=g)
    start_ok, end_ok = torch.rand(P, T, generator=g) > 0.3, torch.rand(P, T, generator=g) > 0.3
    q_passage = torch.tensor([0, 0, 1, 2, 2])
    t_start, t_end = torch.randn(Q, T, generator=g) * 3, torch.randn(Q, T, generator=g) * 3
    t_start[1, :4] = MISSING_LOGIT  # the teacher did not read the start of question 1's window
    t_end[0, 5:] = MISSING_LOGIT
    start_ok[2] = False  # the window of questions 3 and 4: no span to distil
    for tau in (1.0, 2.0):
        kls = []
        for i in range(Q):  # brute force: every span i <= j < i + L both models may score
            p = int(q_passage[i])
            spans = [(a, b) for a in range(T) for b in range(a, min(T, a + L))
                     if start_ok[p, a] and end_ok[p, b] and t_start[i, a] > MISSING_LOGIT / 2
                     and t_end[i, b] > MISSING_LOGIT / 2]
            if not spans:
                continue
            s = np.array([float(q_start[i] @ H[p, a] + q_end[i] @ H[p, b]) for a, b in spans]) / tau
            u = np.array([float(t_start[i, a] + t_end[i, b]) for a, b in spans]) / tau
            ps, pt = np.exp(s - s.max()) / np.exp(s - s.max()).sum(), np.exp(u - u.max()) / np.exp(u - u.max()).sum()
            kls.append(float((pt * np.log(pt / ps)).sum()))
        assert len(kls) == Q - 2
        got = span_distill_loss(q_start, q_end, H, start_ok, end_ok, q_passage, (t_start, t_end), L, tau)
        assert got.item() == pytest.approx(np.mean(kls) * tau**2, rel=1e-4)
    own = tuple(torch.einsum("qd,qtd->qt", v, H[q_passage]) for v in (q_start, q_end))  # the student's own logits
    assert span_distill_loss(q_start, q_end, H, start_ok, end_ok, q_passage, own, L).item() == pytest.approx(0, abs=1e-5)


def test_the_loss_adds_the_span_level_term_in_place_of_the_boundary_terms():
    g = torch.Generator().manual_seed(2)
    Q, P, T, d, L = 4, 2, 8, 4, 3
    case = dict(H=torch.randn(P, T, d, generator=g), q_start=torch.randn(Q, d, generator=g),
                q_end=torch.randn(Q, d, generator=g), start_ok=torch.ones(P, T, dtype=torch.bool),
                end_ok=torch.ones(P, T, dtype=torch.bool), q_passage=torch.tensor([0, 0, 1, 1]),
                gold_start=torch.tensor([1, 2, 3, 4]), gold_end=torch.tensor([2, 2, 4, 5]))
    teacher = (torch.randn(Q, T, generator=g), torch.randn(Q, T, generator=g))
    base = phrase_loss(**case, cfg=LossConfig())
    spans = phrase_loss(**case, cfg=LossConfig(lambda_kl=3, kl_level="spans"), teacher=teacher, max_answer_tokens=L)
    want = span_distill_loss(case["q_start"], case["q_end"], case["H"], case["start_ok"], case["end_ok"],
                             case["q_passage"], teacher, L)
    assert (spans - base).item() == pytest.approx(3 * want.item(), rel=1e-5)
    tokens = phrase_loss(**case, cfg=LossConfig(lambda_kl=3), teacher=teacher, max_answer_tokens=L)
    assert tokens.item() != pytest.approx(spans.item(), rel=1e-3)
    with pytest.raises(ValueError, match="max_answer_tokens"):
        phrase_loss(**case, cfg=LossConfig(lambda_kl=3, kl_level="spans"), teacher=teacher)
    with pytest.raises(ValueError, match="--kl-level"):
        LossConfig(kl_level="words")  # type: ignore[arg-type]


def test_the_reader_logits_at_other_tokens_come_from_the_window_with_most_context(tiny_reader):
    reader = PassageReader.load(tiny_reader)
    question = "who built the old bridge over the river?"
    passage = " ".join(f"word{i} stone" for i in range(150))  # several strided windows
    windows = make_windows(reader.tokenizer, reader.config, [question], [passage])
    assert len(windows.ids) > 1
    logits = reader.logits(windows)
    starts = np.unique(np.concatenate([o[o[:, 0] >= 0, 0] for o in windows.offsets]))
    starts = np.append(starts, starts[-1] + 1)  # inside a token: no reader token starts there
    [got] = reader.token_logits([question], [passage], [starts])
    for k, c in enumerate(starts[:-1]):  # brute force over the windows holding the token
        best = max(((min(t - inside[0], inside[-1] - t), w, t)
                    for w, o in enumerate(windows.offsets)
                    for inside in [np.flatnonzero(o[:, 0] >= 0)]
                    for t in np.flatnonzero(o[:, 0] == c)), key=lambda x: x[0])
        _, w, t = best
        assert tuple(got[k]) == (logits[w][0][t], logits[w][1][t])
    assert tuple(got[-1]) == (MISSING_LOGIT, MISSING_LOGIT)


def _windows(tiny_model_dir, tiny_squad):
    model = load_model(tiny_model_dir, for_inference=False).eval()
    tok = load_tokenizer(model.config)
    c = model.config
    windows, _ = build_windows(squad_questions(load_squad(tiny_squad)), tok, c.max_seq_len, c.stride,
                               c.max_answer_tokens)
    return model, tok, windows


def test_a_step_with_cached_teacher_logits_has_the_loss_of_one_that_reads_them(tmp_path, tiny_model_dir, tiny_squad,
                                                                              tiny_reader):
    model, tok, windows = _windows(tiny_model_dir, tiny_squad)
    cache = fill_teacher_cache(tmp_path / "cache", tiny_reader, windows, shard_pairs=7, progress=False)
    batch_windows = windows[:5]
    batch = collate(batch_windows, tok, model.config.max_query_len)
    width = batch.start_ok.shape[1]
    cached = teacher_tensors(batch_windows, [cache], width, batch.content_shift)
    reader = PassageReader.load(tiny_reader)
    read = [torch.full((len(batch.q_passage), width), MISSING_LOGIT) for _ in range(2)]
    row = 0
    for w in batch_windows:  # the teacher run in the step, one pair at a time
        text, starts = window_text(w)
        for question in w.questions:
            [logits] = reader.token_logits([question], [text], [starts])
            for side in (0, 1):
                read[side][row, 1 : 1 + len(starts)] = torch.from_numpy(logits[:, side])
            row += 1
    torch.testing.assert_close(cached[0], read[0], atol=1e-4, rtol=1e-4)
    cfg = LossConfig(lambda_kl=4.0)
    with torch.no_grad():
        H = model.encode_passages(batch.input_ids, batch.attention_mask)
        q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
        args = (H, q_start, q_end, batch.start_ok, batch.end_ok, batch.q_passage, batch.gold_start, batch.gold_end, cfg)
        with_cache, in_step = phrase_loss(*args, teacher=cached), phrase_loss(*args, teacher=(read[0], read[1]))
        without = phrase_loss(*args)
    assert with_cache.item() == pytest.approx(in_step.item(), rel=1e-4)
    assert with_cache.item() > without.item()  # the term is there (a random reader disagrees with the model)


def test_a_killed_teacher_cache_fill_resumes_where_it_stopped(tmp_path, tiny_model_dir, tiny_squad, tiny_reader,
                                                              monkeypatch):
    _, _, windows = _windows(tiny_model_dir, tiny_squad)
    n_pairs = len({teacher_key(q, w.input_ids) for w in windows for q in w.questions})
    whole = fill_teacher_cache(tmp_path / "whole", tiny_reader, windows, batch_pairs=4, shard_pairs=8, progress=False)
    read, dying = [], [True]
    real = PassageReader.token_logits

    def dies_in_the_third_shard(self, questions, passages, starts):
        if dying[0] and sum(read) >= 16:
            raise KeyboardInterrupt
        read.append(len(questions))
        return real(self, questions, passages, starts)

    monkeypatch.setattr(PassageReader, "token_logits", dies_in_the_third_shard)
    with pytest.raises(KeyboardInterrupt):
        fill_teacher_cache(tmp_path / "cache", tiny_reader, windows, batch_pairs=4, shard_pairs=8, progress=False)
    assert sum(read) == 16 and n_pairs > 16
    read.clear()
    dying[0] = False
    resumed = fill_teacher_cache(tmp_path / "cache", tiny_reader, windows, batch_pairs=4, shard_pairs=8,
                                 progress=False)
    assert sum(read) == n_pairs - 16  # the two finished shards were not read again
    assert resumed.complete and resumed.keys == whole.keys
    for key in whole.keys:
        np.testing.assert_array_equal(resumed.window(key)[0], whole.window(key)[0])


def test_a_teacher_cache_of_another_reader_is_refused(tmp_path, tiny_model_dir, tiny_squad, tiny_reader):
    _, _, windows = _windows(tiny_model_dir, tiny_squad)
    fill_teacher_cache(tmp_path / "cache", tiny_reader, windows[:3], progress=False)
    torch.manual_seed(5)
    other = ReaderModel(PassageReader.load(tiny_reader).config).save(tmp_path / "other")
    with pytest.raises(CacheError, match="made with model"):
        fill_teacher_cache(tmp_path / "cache", other, windows[:3], progress=False)
    with pytest.raises(CacheError, match="other windows"):
        fill_teacher_cache(tmp_path / "cache", tiny_reader, windows[:2], progress=False)


def test_joint_training_distils_from_a_teacher(tmp_path, tiny_squad, tiny_config, tiny_reader, monkeypatch):
    with pytest.raises(ValueError, match="needs --lambda-kl > 0"):
        TrainConfig(train=str(tiny_squad), out="o", teacher=str(tiny_reader))
    with pytest.raises(ValueError, match="no --teacher is given"):  # it named the weight, which was fine
        TrainConfig(train=str(tiny_squad), out="o", loss=LossConfig(lambda_kl=1.0))
    targets = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: targets.append(k["teacher"]) or loss_fn(*a, **k))
    cfg = TrainConfig(train=str(tiny_squad), out=str(tmp_path / "run"), encoder=tiny_config, max_steps=2,
                      batch_windows=4, val_questions=0, precision="fp32", device="cpu", progress=False,
                      teacher=str(tiny_reader), loss=LossConfig(lambda_kl=4.0))
    assert train_phrase(cfg)["steps"] == 2
    assert len(targets) == 2 and all(t is not None and (t[0] > MISSING_LOGIT / 2).any() for t in targets)
    assert (tmp_path / "run" / "teacher-cache" / "done.json").is_file()


def test_a_run_reads_the_teacher_for_the_windows_it_trains_on_only(tmp_path, tiny_squad, tiny_config, tiny_reader,
                                                                  monkeypatch):
    """The teacher cache of a run shorter than an epoch holds the pairs of the windows its steps visit, which are
    exactly the windows its batches are made of (here 2 steps of 3 windows)."""
    taught, trained = [], []
    fill = distill_module.teacher_cache
    monkeypatch.setattr(distill_module, "teacher_cache", lambda cfg, ws, *a: taught.append(ws) or fill(cfg, ws, *a))
    batch = JointMode.batch
    monkeypatch.setattr(JointMode, "batch", lambda self, ws: trained.extend(ws) or batch(self, ws))
    cfg = TrainConfig(train=str(tiny_squad), out=str(tmp_path / "run"), encoder=tiny_config, max_steps=2,
                      batch_windows=3, val_questions=0, precision="fp32", device="cpu", progress=False,
                      teacher=str(tiny_reader), loss=LossConfig(lambda_kl=1.0))
    train_phrase(cfg)
    ids = lambda ws: {id(w) for w in ws}  # noqa: E731
    assert len(taught[0]) == len(trained) == 6 and ids(taught[0]) == ids(trained)


def test_visited_windows_follow_the_epoch_order_of_every_rank():
    windows = [TrainWindow(np.zeros(n + 1, np.int64), np.zeros(n + 1, np.uint8), ["q"], [0], [0], [("a",)], [])
               for n in range(20)]
    for world in (1, 2):
        steps = 3
        order = epoch_batches(windows, 2, 5)
        want = [windows[i] for b in order[: steps * world] for i in b]
        assert visited_windows(windows, 2, 5, steps, world) == want
    assert len(visited_windows(windows, 2, 5, 9)) == 18  # one batch short of an epoch
    assert sorted(visited_windows(windows, 2, 5, 12), key=id) == sorted(windows, key=id)  # past one


def test_a_complete_teacher_cache_stands_for_its_reader(tmp_path, tiny_squad, tiny_config, tiny_reader, monkeypatch):
    """`--teacher CACHE_DIR` trains on the same targets as the reader that filled the cache, without that reader, and
    a shorter run reads a part of it; a cache without some of the run's pairs, an unfinished one, or a second cache
    directory beside it is refused."""
    targets = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: targets.append(k["teacher"]) or loss_fn(*a, **k))
    run = lambda out, teacher, **kw: train_phrase(TrainConfig(  # noqa: E731
        train=str(tiny_squad), out=str(tmp_path / out), encoder=tiny_config, batch_windows=4, val_questions=0,
        precision="fp32", device="cpu", progress=False, teacher=str(teacher), loss=LossConfig(lambda_kl=4.0), **kw))
    run("read", tiny_reader, teacher_cache=str(tmp_path / "cache"))  # one epoch: every window's pairs
    read, targets[:] = list(targets), []
    monkeypatch.setattr(PassageReader, "load", lambda *a, **k: pytest.fail("the reader was loaded"))
    run("cached", tmp_path / "cache")
    assert len(targets) == len(read) > 1
    for got, want in zip(targets, read, strict=True):
        torch.testing.assert_close(got, want)
    assert run("shorter", tmp_path / "cache", max_steps=1)["steps"] == 1  # it reads a part of the cache
    monkeypatch.undo()
    run("part", tiny_reader, teacher_cache=str(tmp_path / "part"), max_steps=1)  # one step's pairs only
    with pytest.raises(CacheError, match="pairs this run trains on are not among"):
        run("longer", tmp_path / "part")
    with pytest.raises(ValueError, match="--teacher-cache"):
        run("both", tmp_path / "cache", teacher_cache=str(tmp_path / "other"))
    (tmp_path / "cache" / "done.json").unlink()
    with pytest.raises(CacheError, match="incomplete"):
        run("unfinished", tmp_path / "cache")


def test_a_phrase_model_teaches_its_question_vectors_products_with_its_token_vectors(tiny_model_dir, tiny_squad):
    """Oracle: the window's text encoded alone by the teacher, each token's vector times the question's q_start and
    q_end (the teacher shares the student's tokenizer here, so every token is found at its first character)."""
    model, tok, windows = _windows(tiny_model_dir, tiny_squad)
    teacher = PhraseTeacher(tiny_model_dir)
    pairs = [(q, w) for w in windows[:4] for q in w.questions]
    got = teacher.token_logits(pairs)
    passages = PassageEncoder(model, tok)
    questions = QuestionEncoder(model, tok)
    for (question, window), logits in zip(pairs, got, strict=True):
        text, starts = window_text(window)
        [enc] = passages.encode([text])
        np.testing.assert_array_equal(enc.tokens.offsets[:, 0], starts)
        q_start, q_end = questions.encode([question])
        np.testing.assert_allclose(logits[:, 0], enc.vectors @ q_start[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logits[:, 1], enc.vectors @ q_end[0], rtol=1e-4, atol=1e-4)


def test_several_teachers_pool_their_log_probabilities_over_the_tokens_all_of_them_read():
    g = np.random.default_rng(0)
    a, b = g.normal(size=(7, 2)).astype(np.float32) * 3, g.normal(size=(7, 2)).astype(np.float32)
    np.testing.assert_array_equal(pooled_logits([a]), a)  # one teacher: its logits as they are
    b[2] = MISSING_LOGIT
    pooled = pooled_logits([a, b])
    assert (pooled[2] == MISSING_LOGIT).all()
    read = [0, 1, 3, 4, 5, 6]
    for side in (0, 1):
        want = (torch.log_softmax(torch.tensor(a[read, side], dtype=torch.float64), 0) +
                torch.log_softmax(torch.tensor(b[read, side], dtype=torch.float64), 0)) / 2
        np.testing.assert_allclose(pooled[read, side], want.numpy(), rtol=1e-6, atol=1e-6)
    # a product of experts: the pooled distribution is the normalised geometric mean of the teachers'
    p = np.exp(pooled[read, 0]) / np.exp(pooled[read, 0]).sum()
    pa = np.exp(a[read, 0]) / np.exp(a[read, 0]).sum()
    pb = np.exp(b[read, 0]) / np.exp(b[read, 0]).sum()
    np.testing.assert_allclose(p, np.sqrt(pa * pb) / np.sqrt(pa * pb).sum(), rtol=1e-5)


def test_teachers_resolve_by_name_and_kind(tiny_model_dir, tiny_reader, tmp_path):
    assert resolve_teacher(tiny_reader) == ("reader", tiny_reader)
    assert resolve_teacher(tiny_model_dir) == ("phrase", tiny_model_dir)
    assert resolve_teacher(f"phrase:{tiny_model_dir}") == ("phrase", tiny_model_dir)
    assert resolve_teacher("default")[0] == "reader"  # the bundled reader, as before
    with pytest.raises(ModelError, match="neither a reader nor a phrase model"):
        resolve_teacher(tmp_path / "nothing")
    with pytest.raises(ModelError, match="not a reader directory"):
        resolve_teacher(f"reader:{tiny_model_dir}")


def test_a_run_distils_from_a_reader_and_a_phrase_model_pooled(tmp_path, tiny_squad, tiny_config, tiny_reader,
                                                               tiny_model_dir, monkeypatch):
    """`--teacher READER,MODEL`: each teacher's logits in a cache of its own (OUT/teacher-cache-N, or the
    --teacher-cache directories), the step's targets their pooled log-probabilities; the caches then stand for
    their teachers; a --teacher-cache list of the wrong length is refused before any work."""
    targets = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: targets.append(k["teacher"]) or loss_fn(*a, **k))
    run = lambda out, teacher, **kw: train_phrase(TrainConfig(  # noqa: E731
        train=str(tiny_squad), out=str(tmp_path / out), encoder=tiny_config, batch_windows=4, val_questions=0,
        precision="fp32", device="cpu", progress=False, teacher=teacher, loss=LossConfig(lambda_kl=4.0),
        max_steps=2, **kw))
    run("two", f"{tiny_reader},{tiny_model_dir}")
    caches = [tmp_path / "two" / f"teacher-cache-{i}" for i in (0, 1)]
    assert all((c / "done.json").is_file() for c in caches)
    pooled, targets[:] = list(targets), []
    run("reader", str(caches[0]))
    alone = list(targets)
    assert len(pooled) == len(alone) == 2
    for (p_start, _), (r_start, _) in zip(pooled, alone, strict=True):
        read = r_start > MISSING_LOGIT / 2
        assert torch.equal(p_start > MISSING_LOGIT / 2, read)  # the same tokens (one tokenizer here)
        assert not torch.allclose(p_start[read], r_start[read])  # the phrase model moved the targets
    targets[:] = []
    run("cached", f"{caches[0]},{caches[1]}")
    for got, want in zip(targets, pooled, strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="one directory for each of the 2 teachers"):
        run("wrong", f"{tiny_reader},{tiny_model_dir}", teacher_cache=str(tmp_path / "one"))
