"""The cross-attention reader (core.reader), reading at search time (core.reading) and the reader's training labels.

Oracles: span decoding against brute force over the logits; a passage that fits one window reads the same in
strided windows; a saved reader reads as the model it was saved from; reading on and off over the searcher.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from spanseek.core.confidence import LogisticModel
from spanseek.core.config import ReaderConfig
from spanseek.core.hits import tidy_span
from spanseek.core.model import ModelError
from spanseek.core.params import SearchParams, SearchParamsError
from spanseek.core.reader import (
    READER_WEIGHTS_NAME,
    PassageReader,
    ReaderModel,
    best_spans,
    load_reader_tokenizer,
    make_windows,
    resolve_reader,
)
from spanseek.core.reading import READ_FEATURES, READING_NAME, Reading, ReadingStage
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.trainer.reader import answer_tokens, length_batches

PASSAGE = ("The castle of Alba was built in 1340 by King Borin on the river. In 1402 a fire destroyed its "
           "western tower, which Queen Dara rebuilt in 1410 with stone from the northern mountain quarry.")


def brute_force(start: np.ndarray, end: np.ndarray, flags: np.ndarray, max_tokens: int,
                bias: tuple[float, ...] = ()) -> list[tuple[float, int, int]]:
    spans = [(start[i] + end[j] + (bias[j - i] if bias else 0.0), i, j)
             for i, j in itertools.product(range(len(start)), repeat=2)
             if i <= j < i + max_tokens and flags[i] & FLAG_START and flags[j] & FLAG_END]
    return sorted(spans, key=lambda s: (-s[0], s[1] * len(start) + s[2]))


@pytest.mark.parametrize("seed, max_tokens, k, prior", [(0, 3, 1, False), (1, 5, 4, False), (2, 30, 7, False),
                                                        (3, 1, 2, False), (4, 5, 4, True), (5, 30, 7, True)])
def test_span_decoding_equals_brute_force_over_the_logits(seed, max_tokens, k, prior):
    rng = np.random.default_rng(seed)
    start, end = rng.standard_normal((2, 3, 17)).astype(np.float32)
    flags = rng.integers(0, 4, (3, 17)).astype(np.uint8)  # tokens that may start, end, both or neither
    bias = tuple(rng.normal(0, 2, max_tokens).astype(np.float32).tolist()) if prior else ()
    scores, starts, ends = best_spans(torch.from_numpy(start), torch.from_numpy(end), torch.from_numpy(flags),
                                      max_tokens, k, bias)
    for row in range(3):
        want = brute_force(start[row], end[row], flags[row], max_tokens, bias)[:k]
        got = [(s, i, j) for s, i, j in zip(scores[row].tolist(), starts[row].tolist(), ends[row].tolist(),
                                            strict=True) if s != float("-inf")]
        assert [(i, j) for _, i, j in got] == [(i, j) for _, i, j in want]
        np.testing.assert_allclose([s for s, _, _ in got], [s for s, _, _ in want], rtol=1e-6)


def reader_with(directory, **changes) -> PassageReader:
    """The saved reader with its config changed (the same weights)."""
    config = json.loads((directory / "reader_config.json").read_text())
    model = ReaderModel(ReaderConfig(**{**config, **changes}))
    model.load_weights(directory / READER_WEIGHTS_NAME)
    return PassageReader(model.eval(), load_reader_tokenizer(model.config))


def test_a_saved_reader_reads_as_the_model_it_was_saved_from(tiny_reader, tiny_backbone):
    torch.manual_seed(0)
    original = ReaderModel(ReaderConfig(backbone=str(tiny_backbone), max_len=256, stride=16, max_query_len=16,
                                        max_answer_tokens=8))
    loaded = PassageReader.load(tiny_reader)
    with torch.no_grad():
        ids = torch.tensor([[101, 2054, 102, 1996, 3317, 102]])
        want = original(ids, torch.ones_like(ids))
        got = loaded.model(ids, torch.ones_like(ids))
    for a, b in zip(want, got, strict=True):  # fp16 storage
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-2)
    from safetensors.torch import load_file

    stored = load_file(str(tiny_reader / READER_WEIGHTS_NAME))
    assert not any("word_embeddings" in n for n in stored) and {t.dtype for t in stored.values()} == {torch.float16}


def test_a_reader_save_stopped_while_it_writes_leaves_the_reader_there_and_no_temporary(tiny_reader, tmp_path,
                                                                                        monkeypatch):
    """Ctrl-C while a reader's weights were written left NAME.tmp, half-written, beside NAME."""
    import shutil

    from safetensors.torch import save_file

    from spanseek.core import model as model_module
    from spanseek.core import reader as reader_module

    path = tmp_path / "reader"
    shutil.copytree(tiny_reader, path)
    kept = (path / READER_WEIGHTS_NAME).read_bytes()

    def stopped(state, filename, *args, **kwargs):
        save_file(state, filename, *args, **kwargs)  # written, then stopped before the save ends
        raise KeyboardInterrupt

    for module in (model_module, reader_module):  # the weights writer, wherever the reader's save calls it
        monkeypatch.setattr(module, "save_file", stopped, raising=False)
    with pytest.raises(KeyboardInterrupt):
        PassageReader.load(tiny_reader).model.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reader"]
    assert (path / READER_WEIGHTS_NAME).read_bytes() == kept


def test_a_passage_that_fits_reads_the_same_in_strided_windows(tiny_reader):
    wide = reader_with(tiny_reader, max_len=256, stride=16)
    narrow = reader_with(tiny_reader, max_len=40, stride=8)
    question = "who rebuilt the tower?"
    short = PASSAGE[:60]
    assert len(make_windows(wide.tokenizer, wide.config, [question], [PASSAGE]).ids) == 1
    assert len(make_windows(narrow.tokenizer, narrow.config, [question], [PASSAGE]).ids) >= 2
    assert len(make_windows(narrow.tokenizer, narrow.config, [question], [short]).ids) == 1
    [a], [b] = wide.read([question], [short], k=3), narrow.read([question], [short], k=3)
    assert [(s.start, s.end) for s in a] == [(s.start, s.end) for s in b]
    np.testing.assert_allclose([s.score for s in a], [s.score for s in b], rtol=1e-4, atol=1e-4)


