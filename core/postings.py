"""A batch's BM25 scores read from the postings of its questions' terms (``core.lexical.LexicalIndex.postings``).

    python bench/lexical_scale.py --sizes 100000,1000000 ...   # what each costs at scale

- ``Matches``: every passage that matches a question, with its score: what a question's postings add up to, all of
  them read (the tests' and the benchmark's reference, and ``LexicalIndex.scores``).
- ``Postings``: what search reads. A question's top units (``top_units``) are found by MaxScore (Turtle & Flood
  1995): its terms taken from the highest-scoring down, each one's passages scored in full (every term of the
  question, looked up in its postings), until the terms left could not together lift a passage that none of the
  ones read holds above the n-th unit found. A question with a common term ("year", "city") then reads the
  postings of its rarer terms and looks passages up in the common term's, instead of adding up a posting list that
  holds a large share of the corpus. Any passage's score is looked up the same way (``at``, ``unit_scores``: what
  fusion reads of the candidates the dense leg brings). The units, scores, best passages and ties (lower passage id
  first) are those of ``Matches``, to the bit: a passage's score is always the float32 sum of its terms' scores in
  the order of the question's terms, as bm25s sums them, and a term's bound is raised by the most that rounding
  could add. Questions whose postings are few are added up as ``Matches`` (``EAGER_MOST``), a batch at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

# a question with at most this many postings has them all added up, with the batch's other such questions at once
# (at 100k passages, 26k postings a question on average, that costs less than pruning; at 1M, 266k, twice as much)
EAGER_MOST = 1 << 16
# matches of a part of a batch whose units are found together (``Postings.top_units``): a batch of 64 questions over
# a thousand passages is one part; over 100k passages each question is one, as arrays of millions cost their paging
UNIT_MATCHES_PART = 1 << 15
# a pruned question's floor (``floor``) scores in full this many times n of each term's best passages for it
FLOOR_DEPTH = 32

Found = tuple[np.ndarray, np.ndarray, np.ndarray]  # a question's units, their scores and their best passages


class TermList:
    """One term's postings for a question: its passages (ascending, int64) and their float32 scores for it. The
    scores are given (a base index's, stored) or made when read (``score``: the scores at given positions of the list;
    a live index's, ``core.live_lexical``): all of them (``scores``, once), or only at the positions or passages a
    search looks up (``scores_at``, ``lookup``), so that a common term that pruning only looks passages up in is not
    scored whole. Either way a posting's score has the same bits."""

    __slots__ = ("passages", "_scores", "_score")

    def __init__(self, passages: np.ndarray, scores: np.ndarray | None = None,
                 score: Callable[[np.ndarray], np.ndarray] | None = None):
        if (scores is None) == (score is None):
            raise ValueError("a term's postings need their scores or a way to score them, one of the two")
        self.passages = passages
        self._scores = scores
        self._score = score

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def scores(self) -> np.ndarray:
        """(n,) float32: every posting's score (made once, where they are made when read)."""
        if self._scores is None:
            self._scores = self._score(np.arange(len(self.passages)))  # type: ignore[misc]
        return self._scores

    def scores_at(self, positions: np.ndarray) -> np.ndarray:
        """float32 scores of the postings at ``positions`` of the list."""
        return self._scores[positions] if self._scores is not None else self._score(positions)  # type: ignore[misc]

    def lookup(self, wanted: np.ndarray) -> np.ndarray:
        """float32 score of each of ``wanted`` passages (0 for one the term does not hold)."""
        if self._scores is not None:
            return scores_of(self.passages, self._scores, wanted)
        wanted = np.asarray(wanted, np.int64)
        out = np.zeros(len(wanted), np.float32)
        if len(self.passages):
            at = np.minimum(np.searchsorted(self.passages, wanted), len(self.passages) - 1)
            hit = self.passages[at] == wanted
            out[hit] = self.scores_at(at[hit])
        return out


@dataclass(frozen=True)
class Matches:
    """A batch's BM25 matches, held as its postings give them: per question (row b), the passages that hold one of its
    terms and score above zero, ascending, and their float32 scores (``passages[indptr[b]:indptr[b + 1]]``); every
    other passage scores 0. What ``LexicalIndex.scores``' (B, P) array holds, without its B x P zeros: a batch costs
    the postings of its questions' terms, not a pass over every passage (at 1M passages a batch of 64's array was
    256 MB). A passage's score is the float32 sum of its terms' scores in the order of the question's terms, as bm25s
    sums them, so both give the same bits."""

    indptr: np.ndarray  # (B + 1,) int64
    passages: np.ndarray  # (nnz,) int64, ascending within a question
    scores: np.ndarray  # (nnz,) float32, above zero
    n_passages: int

    @classmethod
    def of_postings(cls, postings: Sequence[tuple[int, np.ndarray, np.ndarray]], n_questions: int,
                    n_passages: int) -> Matches:
        """The matches of postings: (question, passages, their scores) for each term of each question, in the order
        of the questions and of each one's terms. A question's are added into one float32 row in that order, as
        bm25s adds them (``np.add.at``, in the order given), and read back at the passages they hold only: the row
        is made once (calloc'd: only the pages the postings touch are written) and zeroed where they wrote."""
        row = np.zeros(max(n_passages, 1), np.float32)
        held, scores, counts = [], [], np.zeros(n_questions, np.int64)
        for q, group in itertools.groupby(postings, key=lambda posting: posting[0]):
            parts = list(group)
            passages = np.concatenate([p for _, p, _ in parts]).astype(np.int64)
            np.add.at(row, passages, np.concatenate([s for _, _, s in parts]).astype(np.float32))
            passages = np.sort(passages, kind="stable")  # (one ascending run a term: merged)
            passages = passages[np.r_[True, passages[1:] != passages[:-1]]] if len(passages) else passages
            total, row[passages] = row[passages], 0
            keep = total > 0  # (a deleted passage of a live index scores 0)
            held.append(passages[keep])
            scores.append(total[keep])
            counts[q] = len(held[-1])
        return cls(np.r_[0, np.cumsum(counts)].astype(np.int64), np.concatenate([np.zeros(0, np.int64), *held]),
                   np.concatenate([np.zeros(0, np.float32), *scores]), n_passages)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def row(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Question ``b``'s matching passages (ascending) and their scores."""
        a, e = self.indptr[b], self.indptr[b + 1]
        return self.passages[a:e], self.scores[a:e]

    def at(self, b: int, passages: np.ndarray) -> np.ndarray:
        """float32 score of each of ``passages`` for question ``b`` (0 where it does not match)."""
        return scores_of(*self.row(b), passages)

    def of_questions(self, questions: Sequence[int]) -> Matches:
        """The matches of ``questions`` (positions in the batch), in that order."""
        return Matches.of_rows([self.row(b) for b in questions], self.n_passages)

    @classmethod
    def of_rows(cls, rows: Sequence[tuple[np.ndarray, np.ndarray]], n_passages: int) -> Matches:
        """The matches whose row b is ``rows[b]`` (its passages, ascending, and their scores)."""
        return cls(np.r_[0, np.cumsum([len(p) for p, _ in rows], dtype=np.int64)].astype(np.int64),
                   np.concatenate([np.zeros(0, np.int64), *(p for p, _ in rows)]),
                   np.concatenate([np.zeros(0, np.float32), *(s for _, s in rows)]), n_passages)

    def parts(self, most: int) -> Iterator[Matches]:
        """The batch in runs of consecutive questions holding at most ``most`` matches together (a question holding
        more, alone): views of these arrays, not copies."""
        a = 0
        while a < len(self):
            e = min(max(int(np.searchsorted(self.indptr, self.indptr[a] + most, side="right")) - 1, a + 1), len(self))
            lo, hi = self.indptr[a], self.indptr[e]
            yield Matches(self.indptr[a : e + 1] - lo, self.passages[lo:hi], self.scores[lo:hi], self.n_passages)
            a = e

    def within(self, allowed: np.ndarray) -> Matches:
        """Only the matches of passages ``allowed`` ((P,) booleans): a filter's (the others score 0)."""
        keep = np.asarray(allowed, bool)[self.passages]
        kept = np.r_[0, np.cumsum(keep, dtype=np.int64)]  # the matches kept before each one
        return Matches(kept[self.indptr], self.passages[keep], self.scores[keep], self.n_passages)

    def dense(self) -> np.ndarray:
        """(B, P) float32: every passage's score for every question (0 where none of its terms occurs)."""
        out = np.zeros((len(self), self.n_passages), np.float32)
        out[np.repeat(np.arange(len(self)), np.diff(self.indptr)), self.passages] = self.scores
        return out

    @classmethod
    def of_lists(cls, lists: Sequence[Sequence[TermList]], n_passages: int) -> Matches:
        """The matches of each question's terms' postings (``Postings.lists``), every posting read."""
        return cls.of_postings([(q, t.passages, t.scores) for q, terms in enumerate(lists) for t in terms], len(lists),
                               n_passages)

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, min(k, P)) ids of the best passages per question, best first, ties by id, and their scores; -1 / 0
        where fewer match."""
        return table(top_found(matched_units(self), k), min(k, self.n_passages))


def scores_of(held: np.ndarray, scores: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The scores of ``wanted`` among ``held`` (ascending, distinct) with their ``scores``; 0 for those not held."""
    wanted = np.asarray(wanted, np.int64)
    if not len(held):
        return np.zeros(len(wanted), scores.dtype)
    at = np.minimum(np.searchsorted(held, wanted), len(held) - 1)
    return np.where(held[at] == wanted, scores[at], scores.dtype.type(0))


def best_of_units(matches: Matches, units: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Of a batch's ``matches`` and ``units`` (each matching passage's, in the order ``matches.passages`` holds
    them): per question, each unit among its passages (ascending), its best score and its best passage (the
    lowest-numbered with that score). The batch at once: its (question, unit) pairs sorted together, not a sort and
    two reductions a question (most of the lexical leg's cost at a thousand passages)."""
    width = int(units.max(initial=0)) + 1
    # (nnz,) question-major keys (a question alone: its units)
    key = units if len(matches) == 1 else np.repeat(np.arange(len(matches)), np.diff(matches.indptr)) * width + units
    ranked, held, passages = matches.scores, key, matches.passages
    if np.any(key[1:] < key[:-1]):  # a stable sort keeps each pair's passages ascending (a unit's are mostly a run)
        order = np.argsort(key, kind="stable")
        ranked, held, passages = ranked[order], key[order], passages[order]
    starts = np.flatnonzero(np.r_[len(held) > 0, held[1:] != held[:-1]])
    if len(starts):
        best = np.maximum.reduceat(ranked, starts)  # (pairs,) each pair's best score
        at = np.where(ranked == np.repeat(best, np.diff(np.r_[starts, len(held)])), np.arange(len(held)), len(held))
        passages = passages[np.minimum.reduceat(at, starts)]  # its first passage with that score
    else:
        best, passages = ranked[:0], passages[:0]
    bounds = np.r_[0, np.cumsum(np.bincount(held[starts] // width, minlength=len(matches)))]
    unit = held[starts] % width
    return [(unit[a:e], best[a:e], passages[a:e]) for a, e in zip(bounds[:-1], bounds[1:], strict=True)]


def top_by_score(scores: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` highest ``scores``, best first, ties by ``ids`` (lower first), at the cut too: a
    partition, then a sort of those at or above the n-th score only."""
    if 0 < n < len(scores):
        nth = np.partition(scores, len(scores) - n)[len(scores) - n]
        held = np.flatnonzero(scores >= nth)
    else:
        held = np.arange(len(scores) if n > 0 else 0)
    return held[np.lexsort((ids[held], -scores[held]))][:n]




def matched_units(matches: Matches, unit_of_passage: np.ndarray | None = None) -> list[Found]:
    """Per question of ``matches``, each unit that holds a matching passage (ascending), its score (its best
    passage's) and that passage (the lowest-numbered with its score); ``unit_of_passage``: each passage's unit (None:
    the passages themselves). Units other than passages are found for the questions together, in parts whose arrays
    stay small (cache-sized, not paged in)."""
    if unit_of_passage is None:
        return [(passages, scores, passages) for passages, scores in map(matches.row, range(len(matches)))]
    return [found for part in matches.parts(UNIT_MATCHES_PART)
            for found in best_of_units(part, np.asarray(unit_of_passage[part.passages]))]


def top_found(found: Sequence[Found], n: int) -> list[Found]:
    """Per question, the top ``n`` of its units (``matched_units``), best first, ties by best passage, at the cut
    too."""
    out = []
    for units, best, passages in found:
        top = top_by_score(best, passages, n)
        out.append((units[top], best[top], passages[top]))
    return out


def table(found: Sequence[Found], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, k) units of each question's ``found`` and their scores, best first; -1 / 0 where it holds fewer."""
    ids, scores = np.full((len(found), k), -1, np.int64), np.zeros((len(found), k), np.float32)
    for b, (units, best, _) in enumerate(found):
        ids[b, : len(units)], scores[b, : len(units)] = units[:k], best[:k]
    return ids, scores


def summed(lists: Sequence[TermList], passages: np.ndarray) -> np.ndarray:
    """(n,) float32 score of each of ``passages`` for a question whose terms' postings are ``lists``: each term's
    score looked up in its postings and added in the order of the terms, as bm25s adds them (the same bits)."""
    passages = np.asarray(passages, np.int64)
    total = np.zeros(len(passages), np.float32)
    for term in lists:
        total += term.lookup(passages)
    return total


def best_units(passages: np.ndarray, scores: np.ndarray, unit_of_passage: np.ndarray | None, n: int) -> Found:
    """The top ``n`` units of scored ``passages`` (distinct), as ``top_found`` ranks them: the passages by score, ties
    by id, each unit at its first (so at its best passage)."""
    order = np.lexsort((passages, -scores))
    passages, scores = passages[order].astype(np.int64), scores[order]
    if unit_of_passage is None:
        return passages[:n], scores[:n], passages[:n]
    units = np.asarray(unit_of_passage[passages]).astype(np.int64)
    first = np.sort(np.unique(units, return_index=True)[1])[:n]
    return units[first], scores[first], passages[first]


def pruned_top(lists: Sequence[TermList], bounds: np.ndarray, n: int, n_passages: int,
               unit_of_passage: np.ndarray | None) -> Found:
    """One question's top ``n`` units (``best_units``) by MaxScore (module docstring), from its terms' postings
    (``lists``, in its order of terms) and each term's highest score (``bounds``). First a floor under the n-th
    unit's score: the passages of the highest-bound terms, scored in full (``floor``). Then the terms that must be
    read: the highest-bound ones down to where what the rest could add up to, raised by the most that float32 rounding
    adds, is below the floor (a passage that none of these holds scores below it: it can neither enter the top nor
    tie at its cut). Their passages are scored in full (``scored_in_full``) and ranked."""
    empty = np.zeros(0, np.int64)
    if n <= 0 or not lists:
        return empty, np.zeros(0, np.float32), empty
    bounds = np.asarray(bounds, np.float64)
    order = np.argsort(-bounds, kind="stable")
    # rest[j]: the most a passage holding none of the first j terms can score (a float32 sum of m terms rounds up by
    # at most (1 + 2^-24)^m - 1 of the exact sum)
    rest = np.r_[np.cumsum(bounds[order][::-1])[::-1], 0.0] * (1 + (len(lists) + 1) * 2.0**-22)
    least = floor(lists, order, n, unit_of_passage)
    read = max(int(np.argmax(rest < least)) if least > 0 else len(order), 1)  # the essential terms
    essential = np.zeros(len(lists), bool)
    essential[order[:read]] = True
    passages, scores = scored_in_full(lists, essential, n_passages)
    keep = scores >= max(least, np.finfo(np.float32).tiny)
    return best_units(passages[keep], scores[keep], unit_of_passage, n)


def floor(lists: Sequence[TermList], order: np.ndarray, n: int, unit_of_passage: np.ndarray | None) -> float:
    """A score that at least n units reach (0 if none is found): the n-th unit's among passages scored in full (their
    terms looked up), taken term by term in ``order``: the ``FLOOR_DEPTH`` x n passages of each that
    score highest for it, until they hold n units."""
    pool: list[np.ndarray] = []
    for term in order.tolist():
        held = lists[term].passages
        m = FLOOR_DEPTH * n
        pool.append(held if len(held) <= m else held[np.argpartition(-lists[term].scores, m - 1)[:m]])
        together = pool[0] if len(pool) == 1 else np.unique(np.concatenate(pool))
        score = np.zeros(len(together), np.float32)
        for other in lists:  # (in the question's order of terms, as bm25s adds them)
            score += other.lookup(together)
        top = best_units(together, score, unit_of_passage, n)
        if len(top[0]) == n:
            return float(top[1][-1])
    return 0.0


def scored_in_full(lists: Sequence[TermList], essential: np.ndarray, n_passages: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The passages that an ``essential`` term holds and their scores: every term's added in the
    question's order into a row over the passages (an essential term's postings all; another's only where they are
    among these passages: picked out of its postings, or looked up where it holds many more), read back at them."""
    held = np.zeros(n_passages, bool)  # (calloc'd: pages are made only where the essential terms hold passages)
    taken = [np.zeros(0, np.int64)]
    for term, needed in zip(lists, essential, strict=True):
        if needed:  # each passage once
            taken.append(term.passages[~held[term.passages]])
            held[taken[-1]] = True
    candidates = np.concatenate(taken)
    row = np.zeros(n_passages, np.float32)
    for term, needed in zip(lists, essential, strict=True):  # (a term holds a passage once)
        passages = term.passages
        if needed:
            row[passages] += term.scores
        elif len(passages) <= 8 * len(candidates):
            mine = np.flatnonzero(held[passages])
            row[passages[mine]] += term.scores_at(mine)
        else:
            row[candidates] += term.lookup(candidates)
    return candidates, row[candidates]


@dataclass(frozen=True)
class Postings:
    """A batch's BM25, read lazily from its questions' postings (module docstring). ``lists``: per question, each of
    its terms' postings in the order of its terms (a repeated one again), where they lie (``TermList``: views of a base
    index's, or a live index's scored when read); ``bounds``: per question, each term's highest score, or a score no
    posting of it passes (a live index's: its deleted passages' counted); ``eager``: the matches of the questions with
    few postings (``few``; the others' rows are empty), which are what such a question matches (under a filter,
    ``within``, its ``lists`` are still those before it)."""

    lists: list[list[TermList]]
    bounds: list[np.ndarray]
    n_passages: int
    eager: Matches
    few: np.ndarray
    # ``every_unit``'s, per unit map: (that map, its units), made at the first read
    _every: dict[int, tuple[np.ndarray | None, list[Found | None]]] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def of_lists(cls, lists: list[list[TermList]], bounds: list[np.ndarray], n_passages: int,
                 eager_most: int | None = None) -> Postings:
        """The postings of questions whose terms' are ``lists`` (and ``bounds``); a question with at most
        ``eager_most`` postings (default ``EAGER_MOST``; -1: none) has them added up at once."""
        most = EAGER_MOST if eager_most is None else eager_most
        few = np.asarray([sum(len(t) for t in terms) <= most for terms in lists], bool)
        eager = Matches.of_lists([terms if few[q] else [] for q, terms in enumerate(lists)], n_passages)
        return cls(lists, bounds, n_passages, eager, few)

    def __len__(self) -> int:
        return len(self.lists)

    def matches(self) -> Matches:
        """Every match (``Matches``), every posting read: the reference the pruned answers are held to."""
        rest = Matches.of_lists([[] if few else terms for terms, few in zip(self.lists, self.few, strict=True)],
                                self.n_passages)
        return Matches.of_rows([(self.eager if few else rest).row(b) for b, few in enumerate(self.few)],
                               self.n_passages)

    def within(self, allowed: np.ndarray) -> Postings:
        """Only passages ``allowed`` ((P,) booleans) match, a filter's: the matches of the questions with few
        postings kept where allowed, and the others' terms' postings picked out where they are (a pass over them but
        no more: a filter that keeps few passages leaves few postings to prune)."""
        allowed = np.asarray(allowed, bool)
        lists = [terms if few else [TermList(t.passages[kept], t.scores_at(kept))
                                    for t in terms for kept in (np.flatnonzero(allowed[t.passages]),)]
                 for terms, few in zip(self.lists, self.few, strict=True)]
        bounds = [bound if few else np.asarray([t.scores.max(initial=0) for t in terms], np.float32)
                  for terms, bound, few in zip(lists, self.bounds, self.few, strict=True)]
        return Postings(lists, bounds, self.n_passages, self.eager.within(allowed), self.few)

    def of_questions(self, questions: Sequence[int]) -> Postings:
        """The postings of ``questions`` (positions in the batch), in that order."""
        picked = list(questions)
        return Postings([self.lists[b] for b in picked], [self.bounds[b] for b in picked], self.n_passages,
                        self.eager.of_questions(picked), self.few[np.asarray(picked, np.int64)])

    def at(self, b: int, passages: np.ndarray) -> np.ndarray:
        """float32 score of each of ``passages`` for question ``b`` (0 where it does not match)."""
        if self.few[b]:
            return self.eager.at(b, passages)
        return summed(self.lists[b], passages)

    def top_units(self, n: int, unit_of_passage: np.ndarray | None = None) -> list[Found]:
        """Per question, its top ``n`` units (``unit_of_passage``: each passage's; None: passages) that match: the
        units, their scores (their best passage's) and best passages (the lowest-numbered with that score), best
        first, ties by best passage, at the cut too; as ``top_found(matched_units(self.matches()))`` gives them."""
        whole = [(b, found) for b, found in enumerate(self.every_unit(unit_of_passage)) if found is not None]
        out: list[Found | None] = [None] * len(self)
        for (b, _), top in zip(whole, top_found([found for _, found in whole], n), strict=True):
            out[b] = top
        for b in np.flatnonzero(~self.few).tolist():
            out[b] = pruned_top(self.lists[b], self.bounds[b], n, self.n_passages, unit_of_passage)
        return out  # type: ignore[return-value]

    def every_unit(self, unit_of_passage: np.ndarray | None = None) -> list[Found | None]:
        """Per question with few postings, every unit it matches (``matched_units`` of its matches: ascending, their
        scores and best passages), found for those questions together; None for a pruned question. Made once a unit
        map (``unit_of_passage``, the same array): ``top_units`` ranks these, and a unit's score is looked up in them
        (``core.fusion.LexicalFusion.unit_scores``) rather than in its passages'."""
        made = self._every.get(id(unit_of_passage))
        if made is None or made[0] is not unit_of_passage:
            few = np.flatnonzero(self.few).tolist()
            eager = self.eager if len(few) == len(self) else self.eager.of_questions(few)
            every: list[Found | None] = [None] * len(self)
            for b, found in zip(few, matched_units(eager, unit_of_passage), strict=True):
                every[b] = found
            made = self._every[id(unit_of_passage)] = (unit_of_passage, every)
        return made[1]

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, min(k, P)) ids of the best passages per question, best first, ties by id, and their scores; -1 / 0
        where fewer match."""
        return table(self.top_units(k), min(k, self.n_passages))
