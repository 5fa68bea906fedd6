"""Fitting the span length bias (trainer.length_bias): the maximum-likelihood fit recovers a planted bias, and the
command writes a copy of the model whose only change is the config's ``length_bias``."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from spanseek.core.text import FLAG_END, FLAG_START
from tests.conftest import make_squad


def test_fit_recovers_a_planted_bias():
    from spanseek.trainer.length_bias import SpanTable, fit_bias

    L, Q, M = 4, 6000, 12
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(Q, M, generator=g)
    lengths = torch.randint(0, L, (Q, M), generator=g)
    planted = torch.tensor([0.0, -0.5, 0.7, -1.5])
    gold = torch.multinomial(torch.softmax(scores + planted[lengths], dim=1), 1, generator=g)[:, 0]
    table = SpanTable(scores, lengths, gold)
    fitted = fit_bias(table, L)
    assert fitted[0] == 0.0
    assert torch.allclose(fitted, planted, atol=0.12), fitted
    assert table.nll(fitted) < table.nll(torch.zeros(L))


def test_nll_ignores_padding_and_reads_the_gold_column():
    """Padding columns (-inf) add nothing and the gold column holds the gold span's score."""
    from spanseek.trainer.length_bias import SpanTable

    table = SpanTable(torch.tensor([[1.0, 2.0, -torch.inf]]), torch.tensor([[0, 1, 0]]), torch.tensor([1]))
    expected = -(2.0 - np.log(np.exp(1.0) + np.exp(2.0)))
    assert float(table.nll(torch.zeros(2))) == pytest.approx(expected, rel=1e-6)
    assert float(table.nll(torch.tensor([0.0, 50.0]))) == pytest.approx(0.0, abs=1e-6)


def test_command_writes_the_model_with_its_bias(squad_file, tiny_model_dir, tiny_index, tmp_path):
    from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME, load_model, phrase_fingerprint
    from spanseek.trainer.length_bias import LengthBiasConfig, fit_length_bias

    out = tmp_path / "biased"
    summary = fit_length_bias(LengthBiasConfig(model=str(tiny_model_dir), train=str(squad_file), out=str(out),
                                               questions=300, val_questions=50, device="cpu", precision="fp32",
                                               progress=False))
    model = load_model(out)
    L = model.config.max_answer_tokens
    assert list(model.config.length_bias) == summary["length_bias"] and len(summary["length_bias"]) == L
    assert summary["length_bias"][0] == 0.0
    # make_squad's answers (a year or a name) are one or two word pieces, never three or more: those lengths sink
    assert max(summary["length_bias"][2:]) < min(summary["length_bias"][:2]) - 2  # held finite by the ridge
    before, after = summary["fit_nll"]
    assert after < before - 0.1
    assert summary["val_questions"] > 0 and summary["val_nll"][1] < summary["val_nll"][0]
    assert (out / WEIGHTS_NAME).read_bytes() == (tiny_model_dir / WEIGHTS_NAME).read_bytes()
    assert phrase_fingerprint(out) == phrase_fingerprint(tiny_model_dir)  # its indexes stay valid
    untouched = json.loads((tiny_model_dir / CONFIG_NAME).read_text())
    assert untouched["length_bias"] == []
    assert sum(summary["gold_per_length"]) == summary["fit_questions"]
    assert sorted(p.name for p in out.iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])

    # a searcher over an index built by the unbiased model takes the fitted model's bias
    from spanseek.core.loading import open_searcher

    assert open_searcher(tiny_index, out, device="cpu", precision="fp32").length_bias == tuple(summary["length_bias"])


@pytest.mark.parametrize("where", ["itself", "inside", "parent", "not-a-model"])
def test_an_out_that_would_lose_data_is_refused_before_fitting(tiny_model_dir, tmp_path, where, monkeypatch):
    import shutil

    from spanseek.trainer import length_bias

    model = tmp_path / "runs" / "m" / "last"
    shutil.copytree(tiny_model_dir, model)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "keep.txt").write_text("precious")
    out = {"itself": model, "inside": model / "fitted", "parent": model.parent, "not-a-model": tmp_path / "docs"}[where]
    monkeypatch.setattr(length_bias, "load_model", lambda *a: pytest.fail("refused only after loading"))
    with pytest.raises(ValueError, match="is, holds or lies inside the model|is not a model directory"):
        length_bias.fit_length_bias(length_bias.LengthBiasConfig(model=str(model), train="unused", out=str(out)))
    assert (tmp_path / "docs" / "keep.txt").read_text() == "precious" and (model / "spanseek_config.json").exists()


