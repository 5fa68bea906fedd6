"""Copies of one text in an index, and the ranking stage that collapses them (``collapse_duplicates``).

    spanseek search --index INDEX_DIR --unit passage --collapse-duplicates "question"

Corpora repeat paragraphs (a site's boilerplate on every page, a document filed twice, one notice in every manual).
Two passages are copies when their texts are equal once normalised (``normalise_passage``: runs of whitespace are
one space, leading and trailing whitespace dropped, letters lower case); two documents are copies when their passages
are copies, in order. ``Copies`` is the index's table of them: each passage's text is normalised and hashed once, the
first time a search collapses (``copy_table``, kept per index: a live snapshot takes its base's, made once a base,
and hashes, sorts and groups only its segment's passages and documents), never per hit. ``collapse`` keeps the best-ranked hit of each group of copies and says how many copies it stands for.

``collapse_duplicates="near"`` also collapses near copies (``similar``): lightly edited copies and boilerplate
variants, whose words match in order for at least ``NEAR_SIMILARITY`` of them (difflib's ratio over their normalised
words, 2 x matched / total). They are found among the hits of the ranking being collapsed, each compared with the
kept hits above it, so no table is needed; two texts whose word counts or word bags cannot reach the threshold are
never aligned, which leaves the alignment to the few pairs that are near copies. A question's comparisons stop at a
budget of work per hit of its page (``NEAR_WORK``, ``NearBudget``), which a ranking full of near copies of its kept
hits reaches, or a pair of long documents, or a ranking of long texts, near copies or not (reading their words: the
demo index's document pages at top_k 10 use up to 41,400 of the 50,000 a hit): a pair is charged before it is
compared (and each text, once, before its words are read), and one whose comparison would go past the budget is not
compared and ends the comparisons: its hits, and the rest of the ranking, are collapsed by exact copies only.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any, NamedTuple

import numpy as np

from spanseek.core.copy_table import CopyTable, segment_table
from spanseek.core.params import Hit, Unit
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.selection import Selection

MAX_COPY_IDS = 10  # documents a collapsed hit names (copy_doc_ids): a boilerplate paragraph can be in thousands
# collapse_duplicates="near": two texts are near copies when 2 x (words matched in order) / (their words) reaches
# this. On the demo corpus a paragraph and its lightly edited revision read 0.74 (passages 737 and 746: a few words
# changed, the last sentence rewritten), two paragraphs sharing one of their four sentences 0.41 (767 and 846) and
# two sharing a rewritten opening 0.53-0.54 (208 and 215, 172 and 191); one changed word of a short notice, 0.79-0.86.
# Two texts sharing a part of the same length in each read that part's share of their words, so those merely sharing
# a sentence stay apart unless it makes up 70% of each.
NEAR_SIMILARITY = 0.7
NEAR_CACHE = 4096  # texts' words kept per index for near comparisons (dropped all at once past it)
# and at most this many words in all (about 70 bytes each: some 300 MB): a document's words are the whole document's,
# and 4,096 books of 100,000 words would hold 28 GB
NEAR_CACHE_WORDS = 1 << 22
NEAR_ALIGN_WORDS = 2000  # longer texts are compared by their shared word triples (``similarity``)
# Texts whose alignment would visit more than this many pairs of places holding the same word (the sum, over their
# shared words, of the product of its counts) are aligned leaving out the words that make up over 1% of one (difflib's
# autojunk): ordinary prose of 2,000 words visits 56,000-71,000 and aligns in 1-20 ms, but two 2,000-word texts of a
# few words repeated (a table of digits or checkmarks) visit up to 2,000,000 and took 0.4-0.8 s a pair, for each pair
# of the ranking compared. Their word triples would not do: two unrelated texts of two words share them all.
NEAR_ALIGN_PAIRS = 100_000
SHINGLE_MAX = 16  # the longest word n-grams long texts of a few words repeated are compared by (``shingle_similarity``)
NEAR_PAIRS = 1 << 16  # pairs of texts compared, and whether they are near copies, kept likewise
# The work of comparing texts, in words read (``compared``): a pair costs PAIR_WORK (its lengths), comparing two texts'
# word bags their distinct words, aligning them ALIGN_WORK times their words and the pairs of places the alignment
# visits, at most NEAR_ALIGN_PAIRS (difflib's alignment of two 316-word passages, 1,528 pairs, took 1.4 ms, their bags'
# comparison 20 us; two 2,000-word documents visit 56,000-71,000 pairs in 1-20 ms). One page's collapsing compares at
# most NEAR_WORK per hit of the page over all the rankings of a question (``NearBudget``, ``collapse_near``): a ranking
# whose hits are mostly near copies of a kept one, at the page's last place, made a question at top_k 100 compare
# 840,000 pairs and align 8,500 without it (89 s on 2 loaded cores), and 2.5 s with it; past the budget the rest of
# the ranking is collapsed by exact copies only. On the demo index's validation questions a page used at most 17,400
# a hit at top_k 10 (documents; 41,400 with the reading of their words charged, READ_CHARS); at top_k 100 one passage
# page of 1,122 needed 79,600 (it counts a near copy ranked below it no more; measured before reading was charged). A pair is charged before each step of its comparison, and one whose next step would go past what
# is left is not compared and ends the question's comparisons: two 100,000-word documents would take 4,000,000
# (compared by word triples) against a page of 10's 500,000.
PAIR_WORK, ALIGN_WORK, NEAR_WORK = 100, 20, 50_000
# Reading a text's words (``Words.of``: normalising, splitting, counting them) is work too, charged once a question for
# each text compared, before it is read: a unit every READ_CHARS characters. It took 10-80 ns a character (45 for
# demo prose, on 2 loaded cores), about an alignment unit's time for 2. Uncharged, a page of 10 documents over a
# ranking of 20,000-word ones, each pair ruled out by its word counts (PAIR_WORK), read 6.4 million words within the
# budget: 2 s for one ranking, 10.8 s over a question's four, against 0.05-0.15 s for the budget spent aligning near
# copies (bench/near_copies_cost.py's cases); charged, 0.2-0.3 s, 100,000-word ones too. The demo index's validation
# questions (every 4th, documents at top_k 10) then use at most 41,400 a hit, and their pages are the same.
READ_CHARS = 2

_TABLES: weakref.WeakKeyDictionary[PhraseIndex, CopyTable] = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def normalise_passage(text: str) -> str:
    """A passage's text as copies are compared: whitespace runs as one space, no leading or trailing whitespace,
    lower case (``str.lower``)."""
    return " ".join(text.split()).lower()


def hash_passages(passages: Sequence[dict]) -> np.ndarray:
    """(P,) int64: the hash of each passage's normalised text."""
    return np.fromiter((hash(normalise_passage(p["text"])) for p in passages), dtype=np.int64, count=len(passages))


