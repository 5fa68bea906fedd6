"""Query-side fine-tuning (QSFT): train the question encoder against a frozen phrase encoder.

    spanseek train qsft --model default --train ../shared/data/squad-v1.1-train.json.gz \\
        --hard-negatives runs/hard-bm25.jsonl --out runs/qsft

The phrase encoder does not change, so the token vectors of every training window and every hard-negative
passage are computed once and kept on disk (``PhraseCache``: fp16 vectors in a memory map, filled in resumable
shards). A training step then runs only the question encoder: on two CPU cores about ten times the questions per
second of joint training. With fixed phrase vectors nothing is stale, so pre-batch negatives need no warm-up and
hard passages cost nothing to add (many more per step than joint training can afford).

The loss is the same unified loss as in joint training (trainer.losses). Indexes built with the input model stay
valid for the fine-tuned one: its phrase side, and so ``core.model.phrase_fingerprint``, is unchanged.

``--from-index INDEX`` (an index of training articles built with the model) fills the cache from the index
instead: every token's vector as its searches score it (a compact store decoded; zeros and cleared flags where
its token filter dropped the token), so nothing is encoded and the question encoder learns to rank the compressed
vectors (quantisation-aware fine-tuning, as DensePhrases tunes its question encoder on its compressed index).
Questions whose gold start or end token the filter dropped are left out.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from spanseek.core.encoding import pick_device, pick_precision
from spanseek.core.io import write_json_atomic
from spanseek.core.model import load_model, load_tokenizer, phrase_fingerprint, resolve_model
from spanseek.core.phrase_index import given_index
from spanseek.trainer.arguments import QsftConfig
from spanseek.trainer.data import Batch, TrainWindow, load_training, training_windows
from spanseek.trainer.distill import check_teacher
from spanseek.trainer.loop import StepSource, train_loop
from spanseek.trainer.losses import HardNegatives
from spanseek.trainer.mining import check_hard_negatives_file, load_hard_negatives
from spanseek.trainer.phrase_cache import (  # noqa: F401 (CacheError, window_key: part of this module's interface)
    CacheError,
    PhraseCache,
    as_indexed,
    cached_batch,
    check_cache_dir,
    fill_cache,
    fill_cache_from_index,
    hard_windows,
    window_key,
)
from spanseek.trainer.rundir import (
    QSFT_CONFIG,
    check_resume,
    check_resume_data,
    check_run_kind,
    check_same_recipe,
    recorded,
    run_lock,
    trained_windows,
)
from spanseek.trainer.summary import check_validation_split, finish
from spanseek.trainer.unused import left_unused

log = logging.getLogger(__name__)


class QsftMode(StepSource):
    """QSFT's step: the windows' and hard passages' token vectors come from the phrase cache."""

    name = "qsft"

    def __init__(self, cfg: QsftConfig, cache: PhraseCache, hard_keys: dict[str, str], tokenizer,
                 max_query_len: int):
        self.cfg, self.cache, self.hard_keys, self.tokenizer = cfg, cache, hard_keys, tokenizer
        self.max_query_len = max_query_len

    def batch(self, windows: list[TrainWindow]) -> Batch:
        return cached_batch(windows, self.cache, self.hard_keys, self.cfg.hard_per_batch, self.tokenizer,
                            self.max_query_len)

    def passages(self, batch: Batch) -> tuple[torch.Tensor, HardNegatives | None]:
        assert batch.vectors is not None
        return batch.vectors, batch.hard


def train_qsft(cfg: QsftConfig) -> dict:
    """Fill (or reuse) the phrase cache, then train (or resume) the question encoder; returns a summary. The run
    holds ``cfg.out``'s lock throughout (a second run into it is refused)."""
    check_teacher(cfg)  # before any work
    resolve_model(cfg.model)  # a mistyped model is named before --out is made
    check_places(cfg)
    out = Path(cfg.out)
    with run_lock(out):
        return _train_qsft(cfg, out)


def check_places(cfg: QsftConfig) -> None:
    """Refuse a ``--from-index`` or ``--val-index`` that is not an index, a ``--cache`` that cannot hold the phrase
    cache and a ``--hard-negatives`` that is no file, naming the flag, when the run starts: the first was read once
    the data was tokenised, the second once the whole run had trained, a cache was written into a model's directory,
    and the hard negatives were read once the model had loaded."""
    for flag, index in (("--from-index", cfg.from_index), ("--val-index", cfg.val_index if cfg.val_questions else None)):
        if index is not None:
            given_index(index, flag)
    if cfg.cache is not None:
        check_cache_dir("--cache", cfg.cache)
    if cfg.hard_negatives is not None:
        check_hard_negatives_file(cfg.hard_negatives)


