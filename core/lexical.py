"""The lexical (BM25) leg: a bm25s index of an index directory's passages, and rank/score fusion with the dense leg.

Every phrase index holds one in ``lexical/`` (written by ``spanseek index build``, kept in step by ``spanseek index
add``, added to an older index by ``spanseek index add-lexical DIR``). A passage is indexed as its document title
plus its text, split into terms by the index's analyzer (``ANALYZERS``; recorded in the index, and questions go
through the same one), English stop words removed and Snowball-stemmed (bm25s + PyStemmer):

- ``folded3`` (opt-in, as ``folded2``): ``folded2``, with a letter followed by "++" or "#" a term of its own ("C++",
  "C#" and "F#" are "c++", "c#" and "f#", not "c" and "f"), and a capital letter that is a stop word kept after a word
  that is not one ("vitamin A", "Group A"; "has a", "is A" and "a" written small lose it as before).
- ``folded2`` (opt-in: ``spanseek index add-lexical DIR --analyzer folded2``): ``folded``, keeping one-character words of a letter or digit ("World War 2",
  "vitamin C", "Type 1 diabetes", the "c" of "C++"; not the "s" of "Tom's" nor the "t" of "don't"), reading letters
  joined by dots as one word ("U.S.A." finds "USA"), and with question words (``QUESTION_WORDS``: "who", "what",
  "which", "when", ...) as stop words; each rule chosen by BM25 passage accuracy on training questions
  (``bench/lexical_analyzer.py choose``). "a" stays a stop word, so "vitamin A" is still "vitamin".
- ``folded`` (indexes built now): Unicode-normalised (NFKC, so ligatures and full-width forms read as their
  letters), case-folded ("STRASSE" and "Straße" are one word), Latin, Greek and Cyrillic letters without their
  accents ("Nunez" finds "Núñez", composed or not), invisible format characters (soft hyphens, zero-width spaces)
  dropped; runs of Chinese, Japanese or Korean characters, written without spaces between words, are indexed as
  their overlapping character pairs (a lone character as itself), so "龙井茶" finds "…的龙井茶…".
- ``plain`` (indexes built before it): lower-cased words of two or more letters or digits, nothing else;
  ``spanseek index add-lexical DIR`` rebuilds an index's lexical part with ``folded`` (``--analyzer`` names
  another).

The hard-negative miner (``spanseek train mine --miner bm25``) uses the same ``LexicalIndex``.

Fusion (``core.search`` applies it per question over the candidate units of both legs):

- ``rrf_fuse``: reciprocal rank fusion, sum over legs of 1 / (k + rank), k = 60 (Cormack et al. 2009);
- ``score_fuse``: each leg's scores z-normalised over the question's candidates, then dense + w x lexical.

A filtered search fuses its candidates with the statistics (``FusionBasis``) of the same search's candidates without
the filter, so a filter selects units without changing their scores (hybrid phrases: BM25 standardised over that
search's candidate passages, and its head re-ranked with theirs).

The default weights (``DEFAULT_FUSION``) were fitted on training questions over an index of training paragraphs
(``python bench/hybrid.py fit``); they are recorded in each index's manifest and can be overridden per request.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import regex

from spanseek.core.io import atomic_dir
from spanseek.core.postings import Matches, Postings, TermList

LEXICAL_DIR = "lexical"
STOPWORDS = "en"
STEMMER = "english"
RRF_K = 60
# Fitted on training questions over an index of 106 training articles that no other index here holds
# (bench/hybrid.py fit; bench/results/hybrid_fit.json): the weight of the per-question z-scored BM25 score, added
# to a span's dense score (phrase) or to the z-scored dense unit score (passage, doc).
DEFAULT_FUSION: dict[str, Any] = {
    "default_mode": "hybrid",
    "fusion": "score",
    "weights": {"phrase": 4.0, "passage": 1.0, "doc": 1.0},
    # hybrid phrases: the head of the fused list re-ranked (core.rerank), weights fitted on 4,000 training questions
    "phrase_rerank": {"gap": 0.108, "question_overlap": -1.982, "answer_mass": 5.820},
}


class RerankHead(NamedTuple):
    """The head of one question's fused phrase ranking that ``core.rerank`` re-ranks, best first: its spans' first
    and last token ids, fused scores, texts and the texts' lexical terms."""

    starts: np.ndarray
    ends: np.ndarray
    fused: np.ndarray
    texts: list[str]
    terms: list[list[str]]


