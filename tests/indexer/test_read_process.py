"""`corpus from-files` reads files in a process of their own whose memory is capped (``indexer.read_process``, as
the service reads uploaded files): a file whose reading needs more is skipped naming it and the limit, and the files
after it are read by a fresh process.

    .venv/bin/python -m pytest -q tests/indexer/test_read_process.py
"""

from __future__ import annotations

import json
import resource

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
    monkeypatch.setattr(read_process, "ReadProcess", None)  # (0: not used)
    assert main(["corpus", "from-files", str(three_files), "--out", str(out), "--tokenizer", "words", "--quiet",
                 "--read-memory-bytes", "0"]) == 0
    assert len(out.read_text().splitlines()) == 3


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
