"""The answers of `POST /search` that the pages show have the response's shape: each is a valid `SearchResponse`,
every field of a hit they show is one the service sends, and `timings_ms` names every stage the service reports.

    .venv/bin/python -m pytest -q tests/service/test_page_answers.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spanseek.service.schemas import HitOut, SearchResponse, Timings

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/service.md", "docs/python.md")
JSON_FENCE = re.compile(r"^```json[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def shown_answers() -> list[tuple[str, dict]]:
    """(page:line, the object) of each ```json block of the pages that is a search answer (has `timings_ms`)."""
    out = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for block in JSON_FENCE.finditer(text):
            try:
                obj = json.loads(block.group(1))
            except json.JSONDecodeError:
                continue  # a fragment, not a whole answer
            if isinstance(obj, dict) and "timings_ms" in obj:
                out.append((f"{page}:{text.count(chr(10), 0, block.start(1)) + 1}", obj))
    return out


ANSWERS = shown_answers()


def test_the_pages_show_answers():
    assert {where.split(":")[0] for where, _ in ANSWERS} >= {"docs/service.md", "docs/python.md"}


@pytest.mark.parametrize(("where", "answer"), ANSWERS, ids=[w for w, _ in ANSWERS])
def test_a_shown_answer_has_the_responses_fields(where, answer):
    SearchResponse.model_validate(answer)
    assert set(answer) <= set(SearchResponse.model_fields), where
    assert list(answer["timings_ms"]) == list(Timings.model_fields), f"{where}: timings_ms as the service sends it"
    for result in answer["results"]:
        for hit in result["hits"]:
            assert set(hit) <= set(HitOut.model_fields), f"{where}: {sorted(set(hit) - set(HitOut.model_fields))}"


def test_the_timing_headers_the_page_names_are_every_stage_the_service_reports():
    """docs/service.md names the `X-Spanseek-{...}-Ms` headers as one brace list; it left out `Read`, which every
    answer carries."""
    text = (ROOT / "docs/service.md").read_text(encoding="utf-8")
    listed = re.search(r"`X-Spanseek-\{([\w,]+)\}-Ms`", text)
    assert listed, "docs/service.md no longer lists the timing headers"
    stages = [name.capitalize() for name in Timings.model_fields if name != "batch_size"]
    assert listed.group(1).split(",") == stages
