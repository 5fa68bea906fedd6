"""`corpus from-files` reads files in a process of their own whose memory is capped (``indexer.read_process``, as
the service reads uploaded files), and whose CPU time for each file is capped: a file whose reading needs more is
skipped naming it and the limit, and the files after it are read by a fresh process.

    .venv/bin/python -m pytest -q tests/indexer/test_read_process.py
"""

from __future__ import annotations

import json
import math
import resource
import signal
import time

import pytest

from spanseek.cli import main
from spanseek.indexer import read_process
from spanseek.indexer.ingest import IngestOptions


def _hungry_on_huge(path: str, rel: str, opts: IngestOptions):
    """Reads as the reading process does, and on ``*huge.txt`` first takes 600 MiB, as a reader of a large file does
    (a 30 MiB HTML page took 5.9 GB): past a 256 MiB cap the allocation fails. Run in the reading process."""
    if rel.endswith("huge.txt"):
        try:
            bytearray(600 << 20)
        except MemoryError:
            raise read_process.out_of_memory(rel, "from-files", "--read-memory-bytes") from None
    return read_process.read_capped(path, rel, opts)


def _spin(seconds: float) -> None:
    """Busy for ``seconds`` of this process's CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _slow_on_slow(path: str, rel: str, opts: IngestOptions):
    """Reads as the reading process does, and on ``*slow.txt`` first spins for 30 s of CPU, as a reader of a hostile
    file does (32 MiB of Markdown table rows: some 20 minutes). Run in the reading process."""
    if rel.endswith("slow.txt"):
        _spin(30)
    return read_process.read_capped(path, rel, opts)


def _data_limit(path: str, rel: str, opts: IngestOptions) -> str:
    """The reading process's data limit, as the reason its file is skipped."""
    return str(resource.getrlimit(resource.RLIMIT_DATA)[0])


