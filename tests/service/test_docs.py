"""/docs and /redoc load nothing from outside the service: every script, style and icon they name is served by the
app itself (fastapi-offline's packaged Swagger UI and ReDoc).

    .venv/bin/python -m pytest -q tests/service/test_docs.py
"""

from __future__ import annotations

import re

import pytest

URL = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url:\s*'([^']+)'""")
KINDS = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_name_only_local_urls_that_answer(client, page):
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    urls = [a or b for a, b in URL.findall(r.text)]
    assert len(urls) >= 2 and "/openapi.json" in urls
    assert not re.search(r"https?://|//[a-z]", r.text, re.IGNORECASE)  # no CDN, fonts or validator host
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = client.get(url)
        kind = next(v for k, v in KINDS.items() if url.endswith(k))
        assert asset.status_code == 200 and kind in asset.headers["content-type"], url
        if kind == "javascript":
            assert len(asset.content) > 500_000  # the whole bundle, not a stub
    if page == "/docs":
        assert '"validatorUrl": null' in r.text


def test_static_assets_are_not_in_the_api_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert not any(p.startswith("/docs") or p.startswith("/redoc") for p in paths)
    assert client.get("/docs-static/no-such-file.js").status_code == 404
