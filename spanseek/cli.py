"""The `spanseek` command: assembles the subcommands that the packages' CLI modules register.

    spanseek corpus from-squad IN.json.gz --out corpus.jsonl
    spanseek index build --corpus corpus.jsonl --model default --out INDEX_DIR
    spanseek search --index INDEX_DIR --unit passage "who wrote ...?"
    spanseek eval --questions dev.json.gz --model default --out metrics.json
    spanseek train phrase --train squad-train.json.gz --out runs/phrase
    spanseek serve --index INDEX_DIR --model default
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spanseek import __version__
from spanseek.core.options import OptionsParser
from spanseek.core.quiet import QUIET_TRANSFORMERS, Shared
from spanseek.extras import extra_for, missing_extra_message

# Before torch starts OpenMP: its threads spin-wait between parallel regions, taking the cores from the numpy work in
# between (a seventh of an index build on 2 cores: 11.7 against 10.2 s for the demo corpus). The benchmarks, the
# container images and the demo run so; a value the environment gives is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Each module defines register(subparsers); subcommands set `func` (called with the parsed args).
# The command names are listed so that a module whose dependencies are missing (a training host without the
# service stack, say) still shows its commands, which then say what to install.
CLI_MODULES = {
    "spanseek.indexer.cli": ("corpus", "index", "search", "eval"),
    "spanseek.trainer.cli": ("train",),
    "spanseek.service.cli": ("serve",),
    "spanseek.sync": ("sync",),
}


def _unavailable(commands: tuple[str, ...], sub: argparse._SubParsersAction, error: ModuleNotFoundError) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise error

    extra = extra_for(error.name)
    needs = f"pip install 'spanseek[{extra}]'" if extra else f"needs {(error.name or '?').split('.')[0]}"
    for command in commands:
        # no option prefix: every argument, flags too, lands in `rest`, and the command explains itself
        p = sub.add_parser(command, help=f"(unavailable: {needs})", add_help=False, prefix_chars="\x00")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=fail)


class Parser(OptionsParser):
    """argparse's parser, kinder to a typo: a mistyped command or choice names the closest one (``spanseek serach``:
    did you mean 'search'?), and a flag the command does not have is refused by that command, with its usage and
    its closest flag (argparse left it to ``spanseek``, whose usage lists only the commands); an option's choice is
    read after its flag (``--collapse-duplicates near``: ``core.options.OptionsParser``). Subcommands' parsers are of
    this class too (argparse makes them of their parent's)."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from "
                                                 f"{', '.join(map(repr, choices))}){hint}")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[Any, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not self.has_commands:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._closest_flag(extras)}")
        return namespace, extras

    def _closest_flag(self, words: list[str]) -> str:
        """A hint for the first unknown flag among ``words``: the command's closest flag, or where -v goes."""
        flags = self.user_flags()  # not the flags a choice is spelled as (--collapse-duplicates-near)
        for word in (w.split("=", 1)[0] for w in words if w.startswith("-")):
            if word in ("-v", "--verbose"):
                command = self.prog.removeprefix("spanseek ")
                return f" ({word} is spanseek's own flag: give it before the command, `spanseek {word} {command} ...`)"
            close = difflib.get_close_matches(word, flags, n=1, cutoff=0.7)
            if close:
                return f"; did you mean {close[0]}?"
        return ""


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Call every level's subcommand COMMAND in usage and errors (``required: COMMAND``, not the internal name
    ``index_command``), and give each command its full name (``spanseek index build``, its parser's ``prog``) as
    ``args.prog``: its runtime errors start as argparse's refusals of its flags do."""
    parser.set_defaults(prog=parser.prog)  # a subcommand's default overrides its parent's
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = "COMMAND"
            for sub in action.choices.values():
                _name_commands(sub)


# `spanseek --help`'s closing lines: the way from a folder of files to answers, each line a command that runs
FIRST_STEPS = (
    "spanseek corpus from-files my-docs/ --out work/docs.jsonl",
    "spanseek index build --corpus work/docs.jsonl --model default --out work/my-index",
    'spanseek search --index work/my-index --unit passage "how do I install it?"',
    "spanseek serve --index work/my-index --port 8000",
)


def build_parser() -> argparse.ArgumentParser:
    epilog = ("from your files to answers:\n" + "".join(f"  {line}\n" for line in FIRST_STEPS)
              + "\n`spanseek COMMAND --help` lists a command's flags, with their defaults.")
    parser = Parser(prog="spanseek", description="Dense phrase retrieval: phrases, passages, documents.",
                    epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"spanseek {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, commands in CLI_MODULES.items():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name in (name, name.split(".")[0]):  # the package itself is not installed: no commands
                continue
            _unavailable(commands, sub, e)
            continue
        module.register(sub)
    _name_commands(parser)
    return parser


INTERRUPTED = 128 + 2  # the exit status of a command stopped by SIGINT (Ctrl-C), as shells report it
USAGE_ERROR = 2  # a flag or file that is wrong: argparse's own status for a refused flag
FAILED = 1  # the command ran and did not do its work (``CommandFailed``), as `index verify` finding a damaged index


class CommandFailed(RuntimeError):
    """A command that ran and failed for a reason outside its input (a server that cannot be reached, or that refused
    it): reported as one line, as an error is, with exit status 1 (``FAILED``), not 2, the status of a usage or input
    error the user fixes on the command line."""


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Ctrl-C stops it with one line and status 130, no traceback (the command's
    ``finally`` blocks have run by then: scratch is removed, a build's finished shards are kept for its resume).

    Every failure is one line on stderr that starts with the command's full name, as argparse's refusal of a flag
    does: ``spanseek index build: error: ...``, ``spanseek index build: interrupted``; a command that stopped itself
    says where it resumes: ``spanseek train phrase: interrupted: stopped at step 5; the same command resumes ...``."""
    prog = "spanseek"
    try:
        args = build_parser().parse_args(argv)
        prog = args.prog
        return _run(args)
    except KeyboardInterrupt as e:
        if argv is None:  # the process's own command line: a second Ctrl-C while Python exits (libraries' finalisers)
            with contextlib.suppress(ValueError):  # would end it with a traceback and status -2 (not the main thread)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        close_progress_bars()
        # what libraries log as Python exits would follow the one line: torch, interrupted while it was being imported
        # (before it set up its own loggers), reports its caches at INFO
        for handler in logging.getLogger().handlers:
            handler.setLevel(max(handler.level, logging.WARNING))
        said = f": {e}" if str(e) else ""  # where the command resumes, when it said (a training run's stop)
        print(f"{prog}: interrupted{said}", file=sys.stderr)
        return INTERRUPTED


def close_progress_bars() -> None:
    """Close the progress bars an interrupted command left open, so that its one line follows them: else it is
    written onto a bar's line, and the bar is drawn once more below it when the bar is collected. (tqdm keeps its
    open bars in ``tqdm._instances``, which its own ``tqdm.write`` uses; tqdm not imported: no bars.)"""
    tqdm_module = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm_module, "tqdm", None), "_instances", ())):
        with contextlib.suppress(Exception):  # a bar whose stream is gone: the line matters more than the bar
            bar.close()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """While a command runs, transformers reports only errors and gives no deprecation warnings (FutureWarning),
    neither it nor huggingface_hub draws progress bars, and faiss's and bm25s's reports of their loading stay off the
    log. transformers is told through the environment where it is not imported yet (``core.quiet``), so that a
    command that never loads a model (``sync``) does not import it for this (about a second). Everything is put back
    after (the warning filters and log handlers too): a program that runs a command in its own process (a test, a
    notebook: ``main([...])``) keeps its environment and the libraries' settings.

    These settings are the process's, so commands that overlap (run in threads, or one inside another) share one
    quieting (``core.quiet.Shared``), and share transformers' with the library's own while it loads a model: the
    first to start quietens, the last to end puts back, and a command that ends while another (or a model's loading)
    still runs leaves the other quiet and puts nothing back that the other would keep."""
    with _QUIETING():
        yield


def _quieten() -> contextlib.ExitStack:
    """Quieten the libraries as ``quiet_transformers`` says; closing what it returns puts everything back.

    huggingface_hub is imported first (15 ms): it reads ``HF_HUB_DISABLE_PROGRESS_BARS`` once, when it is imported,
    and a value it read from the command's environment stayed for the whole process, where every later
    ``enable_progress_bars`` warned "Cannot enable progress bars". (The variable is still set for the command's child
    processes.)"""
    from huggingface_hub import constants as hub_constants
    from huggingface_hub import utils as hub_utils

    undo = contextlib.ExitStack()
    undo.enter_context(QUIET_TRANSFORMERS())  # closed last: transformers' verbosity and the warning filters
    saved_bars_variable = os.environ.get(HUB_BARS_VARIABLE)
    hub_bars = not hub_utils.are_progress_bars_disabled() and hub_constants.HF_HUB_DISABLE_PROGRESS_BARS is None
    if hub_bars:
        hub_utils.disable_progress_bars()
    os.environ[HUB_BARS_VARIABLE] = "1"  # for the command's child processes, and transformers imported during it

    def put_back() -> None:
        if saved_bars_variable is None:
            os.environ.pop(HUB_BARS_VARIABLE, None)
        else:
            os.environ[HUB_BARS_VARIABLE] = saved_bars_variable
        if hub_bars:  # before transformers' are put back (``core.quiet``), which follow the hub's where it was imported
            hub_utils.enable_progress_bars()  # during the command

    undo.callback(put_back)
    # the libraries' own chatter on the command's log: faiss says which CPU build it tried, and bm25s sets its logger
    # to DEBUG when it is imported
    faiss_loader = logging.getLogger("faiss.loader")
    undo.callback(faiss_loader.setLevel, faiss_loader.level)
    faiss_loader.setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_no_bm25s_chatter)
        undo.callback(handler.removeFilter, _no_bm25s_chatter)
    return undo


HUB_BARS_VARIABLE = "HF_HUB_DISABLE_PROGRESS_BARS"
_QUIETING = Shared(_quieten)


def _no_bm25s_chatter(record: logging.LogRecord) -> bool:
    """A log handler's filter: bm25s's records below WARNING are dropped."""
    return record.levelno >= logging.WARNING or not record.name.startswith("bm25s")


def _run(args: argparse.Namespace) -> int:
    """The parsed command, its errors reported as one line (status 2; 1 for ``CommandFailed``)."""
    level = logging.DEBUG if args.verbose else getattr(args, "quiet_log_level", logging.INFO)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        with contextlib.redirect_stdout(NamedStdout(sys.stdout)):
            with contextlib.nullcontext() if args.verbose else quiet_transformers():  # its reports and progress bars
                status = int(args.func(args) or 0)  # would drown the command's own output
            sys.stdout.flush()  # here, so that a reader gone away is met inside the try, not at the interpreter's exit
        return status
    except BrokenPipeError:
        reader_gone()
        return 0
    except ModuleNotFoundError as e:  # a third-party module not installed (an extra's, imported when the command runs)
        if (e.name or "").split(".")[0] == "spanseek":  # our own module missing is a fault, not an install choice
            raise
        if args.verbose:
            logging.getLogger("spanseek").exception("the command failed")
        print(f"{args.prog}: error: {missing_extra_message(e, args.prog)}", file=sys.stderr)
        return USAGE_ERROR
    except (ValueError, RuntimeError, OSError) as e:  # bad input, and the system's refusals (a read-only disk)
        if args.verbose:
            logging.getLogger("spanseek").exception("the command failed")
        if isinstance(e, OSError) and e.filename == NamedStdout.NAME:  # what it still holds goes nowhere at exit
            reader_gone()
        print(f"{args.prog}: error: {describe_error(e)}", file=sys.stderr)
        return FAILED if isinstance(e, CommandFailed) else USAGE_ERROR


class NamedStdout:
    """``sys.stdout`` while a command runs: an error writing the command's output (``> /dev/full``, a full disk, an
    I/O error) names standard output (``standard output: No space left on device``; it named no file). A reader gone
    away (BrokenPipeError) is left as it is: the command ends quietly (``reader_gone``)."""

    NAME = "standard output"

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._named(self._stream.write, text))

    def flush(self) -> None:
        self._named(self._stream.flush)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer: the stream's own
        return getattr(self._stream, name)

    @classmethod
    def _named(cls, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            if e.filename is not None:
                raise
            raise OSError(e.errno, e.strerror, cls.NAME) from None


def reader_gone() -> None:
    """The reader of our output went away (``| head``): what it read is all it wanted, so the command ends quietly.
    stdout is pointed at /dev/null, so that flushing it as Python exits raises no second error."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # (a stdout without a file descriptor)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def describe_error(e: BaseException) -> str:
    """One line for a failed command: an OS error as ``path: reason`` (``out: Is a directory``; a failed rename
    names its destination, the path the user gave), else its message."""
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.filename2 if e.filename2 is not None else e.filename}: {e.strerror}"
    return str(e)


if __name__ == "__main__":
    # `python -m spanseek.cli`: run the module the commands import (``spanseek.cli``), not this copy of it as
    # __main__, whose ``CommandFailed`` is another class than the one `sync` raises (its status was then 2, not 1)
    from spanseek.cli import main as command

    sys.exit(command())
