"""The lexical (BM25) part of an index directory: write it, add it to an older index, check it.

    spanseek index add-lexical INDEX_DIR      # an index built before the lexical part existed; nothing re-encoded

``spanseek index build`` writes it (``write_lexical``) and ``spanseek index add`` rebuilds it over the old and new
passages with the analyzer it had (``core.lexical.ANALYZERS``); ``add-lexical`` rebuilds it with the current one
(``folded``) or the one ``--analyzer`` names, keeping its fusion weights; ``spanseek index verify`` compares it with
a fresh BM25 of the passages (``check_lexical``). Building
BM25 over the passage store takes seconds (14.5k passages: ~3 s on 2 cores), so it is always rebuilt whole rather
than updated in place.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core import integrity, phrase_index
from spanseek.core.io import write_json_atomic
from spanseek.core.lexical import (
    ANALYZER,
    DEFAULT_FUSION,
    LexicalIndex,
    analysis_of,
    missing_message,
    passage_text,
)
from spanseek.indexer.live_state import (
    STATE,
    LiveStoreError,
    current_form,
    default_live_dir,
    read_state,
    state_base,
)
from spanseek.indexer.out_dir import lock_refusal, refuse_merged_base

log = logging.getLogger(__name__)


def lexical_texts(passages_path: Path, docs_path: Path) -> list[str]:
    """Title + text of every passage of a passage store (what the BM25 index sees), in passage order."""
    docs = phrase_index.read_jsonl(docs_path)
    return [passage_text(docs[p["doc"]]["title"], p["text"]) for p in phrase_index.read_jsonl(passages_path)]


def write_lexical(index_dir: str | Path, passages_path: Path | None = None, docs_path: Path | None = None,
                  dest: Path | None = None, fusion: dict[str, Any] | None = None, analyzer: str = ANALYZER
                  ) -> dict[str, Any]:
    """Build the BM25 index of the passage store, its terms by ``analyzer``, into ``dest`` (default
    ``INDEX_DIR/lexical``); returns the manifest record: the index's description plus the fusion defaults
    (``fusion``, else ``DEFAULT_FUSION``)."""
    index_dir = Path(index_dir)
    texts = lexical_texts(passages_path or index_dir / phrase_index.PASSAGES, docs_path or index_dir / phrase_index.DOCS)
    record = LexicalIndex.build(texts, analyzer).save(dest or index_dir / phrase_index.LEXICAL)
    return {**record, "fusion": fusion or DEFAULT_FUSION}


def add_lexical(index_dir: str | Path, live_dir: str | Path | None = None, analyzer: str = ANALYZER
                ) -> phrase_index.Manifest:
    """Give a built index its lexical part (or rebuild it, its terms by ``analyzer``: default the current one) from its
    passage store; no passage is encoded again; returns the new manifest. The merged base that a server with writes over the index
    serves is given it too: the one named by the live directory ``live_dir`` (default: the index path + ``.live``)
    when its writes were made over this index (they stay its writes: ``indexer.live.index_digest`` leaves the lexical
    part out). Rerun after a kill, it completes both."""
    index_dir = Path(index_dir)
    analysis_of(analyzer)  # an unknown one refused before anything is locked or read
    phrase_index.Manifest.load(index_dir)  # a clear error for a missing or unfinished index
    refuse_merged_base(index_dir, "add-lexical")
    with integrity.writer_lock(index_dir) as locked:  # held exclusive: no server with writes over the index runs
        if not locked:
            raise lock_refusal(index_dir, "add-lexical", instead="the index stays as its writes were made over while "
                               "it serves them")
        merged = _merged_base(index_dir, live_dir)
        manifest = _rebuild_locked(index_dir, analyzer)
        if merged is not None:  # what that server serves: the index's part alone would not be searched
            with integrity.writer_lock(merged) as base_locked:
                if not base_locked:
                    raise lock_refusal(merged, "add-lexical")
                _rebuild_locked(merged, analyzer)
            log.info("the merged base %s, which a server with writes over %s serves, has the lexical part too",
                     merged, index_dir)
    return manifest


def _merged_base(index_dir: Path, live_dir: str | Path | None) -> Path | None:
    """The merged base the live directory (``live_dir``, else the index path + ``.live``) serves over ``index_dir``,
    or None: it has none yet, holds no state, or was made over another index (whose start says so). Its state is
    recorded in the current form first (``current_form``, atomically), as a start would: one of the previous version
    names the whole manifest, which the new one would not match. The caller holds the index's lock exclusive: no
    server with writes over it runs."""
    live = Path(live_dir) if live_dir is not None else default_live_dir(index_dir)
    if not (live / STATE).is_file():
        return None
    try:
        state = read_state(live, index_dir)
        if (current := current_form(state, index_dir)) != json.loads((live / STATE).read_text(encoding="utf-8")):
            write_json_atomic(live / STATE, current)
        return state_base(live, state, index_dir) if state.get("base") is not None else None
    except LiveStoreError:
        return None


def _rebuild_locked(index_dir: Path, analyzer: str) -> phrase_index.Manifest:
    """Write the lexical part of ``index_dir`` by ``analyzer`` (keeping its fusion weights) and its new manifest; the
    caller holds its writer lock."""
    phrase_index.recover_locked(index_dir)
    try:
        old = phrase_index.check_index(index_dir, recovered=True)
    except phrase_index.IndexFormatError:  # only the part rewritten here (add-lexical killed between its rename and
        old = phrase_index.Manifest.load(index_dir)  # the manifest's) is no damage: the rerun completes it
        others = {rel: v for rel, v in (old.files or {}).items() if rel.split("/")[0] != phrase_index.LEXICAL}
        if integrity.check_files(index_dir, others, contents=True):
            raise
    fusion = (old.lexical or {}).get("fusion")  # keep weights fitted for this index
    manifest = phrase_index.Manifest.create(index_dir, {**old.to_dict(), "lexical": write_lexical(index_dir, fusion=fusion,
                                                                                   analyzer=analyzer)})
    manifest.write(index_dir)
    return manifest


def check_lexical(index: phrase_index.PhraseIndex, sample: int = 50, k: int = 5, seed: int = 0) -> list[str]:
    """Problems of the lexical part (empty if none): its top-k for a sample of passage-text queries must be a
    fresh BM25's of the current passages (a stale lexical index, e.g. from before an add, differs)."""
    if index.lexical is None:
        return []
    texts = lexical_texts(index.dir / phrase_index.PASSAGES, index.dir / phrase_index.DOCS)
    if not texts:
        return []
    rng = np.random.default_rng(seed)
    queries = [texts[i][:200] for i in rng.choice(len(texts), size=min(sample, len(texts)), replace=False)]
    stored, _ = index.lexical.top(queries, k)
    fresh, _ = LexicalIndex.build(texts, index.lexical.analyzer).top(queries, k)
    if not np.array_equal(stored, fresh):
        return [f"the lexical index disagrees with the passage store; rebuild it with "
                f"`spanseek index add-lexical {index.dir}`"]
    return []


def describe(index: phrase_index.PhraseIndex) -> dict[str, Any] | str:
    """What ``index verify`` reports about the lexical part."""
    if index.lexical is None:
        return missing_message(index.dir)
    record = {k: v for k, v in (index.manifest.lexical or {}).items() if k != "dir"}
    return {**record, "analyzer": index.lexical.analyzer}  # (one written before analyzers were recorded: plain)
