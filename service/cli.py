"""``spanseek serve``: run the search service with uvicorn. Flags mirror ``service.settings.Settings``.

    spanseek serve --index work/demo-index --model default --port 8000

Every flag left out falls back to its SPANSEEK_* environment variable, then to the settings' default.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")

def serve_flags() -> list[tuple[str, str, str]]:
    """(flag, settings field, help) of every setting: the flags are generated from ``Settings`` (its field names and
    descriptions), so a new setting is one line there. ``warmup`` is the switch ``--no-warmup``; other booleans
    (off by default, ``writes``) are switches that turn them on."""
    flags = []
    for name, info in Settings.model_fields.items():
        if name == "warmup":
            continue
        default = "" if info.is_required() else f"; default {info.get_default(call_default_factory=True)!r}"
        flags.append((f"--{name.replace('_', '-')}", name,
                      f"{info.description or name} (SPANSEEK_{name.upper()}{default})".replace("%", "%%")))
    return flags


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand."""
    p = sub.add_parser("serve", help="run the HTTP search service (FastAPI + uvicorn); every flag is also an "
                                     "environment variable")
    for flag, dest, help_text in serve_flags():
        if Settings.model_fields[dest].annotation is bool:  # a switch that is off by default: --writes
            p.add_argument(flag, dest=dest, action="store_const", const=True, default=None, help=help_text)
            continue
        # strings: pydantic converts and checks them as it does the environment's, naming the flag when they fail
        p.add_argument(flag, dest=dest, default=None, help=help_text)
    p.add_argument("--no-warmup", dest="warmup", action="store_false", default=None, help="skip warm-up searches")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the flags that were given, the environment (SPANSEEK_*) and the defaults, in that order."""
    given = {dest: getattr(args, dest) for _, dest, _ in serve_flags() if getattr(args, dest, None) is not None}
    if getattr(args, "warmup", None) is not None:
        given["warmup"] = args.warmup
    return Settings(**given)


def check_servable(settings: Settings) -> None:
    """Fail fast (before starting uvicorn) when the index or model cannot be found, or a file of the index is
    damaged (its checksum differs from the manifest's record). An alias is checked through to its target."""
    from spanseek.core.alias import resolve_alias
    from spanseek.core.model import resolve_model
    from spanseek.core.phrase_index import check_index

    check_index(resolve_alias(settings.index).target)
    resolve_model(settings.model)
    if settings.reader is not None:
        from spanseek.core.reader import resolve_reader

        resolve_reader(settings.reader)


def settings_errors(error: Any) -> str:
    """A pydantic ValidationError of ``Settings`` on one line, each problem named by its flag and environment
    variable: ``--max-batch-size / SPANSEEK_MAX_BATCH_SIZE: Input should be greater than or equal to 1 (got 0)``."""
    parts = []
    for problem in error.errors():
        if not problem["loc"]:  # a check across settings (default_top_k above max_top_k): its message names them
            parts.append(str(problem["msg"]))
            continue
        name = str(problem["loc"][0])
        given = problem.get("input")  # a flag's or variable's text as typed; other values as Python shows them
        parts.append(f"--{name.replace('_', '-')} / SPANSEEK_{name.upper()}: {problem['msg']} "
                     f"(got {given if isinstance(given, str) else repr(given)})")
    return "; ".join(parts)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from spanseek.service.app import create_app
    from spanseek.service.server import server_config
    from spanseek.service.tracing import provider_from_environment

    try:
        settings = settings_from_args(args)
    except ValidationError as e:
        raise ValueError(f"invalid settings: {settings_errors(e)}") from None
    check_servable(settings)
    config = server_config(create_app(settings, tracer_provider=provider_from_environment(os.environ)), settings,
                           args.log_level)  # from here on, logs are in the settings' format
    log.info("serving %s with model %s on http://%s:%d", settings.index, settings.model, settings.host, settings.port)
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down gracefully, then raises it again
        log.info("stopped")
    return 0