def test_text_that_spells_a_special_token_is_read_as_text(tiny_reader):
    """A question or passage holding "[SEP]" or "[PAD]" is read as the words it spells, not as a separator or padding
    inside the pair: its windows are those of the same text with the brackets spaced apart."""
    reader = PassageReader.load(tiny_reader)
    tok = reader.tokenizer
    spelt = make_windows(tok, reader.config, ["[CLS] who [SEP] built [PAD] it? [MASK]"],
                         ["The castle [SEP] was built by [PAD] King Borin [UNK] in 1340."])
    spaced = make_windows(tok, reader.config, ["[ CLS ] who [ SEP ] built [ PAD ] it? [ MASK ]"],
                          ["The castle [ SEP ] was built by [ PAD ] King Borin [ UNK ] in 1340."])
    assert [ids.tolist() for ids in spelt.ids] == [ids.tolist() for ids in spaced.ids]
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id, tok.unk_token_id}
    for ids in spelt.ids:  # only the pair's own [CLS] and two [SEP]s
        assert [i for i in ids.tolist() if i in special] == [tok.cls_token_id, tok.sep_token_id, tok.sep_token_id]
    # a character the vocabulary lacks is still its unknown token, and a long question is cut to max_query_len tokens
    [ids] = make_windows(tok, reader.config, ["who \U0001f642 built it?"], ["The castle \U0001f642."]).ids
    assert [i for i in ids.tolist() if i in special] == [tok.cls_token_id, tok.unk_token_id, tok.sep_token_id,
                                                         tok.unk_token_id, tok.sep_token_id]
    [ids] = make_windows(tok, reader.config, ["[SEP] who " * 40], ["The castle."]).ids
    assert ids.tolist().index(tok.sep_token_id) == 1 + reader.config.max_query_len


def test_a_passage_word_ending_in_a_combining_mark_keeps_it(tiny_reader):
    """The reader's tokens of a decomposed "Zoë" ("e" + U+0308) ended before the mark, so a span read "Zoe": each
    passage token's text is the composed passage's token's, marks and all, in every window."""
    import unicodedata

    reader = PassageReader.load(tiny_reader)
    passage = "The castle was built by Zoe\u0308 and Chloe\u0308\u0301 in 1340. " * 3
    composed = unicodedata.normalize("NFC", passage)
    got = make_windows(reader.tokenizer, reader.config, ["who built it?"], [passage])
    want = make_windows(reader.tokenizer, reader.config, ["who built it?"], [composed])
    assert len(got.offsets) == len(want.offsets)
    for mine, theirs in zip(got.offsets, want.offsets, strict=True):
        inside = mine[:, 0] >= 0
        assert ([unicodedata.normalize("NFC", passage[a:b]) for a, b in mine[inside].tolist()]
                == [composed[a:b] for a, b in theirs[inside].tolist()])
    assert "Zoe\u0308" in {passage[a:b] for a, b in got.offsets[0].tolist() if a >= 0}


def test_a_loaded_reader_reads_a_non_ascii_passage_without_building_the_mark_pattern(tiny_reader):
    """The first read of a non-ASCII passage built the combining-mark pattern (a pass over Unicode's categories, about
    0.1 s of CPU) inside a request: a reader builds it when it loads, and its reads use it."""
    from spanseek.core import text

    text._categories.cache_clear()
    text._mark_runs.cache_clear()
    reader = PassageReader.load(tiny_reader, runtime="torch")
    assert text._categories.cache_info().currsize == 1 and text._mark_runs.cache_info().currsize == 1
    built = text._categories.cache_info().misses, text._mark_runs.cache_info().misses
    reader.read(["who built it?"], ["The castle was built by Zoe\u0308 in 1340."])
    assert (text._categories.cache_info().misses, text._mark_runs.cache_info().misses) == built


def test_a_passage_of_combining_marks_alone_reads_no_span(tiny_reader):
    """A passage with no token but combining marks (an uncased tokenizer strips them) raised IndexError while its
    tokens' ends were moved past marks, failing every pair read with it: it reads no span, and the others read."""
    reader = PassageReader.load(tiny_reader)
    empty, read = reader.read(["who built it?"] * 2, ["\u0308\u0301", "The castle was built by Zoe\u0308."])
    assert empty == []
    assert read and all(span.pair == 1 for span in read)


def test_a_window_s_last_token_ends_where_the_passage_s_token_ends(tiny_reader):
    """A window's last token before a combining mark the tokenizer gives a token of its own (a Devanagari vowel sign,
    "क" then "##ा") took that mark as if no token held it, "का" for "क": the reader's tokens at its windows' edges are
    the passage's own (``tokenize_passages``, the phrase index's), in windows of every length."""
    from spanseek.core.text import tokenize_passages

    reader = PassageReader.load(tiny_reader)
    passage = "भाषा का इतिहास बहुत पुराना है और यह किताब का है। " * 2
    whole = {tuple(pair) for pair in tokenize_passages(reader.tokenizer, [passage])[0].offsets.tolist()}
    for max_len in range(40, 48):
        config = replace(reader.config, max_len=max_len, stride=4, max_query_len=8)
        windows = make_windows(reader.tokenizer, config, ["कब?"], [passage])
        assert len(windows.offsets) > 1
        for off in windows.offsets:
            assert {tuple(pair) for pair in off[off[:, 0] >= 0].tolist()} <= whole


def test_a_long_question_keeps_at_most_max_query_len_tokens_where_a_character_is_several(tiny_reader):
    """A character the tokenizer cuts into several tokens (a Hangul syllable: its letters) across the question's
    token limit is left out whole, so the pair never holds more than ``max_query_len`` question tokens; one that fits
    under the limit is kept whole."""
    reader = PassageReader.load(tiny_reader)
    tok, n = reader.tokenizer, reader.config.max_query_len
    assert len(tok("생", add_special_tokens=False)["input_ids"]) == 3

    def question_ids(question: str) -> list[int]:
        [ids] = make_windows(tok, reader.config, [question], ["The castle."]).ids
        return ids.tolist()[1: ids.tolist().index(tok.sep_token_id)]

    for words in (n - 1, n - 2):  # the syllable's letters on both sides of the limit
        assert question_ids("who " * words + "생 built it?") == tok("who " * words, add_special_tokens=False)["input_ids"]
    fits = "who " * (n - 3) + "생"
    assert question_ids(fits + " built it?") == tok(fits, add_special_tokens=False)["input_ids"]


def test_long_passages_read_in_windows_give_the_best_span_over_them(tiny_reader):
    reader = reader_with(tiny_reader, max_len=40, stride=8)
    question = "who rebuilt the tower?"
    windows = make_windows(reader.tokenizer, reader.config, [question], [PASSAGE])
    best = None
    for (start, end), off, flags in zip(reader.logits(windows), windows.offsets, windows.flags, strict=True):
        for score, i, j in brute_force(start, end, flags, reader.config.max_answer_tokens)[:1]:
            if best is None or score > best[0]:
                best = (score, int(off[i, 0]), int(off[j, 1]))
    [[span]] = reader.read([question], [PASSAGE])
    assert (span.start, span.end) == best[1:] and span.text == PASSAGE[best[1]:best[2]]
    assert span.score == pytest.approx(best[0], abs=1e-4)


WORDY = ("Catellain treated the diarrhea of the Ashkenazic congregations unbelievably well, said the Newfrontiers "
         "church; its archbishopric's chroniclers disagreed. ")


