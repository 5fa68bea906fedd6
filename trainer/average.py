"""Checkpoint averaging: one model whose weights are the mean of several checkpoints of the same config.

Averaging the weights of checkpoints that share a starting point (the snapshots of one run, or runs continued
from the same model) lands in a flatter region of the loss than any one of them (Izmailov et al. 2018, stochastic
weight averaging; Wortsman et al. 2022, model soups) and costs no training.

LoRA factors are not averaged one by one: B·A is invariant to B → B·M, A → M⁻¹·A, so the factors of two runs need
not line up even when their products do. Instead each adapted layer's weight update ΔW = B·A is averaged and the
mean is factored back to the configured rank r by SVD (B = U_r·√S_r, A = √S_r·V_rᵀ). The mean of k rank-r updates
has rank ≤ k·r; the part beyond rank r is dropped and reported (``truncation``: the largest relative Frobenius
norm dropped over all layers). Everything else (heads, full weights) is averaged as is. Readers (``core.reader``:
full fine-tunes) are averaged weight by weight, the same way: the snapshots of one reader run, for instance.

``widen_lora`` is the other LoRA surgery a continued run needs: it gives a trained model's adapters a larger rank
r' > r without changing what the model computes. Each A gets r' - r new rows (peft's random init) and each B
r' - r zero columns, so B'·A' = B·A, and alpha grows with the rank so that the scale alpha / r stays the same.
Training then uses the new directions from the first step.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from spanseek.core.config import EncoderConfig, ReaderConfig
from spanseek.core.model import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    ModelError,
    PhraseModel,
    check_model_out,
    phrase_fingerprint,
    read_weights,
    resolve_model,
)
from spanseek.core.reader import READER_CONFIG_NAME, READER_WEIGHTS_NAME, ReaderModel, resolve_reader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AverageReport:
    out: str
    checkpoints: list[str]
    weights: list[float]
    truncation: float  # largest relative norm of an averaged LoRA update dropped by the rank-r refactoring
    # where the new model's token vectors differ from a checkpoint's: that the indexes built with it need a rebuild
    indexes: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not (k == "indexes" and v is None)}


def _lora_pairs(state: dict[str, torch.Tensor]) -> list[tuple[str, str]]:
    return [(k, k.replace("lora_A", "lora_B")) for k in sorted(state) if "lora_A" in k]


def average_state(
    states: list[dict[str, torch.Tensor]], weights: list[float], rank: int | None
) -> tuple[dict[str, torch.Tensor], float]:
    """Weighted mean of state dicts with the same keys. With ``rank``, LoRA A/B pairs are averaged through their
    products and refactored to that rank. Returns the averaged state and the largest truncation (0 without LoRA)."""
    keys = set(states[0])
    for i, s in enumerate(states[1:], start=1):
        if set(s) != keys:
            diff = sorted(keys ^ set(s))
            raise ModelError(f"checkpoint {i} has other weights than checkpoint 0, e.g. {diff[:3]}")
    avg: dict[str, torch.Tensor] = {}
    truncation = 0.0
    pairs = _lora_pairs(states[0]) if rank is not None else []
    in_pairs = {k for pair in pairs for k in pair}
    for ka, kb in pairs:
        delta = sum(w * (s[kb].double() @ s[ka].double()) for w, s in zip(weights, states, strict=True))
        u, sv, vh = torch.linalg.svd(delta, full_matrices=False)
        total = sv.square().sum()
        if total > 0:
            truncation = max(truncation, float((sv[rank:].square().sum() / total).sqrt()))
        root = sv[:rank].sqrt()
        dtype = states[0][ka].dtype
        avg[kb] = (u[:, :rank] * root).to(dtype).contiguous()
        avg[ka] = (root[:, None] * vh[:rank]).to(dtype).contiguous()
    for k in sorted(keys - in_pairs):
        avg[k] = sum(w * s[k].double() for w, s in zip(weights, states, strict=True)).to(states[0][k].dtype)
    return avg, truncation


def average_checkpoints(
    refs: list[str], out: str | Path, weights: list[float] | None = None, dtype: torch.dtype | None = None
) -> AverageReport:
    """Average the checkpoints ``refs`` (directories or ``default``) into the model directory ``out``, its weights
    stored as ``dtype`` (default float32). One checkpoint is allowed: that converts it (e.g. to float16)."""
    if not refs:
        raise ModelError("no checkpoints to average")
    weights = [1.0] * len(refs) if weights is None else list(weights)
    if len(weights) != len(refs):
        raise ModelError(f"--weights: {len(weights)} weights for {len(refs)} checkpoints; give one per checkpoint")
    if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise ModelError(f"--weights must be non-negative with a positive sum, got {weights}")
    weights = [w / sum(weights) for w in weights]
    readers = [(Path(r) / READER_CONFIG_NAME).is_file() for r in refs]
    if all(readers):
        return average_readers(refs, out, weights)
    if any(readers):
        raise ModelError(f"{refs[readers.index(True)]}: a reader, and {refs[readers.index(False)]} is a phrase model; "
                         "readers are averaged with readers and phrase models with phrase models")
    paths = [resolve_model(r) for r in refs]
    check_model_out(out, *paths)  # before reading any weights
    configs = [EncoderConfig.load(p / CONFIG_NAME) for p in paths]
    check_same_config(refs, configs, "model")
    states = []
    for p in paths:
        if not (p / WEIGHTS_NAME).is_file():
            raise ModelError(f"{p}: no {WEIGHTS_NAME} (an untrained config cannot be averaged)")
        states.append(read_weights(p / WEIGHTS_NAME))
    config = configs[0]
    rank = config.lora.r if config.weights == "lora" else None
    avg, truncation = average_state(states, weights, rank) if len(states) > 1 else (states[0], 0.0)
    model = PhraseModel(config)
    unexpected = model.load_state_dict(avg, strict=False).unexpected_keys
    if unexpected:
        raise ModelError(f"{refs[0]}: weights do not fit its config (unexpected: {unexpected[:3]} ...)")
    model.save(out, dtype=dtype)
    return AverageReport(out=str(out), checkpoints=[str(p) for p in paths], weights=weights, truncation=truncation,
                         indexes=indexes_to_rebuild(refs, paths, Path(out)))


def indexes_to_rebuild(refs: list[str], paths: list[Path], out: Path) -> str | None:
    """What an averaged (or converted) model ``out`` means for the indexes built with its checkpoints ``refs``: where
    its phrase encoder differs from one's (another mean; float16 or bfloat16 weights, whose token vectors differ in
    their last bits), those indexes refuse it, as they refuse any model but the one that built them, and must be
    rebuilt with it; None where it is the same as each (a float32 copy)."""
    mine = phrase_fingerprint(out)
    differ = [ref for ref, path in zip(refs, paths, strict=True) if phrase_fingerprint(path) != mine]
    if not differ:
        return None
    built = " or ".join(differ)
    note = (f"indexes built with {built} do not serve {out} (its token vectors differ): rebuild them with `spanseek "
            f"index build --model {out}`, or keep searching them with {built}")
    log.warning("%s", note)
    return note


def _flat(config: dict, prefix: str = "") -> dict[str, object]:
    """A config's fields as dotted names (``lora.r``) to values, nested dictionaries flattened."""
    flat: dict[str, object] = {}
    for key, value in config.items():
        flat |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return flat


