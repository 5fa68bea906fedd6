"""The demo index cache of `make test-docker` keeps what other clones and sources built. Needs no Docker engine:
the build is a stand-in that writes what ``spanseek index build`` writes last (the manifest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docker import conftest


@pytest.fixture
def builds(monkeypatch) -> list[list[str]]:
    """The `docker run` commands of the builds, each writing the manifest of the index it names (``--out``)."""
    made: list[list[str]] = []

    def build(cmd: list[str], **kwargs: object) -> None:
        made.append(cmd)
        mount = next(v for v in cmd if v.endswith(":/out")).removesuffix(":/out")
        out = Path(mount) / Path(cmd[cmd.index("--out") + 1]).name
        out.mkdir(parents=True, exist_ok=True)
        (out / "manifest.json").write_text("{}")

    monkeypatch.setattr(conftest, "run", build)
    return made


def test_building_the_demo_index_keeps_other_sources_indexes_and_resumes_its_own(tmp_path, builds, capsys):
    """Another clone's (or an earlier commit's) demo index in the cache is kept and named with its size, and a build
    of this one cut short is resumed in place: both were deleted before the build."""
    other = tmp_path / "demo-index-0123456789abcdef"
    other.mkdir()
    (other / "manifest.json").write_text("{}")
    (other / "tokens.npy").write_bytes(b"\0" * 3_000_000)
    key = conftest.demo_index_key()
    partial = tmp_path / f"demo-index-{key}"
    partial.mkdir()
    (partial / "shard-0.npy").write_bytes(b"done before the cut")
    index = conftest.cached_demo_index(tmp_path, "spanseek:cpu")
    assert index == partial and (index / "manifest.json").exists() and len(builds) == 1
    assert (partial / "shard-0.npy").read_bytes() == b"done before the cut"  # resumed, not started over
    assert (other / "tokens.npy").stat().st_size == 3_000_000  # another's cache, untouched
    assert "demo-index-0123456789abcdef (3 MB)" in capsys.readouterr().out
    assert conftest.cached_demo_index(tmp_path, "spanseek:cpu") == index and len(builds) == 1  # reused
