"""Checkpoint averaging: one model whose weights are the mean of several checkpoints of the same config.

Averaging the weights of checkpoints that share a starting point (the snapshots of one run, or runs continued
from the same model) lands in a flatter region of the loss than any one of them (Izmailov et al. 2018, stochastic
weight averaging; Wortsman et al. 2022, model soups) and costs no training.

LoRA factors are not averaged one by one: B·A is invariant to B → B·M, A → M⁻¹·A, so the factors of two runs need
not line up even when their products do. Instead each adapted layer's weight update ΔW = B·A is averaged and the
mean is factored back to the configured rank r by SVD (B = U_r·√S_r, A = √S_r·V_rᵀ). The mean of k rank-r updates
has rank ≤ k·r; the part beyond rank r is dropped and reported (``truncation``: the largest relative Frobenius
norm dropped over all layers). Everything else (heads, full weights) is averaged as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from core.config import EncoderConfig
from core.model import CONFIG_NAME, WEIGHTS_NAME, ModelError, PhraseModel, resolve_model


@dataclass(frozen=True)
class AverageReport:
    out: str
    checkpoints: list[str]
    weights: list[float]
    truncation: float  # largest relative norm of an averaged LoRA update dropped by the rank-r refactoring

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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


def average_checkpoints(refs: list[str], out: str | Path, weights: list[float] | None = None) -> AverageReport:
    """Average the checkpoints ``refs`` (directories or ``default``) into the model directory ``out``."""
    if len(refs) < 2:
        raise ModelError(f"averaging needs at least two checkpoints, got {len(refs)}")
    weights = [1.0] * len(refs) if weights is None else list(weights)
    if len(weights) != len(refs):
        raise ModelError(f"{len(weights)} weights for {len(refs)} checkpoints")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ModelError(f"weights must be non-negative with a positive sum, got {weights}")
    weights = [w / sum(weights) for w in weights]
    paths = [resolve_model(r) for r in refs]
    configs = [EncoderConfig.load(p / CONFIG_NAME) for p in paths]
    for ref, cfg in zip(refs[1:], configs[1:], strict=True):
        if cfg.to_dict() != configs[0].to_dict():
            theirs, ours = cfg.to_dict(), configs[0].to_dict()
            fields = sorted(k for k in ours if ours[k] != theirs.get(k))
            raise ModelError(f"{ref}: its config differs from {refs[0]}'s in {fields}; only checkpoints of one "
                             "model config can be averaged")
    states = []
    for p in paths:
        if not (p / WEIGHTS_NAME).is_file():
            raise ModelError(f"{p}: no {WEIGHTS_NAME} (an untrained config cannot be averaged)")
        states.append(load_file(str(p / WEIGHTS_NAME)))
    config = configs[0]
    rank = config.lora.r if config.weights == "lora" else None
    avg, truncation = average_state(states, weights, rank)
    model = PhraseModel(config)
    unexpected = model.load_state_dict(avg, strict=False).unexpected_keys
    if unexpected:
        raise ModelError(f"{refs[0]}: weights do not fit its config (unexpected: {unexpected[:3]} ...)")
    model.save(out)
    return AverageReport(out=str(out), checkpoints=[str(p) for p in paths], weights=weights, truncation=truncation)
