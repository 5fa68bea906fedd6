"""Train the phrase and question encoders on SQuAD-format data (joint training).

    spanseek train phrase --train ../shared/data/squad-v1.1-train.json.gz --out runs/phrase

Each step encodes a batch of passage windows once and all of their questions; the loss (trainer.losses) is
the unified loss or DensePhrases' two-term loss, with in-batch, pre-batch and hard negatives. Hard passages are
encoded at every step, or, with ``stale_cache``, read from a cache of the starting model's vectors and corrected
by a target corrector trained alongside (trainer.corrector). A fixed slice of articles (core.io.Holdout) is never
trained on: it is the validation set. The loop (trainer.loop) is the one QSFT uses; checkpoints go to
``OUT/last`` (with the optimizer state, so a killed run resumes, with the same encoder settings) and, with
``snapshot_every``, OUT/snapshots; a run holds a lock on OUT (``OUT/train.lock``), so a second run into it is refused,
and a run refused before it writes anything (a mistyped --init-from or --backbone) leaves no OUT it made behind.
Runs on CPU (bf16 autocast where the CPU supports it) or CUDA (bf16 autocast).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.config import DEFAULT_BACKBONE, EncoderConfig
from spanseek.core.encoding import pick_device, pick_precision
from spanseek.core.io import write_json_atomic
from spanseek.core.model import PhraseModel, load_tokenizer, resolve_model
from spanseek.trainer import distributed
from spanseek.trainer.arguments import TrainConfig, lora_settings
from spanseek.trainer.checkpoints import STATE, check_weights  # noqa: F401 (STATE: part of this module's interface)
from spanseek.trainer.corrector import TargetCorrector, corrector_loss
from spanseek.trainer.data import Batch, TrainWindow, collate, load_training, training_windows
from spanseek.trainer.distill import check_teacher
from spanseek.trainer.loop import StepSource, train_loop
from spanseek.trainer.losses import HardNegatives
from spanseek.trainer.mining import check_hard_negatives_file, load_hard_negatives
from spanseek.trainer.phrase_cache import (
    PhraseCache,
    cached_hard,
    cached_windows,
    check_cache_dir,
    fill_cache,
    hard_windows,
)
from spanseek.trainer.rundir import (
    TRAIN_CONFIG,
    check_resume,
    check_resume_data,
    check_run_kind,
    check_same_recipe,
    recorded,
    run_lock,
    trained_windows,
)
from spanseek.trainer.summary import check_validation_split, finish, write_holdout
from spanseek.trainer.unused import left_unused

log = logging.getLogger(__name__)

class JointMode(StepSource):
    """Joint training's step: encode the batch's windows (and hard passages, unless they come from a stale cache)."""

    name = "train"

    def __init__(self, cfg: TrainConfig, model: PhraseModel, tokenizer, device: torch.device, encode_hard: bool,
                 stale: PhraseCache | None = None, hard_keys: dict[str, str] | None = None,
                 corrector: torch.nn.Module | None = None):
        self.cfg, self.model, self.tokenizer, self.device = cfg, model, tokenizer, device
        self.encode_hard, self.stale, self.hard_keys = encode_hard, stale, hard_keys or {}
        self.corrector = corrector
        self.corr_opt = None
        if isinstance(corrector, TargetCorrector):
            self.corr_opt = torch.optim.AdamW(corrector.parameters(), lr=cfg.corrector_lr)
        self.agreement: list[tuple[float, float]] = []  # per step: stale and corrected top-1 agreement with fresh

    def batch(self, windows: list[TrainWindow]) -> Batch:
        return collate(windows, self.tokenizer, self.model.config.max_query_len,
                       self.cfg.hard_per_batch if self.encode_hard else 0)

    def passages(self, batch: Batch) -> tuple[torch.Tensor, HardNegatives | None]:
        P = batch.n_windows
        H_all = self.model.encode_passages(batch.input_ids, batch.attention_mask)  # (P + hard, T, d)
        if self.stale is not None:  # hard passages' stale vectors, through the corrector (no gradient to it)
            hv, hs, he, ha = cached_hard(batch.windows, self.stale, self.hard_keys, self.cfg.hard_per_batch)
            with torch.no_grad():
                hv = self.corrector(hv.to(self.device))
            return H_all[:P], HardNegatives(hv, hs.to(self.device), he.to(self.device), ha.to(self.device))
        if len(H_all) > P:  # tokens of hard passages, flattened: (Hp * T, d)
            T = H_all.shape[1]
            return H_all[:P], HardNegatives(
                vectors=H_all[P:].reshape(-1, H_all.shape[-1]),
                start_ok=batch.start_ok[P:].reshape(-1),
                end_ok=batch.end_ok[P:].reshape(-1),
                allowed=batch.hard_allowed.repeat_interleave(T, dim=1),  # (Q, Hp * T)
            )
        return H_all[:P], None

    def after_step(self, batch: Batch, H: torch.Tensor, q_start: torch.Tensor, q_end: torch.Tensor) -> None:
        """Train the target corrector on the batch's fresh vectors against their stale ones."""
        if self.stale is None:
            return
        P, d = batch.n_windows, H.shape[-1]
        S = cached_windows(batch.windows, self.stale, H.shape[1], first=1).to(self.device)
        c_loss, stats = corrector_loss(self.corrector, [(q_start, batch.start_ok[:P].reshape(-1)),
                                                        (q_end, batch.end_ok[:P].reshape(-1))],
                                       H.reshape(-1, d), S.reshape(-1, d))
        if self.corr_opt is not None:
            self.corr_opt.zero_grad(set_to_none=True)
            c_loss.backward()
            self.corr_opt.step()
        self.agreement.append((stats["stale_top1"], stats["corrected_top1"]))

    def state_dict(self) -> dict[str, Any]:
        if self.corr_opt is None:
            return {}
        return {"corrector": self.corrector.state_dict(), "corrector_optimizer": self.corr_opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.corr_opt is not None and "corrector" in state:
            self.corrector.load_state_dict(state["corrector"])
            self.corr_opt.load_state_dict(state["corrector_optimizer"])

    def report(self) -> dict[str, Any] | None:
        """How well (corrected) stale vectors rank a batch's tokens like fresh ones, early and late in the run."""
        if not self.agreement:
            return None
        a = np.asarray(self.agreement)
        tenth = max(1, len(a) // 10)
        return {
            "corrector": self.corr_opt is not None,
            "top1_agreement_first_10pct": {"stale": round(float(a[:tenth, 0].mean()), 4),
                                           "corrected": round(float(a[:tenth, 1].mean()), 4)},
            "top1_agreement_last_10pct": {"stale": round(float(a[-tenth:, 0].mean()), 4),
                                          "corrected": round(float(a[-tenth:, 1].mean()), 4)},
        }


# what a resumed run must keep: its data, its order and its optimiser and loss (the resumed optimiser and schedule keep
# the first run's learning rate whatever is asked; the others would change the run midway). The length of the run
# (--epochs, --max-steps) may change: a finished run is extended that way. Its questions are checked as questions
# (``check_resume_data``), not by the training file's name: the same file moved resumes, an edited one is refused.
RECIPE = ("holdout_every", "holdout_offset", "seed", "batch_windows", "lr", "warmup", "weight_decay", "loss",
          "prebatch", "prebatch_warmup", "hard_negatives", "hard_per_batch", "teacher", "limit_questions", "init_from",
          "widen_lora", "corrector", "corrector_lr")


def train_phrase(cfg: TrainConfig) -> dict:
    """Train (or resume) a phrase model; returns a summary with throughput and validation metrics."""
    if cfg.widen_lora and not cfg.init_from:
        raise ValueError("--widen-lora widens a trained model's adapters: it needs --init-from")
    check_teacher(cfg)  # before any work
    if cfg.init_from:  # a mistyped model is named before --out is made
        resolve_model(cfg.init_from)
    if cfg.stale_cache:
        check_cache_dir("--stale-cache", cfg.stale_cache)
    if cfg.hard_negatives:
        check_hard_negatives_file(cfg.hard_negatives)
    out = Path(cfg.out)
    with run_lock(out, hold=cfg.dist.is_main):  # makes out; held until the summary is written
        return _train_phrase(cfg, out)


def _train_phrase(cfg: TrainConfig, out: Path) -> dict:
    torch.manual_seed(cfg.seed)  # the same on every rank: identical initial adapters
    device = pick_device(cfg.device)
    if cfg.dist.enabled and device.type == "cuda":
        device = torch.device("cuda", cfg.dist.local_rank)
        torch.cuda.set_device(device)
    distributed.init(cfg.dist, device.type)
    main = cfg.dist.is_main
    check_run_kind(out, "phrase")  # another kind of run's checkpoint would be resumed with this model

    data = load_training(cfg.train)
    check_validation_split(cfg, data, cfg.val_questions)  # before any training
    hard = load_hard_negatives(cfg.hard_negatives, data, cfg.holdout) if cfg.hard_negatives else None  # pre-model
    precision = pick_precision(cfg.precision, device)  # (it may log its pick: once the inputs are known good)
    if cfg.init_from:  # continue a trained model: its encoder config wins over cfg.encoder
        from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME

        init_dir = resolve_model(cfg.init_from)
        if cfg.widen_lora:
            from spanseek.trainer.average import widen_lora

            model = widen_lora(init_dir, cfg.widen_lora, seed=cfg.seed)
        else:
            model = PhraseModel(EncoderConfig.load(init_dir / CONFIG_NAME))
            check_weights(init_dir / WEIGHTS_NAME)  # a damaged file is named, not a library's traceback
            model.load_weights(init_dir / WEIGHTS_NAME)
        model.to(device)
    else:
        model = PhraseModel(cfg.encoder).to(device)
    enc_cfg = model.config
    check_resume(out, enc_cfg)  # a resumed run's checkpoint must fit this model
    check_same_recipe(out, {**recorded(cfg), "encoder": None}, RECIPE, unused=left_unused(cfg))
    tokenizer = load_tokenizer(enc_cfg)
    if hard is not None and cfg.loss.kind != "unified":
        raise ValueError("hard negatives are used by the unified loss only (--loss unified)")
    if cfg.stale_cache and not (cfg.init_from and hard is not None and not cfg.dist.enabled):
        raise ValueError("--stale-cache holds the hard passages' vectors of the model a run starts from: it needs "
                         "--init-from and --hard-negatives, and runs on one process")
    windows, skipped = training_windows(cfg, data, tokenizer, enc_cfg, hard)
    check_resume_data(out, trained_windows(windows, cfg.train))  # before the run's settings are written or a cache is filled
    stale, hard_keys, corrector = None, None, None
    if cfg.stale_cache:  # filled (or resumed) by the init model, before a resumed run loads its later weights
        hard_pairs, hard_keys = hard_windows(windows, tokenizer, enc_cfg)
        stale = fill_cache(cfg.stale_cache, model, init_dir, tokenizer,
                           [(w.input_ids, w.flags) for w in windows] + hard_pairs, device=device,
                           precision=precision, progress=cfg.progress and main)
        corrector = TargetCorrector(model.dim).to(device) if cfg.corrector else torch.nn.Identity()
    mode = JointMode(cfg, model, tokenizer, device, encode_hard=bool(hard) and stale is None, stale=stale,
                     hard_keys=hard_keys, corrector=corrector)
    if main:
        write_json_atomic(out / TRAIN_CONFIG, {**recorded(cfg), "encoder": enc_cfg.to_dict()})
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    summary = train_loop(cfg, mode, model, params, windows, device, precision, cfg.dist)
    if not main:
        return {"rank": cfg.dist.rank, "steps": summary["steps"]}
    summary["skipped"] = skipped
    if (report := mode.report()) is not None:
        summary["stale_cache"] = report
    return finish(cfg, summary)


__all__ = ["TrainConfig", "train_phrase", "write_holdout", "lora_settings", "DEFAULT_BACKBONE"]
