"""The training loop shared by joint training (trainer.train) and query-side fine-tuning (trainer.qsft).

    spanseek train phrase --train squad-train.json.gz --out runs/phrase
    spanseek train qsft --model default --train squad-train.json.gz --out runs/qsft

A step source (``StepSource``: joint or QSFT) says how a step gets its batch and its windows' token vectors: joint
training encodes them (and hard-negative passages, or reads those from a stale cache), QSFT reads them from a phrase
cache. The rest is this loop, a composition of one-job modules: the epoch order (trainer.data), the teacher's
logits (trainer.distill), question encoding and the loss with pre-batch negatives (trainer.losses), the optimizer,
its schedule and the state a resumed run restores (trainer.state), gradient clipping and data-parallel averaging,
progress (trainer.progress), checkpoints and snapshots (trainer.checkpoints), a clean stop on Ctrl-C
(trainer.stopping) and the summary (trainer.summary). What may resume in a run's --out is checked by
trainer.rundir.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import torch

from spanseek.core.encoding import autocast
from spanseek.core.model import PhraseModel
from spanseek.trainer import distributed
from spanseek.trainer.arguments import DistInfo, TrainingOptions
from spanseek.trainer.checkpoints import recover_checkpoint, save_checkpoint, save_snapshot
from spanseek.trainer.data import Batch, TrainWindow, epoch_batches
from spanseek.trainer.distill import batch_targets, run_teacher
from spanseek.trainer.dropout import fast_dropout
from spanseek.trainer.losses import HardNegatives, PreBatchCache, phrase_loss
from spanseek.trainer.progress import Progress
from spanseek.trainer.rundir import check_resume_data, trained_windows
from spanseek.trainer.state import optimizer_and_resume, set_rng_state, training_state
from spanseek.trainer.stopping import StopAfterStep
from spanseek.trainer.summary import RunSoFar, after_loop, checkpoint_saved, loop_summary, model_card


class StepSource:
    """What a training mode adds to the shared loop: its batches and its windows' token vectors."""

    name = "train"  # progress-bar label

    def batch(self, windows: list[TrainWindow]) -> Batch:
        """The batch of these windows (on the CPU; the loop moves it)."""
        raise NotImplementedError

    def passages(self, batch: Batch) -> tuple[torch.Tensor, HardNegatives | None]:
        """(P, T, d) token vectors of the batch's windows, at the positions of ``batch.start_ok``, and the step's
        hard negatives. Runs under autocast, before the questions are encoded."""
        raise NotImplementedError

    def after_step(self, batch: Batch, H: torch.Tensor, q_start: torch.Tensor, q_end: torch.Tensor) -> None:
        """Called after each optimizer step (joint training trains its target corrector here)."""

    def state_dict(self) -> dict[str, Any]:
        """Extra training state saved in OUT/last with the optimizer's."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` saved, when a run resumes."""


