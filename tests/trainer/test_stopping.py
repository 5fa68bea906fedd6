"""Stopping a training run on Ctrl-C or SIGTERM (trainer.stopping) leaves the process's signal handlers as it found
them, including one it cannot take (set outside Python).

    .venv/bin/python -m pytest -q tests/trainer/test_stopping.py
"""

from __future__ import annotations

import signal

from spanseek.trainer.stopping import StopAfterStep


def test_a_sigterm_handler_set_outside_python_is_left_alone_and_ctrl_c_is_put_back(monkeypatch):
    """A SIGTERM handler that a program embedding Python set (``signal.getsignal`` gives None, and ``signal.signal``
    returns None for it) was taken, and putting "None" back raised TypeError as the run ended. Such a handler is now
    left alone; Ctrl-C's is taken and put back as before."""
    real_signal, calls = signal.signal, []
    # Ctrl-C's handler as in a process started in a terminal (one started in the background ignores SIGINT, and an
    # ignored signal is left alone)
    started_with = real_signal(signal.SIGINT, signal.default_int_handler)

    def outside(signum, handler):  # SIGTERM's handler was set outside Python; the others as they are
        if signum != signal.SIGTERM:
            return real_signal(signum, handler)
        calls.append(handler)
        if handler is None:
            raise TypeError("signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a callable object")
        return None

    real_getsignal = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda s: None if s == signal.SIGTERM else real_getsignal(s))
    monkeypatch.setattr(signal, "signal", outside)
    before = real_getsignal(signal.SIGINT)
    try:
        with StopAfterStep() as stop:
            assert real_getsignal(signal.SIGINT) == stop._interrupt
        assert calls == [] and real_getsignal(signal.SIGINT) is before
    finally:
        real_signal(signal.SIGINT, started_with)