def test_bad_counts_are_refused_and_one_length_needs_no_fit():
    from spanseek.trainer.length_bias import LengthBiasConfig, SpanTable, fit_bias

    with pytest.raises(ValueError, match="^--questions must be an integer >= 1"):  # by its flag, as the others are
        LengthBiasConfig(model="m", train="t", out="o", questions=0)
    with pytest.raises(ValueError, match="^--val-questions must be an integer >= 0"):
        LengthBiasConfig(model="m", train="t", out="o", val_questions=-1)
    table = SpanTable(torch.tensor([[1.0, 2.0]]), torch.zeros((1, 2), dtype=torch.int64), torch.tensor([0]))
    assert fit_bias(table, 1).tolist() == [0.0]


def test_span_table_has_every_valid_span_of_each_passage(squad_file, tiny_model_dir):
    from spanseek.core.encoding import PassageEncoder, QuestionEncoder
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.model import load_model, load_tokenizer
    from spanseek.core.spans import span_scores
    from spanseek.core.text import char_to_token
    from spanseek.trainer.length_bias import span_table

    model = load_model(tiny_model_dir)
    tok = load_tokenizer(model.config)
    qs = squad_questions(load_squad(squad_file))[:12]
    table = span_table(model, tok, qs, "fp32")
    assert len(table.gold) == len(qs)  # make_squad's answers are all valid spans
    L = model.config.max_answer_tokens
    for r, q in enumerate(qs):
        [p] = PassageEncoder(model, tok, "fp32").encode([q.context])
        qs_, qe_ = QuestionEncoder(model, tok, "fp32").encode([q.question])
        total = span_scores(p.vectors @ qs_[0], p.vectors @ qe_[0], p.tokens.flags, L)
        row = table.scores[r]
        assert int(torch.isfinite(row).sum()) == int(np.isfinite(total).sum())
        i, j = char_to_token(p.tokens.offsets, q.answer_starts[0], q.answer_starts[0] + len(q.answers[0]))
        assert float(row[table.gold[r]]) == pytest.approx(float(total[i, j]), rel=1e-5, abs=1e-5)
        assert int(table.lengths[r, table.gold[r]]) == j - i