def written_keys(doc: Any) -> np.ndarray:
    """(n,) int64: the keys of a written document's passages (``core.segment.EncodedDocument``), hashed at the first
    snapshot that collapses its copies and kept on it for the later ones, as its faiss codes are: a write hashes its
    own document's passages, not every written passage again."""
    keys = doc.__dict__.get("_passage_keys")
    if keys is None:
        keys = doc.__dict__["_passage_keys"] = hash_passages(doc.passages)  # (on the frozen record)
    return keys


def copy_table(index: PhraseIndex, passage_doc: np.ndarray) -> CopyTable:
    """``index``'s ``CopyTable`` (``passage_doc``: each passage's document), made once per index: each passage's text
    normalised and hashed, at about 10 µs a passage. A live snapshot (``core.segment.LiveIndex``: passages and
    documents its base's followed by its segment's) takes its base's table, made once a base, and makes its segment's
    passages' and documents' part alone, of its written documents' keys (``written_keys``)."""
    with _TABLES_LOCK:
        table = _TABLES.get(index)
    if table is None:
        base = getattr(index, "base", None)  # core.segment.LiveIndex
        if isinstance(base, PhraseIndex) and base is not index:
            p, d = len(base.passages), len(base.docs)
            head = copy_table(base, passage_doc[:p])
            written = getattr(index, "segment", None)  # its written documents, whose passages follow the base's
            table = head.then(segment_table(base, written, written_keys) if written is not None else CopyTable.over(
                hash_passages(index.passages[p:]), np.asarray(passage_doc[p:]) - d, len(index.docs) - d))
        else:
            table = CopyTable.over(hash_passages(index.passages), passage_doc, len(index.docs))
        with _TABLES_LOCK:
            _TABLES[index] = table
    return table