class LexicalIndexMissing(RuntimeError):
    """The index has no lexical part (built before it existed); the message says how to add one."""


def missing_message(index_dir: str | Path) -> str:
    return (f"{index_dir} has no lexical (BM25) index, so only mode=dense is available; add one without "
            f"re-encoding with `spanseek index add-lexical {index_dir}`")


@functools.cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer(STEMMER)


@functools.cache
def _stopwords(question_words: bool = False) -> frozenset[str]:
    from bm25s.tokenization import _infer_stopwords

    return frozenset(_infer_stopwords(STOPWORDS)) | (QUESTION_WORDS if question_words else frozenset())


_WORDS = re.compile(r"(?u)\b\w\w+\b").findall  # bm25s's (and scikit-learn's) token pattern
# the same with the combining marks a word holds (the vowel signs of Devanagari, Bengali, Tamil, ...: "दिल्ली")
_MARKED_WORDS = regex.compile(r"\w[\w\p{M}]+").findall
# Han (with its extensions and compatibility forms), kana and Hangul: scripts written without spaces between words
_CJK = re.compile("[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff"
                  "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+")
# letters that lose their combining marks when folded: Latin and Greek ("Núñez" reads "nunez"); Cyrillic keeps its
# (й is not и) but for ё, often written е
_ACCENTED = ((0, 0x0250), (0x0370, 0x0400))
# Latin letters with a stroke or ligatures that no decomposition takes apart ("Łódź" reads "lodz")
_UNSTROKED = str.maketrans({"ł": "l", "ø": "o", "đ": "d", "ħ": "h", "ŀ": "l", "ŧ": "t", "ı": "i", "ð": "d",
                            "þ": "th", "æ": "ae", "œ": "oe", "ё": "е"})
# question words: stop words of ``folded2`` (the words that ask, not what is asked about)
QUESTION_WORDS = frozenset({"who", "whom", "whose", "what", "which", "when", "where", "why", "how"})


@dataclass(frozen=True)
class Analysis:
    """How an analyzer (``ANALYSES``) splits a text into terms, before stop words and stemming: ``fold``, by ``fold``
    (else lower-cased words of two or more characters only); ``digits`` and ``letters``, one-character words of
    them kept ("World War 2", "vitamin C"), but not after an apostrophe (the "s" of "Tom's", the "t" of "don't");
    ``acronyms``, single letters joined by dots read as one word ("U.S.A." is "usa", as "USA" is);
    ``question_words``: ``QUESTION_WORDS`` are stop words; ``symbols``: a letter followed by "++" or "#" is a term of
    its own ("C++" is "c++", "C#" "c#", "F#" "f#"; not "c" or "f"); ``labels``: a one-letter word that is a stop word
    ("a") is kept where it follows a word that is not one, "capital" where it is written as a capital ("vitamin A",
    "Group A"; not "has a"), "any" however it is written."""

    fold: bool = True
    digits: bool = False
    letters: bool = False
    acronyms: bool = False
    question_words: bool = False
    symbols: bool = False
    labels: Literal["", "capital", "any"] = ""


ANALYSES = {"plain": Analysis(fold=False), "folded": Analysis(),
            "folded2": Analysis(digits=True, letters=True, acronyms=True, question_words=True),
            "folded3": Analysis(digits=True, letters=True, acronyms=True, question_words=True, symbols=True,
                                labels="capital")}
ANALYZERS = tuple(ANALYSES)
# ANALYZERS as a type: an option's choices (indexer.options)
AnalyzerName = Literal["plain", "folded", "folded2", "folded3"]
ANALYZER = "folded"  # the analyzer of lexical indexes built now (folded2, folded3: opt-in, docs/indexing.md)