@pytest.fixture
def three_files(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = {"a.txt": "In 1450 Gala built the bridge.", "b-huge.txt": "In 1455 Ada built the mill.",
             "c.txt": "In 1460 Hugo built the church."}
    for name, text in texts.items():
        (docs / name).write_text(text)
    return docs


@pytest.mark.slow  # (three reading processes started: 4 s)
def test_a_file_that_runs_out_of_the_reading_memory_is_skipped_naming_it_and_the_rest_are_read(
        three_files, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setattr(read_process, "read_capped", _hungry_on_huge)
    out = tmp_path / "c.jsonl"
    argv = ["corpus", "from-files", str(three_files), "--out", str(out), "--tokenizer", "words", "--quiet",
            "--read-memory-bytes", str(256 << 20)]
    with caplog.at_level("WARNING"):
        assert main(argv) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a.txt", "c.txt"]
    assert capsys.readouterr().err.endswith("wrote 2 documents, 2 passages to " + str(out) + "; skipped 1 file (see "
                                            "the warnings)\n")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == (f"skipped {three_files / 'b-huge.txt'}: reading it needs more memory than from-files gives the "
                       "reading of a file (268,435,456 bytes, --read-memory-bytes); split it, or raise the limit")
    assert main([*argv, "--strict"]) == 2  # strict: the command fails, on one line naming the file
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"spanseek corpus from-files: error: {three_files / 'b-huge.txt'}:")


def test_the_reading_process_is_capped_at_the_flag_and_zero_reads_here(three_files, tmp_path, monkeypatch):
    with read_process.ReadProcess(None, 300 << 20, read=_data_limit) as reader:
        assert reader.read(three_files / "a.txt", "a.txt", IngestOptions()) == str(300 << 20)
    out = tmp_path / "c.jsonl"
    monkeypatch.setattr(read_process, "ReadProcess", None)  # (both 0: not used)
    assert main(["corpus", "from-files", str(three_files), "--out", str(out), "--tokenizer", "words", "--quiet",
                 "--read-memory-bytes", "0", "--read-timeout-s", "0"]) == 0
    assert len(out.read_text().splitlines()) == 3


class _Recorded:
    """A ``ReadProcess`` that reads here, recording the limits it was given."""

    given: list[tuple[int, float]] = []

    def __init__(self, config, memory_bytes: int, read=None, timeout_s: float = 0.0):
        self.given.append((memory_bytes, timeout_s))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def read(self, path, rel, opts):
        from spanseek.indexer.chunking import word_token_counter
        from spanseek.indexer.ingest import read_document

        return read_document(path, rel, word_token_counter, opts)


@pytest.mark.parametrize(("flags", "given"), [
    ([], (2 << 30, 300.0)),  # the defaults: the service's file_read_memory_bytes and file_read_timeout_s
    (["--read-memory-bytes", "0"], (0, 300.0)),  # a time limit alone still reads in a process of their own
    (["--read-timeout-s", "0.5"], (2 << 30, 0.5)),
])
def test_the_reading_process_is_given_the_time_limit_of_the_flag(three_files, tmp_path, monkeypatch, flags, given):
    monkeypatch.setattr(_Recorded, "given", [])
    monkeypatch.setattr(read_process, "ReadProcess", _Recorded)
    out = tmp_path / "c.jsonl"
    assert main(["corpus", "from-files", str(three_files), "--out", str(out), "--tokenizer", "words", "--quiet",
                 *flags]) == 0
    assert _Recorded.given == [given] and len(out.read_text().splitlines()) == 3


def test_a_read_past_its_cpu_time_is_stopped_naming_the_file_and_the_limit():
    """The profiling timer stops a reader between Python steps, even one that takes any Exception for a damaged
    file; the signal's handler and the process's CPU limit are as they were after it, and a read within its time
    gives its result under a kernel limit the limit's grace past it."""
    def swallowing() -> str:
        try:
            _spin(5)
        except Exception:  # what a reader does that takes a library's error for a damaged file
            return "damaged"
        return "read"

    before = signal.getsignal(signal.SIGPROF), resource.getrlimit(resource.RLIMIT_CPU)
    t0 = time.process_time()
    with pytest.raises(read_process.ReadOutOfTime) as e:
        read_process.within_cpu(0.2, "docs/rows.md", "--read-timeout-s", swallowing)
    assert time.process_time() - t0 < 2
    assert str(e.value) == ("docs/rows.md: not read within 0.2 s of CPU time (--read-timeout-s); a damaged or hostile "
                            "file, or one too large to read in that time: split it, or raise the limit")
    assert (signal.getsignal(signal.SIGPROF), resource.getrlimit(resource.RLIMIT_CPU)) == before

    def limits() -> tuple[float, int]:
        used = resource.getrusage(resource.RUSAGE_SELF)
        return used.ru_utime + used.ru_stime, resource.getrlimit(resource.RLIMIT_CPU)[0]

    used, kernel = read_process.within_cpu(60, "a.txt", "--read-timeout-s", limits)
    assert math.ceil(used + 60 + read_process.CPU_KILL_GRACE_S) - 1 <= kernel <= math.ceil(
        used + 60 + read_process.CPU_KILL_GRACE_S)
    assert read_process.within_cpu(0, "a.txt", "--read-timeout-s", limits)[1] == before[1][0]  # 0: no limit


@pytest.mark.slow  # (two reading processes started: 3-4 s)
def test_a_file_that_takes_past_the_time_limit_is_skipped_naming_it_and_the_rest_are_read(
        three_files, tmp_path, monkeypatch, capsys, caplog):
    (three_files / "b-huge.txt").rename(three_files / "b-slow.txt")
    monkeypatch.setattr(read_process, "read_capped", _slow_on_slow)
    out = tmp_path / "c.jsonl"
    argv = ["corpus", "from-files", str(three_files), "--out", str(out), "--tokenizer", "words", "--quiet",
            "--read-timeout-s", "0.5"]
    with caplog.at_level("WARNING"):
        assert main(argv) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a.txt", "c.txt"]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == (f"skipped {three_files / 'b-slow.txt'}: not read within 0.5 s of CPU time (--read-timeout-s); "
                       "a damaged or hostile file, or one too large to read in that time: split it, or raise the limit")
    assert main([*argv, "--strict"]) == 2  # strict: the command fails, on one line naming the file
    err = capsys.readouterr().err
    assert err.endswith(f"spanseek corpus from-files: error: {three_files / 'b-slow.txt'}: not read within 0.5 s of "
                        "CPU time (--read-timeout-s); a damaged or hostile file, or one too large to read in that time: "
                        "split it, or raise the limit\n")