class Words(NamedTuple):
    """A text as near copies are compared: its normalised words, in order, and how often each occurs."""

    words: list[str]
    bag: Counter[str]

    @classmethod
    def of(cls, text: str) -> Words:
        words = normalise_passage(text).split()
        return cls(words, Counter(words))


def similarity(a: Words, b: Words) -> float:
    """2 x the words ``a`` and ``b`` match in order (difflib's matching blocks) / their words together: 1 for the same
    words, the share a common part holds of each for two texts sharing it; 1 for two empty texts. Past
    ``NEAR_ALIGN_WORDS`` words (long documents) the alignment's time grows with the square of the words (21 s for two
    30,000-word texts), so the words matched are counted as the word triples the two texts share instead
    (``shingle_similarity``), in time linear in their words. Shorter texts of a few words repeated, whose alignment
    would visit more than ``NEAR_ALIGN_PAIRS`` pairs of places (``align_pairs``), are aligned without their words
    that make up over 1% of one, which read them lower: only their runs of rarer words match."""
    if not a.words and not b.words:
        return 1.0
    if max(len(a.words), len(b.words)) > NEAR_ALIGN_WORDS:
        return shingle_similarity(a, b)
    autojunk = align_pairs(a, b) > NEAR_ALIGN_PAIRS
    return SequenceMatcher(None, a.words, b.words, autojunk=autojunk).ratio()


def align_pairs(a: Words, b: Words) -> int:
    """The pairs of places, one in ``a`` and one in ``b``, that hold the same word: what difflib's alignment visits
    in its first pass (and again, in parts, in each pass after), so its time grows with them."""
    return sum(a.bag[w] * b.bag[w] for w in a.bag.keys() & b.bag.keys())


def shingle_similarity(a: Words, b: Words, n: int = 3) -> float:
    """2 x the word n-grams ``a`` and ``b`` share (counted with their repeats) / their n-grams together. A word changed
    in place breaks up to n of them, so edits read lower than in the alignment; parts moved elsewhere read higher
    (each part still matches, where the alignment matches the parts of one order only). Texts of a few words repeated
    (a long table of digits) hold few distinct triples, which any two such texts share: n then grows, up to
    ``SHINGLE_MAX``, until at least half of each text's n-grams are distinct, as in prose, where triples are."""
    while True:
        grams_a = Counter(zip(*(a.words[i:] for i in range(n)), strict=False))
        grams_b = Counter(zip(*(b.words[i:] for i in range(n)), strict=False))
        counts = [(len(g), sum(g.values())) for g in (grams_a, grams_b)]
        if n >= SHINGLE_MAX or all(2 * distinct >= total for distinct, total in counts):
            break
        n += 1
    total = counts[0][1] + counts[1][1]
    return 2 * sum((grams_a & grams_b).values()) / total if total else float(a.words == b.words)


def similar(a: Words, b: Words, threshold: float = NEAR_SIMILARITY) -> bool:
    """Whether ``similarity(a, b)`` reaches ``threshold``: two texts whose lengths, or word bags, bound it below are
    never aligned (the matched words are at most the shorter text's, and at most the words the bags share)."""
    return bool(compared(a, b, threshold)[0])


def compared(a: Words, b: Words, threshold: float = NEAR_SIMILARITY, limit: int | None = None) -> tuple[bool | None, int]:
    """``similar(a, b, threshold)``, and the work it took (``NEAR_WORK``): ``PAIR_WORK`` for the pair, then the
    distinct words of both where their lengths leave their bags to compare, then where the bags leave them to align,
    ``ALIGN_WORK`` times their words and the pairs of places the alignment visits (``align_pairs``; none past
    ``NEAR_ALIGN_WORDS``, where they are compared in time linear in their words). ``limit``: the most work it may
    take; each step's work is known before it is done, and where a step would take the work past ``limit`` the
    answer is None (not found out) with the work of the steps before it."""
    total = len(a.words) + len(b.words)
    if limit is not None and PAIR_WORK > limit:
        return None, 0
    if 2 * min(len(a.words), len(b.words)) < threshold * total:
        return total == 0, PAIR_WORK
    work = PAIR_WORK + len(a.bag) + len(b.bag)
    if limit is not None and work > limit:
        return None, PAIR_WORK
    if 2 * sum(min(a.bag[w], b.bag[w]) for w in a.bag.keys() & b.bag.keys()) < threshold * total:
        return False, work
    visits = min(align_pairs(a, b), NEAR_ALIGN_PAIRS) if max(len(a.words), len(b.words)) <= NEAR_ALIGN_WORDS else 0
    align = ALIGN_WORK * (total + visits)
    if limit is not None and work + align > limit:  # two 100,000-word documents: 4,000,000 against 500,000 at top_k 10
        return None, work
    return similarity(a, b) >= threshold, work + align


