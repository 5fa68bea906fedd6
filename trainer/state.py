"""The training state a checkpoint keeps beside its weights (OUT/last/trainer_state.pt): the optimizer and its
schedule, the step, the pre-batch queue, torch's random state and the run's time so far; made new for a new run and
restored for a resumed one, so that a resumed run goes on as the uninterrupted run would have.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (resumes from runs/phrase/last)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from spanseek.core.model import WEIGHTS_NAME, PhraseModel
from spanseek.trainer.checkpoints import STATE, check_checkpoint, read_state
from spanseek.trainer.losses import PreBatchCache
from spanseek.trainer.summary import RunSoFar

log = logging.getLogger(__name__)


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


def training_state(opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR, step: int,
                   prebatch: PreBatchCache, device: torch.device, run: RunSoFar) -> dict[str, Any]:
    """What a checkpoint saves of the run at ``step`` (``optimizer_and_resume`` and the loop read it back)."""
    return {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": step,
            "prebatch": prebatch.state_dict(), "rng": rng_state(device), **run.state()}
