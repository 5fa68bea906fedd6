"""core.keys: a key read from a file (its one line, a line end left out) and the files refused, each error naming the
file and never the key; the warning for a key file others may read.

    .venv/bin/python -m pytest -q tests/core/test_keys.py
"""

from __future__ import annotations

import os
import threading

import pytest

from spanseek.core.keys import MAX_KEY_FILE_BYTES, key_file_warning, key_level, key_problem, read_key_file

KEY = "s3cret-Key_1"


@pytest.mark.parametrize("text", [KEY, f"{KEY}\n", f"{KEY}\r\n", f"\ufeff{KEY}\n"])
def test_a_key_file_holds_its_key_and_at_most_one_line_end(tmp_path, text):
    (tmp_path / "key").write_bytes(text.encode())
    assert read_key_file(tmp_path / "key") == KEY


@pytest.mark.parametrize(("content", "message"), [
    (b"", "holds no key (it is empty or blank)"),
    (b"  \n", "holds no key"),
    (f"{KEY}\nsecond\n".encode(), "holds more than one line"),
    (f"{KEY}\n\n".encode(), "holds more than one line"),
    (f" {KEY}\n".encode(), "the key begins or ends with whitespace"),
    (f"{KEY}\t\n".encode(), "the key begins or ends with whitespace"),
    (f"{KEY}\u00e9".encode(), "characters an HTTP header cannot carry"),
    (b"\xff" + KEY.encode(), "not UTF-8 text"),
    (KEY.encode() * (MAX_KEY_FILE_BYTES // len(KEY) + 1), "larger than 4,096 bytes"),
])
def test_a_key_file_without_a_usable_key_is_refused_naming_the_file_not_the_key(tmp_path, content, message):
    path = tmp_path / "key"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^key file {path}: ") as e:
        read_key_file(path)
    assert message in str(e.value) and KEY not in str(e.value)


def test_a_missing_unreadable_endless_or_directory_key_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"key file {tmp_path / 'none'}: no such file"):
        read_key_file(tmp_path / "none")
    with pytest.raises(ValueError, match="key file /dev/zero: larger than 4,096 bytes"):  # read up to the cap only
        read_key_file("/dev/zero")
    with pytest.raises(ValueError, match=f"key file {tmp_path}: a directory, not a file"):
        read_key_file(tmp_path)
    if os.geteuid() != 0:  # root reads any file
        (tmp_path / "locked").write_text(KEY)
        (tmp_path / "locked").chmod(0)
        with pytest.raises(ValueError, match=r"unreadable \(Permission denied\)"):
            read_key_file(tmp_path / "locked")


def test_a_key_file_others_may_read_or_change_is_warned_of(tmp_path):
    path = tmp_path / "key"
    path.write_text(KEY)
    for mode, warned in ((0o600, False), (0o400, False), (0o640, True), (0o604, True), (0o620, True)):
        path.chmod(mode)
        warning = key_file_warning(path)
        assert (warning is not None) == warned, oct(mode)
    assert key_file_warning(path) == (f"key file {path} can be read or changed by users other than its owner (mode "
                                      f"-rw--w----); `chmod 600 {path}` keeps the key to its owner")
    assert key_file_warning(tmp_path / "none") is None  # read_key_file says what is wrong with it


def test_a_key_from_a_pipe_is_read_once(tmp_path):
    """``--api-key-file <(pass show key)``: the shell passes a /dev/fd path to a pipe, which a secret manager writes
    the key into; a FIFO made with mkfifo is read the same way, once its writer has opened it. Neither was read ("not
    a regular file"). A pipe's mode says nothing of who reads the key: no warning, whatever it is."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, f"{KEY}\n".encode())
        os.close(write_end)
        assert read_key_file(f"/dev/fd/{read_end}") == KEY
        assert key_file_warning(f"/dev/fd/{read_end}") is None
    finally:
        os.close(read_end)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o666)
    os.chmod(fifo, 0o666)  # past the umask
    writer = threading.Thread(target=fifo.write_text, args=(f"{KEY}\n",))
    writer.start()
    assert read_key_file(fifo) == KEY
    writer.join(10)
    assert key_file_warning(fifo) is None
    writer = threading.Thread(target=fifo.write_bytes, args=(b"k" * (2 * MAX_KEY_FILE_BYTES),))
    writer.start()
    with pytest.raises(ValueError, match=f"key file {fifo}: larger than 4,096 bytes"):  # a cap on a pipe too
        read_key_file(fifo)
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # the writer's rest goes nowhere; it ends
    writer.join(10)


@pytest.mark.parametrize(("levels", "chosen"), [
    ([("as flags", "k1", None), ("in the environment", "k2", None)], ("k1", None)),
    ([("as flags", None, "f1"), ("in the environment", "k2", None)], (None, "f1")),  # was refused as both given
    ([("as flags", "k1", None), ("in the environment", None, "f2")], ("k1", None)),
    ([("as flags", None, None), ("in the environment", "k2", None)], ("k2", None)),
    ([("as flags", "", " "), ("in the environment", None, "f2")], (None, "f2")),  # empty: not given
    ([("as flags", None, None), ("in the environment", "", None)], (None, None)),
    ([("as flags", "k1", None), ("in the environment", "k2", "f2")], ("k1", None)),  # decided above: not looked at
])
def test_the_highest_level_giving_a_key_or_its_file_decides(levels, chosen):
    assert key_level(levels, "api_key", "api_key_file") == chosen


def test_a_key_and_its_file_at_one_level_are_refused_naming_the_level():
    for levels in ([("as flags", "k1", "f1"), ("in the environment", None, None)],
                   [("as flags", None, None), ("in the environment", "k1", "f1")]):
        where = levels[0][0] if levels[0][1] else levels[1][0]
        with pytest.raises(ValueError, match=f"^api_key and api_key_file are both given {where}; give the key one "
                                             "way") as e:
            key_level(levels, "api_key", "api_key_file")
        assert "k1" not in str(e.value)


def test_key_problem_accepts_what_a_header_carries():
    assert key_problem(KEY) is None and key_problem("a b") is None
    assert "whitespace" in key_problem(f"{KEY}\n") and "HTTP header" in key_problem("k\x00y")