class NearBudget:
    """The work (``compared``) one question's near comparisons may still take, over all the rankings its page is
    collapsed from (``core.ranking``: a page left short is ranked again deeper and collapsed again): each text is
    charged once for reading its words (``Copies.reading_work``) and each pair of texts once, each step of its
    comparison before it is made, and a pair whose reading or next step would take more
    than is left is not compared (its hits are collapsed as exact copies only) and ends the comparisons (``spent``:
    a budget spent on checks of the hits after it, which cost more time than their words read, took a page of
    2,000-word documents 8 times as long). ``NearBudget.for_page(k)``: ``NEAR_WORK`` a hit of a page of ``k``."""

    def __init__(self, work: int):
        self.left = work
        self.stopped = False  # a comparison did not fit in what was left
        self.charged: set[tuple] = set()
        # each hit (its key, ``Copies.hit_key``) found a near copy of kept hits (theirs): past the budget, a deeper
        # ranking still collapses what an earlier one found
        self.found: dict[object, set[object]] = {}

    @classmethod
    def for_page(cls, k: int) -> NearBudget:
        return cls(NEAR_WORK * k)

    @property
    def spent(self) -> bool:
        """Whether no new comparison may be made: one did not fit, or less is left than any costs."""
        return self.stopped or self.left < PAIR_WORK

    def spend(self, pair: tuple, work: int) -> None:
        """Charge ``work`` for comparing ``pair``, unless it was charged before."""
        if pair not in self.charged:
            self.charged.add(pair)
            self.left -= work


