"""Passage chunking: a document's paragraphs -> passages of a bounded number of tokens.

    spanseek corpus from-files DOCS/ --out corpus.jsonl --max-tokens 200 --overlap 40 --min-tokens 32

Paragraph boundaries come first: a paragraph that fits the budget (``max_tokens``) is one passage. A paragraph
over the budget is cut into windows of at most ``max_tokens`` tokens at word boundaries, preferring to end a
window after a line or a sentence (in its second half), and each window starts ``overlap`` tokens before the end of
the one before it, so an answer cut by one window is whole in the next; where a line starts in that overlap, at the
first such line (lines: a code block's, the only paragraphs ``indexer.ingest`` keeps line breaks in; a passage
that starts with a line keeps its indentation). A passage shorter than ``min_tokens`` (a heading,
a list item) absorbs the paragraphs after it while they fit the budget, so headings stay with their text.
``chunk_sections`` does this within runs of paragraphs that share their metadata (a page, a heading path), so no
passage mixes two pages or sections.

Sentences are found by pysbd (rule-based, English), which knows abbreviations ("e.g.", "Dr.", "U.S.") and numbers
("3.5"), so a window does not end after "Dr.", and at the full stops of Chinese and Japanese ("。"). Only paragraphs
over the budget are split into sentences. Words are what whitespace separates, except that each character of text
written without spaces (Han, kana and their punctuation) is a word of its own, so such a paragraph is cut too.

Tokens are counted by a ``TokenCounter``: the model's tokenizer (``model_token_counter``: WordPiece tokens of
each whitespace-separated word, which for BERT tokenizers sums to the paragraph's token count, without the
[CLS]/[SEP] the encoder adds) or ``word_token_counter`` (one token per word: quick, no model; English prose has
about 1.3 WordPiece tokens per word, 1.31 on SQuAD's held-out paragraphs).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from spanseek.core.backbones import resolve_backbone
from spanseek.core.config import EncoderConfig

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Tokens of each word, for a list of words."""

# Han, kana and their punctuation (CJK symbols, full-width forms): written without spaces, so each character is a
# word of its own here, and a window of such text can end anywhere (BERT-style tokenizers make each a token too)
_SPACELESS = "\u3001-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff9f"
_WORD = re.compile(f"[{_SPACELESS}]|[^\\s{_SPACELESS}]+")
_MAY_END = re.compile(r"[.!?][\"')\]»”’]*$")  # a word that may end a sentence: asked of the segmenter
_FULL_STOPS = frozenset("。！？｡")  # a sentence's end in Chinese and Japanese (the segmenter's rules are English)
_CONTEXT = 8  # words on each side of a possible sentence end that the segmenter reads