@pytest.mark.parametrize("max_answer_tokens", [1, 2, 3, None])
def test_read_spans_are_whole_words_as_the_index_s_phrases_are(tiny_reader, max_answer_tokens):
    """A read span started on a word's continuation piece or ended before one ("diarr" of "diarrhea", "Cat" of
    "Catellain"), most at a small ``max_answer_tokens``: every span starts where a word of the passage starts and ends
    where one ends (``tokenize_passages``' flags, the index's), also in windows that begin or end inside a word, and
    holds at most ``max_answer_tokens`` of the reader's tokens."""
    from spanseek.core.text import tokenize_passages

    reader = reader_with(tiny_reader, max_len=42, stride=9)
    passage = WORDY * 3
    whole = tokenize_passages(reader.tokenizer, [passage])[0]
    starts = set(whole.offsets[whole.flags & FLAG_START > 0, 0].tolist())
    ends = set(whole.offsets[whole.flags & FLAG_END > 0, 1].tolist())
    windows = make_windows(reader.tokenizer, reader.config, ["who treated it?"], [passage])
    edges = [off[off[:, 0] >= 0][[0, -1]] for off in windows.offsets]  # each window's first and last passage token
    assert any(int(a) not in starts for (a, _), _ in edges) and any(int(b) not in ends for _, (_, b) in edges)
    [spans] = reader.read(["who treated it?"], [passage], k=40, max_answer_tokens=max_answer_tokens)
    assert len(spans) == 40
    for span in spans:
        assert span.start in starts and span.end in ends, span.text
        inside = (whole.offsets[:, 0] >= span.start) & (whole.offsets[:, 1] <= span.end)
        assert inside.sum() <= (max_answer_tokens or reader.config.max_answer_tokens)


def test_a_span_whose_best_end_is_inside_a_word_reads_to_the_word_s_end(tiny_reader):
    """The reader's logits favour starting at "dia" of "dia ##rr ##hea" and ending at "##rr": the old decoder read
    "diarr"; the span that ends at the word's last piece, "diarrhea", is read, and at one token a one-token word."""
    reader = PassageReader.load(tiny_reader)
    windows = make_windows(reader.tokenizer, reader.config, ["what was treated?"], [WORDY])
    tokens = reader.tokenizer.convert_ids_to_tokens(windows.ids[0].tolist())
    dia = tokens.index("dia")
    assert tokens[dia + 1:dia + 3] == ["##rr", "##hea"]
    start, end = np.zeros(len(tokens), np.float32), np.zeros(len(tokens), np.float32)
    start[dia], start[dia + 1] = 9.0, 8.0
    end[dia + 1], end[dia + 2] = 9.0, 4.0
    reader.logits = lambda _windows: [(start, end)]  # type: ignore[method-assign]
    [[span]] = reader.read(["what was treated?"], [WORDY])
    assert span.text == "diarrhea" and span.score == pytest.approx(13.0 + reader.config.length_bias[2] if
                                                                   reader.config.length_bias else 13.0)
    [[one]] = reader.read(["what was treated?"], [WORDY], max_answer_tokens=1)
    assert " " + one.text + " " in " the of well , said ; its "


@pytest.mark.parametrize("budget", [1, 64, 16384])
def test_a_batch_reads_each_pair_as_if_alone(tiny_reader, budget):
    """Whatever the token budget of a forward pass (one window a pass, a few, all of them padded together)."""
    reader = PassageReader.load(tiny_reader)
    questions = ["who built the castle?", "when did the fire happen?", "what did Dara use?"]
    passages = [PASSAGE, PASSAGE[:70], PASSAGE[60:]]
    reader.max_batch_tokens = budget
    together = reader.read(questions, passages, k=2)
    reader.max_batch_tokens = 1
    for q, p, spans in zip(questions, passages, together, strict=True):
        [alone] = reader.read([q], [p], k=2)
        assert [(s.start, s.end) for s in alone] == [(s.start, s.end) for s in spans]
        np.testing.assert_allclose([s.score for s in alone], [s.score for s in spans], atol=1e-4)


def test_training_targets_are_the_answers_tokens(tiny_reader):
    reader = reader_with(tiny_reader, max_len=40, stride=8)
    answer = "Queen Dara"
    start = PASSAGE.index(answer)
    windows = make_windows(reader.tokenizer, reader.config, ["who rebuilt it?"], [PASSAGE])
    inside = 0
    for off in windows.offsets:
        first, last = answer_tokens(off, start, start + len(answer))
        if (first, last) == (0, 0):  # not wholly in this window
            ctx = off[off[:, 0] >= 0]
            assert ctx[0, 0] > start or ctx[-1, 1] < start + len(answer)
            continue
        inside += 1
        assert PASSAGE[off[first, 0]:off[last, 1]] == answer
    assert inside >= 1


def test_length_batches_cover_every_window_once_and_are_deterministic():
    lengths = np.random.default_rng(0).integers(10, 200, 1000)
    batches = length_batches(lengths, 32, seed=3)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    assert [b.tolist() for b in batches] == [b.tolist() for b in length_batches(lengths, 32, seed=3)]


def test_a_directory_without_a_reader_is_refused(tmp_path):
    with pytest.raises(ModelError, match="not a reader directory"):
        resolve_reader(tmp_path)


def test_a_length_prior_round_trips_and_a_wrong_one_is_refused_naming_the_file(tmp_path):
    from spanseek.core.config import ReaderConfig

    prior = tuple(-0.1 * i for i in range(30))
    ReaderConfig(length_bias=prior).save(tmp_path / "reader_config.json")
    assert ReaderConfig.load(tmp_path / "reader_config.json").length_bias == prior
    for bad in ([0.0] * 29, [0.0] * 29 + [float("nan")], [True] * 30, 3):
        (tmp_path / "bad.json").write_text(json.dumps({"length_bias": bad}))
        with pytest.raises(ValueError, match=r"bad\.json: length_bias must be 30 finite numbers|bad\.json: "):
            ReaderConfig.load(tmp_path / "bad.json")


def test_a_reader_trained_from_a_biased_one_starts_without_its_prior(tiny_reader, tmp_path):
    """New weights need their own prior: ``--init`` keeps the reader's shape, not the prior fitted to its logits."""
    import shutil

    from spanseek.trainer.arguments import ReaderTrainConfig

    biased = tmp_path / "biased"
    shutil.copytree(tiny_reader, biased)
    config = json.loads((biased / "reader_config.json").read_text())
    (biased / "reader_config.json").write_text(json.dumps({**config, "length_bias": [0.0] * config["max_answer_tokens"]}))
    built = ReaderTrainConfig(train="t", out="o", init=str(biased)).build()
    assert built.length_bias == () and built.max_answer_tokens == config["max_answer_tokens"]


# --- reading at search time ----------------------------------------------------------------------------------------


@pytest.fixture()
def reading_searcher(tiny_searcher, tiny_reader):
    from spanseek.core.loading import open_reading
    from spanseek.core.search import Searcher

    index = tiny_searcher.index
    return Searcher(index, tiny_searcher.encoder, reading=open_reading(tiny_reader, tiny_searcher.hits,
                                                                       precision="fp32"))


