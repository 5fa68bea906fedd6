"""The examples ``spanseek train calibrate`` collects, on disk: one question's ranked hit list under a unit, mode and
condition (``Ranked``), written as one .npz with what they were searched on (``--examples``), read back for refits
without searching again."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.io import CorpusError, atomic_path


@dataclass
class Ranked:
    """One question's served hit list under one unit, mode and condition: features, labels, confidences."""

    question: int
    features: np.ndarray  # (n, F)
    labels: np.ndarray  # (n,) bool
    confidence: np.ndarray | None  # (n,), when the searcher has a calibrator


META_KEY = "__meta__"


def save_runs(runs: dict[tuple[str, str, str], list[Ranked]], path: str | Path, meta: Mapping[str, Any] | None = None
              ) -> None:
    """Write the collected examples (features, labels, question of each ranked list) as one npz, for refits, with
    ``meta`` (what they were searched on: index, questions, fusion) as JSON."""
    arrays: dict[str, Any] = {META_KEY: np.asarray(json.dumps(dict(meta or {})))}
    for (unit, mode, cond), ranked in runs.items():
        key = f"{unit}/{mode}/{cond}"
        arrays[f"{key}/features"] = np.concatenate([r.features for r in ranked]) if ranked else np.zeros((0, 0))
        arrays[f"{key}/labels"] = np.concatenate([r.labels for r in ranked]) if ranked else np.zeros(0, bool)
        arrays[f"{key}/question"] = np.repeat([r.question for r in ranked], [len(r.labels) for r in ranked])
        arrays[f"{key}/lists"] = np.asarray([r.question for r in ranked], dtype=np.int64)  # with those of no hit
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def open_examples(path: str | Path) -> np.lib.npyio.NpzFile:
    """The npz ``save_runs`` wrote; CorpusError naming the file if it is another kind of file."""
    want = "expected the .npz of examples that `spanseek train calibrate --examples` writes"
    try:
        z = np.load(path)  # allow_pickle stays off: an object array (or a text file) is refused
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        raise CorpusError(f"{path}: not a NumPy .npz file; {want}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise CorpusError(f"{path}: a single .npy array; {want}")
    parts = ("features", "labels", "question", "lists")
    if not all(k == META_KEY or (k.count("/") == 3 and k.rsplit("/", 1)[1] in parts) for k in z.files):
        raise CorpusError(f"{path}: holds other arrays ({', '.join(z.files[:3])}); {want}")
    return z


def check_examples_out(path: str | Path | None) -> None:
    """Refuse an ``--examples`` file there that is not examples an earlier run wrote (a question file, say), which
    writing the examples would replace once every question was searched; an empty file, or none, is fine."""
    if path is None or not Path(path).is_file() or not Path(path).stat().st_size:
        return
    try:
        open_examples(path)
    except CorpusError:
        raise ValueError(f"--examples {path} exists and is not the .npz of examples that --examples writes; it is "
                         "left alone: write to a new file, or remove it first") from None


def load_meta(path: str | Path) -> dict[str, Any]:
    """What ``save_runs`` recorded about the examples in ``path`` ({} for files written before it did)."""
    z = open_examples(path)
    return json.loads(str(z[META_KEY])) if META_KEY in z.files else {}


def load_runs(path: str | Path) -> dict[tuple[str, str, str], list[Ranked]]:
    """The examples ``save_runs`` wrote, one Ranked per question, in their order; a question whose search found no
    hit has an empty one, as ``collect`` gave it (files written before the lists were kept leave it out)."""
    z = open_examples(path)
    runs: dict[tuple[str, str, str], list[Ranked]] = {}
    for key in sorted({k.rsplit("/", 1)[0] for k in z.files if k != META_KEY}):
        unit, mode, cond = key.split("/")
        features, labels, question = z[f"{key}/features"], z[f"{key}/labels"], z[f"{key}/question"]
        starts = np.flatnonzero(np.r_[True, question[1:] != question[:-1]]) if len(question) else np.zeros(0, int)
        ends = np.r_[starts[1:], len(question)]
        found = {int(question[a]): (a, b) for a, b in zip(starts, ends, strict=True)}
        lists = z[f"{key}/lists"] if f"{key}/lists" in z.files else [question[a] for a in starts]
        ranked = []
        for q in map(int, lists):
            a, b = found.get(q, (0, 0))  # (0, 0): no hit
            ranked.append(Ranked(q, features[a:b], labels[a:b], None))
        runs[(unit, mode, cond)] = ranked
    return runs


__all__ = ["META_KEY", "Ranked", "check_examples_out", "load_meta", "load_runs", "open_examples", "save_runs"]
