"""core.keys: a key read from a file (its one line, a line end left out) and the files refused, each error naming the
file and never the key; the warning for a key file others may read.

    .venv/bin/python -m pytest -q tests/core/test_keys.py
"""

from __future__ import annotations

import os

import pytest

from spanseek.core.keys import MAX_KEY_FILE_BYTES, key_file_warning, key_problem, read_key_file

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


def test_a_missing_unreadable_or_irregular_key_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"key file {tmp_path / 'none'}: no such file"):
        read_key_file(tmp_path / "none")
    with pytest.raises(ValueError, match="key file /dev/zero: not a regular file"):  # read, it would never end
        read_key_file("/dev/zero")
    with pytest.raises(ValueError, match="not a regular file"):
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


def test_key_problem_accepts_what_a_header_carries():
    assert key_problem(KEY) is None and key_problem("a b") is None
    assert "whitespace" in key_problem(f"{KEY}\n") and "HTTP header" in key_problem("k\x00y")