QUESTIONS = ["When did Alba build the castle?", "Who built the bridge?", "What did Cato build?"]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_read_hits_are_read_spans_of_the_retrieved_passages(reading_searcher, unit):
    read = reading_searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3, mode="dense", read=True))
    unread = reading_searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3, mode="dense"))
    reader = reading_searcher.reading.reader
    for q, hits, plain in zip(QUESTIONS, read, unread, strict=True):
        assert hits and all(h.read is not None and 0 <= h.confidence <= 1 for h in hits)
        assert all(h.read is None for h in plain)
        for h in hits:
            assert h.passage[h.start:h.end] == h.text
            spans = reader.read([q], [h.passage], k=2)[0]  # a hit is a read span tidied ("church." reads "church")
            assert any(tidy_span(h.passage, s.start, s.end) == (h.start, h.end) and s.score == pytest.approx(h.read)
                       for s in spans)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        if unit != "phrase":  # the same units, re-ranked by their best read span
            assert {h.passage_id if unit == "passage" else h.doc_id for h in hits} == \
                   {h.passage_id if unit == "passage" else h.doc_id for h in plain}


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_the_units_read_are_those_a_search_without_read_returns_first(reading_searcher, monkeypatch, unit):
    """A search with ``read`` reads the units that a search of them without it ranks first, with the same scores
    (a phrase search reads the passages a passage search returns: hybrid, with the passage unit's lexical weight)."""
    retrieved = []
    rank = reading_searcher.reading.rank
    monkeypatch.setattr(reading_searcher.reading, "rank", lambda plan, q, r, *a: retrieved.extend(r) or rank(plan, q, r, *a))
    params = SearchParams(unit=unit, top_k=1, mode="hybrid", read=True, read_passages=2)
    reading_searcher.search(QUESTIONS, params)
    plain = reading_searcher.search(QUESTIONS, replace(params, unit="passage" if unit == "phrase" else unit,
                                                       top_k=2, read=False, read_passages=None))
    assert len(retrieved) == len(QUESTIONS)
    for got, want in zip(retrieved, plain, strict=True):
        assert [(h.passage_id, h.start, h.end, h.score) for h in got[:2]] == \
               [(h.passage_id, h.start, h.end, h.score) for h in want]


def test_a_phrase_search_with_read_weighs_its_passages_on_the_passage_units_scale(reading_searcher, monkeypatch):
    """A phrase search with read reads the passages a passage search ranks first. The request's lexical_weight is on
    the phrase unit's scale (dense score + w x BM25 z-score, default 4.0), the passage search's on the passage
    unit's (z-scores, default 1.0): it is carried over as the same multiple of the unit's default. Before, the phrase
    weight was used as the passage weight, so sending the phrase default read other passages than omitting it."""
    retrieved: list = []
    rank = reading_searcher.reading.rank
    monkeypatch.setattr(reading_searcher.reading, "rank", lambda plan, q, r, *a: retrieved.append(r) or rank(plan, q, r, *a))
    weights = reading_searcher.lexical_weights

    def read(**fields) -> tuple[list, list]:
        retrieved.clear()
        hits = reading_searcher.search(QUESTIONS, SearchParams(top_k=3, mode="hybrid", read=True, **fields))
        [got] = retrieved
        return ([[(h.passage_id, h.score) for h in row] for row in got],
                [[(h.passage_id, h.start, h.end, h.score) for h in row] for row in hits])

    def passages(**fields) -> list:
        found = reading_searcher.search(QUESTIONS, SearchParams(unit="passage", top_k=3, mode="hybrid", **fields))
        return [[(h.passage_id, h.score) for h in row] for row in found]

    assert weights["phrase"] != weights["passage"]  # (else the test shows nothing)
    omitted = read()
    assert read(lexical_weight=weights["phrase"]) == omitted and omitted[0] == passages()
    assert read(lexical_weight=2 * weights["phrase"])[0] == passages(lexical_weight=2 * weights["passage"])
    assert read(lexical_weight=0.0)[0] == passages(lexical_weight=0.0)
    assert read(fusion="rrf")[0] == passages(fusion="rrf")  # fusion ranks the passages read: not refused here


def _spans(hits) -> list[tuple]:
    return [(h.passage_id, h.start, h.end, h.read is None) for h in hits]


