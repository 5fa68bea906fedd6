"""The fields the pages list are the ones the program writes: ``spanseek eval``'s metrics (docs/questions.md).

    .venv/bin/python -m pytest -q tests/test_docs_fields.py

A page that lists a key where the program writes it elsewhere (``articles_not_in_index`` at the top level, where
``eval`` writes it under ``doc``) sends a reader's script to a key that is never there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spanseek.core import evaluate as evaluate_module
from tests.core.test_evaluate import QUESTIONS, ScriptedSearcher

ROOT = Path(__file__).resolve().parents[1]


def flat_keys(metrics: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key of ``metrics``, nested ones as dotted paths (``doc.acc@1``)."""
    keys = set()
    for key, value in metrics.items():
        keys.add(prefix + key)
        if isinstance(value, dict):
            keys |= flat_keys(value, f"{prefix}{key}.")
    return keys


def documented_eval_keys() -> set[str]:
    """The keys of docs/questions.md's "What `spanseek eval` reports": the table's first column (``passage.acc@k``
    (1, 5, 20) read as each k) and the names in backticks of the paragraph after it."""
    text = (ROOT / "docs/questions.md").read_text(encoding="utf-8")
    section = text.split("## What `spanseek eval` reports", 1)[1]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    after = section[section.index(table[-1]) + len(table[-1]):]
    keys = set()
    for row in table:
        cell = row.split("|")[1]
        ks = re.search(r"\(([\d, ]+)\)", cell)
        for name in re.findall(r"`([^`]+)`", cell):
            keys |= {name.replace("@k", f"@{k.strip()}") for k in ks.group(1).split(",")} if "@k" in name and ks \
                else {name}
    keys |= {name for name in re.findall(r"`([a-z_.@\d]+)`", after) if "_" in name or "." in name}
    return keys


def test_the_keys_docs_questions_lists_are_those_eval_writes(monkeypatch):
    monkeypatch.setattr(evaluate_module, "count_trained", lambda model_dir, questions: 1)
    searcher = ScriptedSearcher()
    searcher.index.docs = [{"title": "france.pdf"}, {"title": "USA"}]  # one question's article is not in the index
    anonymous = QUESTIONS[0].__class__("q3", QUESTIONS[0].question, ("Paris",), (), "", "", -1, -1)
    written = flat_keys(evaluate_module.evaluate(searcher, [*QUESTIONS, anonymous], reading_comprehension=False,
                                                 progress=False, unanswerable_skipped=1))
    written |= flat_keys(evaluate_module.evaluate(ScriptedSearcher(), QUESTIONS, reading_comprehension=True,
                                                  progress=False))
    documented = documented_eval_keys()
    assert {"phrase.em@1", "passage.acc@20", "rc.em", "ci95", "unanswerable_skipped", "trained_questions"} <= documented
    assert sorted(documented - written) == []


