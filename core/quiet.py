"""transformers quiet while a model is made, shared by everything in the process that quietens it at once.

``quiet_transformers()`` (``core.model`` around every load; the ``spanseek`` command around a whole command, with
its own additions) turns off transformers' reports and progress bars and its deprecation warnings. These are the
process's settings, not a thread's: two threads that each saved, changed and put them back on their own (two
searchers opened at once, a model loaded while a command runs) un-quietened each other when the first ended, and the
last to end put back the quiet state it had found, for the rest of the process. ``Shared`` makes such a change one
for all its users: the first to enter makes it, the last to leave puts back what was there before the first.

Nothing here imports transformers: where it is not imported yet, it is quietened through the environment it reads
when imported, so that a command that never loads a model does not import it (about a second) for this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator


class Shared:
    """A change to process-wide settings that overlapping users (threads, or one inside another) share: ``apply``
    makes it and returns what puts it back (closed by the last user to leave)."""

    def __init__(self, apply: Callable[[], contextlib.ExitStack]) -> None:
        self._apply = apply
        self._lock = threading.Lock()
        self._users = 0
        self._undo: contextlib.ExitStack | None = None

    @property
    def users(self) -> int:
        """How many are inside it now."""
        return self._users

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._undo = self._apply()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._undo is not None:
                    undo, self._undo = self._undo, None
                    undo.close()


def _quieten_transformers() -> contextlib.ExitStack:
    """transformers reports only errors, draws no progress bars and gives no FutureWarning; closing what it returns
    puts back the verbosity, its bars and the warning filters as they were (transformers imported meanwhile: the
    verbosity it starts with outside, from ``TRANSFORMERS_VERBOSITY`` as it was, and its bars on where
    huggingface_hub's are on by then, as transformers starts them; the last user's to do, so a command that ends
    first leaves them off under a load still running)."""
    undo = contextlib.ExitStack()
    undo.enter_context(warnings.catch_warnings())  # closed last: the filters as they were
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        undo.callback(_put_back_transformers, verbosity, bars)
        return undo
    saved = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # read once, when transformers is imported

    def put_back() -> None:
        if saved is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        else:
            os.environ["TRANSFORMERS_VERBOSITY"] = saved
        if "transformers" in sys.modules:  # imported meanwhile: as it starts outside, its bars as the hub's are now
            from huggingface_hub import utils as hub_utils
            from transformers.utils import logging as hf_logging

            _put_back_transformers(hf_logging.log_levels.get(saved or "", logging.WARNING),
                                   not hub_utils.are_progress_bars_disabled())

    undo.callback(put_back)
    return undo


def _put_back_transformers(verbosity: int, bars: bool) -> None:
    """transformers' verbosity, and its progress bars on when ``bars`` (else as they are)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity(verbosity)
    if bars:
        hf_logging.enable_progress_bar()


QUIET_TRANSFORMERS = Shared(_quieten_transformers)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers and peft quiet while a model is made: no progress bar over the weights, no load report (a
    sentence-transformers backbone's unused pooler weights, listed as UNEXPECTED on every load), no deprecation
    warnings of transformers' own (peft asks for a deprecated attribute). Errors still raise; the settings are put
    back once the last thread quietening them is done, so a program that wants transformers' reports keeps them
    elsewhere, and with the ``spanseek`` logger at DEBUG (``spanseek -v``) nothing is quietened."""
    if logging.getLogger("spanseek").isEnabledFor(logging.DEBUG):
        yield
        return
    with QUIET_TRANSFORMERS():
        yield