@pytest.mark.parametrize("unit", ["phrase", "passage"])
def test_read_below_reads_exactly_the_questions_whose_search_is_unsure(reading_searcher, unit):
    """With ``read_below`` a question whose best search hit (without read) is at least that confident keeps that
    search's page; the others are read, as a search with read alone reads them."""
    from spanseek.core.confidence import FEATURE_DEPTH, hit_features
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    questions = QUESTIONS * 3 + ["Where is the castle?", "Which bridge did Alba build?", "When was the tower built?"]
    plain_params = SearchParams(unit=unit, top_k=2, mode="hybrid")
    deep = reading_searcher.search(questions, replace(plain_params, top_k=FEATURE_DEPTH[unit]))
    f = np.concatenate([hit_features(unit, [h.score for h in hs], [h.dense for h in hs], [h.lexical for h in hs],
                                     [h.text for h in hs]) for hs in deep])
    searcher = Searcher(reading_searcher.index, reading_searcher.encoder, reading=reading_searcher.reading,
                        calibrator=calibrator(mean=f.mean(axis=0), scale=np.maximum(f.std(axis=0), 1e-3)))
    plain = searcher.search(questions, plain_params)
    read = searcher.search(questions, replace(plain_params, read=True))
    best = np.asarray([hits[0].confidence for hits in plain])
    cut = float(np.median(best)) + 1e-6
    assert 0 < (best < cut).sum() < len(questions)
    for below in (0.0, cut, 1.0):  # 0: none read; 1: all but a confidence of 1.0 (a saturated logistic)
        mixed = searcher.search(questions, replace(plain_params, read=True, read_below=below))
        for hits, conf, unread, was_read in zip(mixed, best, plain, read, strict=True):
            want = was_read if conf < below else unread
            assert _spans(hits) == _spans(want)
            assert [h.score for h in hits] == pytest.approx([h.score for h in want], rel=1e-4, abs=1e-4)
    # the second page of an answered question is its search's second page; min_confidence judges either answer
    paged = searcher.search(questions, replace(plain_params, top_k=1, offset=1, read=True, read_below=cut))
    for hits, conf, unread in zip(paged, best, plain, strict=True):
        if conf >= cut:
            assert _spans(hits) == _spans(unread)[1:2]
    gated = searcher.search(questions, replace(plain_params, read=True, read_below=cut, min_confidence=cut))
    for hits, conf in zip(gated, best, strict=True):
        assert not hits.no_answer if conf >= cut else hits.no_answer == (not hits or hits[0].confidence < cut)


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_read_hits_honour_the_unanswerable_prior_by_the_calibrators_presence_model(reading_searcher, unit):
    """A read hit's confidence assumes the answer is in the index (the reading models are fitted on such questions);
    at a prior it is times P(answer in the index) at that prior: the calibrator's presence model read at the first
    hit of the search of the units read without read (phrases: passages), as deep as the calibrator reads it.
    Nothing moves at prior 0, nor without a presence model; a prior of 1 leaves no confidence."""
    from spanseek.core.confidence import FEATURE_DEPTH, hit_features, prior_shift
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    read_unit = "passage" if unit == "phrase" else unit
    unread = reading_searcher.search(QUESTIONS, SearchParams(unit=read_unit, top_k=FEATURE_DEPTH[read_unit],
                                                             mode="dense"))
    features = [hit_features(read_unit, [h.score for h in plain], [h.dense for h in plain], [None] * len(plain),
                             [h.text for h in plain]) for plain in unread]
    f = np.concatenate(features)
    fitted = calibrator()
    present = LogisticModel(tuple(f.mean(axis=0)), tuple(np.maximum(f.std(axis=0), 1e-3)),
                            (0.5, 1.0, 0.3, -0.8, 1.5, 0.0, 0.4), 0.3)
    searcher = Searcher(reading_searcher.index, reading_searcher.encoder, reading=reading_searcher.reading,
                        calibrator=replace(fitted, present={k: present for k in fitted.models}))
    params = SearchParams(unit=unit, top_k=3, mode="dense", read=True)
    at_zero = searcher.search(QUESTIONS, params)
    for prior in (0.3, 0.9):
        shifted = searcher.search(QUESTIONS, replace(params, unanswerable_prior=prior))
        for hits, base, x in zip(shifted, at_zero, features, strict=True):
            share = float(prior_shift(present.logit(x[:1]), prior)[0])
            assert 0 < share < 1 and [h.text for h in hits] == [h.text for h in base]  # the same hits, ranked alike
            assert [h.confidence for h in hits] == pytest.approx([h.confidence * share for h in base], abs=1e-4)
    assert all(h.confidence == 0 for hits in searcher.search(QUESTIONS, replace(params, unanswerable_prior=1.0))
               for h in hits)
    no_presence = Searcher(reading_searcher.index, reading_searcher.encoder, reading=reading_searcher.reading,
                           calibrator=fitted)
    assert [[h.confidence for h in hits] for hits in no_presence.search(QUESTIONS, replace(
        params, unanswerable_prior=0.5))] == [[h.confidence for h in hits] for hits in at_zero]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_read_hits_know_how_strong_the_retrieval_is_by_the_calibrators_first_hit(reading_searcher, unit, monkeypatch):
    """``retrieval_confidence``: the calibrator's log-odds that the first unit read (phrases: passage) is right, as a
    search of it without read judges it at prior 0. Oracle: a reading model over that feature alone gives every read
    hit that search's first-hit confidence. A question whose whole retrieval is weak (junk, or an answer not in the
    index) read 0.92-0.99 confident before, from features relative to the units read alone. Where no calibrator
    applies, the feature sits at its fitted mean and moves no score."""
    from spanseek.core.page import Pager
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    read_unit = "passage" if unit == "phrase" else unit
    only = LogisticModel((0.0,) * len(READ_FEATURES), (1.0,) * len(READ_FEATURES),
                         (0.0,) * (len(READ_FEATURES) - 1) + (1.0,), 0.0)
    assert READ_FEATURES[-1] == "retrieval_confidence"
    reading = replace(reading_searcher.reading.reading, models=every_unit(only), calibration={}, depths={})
    stage = ReadingStage(reading_searcher.reading.reader, reading, reading_searcher.reading.hits)
    for coef in ((1.0, 0.5, -0.5, -0.3, 2.0, 0.2, 0.1), (-1.0, 0.0, 0.0, 2.0, 0.0, 0.0, -0.5)):
        searcher = Searcher(reading_searcher.index, reading_searcher.encoder, reading=stage,
                            calibrator=calibrator(coef=coef))
        unread = searcher.search(QUESTIONS, SearchParams(unit=read_unit, top_k=1, mode="dense"))
        read = searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3, mode="dense", read=True))
        for hits, plain in zip(read, unread, strict=True):
            assert hits and all(h.confidence == pytest.approx(plain[0].confidence, abs=1e-4) for h in hits)
    bare = Searcher(reading_searcher.index, reading_searcher.encoder, reading=stage)  # no calibrator: the mean, 0
    assert all(h.confidence == 0.5 for hits in bare.search(QUESTIONS, SearchParams(unit=unit, top_k=3, mode="dense",
                                                                                    read=True)) for h in hits)
    # a fit that does not weigh it (one fitted before it) costs no judgement at prior 0
    unweighed = ReadingStage(stage.reader, replace(reading, models=every_unit(replace(only, coef=(0.0,) * len(
        READ_FEATURES)))), stage.hits)
    searcher = Searcher(reading_searcher.index, reading_searcher.encoder, reading=unweighed, calibrator=calibrator())
    monkeypatch.setattr(Pager, "first_logits", lambda *a: pytest.fail("judged"))
    assert searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3, mode="dense", read=True))[0]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_filtered_read_hits_take_the_presence_of_the_first_unit_that_passes_the_filter(reading_searcher, mode):
    """A filtered search asks whether the answer is among the units that pass the filter: read hits take the
    presence its first unit has where an unread search of the same filter reads it (its place in the search without
    the filter), not that of a unit the filter leaves out. Oracle: the unread search's first hit, whose confidence at
    a prior is its confidence at prior 0 times that presence."""
    from spanseek.core.params import SearchFilter
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    fitted = calibrator()  # a unit ranked below others is less likely the place of an answer in the index
    present = LogisticModel((0.0,) * 7, (1.0,) * 7, (0.0, 0.0, 0.0, -3.0, 0.0, 0.0, 0.0), 1.0)
    searcher = Searcher(reading_searcher.index, reading_searcher.encoder, reading=reading_searcher.reading,
                        calibrator=replace(fitted, present={k: present for k in fitted.models}))
    plain = SearchParams(unit="passage", top_k=10, mode=mode)
    shifted = 0
    for question in QUESTIONS:
        best = searcher.search([question], plain)[0][0].doc_id  # the filter leaves out the best document
        flt = SearchFilter(doc_ids=tuple(d["id"] for d in searcher.index.docs if d["id"] != best))
        unread = {p: searcher.search([question], replace(plain, filter=flt, unanswerable_prior=p))[0][0].confidence
                  for p in (0.0, 0.5)}
        read = {p: searcher.search([question], replace(plain, top_k=3, read=True, filter=flt,
                                                       unanswerable_prior=p))[0] for p in (0.0, 0.5)}
        share = unread[0.5] / unread[0.0]
        assert [h.confidence for h in read[0.5]] == pytest.approx([h.confidence * share for h in read[0.0]],
                                                                  abs=2e-3 + 1e-3 / unread[0.0])
        shifted += share < 0.9
    assert shifted  # the filter moved the presence somewhere (else this test shows nothing)