def train_loop(
    cfg: TrainingOptions,
    mode: StepSource,
    model: PhraseModel,
    params: list[torch.nn.Parameter],
    windows: list[TrainWindow],
    device: torch.device,
    precision: str,
    dist: DistInfo | None = None,
) -> dict[str, Any]:
    """Train (or resume, from ``cfg.out``/last) until the schedule's end; returns the summary's common part.

    Every data-parallel rank walks the same batch order and takes batches rank, rank + world, ... of it.
    """
    dist = dist or DistInfo()
    out = Path(cfg.out)
    steps_per_epoch = max(1, math.ceil(len(windows) / cfg.batch_windows) // dist.world)
    total = cfg.max_steps or max(1, int(steps_per_epoch * cfg.epochs))
    end = min(total, cfg.stop_after or total)
    if dist.is_main:
        recover_checkpoint(out)
    if dist.enabled:
        torch.distributed.barrier()  # every rank resumes from the recovered checkpoint
    trained = trained_windows(windows, str(cfg.train))
    questions = sum(len(w.questions) for w in windows)
    check_resume_data(out, trained)
    opt, sched, step, state = optimizer_and_resume(model, params, cfg.lr, cfg.weight_decay, cfg.warmup, total, out)
    mode.load_state_dict(state)
    fast_dropout(model, device)  # on the CPU: the same dropout, its masks drawn 2.4x faster (trainer.dropout)
    teacher = run_teacher(cfg, windows, total, dist, device, precision)
    prebatch = PreBatchCache(cfg.prebatch)
    if not dist.enabled:  # the state the main rank saved is its own: other ranks' queues and draws are not in it
        prebatch.load_state_dict(state.get("prebatch", []), device)
        set_rng_state(state.get("rng"), device)
    pre_on = int(cfg.prebatch_warmup * total)
    # a resumed run's summary covers the whole run: the parts before it kept their time and questions in the state
    before = RunSoFar.of(state, step if step < end else None)
    progress = Progress(mode.name, total, step, cfg.progress and dist.is_main, before)
    order: list[list[int]] = []
    order_epoch = -1

    def card(snapshot: bool = False) -> str:  # the model card of the step now, for OUT/last or a snapshot
        return model_card(cfg, loop_summary(progress.run(), step, len(windows), questions, precision, str(device),
                                            dist.world), total, snapshot)

    stopper = StopAfterStep(end, after_loop(out, bool(cfg.val_questions)))
    with stopper if not dist.enabled else contextlib.nullcontext(stopper) as stop:  # Ctrl-C: a clean stop
        while step < end:
            epoch, pos = divmod(step, steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = epoch_batches(windows, cfg.batch_windows, cfg.seed + epoch), epoch
            batch = mode.batch([windows[i] for i in order[pos * dist.world + dist.rank]]).to(device)
            targets = batch_targets(batch, teacher, device)
            with autocast(device, precision):
                H, hard = mode.passages(batch)  # (P, T, d)
                q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
                pre = prebatch.negatives() if step >= pre_on else None
                loss, gold_s, gold_e = _loss(cfg, model, batch, H, q_start, q_end, pre, hard, targets, dist)
            _update(loss, opt, sched, params, dist)
            prebatch.push(gold_s.float(), gold_e.float())
            mode.after_step(batch, H, q_start, q_end)
            step += 1
            progress.step_done(loss.item(), len(batch.q_passage))
            stopping = stop.requested  # read once: the save below is the one the stop relies on
            if dist.is_main and (step % cfg.checkpoint_every == 0 or step == end or stopping):
                saved = training_state(opt, sched, step, prebatch, device, progress.run())
                save_checkpoint(model, out, "last", saved | mode.state_dict(), trained, card())
                checkpoint_saved(out)
                progress.saved(step, out / "last")
            if dist.is_main and cfg.snapshot_every and step % cfg.snapshot_every == 0:
                save_snapshot(model, out, step, trained, card(snapshot=True))
            if stopping:  # Ctrl-C or SIGTERM: this step finished and its checkpoint is saved
                stop.stop_here(step, out / "last")
    progress.close()
    run = progress.run()
    if dist.enabled:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return loop_summary(run, step, len(windows), questions, precision, str(device), dist.world)


def _loss(cfg: TrainingOptions, model: PhraseModel, batch: Batch, H: torch.Tensor, q_start: torch.Tensor,
          q_end: torch.Tensor, pre: Any, hard: HardNegatives | None, targets: tuple[torch.Tensor, ...] | None,
          dist: DistInfo) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A step's loss over the batch's (P, T, d) token vectors ``H``, and its questions' (Q, d) gold start and end
    vectors (the next steps' pre-batch negatives); data-parallel, the other ranks' gold vectors join the in-batch
    negatives."""
    P = batch.n_windows
    gold_s, gold_e = H[batch.q_passage, batch.gold_start], H[batch.q_passage, batch.gold_end]
    others = None
    if dist.enabled:
        others = (distributed.gather_others(gold_s, dist), distributed.gather_others(gold_e, dist))
    loss = phrase_loss(H, q_start, q_end, batch.start_ok[:P], batch.end_ok[:P], batch.q_passage,
                       batch.gold_start, batch.gold_end, cfg.loss, pre=pre, hard=hard, others=others,
                       max_answer_tokens=model.config.max_answer_tokens, teacher=targets)
    return loss, gold_s, gold_e


def _update(loss: torch.Tensor, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR,
            params: list[torch.nn.Parameter], dist: DistInfo) -> None:
    """Back-propagate ``loss`` and take an optimizer step: gradients averaged over the data-parallel ranks (a
    parameter this rank's step did not reach counts as zero), clipped to norm 1."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if dist.enabled:
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        distributed.all_reduce_mean([p.grad for p in params], dist.world)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
