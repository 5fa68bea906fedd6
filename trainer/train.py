"""Train the phrase and question encoders on SQuAD-format data.

    spanseek train phrase --train ../shared/data/squad-v1.1-train.json.gz --out runs/phrase

Each step encodes a batch of passage windows once and all of their questions; the loss (trainer.losses) is
the unified loss or DensePhrases' two-term loss, with in-batch, pre-batch and hard negatives. Hard passages are
encoded at every step, or, with ``stale_cache``, read from a cache of the starting model's vectors and corrected
by a target corrector trained alongside (trainer.corrector). A fixed slice of
articles (core.io.split_articles) is never trained on: it is the validation set. Checkpoints go to
``OUT/last`` (with the optimizer state, so a killed run resumes) and, after validation, ``OUT/best``.
Runs on CPU (bf16 autocast where the CPU supports it) or CUDA (bf16 autocast).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from spanseek.core.config import DEFAULT_BACKBONE, EncoderConfig, LoraSettings
from spanseek.core.encoding import autocast, pick_device, pick_precision
from spanseek.core.io import load_squad, split_articles, squad_questions, write_json_atomic
from spanseek.core.model import PhraseModel, load_tokenizer
from spanseek.trainer import distributed
from spanseek.trainer.corrector import TargetCorrector, corrector_loss
from spanseek.trainer.data import TrainWindow, build_windows, collate
from spanseek.trainer.distributed import DistInfo
from spanseek.trainer.losses import HardNegatives, LossConfig, PreBatchCache, phrase_loss
from spanseek.trainer.mining import load_hard_negatives
from spanseek.trainer.phrase_cache import cached_hard, cached_windows, fill_cache, hard_windows

log = logging.getLogger(__name__)

STATE = "trainer_state.pt"


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (saved as OUT/train_config.json)."""

    train: str  # SQuAD-format training file (.json or .json.gz)
    out: str  # run directory
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    epochs: float = 1.0
    init_from: str | None = None  # start from this checkpoint's weights (a new optimizer and schedule)
    widen_lora: int | None = None  # with init_from: widen its LoRA adapters to this rank first (trainer.average)
    max_steps: int | None = None  # stop after this many steps (overrides epochs)
    stop_after: int | None = None  # end the run at this step, keeping the schedule of the full run (comparisons)
    batch_windows: int = 24  # passage windows per step (each with all of its questions)
    lr: float = 1e-3  # LoRA and heads; use ~5e-5 for full fine-tuning
    warmup: float = 0.05  # fraction of steps with linear warm-up
    weight_decay: float = 0.0
    prebatch: int = 2  # C preceding batches whose golds are negatives (0 = off)
    prebatch_warmup: float = 0.1  # fraction of steps before pre-batch negatives switch on
    hard_negatives: str | None = None  # JSONL from `spanseek train mine` (unified loss only)
    hard_per_batch: int = 8  # hard passages per step, shared by the batch's questions
    stale_cache: str | None = None  # PhraseCache of the init model: hard passages are read from it, not encoded
    corrector: bool = True  # with stale_cache: correct the cached vectors with a target corrector
    corrector_lr: float = 1e-3
    snapshot_every: int = 0  # also keep a model-only copy every N steps in OUT/snapshots (checkpoint selection)
    holdout_every: int = 20  # every 20th article (from holdout_offset) is held out for validation
    holdout_offset: int = 7
    limit_questions: int | None = None  # train on a fixed sample of this many questions
    checkpoint_every: int = 100  # steps
    val_questions: int = 1000  # held-out questions evaluated at the end (RC + open)
    precision: str = "auto"
    device: str = "auto"
    seed: int = 0
    progress: bool = True
    dist: DistInfo = field(default_factory=DistInfo)  # set by the CLI from torchrun's environment


def epoch_batches(windows: list[TrainWindow], size: int, seed: int) -> list[list[int]]:
    """A deterministic epoch order: shuffle, sort by length within pools of 50 batches (less padding), shuffle."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(windows))
    pool = size * 50
    batches = []
    for a in range(0, len(order), pool):
        chunk = sorted(order[a : a + pool].tolist(), key=lambda i: len(windows[i].input_ids))
        batches.extend(chunk[b : b + size] for b in range(0, len(chunk), size))
    rng.shuffle(batches)
    return batches


def write_holdout(cfg: TrainConfig, path: Path) -> Path:
    """Write the held-out articles of the training file as a SQuAD-format .json.gz (the validation set)."""
    _, held = split_articles(load_squad(cfg.train), cfg.holdout_every, cfg.holdout_offset)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"version": "spanseek-holdout", "data": held}, f)
    return path


def save_checkpoint(model: PhraseModel, out: Path, name: str, state: dict | None) -> None:
    """Save a checkpoint (and the optimizer state) to out/name, replacing it atomically."""
    tmp = out / f"{name}.saving"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(tmp)
    if state is not None:
        torch.save(state, tmp / STATE)
    final = out / name
    old = out / f"{name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def optimizer_and_resume(
    model: PhraseModel, params: list, lr: float, weight_decay: float, warmup: float, total: int, out: Path
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, int]:
    """AdamW with linear warm-up, then linear decay to 0 at ``total`` steps. If ``out/last`` holds a training state,
    the weights, optimizer, schedule and step are restored from it (a killed run resumes). Returns (opt, sched, step).
    """
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    warm = max(1, int(warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / max(1, total - warm))
    )
    step = 0
    last = out / "last"
    if (last / STATE).exists():
        model.load_weights(last / "weights.safetensors")
        state = torch.load(last / STATE, weights_only=False)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = state["step"]
        log.info("resumed from %s at step %d", last, step)
    return opt, sched, step


def train_phrase(cfg: TrainConfig) -> dict:
    """Train (or resume) a phrase model; returns a summary with throughput and validation metrics."""
    if cfg.widen_lora and not cfg.init_from:
        raise ValueError("--widen-lora widens a trained model's adapters: it needs --init-from")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)  # the same on every rank: identical initial adapters
    device = pick_device(cfg.device)
    if cfg.dist.enabled and device.type == "cuda":
        device = torch.device("cuda", cfg.dist.local_rank)
        torch.cuda.set_device(device)
    precision = pick_precision(cfg.precision, device)
    distributed.init(cfg.dist, device.type)
    main = cfg.dist.is_main

    data = load_squad(cfg.train)
    train_articles, _ = split_articles(data, cfg.holdout_every, cfg.holdout_offset)
    questions = squad_questions(train_articles)
    if cfg.limit_questions:
        rng = np.random.default_rng(cfg.seed)
        questions = [questions[i] for i in sorted(rng.choice(len(questions), cfg.limit_questions, replace=False))]
    if cfg.init_from:  # continue a trained model: its encoder config wins over cfg.encoder
        from spanseek.core.model import CONFIG_NAME, resolve_model

        init_dir = resolve_model(cfg.init_from)
        if cfg.widen_lora:
            from spanseek.trainer.average import widen_lora

            model = widen_lora(init_dir, cfg.widen_lora, seed=cfg.seed)
        else:
            model = PhraseModel(EncoderConfig.load(init_dir / CONFIG_NAME))
            model.load_weights(init_dir / "weights.safetensors")
        model.to(device)
    else:
        model = PhraseModel(cfg.encoder).to(device)
    enc_cfg = model.config
    tokenizer = load_tokenizer(enc_cfg)
    hard = load_hard_negatives(cfg.hard_negatives, data) if cfg.hard_negatives else None
    if hard is not None and cfg.loss.kind != "unified":
        raise ValueError("hard negatives are used by the unified loss only (--loss unified)")
    if cfg.stale_cache and not (cfg.init_from and hard is not None and not cfg.dist.enabled):
        raise ValueError("--stale-cache holds the hard passages' vectors of the model a run starts from: it needs "
                         "--init-from and --hard-negatives, and runs on one process")
    windows, skipped = build_windows(questions, tokenizer, enc_cfg.max_seq_len, enc_cfg.stride,
                                     enc_cfg.max_answer_tokens, hard)
    n_q = sum(len(w.questions) for w in windows)
    log.info("training on %d questions in %d windows (skipped %s)", n_q, len(windows), skipped)
    stale, hard_keys, corrector = None, {}, None
    if cfg.stale_cache:  # filled (or resumed) by the init model, before a resumed run loads its later weights
        hard_pairs, hard_keys = hard_windows(windows, tokenizer, enc_cfg)
        stale = fill_cache(cfg.stale_cache, model, init_dir, tokenizer,
                           [(w.input_ids, w.flags) for w in windows] + hard_pairs, device=device,
                           precision=precision, progress=cfg.progress and main)
        corrector = TargetCorrector(model.dim).to(device) if cfg.corrector else torch.nn.Identity()

    # every rank walks the same batch order; rank r takes batches r, r + world, ... of it
    steps_per_epoch = max(1, math.ceil(len(windows) / cfg.batch_windows) // cfg.dist.world)
    total = cfg.max_steps or max(1, int(steps_per_epoch * cfg.epochs))
    params = [p for p in model.parameters() if p.requires_grad]
    opt, sched, step = optimizer_and_resume(model, params, cfg.lr, cfg.weight_decay, cfg.warmup, total, out)
    last = out / "last"
    corr_opt = None
    if isinstance(corrector, TargetCorrector):
        corr_opt = torch.optim.AdamW(corrector.parameters(), lr=cfg.corrector_lr)
        if (last / STATE).exists():
            state = torch.load(last / STATE, weights_only=False)
            corrector.load_state_dict(state["corrector"])
            corr_opt.load_state_dict(state["corrector_optimizer"])
    agreement: list[tuple[float, float]] = []  # per step: stale and corrected top-1 agreement with fresh vectors
    if main:
        write_json_atomic(out / "train_config.json", {**asdict(replace(cfg, encoder=enc_cfg)), "encoder": enc_cfg.to_dict()})

    cache = PreBatchCache(cfg.prebatch)
    pre_on = int(cfg.prebatch_warmup * total)
    model.train()
    seen_q, t0 = 0, time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train", unit="step", disable=not (cfg.progress and main))
    loss_ema = None
    order, order_epoch = [], -1
    end = min(total, cfg.stop_after or total)
    while step < end:
        epoch, pos = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_batches(windows, cfg.batch_windows, cfg.seed + epoch), epoch
        batch_ids = order[pos * cfg.dist.world + cfg.dist.rank]
        batch_windows = [windows[i] for i in batch_ids]
        batch = collate(batch_windows, tokenizer, enc_cfg.max_query_len,
                        cfg.hard_per_batch if hard and stale is None else 0).to(device)
        P = batch.n_windows
        with autocast(device, precision):
            H_all = model.encode_passages(batch.input_ids, batch.attention_mask)  # (P + hard, T, d)
            H = H_all[:P]
            q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
            pre = cache.negatives() if step >= pre_on else None
            hard_negs = None
            if stale is not None:  # hard passages' stale vectors, through the corrector (no gradient to it)
                hv, hs, he, ha = cached_hard(batch_windows, stale, hard_keys, cfg.hard_per_batch)
                with torch.no_grad():
                    hv = corrector(hv.to(device))
                hard_negs = HardNegatives(hv, hs.to(device), he.to(device), ha.to(device))
            elif len(H_all) > P:  # tokens of hard passages, flattened: (Hp * T, d)
                T = H_all.shape[1]
                hard_negs = HardNegatives(
                    vectors=H_all[P:].reshape(-1, H_all.shape[-1]),
                    start_ok=batch.start_ok[P:].reshape(-1),
                    end_ok=batch.end_ok[P:].reshape(-1),
                    allowed=batch.hard_allowed.repeat_interleave(T, dim=1),  # (Q, Hp * T)
                )
            gold_s, gold_e = H[batch.q_passage, batch.gold_start], H[batch.q_passage, batch.gold_end]
            others = None
            if cfg.dist.enabled:
                others = (distributed.gather_others(gold_s, cfg.dist), distributed.gather_others(gold_e, cfg.dist))
            loss = phrase_loss(H, q_start, q_end, batch.start_ok[:P], batch.end_ok[:P], batch.q_passage,
                               batch.gold_start, batch.gold_end, cfg.loss, pre=pre, hard=hard_negs, others=others,
                               max_answer_tokens=enc_cfg.max_answer_tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.dist.enabled:
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            distributed.all_reduce_mean([p.grad for p in params], cfg.dist.world)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        cache.push(gold_s.float(), gold_e.float())
        if stale is not None:
            d = H.shape[-1]
            S = cached_windows(batch_windows, stale, H.shape[1], first=1).to(device)
            c_loss, stats = corrector_loss(corrector, [(q_start, batch.start_ok[:P].reshape(-1)),
                                                       (q_end, batch.end_ok[:P].reshape(-1))],
                                           H.reshape(-1, d), S.reshape(-1, d))
            if corr_opt is not None:
                corr_opt.zero_grad(set_to_none=True)
                c_loss.backward()
                corr_opt.step()
            agreement.append((stats["stale_top1"], stats["corrected_top1"]))
        step += 1
        seen_q += len(batch.q_passage)
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{loss_ema:.3f}", qps=f"{seen_q / (time.perf_counter() - t0):.1f}")
        bar.update(1)
        if main and (step % cfg.checkpoint_every == 0 or step == end):
            state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": step}
            if corr_opt is not None:
                state |= {"corrector": corrector.state_dict(), "corrector_optimizer": corr_opt.state_dict()}
            save_checkpoint(model, out, "last", state)
        if main and cfg.snapshot_every and step % cfg.snapshot_every == 0:
            model.save(out / "snapshots" / f"step-{step:06d}")
    bar.close()
    elapsed = time.perf_counter() - t0
    if cfg.dist.enabled:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        if not main:
            return {"rank": cfg.dist.rank, "steps": step}
    summary = {
        "steps": step,
        "train_questions": n_q,
        "train_windows": len(windows),
        "skipped": skipped,
        "seconds": round(elapsed, 1),
        "questions_per_second": round(seen_q / elapsed, 2) if elapsed > 0 else None,
        "precision": precision,
        "device": str(device),
        "world_size": cfg.dist.world,
    }
    if agreement:  # how well (corrected) stale vectors rank a batch's tokens like fresh ones, early and late
        a = np.asarray(agreement)
        tenth = max(1, len(a) // 10)
        summary["stale_cache"] = {
            "corrector": corr_opt is not None,
            "top1_agreement_first_10pct": {"stale": round(float(a[:tenth, 0].mean()), 4),
                                           "corrected": round(float(a[:tenth, 1].mean()), 4)},
            "top1_agreement_last_10pct": {"stale": round(float(a[-tenth:, 0].mean()), 4),
                                          "corrected": round(float(a[-tenth:, 1].mean()), 4)},
        }
    if cfg.val_questions:
        from spanseek.indexer.evaluate import run_eval

        val = write_holdout(cfg, out / "validation.json.gz")
        summary["validation"] = run_eval(val, last, reading_comprehension=True, limit=cfg.val_questions,
                                         progress=cfg.progress)
    write_json_atomic(out / "summary.json", summary)
    return summary


def lora_settings(r: int, alpha: int | None = None) -> LoraSettings:
    return LoraSettings(r=r, alpha=alpha or 2 * r)


__all__ = ["TrainConfig", "train_phrase", "write_holdout", "lora_settings", "DEFAULT_BACKBONE"]
