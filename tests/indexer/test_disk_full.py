"""A disk that fills up during a write (no mount needed: the kernel's file size limit, or a write made to fail):
the command names the file and "No space left", what was written before stays intact, and nothing half written is
left to fill the disk or to be taken for data later.

    .venv/bin/python -m pytest -q tests/indexer/test_disk_full.py
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from spanseek.core import phrase_index

NO_SPACE = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a file object's write raises it: no file named


@contextlib.contextmanager
def file_size_limit(nbytes: int):
    """Writes past ``nbytes`` of a file are cut short, then refused (EFBIG), as a disk that fills up does."""
    resource = pytest.importorskip("resource")
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the kernel's signal ends the process)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def entry(i: int) -> dict:
    return {"op": "upsert", "docs": [{"id": f"d{i}", "title": "t", "paragraphs": ["In 1200 Alba built a castle. " * 40]}]}


def faiss_disk_full(index, path) -> None:
    """``faiss.write_index`` on a full disk: part of the file written, then faiss's own error."""
    Path(path).write_bytes(b"\0" * 100)
    raise RuntimeError(f"Error in void faiss::write_index(const Index*, IOWriter*, int) at index_write.cpp:499: "
                       f"Error: 'ret == (size * 4)' failed: write error in {path}: 100 != 4096 (No space left on device)")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE cuts writes short as described on Linux")
def test_a_log_write_the_disk_refuses_is_cut_back_and_never_replayed(tmp_path):
    """The refused write's first part reached the file: it is cut off, so it is neither flushed with the next write
    (a write the client was told failed, replayed after a restart) nor left torn before the next line (damage)."""
    from spanseek.indexer.wal import WriteAheadLog, read_entries

    path = tmp_path / "wal" / "wal-000001.jsonl"
    wal = WriteAheadLog(path)
    wal.append(entry(0))
    acknowledged = path.read_bytes()
    with file_size_limit(len(acknowledged) + 100), pytest.raises(OSError) as refused:  # part of the line fits
        wal.append(entry(1))
    assert refused.value.filename == str(path) and refused.value.errno == errno.EFBIG
    assert path.read_bytes() == acknowledged and wal.size == len(acknowledged)
    assert wal.append(entry(2)) == path.stat().st_size  # space again: the log goes on
    assert [e["docs"][0]["id"] for e in read_entries(path, repair=False)] == ["d0", "d2"]


# numpy's own (np.save allocates the array's bytes first, and names no errno)
NUMPY_NO_SPACE = OSError("Not enough free space to write 96 bytes after offset 128")
# numpy's where it allocates nothing first (tmpfs, a file size limit): the write cut short, in items, no errno
NUMPY_SHORT_WRITE = OSError("8125824 requested and 1521600 written")


@pytest.mark.parametrize("error", [NO_SPACE, NUMPY_NO_SPACE, NUMPY_SHORT_WRITE], ids=["errno", "numpy", "short"])
def test_a_shard_the_disk_cannot_hold_names_its_file_and_leaves_no_part(tmp_path, monkeypatch, error):
    from spanseek.indexer import shards

    def save(file, array):  # the disk fills up inside the shard's vectors
        Path(file).write_bytes(b"\x93NUMPY partial")
        raise error

    monkeypatch.setattr(shards.np, "save", save)
    dest = tmp_path / "shards" / "000000"
    arrays = {"vectors": np.zeros((3, 4), np.float16)}
    monkeypatch.setattr(shards, "encode_passages", lambda encoder, toks, progress=None: arrays)
    monkeypatch.setattr(shards, "tokenize_passages", lambda tokenizer, texts: [])
    with pytest.raises(OSError, match="No space left on device") as failed:
        shards.encode_shard(None, None, ["a passage"], dest, "key")
    assert failed.value.filename == str(dest.with_name("000000.tmp") / "vectors.npy")
    assert list((tmp_path / "shards").iterdir()) == []  # the part of the shard is removed, its space freed


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE cuts writes short as described on Linux")
def test_a_shard_cut_short_by_the_file_size_limit_is_named_as_one(tmp_path, monkeypatch):
    """Past a file size limit (or on a full tmpfs) np.save writes part of the array and says "1000000 requested and
    12484 written": `index build` ended with that line alone, naming neither the file nor the limit. It names both
    now: the limit as the system does ("File too large", EFBIG), not as a full disk (numpy's words alone, without a
    limit reached, stay "No space left on device": test_a_shard_the_disk_cannot_hold_names_its_file_and_leaves_no_part)."""
    from spanseek.indexer import shards

    dest = tmp_path / "shards" / "000000"
    arrays = {"vectors": np.zeros((100_000, 4), np.float16)}
    monkeypatch.setattr(shards, "encode_passages", lambda encoder, toks, progress=None: arrays)
    monkeypatch.setattr(shards, "tokenize_passages", lambda tokenizer, texts: [])
    with file_size_limit(100_000), pytest.raises(OSError, match=os.strerror(errno.EFBIG)) as failed:
        shards.encode_shard(None, None, ["a passage"], dest, "key")
    assert failed.value.errno == errno.EFBIG
    assert failed.value.filename == str(dest.with_name("000000.tmp") / "vectors.npy")
    assert list((tmp_path / "shards").iterdir()) == []


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE cuts writes short as described on Linux")
def test_a_faiss_index_past_the_file_size_limit_is_named_as_the_limit_not_a_full_disk(tmp_path):
    """faiss says "(File too large)" when a write meets the file size limit (``ulimit -f``), yet the error named the
    file with "No space left on device", sending the user to look for room on a disk that has plenty. It says "File
    too large" (EFBIG) now, and leaves no temporary."""
    import faiss

    from spanseek.indexer.faiss_index import write_faiss

    index = faiss.IndexFlatL2(8)
    index.add(np.random.default_rng(0).random((1000, 8), dtype=np.float32))
    path = tmp_path / "index.faiss"
    with file_size_limit(4096), pytest.raises(OSError) as failed:
        write_faiss(index, path)
    assert (failed.value.errno, failed.value.strerror, failed.value.filename) == (
        errno.EFBIG, os.strerror(errno.EFBIG), str(path))
    assert list(tmp_path.iterdir()) == []


