"""One snapshot a search, whatever writes and merges run meanwhile: searching threads read the snapshot published
last while a writer adds, replaces (the first written document among them) and deletes documents and merges run;
each search's hits are checked against the documents of the snapshot it read (recorded as the store published it):
no hit from a document that snapshot does not hold, none from a version it replaced, the phrase, passage and
document units agree on the best hit; and each snapshot searched under the writes answers as one made afresh from
the same documents, searched alone.

    .venv/bin/python -m pytest -q tests/indexer/test_live_snapshots.py      (-m slow: with merges)
"""

from __future__ import annotations

import dataclasses
import random
import threading

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from tests.conftest import make_corpus
from tests.indexer.test_live import QUESTIONS, doc

SEARCHED = [(unit, mode) for unit in ("phrase", "passage", "doc") for mode in ("dense", "hybrid")]


def documents_held(base, segment) -> dict[str, tuple[str, frozenset[str]]]:
    """{id: (title, its passages' texts)} of the live documents of ``base`` with ``segment`` (an
    ``indexer.live.Segment``) over it."""
    by_row: dict[int, set[str]] = {}
    for p in base.passages:
        by_row.setdefault(p["doc"], set()).add(p["text"])
    out = {i: (base.docs[row]["title"], frozenset(by_row.get(row, ()))) for i, row in segment.base_rows.items()}
    out.update({i: (d.record["title"], frozenset(q["text"] for q in d.passages)) for i, d in segment.docs.items()})
    return out


def spots(hits) -> list[tuple]:
    return [(h.doc_id, h.paragraph, h.text, h.start, h.end, round(h.score, 4)) for h in hits]


def check_hits(held: dict, unit: str, mode: str, found: list) -> None:
    """Each hit is a document of its snapshot, in the version that snapshot holds; in dense mode the best phrase is
    in the best passage, of the best document, at the same score."""
    for hits in found[unit, mode]:
        for h in hits:
            assert h.doc_id in held, f"{unit}/{mode}: a hit from {h.doc_id}, which the snapshot does not hold"
            title, texts = held[h.doc_id]
            assert h.title == title and h.passage in texts, f"{unit}/{mode}: {h.doc_id} read in another version"
    if mode == "dense":
        for phrase, passage, document in zip(found["phrase", mode], found["passage", mode], found["doc", mode],
                                             strict=True):
            best = [(hits[0].doc_id, round(hits[0].score, 4)) for hits in (phrase, passage, document)]
            assert best[0] == best[1] == best[2], best
            assert phrase[0].passage == passage[0].passage


def stress(store, encoder, published: list, writes: int, merges: int, seed: int) -> list:
    """``writes`` random writes and ``merges`` merges in threads of their own while two threads search the snapshot
    published last; returns each search's (snapshot, hits by unit and mode). Raises the first failure of a thread."""
    from spanseek.indexer.build import BuildOptions

    rng = random.Random(seed)
    done, failures, searched = threading.Event(), [], []
    base_ids = [d["id"] for d in make_corpus()]
    made, written = [0], threading.Condition()  # the writes made so far

    def writer() -> None:
        for i in range(writes):
            held = list(store.segment.docs)
            body = {**make_corpus(seed=100 + i, n_docs=1, n_paras=rng.randint(1, 3))[0], "title": f"Version {i}"}
            pick = rng.random()
            if pick < 0.2 and held:  # the first written document replaced: every row after it moves
                target = held[0]
            elif pick < 0.35:
                target = rng.choice(base_ids)
            elif pick < 0.5 and held:
                target = None
                store.delete([rng.choice(held + base_ids)])
            else:
                target = f"n{i}"
            if target is not None:
                parsed = doc({**body, "id": target})
                store.upsert([parsed], [encoder.encode(parsed)])
            with written:
                made[0] += 1
                written.notify_all()

    def merger() -> None:
        # each merge once its share of the writes is made (started at once, they found nothing to merge and none
        # ran), while the writes after it go on
        for m in range(merges):
            due = (m + 1) * writes // (merges + 1)
            with written:
                written.wait_for(lambda due=due: made[0] >= due or done.is_set())
            if done.is_set():
                return
            assert store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32")) is not None

    def searcher() -> None:
        while not done.is_set():
            snap, held = published[-1]
            found = {(unit, mode): snap.search(QUESTIONS, SearchParams(unit, 5, mode=mode)) for unit, mode in SEARCHED}
            for unit, mode in SEARCHED:
                check_hits(held, unit, mode, found)
            searched.append((snap, {k: [spots(h) for h in v] for k, v in found.items()}))

    def run(fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as e:  # (re-raised in the test's thread)
            failures.append(e)
            done.set()
            with written:  # (the merger waiting for writes stops)
                written.notify_all()

    searchers = [threading.Thread(target=run, args=(searcher,)) for _ in range(2)]
    for t in searchers:
        t.start()
    workers = [threading.Thread(target=run, args=(writer,)), threading.Thread(target=run, args=(merger,))]
    for t in workers:
        t.start()
    for t in workers:
        t.join(600)
    done.set()
    for t in searchers:
        t.join(60)
    if failures:
        raise failures[0]
    return searched


def searched_afresh(snap, tiny_searcher) -> dict:
    """The hits of a snapshot made afresh over ``snap``'s base, documents (copied: nothing made for them kept) and
    tombstones, searched alone."""
    from spanseek.core.live_lexical import BaseTerms
    from spanseek.core.segment import LiveIndex, empty_like, searcher_over

    index = snap.index
    fresh = LiveIndex(index.base, [dataclasses.replace(d) for d in index.segment],
                      np.setdiff1d(index.deleted_docs, index.base.deleted_docs), empty_like(index.base.faiss),
                      BaseTerms.of(index.base))
    searcher = searcher_over(tiny_searcher, fresh)
    return {(unit, mode): [spots(h) for h in searcher.search(QUESTIONS, SearchParams(unit, 5, mode=mode))]
            for unit, mode in SEARCHED}


@pytest.mark.parametrize(("writes", "merges"), [(12, 0), pytest.param(40, 2, marks=pytest.mark.slow)])
def test_each_search_sees_one_snapshot_while_writes_and_merges_run(writes, merges, tmp_path, tiny_index,
                                                                   tiny_searcher, tiny_model_dir, encoder):
    import shutil

    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import LiveStore, Segment

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    published: list = []
    stores: list = []

    def publish(snap) -> None:  # (the store's lock held: its segment is the snapshot's; none yet at its start)
        segment = stores[0].segment if stores else Segment.over(snap.base)
        published.append((searcher_over(tiny_searcher, snap), documents_held(snap.base, segment)))

    store = LiveStore(tmp_path / "live", index, PhraseIndex(index), encoder, publish, tiny_model_dir)
    stores.append(store)
    try:
        searched = stress(store, encoder, published, writes, merges, seed=writes)
        assert store.state["merges"] == merges
    finally:
        store.close()
    snapshots = {id(s): (s, hits) for s, hits in searched}
    assert len(snapshots) > 1, "the searches saw one snapshot only"
    for snap, hits in list(snapshots.values())[:: max(1, len(snapshots) // 6)]:
        assert hits == searched_afresh(snap, tiny_searcher)
