"""The spanseek search service: FastAPI app, settings, micro-batcher, metrics and error mapping.

Run it with ``spanseek serve --index INDEX_DIR --model default`` (see docs/service.md), or build the app in
code with ``service.app.create_app(service.settings.Settings(index=...))``. Nothing imports this package
except ``spanseek.cli``; it imports ``core`` and never ``trainer``.
"""
