"""The training loop shared by joint training (trainer.train) and query-side fine-tuning (trainer.qsft).

    spanseek train phrase --train squad-train.json.gz --out runs/phrase
    spanseek train qsft --model default --train squad-train.json.gz --out runs/qsft

A step source (``StepSource``: joint or QSFT) says how a step gets its batch and its windows' token vectors: joint training encodes them (and
hard-negative passages, or reads those from a stale cache), QSFT reads them from a phrase cache. Everything else
is one piece of code: the epoch order, question encoding and the loss (trainer.losses) with pre-batch negatives,
the optimizer and its schedule, gradient clipping and data-parallel averaging, progress, checkpoints that resume
(``OUT/last``), snapshots, the summary and the validation on held-out questions.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import autocast
from spanseek.core.evaluate import question_key, trained_questions, write_trained_questions
from spanseek.core.integrity import fsync_path, writer_lock
from spanseek.core.io import load_squad, no_space, squad_questions, write_json_atomic
from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME, PhraseModel
from spanseek.trainer import distributed
from spanseek.trainer.arguments import DistInfo, JobOptions, TrainingOptions
from spanseek.trainer.checkpoints import (
    STATE,
    SUMMARY,
    RunSoFar,
    StopAfterStep,
    after_loop,
    check_checkpoint,
    checkpoint_saved,
    read_state,
)
from spanseek.trainer.data import Batch, TrainWindow, build_windows, warn_left_out
from spanseek.trainer.distill import teacher_cache, teacher_tensors
from spanseek.trainer.dropout import fast_dropout
from spanseek.trainer.losses import HardNegatives, PreBatchCache, phrase_loss

log = logging.getLogger(__name__)


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


def visited_windows(windows: list[TrainWindow], size: int, seed: int, steps: int, world: int = 1) -> list[TrainWindow]:
    """The windows that the first ``steps`` steps train on (every data-parallel rank's), in their first visit's order:
    a run shorter than an epoch needs the teacher's logits of those only."""
    steps_per_epoch = max(1, math.ceil(len(windows) / size) // world)
    seen: dict[int, None] = {}
    for epoch in range(math.ceil(steps / steps_per_epoch)):
        order = epoch_batches(windows, size, seed + epoch)
        for pos in range(min(steps_per_epoch, steps - epoch * steps_per_epoch)):
            for rank in range(world):
                seen |= dict.fromkeys(order[pos * world + rank])
        if len(seen) == len(windows):
            break
    return [windows[i] for i in seen]


def check_validation_split(cfg: TrainingOptions, data: list[dict]) -> None:
    """A run that validates at its end (``val_questions``) needs questions in the held-out articles: refused before
    training (it failed after the whole run)."""
    if cfg.val_questions and not squad_questions(cfg.holdout.split(data)[1]):
        raise ValueError(f"--val-questions {cfg.val_questions}: {cfg.train} has no questions in its held-out articles "
                         f"(every {cfg.holdout.every}th from article {cfg.holdout.offset}: {len(data)} articles); hold "
                         "out others (--holdout-every N --holdout-offset K: article i is held out when i % N == K), "
                         "give --val-questions 0, or a file with more articles")


def training_windows(
    cfg: TrainingOptions, data: list[dict], tokenizer, enc: EncoderConfig, hard: dict[str, list[str]] | None
) -> tuple[list[TrainWindow], dict[str, int]]:
    """The windows of the training articles' questions (a fixed sample with ``limit_questions``), and what
    ``build_windows`` skipped."""
    train_articles, _ = cfg.holdout.split(data)
    questions = squad_questions(train_articles)
    if not questions:
        raise ValueError(f"{cfg.train}: no questions in its training articles ({len(data)} articles, "
                         f"{len(data) - len(train_articles)} of them held out)")
    if cfg.limit_questions and cfg.limit_questions > len(questions):
        raise ValueError(f"--limit-questions {cfg.limit_questions}: {cfg.train} has {len(questions)} training "
                         "questions; ask for at most that many, or leave it out to use them all")
    if cfg.limit_questions:
        rng = np.random.default_rng(cfg.seed)
        questions = [questions[i] for i in sorted(rng.choice(len(questions), cfg.limit_questions, replace=False))]
    left_out: dict[str, list] = {}
    windows, skipped = build_windows(questions, tokenizer, enc.max_seq_len, enc.stride, enc.max_answer_tokens, hard,
                                     left_out)
    warn_left_out(cfg.train, left_out, len(questions))
    if not windows:
        raise ValueError(f"{cfg.train}: no trainable questions in the training articles (none has an answer a "
                         f"window can hold: skipped {skipped})")
    log.info("training on %d questions in %d windows (skipped %s)", sum(len(w.questions) for w in windows),
             len(windows), skipped)
    return windows, skipped


def write_holdout(cfg: JobOptions, path: Path) -> Path:
    """Write the held-out articles of the training file as a SQuAD-format .json.gz (the validation set)."""
    _, held = cfg.holdout.split(load_squad(cfg.train))
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"version": "spanseek-holdout", "data": held}, f)
    return path