@pytest.mark.parametrize("given", ["-1", "nan", "inf"])
def test_a_time_limit_that_is_none_is_refused_naming_the_flag(three_files, tmp_path, capsys, given):
    assert main(["corpus", "from-files", str(three_files), "--out", str(tmp_path / "c.jsonl"), "--tokenizer", "words",
                 "--read-timeout-s", given]) == 2
    err = capsys.readouterr().err
    assert err == (f"spanseek corpus from-files: error: --read-timeout-s: {float(given):g} is no time limit; give the "
                   "CPU seconds a file may take to read, more than 0, or 0 for no limit\n")


@pytest.mark.parametrize("given", ["1000", "-1"])
def test_a_reading_memory_too_small_to_start_is_refused_naming_the_flag(three_files, tmp_path, capsys, given):
    assert main(["corpus", "from-files", str(three_files), "--out", str(tmp_path / "c.jsonl"), "--tokenizer", "words",
                 "--read-memory-bytes", given]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--read-memory-bytes" in err and "268,435,456" in err


@pytest.mark.slow  # (a reading process started: 2 s)
def test_a_tokenizer_the_reading_process_cannot_load_fails_the_command_on_one_line(three_files, tmp_path, capsys):
    """The model's tokenizer is loaded as the reading process starts: one that cannot be loaded is the command's
    error, said once, not every file skipped as one the reader stopped on (a damaged file)."""
    from spanseek.core.model import BUNDLED_MODELS, CONFIG_NAME

    model = tmp_path / "model"
    model.mkdir()
    config = json.loads((BUNDLED_MODELS["default"] / CONFIG_NAME).read_text())
    (model / CONFIG_NAME).write_text(json.dumps({**config, "backbone": "package:no-such-backbone"}))
    out = tmp_path / "c.jsonl"
    assert main(["corpus", "from-files", str(three_files), "--out", str(out), "--model", str(model), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == ("spanseek corpus from-files: error: backbone 'package:no-such-backbone': package 'no_such_backbone' "
                   "is not installed (pip install no_such_backbone)\n")
    assert not out.exists()



@pytest.mark.slow  # (a reading process started: 2-4 s)
def test_a_replaced_reading_process_is_stopped_before_the_next_file(three_files):
    """A reading process replaced (here for a file past its time) was left to stop on its own: its pool's thread
    ran on, and at the command's exit concurrent.futures' hook could race it ("Bad file descriptor" traceback after
    the summary). It is stopped before the next file is read."""
    import threading

    (three_files / "b-huge.txt").rename(three_files / "b-slow.txt")
    before = set(threading.enumerate())
    with read_process.ReadProcess(None, 0, read=_slow_on_slow, timeout_s=0.2) as reader:
        why = reader.read(three_files / "b-slow.txt", "b-slow.txt", IngestOptions())
        assert why.startswith("not read within 0.2 s of CPU time (--read-timeout-s)")
        assert set(threading.enumerate()) <= before  # (the pool's thread, stopped)


@pytest.mark.slow  # (a reading process started: 2-4 s)
def test_a_command_stopped_while_a_file_is_read_ends_its_reading_process_at_once(three_files):
    """A command stopped by SIGTERM (which reaches its own process only: `sync --dry-run`, `corpus from-files`) left
    its reading process reading the file, and the command's exit waited for that file (a 4 MB Markdown table held a
    SIGTERM'd dry run 9 s, one of 32 MiB some 20 minutes). The reading process is ended as the command stops."""
    (three_files / "b-huge.txt").rename(three_files / "b-slow.txt")
    with pytest.raises(KeyboardInterrupt), read_process.ReadProcess(None, 0, read=_slow_on_slow) as reader:
        assert reader.read(three_files / "a.txt", "a.txt", IngestOptions()) is not None  # (the process started)
        assert reader._pool is not None
        processes = list(reader._pool._processes.values())
        reader._pool.submit(read_process.read_limited, 0, _slow_on_slow, str(three_files / "b-slow.txt"),
                            "b-slow.txt", IngestOptions())  # 30 s of CPU
        time.sleep(0.5)
        raise KeyboardInterrupt("SIGTERM")  # (as ``interrupt.taking_stops`` raises it)
    for process in processes:
        process.join(5)
        assert not process.is_alive()