class ChunkOptionsError(ValueError):
    """A passage size out of its range: ``field`` names it (``max_tokens``), ``reason`` says what it must be."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field, self.reason = field, reason

    def named(self, name: str) -> str:
        """The message naming the size as its caller calls it (``--max-tokens``)."""
        return f"{name} {self.reason}"


@dataclass(frozen=True)
class ChunkOptions:
    """Passage sizes in tokens: ``max_tokens`` per passage, ``overlap`` shared by consecutive windows of a long
    paragraph, ``min_tokens`` below which a passage takes in the paragraphs after it.

    ``max_tokens`` is at most ``MOST_TOKENS``: the positions of the BERT-family backbones (MiniLM, BERT, MPNet), the
    longest window any of them encodes at once. The index build encodes a passage longer than its window
    (``max_seq_len``, 256 by default) in overlapping windows anyway, so a larger budget only makes passages that are
    never read whole: a hit's text, a reader's input and a passage's score stretch over pages.
    """

    max_tokens: int = 200
    overlap: int = 40
    min_tokens: int = 32
    MOST_TOKENS: ClassVar[int] = 512

    def __post_init__(self) -> None:
        if not 8 <= self.max_tokens <= self.MOST_TOKENS:
            raise ChunkOptionsError("max_tokens", f"must be between 8 and {self.MOST_TOKENS} (the longest window a "
                                                  f"backbone encodes at once), got {self.max_tokens}")
        if not 0 <= self.overlap <= self.max_tokens // 2:
            raise ChunkOptionsError("overlap", f"must be between 0 and max_tokens / 2 ({self.max_tokens // 2}), got "
                                               f"{self.overlap}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ChunkOptionsError("min_tokens", f"must be between 0 and max_tokens ({self.max_tokens}), got "
                                                  f"{self.min_tokens}")

    @classmethod
    def of(cls, max_tokens: int | None = None, overlap: int | None = None, min_tokens: int | None = None
           ) -> ChunkOptions:
        """The sizes given, the others the defaults; ``overlap`` a fifth of ``max_tokens`` and ``min_tokens`` at most
        ``max_tokens`` unless given (from-files' flags, and PUT /files' query parameters), so that every
        ``max_tokens`` of its range is taken alone. ChunkOptionsError for a size out of its range."""
        size = cls.max_tokens if max_tokens is None else max_tokens
        return cls(max_tokens=size, overlap=size // 5 if overlap is None else overlap,
                   min_tokens=min(cls.min_tokens, size) if min_tokens is None else min_tokens)


def word_token_counter(words: Sequence[str]) -> list[int]:
    """One token per whitespace-separated word (an approximation that needs no tokenizer)."""
    return [1] * len(words)


def model_token_counter(tokenizer) -> TokenCounter:
    """A counter using a Hugging Face tokenizer: the tokens of each word without special tokens (cached by word)."""
    return _cached_counter(lambda words: tokenizer(words, add_special_tokens=False)["input_ids"])


def backbone_token_counter(config: EncoderConfig) -> TokenCounter:
    """``model_token_counter`` of the model's tokenizer (``config.backbone``), loaded from its ``tokenizer.json`` by
    the tokenizers library where the backbone is a directory with one: the very counts transformers' fast tokenizer
    gives (it runs that file, padding and truncation off), without importing transformers or torch, so a process
    that only counts (the service's file reader) starts in a fraction of the time and memory. A hub id, or a
    directory without a ``tokenizer.json``, or one whose ``tokenizer.json`` is not what transformers builds for it
    (``_as_transformers_builds``), is loaded by transformers (``core.model.load_tokenizer``)."""
    path = Path(resolve_backbone(config.backbone)) / "tokenizer.json"
    if not path.is_file() or not _as_transformers_builds(path.parent, json.loads(path.read_text(encoding="utf-8"))):
        from spanseek.core.model import load_tokenizer

        return model_token_counter(load_tokenizer(config))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # (a sentence-transformers tokenizer.json pads and truncates to 128 tokens)
    tokenizer.no_truncation()
    return _cached_counter(lambda words: [e.ids for e in tokenizer.encode_batch(words, add_special_tokens=False)])


# the tokenizers whose pipeline transformers builds from tokenizer_config.json, by the model_type naming them where it
# names no tokenizer_class: a WordPiece of the vocabulary after a BertNormalizer and a BertPreTokenizer
_WORDPIECE_TOKENIZERS = {"bert": "BertTokenizer", "mpnet": "MPNetTokenizer"}


def _as_transformers_builds(directory: Path, spec: dict[str, Any]) -> bool:
    """Whether ``spec`` (the backbone ``directory``'s tokenizer.json) runs what transformers runs for that backbone.
    transformers builds a BERT or MPNet tokenizer's normalizer and WordPiece from ``tokenizer_config.json`` (its
    defaults where that file says nothing), not from tokenizer.json: a tokenizer.json that lowercases where the
    config says ``do_lower_case: false`` counts otherwise. Another tokenizer class is not checked here: False."""
    def read(name: str) -> dict[str, Any]:
        file = directory / name
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}

    options = read("tokenizer_config.json")
    named = options.get("tokenizer_class") or _WORDPIECE_TOKENIZERS.get(read("config.json").get("model_type"))
    if str(named).removesuffix("Fast") not in _WORDPIECE_TOKENIZERS.values():
        return False
    unk = options.get("unk_token", "[UNK]")
    built = {
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": options.get("tokenize_chinese_chars", True),
                       "strip_accents": options.get("strip_accents"), "lowercase": options.get("do_lower_case", True)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "unk_token": unk.get("content") if isinstance(unk, dict) else unk,
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100},
    }
    return all(isinstance(spec.get(part), dict) and all(spec[part].get(k) == v for k, v in want.items())
               for part, want in built.items())


def _cached_counter(ids_of: Callable[[list[str]], Sequence[Sequence[int]]]) -> TokenCounter:
    """The counter of ``ids_of`` (each word's token ids), asking it only for words not seen before; a word of no
    tokens counts one."""
    cache: dict[str, int] = {}

    def count(words: Sequence[str]) -> list[int]:
        new = list({w for w in words if w not in cache})
        if new:
            cache.update((w, max(1, len(i))) for w, i in zip(new, ids_of(new), strict=True))
        return [cache[w] for w in words]

    return count


@functools.cache
def _segmenter():
    try:
        import pysbd
    except ImportError:
        raise ImportError("cutting long paragraphs at sentences needs pysbd (pip install 'spanseek[index]')") from None
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (English rules: "Dr. Smith went to Washington. He arrived." is two), stripped."""
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]


def sentence_ends(text: str) -> set[int]:
    """Character offsets in ``text`` just after each sentence's last character."""
    ends, pos = set(), 0
    for sentence in split_sentences(text):
        start = text.find(sentence, pos)
        if start < 0:  # the segmenter changed the sentence's text: no reliable offset, leave it out
            continue
        pos = start + len(sentence)
        ends.add(pos)
    return ends


def _ends_sentence(text: str, spans: list[tuple[int, int]], w: int) -> bool:
    """Whether word ``w`` ends a sentence: it ends in . ! or ? and the segmenter, reading the words around it, ends
    a sentence there (only the neighbourhood is read: segmenting whole paragraphs made chunking 20x slower)."""
    word = text[spans[w][0] : spans[w][1]]
    if word in _FULL_STOPS:
        return True
    if not _MAY_END.search(word):
        return False
    lo, hi = spans[max(0, w - _CONTEXT)][0], spans[min(len(spans) - 1, w + _CONTEXT)][1]
    return spans[w][1] - lo in sentence_ends(text[lo:hi])


def _line_break(text: str, spans: list[tuple[int, int]], w: int) -> bool:
    """Whether word ``w`` starts a line: a line break comes before it (only code blocks keep theirs in a paragraph)."""
    return 0 < w < len(spans) and "\n" in text[spans[w - 1][1] : spans[w][0]]


def _line_start(text: str, at: int) -> int:
    """Where text from offset ``at`` starts: at its line's start when only spaces come before it on its line (a code
    line's indentation, which says where it belongs), else at ``at``."""
    start = text.rfind("\n", 0, at) + 1
    return start if not text[start:at].strip(" ") else at


def _windows(text: str, spans: list[tuple[int, int]], counts: list[int], opts: ChunkOptions) -> list[tuple[str, int]]:
    """Cut one long paragraph (its words' character spans and token counts) into overlapping windows."""
    out: list[tuple[str, int]] = []
    i, n = 0, len(spans)
    while i < n:
        j, total = i, 0
        while j < n and (j == i or total + counts[j] <= opts.max_tokens):  # a window holds at least one word
            total += counts[j]
            j += 1
        if j < n:  # not the last window: end it after a line or a sentence when one ends in its second half
            for k in range(j, i + (j - i) // 2, -1):
                if _line_break(text, spans, k) or _ends_sentence(text, spans, k - 1):
                    j = k
                    break
        out.append((text[_line_start(text, spans[i][0]) : spans[j - 1][1]], sum(counts[i:j])))
        if j >= n:
            break
        back, shared = j, 0  # the next window starts `overlap` tokens before this one ends, and always moves on
        while back - 1 > i and shared + counts[back - 1] <= opts.overlap:
            back -= 1
            shared += counts[back]
        # at the first line that starts in the overlap, if one does (a code block's windows hold whole lines)
        i = next((k for k in range(back, j) if _line_break(text, spans, k)), back)
    return out


def split_paragraph(text: str, count: TokenCounter, opts: ChunkOptions) -> list[tuple[str, int]]:
    """One paragraph as (text, tokens) pieces: itself when it fits ``max_tokens``, else its windows."""
    matches = list(_WORD.finditer(text))
    counts = count([m.group() for m in matches])
    total = sum(counts)
    if total <= opts.max_tokens:
        return [(text[_line_start(text, matches[0].start()) :].rstrip(), total)] if matches else []
    spans = [m.span() for m in matches]
    if max(counts) > opts.max_tokens // 2:  # a word no window could hold with others (base64, a long URL)
        spans, counts = _cut_long_words(text, spans, counts, count, opts.max_tokens // 2)
    return _windows(text, spans, counts, opts)


def _mark_free(text: str, i: int, end: int) -> int:
    """``i``, or the first offset after it (before ``end``) that does not start with a combining mark."""
    while i < end and unicodedata.category(text[i]).startswith("M"):
        i += 1
    return i


def _cut_long_words(text: str, spans: list[tuple[int, int]], counts: list[int], count: TokenCounter, most: int
                    ) -> tuple[list[tuple[int, int]], list[int]]:
    """The words, each over ``most`` tokens cut into pieces of at most ``most`` tokens (by characters: text without
    spaces, such as base64 or a long URL, has no other boundary here), with their counts."""
    out_spans: list[tuple[int, int]] = []
    out_counts: list[int] = []
    for (a, b), n in zip(spans, counts, strict=True):
        if n <= most:
            out_spans.append((a, b))
            out_counts.append(n)
            continue
        step = max(1, (b - a) * most // (2 * n))  # characters a piece: half the budget's share, then checked
        while True:
            # the word's start, then every step, never between a letter and its marks
            cuts = sorted({a, *(_mark_free(text, i, b) for i in range(a + step, b, step))})
            pieces = [(i, j) for i, j in zip(cuts, [*cuts[1:], b], strict=True) if i < j]
            sizes = count([text[i:j] for i, j in pieces])
            if max(sizes) <= most or step == 1:
                break
            step = max(1, step // 2)
        out_spans += pieces
        out_counts += sizes
    return out_spans, out_counts


def chunk_paragraphs(paragraphs: Sequence[str], count: TokenCounter, opts: ChunkOptions = ChunkOptions()) -> list[str]:
    """A document's paragraphs (in order) -> its passages: long ones split, short ones joined to what follows."""
    pieces = [piece for p in paragraphs for piece in split_paragraph(p, count, opts)]
    passages: list[list[str]] = []
    size = 0
    for text, n in pieces:
        if passages and size < opts.min_tokens and size + n <= opts.max_tokens:
            passages[-1].append(text)
            size += n
        else:
            passages.append([text])
            size = n
    # a short last passage joins the one before it when both fit (a closing line, a trailing heading)
    if len(passages) > 1 and size < opts.min_tokens:
        before = sum(count([w for t in passages[-2] for w in t.split()]))
        if before + size <= opts.max_tokens:
            passages[-2].extend(passages.pop())
    return ["\n\n".join(p) for p in passages]


def chunk_sections(paragraphs: Sequence[str], metas: Sequence[dict[str, Any]], count: TokenCounter,
                   opts: ChunkOptions = ChunkOptions()) -> list[tuple[str, dict[str, Any]]]:
    """``chunk_paragraphs`` within each run of consecutive paragraphs with equal metadata (``metas``, one per
    paragraph: a page, a heading path): (passage, its run's metadata), so no passage mixes two runs."""
    out: list[tuple[str, dict[str, Any]]] = []
    for meta, run in itertools.groupby(zip(paragraphs, metas, strict=True), key=lambda pm: pm[1]):
        out.extend((passage, meta) for passage in chunk_paragraphs([p for p, _ in run], count, opts))
    return out