RUN_LOCK = "train.lock"  # a training run's lock in its --out (core.integrity.writer_lock)


@contextlib.contextmanager
def run_lock(out: Path, hold: bool = True) -> Iterator[None]:
    """Make ``out`` (and its missing parents) and hold its lock for a run's life (``hold`` False: a data-parallel
    rank that writes nothing): a second run into the same directory is refused at its start instead of mixing
    checkpoints with the first. A run that ends in an error before it wrote anything but the lock (a refused
    --backbone, say) leaves nothing it made: its lock file and the directories it made are removed; an --out that
    was there before is kept as it was."""
    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    if not hold:
        yield
        return
    there = {p.name for p in out.iterdir()}
    with writer_lock(out, name=RUN_LOCK) as locked:
        if not locked:
            if not os.access(out, os.W_OK):
                raise ValueError(f"--out {out} is not writable")
            raise ValueError(f"--out {out}: another run holds it (lock {out / RUN_LOCK}); wait for it to end or use "
                             "a new --out")
        try:
            yield
        except BaseException:
            if RUN_LOCK not in there:
                _remove_unused(out, there, made)
            raise


def _remove_unused(out: Path, there: set[str], made: list[Path]) -> None:
    """Remove the lock of a run that added nothing else to ``out`` (whose entries were ``there``), then the
    directories of ``made`` (deepest first) that are empty; while the lock is held, so no other run has taken it."""
    with contextlib.suppress(OSError):  # the run's own error is the one to report
        if {p.name for p in out.iterdir()} - there != {RUN_LOCK}:
            return
        (out / RUN_LOCK).unlink()
        for directory in made:
            directory.rmdir()  # OSError (not empty: another job wrote there meanwhile) ends the removal


def resume_point(out: Path, name: str = "last") -> Path | None:
    """The checkpoint a run into ``out`` resumes from: out/name if it holds a training state; where out/name is
    missing, what a run killed between the renames of ``save_checkpoint`` left: name.saving (complete once its state
    is there, as that is written last) or else name.old. None for a new run."""
    candidates = [out / name] if (out / name).exists() else [out / f"{name}.saving", out / f"{name}.old"]
    return next((path for path in candidates if (path / STATE).is_file()), None)


def examples_digest(windows: list[TrainWindow]) -> str:
    """SHA-1 of what a run trains on: each window's passage and place, and its questions with their gold tokens and
    answers (a resumed run must train on the same)."""
    h = hashlib.sha1()
    for w in windows:
        h.update(json.dumps([w.passage, w.first, w.questions, w.starts, w.ends, w.answers]).encode("utf-8"))
    return h.hexdigest()