# what a resumed QSFT run must keep: its model, data, order, optimiser and loss (the resumed optimiser and schedule keep
# the first run's learning rate whatever is asked; the others would change the run midway). The length of the run
# (--epochs, --max-steps) may change, and so may where the phrase cache is kept. Its questions are checked as questions
# (``check_resume_data``), not by the training file's name: the same file moved resumes, an edited one is refused.
RECIPE = ("model", "holdout_every", "holdout_offset", "seed", "batch_windows", "lr", "warmup", "weight_decay",
          "loss", "prebatch", "prebatch_warmup", "hard_negatives", "hard_per_batch", "teacher", "limit_questions",
          "from_index")


def _train_qsft(cfg: QsftConfig, out: Path) -> dict:
    check_run_kind(out, "qsft")  # another kind of run's checkpoint would be resumed with this model
    check_same_recipe(out, recorded(cfg), RECIPE, QSFT_CONFIG, left_unused(cfg))
    torch.manual_seed(cfg.seed)
    data = load_training(cfg.train)  # a bad training file is named before the model loads
    check_validation_split(cfg, data, cfg.val_questions)  # before any training
    device = pick_device(cfg.device)
    precision = pick_precision(cfg.precision, device)
    model_dir = resolve_model(cfg.model)
    model = load_model(model_dir, for_inference=False).to(device)
    check_resume(out, model.config)  # a resumed run's checkpoint must fit this model
    model.requires_grad_(False)
    question_side = [m for m in (getattr(model, n, None) for n in
                                 ("question_encoder", "start_head", "end_head", "q_start_encoder", "q_end_encoder"))
                     if m is not None]
    for m in question_side:  # LoRA adapters and heads of the question side; the backbone stays frozen
        for name, p in m.named_parameters():
            p.requires_grad_("lora_" in name or model.config.weights == "full" or isinstance(m, torch.nn.Linear))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{cfg.model}: no question-side weights to train")
    tokenizer = load_tokenizer(model.config)
    enc = model.config

    hard = load_hard_negatives(cfg.hard_negatives, data, cfg.holdout) if cfg.hard_negatives else None
    windows, skipped = training_windows(cfg, data, tokenizer, enc, hard)
    hard_pairs, hard_keys = hard_windows(windows, tokenizer, enc)
    t0 = time.perf_counter()
    if cfg.from_index:
        cache, _ = fill_cache_from_index(
            cfg.cache or out / "phrase-cache", cfg.from_index, model_dir, model.config,
            [(w.passage, w.first, w.input_ids) for w in windows]
            + [(text, 0, ids) for text, (ids, _) in zip(hard_keys, hard_pairs, strict=True)],
            progress=cfg.progress)
        windows, not_indexed = as_indexed(windows, cache)
        skipped |= not_indexed
        hard_keys = {text: key for text, key in hard_keys.items() if key in cache}
        if not windows:
            raise ValueError(f"{cfg.from_index}: holds none of the training questions' passages (--from-index needs "
                             "an index of training articles)")
        log.info("training against %s: %d windows (left out: %s)", cfg.from_index, len(windows), not_indexed)
    else:
        check_resume_data(out, trained_windows(windows, cfg.train))  # before the cache is filled for other windows
        cache = fill_cache(cfg.cache or out / "phrase-cache", model, model_dir, tokenizer,
                           [(w.input_ids, w.flags) for w in windows] + hard_pairs, device=device,
                           precision=precision, progress=cfg.progress)
    cache_seconds = time.perf_counter() - t0
    model.phrase_encoder.to("cpu")  # not used again: training reads the cache
    write_json_atomic(out / QSFT_CONFIG, recorded(cfg))
    for m in question_side:
        m.train()
    summary = train_loop(cfg, QsftMode(cfg, cache, hard_keys, tokenizer, enc.max_query_len), model, params, windows,
                         device, precision)
    summary |= {
        "skipped": skipped, "hard_passages": len(hard_keys), "cache_windows": len(cache.keys),
        "cache_tokens": int(cache.offsets[-1]), "cache_seconds": round(cache_seconds, 1),
        "phrase_fingerprint": phrase_fingerprint(out / "last"),
    }
    return finish(cfg, summary, val_index=cfg.val_index)
