"""Encode a build's shards on a Ray cluster (``spanseek index build --ray ADDRESS|local``, extra ``ray``).

The build reads the corpus and writes the passage and document stores as it always does; each shard that is not
already encoded (same key: model, precision, passages) becomes one row of a Ray Dataset, and
``Dataset.map_batches`` with ``ShardEncoder``, a callable class, runs the encoding in stateful actors: each
loads the model once, then writes whole shards with the same function, format and atomic rename as a local
build, so a killed Ray build resumes like a local one and the rest of the build (merge, faiss, manifest) reads
the shards unchanged. One actor per GPU when the cluster has GPUs (``num_gpus=1`` each), else one per
``CPUS_PER_ACTOR`` CPUs. Actors write to the output directory, so every node must see it at the same path (a
shared file system; on one machine, any directory).

ADDRESS is a running cluster's address (``ray://host:10001`` or ``auto``); ``local`` starts a local one.
Shards go to the cluster ``SHARDS_PER_ROUND`` at a time, so the driver holds that many shards' texts, not the
corpus.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.indexer import shards

log = logging.getLogger(__name__)

CPUS_PER_ACTOR = 1
SHARDS_PER_ROUND = 64


class ShardEncoder:
    """A Ray Data callable class: loads the phrase model once per actor, then encodes batches of shards."""

    def __init__(self, model_dir: str, precision: str, max_batch_tokens: int):
        from spanseek.core.encoding import PassageEncoder, pick_device
        from spanseek.core.model import load_model, load_tokenizer

        model = load_model(Path(model_dir)).to(pick_device("auto"))
        self.tokenizer = load_tokenizer(model.config)
        self.encoder = PassageEncoder(model, self.tokenizer, precision=precision, max_batch_tokens=max_batch_tokens)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tokens = [shards.encode_shard(self.encoder, self.tokenizer, json.loads(str(texts)), Path(str(dest)), str(key))
                  for dest, key, texts in zip(batch["dest"], batch["key"], batch["texts"], strict=True)]
        return {"dest": batch["dest"], "tokens": np.asarray(tokens, dtype=np.int64)}


def connect(address: str | None) -> Any:
    """Connect to the Ray cluster at ``address`` (None or "": start or join a local one); returns the module."""
    try:
        import ray
    except ModuleNotFoundError:
        raise RuntimeError("--ray needs the `ray` extra: pip install 'spanseek[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address or None, log_to_driver=False, include_dashboard=False)
    return ray


def encode_on_ray(jobs: list[tuple[Path, str, list[str]]], model_dir: Path, precision: str, max_batch_tokens: int,
                  address: str | None) -> int:
    """Encode ``jobs`` (shard directory, key, passages) on the cluster; returns the tokens encoded."""
    if not jobs:
        return 0
    ray = connect(address)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    actors = max(1, min(len(jobs), gpus or cpus // CPUS_PER_ACTOR))
    ds = ray.data.from_items([{"dest": str(d), "key": k, "texts": json.dumps(t)} for d, k, t in jobs])
    ds = ds.map_batches(ShardEncoder, batch_size=1, concurrency=actors,
                        num_gpus=1 if gpus else 0, num_cpus=0 if gpus else CPUS_PER_ACTOR,
                        fn_constructor_kwargs={"model_dir": str(model_dir), "precision": precision,
                                               "max_batch_tokens": max_batch_tokens})
    total = 0
    for row in ds.iter_rows():
        total += int(row["tokens"])
    log.info("encoded %d shards (%d tokens) on Ray with %d actors", len(jobs), total, actors)
    return total