def test_a_library_error_keeps_the_reason_it_gives_for_a_refused_write(tmp_path):
    """A library's RuntimeError carrying the system's words for a full disk, a spent quota or the file size limit
    becomes an OSError naming the file with that same reason (each was "No space left on device")."""
    from spanseek.core.io import naming

    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        with pytest.raises(OSError) as failed, naming(tmp_path / "index.faiss"):
            raise RuntimeError(f"write error in {tmp_path}/.index.faiss.x.tmp: 100 != 4096 ({os.strerror(code)})")
        assert (failed.value.errno, failed.value.strerror, failed.value.filename) == (
            code, os.strerror(code), str(tmp_path / "index.faiss"))


def test_a_memory_mapped_file_has_its_blocks_before_a_row_is_written(tmp_path, monkeypatch):
    """Writing through a map of a sparse file that the disk has no room for kills the process (SIGBUS); the build's
    merged arrays are allocated first, so a full disk is an error naming the file, and nothing is left behind."""
    from spanseek.indexer import build, shards

    out = tmp_path / "idx"
    shard = out / build.SHARDS / "000000"
    shard.mkdir(parents=True)
    for name, array in {"vectors": np.ones((1000, 64), np.float16), "offsets": np.zeros((1000, 2), np.int32),
                        "flags": np.zeros(1000, np.uint8), "ntokens": np.asarray([600, 400])}.items():
        np.save(shard / f"{name}.npy", array)
    (shard / shards.SHARD_KEY).write_text("k")  # (a finished shard holds its content key)
    assert build.merge_shards(out, 1, 64) == 1000
    vectors = out / phrase_index.VECTORS
    assert vectors.stat().st_blocks * 512 >= vectors.stat().st_size  # no hole left to fault on
    for path in out.glob("*.npy"):
        path.unlink()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(OSError, match="No space left on device") as failed:
        build.merge_shards(out, 1, 64)
    assert failed.value.filename == str(vectors)
    assert sorted(p.name for p in out.iterdir()) == [build.SHARDS]  # no temporary file left


def test_a_compact_the_disk_cannot_hold_leaves_the_index_as_it_was(tiny_index, tmp_path, monkeypatch):
    from spanseek.indexer.lifecycle import compact_index, delete_documents
    from spanseek.indexer.verify import verify_index

    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    first = json.loads((index / phrase_index.DOCS).read_text().splitlines()[0])["id"]
    delete_documents(index, [first])
    before = {p.name: p.read_bytes() for p in index.iterdir() if p.is_file()}
    open_memmap = np.lib.format.open_memmap
    calls = []

    def fills_up(path, mode="r+", **kw):  # the disk fills up at the second store compact rewrites
        if mode == "w+":
            calls.append(path)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return open_memmap(path, mode=mode, **kw)

    monkeypatch.setattr(np.lib.format, "open_memmap", fills_up)
    with pytest.raises(OSError, match="No space left on device") as failed:
        compact_index(index)
    assert failed.value.filename == str(calls[1])
    assert {p.name: p.read_bytes() for p in index.iterdir() if p.is_file()} == before  # no staged file left
    report = verify_index(index)
    assert report["ok"], report["problems"]
    monkeypatch.undo()
    assert compact_index(index)["compacted"] and verify_index(index)["ok"]