def check_same_config(refs: list[str], configs: list, kind: str) -> None:
    """Refuse checkpoints whose configs (dataclasses) differ, naming the pair and each field's two values."""
    ours = _flat(dataclasses.asdict(configs[0]))
    for ref, cfg in zip(refs[1:], configs[1:], strict=True):
        theirs = _flat(dataclasses.asdict(cfg))
        fields = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        if fields:
            diff = "; ".join(f"{k}: {ours.get(k)} in {refs[0]}, {theirs.get(k)} in {ref}" for k in fields)
            raise ModelError(f"{ref}: its {kind} config differs from {refs[0]}'s ({diff}); only checkpoints of one "
                             f"{kind} config can be averaged")


def average_readers(refs: list[str], out: str | Path, weights: list[float]) -> AverageReport:
    """The readers ``refs`` (reader directories of one config) averaged weight by weight (``weights``: summing to 1)
    into the reader directory ``out`` (fp16, as every reader is stored)."""
    paths = [resolve_reader(r) for r in refs]
    check_model_out(out, *paths, config_name=READER_CONFIG_NAME)
    configs = [ReaderConfig.load(p / READER_CONFIG_NAME) for p in paths]
    check_same_config(refs, configs, "reader")
    states = [read_weights(p / READER_WEIGHTS_NAME) for p in paths]
    avg, _ = average_state([{n: t.float() for n, t in s.items()} for s in states], weights, None)
    model = ReaderModel(configs[0])
    if set(avg) != set(model.saved_state()):
        raise ModelError(f"{refs[0]}: weights do not fit its reader config")
    model.load_state_dict(avg, strict=False)
    model.save(out)
    return AverageReport(out=str(out), checkpoints=[str(p) for p in paths], weights=weights, truncation=0.0)


def widen_lora(ref: str | Path, r: int, seed: int = 0) -> PhraseModel:
    """The LoRA model ``ref`` with its adapters widened to rank ``r`` (same outputs; new ranks start at zero)."""
    path = resolve_model(ref)
    config = EncoderConfig.load(path / CONFIG_NAME)
    if config.weights != "lora":
        raise ModelError(f"{ref}: only LoRA adapters can be widened (this model saves full weights)")
    old = config.lora
    if r <= old.r:
        raise ModelError(f"{ref}: its LoRA rank is {old.r}; widening needs a larger rank, got {r}")
    if (old.alpha * r) % old.r:
        raise ModelError(f"{ref}: alpha {old.alpha} * {r} / {old.r} is not a whole number; pick a rank that keeps "
                         "the scale alpha / r exact")
    if not (path / WEIGHTS_NAME).is_file():
        raise ModelError(f"{path}: no {WEIGHTS_NAME} (an untrained config has nothing to widen)")
    wide = replace(config, lora=replace(old, r=r, alpha=old.alpha * r // old.r))
    torch.manual_seed(seed)
    model = PhraseModel(wide)
    state = model.state_dict()
    for name, t in read_weights(path / WEIGHTS_NAME).items():
        if name not in state:
            raise ModelError(f"{ref}: weight {name} does not fit its own config")
        if "lora_A" in name:
            state[name][: old.r] = t  # rows r.. keep their random init
        elif "lora_B" in name:
            state[name].zero_()
            state[name][:, : old.r] = t
        else:
            state[name].copy_(t)
    model.load_state_dict(state)
    return model
