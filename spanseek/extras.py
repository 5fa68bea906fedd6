"""Which install extra provides which third-party module, and the message that names it when one is missing.

A plain ``pip install spanseek`` builds, searches and evaluates indexes; the service, the client, document formats,
training and tracing come with role extras (pyproject.toml). A command or an import whose extra is not installed
says which one to install (``pip install 'spanseek[serve]'``) instead of ending in a traceback:

    from spanseek.extras import require_extra
"""

from __future__ import annotations

# The import name of every module an extra brings, by the extra that lists its distribution in pyproject.toml
# (tests/test_packaging.py checks the two agree).
EXTRA_OF_MODULE = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "pydantic": "serve",
    "pydantic_settings": "serve",
    "prometheus_client": "serve",
    "pythonjsonlogger": "serve",
    "fastapi_offline": "serve",
    "opentelemetry": "otel",
    "markdown_it": "index",
    "yaml": "index",
    "trafilatura": "index",
    "pdfminer": "index",
    "docx": "index",
    "pptx": "index",
    "pysbd": "index",
    "lxml": "index",
    "httpx": "client",
    "tenacity": "client",
    "ray": "ray",
    "sklearn": "train",
}


class MissingExtraError(ModuleNotFoundError):
    """A module of an extra that is not installed; its message names the extra (``name`` stays the module's, as in
    the ``ModuleNotFoundError`` it replaces)."""


def extra_for(module: str | None) -> str | None:
    """The extra that provides ``module`` (a dotted import name: its top-level package decides), or None."""
    return EXTRA_OF_MODULE.get((module or "").split(".")[0])


def missing_extra_message(e: ModuleNotFoundError, what: str) -> str:
    """One line for ``what`` (``spanseek serve``, ``spanseek.client``) failing on the missing module of ``e``: the
    extra to install, or the module itself when no extra provides it."""
    module = (e.name or "?").split(".")[0]
    extra = extra_for(module)
    if extra is None:
        return f"{what} needs the Python package {module!r}, which is not installed"
    return f"{what} needs the '{extra}' extra (module {module!r} is not installed): pip install 'spanseek[{extra}]'"


def require_extra(e: ModuleNotFoundError, what: str) -> MissingExtraError:
    """``e`` as the error to raise in its place (``raise require_extra(e, "spanseek.client") from None``)."""
    return MissingExtraError(missing_extra_message(e, what), name=e.name)
