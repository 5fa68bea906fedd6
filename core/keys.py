"""API keys: the checks a key must pass, and a key read from a file.

    spanseek serve --index work/demo-index --api-key-file /run/secrets/spanseek_api_key
    spanseek sync docs/ --url http://localhost:8000 --api-key-file ~/.config/spanseek/key

A key given on the command line is one of the process's arguments, which ``ps`` (and /proc/PID/cmdline) shows to
every user of the machine. An environment variable is readable by the process's owner only, and so is a key file
whose mode gives no one else access (``chmod 600``); ``key_file_warning`` says when a file's mode does. A secret
manager's output can be given without a file on disk: ``--api-key-file <(pass show spanseek)`` (a pipe, read once).

A key and its file are one setting given at several levels, the command line over the environment
(``key_level``): the highest level that gives either wins whole, and a level that gives both is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

MAX_KEY_FILE_BYTES = 4096  # a key is at most a few hundred bytes: a larger file (or /dev/zero) is no key file


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be an API key, or None: whitespace at either end (a line end from the file it was read
    from) or characters an HTTP header cannot carry, which no client sends, so every request would be a 401."""
    if key != key.strip():
        return ("the key begins or ends with whitespace (a line end from the file it was read from?), which no client "
                "sends; remove it")
    if not (key.isascii() and key.isprintable()):
        return "the key holds characters an HTTP header cannot carry (only printable ASCII), so no client could send it"
    return None


def read_key_file(path: str | Path, named: str = "key file") -> str:
    """The key held in the file ``path``: its one line, a line end after it left out (``echo KEY > file`` writes
    one). A pipe (``<(pass show key)``, a /dev/fd path, a FIFO) is read once, until its writer closes it, as ``cat``
    would; reading stops past ``MAX_KEY_FILE_BYTES`` whatever the file is (/dev/zero). A ValueError names the file,
    never the key, when it cannot be read, is a directory, holds no key, holds more than one line, or a key
    ``key_problem`` refuses; ``named``: how the message names the file's setting (``--api-key-file``), before its
    path."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ValueError(f"{named} {path}: a directory, not a file")
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{named} {path}: no such file") from None
    except OSError as e:
        raise ValueError(f"{named} {path}: unreadable ({e.strerror or e})") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"{named} {path}: larger than {MAX_KEY_FILE_BYTES:,} bytes, which no key is; is it the "
                         f"right file?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{named} {path}: not UTF-8 text") from None
    key = text.removesuffix("\n").removesuffix("\r")
    if not key.strip():
        raise ValueError(f"{named} {path}: holds no key (it is empty or blank)")
    if "\n" in key or "\r" in key:
        raise ValueError(f"{named} {path}: holds more than one line; write the key alone on one line")
    if (problem := key_problem(key)) is not None:
        raise ValueError(f"{named} {path}: {problem}")
    return key


def key_flag_warning(flag: str, variable: str) -> str:
    """The warning for a key given as the flag ``flag`` (``--api-key``): ``ps`` shows it; ``FLAG-file`` or the
    environment variable ``variable`` keep it to the process's owner."""
    return (f"{flag} puts the key on the command line, which `ps` shows to every user of this machine: give it in a "
            f"file readable by you only ({flag}-file) or in {variable}")


def key_file_warning(path: str | Path) -> str | None:
    """A warning when the key file ``path`` lets users other than its owner read or change it (its mode gives its
    group or others any permission), with the command that mends it; None otherwise, for a pipe or a device (whose
    mode says nothing of who else can read what it passes on), or when it cannot be looked at (``read_key_file`` says
    why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode) or not mode & 0o077:
        return None
    return (f"key file {path} can be read or changed by users other than its owner (mode {stat.filemode(mode)}); "
            f"`chmod 600 {path}` keeps the key to its owner")


def key_given(value: object) -> bool:
    """Whether a key or key file setting is given: an empty or blank value is not (compose passes an unset variable as
    an empty one). Takes a string, a path, a pydantic ``SecretStr`` or None."""
    if value is None:
        return False
    reveal = getattr(value, "get_secret_value", None)  # a SecretStr, without importing pydantic here
    return bool(str(reveal() if reveal is not None else value).strip())


def key_level(levels: Iterable[tuple[str, object, object]], key_name: str, file_name: str) -> tuple[object, object]:
    """The key and the key file of the first of ``levels`` that gives either, each level ``(where, key, key file)``
    from the highest precedence down (the command line, then the environment): a level overrides the lower ones
    whole, so a key file on the command line beats a key in the environment as a key on the command line does.
    (None, None) when no level gives either; a ValueError, naming the level as ``where`` and the setting as
    ``key_name`` and ``file_name``, when the deciding level gives both (which one was meant?)."""
    for where, key, key_file in levels:
        if key_given(key) and key_given(key_file):
            raise ValueError(f"{key_name} and {file_name} are both given {where}; give the key one way (the file "
                             f"keeps it out of the command line)")
        if key_given(key) or key_given(key_file):
            return (key, None) if key_given(key) else (None, key_file)
    return None, None