def test_read_below_is_refused_without_read_or_without_a_calibrated_model(reading_searcher):
    with pytest.raises(SearchParamsError, match="read_below applies with read=true"):
        SearchParams(read_below=0.5)
    with pytest.raises(SearchParamsError, match="read_passages applies with read=true"):  # it was silently ignored
        SearchParams(read_passages=3)
    for bad in (-0.1, 1.5, True):
        with pytest.raises(SearchParamsError, match="read_below must be a number in"):
            SearchParams(read=True, read_below=bad)  # type: ignore[arg-type]
    with pytest.raises(SearchParamsError, match="read_below needs a calibrated model"):
        reading_searcher.search(QUESTIONS, SearchParams(read=True, read_below=0.5))


def test_the_fitted_combination_is_read_from_the_reader_directory(reading_searcher, tiny_reader):
    """read_passages and the model's coefficients come from reading.json: passages read per question and the
    ranking follow the file."""
    reading = Reading.load(tiny_reader / READING_NAME)
    assert reading_searcher.reading.reading == reading and reading.read_passages == 3
    calls = []
    real = reading_searcher.reading.reader.read
    reading_searcher.reading.reader.read = lambda q, p, k=1, **kw: calls.append(len(q)) or real(q, p, k, **kw)
    reading_searcher.search(QUESTIONS[:1], SearchParams(top_k=2, mode="dense", read=True))
    assert calls == [3]
    flipped = Reading(1, 2, {u: LogisticModel(m.mean, m.scale, tuple(-c for c in m.coef), m.intercept)
                             for u, m in reading.models.items()})
    reading_searcher.reading = ReadingStage(reading_searcher.reading.reader, flipped, reading_searcher.hits)
    [[worst]] = reading_searcher.search(QUESTIONS[:1], SearchParams(top_k=1, mode="dense", read=True,
                                                                    allow_overlap=True))
    [best] = reading_searcher.search(QUESTIONS[:1], SearchParams(top_k=50, mode="dense", read=True, read_passages=1,
                                                                 allow_overlap=True))
    assert worst.read == min(h.read for h in best)  # the file's (negated) coefficients rank lowest score first


def test_a_request_reading_another_number_of_passages_is_scored_by_that_depths_fit(reading_searcher, tiny_reader):
    """A reading file fitted at several depths: a request's read_passages picks the models fitted for it (here
    depth 1's coefficients are negated, so it ranks the lowest reader score first), the default depth keeps its own."""
    reading = Reading.load(tiny_reader / READING_NAME)
    flipped = Reading(1, 2, {u: LogisticModel(m.mean, m.scale, tuple(-c for c in m.coef), m.intercept)
                             for u, m in reading.models.items()}, calibration={"phrase": (2.0, 1.0)})
    both = replace(reading, depths={1: flipped})
    reading_searcher.reading = ReadingStage(reading_searcher.reading.reader, both, reading_searcher.hits)
    params = SearchParams(top_k=50, mode="dense", read=True, allow_overlap=True)
    [one] = reading_searcher.search(QUESTIONS[:1], replace(params, read_passages=1))
    [three] = reading_searcher.search(QUESTIONS[:1], params)
    assert one[0].read == min(h.read for h in one)  # depth 1: the flipped model
    assert three[0].read == max(h.read for h in three) > one[0].read  # depth 3: the file's own model
    assert one[0].confidence == pytest.approx(1 / (1 + np.exp(-(2.0 * one[0].score + 1.0))), abs=1e-4)
    assert both.at(1) is flipped and both.at(2) is flipped and both.at(3) is both and both.at(9) is both


def test_read_without_a_reader_is_refused(tiny_searcher):
    with pytest.raises(SearchParamsError, match="read needs a reader"):
        tiny_searcher.check_mode(SearchParams(read=True, mode="dense"))
    with pytest.raises(SearchParamsError, match="read_passages must be an integer >= 1"):
        SearchParams(read=True, read_passages=0)


def test_a_reading_file_of_another_shape_is_refused(tmp_path):
    from spanseek.core.reading import ReadingError

    (tmp_path / READING_NAME).write_text(json.dumps({"version": 1, "features": ["x"]}))
    with pytest.raises(ReadingError, match="not a usable reading file"):
        Reading.load(tmp_path / READING_NAME)