def check_resume_data(out: Path, windows: list[TrainWindow], train: str) -> None:
    """Refuse to resume the run in ``out`` on other training examples than its checkpoint was trained on (an edited
    training file, or another one): it would go on from the old run's step, or, finished, change nothing while its
    summary named the new file. A checkpoint without the record (older runs) is resumed as before."""
    point = resume_point(out)
    record = trained_questions(point) if point is not None else None
    if record is None or not record.get("examples") or record["examples"] == examples_digest(windows):
        return
    ours = len({question_key(q) for w in windows for q in w.questions})
    raise ValueError(f"--out {out} holds a run trained on other questions ({record['questions']} of "
                     f"{record.get('source')}; this run has {ours} of {train}): use a new --out for a run on these "
                     f"questions, or remove {out} to start over")


def check_resume(out: Path, config: EncoderConfig) -> None:
    """Refuse to resume the run in ``out`` with a model of another encoder config than its checkpoint's (its
    weights would not fit), naming the settings that differ, or from a checkpoint whose files are cut short
    (``check_checkpoint``); before the run writes anything but its lock."""
    point = resume_point(out)
    if point is None:
        return
    check_checkpoint(point, WEIGHTS_NAME, out)

    def settings(c: EncoderConfig) -> dict[str, Any]:  # nested settings by their dotted name ("lora.r")
        flat: dict[str, Any] = {}
        for k, v in c.to_dict().items():
            flat |= {f"{k}.{sub}": w for sub, w in v.items()} if isinstance(v, dict) else {k: v}
        return flat

    ours, theirs = settings(config), settings(EncoderConfig.load(point / CONFIG_NAME))
    differ = [f"{k} {theirs.get(k)!r} (this run: {ours.get(k)!r})" for k in sorted(ours.keys() | theirs.keys())
              if ours.get(k) != theirs.get(k)]
    if differ:
        raise ValueError(f"--out {out} holds a run with other settings: {'; '.join(differ)}; use a new --out (or "
                         "resume with the same settings)")


TRAIN_CONFIG = "train_config.json"  # the settings a run was last started with, in its --out


def check_same_recipe(out: Path, now: dict[str, Any], recipe: tuple[str, ...]) -> None:
    """Refuse to resume the run in ``out`` with other ``recipe`` settings than it was started with (its
    ``TRAIN_CONFIG``; ``now``: this run's settings by name), naming them; resuming with another --lr ran on at the
    first one while the run's files recorded the second. A run without the file (older runs) resumes as before."""
    path = out / TRAIN_CONFIG
    if resume_point(out) is None or not path.is_file():
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    differ = [f"{key} {before[key]!r} (this run: {now[key]!r})" for key in recipe
              if key in before and json.loads(json.dumps(now[key])) != before[key]]
    if differ:
        raise ValueError(f"--out {out} holds a run started with other settings: {'; '.join(differ)}; resume with "
                         "the same ones (--epochs and --max-steps may change), or use a new --out")


def recover_checkpoint(out: Path, name: str = "last") -> None:
    """Put the checkpoint ``resume_point`` picks at out/name when a run was killed between the renames of
    ``save_checkpoint`` (out/name missing), so that the next save does not remove it."""
    point = resume_point(out, name)
    if point is not None and point != out / name:
        log.warning("%s is missing (a run was killed while saving it); resuming from %s", out / name, point)
        point.rename(out / name)


