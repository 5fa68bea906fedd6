"""The start of a child process that kills itself (SIGKILL) at a chosen step, for the crash tests of `index add`
(tests/indexer/test_add_crash.py) and of the live writer (tests/indexer/test_live_kill.py).

``KILL_AT`` defines ``kill_at(target, n, when, counts)``: ``target`` ("module:attr.attr") is patched so that its
``n``-th call kills the process ``before`` or ``after`` the real step runs, or (``half``, for ``os:write``) once
half of the bytes are written, as a kill in the middle of a write leaves them. ``n`` is a number (the n-th call), or
a text an argument ends with, optionally ``text#k`` (the k-th such call; a file descriptor is read as its file's
path); only calls made while ``counts()`` holds count.
"""

KILL_AT = r"""
import importlib, os, signal
def kill_at(target, n, when, counts=lambda: True):
    module_name, attr = target.rsplit(":", 1)
    owner = importlib.import_module(module_name)
    for part in attr.split(".")[:-1]:
        owner = getattr(owner, part)
    name = attr.split(".")[-1]
    real, calls = getattr(owner, name), [0]
    suffix, _, nth = ("", "", n) if n.isdigit() else n.rpartition("#") if "#" in n else (n, "", "1")

    def named(a):  # a file descriptor by its file's path
        if isinstance(a, int) and not isinstance(a, bool):
            try:
                return os.readlink(f"/proc/self/fd/{a}")
            except OSError:
                pass
        return str(a)

    def step(*args, **kwargs):
        if not counts() or (suffix and not any(named(a).endswith(suffix) for a in args)):
            return real(*args, **kwargs)
        calls[0] += 1
        hit = calls[0] == int(nth)
        if hit and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and when == "half":
            real(args[0], bytes(args[1])[:len(args[1]) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(*args, **kwargs)
        if hit and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    setattr(owner, name, step)
"""
