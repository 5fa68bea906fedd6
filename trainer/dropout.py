"""Dropout for training on the CPU, with the same distribution as ``torch.nn.Dropout`` at a fraction of its cost.

On the CPU, ``torch.nn.Dropout`` draws its mask with ``bernoulli_`` one element at a time from the Mersenne
Twister: on a (10,240, 384) float32 activation (a training step's 40 windows of 256 tokens) that takes 34 ms, three
times the 11 ms of the 384 x 384 linear layer whose input it drops (2-core Xeon, AVX-512). LoRA drops the input of
every adapted layer (six a BERT layer), so a quarter of a phrase-training step went into drawing masks.

``FastDropout`` draws the same Bernoulli mask from numpy's PCG64 as 16-bit integers (an element is dropped when
its draw is below ``round(p * 65536)``, so the drop rate is p to within 1 / 131072) and keeps it as one byte an
element for the backward pass, as torch's does: 12 ms for the same activation. Its stream is seeded from torch's
generator at each call, so ``torch.manual_seed`` makes a run repeatable as before (with other masks than torch's).
``fast_dropout(model)`` swaps it in for every ``nn.Dropout`` of a model trained on the CPU; on a GPU torch's own
dropout is fast and is kept.

Attention probabilities are dropped too (BERT: p = 0.1), inside ``scaled_dot_product_attention``, which on the CPU
then leaves its fused kernel for the unfused one and draws a (B, heads, T, T) mask with ``bernoulli_``: 2.8 s of a
reader training step without it, 7.5 s with it. ``fast_dropout`` also gives the model's transformers backbones the
attention function ``ATTENTION`` (registered with transformers' ``AttentionInterface``, with sdpa's masks): with
dropout it computes the same attention, softmax(q k^T * scaling + mask) v, with the probabilities dropped by
``FastDropout``'s draw; without dropout (eval mode) it is sdpa itself.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

DRAW_LEVELS = 1 << 16
ATTENTION = "spanseek_fast_dropout"  # the attention function fast_dropout gives a backbone (see above)


def dropout_threshold(p: float) -> int:
    """The 16-bit draw below which an element is dropped: ``round(p * 65536)``."""
    return int(round(p * DRAW_LEVELS))


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A bool mask of ``shape``, each element True (kept) with probability 1 - p, independently; seeded from torch's
    default generator."""
    n = int(np.prod(shape))
    seed = int(torch.randint(0, 2**62, (1,)).item())
    raw = np.random.PCG64(seed).random_raw((n + 3) // 4)  # 64 random bits give four 16-bit draws
    return torch.from_numpy(raw.view(np.uint16)[:n] >= dropout_threshold(p)).view(shape)


def _masked(x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """x * keep * scale; the bool mask read as bytes and widened first (a float-by-bool product is 2x slower)."""
    return (x * keep.view(torch.uint8).to(x.dtype)).mul_(scale)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:  # type: ignore[override]
        keep = keep_mask(x.shape, p)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _masked(x, keep, scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (keep,) = ctx.saved_tensors
        return _masked(grad, keep, ctx.scale), None


class FastDropout(nn.Module):
    """``nn.Dropout(p)`` drawn as the module docstring says (CPU tensors); in eval mode, or at p = 0, the identity."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return x if not self.training or self.p == 0.0 else nn.functional.dropout(x, self.p, True)
        return _Dropout.apply(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def dropout_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention function interface: (B, heads, T, d) query, key, value -> (B, T, heads, d). sdpa
    itself without dropout; with it, the attention computed here with ``FastDropout``'s draw on the probabilities.
    ``attention_mask`` is sdpa's: None, a bool mask (True: attend) or an additive float one."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # what this function does not compute itself goes to sdpa: causal attention, position biases, grouped heads
    other = (getattr(module, "is_causal", False) or kwargs.get("is_causal") or kwargs.get("position_bias") is not None
             or getattr(module, "num_key_value_groups", 1) > 1)
    if dropout == 0.0 or not module.training or query.device.type != "cpu" or other:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scores = torch.matmul(query, key.transpose(-2, -1)) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = (scores.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool
                  else scores + attention_mask)
    probs = torch.softmax(scores, dim=-1)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attends = attention_mask.any(dim=-1, keepdim=True)
        if not bool(attends.all()):  # a query that may attend to nothing reads zeros, as sdpa's does (not NaN)
            probs = probs.masked_fill(~attends, 0.0)
    probs = _Dropout.apply(probs, dropout)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


def _register_attention() -> bool:
    """Register ``dropout_attention`` (with sdpa's masks) as ``ATTENTION``; False where this transformers has no
    attention interface (older releases), whose models then keep their own attention."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:
        return False
    AttentionInterface.register(ATTENTION, dropout_attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return True


def fast_dropout(model: nn.Module, device: torch.device | str) -> int:
    """Swap ``FastDropout`` in for every ``nn.Dropout`` with p > 0 of ``model`` when it trains on the CPU, and give
    its transformers backbones that use sdpa the attention function ``ATTENTION``; returns how many dropout modules
    were swapped (0 on any other device)."""
    if torch.device(device).type != "cpu":
        return 0
    from transformers import PreTrainedModel

    if _register_attention():
        for module in model.modules():
            if (isinstance(module, PreTrainedModel) and module.config._attn_implementation == "sdpa"
                    and not getattr(module.config, "is_decoder", False) and hasattr(module, "set_attn_implementation")):
                module.set_attn_implementation(ATTENTION)
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout and child.p > 0:
                replacement = FastDropout(child.p)
                replacement.train(child.training)
                setattr(parent, name, replacement)
                swapped += 1
    return swapped