def test_a_merge_the_disk_cannot_hold_is_refused_before_encoding_anything(tiny_index, tmp_path, monkeypatch):
    """A merge writes the base's stores again: with less room than that it would fail after encoding every written
    document again (and a due merge is tried after each write), so it is refused at once, naming where."""
    from spanseek.indexer import add, live

    bases = tmp_path / "bases"
    bases.mkdir()
    size = sum(p.stat().st_size for p in tiny_index.rglob("*") if p.is_file())
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 * size, 9 * size, size - 1))
    encoded = []
    monkeypatch.setattr(add, "add_documents", lambda *args, **kwargs: encoded.append(args))
    with pytest.raises(OSError, match="No space left on device: a merge writes about") as refused:
        live.build_merged(tiny_index, bases / "base-000001", [], [{"id": "x", "title": "t", "paragraphs": ["p"]}],
                          None)
    assert refused.value.filename == str(bases) and not encoded and list(bases.iterdir()) == []


def test_a_phrase_cache_the_disk_cannot_hold_is_an_error_naming_its_vectors(tmp_path, monkeypatch):
    """The training phrase cache's vectors were a memory map of a sparse file: on a full disk the first rows written
    killed the training with SIGBUS, no message; its blocks are allocated first now, so it is an OSError naming the
    file, and no description of a cache is written (the next run starts it again)."""
    from spanseek.trainer import phrase_cache

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    uniq = {"k0": (np.arange(5), np.ones(5, dtype=bool)), "k1": (np.arange(3), np.ones(3, dtype=bool))}
    with pytest.raises(OSError, match="No space left on device") as failed:
        phrase_cache.open_or_create(tmp_path / "cache", ["k0", "k1"], uniq, 8, "fp", 64, "model")
    assert failed.value.filename == str(tmp_path / "cache" / phrase_cache.CACHE_VECTORS)
    assert not (tmp_path / "cache" / phrase_cache.CACHE_META).exists()


def test_a_faiss_index_the_disk_cannot_hold_is_named_and_the_build_resumes(tiny_corpus, tiny_model_dir, tmp_path,
                                                                           monkeypatch, capsys):
    """faiss reports a full disk as its own error ("Error in void faiss::write_index(...) at index_write.cpp:499:
    Error: 'ret == (size * 4)' failed: write error in OUT/.index.faiss.x.tmp: 3014611 != 10403328 (No space left on
    device)"), which `index build` printed as it is: it is the one line naming the index file, and the same command
    resumes once there is room."""
    import faiss

    from spanseek.cli import main

    write_index = faiss.write_index
    monkeypatch.setattr(faiss, "write_index", faiss_disk_full)
    out = tmp_path / "idx"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--precision", "fp32", "--quiet"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"spanseek index build: error: {out / phrase_index.FAISS_INDEX}: "
                                       f"{os.strerror(errno.ENOSPC)}\n")
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))  # nothing half written holds the room
    monkeypatch.setattr(faiss, "write_index", write_index)
    assert main(argv) == 0 and (out / phrase_index.MANIFEST).is_file()


@pytest.mark.parametrize("command", ["add", "compact"])
def test_an_add_or_compact_whose_faiss_index_the_disk_cannot_hold_names_it_and_keeps_the_index(
        command, tiny_index, tiny_model_dir, tmp_path, monkeypatch, capsys):
    """`index add` and `index compact` wrote the new faiss index outside ``atomic_path``: a full disk printed faiss's
    own error. It is the one line naming the file now, the index is as it was, and the same command then succeeds."""
    import faiss

    from spanseek.cli import main
    from spanseek.indexer.lifecycle import delete_documents
    from spanseek.indexer.verify import verify_index

    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    if command == "add":
        more = tmp_path / "more.jsonl"
        more.write_text(json.dumps({"id": "more", "title": "More", "paragraphs": ["In 1901 Hugo built it."]}) + "\n")
        argv = ["index", "add", "--index", str(index), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet"]
    else:
        delete_documents(index, [json.loads((index / phrase_index.DOCS).read_text().splitlines()[0])["id"]])
        argv = ["index", "compact", "--index", str(index), "--quiet"]
    before = {p.name: p.read_bytes() for p in index.iterdir() if p.is_file()}
    write_index = faiss.write_index
    monkeypatch.setattr(faiss, "write_index", faiss_disk_full)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"spanseek index {command}: error: {index / phrase_index.FAISS_INDEX}.add.tmp: "
                       f"{os.strerror(errno.ENOSPC)}")
    assert {p.name: p.read_bytes() for p in index.iterdir() if p.is_file()} == before  # nothing written is lost
    assert verify_index(index)["ok"]
    monkeypatch.setattr(faiss, "write_index", write_index)
    capsys.readouterr()
    assert main(argv) == 0 and verify_index(index)["ok"]