class Copies:
    """An index's copies, per unit: each passage's (and document's) key, equal for copies, and the passages (and
    documents) of every key held more than once. ``Copies.of(index)``; held by the searcher's ``HitBuilder``."""

    def __init__(self, index: PhraseIndex, passage_key: np.ndarray, passage_doc: Any,
                 table: CopyTable | None = None):
        self.index = index
        self.passage_doc = passage_doc
        # found here, not at the first near comparison of documents, so searches in several threads never find them
        # twice; ``table``: the index's (``copy_table``), made from ``passage_key`` otherwise
        table = table if table is not None else CopyTable.over(passage_key, passage_doc, len(index.docs))
        self.doc_passages = table.doc_passages  # the passages in document order, and where each document's start
        self.key, self.members = table.key, table.members
        self._words: dict[tuple[str, int], Words] = {}  # near comparisons: ("passage" | "doc", id) -> its words
        self._words_held = 0  # the words in _words (NEAR_CACHE_WORDS)
        self._words_lock = threading.Lock()  # searches in several threads share the cache and its count
        self._near: dict[tuple[str, int, int], tuple[bool, int]] = {}  # (of, kept's, hit's) -> near copies, and the
        # work of finding it out (``compared``): a search ranks the
        # same passages (documents) for many of its questions, the next searches too

    @classmethod
    def of(cls, index: PhraseIndex, passage_doc: np.ndarray) -> Copies:
        """The copies of ``index``; ``passage_doc``: (P,) each passage's document (``copy_table``)."""
        table = copy_table(index, passage_doc)
        return cls(index, table.key["passage"], passage_doc, table)

    def hit_key(self, hit: Hit, unit: Unit) -> object:
        """What two hits of ``unit`` share when one is a copy of the other: a passage's or document's key; for a
        phrase, its passage's key and where it is in the passage's text without its whitespace (so the same phrase
        of a copy whose spacing differs has the same key)."""
        p = hit.passage_id
        if unit == "doc":
            return int(self.key["doc"][self.passage_doc[p]])
        key = int(self.key["passage"][p])
        if unit == "passage":
            return key
        if key not in self.members["passage"]:  # no copy: its own offsets (the passage is its key's only one)
            return key, hit.start, hit.end
        return key, non_space_before(hit.passage, hit.start), non_space_before(hit.passage, hit.end)

    def copies_of(self, hit: Hit, unit: Unit, selection: Selection, near: Sequence[Hit] = ()) -> tuple[int, list[str]]:
        """How many copies of ``hit``'s passage (or document) the search may return (``selection``), the hit's own
        included, and the ids of the other copies' documents (distinct, in index order, at most ``MAX_COPY_IDS``);
        ``near``: hits collapsed into it as near copies, whose copies count too."""
        of = "doc" if unit == "doc" else "passage"
        own = self.own(hit, of)
        members = self.members[of].get(int(self.key[of][own]))
        if near:
            members = np.unique(np.concatenate([self.copies_in(h, of) for h in (hit, *near)]))
        if members is None:
            return 1, []
        allowed = selection.passages if of == "passage" else selection.docs
        if allowed is not None:  # passages (documents) of deleted or filtered-out documents are no copies
            members = members[allowed[members]]
        docs = members if of == "doc" else self.passage_doc[members[members != own]]
        ids: list[str] = []
        for d in dict.fromkeys(docs.tolist()):  # distinct, in order
            if of == "doc" and d == own:
                continue
            if len(ids) == MAX_COPY_IDS:
                break
            ids.append(self.index.docs[d]["id"])
        return max(len(members), 1), ids

    def own(self, hit: Hit, of: str) -> int:
        """The hit's passage (``of`` passage) or document (``of`` doc)."""
        return int(self.passage_doc[hit.passage_id]) if of == "doc" else hit.passage_id

    def copies_in(self, hit: Hit, of: str) -> np.ndarray:
        """The passages (documents) that are copies of ``hit``'s, its own included, ascending."""
        own = self.own(hit, of)
        members = self.members[of].get(int(self.key[of][own]))
        return np.asarray([own]) if members is None else members

    def near(self, kept: Hit, hit: Hit, unit: Unit, budget: NearBudget | None = None) -> bool | None:
        """Whether ``hit`` is a near copy of ``kept`` (``similar``): its passage's (document's) words of the kept
        one's; phrases, the same phrase (once normalised) in such a passage. ``budget``: what the question may still
        compare, less this comparison's work (``compared``; as much for a pair compared by an earlier search, whose
        answer is kept, so that what a search compares does not depend on the searches before it); None where the
        comparison's work would go past what is left (the reading of texts not read yet for the question, and the checks
        before it, that fit are charged, and the budget is ``spent``)."""
        if unit == "phrase" and (normalise_passage(kept.text) != normalise_passage(hit.text)
                                 or self.key["passage"][kept.passage_id] == self.key["passage"][hit.passage_id]):
            phrases = ("phrase", kept.passage_id, kept.start, hit.passage_id, hit.start)
            if budget is not None:
                if budget.spent and phrases not in budget.charged:
                    return None
                budget.spend(phrases, PAIR_WORK)
            return False  # another phrase, or the same one elsewhere in (a copy of) its passage: no copy of it
        of = "doc" if unit == "doc" else "passage"
        pair = (of, self.own(kept, of), self.own(hit, of))
        if budget is None or pair in budget.charged:  # (one charged is answered)
            return self.compare(pair)[0]
        if budget.spent:
            return None
        unread = [(of, i) for i in pair[1:] if (of, i) not in budget.charged]
        reading = sum(self.reading_work(of, i) for of, i in unread)
        if reading + PAIR_WORK > budget.left:  # (not read: its words would take more than is left, with the pair)
            budget.stopped = True
            return None
        budget.left -= reading
        budget.charged.update(unread)
        found, work = self.compare(pair, limit=budget.left)
        if found is None:
            budget.left -= work
            budget.stopped = True
            return None
        budget.spend(pair, work)
        return found

    def compare(self, pair: tuple[str, int, int], limit: int | None = None) -> tuple[bool | None, int]:
        """``compared`` for the texts of ``pair`` (of, kept's, hit's), kept for the next searches once found out; a
        pair found out before whose work is past ``limit`` is compared again up to it, as a first search would be."""
        known = self._near.get(pair)
        if known is not None and (limit is None or known[1] <= limit):
            return known
        of, kept, hit = pair
        near, work = compared(self.words(of, kept), self.words(of, hit), limit=limit)
        if near is not None:
            if len(self._near) >= NEAR_PAIRS:
                self._near.clear()
            self._near[pair] = near, work
        return near, work

    def reading_work(self, of: str, i: int) -> int:
        """The work (``NEAR_WORK``) of reading the words of passage (``of`` passage) or document ``i`` (``words``):
        a unit for every ``READ_CHARS`` of its characters, known before it is read."""
        if of == "passage":
            chars = len(self.index.passages[i]["text"])
        else:
            order, bounds = self.doc_passages
            passages = order[bounds[i]:bounds[i + 1]].tolist()
            chars = sum(len(self.index.passages[p]["text"]) for p in passages) + max(len(passages) - 1, 0)
        return -(-chars // READ_CHARS)

    def words(self, of: str, i: int) -> Words:
        """The words of passage (``of`` passage) or document ``i``, kept for the next search (``NEAR_CACHE`` texts,
        ``NEAR_CACHE_WORDS`` words)."""
        got = self._words.get((of, i))
        if got is None:
            if of == "passage":
                got = Words.of(self.index.passages[i]["text"])
            else:
                order, bounds = self.doc_passages
                got = Words.of(" ".join(self.index.passages[p]["text"] for p in order[bounds[i]:bounds[i + 1]]))
            with self._words_lock:
                if len(self._words) >= NEAR_CACHE or self._words_held + len(got.words) > NEAR_CACHE_WORDS:
                    self._words.clear()
                    self._words_held = 0
                if len(got.words) <= NEAR_CACHE_WORDS and (of, i) not in self._words:
                    self._words[(of, i)] = got
                    self._words_held += len(got.words)
        return got


def non_space_before(text: str, at: int) -> int:
    """Characters of ``text[:at]`` that are not whitespace."""
    prefix = text[:at]
    return len(prefix) - sum(1 for c in prefix if c.isspace())


def collapse(hits: Sequence[Hit], k: int, unit: Unit, copies: Copies, selection: Selection,
             near: bool = False, budget: NearBudget | None = None) -> list[Hit]:
    """The first ``k`` hits (best first) that are no copy of a hit before them (``Copies.hit_key``), each with
    ``copies`` and ``copy_doc_ids`` set (``Copies.copies_of``); ``near``: nor a near copy of a kept hit
    (``collapse_near``, comparing at most ``budget``)."""
    if near:
        return collapse_near(hits, k, unit, copies, selection, budget)
    kept: list[Hit] = []
    seen: set[object] = set()
    for h in hits:
        if len(kept) == k:
            break
        key = copies.hit_key(h, unit)
        if key in seen:
            continue
        seen.add(key)
        n, ids = copies.copies_of(h, unit, selection)
        kept.append(h.but(copies=n, copy_doc_ids=ids))
    return kept


def collapse_near(hits: Sequence[Hit], k: int, unit: Unit, copies: Copies, selection: Selection,
                  budget: NearBudget | None = None) -> list[Hit]:
    """``collapse`` of copies and near copies: a hit that is a copy of a better hit, or a near copy of a kept one
    (``Copies.near``, compared with the kept hits best first), is dropped, and the kept hit counts its copies too. The
    whole ranking is read, so a kept hit counts its near copies ranked below the page's last hit. The comparisons
    take at most ``budget`` (the question's, shared by its rankings; default ``NearBudget.for_page(k)``): a pair
    whose comparison would go past it is not compared, and from there the rest of the ranking is collapsed by exact
    copies only."""
    kept: list[Hit] = []
    near: list[list[Hit]] = []  # each kept hit's near copies
    seen: set[object] = set()
    budget = budget if budget is not None else NearBudget.for_page(k)
    for h in hits:
        key = copies.hit_key(h, unit)
        if key in seen:
            continue
        seen.add(key)
        if not budget.spent:  # (spent: the pairs charged that are near copies are in `found`)
            of = next((i for i, x in enumerate(kept) if copies.near(x, h, unit, budget)), None)
        else:  # past the budget: the near copies an earlier ranking of the question found, no new comparison
            found = budget.found.get(key, ())
            of = next((i for i, x in enumerate(kept) if copies.hit_key(x, unit) in found), None) if found else None
        if of is not None:
            near[of].append(h)
            budget.found.setdefault(key, set()).add(copies.hit_key(kept[of], unit))
        elif len(kept) < k:
            kept.append(h)
            near.append([])
    out = []
    for h, others in zip(kept, near, strict=True):
        n, ids = copies.copies_of(h, unit, selection, others)
        out.append(h.but(copies=n, copy_doc_ids=ids))
    return out