@pytest.mark.parametrize(("row", "keys"), [
    ("| `passage.acc@k` (1, 5, 20) | ... |", {"passage.acc@1", "passage.acc@5", "passage.acc@20"}),
    ("| `rc.em`, `rc.f1` | ... |", {"rc.em", "rc.f1"}),
])
def test_a_table_row_is_read_as_its_keys(monkeypatch, row, keys, tmp_path):
    page = tmp_path / "docs" / "questions.md"
    page.parent.mkdir()
    page.write_text(f"## What `spanseek eval` reports\n\n| key | per question |\n|---|---|\n{row}\n\nNothing after.\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert documented_eval_keys() == keys


def test_the_metrics_filter_example_of_docs_service_gives_each_series_it_names():
    """docs/service.md's ``/metrics?name[]=`` example names series that /metrics gives, and a histogram's own name
    gives nothing, as the page says (its series are ``_bucket``, ``_count`` and ``_sum``)."""
    from spanseek.service.metrics import ServiceMetrics

    text = " ".join((ROOT / "docs/service.md").read_text(encoding="utf-8").split())
    example = re.search(r"`curl -sg '[^`']*/metrics\?([^`']+)'`", text)
    assert example, "docs/service.md no longer shows a /metrics?name[]= example with curl -g"
    names = re.findall(r"name\[\]=([\w]+)", example.group(1))
    metrics = ServiceMetrics()
    metrics.observe_search("phrase", 200, False, 0.01, None)
    metrics.ready.set(1)
    for name in names:
        lines = [line for line in metrics.render([name]).decode().splitlines() if not line.startswith("#")]
        assert [line for line in lines if line.split("{")[0].split(" ")[0] == name], (name, lines)
    assert metrics.render(["spanseek_request_duration_seconds"]) == b""


def filter_keys(node: Any) -> set[str]:
    """The metadata keys a filter's conditions name (``{"key": ...}`` at any depth)."""
    if isinstance(node, dict):
        own = {node["key"]} if isinstance(node.get("key"), str) else set()
        return own.union(*(filter_keys(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(filter_keys(value) for value in node))
    return set()


def test_the_live_writes_example_deletes_by_a_key_a_live_document_holds():
    """docs/service.md's live-writes example deleted its one document with a ``year`` and then deleted by a filter on
    ``year``: pasted in order, that filter was a 400 (a key no document has). Each filtered delete of the page's
    examples names only keys that a document it wrote, and has not deleted, holds."""
    import json

    from tests.test_docs_commands import doc_commands

    live: dict[str, set[str]] = {}
    checked = 0
    for cmd in doc_commands("docs/service.md"):
        argv = list(cmd.argv)
        if argv[0] != "curl":
            continue
        url = next((w for w in argv if "/documents" in w), "")
        method = argv[argv.index("-X") + 1] if "-X" in argv else "GET"
        body = json.loads(argv[argv.index("-d") + 1]) if "-d" in argv else None
        if method in ("PUT", "POST") and url.endswith("/documents") and body:
            live |= {doc["id"]: set(doc.get("meta", {})) for doc in body["documents"]}
        elif method == "DELETE" and "/documents/" in url:
            live.pop(url.rsplit("/", 1)[1], None)
        elif url.endswith("/documents/delete") and body:
            held = set().union(*live.values()) if live else set()
            assert filter_keys(body["filter"]) <= held, f"{cmd}: no live document holds {filter_keys(body['filter'])}"
            checked += 1
    assert checked, "docs/service.md no longer shows a POST /documents/delete example"


def test_the_client_result_classes_docs_python_lists_have_those_fields_in_that_order():
    """docs/python.md writes the client's result dataclasses as ``Hit(text, score, ...)``: the fields, in order (a
    program that builds one positionally, a test's fake, relies on it), and ``extra`` beside them."""
    import dataclasses

    from spanseek import client

    text = " ".join((ROOT / "docs/python.md").read_text(encoding="utf-8").split())
    for name in ("SearchResponse", "QueryResult", "Hit"):
        listed = re.search(rf"`{name}\(([\w, ]+)\)`", text)
        assert listed, f"docs/python.md no longer lists {name}'s fields"
        fields = [f.name for f in dataclasses.fields(getattr(client, name)) if f.name != "extra"]
        assert [word.strip() for word in listed.group(1).split(",")] == fields, name


def test_the_client_options_docs_python_lists_are_those_searchoptions_declares():
    """docs/python.md's **Options** lists every keyword argument of ``Client.search`` (``SearchOptions``)."""
    from spanseek.client import SearchOptions

    text = " ".join((ROOT / "docs/python.md").read_text(encoding="utf-8").split())
    options = re.search(r"listed with its type in `SearchOptions` \((.+?)\); options left out", text)
    assert options, "docs/python.md no longer lists SearchOptions"
    listed = re.findall(r"`(\w+)`(?:,|:| ;|$)", options.group(1) + ",")
    assert listed == list(SearchOptions.__annotations__)


def test_the_pages_name_every_format_a_file_write_reads():
    """`PUT /files/{name}` (README) and the client's `upsert_file` (docs/python.md) read every format that
    `corpus from-files` reads; the pages listed them without PowerPoint."""
    from spanseek.indexer.ingest import FORMATS

    names = {"text": "text", "markdown": "Markdown", "html": "HTML", "pdf": "PDF", "word": "Word",
             "powerpoint": "PowerPoint", "epub": "EPUB",
             "opendocument": "OpenDocument",
             "opendocument presentation": "OpenDocument", "opendocument spreadsheet": "OpenDocument",
             "excel": "Excel", "csv": "CSV", "e-mail": "e-mail", "rtf": "RTF"}
    assert set(FORMATS.values()) == set(names)
    for page, where in (("README.md", r"`PUT /files/\{name\}` \(([^)]*)\)"),
                        ("docs/python.md", r"`POST /files/\{name\}`: ([^;]*);")):
        listed = re.search(where, " ".join((ROOT / page).read_text(encoding="utf-8").split()))
        assert listed, f"{page} no longer lists the formats of a file write"
        assert [name for name in names.values() if name not in listed.group(1)] == [], (page, listed.group(1))


def test_the_error_table_and_sync_name_every_suffix_a_file_write_reads():
    """docs/service.md's 415 row (a name ending in no suffix a reader takes) and `spanseek sync`'s files list the
    suffixes; they stopped at .odp when the flat OpenDocument, spreadsheet, e-mail and RTF readers came."""
    from spanseek.indexer.ingest import FORMATS

    for page, where in (("docs/service.md", r"whose name ends in no suffix a reader takes \(([^;]*);"),
                        ("spanseek/sync.py", r"\(the same walk: ([^,]*),")):
        listed = re.search(where, " ".join((ROOT / page).read_text(encoding="utf-8").split()))
        assert listed, f"{page} no longer lists the suffixes from-files reads"
        assert listed.group(1).split() == list(FORMATS), (page, listed.group(1))


def env_file_comments(text: str) -> dict[str, str]:
    """deploy/spanseek.env: each variable it names -> the comment above it, its lines joined (``name: help``)."""
    comments: dict[str, str] = {}
    block: list[str] = []
    for line in text.splitlines():
        var = re.match(r"#\s*(SPANSEEK_\w+)=", line)
        if var:
            comments[var.group(1)] = " ".join(" ".join(block).split())
        elif line.startswith("#"):
            block.append(line.lstrip("#"))
            continue
        block = []
    return comments


def test_each_setting_of_the_env_file_says_what_its_help_says():
    """deploy/spanseek.env comments each setting with ``name: help``, the help of ``spanseek serve --help`` and of the
    settings table. Copied by hand, it went stale: ``precision`` still spoke of a start-up timing probe after auto
    came to go by the CPU's features, and ``default_read`` of ``max_request_cost`` after reading got its own
    ``max_passages_read``, which the file did not list."""
    from spanseek.service.settings import Settings

    comments = env_file_comments((ROOT / "deploy/spanseek.env").read_text(encoding="utf-8"))
    assert "SPANSEEK_MAX_PASSAGES_READ" in comments
    stale = {}
    for var, comment in comments.items():
        name = var.removeprefix("SPANSEEK_").lower()
        field = Settings.model_fields.get(name)
        wanted = f"{name}: {' '.join((field.description or '').split())}" if field else "(no such setting)"
        if comment != wanted:
            stale[var] = (comment, wanted)
    assert stale == {}


def env_file_drift(text: str, passed: set[str], monkeypatch: pytest.MonkeyPatch, index: Path) -> list[str]:
    """What is untrue of an env file that says "each line is the setting's default" and lists every setting the
    compose file does not pass (``passed``): a line whose value, read as the service reads it, is not its setting's
    default, a line of no setting, and a setting missing (host and port: the image sets them)."""
    from spanseek.service.settings import Settings

    values = {m[1]: m[2] for m in re.finditer(r"^#\s*(SPANSEEK_\w+)=(.*)$", text, re.MULTILINE)}
    names = {var: var.removeprefix("SPANSEEK_").lower() for var in values}
    drift = [f"{var}: no such setting" for var, name in names.items() if name not in Settings.model_fields]
    drift += [f"SPANSEEK_{name.upper()}: not listed" for name in Settings.model_fields
              if name not in {*names.values(), *passed, "host", "port", "index"}]
    for var, name in names.items():
        if name in Settings.model_fields:
            with monkeypatch.context() as m:
                m.setenv(var, values[var])
                got = getattr(Settings(index=index), name)
            if got != Settings.model_fields[name].default:
                drift.append(f"{var}={values[var]}: reads as {got!r}, the default is "
                             f"{Settings.model_fields[name].default!r}")
    return drift


def test_each_line_of_the_env_file_is_its_settings_default_and_no_setting_is_missing(tmp_path, monkeypatch):
    """deploy/spanseek.env says each of its lines is the setting's default and that it lists every setting the compose
    file does not pass itself; only the comments were checked, so a changed default or a new setting could be left
    out of it unseen."""
    passed = set()
    for name in ("docker-compose.yml", "docker-compose.gpu.yml"):
        text = (ROOT / "deploy" / name).read_text(encoding="utf-8")
        passed |= {var.lower() for var in re.findall(r"^\s+SPANSEEK_(\w+):", text, re.MULTILINE)}
    assert {"max_batch_size", "writes", "runtime"} <= passed
    text = (ROOT / "deploy/spanseek.env").read_text(encoding="utf-8")
    assert "each line is the setting's default" in " ".join(text.split())
    assert env_file_drift(text, passed, monkeypatch, tmp_path) == []


def test_an_env_file_line_that_is_not_the_default_or_a_setting_left_out_is_caught(tmp_path, monkeypatch):
    from spanseek.service.settings import Settings

    passed = set(Settings.model_fields) - {"default_top_k", "max_top_k", "warmup"}
    text = "# SPANSEEK_DEFAULT_TOP_K=10\n# SPANSEEK_MAX_TOP_K=50\n# SPANSEEK_WARMUP=true\n# SPANSEEK_TOP_KAY=3\n"
    assert env_file_drift(text, passed, monkeypatch, tmp_path) == [
        "SPANSEEK_TOP_KAY: no such setting", "SPANSEEK_MAX_TOP_K=50: reads as 50, the default is 100"]
    assert env_file_drift(text.replace("# SPANSEEK_WARMUP=true\n", ""), passed, monkeypatch, tmp_path)[1] == (
        "SPANSEEK_WARMUP: not listed")


def test_an_env_file_comment_is_read_as_its_lines_joined():
    text = ("# Header of the file\n\n# top_k: hits per\n#   query (400 above)\n# SPANSEEK_TOP_K=10\n\n"
            "# SPANSEEK_BARE=\n")
    assert env_file_comments(text) == {"SPANSEEK_TOP_K": "top_k: hits per query (400 above)", "SPANSEEK_BARE": ""}


def test_every_optional_setting_given_empty_is_unset_as_docs_service_says(tmp_path, monkeypatch):
    """docs/service.md: an empty optional variable is unset, as compose passes one that is not set. The rule was a
    hand-kept list of settings, so ``SPANSEEK_MAX_PASSAGES_READ=`` (deploy/spanseek.env's line, uncommented) was a
    refusal to start; it holds for every setting whose default is none."""
    from spanseek.service.settings import Settings

    text = " ".join((ROOT / "docs/service.md").read_text(encoding="utf-8").split())
    assert "An empty optional one, any whose default is `None` below" in text
    optional = [name for name, field in Settings.model_fields.items() if not field.is_required() and field.default is None]
    assert {"max_passages_read", "reader", "api_key"} <= set(optional)
    for name in optional:
        monkeypatch.setenv(f"SPANSEEK_{name.upper()}", " ")
    settings = Settings(index=tmp_path)
    assert {name: getattr(settings, name) for name in optional} == dict.fromkeys(optional)


def metric_rows(text: str) -> dict[str, tuple[str, str]]:
    """docs/service.md's "Metrics" table: each metric it names -> (type, labels cell); a row may name several
    (```a`, `b```) or a brace list (``spanseek_index_{tokens,passages}``)."""
    rows = {}
    for line in text.split("## Metrics", 1)[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `spanseek_") or len(cells) < 3:
            continue
        for name in re.findall(r"`(spanseek_[\w{},]+)`", cells[0]):
            brace = re.fullmatch(r"(\w*)\{([\w,]+)\}(\w*)", name)
            names = [brace[1] + part + brace[3] for part in brace[2].split(",")] if brace else [name]
            rows |= dict.fromkeys(names, (cells[1], " | ".join(cells[2:])))
    return rows


def exported_metrics() -> dict[str, tuple[str, set[str]]]:
    """What /metrics exports: each metric's name (a counter's with ``_total``, an info's with ``_info``, as a scrape
    shows them) -> (type, its label names)."""
    from prometheus_client.metrics import Info, MetricWrapperBase

    from spanseek.service.metrics import ServiceMetrics

    metrics = ServiceMetrics()
    suffix = {"counter": "_total", "info": "_info"}
    exported = {family.name + suffix.get(family.type, ""):
                (family.type, {label for sample in family.samples for label in sample.labels} - {"le"})
                for family in metrics.registry.collect()}
    for wrapper in vars(metrics).values():
        if isinstance(wrapper, MetricWrapperBase) and not isinstance(wrapper, Info):
            name = wrapper._name + suffix.get(wrapper._type, "")
            exported[name][1].update(wrapper._labelnames)
    return exported


def test_the_metrics_table_of_docs_service_is_what_metrics_exports():
    """Each series /metrics exports has its row in docs/service.md's "Metrics" table, of its type, naming each of its
    labels (`route` of ``spanseek_errors_total``), and each row's metric is exported. The question cache's two were
    exported, charted by the dashboard, and missing from the table."""
    exported = exported_metrics()
    rows = metric_rows((ROOT / "docs/service.md").read_text(encoding="utf-8"))
    assert {"spanseek_errors_total", "spanseek_model_info", "spanseek_index_tokens"} <= set(exported) & set(rows)
    assert sorted(set(rows) - set(exported)) == [], "rows of metrics /metrics does not export"
    assert sorted(set(exported) - set(rows)) == [], "metrics /metrics exports without a row"
    wrong = {name: (rows[name], kind, labels) for name, (kind, labels) in exported.items()
             if rows[name][0] != kind or not all(f"`{label}`" in rows[name][1] for label in labels)}
    assert wrong == {}


def test_a_metrics_row_names_each_metric_it_lists(tmp_path):
    text = ("## Metrics\n\n| metric | type | labels |\n|---|---|---|\n"
            "| `spanseek_index_{tokens,passages}` | gauge | |\n| `spanseek_a_total`, `spanseek_b` | counter | `x` = 1 |\n")
    assert metric_rows(text) == {"spanseek_index_tokens": ("gauge", ""), "spanseek_index_passages": ("gauge", ""),
                                 "spanseek_a_total": ("counter", "`x` = 1"), "spanseek_b": ("counter", "`x` = 1")}


def compose_variables(text: str) -> dict[str, str | None]:
    """The variables a compose file reads from the shell or deploy/.env (``${NAME:-default}``, ``${NAME}``): name ->
    its default (empty when it has none; None for one it requires, ``${NAME:?why}``)."""
    return {m[1]: None if m[2] == ":?" else m[3] or "" for m in re.finditer(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", text)}


def deploy_table_defaults(text: str) -> dict[str, str]:
    """docs/deploy.md's tables of variables: each variable a row names in its first cell -> its default cell (a row
    of several, ```A`, `B` | 64, 0 |``, gives each its own part, or each the one default it gives)."""
    defaults = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0])
        parts = [p.strip() for p in cells[1].split(",")] if len(names) > 1 else [cells[1]]
        if len(parts) == len(names):
            defaults |= dict(zip(names, parts, strict=True))
        elif len(parts) == 1:
            defaults |= dict.fromkeys(names, cells[1])
    return defaults


def test_each_variable_the_compose_files_read_has_its_row_and_default_in_docs_deploy():
    """docs/deploy.md's tables give each variable the compose files read (``${SPANSEEK_BACKUP_DIR:-spanseek-backups}``)
    its default as the file has it: `empty` for none, else the value (in backticks; a file's path may be its name
    alone, as the GPU file's ``thresholds-gpu.yml``)."""
    rows = deploy_table_defaults((ROOT / "docs/deploy.md").read_text(encoding="utf-8"))
    missing, wrong = [], []
    for name in ("docker-compose.yml", "docker-compose.gpu.yml"):
        for var, default in compose_variables((ROOT / "deploy" / name).read_text(encoding="utf-8")).items():
            if var not in rows:
                missing.append(f"{name}: {var}")
            elif not (rows[var].startswith("none: required") if default is None
                      else re.search(rf"`({re.escape(default)}|{re.escape(default.rsplit('/', 1)[-1])})`|^{re.escape(default)}"
                                     r"(,|$)", rows[var]) if default
                      else rows[var] == "empty"):
                wrong.append(f"{name}: {var} defaults to {default!r}; docs/deploy.md says {rows[var]!r}")
    assert {"SPANSEEK_BACKUP_DIR", "SPANSEEK_MAX_QUEUE", "SPANSEEK_ADMIN_API_KEY_FILE", "GRAFANA_ADMIN_PASSWORD"} <= set(rows)
    assert (missing, wrong) == ([], [])


def test_a_deploy_row_of_several_variables_gives_each_its_default():
    text = ("| `A_B`, `CC` | 64, empty | passed on |\n| `DD` | `./x.yml` (`y.yml` with the GPU file) | a file |\n"
            "| `EE`, `FF` | empty | keys |\n")
    assert deploy_table_defaults(text) == {"A_B": "64", "CC": "empty", "DD": "`./x.yml` (`y.yml` with the GPU file)",
                                           "EE": "empty", "FF": "empty"}
    assert compose_variables("a: ${A_B:-64}\nb: ${CC:-}\nc: ${PASSWORD:?set it}\n") == {"A_B": "64", "CC": "",
                                                                                          "PASSWORD": None}


def test_the_fields_docs_service_says_a_cursor_may_come_with_are_those_a_search_request_takes_beside_it():
    """docs/service.md's paging section said any field beside a cursor is a 422, while a page takes ``top_k``, its
    size; each field a request may give beside a cursor is named there, and no other."""
    from pydantic import ValidationError

    from spanseek.service.schemas import SearchRequest

    text = " ".join((ROOT / "docs/service.md").read_text(encoding="utf-8").split("## Paging with a cursor")[1].split())
    said = re.search(r"A cursor may come with ([^;]*); [^.]* so any other field beside it \(`offset` too\) is a 422", text)
    assert said, "docs/service.md no longer says which fields a cursor may come with"
    cursor = "A" * 22 + ".0"
    taken = set()
    for name, field in SearchRequest.model_fields.items():
        if name == "cursor":
            continue
        example = field.default if field.default not in (None, False) else {"query": "q", "queries": ["q"]}.get(name, 1)
        try:
            SearchRequest.model_validate({"cursor": cursor, name: example})
        except ValidationError:
            continue
        taken.add(name)
    assert "top_k" in taken and "offset" not in taken
    assert set(re.findall(r"`([a-z_]+)`", said.group(1).split("(")[0])) == taken
