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
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from spanseek.core.encoding import QUESTION_PAD_MULTIPLE, autocast, padded_length, pick_device, pick_precision
from spanseek.core.io import load_squad, split_articles, squad_questions, write_json_atomic
from spanseek.core.model import load_model, load_tokenizer, phrase_fingerprint, resolve_model
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.trainer.data import TrainWindow, build_windows
from spanseek.trainer.losses import HardNegatives, LossConfig, PreBatchCache, phrase_loss
from spanseek.trainer.mining import load_hard_negatives
from spanseek.trainer.phrase_cache import (  # noqa: F401 (CacheError, window_key: part of this module's interface)
    CacheError,
    PhraseCache,
    cached_hard,
    cached_windows,
    fill_cache,
    hard_windows,
    window_key,
)
from spanseek.trainer.train import (
    TrainConfig,
    epoch_batches,
    optimizer_and_resume,
    save_checkpoint,
    write_holdout,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QsftConfig:
    """Settings of one query-side fine-tuning run (saved as OUT/qsft_config.json)."""

    model: str  # trained phrase model; its phrase encoder stays as it is
    train: str  # SQuAD-format training file (held-out articles are never trained on)
    out: str  # run directory: OUT/last (resumable), OUT/phrase-cache unless ``cache`` is given
    cache: str | None = None
    hard_negatives: str | None = None  # JSONL from `spanseek train mine`
    # defaults: the better of the two settings tried on the default model (qsft-b in its card); a larger in-batch
    # weight (32) traded reading comprehension for open retrieval
    loss: LossConfig = field(default_factory=lambda: LossConfig(lambda_inb=4.0, lambda_pre=4.0))
    epochs: float = 1.0
    batch_windows: int = 32
    hard_per_batch: int = 8  # hard passages per step (their vectors are cached, so more cost little)
    prebatch: int = 4  # preceding batches' golds as negatives (exact, not stale: the phrase side is frozen)
    lr: float = 2e-4
    warmup: float = 0.05
    holdout_every: int = 20
    holdout_offset: int = 7
    checkpoint_every: int = 200
    val_questions: int = 1000  # held-out questions evaluated at the end
    val_index: str | None = None  # an index of the held-out articles built with the input model (else built)
    precision: str = "auto"
    device: str = "auto"
    seed: int = 0
    progress: bool = True


def _step_tensors(
    batch: list[TrainWindow], cache: PhraseCache, hard_keys: dict[str, str], hard_per_batch: int, tokenizer,
    max_query_len: int,
) -> dict[str, torch.Tensor]:
    """The cached vectors of a batch's windows (P, T, d) and hard passages (M, d), and its questions."""
    T = padded_length(max(len(w.input_ids) for w in batch))
    flags = torch.zeros((len(batch), T), dtype=torch.uint8)
    for p, w in enumerate(batch):
        flags[p, : len(w.flags)] = torch.from_numpy(np.array(w.flags))
    hard_vectors, hard_start_ok, hard_end_ok, hard_allowed = cached_hard(batch, cache, hard_keys, hard_per_batch)
    q = tokenizer([s for w in batch for s in w.questions], padding=True, truncation=True, max_length=max_query_len,
                  return_tensors="pt", pad_to_multiple_of=QUESTION_PAD_MULTIPLE)
    return {
        "H": cached_windows(batch, cache, T), "start_ok": (flags & FLAG_START) > 0, "end_ok": (flags & FLAG_END) > 0,
        "q_input_ids": q["input_ids"], "q_attention_mask": q["attention_mask"],
        "q_passage": torch.tensor([p for p, w in enumerate(batch) for _ in w.questions]),
        "gold_start": torch.tensor([s for w in batch for s in w.starts]),
        "gold_end": torch.tensor([e for w in batch for e in w.ends]),
        "hard_vectors": hard_vectors, "hard_start_ok": hard_start_ok, "hard_end_ok": hard_end_ok,
        "hard_allowed": hard_allowed,
    }


def train_qsft(cfg: QsftConfig) -> dict:
    """Fill (or reuse) the phrase cache, then train (or resume) the question encoder; returns a summary."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    precision = pick_precision(cfg.precision, device)
    model_dir = resolve_model(cfg.model)
    model = load_model(model_dir, for_inference=False).to(device)
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

    data = load_squad(cfg.train)
    train_articles, _ = split_articles(data, cfg.holdout_every, cfg.holdout_offset)
    hard = load_hard_negatives(cfg.hard_negatives, data) if cfg.hard_negatives else None
    windows, skipped = build_windows(squad_questions(train_articles), tokenizer, enc.max_seq_len, enc.stride,
                                     enc.max_answer_tokens, hard)
    hard_pairs, hard_keys = hard_windows(windows, tokenizer, enc)
    t0 = time.perf_counter()
    cache = fill_cache(cfg.cache or out / "phrase-cache", model, model_dir, tokenizer,
                       [(w.input_ids, w.flags) for w in windows] + hard_pairs, device=device, precision=precision,
                       progress=cfg.progress)
    cache_seconds = time.perf_counter() - t0
    model.phrase_encoder.to("cpu")  # not used again: training reads the cache

    steps_per_epoch = math.ceil(len(windows) / cfg.batch_windows)
    total = max(1, int(steps_per_epoch * cfg.epochs))
    opt, sched, step = optimizer_and_resume(model, params, cfg.lr, 0.0, cfg.warmup, total, out)
    last = out / "last"
    write_json_atomic(out / "qsft_config.json", asdict(cfg))
    for m in question_side:
        m.train()
    prebatch = PreBatchCache(cfg.prebatch)
    order, order_epoch = [], -1
    seen_q, t1, loss_ema = 0, time.perf_counter(), None
    bar = tqdm(total=total, initial=step, desc="qsft", unit="step", disable=not cfg.progress)
    while step < total:
        epoch, pos = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_batches(windows, cfg.batch_windows, cfg.seed + epoch), epoch
        b = {k: v.to(device) for k, v in _step_tensors([windows[i] for i in order[pos]], cache, hard_keys,
                                                        cfg.hard_per_batch, tokenizer, enc.max_query_len).items()}
        with autocast(device, precision):
            q_start, q_end = model.encode_questions(b["q_input_ids"], b["q_attention_mask"])
            hard_negs = None
            if len(b["hard_vectors"]):
                hard_negs = HardNegatives(b["hard_vectors"], b["hard_start_ok"], b["hard_end_ok"], b["hard_allowed"])
            loss = phrase_loss(b["H"], q_start, q_end, b["start_ok"], b["end_ok"], b["q_passage"], b["gold_start"],
                               b["gold_end"], cfg.loss, pre=prebatch.negatives(), hard=hard_negs,
                               max_answer_tokens=model.config.max_answer_tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        H, qp = b["H"], b["q_passage"]
        prebatch.push(H[qp, b["gold_start"]], H[qp, b["gold_end"]])
        step += 1
        seen_q += len(qp)
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{loss_ema:.3f}", qps=f"{seen_q / (time.perf_counter() - t1):.1f}")
        bar.update(1)
        if step % cfg.checkpoint_every == 0 or step == total:
            save_checkpoint(model, out, "last", {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                                 "step": step})
    bar.close()
    elapsed = time.perf_counter() - t1
    summary: dict = {
        "steps": step, "train_questions": sum(len(w.questions) for w in windows), "train_windows": len(windows),
        "hard_passages": len(hard_keys), "cache_windows": len(cache.keys), "cache_tokens": int(cache.offsets[-1]),
        "cache_seconds": round(cache_seconds, 1), "seconds": round(elapsed, 1),
        "questions_per_second": round(seen_q / elapsed, 2) if seen_q else None,
        "precision": precision, "device": str(device), "skipped": skipped,
        "phrase_fingerprint": phrase_fingerprint(last),
    }
    if cfg.val_questions:
        from spanseek.indexer.evaluate import run_eval

        val = write_holdout(TrainConfig(train=cfg.train, out=cfg.out, holdout_every=cfg.holdout_every,
                                        holdout_offset=cfg.holdout_offset), out / "validation.json.gz")
        summary["validation"] = run_eval(val, last, index=cfg.val_index, reading_comprehension=True,
                                         limit=cfg.val_questions, progress=cfg.progress)
    write_json_atomic(out / "summary.json", summary)
    return summary