def test_a_reading_file_without_a_units_model_is_refused_at_load_naming_it(tiny_reader, tmp_path):
    """Every unit is read with its own model, at every depth the file holds: a file without one was loaded and
    then failed every read request of that unit."""
    from spanseek.core.reading import ReadingError

    fitted = json.loads((tiny_reader / READING_NAME).read_text())
    other = {"5": {"models": dict(fitted["models"]), "calibration": fitted.get("calibration", {})}}
    for name, d in (("default", {**fitted, "models": {u: m for u, m in fitted["models"].items() if u != "doc"}}),
                    ("depth", {**fitted, "depths": {"5": {**other["5"], "models": {
                        u: m for u, m in fitted["models"].items() if u != "passage"}}}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / READING_NAME).write_text(json.dumps(d))
        missing = "doc at 3" if name == "default" else "passage at 5"
        with pytest.raises(ReadingError, match=f"not a usable reading file \\(no model for unit={missing} passages"):
            Reading.load(tmp_path / name / READING_NAME)
    (tmp_path / "whole" / READING_NAME).parent.mkdir()
    (tmp_path / "whole" / READING_NAME).write_text(json.dumps({**fitted, "depths": other}))
    assert set(Reading.load(tmp_path / "whole" / READING_NAME).at(5).models) == {"phrase", "passage", "doc"}


def test_read_features_by_hand():
    """Each candidate's features against a hand computation: the reader's score and margin, the share of the
    reader's mass and the number of passages on the same answer, the passage's retrieval z-score and rank."""
    from spanseek.core.params import Hit
    from spanseek.core.reader import ReadSpan
    from spanseek.core.reading import Candidate, read_features

    passage = "In 1450 the harbour bridge was built by Gala of Tarn."
    def source(phrase, score):
        a = passage.index(phrase)
        return Hit(phrase, score, a, a + len(phrase), 0, passage, "d", "t")
    def span(text, score, null=0.5):
        a = passage.index(text)
        return ReadSpan(0, a, a + len(text), text, score, null)

    sources = [source("Gala of Tarn", 3.0), source("1450", 1.0)]
    cands = [Candidate(sources[0], 0, span("Gala", 2.0, null=-3.0)), Candidate(sources[1], 1, span("Gala", 1.0)),
             Candidate(sources[1], 1, span("the harbour bridge", -1.0))]
    x = read_features(cands, sources, -12.5)
    col = {name: x[:, i] for i, name in enumerate(READ_FEATURES)}
    assert col["retrieval_confidence"].tolist() == [-10.0] * 3  # the calibrator's log-odds, clipped to +-10
    assert np.isnan(read_features(cands, sources, None)[:, -1]).all()  # no calibrator applies: missing
    total = np.logaddexp.reduce([2.0, 1.0, -1.0])
    assert col["reader"].tolist() == [2.0, 1.0, -1.0] and col["reader_margin"].tolist() == [0.0, -1.0, -3.0]
    assert col["answer_mass"] == pytest.approx([np.logaddexp(2.0, 1.0) - total] * 2 + [-1.0 - total])
    assert col["agreement"] == pytest.approx([np.log(2), np.log(2), 0.0])  # "Gala" read in two passages
    assert col["retrieval_z"].tolist() == [1.0, -1.0, -1.0] and col["retrieval_rank"].tolist() == [0, np.log(2),
                                                                                                    np.log(2)]
    assert col["reader_null"].tolist() == [5.0, 0.5, -1.5]  # the lead over its window's "no answer" score


def test_a_read_span_carries_its_windows_cls_score(tiny_reader):
    """``ReadSpan.null`` is start + end logit at [CLS] of the window the span scored best in: brute force over the
    logits of a passage read in several strided windows."""
    from spanseek.core.reader import best_spans

    reader = reader_with(tiny_reader, max_len=48, stride=16)
    question, passage = "who built the castle?", PASSAGE + " " + PASSAGE.replace("Borin", "Tavi")
    windows = make_windows(reader.tokenizer, reader.config, [question], [passage])
    assert len(windows.ids) > 2
    best: dict[tuple[int, int], tuple[float, float]] = {}
    for w, (start, end) in enumerate(reader.logits(windows)):
        off = windows.offsets[w]
        scores, starts, ends = best_spans(torch.from_numpy(start)[None], torch.from_numpy(end)[None],
                                          torch.from_numpy(windows.flags[w])[None], reader.config.max_answer_tokens, 5)
        for sc, i, j in zip(scores[0].tolist(), starts[0].tolist(), ends[0].tolist(), strict=True):
            key = (int(off[i, 0]), int(off[j, 1]))
            if key not in best or sc > best[key][0]:
                best[key] = (sc, float(start[0] + end[0]))
    spans = reader.read([question], [passage], k=5)[0]
    assert len(spans) == 5 and len({s.null for s in spans}) > 1  # read in more than one window
    for s in spans:
        assert (s.score, s.null) == pytest.approx(best[s.start, s.end], abs=1e-5)


def every_unit(model: dict) -> dict:
    """A reading file's models: one for each unit."""
    return {unit: model for unit in ("phrase", "passage", "doc")}


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_reading_file_ranks_as_before(tmp_path, version):
    """A reading file fitted before ``reader_null`` (version 1) or ``retrieval_confidence`` (version 2) loads with
    the features added since at weight 0: the same log-odds."""
    from spanseek.core.reading import OLD_FEATURES

    rng = np.random.default_rng(version)
    n = len(OLD_FEATURES[version])
    old = LogisticModel(tuple(rng.normal(size=n)), tuple(rng.uniform(0.5, 2, size=n)), tuple(rng.normal(size=n)), 0.2)
    v1 = {"version": version, "features": list(OLD_FEATURES[version]), "read_passages": 2, "spans_per_passage": 3,
          "window_chars": 200, "fitted_on": {"questions": 5}, "models": every_unit(old.to_dict()),
          "calibration": {"phrase": [1.0, 0.5]}, "depths": {"1": {"models": every_unit(old.to_dict()), "calibration": {}}}}
    (tmp_path / READING_NAME).write_text(json.dumps(v1))
    reading = Reading.load(tmp_path / READING_NAME)
    x = rng.normal(size=(9, len(READ_FEATURES)))
    for fit in (reading, reading.at(1)):
        assert fit.models["phrase"].logit(x) == pytest.approx(old.logit(x[:, :n]))
    assert reading.window_chars == 200 and reading.calibration == {"phrase": (1.0, 0.5)}
    v1["features"] = list(READ_FEATURES)  # a version 1 file over other features is refused, naming them
    (tmp_path / READING_NAME).write_text(json.dumps(v1))
    with pytest.raises(ValueError, match="features"):
        Reading.load(tmp_path / READING_NAME)


def test_a_reading_file_round_trips_with_its_calibration(tmp_path):
    features = len(READ_FEATURES)
    model = LogisticModel((0.5,) * features, (2.0,) * features, (1.0, -0.5) + (0.0,) * (features - 2), 0.3)
    other = Reading(2, 2, every_unit(replace(model, intercept=-0.1)), window_chars=120,
                    calibration={"phrase": (1.5, 0.0)})
    reading = Reading(4, 2, every_unit(model), {"questions": 7}, window_chars=120, calibration={"phrase": (0.5, -1.0)},
                      depths={2: other})
    reading.save(tmp_path / READING_NAME)
    assert Reading.load(tmp_path / READING_NAME) == reading and Reading.load(tmp_path / READING_NAME).at(1) == other
    assert reading.confidence("phrase", 2.0) == pytest.approx(1 / (1 + np.exp(-(0.5 * 2.0 - 1.0))))
    assert reading.confidence("doc", 2.0) == pytest.approx(1 / (1 + np.exp(-2.0)))  # no calibration: the model's


def test_calibration_error_by_hand():
    from spanseek.core.metrics import calibration_error

    conf = np.array([0.05, 0.15, 0.95, 0.92])
    right = np.array([0, 1, 1, 1])
    # bins 0 (0.05, wrong), 1 (0.15, right), 9 (0.95 and 0.92, both right)
    want = 0.25 * 0.05 + 0.25 * 0.85 + 0.5 * abs(1 - 0.935)
    assert calibration_error(conf, right) == pytest.approx(want)


def test_answer_decoding_sums_the_spans_of_each_answer_string_over_the_logits(tiny_reader):
    """``decode="answer"``: the most probable answer strings, each scored log sum exp over its spans among the
    ``ANSWER_CANDIDATES`` best and given by its best span: brute force over the logits of a passage that names its
    answer twice."""
    from spanseek.core.metrics import normalize_answer
    from spanseek.core.spans import ANSWER_CANDIDATES

    reader = reader_with(tiny_reader, max_len=256, stride=16)
    question, passage = "who built the castle?", "King Borin built it. The castle is by King Borin. " + PASSAGE
    windows = make_windows(reader.tokenizer, reader.config, [question], [passage])
    [(start, end)] = reader.logits(windows)
    off = windows.offsets[0]
    mass: dict[str, list[tuple[float, int, int]]] = {}
    best = brute_force(start, end, windows.flags[0], reader.config.max_answer_tokens)[:ANSWER_CANDIDATES]
    for score, i, j in best:
        text = passage[off[i, 0]:off[j, 1]]
        mass.setdefault(normalize_answer(text) or f"#{i},{j}", []).append((float(score), int(off[i, 0]), int(off[j, 1])))
    want = sorted(((float(np.logaddexp.reduce([s for s, _, _ in spans])), spans[0]) for spans in mass.values()),
                  key=lambda a: -a[0])[:3]
    got = reader.read([question], [passage], k=3, decode="answer")[0]
    assert [(s.start, s.end) for s in got] == [best[1:] for _, best in want]
    np.testing.assert_allclose([s.score for s in got], [score for score, _ in want], rtol=1e-4, atol=1e-3)
    [[span]] = reader.read([question], [passage], decode="span")
    assert span.score <= got[0].score + 1e-4
    with pytest.raises(ValueError, match="decode must be"):
        reader.read([question], [passage], decode="answers")


def test_a_read_page_of_a_rank_window_is_a_slice_of_its_list(reading_searcher):
    """The reader's retrieval ranks more passages than a small window: the window was carried into it and refused."""
    whole = reading_searcher.search(QUESTIONS, SearchParams(unit="passage", top_k=2, read=True, mode="dense"))
    page = reading_searcher.search(QUESTIONS, SearchParams(unit="passage", top_k=1, offset=1, rank_window=2,
                                                           read=True, mode="dense"))
    assert [[h.passage_id for h in p] for p in page] == [[h.passage_id for h in w[1:2]] for w in whole]


def test_a_requests_max_answer_tokens_bounds_the_read_spans(reading_searcher):
    """It was ignored with read: a limit of 1 token returned read hits of 11."""
    tokenizer = reading_searcher.reading.reader.tokenizer
    default = reading_searcher.search(QUESTIONS, SearchParams(top_k=3, read=True, mode="dense"))
    assert max(len(tokenizer.tokenize(h.text)) for hits in default for h in hits) > 1  # else this proves nothing
    short = reading_searcher.search(QUESTIONS, SearchParams(top_k=3, read=True, mode="dense", max_answer_tokens=1))
    assert all(hits for hits in short)
    assert all(len(tokenizer.tokenize(h.text)) == 1 for hits in short for h in hits)


def test_a_read_span_never_crosses_a_paragraph_break(tmp_path, tiny_model_dir, tiny_reader):
    """As phrase hits do not (core.hits.HitBuilder.answers): the reader answered "validation\\n\\nMPNet-base" over a
    heading packed with the paragraph after it."""
    import random

    from spanseek.core.loading import open_reading, open_searcher
    from spanseek.core.search import Searcher
    from spanseek.indexer.build import BuildOptions, build_index
    from tests.conftest import make_paragraph

    paragraphs = [f"{make_paragraph(random.Random(i), 1)}\n\nHeading {i}\n\n{make_paragraph(random.Random(i + 9), 1)}"
                  for i in range(4)]
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "d", "title": "T", "paragraphs": paragraphs}) + "\n")
    build_index(tmp_path / "c.jsonl", tiny_model_dir, tmp_path / "idx", BuildOptions(progress=False, precision="fp32"))
    plain = open_searcher(tmp_path / "idx", tiny_model_dir, device="cpu", precision="fp32")
    searcher = Searcher(plain.index, plain.encoder, reading=open_reading(tiny_reader, plain.hits, precision="fp32"))
    questions = [f"What did {n} build in {y}?" for n in ("Alba", "Cato", "Hugo") for y in (1200, 1500, 1800)]
    read = searcher.search(questions, SearchParams(top_k=5, read=True, mode="dense"))
    assert all(hits for hits in read) and not any("\n\n" in h.text for hits in read for h in hits)
    k = searcher.reading.reading.spans_per_passage
    raw = searcher.reading.reader.read(questions * len(paragraphs), [p for p in paragraphs for _ in questions], k=k)
    assert any("\n\n" in s.text for spans in raw for s in spans)  # the reader reads such spans: they were dropped