def analyzer_of(record: dict[str, Any] | None) -> str:
    """The analyzer of a lexical index from its manifest record (``LexicalIndex.describe``): ``plain`` for one
    written before analyzers were recorded."""
    return (record or {}).get("analyzer", "plain")


def fold(text: str) -> str:
    """``text`` as the ``folded`` analyzer reads it: NFKC, case-folded, combining marks of Latin, Greek and Cyrillic
    letters and format characters (soft hyphen, zero-width space and joiner, bidi marks) removed, recomposed."""
    if text.isascii():
        return text.lower()  # the same, faster: NFKC and case folding leave ASCII as lower() does
    kept: list[str] = []
    for c in unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text).casefold().translate(_UNSTROKED)):
        category = unicodedata.category(c)
        if category == "Cf" or (category == "Mn" and kept and any(a <= ord(kept[-1]) < b for a, b in _ACCENTED)):
            continue
        kept.append(c)
    return unicodedata.normalize("NFC", "".join(kept))


def _cjk_terms(run: str) -> list[str]:
    """A run of CJK characters as its overlapping character pairs (a lone character: itself)."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


# the one-character words an ``Analysis`` keeps, by (digits, letters)
_SHORT = {(False, False): "", (True, False): r"\d", (False, True): r"[^\W\d_]", (True, True): r"[^\W_]"}


@functools.cache
def _splitter(short: str, acronyms: bool, symbols: bool, marked: bool) -> Any:
    """The ``findall`` of an ``Analysis``'s words in folded text: ``marked``, for text that is not ASCII (a word holds
    its combining marks); ``short``, the class of the one-character words kept too (not after an apostrophe: the "s"
    of "Tom's"); ``acronyms``, single letters joined by dots ("u.s.a.") as one match; ``symbols``, a letter followed
    by "++" or "#" ("c++", "c#") as one match."""
    if not (short or acronyms or symbols):
        return _MARKED_WORDS if marked else _WORDS
    word, mark = (r"\w[\w\p{M}]+", r"\p{M}") if marked else (r"\b\w\w+\b", "")
    parts = [r"(?<![\w+#])[^\W\d_](?:\+\+|#)(?![\w+#])"] if symbols else []
    if acronyms:
        parts.append(r"(?<!\w)[^\W\d_](?:\.[^\W\d_](?!\w))+\.?")
    parts.append(word)
    if short:
        parts.append(rf"(?<![\w{mark}'\u2019]){short}(?![\w{mark}])")
    return (regex if marked else re).compile("|".join(parts)).findall


# a one-letter word after another word, that word and the letter as groups: where ``Analysis.labels`` keeps the
# letter though it is a stop word ("vitamin A"); by case (capital) or in either
_LABELS = {case: regex.compile(r"(?<![\w'\u2019])(\w[\w\p{M}]*)[ \t\u00a0-](" + letter + r")(?![\w'\u2019+#])")
           for case, letter in (("capital", r"\p{Lu}"), ("any", r"\p{L}"))}


def _labels(text: str, labels: str, stop: frozenset[str]) -> list[str]:
    """The one-letter stop words of ``text`` kept as labels (``Analysis.labels``), each as a term that skips the stop
    list and the stemmer (a leading NUL)."""
    if not labels:
        return []
    return [f"\x00{letter}" for word, letter in ((fold(w), fold(c)) for w, c in _LABELS[labels].findall(text))
            if letter in stop and word not in stop]


def _words(text: str, analysis: Analysis) -> list[str]:
    """The terms of one text before stop words and stemming; CJK pairs and labels are marked by a leading NUL (no
    stemming, not stop words)."""
    if not analysis.fold:
        return _WORDS(text.lower())
    labels = _labels(text, analysis.labels, _stopwords(analysis.question_words))
    text = fold(text)
    short = _SHORT[analysis.digits, analysis.letters]
    if text.isascii():
        words = _splitter(short, analysis.acronyms, analysis.symbols, False)(text)
        cjk = []
    else:
        words = _splitter(short, analysis.acronyms, analysis.symbols, True)(_CJK.sub(" ", text))
        cjk = [f"\x00{t}" for run in _CJK.findall(text) for t in _cjk_terms(run)]
    if analysis.acronyms:
        words = [w.replace(".", "") for w in words]
    return words + cjk + labels


def analysis_of(analyzer: str | Analysis) -> Analysis:
    """The ``Analysis`` of an analyzer named in ``ANALYZERS`` (or given as one); a clear error for an unknown name."""
    if isinstance(analyzer, Analysis):
        return analyzer
    if analyzer not in ANALYSES:
        raise ValueError(f"unknown lexical analyzer {analyzer!r}; known: {', '.join(ANALYZERS)}")
    return ANALYSES[analyzer]


def tokenize(texts: Sequence[str], analyzer: str | Analysis = ANALYZER) -> list[list[str]]:
    """Terms of each text by ``analyzer`` (``ANALYZERS``, module docstring; or an ``Analysis``) without English stop
    words (and, where it says so, question words), stemmed: what both passages and queries go through.

    ``plain`` gives the tokens of ``bm25s.tokenize`` (its pattern, stop words and stemmer; ``tests/core/test_lexical.py``
    holds them equal), made without what it adds for a corpus: a vocabulary of ids, progress bars and a set of the
    stop words remade for every text (704 short texts, a hybrid batch's: 12.4 against 16.6 ms; a corpus: the same).
    ``folded`` gives the same tokens for ASCII text."""
    analysis = analysis_of(analyzer)
    stop = _stopwords(analysis.question_words)
    words = [[w for w in _words(text, analysis) if w not in stop] for text in texts]
    distinct = [w for w in dict.fromkeys(w for ws in words for w in ws) if w[0] != "\x00"]  # each word stemmed once
    stem = dict(zip(distinct, _stemmer().stemWords(distinct), strict=True))
    return [[stem[w] if w[0] != "\x00" else w[1:] for w in ws] for ws in words]


def passage_text(title: str, text: str) -> str:
    """What the lexical index sees of a passage: its document's title, then the passage."""
    return f"{title}\n{text}" if title else text


class LexicalIndex:
    """BM25 over a list of passage texts (row i = passage i), their terms by ``analyzer``."""

    def __init__(self, retriever: Any, n_passages: int, analyzer: str = ANALYZER):
        self.retriever = retriever
        self.n_passages = n_passages
        self.analyzer = analyzer

    @classmethod
    def build(cls, texts: Sequence[str], analyzer: str = ANALYZER) -> LexicalIndex:
        return cls.of_terms(tokenize(texts, analyzer), analyzer)

    @classmethod
    def of_terms(cls, tokens: Sequence[list[str]], analyzer: str = ANALYZER) -> LexicalIndex:
        """The index of passages given as their terms (``tokenize``'s by ``analyzer``)."""
        import bm25s

        retriever = bm25s.BM25()
        n = len(tokens)
        if not any(tokens):  # bm25s cannot index an empty vocabulary
            tokens = [["\x00empty"] for _ in range(n)]
        # the vocabulary in sorted order: bm25s numbers the terms of a token list in a set's order, which
        # PYTHONHASHSEED changes, so two builds of one corpus would write different files (the scores are the same)
        vocab = {term: i for i, term in enumerate(sorted({term for terms in tokens for term in terms}))}
        retriever.index(([[vocab[term] for term in terms] for terms in tokens], vocab), show_progress=False)
        return cls(retriever, n, analyzer)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of ``texts`` as this index's passages were made (its analyzer)."""
        return tokenize(texts, self.analyzer)

    def save(self, directory: str | Path) -> dict[str, Any]:
        """Write the index to ``directory`` (via a temporary sibling, renamed when complete); returns its manifest
        record."""
        with atomic_dir(directory) as tmp:  # the old index stays whole until the new one is complete
            self.retriever.save(str(tmp), show_progress=False)
            (tmp / "spanseek.json").write_text(json.dumps({"passages": self.n_passages, "analyzer": self.analyzer}))
        return self.describe()

    def describe(self) -> dict[str, Any]:
        r = self.retriever
        return {"dir": LEXICAL_DIR, "passages": self.n_passages, "method": f"bm25s {r.method}", "k1": r.k1, "b": r.b,
                "analyzer": self.analyzer, "stopwords": STOPWORDS, "stemmer": STEMMER, "fields": "title + passage"}

    @classmethod
    def load(cls, directory: str | Path) -> LexicalIndex:
        """The index saved in ``directory``; one saved before analyzers were recorded is ``plain``."""
        import bm25s

        directory = Path(directory)
        meta = json.loads((directory / "spanseek.json").read_text())
        analyzer = meta.get("analyzer", "plain")
        if analyzer not in ANALYZERS:
            raise ValueError(f"{directory}: lexical analyzer {analyzer!r} is not one this version knows "
                             f"({', '.join(ANALYZERS)}); rebuild it with `spanseek index add-lexical`")
        return cls(bm25s.BM25.load(str(directory), show_progress=False), int(meta["passages"]), analyzer)

    @functools.cached_property
    def term_bounds(self) -> np.ndarray:
        """(V,) float32: each term's highest score in any passage (0 for a term none holds), which ``postings`` prunes
        by; made once an index, at its first search (a pass over its postings: 10 ms at a million passages)."""
        indptr, data = self.retriever.scores["indptr"], self.retriever.scores["data"]
        out = np.zeros(len(indptr) - 1, np.float32)
        held = np.flatnonzero(np.diff(indptr) > 0)
        if len(held):  # (a run from a held term's first posting to the next held one's: its own postings)
            out[held] = np.maximum.reduceat(data, indptr[held])
        return out

    def postings(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> Postings:
        """The BM25 of ``questions`` as search reads it (``core.postings.Postings``): each question's terms' postings
        where the index keeps them (bm25s: each term's passages and their scores, CSC), in the order of its terms (a
        repeated one again, as ``BM25.get_scores`` sums them), and their highest scores. ``terms``: the questions'
        ``self.tokenize``, when the caller has it."""
        r = self.retriever
        if r.nonoccurrence_array is not None:  # (BM25L and BM25+ score every passage; the indexes here are Lucene's)
            raise ValueError(f"BM25 variant {r.method!r} scores passages without the terms; this index needs Lucene's")
        indptr, indices, data = r.scores["indptr"], r.scores["indices"], r.scores["data"]
        ids = [np.asarray(r.get_tokens_ids(tokens), np.int64)
               for tokens in (self.tokenize(questions) if terms is None else terms)]
        lists = [[TermList(indices[indptr[t] : indptr[t + 1]], data[indptr[t] : indptr[t + 1]])
                  for t in t_ids.tolist()] for t_ids in ids]
        return Postings.of_lists(lists, [self.term_bounds[t_ids] for t_ids in ids], self.n_passages)

    def matches(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> Matches:
        """Every BM25 match of ``questions`` (``Matches``), every posting of their terms read and summed."""
        return self.postings(questions, terms).matches()

    def scores(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> np.ndarray:
        """(B, P) float32 BM25 score of every passage for every question (0 where no query term occurs): ``matches``
        as an array, for a few passages (a search reads ``postings``)."""
        return self.matches(questions, terms).dense()

    def top(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, k) passage ids and scores, best first (ties: lower id first); -1 / 0 past the matching passages."""
        return self.postings(questions).top(k)


def zscore(x: np.ndarray, basis: np.ndarray | None = None) -> np.ndarray:
    """Standardise a question's scores by the mean and spread of its candidates' (``basis``; default ``x`` itself;
    all zeros when they do not vary). The same bits as ``(x - x.mean()) / x.std()``, whose sums it makes directly
    (numpy's pairwise ``add.reduce``): a quarter of the time on the few dozen candidates of a question, which every
    hybrid search standardises twice."""
    x = np.asarray(x, np.float64)
    of = x if basis is None else np.asarray(basis, np.float64)
    if not len(x) or not len(of):
        return np.zeros_like(x)
    mean = np.add.reduce(of) / len(of)
    centred = of - mean
    sd = math.sqrt(np.add.reduce(centred * centred) / len(of))
    if sd <= 1e-9:
        return np.zeros_like(x)
    return centred / sd if basis is None else (x - mean) / sd


@dataclass(frozen=True)
class FusionBasis:
    """One question's candidate units of an unfiltered search (``units``: their ids; phrases: their passages) and
    their scores in each leg (a passage's dense score: its best candidate span's): what a filtered search's fusion
    standardises (score fusion) or ranks (reciprocal rank fusion) its candidates against, so that a unit scores as
    the same search without the filter scores it, however few units pass it. ``head``: phrases, the head of the fused
    list that the search re-ranks (``core.fusion.LexicalFusion.reranked``)."""

    units: np.ndarray
    dense: np.ndarray
    lexical: np.ndarray
    head: RerankHead | None = None

    def where(self, units: np.ndarray) -> np.ndarray:
        """Each of ``units``' position among the basis's candidates, -1 where it is not one."""
        units = np.asarray(units)
        if not len(self.units):
            return np.full(len(units), -1, np.int64)
        order = np.argsort(self.units, kind="stable")
        at = order[np.minimum(np.searchsorted(self.units, units, sorter=order), len(order) - 1)]
        return np.where(self.units[at] == units, at, -1)


def score_fuse(dense: np.ndarray, lexical: np.ndarray, weight: float, basis: FusionBasis | None = None
               ) -> np.ndarray:
    """Per-question score fusion over one candidate list: zscore(dense) + weight x zscore(lexical), each leg
    standardised over the candidates, or over ``basis``'s where given."""
    if basis is None:
        return zscore(dense) + weight * zscore(lexical)
    return zscore(dense, basis.dense) + weight * zscore(lexical, basis.lexical)


def ranks(scores: np.ndarray, basis: np.ndarray | None = None, at: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of each candidate by descending score (ties: earlier candidate first); with ``basis``, its rank
    among ``basis``'s scores: the rank there of a candidate that is one (``at``: each one's position in ``basis``,
    -1 for the others), and 1 + how many are higher for the others."""
    scores = np.asarray(scores)
    if basis is not None:
        above = np.sort(-np.asarray(basis, np.float64))  # ascending negated scores: how many are higher, by search
        out = 1 + np.searchsorted(above, -scores.astype(np.float64), side="left")
        if at is not None and len(basis):
            out = np.where(at >= 0, ranks(basis)[np.maximum(at, 0)], out)
        return out
    order = np.argsort(-scores, kind="stable")
    r = np.empty(len(order), np.int64)
    r[order] = np.arange(1, len(order) + 1)
    return r


def rrf_fuse(dense: np.ndarray, lexical: np.ndarray, k: int = RRF_K, lexical_listed: np.ndarray | None = None,
             basis: FusionBasis | None = None, units: np.ndarray | None = None) -> np.ndarray:
    """Reciprocal rank fusion over one candidate list: 1 / (k + dense rank) + 1 / (k + lexical rank), ranked among
    the candidates, or among ``basis``'s (``units``: the candidates' ids; one of the basis's ranks where it ranks
    there, another as the first of the basis's units with its score).

    A candidate with no lexical match (``lexical_listed`` False, default: score 0) is not in the lexical list and
    gets nothing from it.
    """
    listed = np.asarray(lexical) > 0 if lexical_listed is None else lexical_listed
    if basis is None:
        return 1.0 / (k + ranks(dense)) + np.where(listed, 1.0 / (k + ranks(lexical)), 0.0)
    at = basis.where(units) if units is not None else None
    return (1.0 / (k + ranks(dense, basis.dense, at))
            + np.where(listed, 1.0 / (k + ranks(lexical, basis.lexical, at)), 0.0))
