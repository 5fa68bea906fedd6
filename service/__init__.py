"""The spanseek search service: FastAPI app, settings, micro-batcher, metrics and error mapping.

Run it with ``spanseek serve --index INDEX_DIR --model default`` (see docs/service.md), or build the app in
code with ``spanseek.service.app.create_app(spanseek.service.settings.Settings(index=...))``. Nothing imports this package
except ``spanseek.cli``; it imports ``core`` and never ``trainer``.
"""

if __name__ != "spanseek.service":  # one import root: never a top-level `service` that shadows users' own modules
    raise ImportError(f"this is spanseek.service; import it as `spanseek.service`, not as `{__name__}`")