def test_a_pair_read_again_and_again_stays_remembered(monkeypatch):
    """The reads a stage remembers forget the least recently read pair first: a question asked again and again is
    not read again however many other pairs were read since it was first read."""
    from spanseek.core import reading as reading_module
    from spanseek.core.params import Hit
    from spanseek.core.reader import ReadSpan

    read: list[str] = []

    class CountingReader:
        def read(self, questions, passages, k=1, max_answer_tokens=None):
            read.extend(questions)
            return [[ReadSpan(0, 0, 3, p[:3], 1.0)] for p in passages]

    monkeypatch.setattr(reading_module, "RECENT_READS", 3)
    stage = ReadingStage(CountingReader(), Reading(3, 1, {}), None)
    passage = [Hit("The", 1.0, 0, 3, 0, "The castle of Alba.", "d", "t")]
    for question in ["asked often", "a", "asked often", "b", "asked often", "c", "d", "asked often"]:
        stage.candidates([question], [passage], 1)
    assert read == ["asked often", "a", "b", "c", "d"]


def test_a_searcher_over_the_next_index_version_remembers_the_reads_of_the_last(reading_searcher, monkeypatch):
    """A live index's next version (a write) and a reloaded index share the reads remembered: the same question over
    the same passage text is not read again, and reads as before."""
    from spanseek.core.segment import searcher_over

    reader = reading_searcher.reading.reader
    pairs: list[str] = []
    read = reader.read
    monkeypatch.setattr(reader, "read", lambda q, p, **kw: pairs.extend(q) or read(q, p, **kw))
    params = SearchParams(unit="passage", top_k=2, mode="dense", read=True, read_passages=2)
    before = reading_searcher.search(QUESTIONS[:1], params)
    assert len(pairs) == 2
    after = searcher_over(reading_searcher, reading_searcher.index).search(QUESTIONS[:1], params)
    assert len(pairs) == 2 and after == before


def test_windows_made_in_two_threads_at_once_never_share_their_tokenizer_calls(tiny_reader):
    """A fast tokenizer keeps its truncation settings on itself: two threads making windows with one reader at once
    cut each other's windows with the other call's settings (a searcher called from several threads). The calls of
    one window never overlap another's; each thread gets the windows it gets alone."""
    import threading
    import time

    reader = PassageReader.load(tiny_reader)
    inside = {"now": 0, "most": 0}

    class Watched:  # the reader's tokenizer, counting the calls under way at once
        def __init__(self, tokenizer):
            self.tokenizer = tokenizer

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

        def __call__(self, *args, **kwargs):
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])
            time.sleep(0.02)  # long enough for the other thread to come in
            try:
                return self.tokenizer(*args, **kwargs)
            finally:
                inside["now"] -= 1

    questions, passages = ["Who built the bridge?"] * 3, ["In 1450 Gala built the harbour bridge. " * 40] * 3
    alone = make_windows(reader.tokenizer, reader.config, questions, passages)
    watched, got = Watched(reader.tokenizer), []
    threads = [threading.Thread(target=lambda: got.append(make_windows(watched, reader.config, questions, passages)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inside["most"] == 1
    assert len(got) == 4 and all(len(w.ids) == len(alone.ids) and all(
        np.array_equal(a, b) for a, b in zip(w.ids, alone.ids, strict=True)) for w in got)