def save_checkpoint(model: PhraseModel, out: Path, name: str, state: dict | None,
                    trained: tuple[list[str], str, str] | None = None) -> None:
    """Save a checkpoint (and the optimizer state) to out/name, replacing it atomically; ``trained`` (the questions,
    the training file, the examples' digest) is recorded with it (``core.evaluate.TRAINED_QUESTIONS``).

    The new checkpoint is complete in out/name.saving (its state written last, by a rename, and flushed to disk)
    before the old one is moved aside, so a run killed between the two renames resumes from it (``resume_point``).
    A save that fails (a full disk) removes what it wrote, keeping the old checkpoint as it was; a full disk is an
    OSError naming out/name, "No space left on device", and that the run resumes from the checkpoint kept.
    """
    tmp = out / f"{name}.saving"
    final = out / name
    partial = (tmp, tmp.with_name(f"{tmp.name}.tmp"))  # (model.save writes name.saving.tmp, then renames it)
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
    try:
        model.save(tmp)
        if trained is not None:
            write_trained_questions(tmp, trained[0], trained[1], trained[2])
        if state is not None:
            # into a file object: its write raises the OSError (torch.save to a path turns a full disk into
            # "[enforce fail at inline_container.cc:672] . unexpected pos 90112 vs 90000")
            with open(tmp / f"{STATE}.tmp", "wb") as f:
                torch.save(state, f)
            (tmp / f"{STATE}.tmp").rename(tmp / STATE)
        fsync_path(tmp)
    except BaseException as e:
        for path in partial:  # neither holding the room the next save needs nor taken for a checkpoint
            shutil.rmtree(path, ignore_errors=True)
        if not no_space(e):
            raise
        kept = ("the checkpoint there before is kept: free some space and run the same command to resume from it"
                if resume_point(out, name) else "free some space and run the same command")
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} while saving the checkpoint; {kept}",
                      str(final)) from None
    old = out / f"{name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """torch's random state (dropout masks are drawn from it), saved with a checkpoint so that a resumed run draws
    what the uninterrupted run would have."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, torch.Tensor] | None, device: torch.device) -> None:
    """Restore what ``rng_state`` saved (nothing for a checkpoint written before it was saved)."""
    if state is None:
        return
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def optimizer_and_resume(
    model: PhraseModel, params: list, lr: float, weight_decay: float, warmup: float, total: int, out: Path
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, int, dict[str, Any]]:
    """AdamW with linear warm-up, then linear decay to 0 at ``total`` steps. If ``out/last`` holds a training state,
    the weights, optimizer, schedule and step are restored from it (a killed run resumes). Returns (opt, sched, step,
    the saved state or {}).
    """
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    warm = max(1, int(warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / max(1, total - warm))
    )
    step, state = 0, {}
    last = out / "last"
    if (last / STATE).exists():
        check_checkpoint(last, WEIGHTS_NAME, out)  # a damaged file is named, not a library's traceback
        state = read_state(last / STATE, remedy=f"remove {last} to start the run in {out} over")
        model.load_weights(last / WEIGHTS_NAME)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = state["step"]
        log.info("resumed from %s at step %d", last, step)
    return opt, sched, step, state


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
    trained = ([q for w in windows for q in w.questions], str(cfg.train), examples_digest(windows))
    check_resume_data(out, windows, str(cfg.train))
    opt, sched, step, state = optimizer_and_resume(model, params, cfg.lr, cfg.weight_decay, cfg.warmup, total, out)
    mode.load_state_dict(state)
    fast_dropout(model, device)  # on the CPU: the same dropout, its masks drawn 2.4x faster (trainer.dropout)
    teacher = None
    if cfg.teacher:  # the reader's logits of the windows the run visits, computed once (by the main rank) up front
        taught = visited_windows(windows, cfg.batch_windows, cfg.seed, total, dist.world)
        if dist.is_main:
            teacher_cache(cfg, taught, device, precision)
        if dist.enabled:
            torch.distributed.barrier()
        teacher = teacher_cache(cfg, taught, device, precision)
    prebatch = PreBatchCache(cfg.prebatch)
    if not dist.enabled:  # the state the main rank saved is its own: other ranks' queues and draws are not in it
        prebatch.load_state_dict(state.get("prebatch", []), device)
        set_rng_state(state.get("rng"), device)
    pre_on = int(cfg.prebatch_warmup * total)
    # a resumed run's summary covers the whole run: the parts before it kept their time and questions in the state
    before = RunSoFar.of(state, step if step < end else None)
    seen_q, t0, loss_ema = 0, time.perf_counter(), None
    bar = tqdm(total=total, initial=step, desc=mode.name, unit="step", disable=not (cfg.progress and dist.is_main))
    order: list[list[int]] = []
    order_epoch = -1
    stopper = StopAfterStep(end, after_loop(out, bool(cfg.val_questions)))
    with stopper if not dist.enabled else contextlib.nullcontext(stopper) as stop:  # Ctrl-C: a clean stop
        while step < end:
            epoch, pos = divmod(step, steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = epoch_batches(windows, cfg.batch_windows, cfg.seed + epoch), epoch
            batch = mode.batch([windows[i] for i in order[pos * dist.world + dist.rank]]).to(device)
            P = batch.n_windows
            targets = None
            if teacher is not None:
                width = batch.start_ok.shape[1]
                targets = tuple(t.to(device) for t in teacher_tensors(batch.windows, teacher, width, batch.content_shift))
            with autocast(device, precision):
                H, hard = mode.passages(batch)  # (P, T, d)
                q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
                pre = prebatch.negatives() if step >= pre_on else None
                gold_s, gold_e = H[batch.q_passage, batch.gold_start], H[batch.q_passage, batch.gold_end]
                others = None
                if dist.enabled:
                    others = (distributed.gather_others(gold_s, dist), distributed.gather_others(gold_e, dist))
                loss = phrase_loss(H, q_start, q_end, batch.start_ok[:P], batch.end_ok[:P], batch.q_passage,
                                   batch.gold_start, batch.gold_end, cfg.loss, pre=pre, hard=hard, others=others,
                                   max_answer_tokens=model.config.max_answer_tokens, teacher=targets)
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
            prebatch.push(gold_s.float(), gold_e.float())
            mode.after_step(batch, H, q_start, q_end)
            step += 1
            seen_q += len(batch.q_passage)
            loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
            bar.set_postfix(loss=f"{loss_ema:.3f}", qps=f"{seen_q / (time.perf_counter() - t0):.1f}")
            bar.update(1)
            stopping = stop.requested  # read once: the save below is the one the stop relies on
            if dist.is_main and (step % cfg.checkpoint_every == 0 or step == end or stopping):
                saved = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": step,
                         "prebatch": prebatch.state_dict(), "rng": rng_state(device),
                         **before.plus(time.perf_counter() - t0, seen_q).state()}
                save_checkpoint(model, out, "last", saved | mode.state_dict(), trained)
                checkpoint_saved(out)
            if dist.is_main and cfg.snapshot_every and step % cfg.snapshot_every == 0:
                snapshot = model.save(out / "snapshots" / f"step-{step:06d}")
                write_trained_questions(snapshot, *trained)
            if stopping:  # Ctrl-C or SIGTERM: this step finished and its checkpoint is saved
                stop.stop_here(step, out / "last")
    bar.close()
    run = before.plus(time.perf_counter() - t0, seen_q)
    if dist.enabled:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return {
        "steps": step,
        "train_questions": sum(len(w.questions) for w in windows),
        "train_windows": len(windows),
        "seconds": round(run.seconds, 1),
        "questions_per_second": round(run.questions / run.seconds, 2) if run.questions and run.seconds > 0 else None,
        **({"resumed_at": list(run.resumed_at)} if run.resumed_at else {}),
        "precision": precision,
        "device": str(device),
        "world_size": dist.world,
    }


def finish(cfg: TrainingOptions, summary: dict[str, Any], val_index: str | None = None) -> dict[str, Any]:
    """Evaluate OUT/last on ``val_questions`` held-out questions (on ``val_index`` if given, else on an index built
    of the held-out articles) and write OUT/summary.json."""
    out = Path(cfg.out)
    if cfg.val_questions:
        from spanseek.indexer.evaluate import run_eval

        val = write_holdout(cfg, out / "validation.json.gz")
        summary["validation"] = run_eval(val, out / "last", index=val_index, reading_comprehension=True,
                                         limit=cfg.val_questions, progress=cfg.progress)
    write_json_atomic(out / SUMMARY, summary)
    return summary
