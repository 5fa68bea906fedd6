"""Data-parallel training on CPU (gloo): gradient averaging, gathering other ranks' golds, a 2-process run."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.conftest import make_squad


def _free_ports(n: int) -> tuple[int, ...]:
    """``n`` distinct free ports (each socket held until all are bound)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return tuple(s.getsockname()[1] for s in sockets)
    finally:
        for s in sockets:
            s.close()


def _collectives(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from spanseek.trainer.distributed import DistInfo, all_reduce_mean, gather_others

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    g = [torch.full((2, 3), float(rank + 1)), torch.full((4,), 10.0 * (rank + 1))]
    all_reduce_mean(g, world)
    rows = torch.full((rank + 1, 2), float(rank))  # rank 0 has 1 row, rank 1 has 2 rows
    others = gather_others(rows, DistInfo(rank=rank, world=world))
    torch.save({"g": g, "others": others}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_all_reduce_mean_and_gather_others(two_ranks):
    r0, r1 = (torch.load(two_ranks / "collectives" / f"rank{r}.pt") for r in (0, 1))
    for res in (r0, r1):
        assert torch.equal(res["g"][0], torch.full((2, 3), 1.5))
        assert torch.equal(res["g"][1], torch.full((4,), 15.0))
    assert torch.equal(r0["others"], torch.ones(2, 2))  # rank 1's two rows
    assert torch.equal(r1["others"], torch.zeros(1, 2))  # rank 0's one row


def _train(rank: int, world: int, port: int, squad: str, backbone: str, out: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    from spanseek.core.config import EncoderConfig
    from spanseek.trainer.distributed import DistInfo
    from spanseek.trainer.train import TrainConfig, train_phrase

    enc = EncoderConfig(backbone=backbone, max_seq_len=32, stride=8, max_answer_tokens=6)
    cfg = TrainConfig(train=squad, out=out, encoder=enc, max_steps=3, batch_windows=4, val_questions=0,
                      precision="fp32", device="cpu", progress=False, dist=DistInfo(rank=rank, world=world))
    summary = train_phrase(cfg)
    torch.save(summary, f"{out}/summary-rank{rank}.pt")


def _collectives_then_train(rank: int, world: int, ports: tuple[int, int], squad: str, backbone: str,
                            out: str) -> None:
    _collectives(rank, world, ports[0], f"{out}/collectives")
    _train(rank, world, ports[1], squad, backbone, out)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_backbone) -> Path:
    """The folder of one pair of processes (gloo) that ran ``_collectives`` and then ``_train``: the start-up of a
    process pair, and the imports in each, are most of either."""
    out = tmp_path_factory.mktemp("two-ranks")
    squad = out / "squad.json.gz"
    with gzip.open(squad, "wt", encoding="utf-8") as f:
        json.dump(make_squad(n_articles=10), f)
    (out / "collectives").mkdir()
    mp.spawn(_collectives_then_train, args=(2, _free_ports(2), str(squad), str(tiny_backbone), str(out)), nprocs=2,
             join=True)
    return out


def test_two_process_training_run(two_ranks):
    main = torch.load(two_ranks / "summary-rank0.pt")
    assert main["world_size"] == 2 and main["steps"] == 3
    assert (two_ranks / "last" / "weights.safetensors").exists()
    assert torch.load(two_ranks / "summary-rank1.pt") == {"rank": 1, "steps": 3}