def test_cli_fits_and_prints_the_summary(squad_file, tiny_model_dir, tmp_path, capsys):
    from spanseek.cli import main
    from spanseek.core.model import load_model

    out = tmp_path / "cli-biased"
    assert main(["train", "length-bias", "--model", str(tiny_model_dir), "--train", str(squad_file), "--out", str(out),
                 "--questions", "40", "--val-questions", "0", "--seed", "3", "--device", "cpu"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["fit_questions"] == 40 and "val_nll" not in summary
    assert list(load_model(out).config.length_bias) == summary["length_bias"]
    assert main(["train", "length-bias", "--model", str(tiny_model_dir), "--train", str(squad_file), "--out",
                 str(out), "--questions", "0"]) == 2
    assert "--questions must be an integer >= 1" in capsys.readouterr().err


def test_reader_span_table_has_every_span_of_each_window_that_holds_the_answer(squad_file, tiny_reader):
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.reader import PassageReader, make_windows
    from spanseek.trainer.length_bias import reader_span_table

    reader = PassageReader.load(tiny_reader)
    L = reader.config.max_answer_tokens
    qs = squad_questions(load_squad(squad_file))[:10]
    table = reader_span_table(reader, qs, batch=4)
    windows = make_windows(reader.tokenizer, reader.config, [q.question for q in qs], [q.context for q in qs])
    assert len(table.gold) == len(windows.ids) == len(qs)  # short passages: one window each, the answer inside
    parted = 0  # windows with a word of several pieces, whose inner pieces start or end no span the reader reads
    for r, (q, (start, end), off, flags) in enumerate(zip(qs, reader.logits(windows), windows.offsets, windows.flags,
                                                         strict=True)):
        inside = np.flatnonzero(off[:, 0] >= 0)
        spans = [(i, j) for i in inside for j in inside if i <= j < i + L and flags[i] & FLAG_START
                 and flags[j] & FLAG_END]
        parted += int(len(spans) < sum(i <= j < i + L for i in inside for j in inside))
        row = table.scores[r]
        assert int(torch.isfinite(row).sum()) == len(spans)
        i = int(np.flatnonzero(off[:, 0] == q.answer_starts[0])[0])
        j = int(np.flatnonzero(off[:, 1] == q.answer_starts[0] + len(q.answers[0]))[0])
        assert float(row[table.gold[r]]) == pytest.approx(float(start[i] + end[j]), abs=1e-5)
        assert int(table.lengths[r, table.gold[r]]) == j - i
        assert sorted(table.lengths[r, : len(spans)].tolist()) == sorted(b - a for a, b in spans)
    assert parted


def test_reader_command_writes_the_reader_with_its_prior(squad_file, tiny_reader, tmp_path):
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.reader import READER_CONFIG_NAME, READER_WEIGHTS_NAME, PassageReader, make_windows
    from spanseek.trainer.length_bias import ReaderLengthBiasConfig, fit_reader_length_bias

    out = tmp_path / "reader-biased"
    summary = fit_reader_length_bias(ReaderLengthBiasConfig(
        reader=str(tiny_reader), train=str(squad_file), out=str(out), questions=1000, val_questions=30, device="auto",
        precision="fp32", progress=False))  # auto, the command's default: a device string torch did not know
    reader = PassageReader.load(out)
    L = reader.config.max_answer_tokens
    assert list(reader.config.length_bias) == summary["length_bias"] and len(summary["length_bias"]) == L
    assert summary["length_bias"][0] == 0.0
    # make_squad's answers are one or two word pieces: longer spans sink
    assert max(summary["length_bias"][2:]) < min(summary["length_bias"][:2]) - 2
    assert summary["fit_nll"][1] < summary["fit_nll"][0] - 0.1 and summary["val_nll"][1] < summary["val_nll"][0]
    reserved = [q for q in squad_questions(load_squad(squad_file)) if q.doc_index % 20 == 12]
    assert summary["fit_questions"] == len(reserved) <= summary["fit_windows"]  # all of articles 12 and 32, only
    assert (out / READER_WEIGHTS_NAME).read_bytes() == (tiny_reader / READER_WEIGHTS_NAME).read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted([READER_CONFIG_NAME, READER_WEIGHTS_NAME])
    assert "fit-reading" in summary["next"]
    assert json.loads((tiny_reader / READER_CONFIG_NAME).read_text())["length_bias"] == []

    # decoding adds the prior by length: the biased reader's best span is the best of logits plus prior
    question, passage = "who built the castle?", "The castle was built by Borin the mason in 1340 near the river."
    windows = make_windows(reader.tokenizer, reader.config, [question], [passage])
    (start, end), = reader.logits(windows)
    off, bias, flags = windows.offsets[0], reader.config.length_bias, windows.flags[0]
    inside = np.flatnonzero(off[:, 0] >= 0)
    score, i, j = max((start[i] + end[j] + bias[j - i], i, j) for i in inside for j in inside if i <= j < i + L
                      and flags[i] & FLAG_START and flags[j] & FLAG_END)
    [best] = reader.read([question], [passage], k=1)[0]
    assert (best.start, best.end) == (off[i, 0], off[j, 1]) and best.score == pytest.approx(score, abs=1e-5)


def test_a_reader_out_that_would_lose_data_is_refused_before_reading(tiny_reader, tmp_path, monkeypatch):
    from spanseek.trainer import length_bias

    monkeypatch.setattr(length_bias.PassageReader, "load", lambda *a, **k: pytest.fail("refused only after loading"))
    for out in (tiny_reader, tiny_reader / "inside"):
        with pytest.raises(ValueError, match="is, holds or lies inside"):
            length_bias.fit_reader_length_bias(length_bias.ReaderLengthBiasConfig(
                reader=str(tiny_reader), train="unused", out=str(out)))
    with pytest.raises(ValueError, match="--articles-offset"):
        length_bias.ReaderLengthBiasConfig(reader="r", train="t", out="o", articles_offset=7)


def test_a_reader_fit_without_reserved_questions_names_its_articles_and_flags(tiny_reader, tmp_path, monkeypatch):
    """A file with no question in the reserved articles was refused as 'no reserved-article questions to fit on',
    without saying which articles those are or which flags choose them, as fit-reading says it."""
    from spanseek.trainer import length_bias

    monkeypatch.setattr(length_bias.PassageReader, "load", lambda *a, **k: pytest.fail("refused only after loading"))
    train = tmp_path / "train.json"
    train.write_text(json.dumps(make_squad(n_articles=3)))
    with pytest.raises(ValueError, match=r"^" + re.escape(
            f"{train}: no reserved-article questions to fit on (article i with i % 20 == 12, --holdout-every and "
            "--articles-offset: 0 of its 3 articles); give a file with more articles or another --articles-offset")):
        length_bias.fit_reader_length_bias(length_bias.ReaderLengthBiasConfig(
            reader=str(tiny_reader), train=str(train), out=str(tmp_path / "out")))


def test_a_copy_stopped_while_it_is_written_leaves_the_out_as_it_was_and_no_partial_copy(tiny_model_dir, tmp_path):
    """Ctrl-C while `train length-bias` wrote its copy left OUT.tmp, half-written, beside OUT."""
    from spanseek.core.model import WEIGHTS_NAME
    from spanseek.trainer.length_bias import write_copy

    out = tmp_path / "biased"
    out.mkdir()
    (out / "spanseek_config.json").write_text("the copy written before")

    def stopped(directory):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_copy(tiny_model_dir, out, WEIGHTS_NAME, stopped)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["biased"]
    assert [p.name for p in out.iterdir()] == ["spanseek_config.json"]
    assert (out / "spanseek_config.json").read_text() == "the copy written before"
