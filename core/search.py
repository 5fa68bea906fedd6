"""The searcher: one batch of questions through the search stages, phrase -> passage -> document.

One ``SearchParams`` (``core.params``) says what to search for; the ``Searcher`` resolves it into a ``Plan``
(``core.plan``) once per batch and runs the stages, each a unit with one job:

1. the dense leg (``core.dense.DenseLeg``): MIPS over the token index, span completion, deepening for units;
2. the lexical leg and fusion (``core.fusion.LexicalFusion``): BM25, alone (``lexical``) or fused (``hybrid``);
3. reading (``core.reading.ReadingStage``), when asked for: the top passages read by the cross-attention reader;
4. the page (``core.page.Pager``): confidence, abstention, the page ``[offset, offset + top_k)``.

Passages and documents score the max over their phrases (``core.selection.UNIT_OF_PASSAGE``: each passage's unit).
Deleted documents and a request's ``filter`` apply inside both legs (``core.selection``): faiss searches only the
allowed tokens and the other passages' BM25 scores are zeroed, so ``top_k`` is filled when enough units pass. A filter
selects without re-scoring: where it would change a hit's score or confidence, the questions are first searched
without it (``Searcher._unfiltered``), and the filtered search fuses against and reads confidence in that search.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from spanseek.core.confidence import FEATURE_DEPTH, Calibrator
from spanseek.core.dense import DenseLeg
from spanseek.core.fusion import LexicalFusion, check_fusion, read_weight
from spanseek.core.gpu import OnDevice
from spanseek.core.hits import Hit, HitBuilder, Hits
from spanseek.core.lexical import LexicalIndexMissing, missing_message
from spanseek.core.page import Pager, blank_page
from spanseek.core.params import MODES, Mode, SearchFilter, SearchParams, SearchParamsError, check_search_args
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.plan import Plan, StageTimes, Unfiltered
from spanseek.core.ranking import Ranking
from spanseek.core.reading import ReadingStage, judge, read_unsure, shifted
from spanseek.core.selection import SELECTION_CACHE_BYTES, UNIT_OF_PASSAGE, Selection, Selections
from spanseek.core.text import has_text

log = logging.getLogger(__name__)
DEFAULT_PARAMS = SearchParams()


class Searcher:
    """Batched phrase/passage/document search over a PhraseIndex, in dense, lexical or hybrid mode.

    ``encoder`` (a core.encoding.QuestionEncoder) is needed only for ``search``; ``search_vectors`` takes q_start /
    q_end (and the question texts, for the lexical leg and reading) directly. ``vector_source`` (``fine`` | ``codes``;
    default: the index's) is where span completion reads neighbour vectors, unless the request names one.
    ``length_bias`` (default: the encoder's model config's, else the index's) is added to every span by its length.
    The fusion defaults come from the index's manifest. ``calibrator`` gives hits their confidence, at
    ``unanswerable_prior`` unless a request says (``core.confidence``); ``reading`` serves requests with ``read``;
    ``on_device`` holds the parts searched on a GPU; ``selection_cache_bytes`` bounds recent filters' selections.
    A call's questions are encoded and searched ``chunk_size`` at a time: its memory is bounded by a chunk, not by
    the call (10,000 demo-index questions at once: 3.1 GB above the searcher, 0.4 GB in chunks), and each question's
    hits are as in one batch.
    """

    chunk_size = 256

    def __init__(
        self, index: PhraseIndex, encoder=None, max_answer_tokens: int | None = None, vector_source: str | None = None,
        length_bias: Sequence[float] | None = None, calibrator: Calibrator | None = None,
        on_device: OnDevice | None = None, reading: ReadingStage | None = None,
        selection_cache_bytes: int = SELECTION_CACHE_BYTES, unanswerable_prior: float = 0.0,
    ):
        self.index = index
        self.encoder, self.calibrator = encoder, calibrator
        self.on_device, self.reading = on_device, reading
        self.max_answer_tokens = max_answer_tokens or index.encoder_config.max_answer_tokens
        # by default the model's length bias (a QSFT'd or refitted model may differ from the one that built the index)
        config = getattr(getattr(encoder, "model", None), "config", None) or index.encoder_config
        self.length_bias = tuple(length_bias if length_bias is not None else config.length_bias)
        self.dense = DenseLeg(index, self.length_bias, on_device, self.max_answer_tokens)
        self.vector_source = vector_source or index.vector_source
        self.dense.vector_reader(self.vector_source)  # a bad source fails here, not at the first search
        self._unit_of_passage = {u: f(index) for u, f in UNIT_OF_PASSAGE.items() if f is not None}
        self._selections = Selections(index, self._unit_of_passage, selection_cache_bytes)
        self.hits = HitBuilder(index)
        self.lexical = index.lexical
        if self.lexical is None:
            log.warning("%s", missing_message(index.dir))
        fusion = index.fusion_defaults
        self.default_mode: Mode = fusion["default_mode"] if self.lexical is not None else "dense"
        self.default_fusion = fusion["fusion"]
        self.lexical_weights: dict[str, float] = dict(fusion["weights"])
        rerank = fusion.get("phrase_rerank") or None
        self.fusion = None if self.lexical is None else LexicalFusion(
            self.lexical, self.dense, self.hits, self._unit_of_passage, rerank)
        self.pager = Pager(calibrator, rerank, unanswerable_prior)
        self.ranking = Ranking(self.dense, self.fusion, self.hits, self._unit_of_passage)

    @property
    def phrase_rerank(self) -> dict[str, float] | None:
        """The weights hybrid phrases are re-ranked with (core.rerank); None: ranked by the fused score alone."""
        return self.pager.phrase_rerank

    @phrase_rerank.setter
    def phrase_rerank(self, weights: dict[str, float] | None) -> None:
        self.pager.phrase_rerank = weights  # the calibrator applies to one re-ranking
        if self.fusion is not None:
            self.fusion.phrase_rerank = weights

    @property
    def selection_cache_bytes(self) -> int:
        """The byte budget of the selections of recent filters kept."""
        return self._selections.max_bytes

    def selection(self, flt: SearchFilter | None) -> Selection:
        """The passages a search with filter ``flt`` may return (live ones that pass it; ``core.selection``)."""
        return self._selections.get(None if flt is not None and flt.passes_everything else flt)  # (as no filter)

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The modes this index can serve: all three with a lexical part, else only ``dense``."""
        return MODES if self.lexical is not None else ("dense",)

    def check_mode(self, params: SearchParams) -> Mode:
        """The mode ``params`` asks for (or the default); LexicalIndexMissing when the index cannot serve it, and
        SearchParamsError when ``min_confidence`` or ``read`` is asked of a searcher that cannot give it, the filter
        names a field the index cannot filter on (FilterError), or fusion parameters rank nothing (``check_fusion``)."""
        check_fusion(params, self.default_mode, self.default_fusion)
        return self._plan(params, resolve=False).mode

    def _plan(self, params: SearchParams, resolve: bool = True) -> Plan:
        """The plan of ``params``, checked; ``resolve`` False skips what only a search needs (the neighbour vectors'
        source and the filter's selection)."""
        mode = params.mode or self.default_mode
        if params.filter is not None:  # an unknown field, or a range over strings: FilterError naming it
            self.index.fields.check(params.filter)
        if mode != "dense" and self.lexical is None:
            raise LexicalIndexMissing(f"mode={mode}: {missing_message(self.index.dir)}")
        if params.read and self.reading is None:
            raise SearchParamsError("read needs a reader, and this service or searcher has none (serve with "
                                    "--reader default, or open_searcher(..., reader='default'))")
        weight = params.lexical_weight if params.lexical_weight is not None else self.lexical_weights[params.unit]
        plan = Plan(params, mode, params.fusion or self.default_fusion, weight,
                    params.max_answer_tokens or self.max_answer_tokens,
                    self.dense.vector_reader(params.vector_source or self.vector_source) if resolve else
                    self.index.token_vectors,
                    self.selection(params.filter) if resolve else Selection(None, None, None, {}))
        self.pager.check(plan)
        return plan

    def search(self, questions: list[str], params: SearchParams = DEFAULT_PARAMS,
               timings: StageTimes | None = None) -> list[Hits]:
        """Encode questions and search; ``timings`` (if given) receives each stage's seconds. A blank question is not
        searched (``blank_page``), as from the service (``has_text``); TypeError for questions not a list of strings."""
        if self.encoder is None:
            raise ValueError("this Searcher has no question encoder; use search_vectors")
        asked = [q for q in check_search_args(questions, params) if has_text(q)]
        check_fusion(params, self.default_mode, self.default_fusion)
        timings = timings if timings is not None else StageTimes()
        found: list[Hits] = []
        for start in range(0, max(len(asked), 1), self.chunk_size):  # (a batch of blank ones: its params checked)
            chunk = asked[start:start + self.chunk_size]
            with timings.timing("encode"):
                q_start, q_end = self.encoder.encode(chunk)
            found += self.search_vectors(q_start, q_end, params, timings, chunk)
        hits = iter(found)
        return [next(hits) if has_text(q) else blank_page(params) for q in questions]

    def search_vectors(self, q_start: np.ndarray, q_end: np.ndarray, params: SearchParams = DEFAULT_PARAMS,
                       timings: StageTimes | None = None, questions: Sequence[str] | None = None) -> list[Hits]:
        """q_start, q_end: (B, d) float32 -> per question, up to ``params.top_k`` hits of ``params.unit``.
        ``questions`` (the B texts) are needed by the lexical and hybrid modes and by reading. ``merge_answers``:
        phrases that read the same once normalised ("the Sun", "Sun") are one answer, scored log sum exp over its
        phrases among the best max(64, 4 top_k); each hit is the best phrase of one answer. Phrase hits do not overlap
        unless ``allow_overlap``. Each hit carries ``confidence`` when the searcher has a calibrator for the unit and
        mode (read hits: always); a question whose best hit is below ``min_confidence`` gets no hits and
        ``no_answer``. The hits are ranked ``params.depth`` deep (at least ``FEATURE_DEPTH[unit]``, which the
        confidence features read) and the page is returned (``check_fusion`` is the caller's: ``check_mode``)."""
        q_start, q_end = self.dense.query_vectors(q_start, q_end)  # ValueError naming what is wrong with them
        timings = timings if timings is not None else StageTimes()
        if params.read and params.read_below is not None:
            self._plan(params, resolve=False)  # refused as a whole before anything is searched
            return read_unsure(self.search_vectors, q_start, q_end, params, timings, questions)
        want = params.depth
        depth = max(want, FEATURE_DEPTH[params.unit]) if self.calibrator is not None and not params.read else want
        plan = self._plan(params).but(top_k=depth, offset=0, rank_window=None, min_confidence=None)
        if (plan.mode != "dense" or params.read) and (questions is None or len(questions) != len(q_start)):
            raise ValueError(f"mode={plan.mode}{' with read' if params.read else ''} needs the question texts, one "
                             "per row of q_start")
        texts = list(questions) if questions is not None else None
        if len(q_start) > self.chunk_size:  # each question's hits as in one call, in memory bounded by a chunk
            return [hits for s in range(0, len(q_start), self.chunk_size) for hits in self.search_vectors(
                q_start[s:s + self.chunk_size], q_end[s:s + self.chunk_size], params, timings,
                None if texts is None else texts[s:s + self.chunk_size])]
        uncollapsed: list[list[Hit]] = []  # a collapsing search's ranking without collapsing (core.ranking)
        if self.pager.past_the_end(params, plan):
            ranked: list[list[Hit]] = [[] for _ in q_start]
        elif params.read:
            assert self.reading is not None and texts is not None
            ranked = self._read(plan, q_start, q_end, texts, timings)
        else:
            plan = self._unfiltered(plan, q_start, q_end, texts, timings)
            ranked = self.ranking.deep(plan, q_start, q_end, texts, timings, None, uncollapsed)[0]
        with timings.timing("aggregate"):
            return self.pager.pages(ranked, params, plan, texts, uncollapsed)

    def _read(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, texts: list[str],
              timings: StageTimes) -> list[list[Hit]]:
        """Reading: the units to read (phrase: passages) as a search of them ranks them, then read and ranked."""
        assert self.reading is not None
        unit, weight = "passage" if plan.unit == "phrase" else plan.unit, read_weight(plan.params, self.lexical_weights)
        retrieve = self._plan(plan.but(unit=unit, top_k=self.reading.depth(plan), read=False, read_passages=None,
                                       merge_answers=False, lexical_weight=weight).params)
        retrieve = self._unfiltered(retrieve, q_start, q_end, texts, timings, confidence=False)
        retrieved = self.ranking.ranked(retrieve, q_start, q_end, texts, timings)[0]
        judged = judge(self, retrieve, retrieved, q_start, q_end, texts, timings, self.reading.weighs_retrieval(plan))
        with timings.timing("read"):
            return shifted(self.reading.rank(plan, texts, retrieved, judged.first), judged.presence)

    def _unfiltered(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, texts: list[str] | None,
                    timings: StageTimes, confidence: bool = True) -> Plan:
        """The plan with its ``unfiltered`` search: its questions searched over every live passage instead of its
        filter's selection, where the filter would otherwise change what a unit that passes it gets. Hybrid fusion
        standardises each leg over the candidates (phrases: BM25 over the candidate passages, and the re-ranked head
        of the list), so a filtered hybrid search fuses against the unfiltered candidates (``FusionBasis``); and a
        hit's confidence features are read from its place in the unfiltered list (``core.page``), so a search that
        gives confidences (``confidence``, where the calibrator applies) searches it in every mode: the dense and
        lexical modes, whose scores no filter changes, only ``FEATURE_DEPTH`` deep. A unit that passes the filter
        then scores, ranks among the others that pass and is as confident as without it. The plan as it is without
        a filter (or with one that passes everything), when nothing passes it, with no question to search (a batch
        of blank ones), or where neither applies. The questions' BM25 scores are computed once for both searches."""
        flt = plan.params.filter
        fuses = plan.mode == "hybrid"
        confident = confidence and not plan.params.read and self.pager.calibrated(plan)
        if (flt is None or flt.passes_everything or plan.selection.empty or not len(q_start)
                or not (fuses or confident)):
            return plan
        bm25 = None
        if plan.mode != "dense" and self.lexical is not None and texts:  # computed once for both searches
            with timings.timing("search"):
                bm25 = self.lexical.postings(texts)
        whole = dataclasses.replace(plan.but(collapse_duplicates=False), selection=self._selections.get(None),
                                    unfiltered=None, bm25=bm25)  # the list confidences are read in collapses nothing
        if not fuses:  # scores as without the filter: only the list the features read
            whole = whole.but(top_k=min(plan.top_k, FEATURE_DEPTH[plan.unit]))
        batch = self.dense.batch(whole, q_start, q_end, search=plan.mode != "lexical")
        hits, basis = self.ranking.deep(whole, q_start, q_end, texts, timings, batch)
        return dataclasses.replace(plan, unfiltered=Unfiltered(hits, basis, batch), bm25=bm25)

    def passage_best_span(self, passage: int, q_start: np.ndarray, q_end: np.ndarray,
                          max_answer_tokens: int | None = None, decode: str = "span") -> Hit:
        """Reading comprehension inside one passage (exact, brute force; ``DenseLeg.best_in_passage``)."""
        i, j, score = self.dense.best_in_passage(passage, q_start, q_end, max_answer_tokens or self.max_answer_tokens,
                                                 decode)
        return self.hits.hit(i, j, score, score)
