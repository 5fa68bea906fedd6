"""Multi-process data-parallel training (``torchrun --nproc_per_node N spanseek train phrase ...``).

Each rank encodes its own batch; the gold start/end vectors of the other ranks' questions are all-gathered
(without gradient) and join the in-batch negatives, so the effective batch grows with the number of GPUs.
Gradients of the trainable weights (LoRA adapters and heads, or all weights) are averaged with one flattened
all-reduce per step. NCCL on CUDA, gloo on CPU: the same code runs on a laptop with two processes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from spanseek.trainer.arguments import DistInfo


def init(info: DistInfo, device_type: str) -> None:
    """Join the process group (torchrun's env:// rendezvous) when more than one process runs."""
    if info.enabled and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")


def all_reduce_mean(grads: list[torch.Tensor], world: int) -> None:
    """Average gradients across ranks in place, in one flattened all-reduce."""
    if world == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def gather_others(x: torch.Tensor, info: DistInfo) -> torch.Tensor | None:
    """Rows of ``x`` from every other rank, detached: (sum of other ranks' rows, d). Rows may differ per rank."""
    if not info.enabled:
        return None
    n = torch.tensor([x.shape[0]], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(info.world)]
    dist.all_gather(sizes, n)
    most = int(max(s.item() for s in sizes))
    padded = torch.zeros((most, *x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x.detach()
    parts = [torch.zeros_like(padded) for _ in range(info.world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s.item())] for r, (p, s) in enumerate(zip(parts, sizes, strict=True)) if r != info.rank])
