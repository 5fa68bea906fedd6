"""A checkpoint save that meets a full disk (``trainer.checkpoints.save_checkpoint``): one OSError naming OUT/last and "No
space left on device", the checkpoint before it kept byte for byte and resumed from, and nothing half-written left
to take the room or be taken for a checkpoint. (Reproduced on a 2 MB tmpfs: torch.save to a path said only
"[enforce fail at inline_container.cc:672] . unexpected pos 90112 vs 90000" and left OUT/last.saving behind.)

    .venv/bin/python -m pytest -q tests/trainer/test_full_disk.py
"""

from __future__ import annotations

import builtins
import errno
import os

import pytest
import torch
from safetensors import SafetensorError

from spanseek.core import model as model_module
from spanseek.core.model import PhraseModel
from spanseek.trainer import checkpoints
from spanseek.trainer.checkpoints import STATE, check_checkpoint, read_state

ROOM = 4096  # bytes the disk takes of a file before it is full


class _FillingFile:
    """A file on a disk that fills up: its writes past ``ROOM`` bytes raise ENOSPC, as a file object's do."""

    def __init__(self, f):
        self.f, self.written = f, 0

    def write(self, data) -> int:
        if self.written + len(data) > ROOM:
            self.f.write(bytes(data)[:ROOM - self.written])
            self.written = ROOM
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _state_on_a_full_disk(monkeypatch):
    monkeypatch.setattr(checkpoints, "open", lambda path, mode="r": _FillingFile(builtins.open(path, mode)), raising=False)


def _weights_on_a_full_disk(monkeypatch):
    def save_file(tensors, path):
        with open(path, "wb") as f:
            f.write(b"\0" * ROOM)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(model_module, "save_file", save_file)


@pytest.mark.parametrize("full", [_state_on_a_full_disk, _weights_on_a_full_disk], ids=["state", "weights"])
def test_a_save_on_a_full_disk_keeps_the_checkpoint_before_it(tmp_path, tiny_config, monkeypatch, full):
    out = tmp_path / "run"
    out.mkdir()
    torch.manual_seed(0)
    model = PhraseModel(tiny_config)
    checkpoints.save_checkpoint(model, out, "last", {"step": 10, "weights": torch.randn(4096)})
    before = {p.name: p.read_bytes() for p in (out / "last").iterdir()}

    full(monkeypatch)
    with pytest.raises(OSError) as e:
        checkpoints.save_checkpoint(model, out, "last", {"step": 20, "weights": torch.randn(4096)})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out / "last"), e.value
    assert e.value.strerror.startswith("No space left on device while saving the checkpoint; the checkpoint there "
                                       "before is kept"), e.value.strerror
    monkeypatch.undo()

    assert sorted(p.name for p in out.iterdir()) == ["last"]  # no last.saving, last.saving.tmp
    assert {p.name: p.read_bytes() for p in (out / "last").iterdir()} == before
    assert checkpoints.resume_point(out) == out / "last"
    check_checkpoint(out / "last", model_module.WEIGHTS_NAME, out)
    assert read_state(out / "last" / STATE)["step"] == 10


def test_a_first_save_on_a_full_disk_leaves_nothing_to_resume_from(tmp_path, tiny_config, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    _state_on_a_full_disk(monkeypatch)
    with pytest.raises(OSError, match="while saving the checkpoint; free some space and run the same command:"):
        checkpoints.save_checkpoint(PhraseModel(tiny_config), out, "last", {"step": 10, "weights": torch.randn(4096)})
    monkeypatch.undo()
    assert list(out.iterdir()) == [] and checkpoints.resume_point(out) is None


def test_another_failure_of_a_save_is_raised_as_it_was_and_cleaned_up(tmp_path, tiny_config, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()

    def refused(tensors, path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(model_module, "save_file", refused)
    with pytest.raises(PermissionError):
        checkpoints.save_checkpoint(PhraseModel(tiny_config), out, "last", None)
    assert list(out.iterdir()) == []
