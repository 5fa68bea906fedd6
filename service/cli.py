"""``spanseek serve``: run the search service with uvicorn. Flags mirror ``service.settings.Settings``.

    spanseek serve --index work/demo-index --model default --port 8000

Every flag left out falls back to its SPANSEEK_* environment variable, then to the settings' default.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")

# (flag, settings field, type, help); the default of every flag is None = "not given, use env/default"
_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--index", "index", str, "index directory or alias of one (SPANSEEK_INDEX)"),
    ("--index-poll-s", "index_poll_s", float, "seconds between checks for a switched index alias (0 = off)"),
    ("--model", "model", str, "model directory or 'default' (SPANSEEK_MODEL)"),
    ("--host", "host", str, "listen address (default 127.0.0.1)"),
    ("--port", "port", int, "listen port (default 8000)"),
    ("--keep-alive-s", "keep_alive_s", int, "HTTP keep-alive idle timeout in seconds (default 75)"),
    ("--header-timeout-s", "header_timeout_s", float, "seconds a client has to send a request's headers"),
    ("--body-timeout-s", "body_timeout_s", float, "seconds a client has to send a request's body (408 after)"),
    ("--device", "device", str, "auto, cpu, cuda, cuda:N"),
    ("--precision", "precision", str, "auto, fp32 or bf16"),
    ("--search-device", "search_device", str, "where the index is searched: auto (the encoder's), cpu, cuda, cuda:N"),
    ("--torch-threads", "torch_threads", int, "torch intra-op threads on CPU"),
    ("--max-batch-size", "max_batch_size", int, "most questions per batch"),
    ("--max-wait-ms", "max_wait_ms", float, "longest wait for a batch to fill"),
    ("--pipeline", "pipeline", str, "auto, on, full (overlap only with a full batch waiting) or off"),
    ("--max-queue-wait-ms", "max_queue_wait_ms", float, "429 when the expected queueing time exceeds this"),
    ("--max-queue", "max_queue", int, "queued questions before 429 (hard cap)"),
    ("--default-top-k", "default_top_k", int, "hits per query by default"),
    ("--max-top-k", "max_top_k", int, "largest top_k accepted"),
    ("--max-offset-top-k", "max_offset_top_k", int, "largest offset + top_k accepted (pagination bound)"),
    ("--max-queries-per-request", "max_queries_per_request", int, "most queries per request"),
    ("--max-query-chars", "max_query_chars", int, "query characters kept before tokenisation"),
    ("--max-body-bytes", "max_body_bytes", int, "largest request body"),
    ("--passage-context-chars", "passage_context_chars", int, "passage characters each side of a hit's phrase"),
    ("--max-response-bytes", "max_response_bytes", int, "largest /search response body"),
    ("--max-answer-tokens-limit", "max_answer_tokens_limit", int, "largest max_answer_tokens accepted"),
    ("--default-nprobe", "default_nprobe", int, "IVF nprobe by default"),
    ("--max-nprobe", "max_nprobe", int, "largest nprobe accepted"),
    ("--api-key", "api_key", str, "require this API key (prefer SPANSEEK_API_KEY: flags show in ps)"),
    ("--cors-origins", "cors_origins", str, "comma-separated allowed browser origins"),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand."""
    p = sub.add_parser("serve", help="run the HTTP search service (FastAPI + uvicorn)")
    for flag, dest, typ, help_text in _FLAGS:
        p.add_argument(flag, dest=dest, type=typ, default=None, help=help_text)
    p.add_argument("--no-warmup", dest="warmup", action="store_false", default=None, help="skip warm-up searches")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the flags that were given, the environment (SPANSEEK_*) and the defaults, in that order."""
    given = {dest: getattr(args, dest) for _, dest, _, _ in _FLAGS if getattr(args, dest, None) is not None}
    if getattr(args, "warmup", None) is not None:
        given["warmup"] = args.warmup
    return Settings(**given)


def check_servable(settings: Settings) -> None:
    """Fail fast (before starting uvicorn) when the index or model cannot be found, or a file of the index is
    damaged (its checksum differs from the manifest's record). An alias is checked through to its target."""
    from spanseek.core.alias import resolve_alias
    from spanseek.core.model import resolve_model
    from spanseek.core.store import check_index

    check_index(resolve_alias(settings.index).target)
    resolve_model(settings.model)


def settings_errors(error: Any) -> str:
    """A pydantic ValidationError of ``Settings`` on one line, each problem named by its flag and environment
    variable: ``--max-batch-size / SPANSEEK_MAX_BATCH_SIZE: Input should be greater than or equal to 1 (got 0)``."""
    parts = []
    for problem in error.errors():
        if not problem["loc"]:  # a check across settings (default_top_k above max_top_k): its message names them
            parts.append(str(problem["msg"]))
            continue
        name = str(problem["loc"][0])
        parts.append(f"--{name.replace('_', '-')} / SPANSEEK_{name.upper()}: {problem['msg']} "
                     f"(got {problem.get('input')!r})")
    return "; ".join(parts)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from spanseek.service.app import create_app
    from spanseek.service.server import server_config

    try:
        settings = settings_from_args(args)
    except ValidationError as e:
        raise ValueError(f"invalid settings: {settings_errors(e)}") from None
    check_servable(settings)
    log.info("serving %s with model %s on http://%s:%d", settings.index, settings.model, settings.host, settings.port)
    uvicorn.Server(server_config(create_app(settings), settings, args.log_level)).run()
    return 0
