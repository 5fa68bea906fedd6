"""``spanseek serve``: run the search service with uvicorn. Flags mirror ``service.settings.Settings``.

    spanseek serve --index work/demo-index --model default --port 8000

Every flag left out falls back to its SPANSEEK_* environment variable, then to the settings' default; a key and
its file are one setting there (``--api-key-file`` overrides ``SPANSEEK_API_KEY``).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import logging.config
import os
import re
import signal
import threading
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")

def serve_flags() -> list[tuple[str, str, str]]:
    """(flag, settings field, help) of every setting: the flags are generated from ``Settings`` (its field names and
    descriptions), so a new setting is one line there; each help names the setting's variable and default.
    ``warmup`` is the switch ``--no-warmup``; other booleans (off by default, ``writes``) are switches that turn them
    on."""
    flags = []
    for name, info in Settings.model_fields.items():
        default = "" if info.is_required() else f"; default {info.get_default(call_default_factory=True)!r}"
        description = info.description or name
        if name == "warmup":
            description = f"skip what is on by default: {description}"
        flags.append((flag_of(name), name, f"{description} (SPANSEEK_{name.upper()}{default})".replace("%", "%%")))
    return flags


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand."""
    p = sub.add_parser("serve", help="run the HTTP search service (FastAPI + uvicorn); its settings' flags are also "
                                     "environment variables (SPANSEEK_*)")
    for flag, dest, help_text in serve_flags():
        annotation = Settings.model_fields[dest].annotation
        if dest == "warmup":
            p.add_argument(flag, dest=dest, action="store_false", default=None, help=help_text)
        elif annotation is bool:  # a switch that is off by default: --writes
            p.add_argument(flag, dest=dest, action="store_const", const=True, default=None, help=help_text)
        else:  # strings: pydantic converts and checks them as it does the environment's, naming the flag when they fail
            choices = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()
            p.add_argument(flag, dest=dest, default=None, help=help_text,
                           metavar="{" + ",".join(choices) + "}" if choices else None)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="least level of the lines logged (default: %(default)s; a flag only, no environment variable)")
    p.set_defaults(func=_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the flags that were given, the environment (SPANSEEK_*) and the defaults, in that order."""
    given = {dest: getattr(args, dest) for _, dest, _ in serve_flags() if getattr(args, dest, None) is not None}
    return Settings(**given)


def check_servable(settings: Settings) -> Path:
    """Fail fast (before starting uvicorn) when the index or model cannot be found, a file of the index is damaged
    (its checksum differs from the manifest's record), the model did not build the index, the reader has no fitted
    reading, the device or runtime cannot be used here, or writes are on and the live directory cannot be written or
    another server writes to it (but for a standby, ``writes_standby``, which waits for it); from the manifest and
    the models' configs and fingerprints, loading no weights. An alias is checked through to its target. Returns the
    model directory that will serve (an earlier bundled default for an index it built)."""
    from spanseek.core.alias import AliasError, resolve_alias
    from spanseek.core.config import EncoderConfig
    from spanseek.core.encoding import pick_device
    from spanseek.core.io import naming_flag
    from spanseek.core.loading import builder_name, check_search_device, index_model
    from spanseek.core.model import CONFIG_NAME, given_model, model_fingerprint, phrase_fingerprint
    from spanseek.core.phrase_index import IndexFormatError, check_index, given_index
    from spanseek.service.live import follow_pointer_problem

    if (unwritten := follow_pointer_problem(Path(settings.index))) is not None:  # a replica started before the writer
        raise ValueError(f"{setting_names('index')} {unwritten}")
    try:
        with naming_flag(setting_names("index"), AliasError):  # (a dangling symlink, a file that names no index)
            target = resolve_alias(settings.index).target
    except OSError as e:  # a file read as a pointer whose first line is no path (a corpus): named, never quoted
        raise AliasError(f"{setting_names('index')} {settings.index}: not an index directory, nor a pointer file "
                         f"naming one (read as one: {e.strerror})") from None
    given_index(target, setting_names("index"))  # (missing, a file, a folder of no index: said naming the setting)
    manifest = check_index(target)
    given_model(settings.model, setting_names("model"))  # (a file, a folder of no model: said naming the setting)
    model_dir = index_model(manifest, settings.model, target)
    try:
        manifest.check_model(EncoderConfig.load(model_dir / CONFIG_NAME), model_fingerprint(model_dir),
                             phrase_fingerprint(model_dir))
    except IndexFormatError as e:  # as core.loading.check_index_model says it once the service has loaded
        raise IndexFormatError(f"{setting_names('model')} {settings.model!r}: {target}: {e} (it was built with the "
                               f"model {builder_name(manifest)!r})") from None
    if settings.reader is not None:
        from spanseek.core.reader import resolve_reader
        from spanseek.core.reading import READING_NAME

        reader_dir = resolve_reader(settings.reader, setting_names("reader"))
        if not (reader_dir / READING_NAME).is_file():  # core.loading.open_reading refuses it
            raise ValueError(f"{setting_names('reader')}: {reader_dir} has no {READING_NAME} (fit one with "
                             "`spanseek train fit-reading`)")
    if settings.writes:  # the live store makes the directory and its log when it loads
        from spanseek.indexer.live import base_dir, hold_index, hold_live_dir
        from spanseek.service.live import live_dir_of, live_dir_problem

        live_dir = live_dir_of(settings)
        problem = live_dir_problem(live_dir)
        if problem is not None:
            default = "" if settings.live_dir else " (the default: the index path + '.live')"
            raise ValueError(f"{setting_names('live_dir')}: the live directory of --writes{default}: {problem}")
        if live_dir.is_dir() and not settings.writes_standby:  # another server writes there (LiveStoreError naming
            hold_live_dir(live_dir).close()  # it); the store takes it to load, a standby once that server stops
        hold_index(target).close()  # no `spanseek index` command changes it now (LiveStoreError naming it)
        base_dir(live_dir, target)  # its writes were made over this index, its merged base is there (LiveStoreError)
    try:
        device = pick_device(settings.device)  # a device this machine lacks
    except ValueError as e:
        raise ValueError(f"{setting_names('device')}: {e}") from None
    try:
        check_search_device(settings.search_device)  # likewise, for the token index
    except ValueError as e:
        raise ValueError(f"{setting_names('search_device')}: {e}") from None
    if settings.runtime == "onnx":  # onnx runs fp32 on a CPU only, and must be installed
        from spanseek.core.runtime import pick_runtime

        precisions = {"precision": settings.precision}
        if settings.reader is not None:
            precisions["reader_precision"] = settings.reader_precision
        for name, precision in precisions.items():
            try:
                pick_runtime("onnx", device, "fp32" if precision == "auto" else precision)
            except ValueError as e:
                raise ValueError(f"{setting_names('runtime')} with {setting_names(name)} {precision}: {e}") from None
    return model_dir


def flag_of(name: str) -> str:
    """The ``spanseek serve`` flag of the setting ``name``: ``--max-batch-size``; ``--no-warmup`` for ``warmup``."""
    return "--no-warmup" if name == "warmup" else f"--{name.replace('_', '-')}"


def setting_names(name: str) -> str:
    """How a user gives the setting ``name``: ``--max-batch-size / SPANSEEK_MAX_BATCH_SIZE``."""
    return f"{flag_of(name)} / SPANSEEK_{name.upper()}"


SECRETS = frozenset(n for n, f in Settings.model_fields.items() if "SecretStr" in str(f.annotation))


def settings_errors(error: Any) -> str:
    """A pydantic ValidationError of ``Settings`` on one line, each problem named by its flag and environment
    variable: ``--max-batch-size / SPANSEEK_MAX_BATCH_SIZE: Input should be greater than or equal to 1 (got 0)``; a
    check across settings (default_top_k above max_top_k) is followed by the flags of the settings it names."""
    parts = []
    for problem in error.errors():
        message = str(problem["msg"]).removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        if not problem["loc"]:
            found = {n: re.search(rf"\b{n}\b", message) for n in Settings.model_fields}
            named = sorted((n for n, m in found.items() if m), key=lambda n: found[n].start())  # type: ignore[union-attr]
            parts.append(f"{message} ({', '.join(setting_names(n) for n in named)})" if named else message)
            continue
        name = str(problem["loc"][0])
        if problem["type"] == "missing":  # its input is every setting given: nothing of this one to show
            parts.append(f"{setting_names(name)}: {message}")
            continue
        if name in SECRETS:  # a key is not shown, not even a wrong one (the terminal, a log collector)
            parts.append(f"{setting_names(name)}: {message}")
            continue
        given = problem.get("input")  # a flag's or variable's text as typed; other values as Python shows them
        parts.append(f"{setting_names(name)}: {message} (got {given if isinstance(given, str) else repr(given)})")
    return "; ".join(parts)


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """A warning for each SPANSEEK_* variable that is close to a setting's name but is none (a typo is otherwise
    ignored without a word: ``SPANSEEK_MAX_BATCHSIZE=64`` served batches of 16). Other SPANSEEK_* variables (the
    compose file's, the demo's) are not settings and are left alone."""
    known = [name.upper() for name in Settings.model_fields]
    warnings = []
    for variable in sorted(environ):
        if not variable.upper().startswith("SPANSEEK_") or variable.upper()[9:] in known:
            continue
        close = difflib.get_close_matches(variable.upper()[9:], known, n=1, cutoff=0.85)
        if close:
            warnings.append(f"{variable} is not a setting, and is ignored: did you mean SPANSEEK_{close[0]}?")
    return warnings


def key_warnings(args: argparse.Namespace, settings: Settings) -> list[str]:
    """A warning for each key given as a flag (``ps`` shows a process's arguments, the key among them, to every user
    of the machine) and for each key file that users other than its owner may read or change."""
    from spanseek.core.keys import key_file_warning, key_flag_warning

    warnings = []
    for name in ("api_key", "admin_api_key"):
        given = getattr(args, name, None)
        if given is not None and given.strip():
            warnings.append(key_flag_warning(f"--{name.replace('_', '-')}", f"SPANSEEK_{name.upper()}"))
        path = getattr(settings, f"{name}_file")
        if path is not None and (warning := key_file_warning(path)) is not None:
            warnings.append(f"{setting_names(f'{name}_file')}: {warning}")
    return warnings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from spanseek.core.model import model_name
    from spanseek.service.app import create_app
    from spanseek.service.logs import logging_config
    from spanseek.service.server import bind_sockets, exit_past_unfinished_work, server_config
    from spanseek.service.tracing import provider_from_environment

    # a mistyped variable is often why a setting is missing or not what was meant (SPANSEEK_INDX: no index), so it is
    # named before anything can fail, and in the error line itself when the settings are refused
    mistyped = unknown_settings(os.environ)
    try:
        settings = settings_from_args(args)
    except ValidationError as e:
        raise ValueError("; ".join([f"invalid settings: {settings_errors(e)}", *mistyped])) from None
    logging.config.dictConfig(logging_config(settings.log_format, args.log_level))  # every line in the format
    for warning in mistyped:
        log.warning("%s", warning)
    sockets = bind_sockets(settings.host, settings.port)  # a port in use fails here, before the index is read
    try:
        model_dir = check_servable(settings)
        app = create_app(settings, tracer_provider=provider_from_environment(os.environ))
        config = server_config(app, settings, args.log_level)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    for warning in key_warnings(args, settings):
        log.warning("%s", warning)
    log.info("serving %s with model %s on http://%s:%d", settings.index, model_name(model_dir), settings.host,
             settings.port)
    # uvicorn stops gracefully on Ctrl-C or SIGTERM, puts back the handler it found and raises the signal again: Ctrl-C
    # comes back as KeyboardInterrupt, SIGTERM as Terminated (by default it would end the process, status 143). Only
    # the main thread handles signals (uvicorn too): run in another, serve leaves them to the program
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    server = uvicorn.Server(config)
    state = app.state.service
    state.stop_server = lambda: setattr(server, "should_exit", True)  # (as SIGTERM: the server stops gracefully)
    try:
        server.run(sockets=sockets)  # uvicorn closes them when it stops, once it has started
    except (KeyboardInterrupt, Terminated):
        log.info("stopped")
    finally:  # and here whether or not it started (closing twice is harmless)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        for sock in sockets:
            sock.close()
    # status 1 when it stopped because no search could be answered any more (ServiceState.batcher_stopped): a
    # restart policy that restarts only failures (compose's on-failure) starts it again too
    status = 1 if state.status == "broken" else 0
    if main_thread:  # the process ends here: not after a load of the index nobody waits for
        exit_past_unfinished_work(app, status=status)
    return status


class Terminated(Exception):
    """SIGTERM, once uvicorn has stopped the service gracefully (``_serve``)."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated
