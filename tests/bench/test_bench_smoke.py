"""Every benchmark the documentation cites runs end to end, as a user runs it, on a tiny model, corpus and index.

    pytest -q tests/bench/test_bench_smoke.py        # or: make bench-smoke

Each script is started as ``python bench/NAME.py`` (its own process, so imports that only work from bench/ and
flags are checked too) with the smallest sizes its flags allow, and the JSON it writes must hold the figures the
documentation quotes. Scripts that need a CUDA GPU run their CPU path where they have one, else ``--help``. Each
script's run is marked ``slow`` (eight to ten seconds each on two quiet cores, three minutes in all on an AVX2
EPYC): ``make bench-smoke`` runs them all; the checks of the suite itself and of pieces of the scripts stay quick.
``test_every_cited_script_has_a_smoke_test`` fails when a document cites a script that is missing or untested, and
``test_every_bench_script_imports`` (quick, in ``make test``) when any script under bench/ no longer imports.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from spanseek.core.selection import EXACT_SELECTED_TOKENS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "bench/README.md", "docs/*.md", "core/models/*/README.md"]
CITED = re.compile(r"(?<![\w/])bench/[a-z_0-9/]+\.(?:py|sh)")  # not tests/bench/...
SMOKED: set[str] = set()  # scripts with a smoke test, filled by @smoke


def smoke(script: str) -> Callable:
    """Register the decorated test as ``script``'s smoke test."""
    def register(test: Callable) -> Callable:
        SMOKED.add(script)
        return test
    return register


def start_bench(script: str, *args: object, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python bench/SCRIPT args`` from the repository root, its output captured."""
    cmd = ([] if script.endswith(".py") else ["bash"]) + [str(ROOT / script), *map(str, args)]
    if script.endswith(".py"):
        cmd.insert(0, sys.executable)
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TRANSFORMERS_VERBOSITY": "error",
                "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_bench(script: str, proc: subprocess.Popen, timeout: float = 600) -> str:
    """The output of the started ``script``; fail with it unless the script exits 0 within ``timeout`` seconds."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"{script} ran past {timeout} s:\n{stdout!r:.3000}\n{stderr!r:.3000}")
    if proc.returncode != 0:
        pytest.fail(f"{script} exited with {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return stdout


def run_bench(script: str, *args: object, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    """Run ``python bench/SCRIPT args`` from the repository root; fail with its output unless it exits 0."""
    return finish_bench(script, start_bench(script, *args, env=env), timeout)


def run_benches(*runs: tuple[object, ...]) -> list[str]:
    """``run_bench(*run)`` for each of ``runs`` side by side, for runs that need nothing of each other: most of each
    is the start-up of a process, one core's work. The outputs in order; the first failure fails the test."""
    started = [(str(run[0]), start_bench(str(run[0]), *run[1:])) for run in runs]
    try:
        return [finish_bench(script, proc) for script, proc in started]
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def results(path: Path, *keys: str) -> dict:
    """The JSON a script wrote, which must hold ``keys`` (``a.b`` looks inside ``a``)."""
    data = json.loads(path.read_text())
    for key in keys:
        node = data
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{path.name} lacks {key!r}"
            node = node[part]
    return data


def positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def test_a_failing_script_or_a_missing_figure_fails_its_smoke_test(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import json, sys\njson.dump({'qps': 1.0}, open(sys.argv[1], 'w'))\nraise RuntimeError('rotted')\n")
    with pytest.raises(pytest.fail.Exception, match="rotted"):
        run_bench(str(broken), tmp_path / "out.json")
    fine = tmp_path / "fine.py"
    fine.write_text("")
    with pytest.raises(pytest.fail.Exception, match="rotted"):  # also when run beside a script that passes
        run_benches((str(fine),), (str(broken), tmp_path / "beside.json"))
    with pytest.raises(AssertionError, match="ratio"):
        results(tmp_path / "out.json", "qps", "ratio")


# -- the documentation's list ------------------------------------------------------------------------------------


def cited_scripts() -> set[str]:
    return {m for pattern in DOCS for doc in ROOT.glob(pattern) for m in CITED.findall(doc.read_text())}


def test_every_cited_script_exists_and_has_a_smoke_test():
    cited = cited_scripts()
    assert "bench/service_load.py" in cited  # the pattern finds citations at all
    assert not {s for s in cited if not (ROOT / s).is_file()}, "cited scripts that do not exist"
    assert not cited - SMOKED, "cited scripts without a smoke test in this file"
    assert all((ROOT / s).is_file() for s in SMOKED)


def test_every_bench_script_imports():
    """Every script under bench/ imports as ``python bench/NAME.py`` would (bench/ and its folder first on the path),
    in one interpreter: a name moved out of a module fails here, in ``make test``, not only in its slow smoke run."""
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py"))
    probe = (
        "import importlib.util, sys\n"
        "failed = []\n"
        "for path in sys.argv[1:]:\n"
        "    folder = str(__import__('pathlib').Path(path).resolve().parent)\n"
        "    sys.path[:0] = [folder]\n"
        "    spec = importlib.util.spec_from_file_location('bench_probe_' + path.replace('/', '_')[:-3], path)\n"
        "    try:\n"
        "        spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "    except Exception as e:\n"
        "        failed.append(f'{path}: {type(e).__name__}: {e}')\n"
        "    finally:\n"
        "        sys.path.remove(folder)\n"
        "print('\\n'.join(failed))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, *scripts], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(scripts) > 20 and proc.stdout.strip() == "", proc.stdout


# -- indexing and in-process search ------------------------------------------------------------------------------


@smoke("bench/index_throughput.py")
@pytest.mark.slow
def test_index_throughput(tmp_path, tiny_model_dir, tiny_corpus):
    run_bench("bench/index_throughput.py", "--model", tiny_model_dir, "--corpus", tiny_corpus,
              "--limit-passages", 6, "--shard-passages", 4, "--out", tmp_path / "index.json")
    r = results(tmp_path / "index.json", "ratio", "raw_tokens_per_second", "build_tokens_per_second")
    assert r["passages"] == 6 and positive(r["ratio"])


@smoke("bench/model_cost.py")
@pytest.mark.slow
def test_model_cost(tmp_path, tiny_model_dir, tiny_corpus, tiny_squad):
    run_bench("bench/model_cost.py", "--models", f"{tiny_model_dir},{tiny_model_dir}", "--corpus", tiny_corpus,
              "--limit-passages", 6, "--questions", tiny_squad, "--split", "all", "--n-questions", 8,
              "--single-questions", 2, "--repeats", 1, "--out", tmp_path / "cost.json")
    r = results(tmp_path / "cost.json", "models", "cpu")
    first, second = r["models"]
    for row in (first, second):
        assert positive(row["questions_per_second_batch64"]) and positive(row["build_tokens_per_second"])
        assert row["index_bytes_per_token"] > row["faiss_bytes_per_token"] >= 4 * row["dim"]  # Flat: fp32 vectors
    assert first["ratio_to_first"]["index_bytes_per_token"] == 1.0
    assert second["ratio_to_first"]["index_bytes_per_token"] == 1.0  # the same model twice: the same index


@smoke("bench/lexical_scale.py")
@pytest.mark.slow
def test_lexical_scale(tmp_path, tiny_index, tiny_squad):
    args = ("--train", tiny_squad, "--questions", tiny_squad, "--sizes", "30,40", "--batch", 4, "--repeats", 1,
            "--index", tiny_index, "--workdir", tmp_path / "work", "--out", tmp_path / "lexical.json")
    run_bench("bench/lexical_scale.py", *args)
    r = results(tmp_path / "lexical.json", "cpu", "results.30.total.dense", "results.40.total.matches")
    assert {"30", "40", str(tiny_index)} == set(r["results"])
    assert all(positive(size["array_mb"]) for size in r["results"].values())
    assert "built" not in run_bench("bench/lexical_scale.py", *args)  # built once, under --workdir


@smoke("bench/search_throughput.py")
@pytest.mark.slow
def test_search_throughput(tmp_path, tiny_model_dir, tiny_index, tiny_squad):
    run_bench("bench/search_throughput.py", "--model", tiny_model_dir, "--index", tiny_index, "--questions", tiny_squad,
              "--split", "all", "--n-questions", 8, "--batch-size", 4, "--precision", "fp32", "--device", "cpu",
              "--out", tmp_path / "search.json")
    r = results(tmp_path / "search.json", "raw_encode_qps", "units.phrase.qps", "units.phrase.ratio",
                "units.passage.qps", "units.doc.qps", "units.phrase_merged.qps", "units.phrase.search_seconds")
    assert r["questions"] == 8 and all(positive(u["ratio"]) for u in r["units"].values())


@smoke("bench/live_search.py")
@pytest.mark.slow
def test_live_search(tmp_path, tiny_model_dir, squad_index, tiny_squad):
    run_bench("bench/live_search.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--n-questions", 8, "--batch-size", 4, "--writes", 2, "--tombstones", 1, "--repeats", 1, "--compare",
              "--precision", "fp32", "--out", tmp_path / "live.json")
    r = results(tmp_path / "live.json", "best.phrase", "best.passage", "best.doc", "differing")
    assert r["questions"] == 8 and r["writes"] == 2 and r["tombstones"] == 1
    assert all(positive(s) for arms in r["best"].values() for s in arms.values())
    assert set(r["best"]["doc"]) == {"base", "live, scanned", "live, faiss each round"}
    assert sum(r["differing"].values()) <= 1  # rounding may swap a near tie; a wrong merge differs everywhere


@smoke("bench/filter_selection.py")
def test_filter_selection(tmp_path):
    run_bench("bench/filter_selection.py", "--docs", 300, "--trials", 2, "--out", tmp_path / "filters.json")
    r = results(tmp_path / "filters.json", "forms", "selection_bytes_per_token", "field_index")
    assert r["documents"] == 300 and r["forms"]
    assert all(positive(form["select"]["median_ms"]) for form in r["forms"].values())


@smoke("bench/queue_model.py")
def test_queue_model(tmp_path):
    run_bench("bench/queue_model.py", "--fixed-ms", 16.3, "--per-question-ms", 3.3, "--waits-ms", "0,5",
              "--arrivals", 2000, "--out", tmp_path / "queue.json")
    r = results(tmp_path / "queue.json", "saturation_qps", "rate_qps", "rows")
    assert [row["max_wait_ms"] for row in r["rows"]] == [0, 5]
    assert all(row["p99_over_single"] >= row["p50_over_single"] > 0 for row in r["rows"])


@pytest.mark.slow
@smoke("bench/reading.py")
def test_reading(tmp_path, squad_index, tiny_model_dir, tiny_reader, tiny_squad):
    # read_below needs confidences: a copy of the model with a calibrator of the index's hybrid searches
    import shutil
    from dataclasses import replace

    from spanseek.core.confidence import CALIBRATION_NAME
    from spanseek.core.io import load_squad
    from spanseek.core.model import model_fingerprint
    from tests.core.test_answers import calibrator

    model = tmp_path / "calibrated"
    shutil.copytree(tiny_model_dir, model)
    fitted = calibrator(fingerprint=model_fingerprint(model))
    replace(fitted, present=dict(fitted.models)).save(model / CALIBRATION_NAME)  # a presence model: priors apply
    common = ("--index", squad_index, "--reader", tiny_reader, "--questions", tiny_squad, "--batch-size", 8,
              "--precision", "fp32", "--reader-precision", "fp32")
    elsewhere = tmp_path / "elsewhere.json"  # the same questions, of articles the index does not hold
    elsewhere.write_text(json.dumps({"version": "1.1", "data": [{**a, "title": f"Elsewhere {a['title']}"}
                                                                for a in load_squad(tiny_squad)]}))
    run_benches(
        ("bench/reading.py", *common, "--model", tiny_model_dir, "--limit", 24, "--speed-batches", 1,
         "--out", tmp_path / "reading.json"),
        ("bench/reading.py", *common, "--model", tiny_model_dir, "--limit", 8, "--parts", "with_read",
         "--out", tmp_path / "read-only.json"),
        ("bench/reading.py", *common, "--model", model, "--limit", 16, "--speed-batches", 1, "--parts", "speed",
         "--read-below", 0, 1, "--out", tmp_path / "below.json"),
        ("bench/reading.py", *common, "--model", model, "--limit", 8, "--parts", "prior", "--absent-questions",
         elsewhere, "--priors", 0, 0.5, "--readings", tiny_reader / "reading.json", "--out", tmp_path / "prior.json"),
    )
    r = results(tmp_path / "reading.json", "cpu", "speed.with_read_qps", "speed.without_read_qps", "speed.ratio",
                "without_read.phrase_em@1", "with_read.passage_acc@5", "with_read.first_hit_ece", "reader_rc")
    assert r["questions"] == 24 and positive(r["speed"]["ratio"])
    assert r["cost"]["read_cost"]["5"] > r["cost"]["read_cost"]["1"] > 1 and positive(r["cost"]["per_passage"])
    prior = results(tmp_path / "prior.json", "prior")["prior"]
    # the reader's own fit again, from its file, on the same reads: the same numbers
    assert results(tmp_path / "prior.json", "readings")["readings"][str(tiny_reader / "reading.json")] == {
        "prior": prior}
    for unit in ("phrase", "passage", "doc"):  # the prior moves read hits' confidence on the unanswerable ones
        assert prior[f"{unit}@0.5"]["mean_confidence_absent"] < prior[f"{unit}@0"]["mean_confidence_absent"]
    part = results(tmp_path / "read-only.json", "with_read.phrase_em@1")
    assert not {"speed", "without_read", "reader_rc"} & set(part)  # only the part asked for
    below = results(tmp_path / "below.json", "read_below")["read_below"]
    assert below["0.0"]["phrase_questions_read"] == 0 < below["1.0"]["phrase_questions_read"]
    assert positive(below["0.0"]["ratio"]) and "phrase_em@1" in below["1.0"]


@pytest.mark.slow
@smoke("bench/reading_absent_share.py")
def test_reading_absent_share(tmp_path):
    """From a --reads file as `spanseek train fit-reading --reads` keeps it (questions of four articles, and
    unanswerable ones), each --absent count measured in two folds; reading the unanswerable ones lowers their
    confidence."""
    from spanseek.trainer.fit_reading import save_reads
    from tests.trainer.test_reader_training import synthetic_reads

    rng = np.random.default_rng(0)
    reads = [r for k in range(4) for absent, n in ((False, 40), (True, 20))
             for r in synthetic_reads(rng, n, absent, f"a{k}")]
    save_reads(tmp_path / "fit.reads", {}, {200: reads})
    run_bench("bench/reading_absent_share.py", "--reads", tmp_path / "fit.reads", "--absent", 0, 40, "--depth", 1,
              "--out", tmp_path / "share.json")
    r = results(tmp_path / "share.json", "reads", "by_absent.0.phrase.ece_answerable", "by_absent.40.doc.auroc")
    assert (r["reads"], r["questions"], r["absent_questions"], r["window_chars"]) == (
        str(tmp_path / "fit.reads"), 160, 80, 200)
    for unit in ("phrase", "passage", "doc"):
        assert r["by_absent"]["40"][unit]["confidence_unanswerable"] < r["by_absent"]["0"][unit][
            "confidence_unanswerable"]


@pytest.mark.slow
@smoke("bench/reading_unanswerable.py")
def test_reading_unanswerable(tmp_path, squad_index, tiny_model_dir, tiny_reader, tiny_squad):
    from spanseek.core.io import load_squad

    elsewhere = tmp_path / "elsewhere.json"  # questions of articles the index does not hold
    elsewhere.write_text(json.dumps({"version": "1.1", "data": [{**a, "title": f"Elsewhere {a['title']}"}
                                                                for a in load_squad(tiny_squad)]}))
    run_bench("bench/reading_unanswerable.py", "--index", squad_index, "--questions", tiny_squad, "--train", elsewhere,
              "--model", tiny_model_dir, "--reader", tiny_reader, "--limit", 16, "--out-of-corpus", 4,
              "--readings", tiny_reader / "reading.json", "--batch-size", 8, "--out", tmp_path / "unanswerable.json")
    r = results(tmp_path / "unanswerable.json", "cpu", "unread.answerable.phrase.ece", "read")
    assert (r["questions"], r["articles"], r["out_of_corpus"]["other_articles"]) == (16, 4, 4)
    read = r["read"][str(tiny_reader / "reading.json")]  # (keyed by the path: a dotted key for ``results``)
    assert read["read_passages"] == 3
    for unit in ("phrase", "passage", "doc"):
        assert 0 <= read["answerable"][unit]["ece"] <= 1 and 0 <= read["half_removed"][f"{unit}@0.5"]["ece"] <= 1
        assert 0 <= read["out_of_corpus"][f"{unit}@0"]["max"] <= 1
        # the prior discounts the read confidence of questions the index cannot answer
        assert read["out_of_corpus"][f"{unit}@0.5"]["mean_confidence"] <= read["out_of_corpus"][f"{unit}@0"][
            "mean_confidence"]


@smoke("bench/search_snapshot.py")
@pytest.mark.slow
def test_search_snapshot(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    # compared with itself (one process start instead of two): every hit must match
    out = tmp_path / "snapshot.json"
    report = json.loads(run_bench("bench/search_snapshot.py", "--index", squad_index, "--model", tiny_model_dir,
                                  "--questions", tiny_squad, "--limit", 6, "--out", out, "--compare", out))
    snapshot = results(out, "phrase/dense", "passage/hybrid", "doc/lexical")
    assert len(snapshot["phrase/dense"]) == 6 and snapshot["phrase/dense"][0]
    assert report["phrase/dense"] == {"questions": 6, "compared": 6, "differ": 0, "tied_duplicates_reordered": 0}


@smoke("bench/flat_scan.py")
@pytest.mark.slow
def test_flat_scan(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    out = tmp_path / "flat_scan.json"
    run_bench("bench/flat_scan.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--limit-questions", 9, "--repeats", 1, "--out", out)
    report = results(out, "cpu", "half_used", "fp16_native", "product_ms.rows=128.mkl", "scan_ms.rows=2 k=32.ratio",
                     "search_ms.phrase batch=8.ratio", "same_hits.doc/hybrid batch=8.differ")
    assert positive(report["scan_ms"]["rows=128 k=256"]["reduced"])
    assert report["same_hits"]["phrase/dense batch=1"]["lists"] == 9


@smoke("bench/small_batches.py")
@smoke("bench/batch_overheads.py")
@pytest.mark.slow
def test_batch_overheads_and_small_batches(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    """Both time ``search_vectors`` by batch size with the options they share; the per-batch costs' hits, written
    and compared in the same run, are all identical, and its synthetic token map is timed at a small size."""
    hits = tmp_path / "hits.json"
    common = ("--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad, "--n-questions", 6,
              "--timed-questions", 4, "--repeats", 1, "--units", "phrase", "doc", "--modes", "dense")
    run_benches(
        ("bench/batch_overheads.py", *common, "--batch-sizes", 1, 4, "--scale-tokens", 200_000, "--scale-passages", 5000,
         "--scale-docs", 1000, "--scale-runs", 2, "--hits-out", hits, "--compare", hits,
         "--out", tmp_path / "overheads.json"),
        ("bench/small_batches.py", *common, "--batch-sizes", 1, 2, "--scan-rows", 2, "--scan-runs", 1,
         "--out", tmp_path / "small.json"),
    )
    report = results(tmp_path / "overheads.json", "cpu", "synthetic.ms.allowed_token_mask",
                     "synthetic.ms.unit_counts_doc", "runs.deleted/doc/dense/4.ms_per_batch", "identical_to.counts")
    counts = report["identical_to"]["counts"]
    assert set(counts) == {f"{s}/{u}/dense" for s in ("none", "filter", "deleted") for u in ("phrase", "doc")}
    assert all(c == {"identical": 6, "questions": 6} for c in counts.values())
    assert report["synthetic"]["selection_cached"] and positive(report["runs"]["filter/phrase/dense/1"]["ms_per_batch"])
    # the allowed ids are timed for a selection an exact search scores whole, not for one that never makes them
    assert 0 < report["synthetic"]["ids_selection_tokens"] <= EXACT_SELECTED_TOKENS < 200_000
    results(tmp_path / "small.json", "cpu", "runs", "scan_runs")


@smoke("bench/live_snapshot_cost.py")
@pytest.mark.slow
def test_live_snapshot_cost(tmp_path):
    out = tmp_path / "live_snapshot_cost.json"
    run_bench("bench/live_snapshot_cost.py", "--passages", 2000, "--segment", "10,20", "--tombstones", 5,
              "--writes", 1, "--out", out)
    rows = json.loads(out.read_text())
    assert [r["segment_documents"] for r in rows] == [10, 20] and all(positive(r["snapshot_s"]) for r in rows)


@smoke("bench/top_values.py")
@pytest.mark.slow
def test_top_values(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    out = tmp_path / "top_values.json"
    run_bench("bench/top_values.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--batch-size", 4, "--repeats", 1, "--out", out)
    report = results(out, "cpu", "gather_width", "tokens")
    assert report["cases"] and all(v["same_values"] and positive(v["whole_ms"]) for v in report["cases"].values())


def test_service_load_asks_no_question_twice_until_the_passages_run_out():
    """A reading service remembers recent reads: a benchmark that asked its questions again would time that memory.
    Each phase gets questions no earlier phase asked, however many it asks, while the passages give new ones."""
    sys.path.insert(0, str(ROOT / "bench"))
    from service_load import Questions

    words = " ".join(f"w{i}" for i in range(40))
    questions = Questions([{"text": words}, {"text": "Too short."}])
    first = questions.phase()
    asked = [first[i] for i in range(0, 300, 3)]  # a closed loop of three clients, each its own stride
    second = questions.phase()
    later = second.batch(0, 200)
    assert len(set(asked + later)) == len(asked) + len(later)
    assert set(later).isdisjoint(first[i] for i in range(298))  # nothing the first phase skipped over either
    assert all(q.split()[0] in ("Who", "What", "When", "Where") and q.endswith("?") for q in later)
    # passages that run out of new questions (8 here) give them again, counted, rather than loop or fail a run
    few = Questions([{"text": "one two three four five six"}])
    again = few.phase().batch(0, 100)
    assert len(set(again)) == 8 and again[8:16] == again[:8] and few.repeated == 92
    with pytest.raises(ValueError, match="6 words"):
        Questions([{"text": "Too short."}]).phase()[0]


def test_snapshot_compare_tells_a_swap_of_tied_copies_from_a_change():
    sys.path.insert(0, str(ROOT / "bench"))
    from search_snapshot import compare

    a = [7, 0, 5, "Apple", 2.5121, 0.26]
    copy = [9, 0, 5, "Apple", 2.5121, 0.24]  # the same text in a duplicated passage, tied
    other = [3, 4, 9, "Pear", 1.0, 0.1]
    before = {"phrase/hybrid": [[a, copy, other], [a, other]]}

    def report(rows):
        return compare({"phrase/hybrid": rows}, before)["phrase/hybrid"]

    assert report([[a, copy, other], [a, other]])["differ"] == 0
    rounded = [[a[:4] + [2.5122, 0.26], copy, other], [a, other]]  # float noise in the last kept decimal
    assert report(rounded) == {"questions": 2, "compared": 2, "differ": 0, "tied_duplicates_reordered": 0}
    swapped = [[copy[:5] + [0.26], a[:5] + [0.24], other], [a, other]]
    assert report(swapped) == {"questions": 2, "compared": 2, "differ": 0, "tied_duplicates_reordered": 1}
    assert report([[a, other, copy], [a, other]])["differ"] == 1  # another order: a change
    # the second question's page held one copy; rounding put the other copy's identical span there instead
    assert report([[a, copy, other], [copy[:5] + [0.26], other]]) == {
        "questions": 2, "compared": 2, "differ": 0, "tied_duplicates_reordered": 1}
    assert report([[a, copy, other], [[9, 0, 6, "Apple!", 2.5121, 0.26], other]])["differ"] == 1  # another span
    assert report([[a, copy, other], [a, other[:4] + [1.01, 0.1]]])["differ"] == 1  # a moved score


@smoke("bench/hybrid.py")
@pytest.mark.slow
def test_hybrid_run(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/hybrid.py", "run", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--limit", 16, "--speed-questions", 16, "--speed-batch", 8, "--out", tmp_path / "hybrid.json")
    r = results(tmp_path / "hybrid.json", "cpu", "results.bm25.passage.acc@5", "results.dense.phrase.em@1",
                "results.hybrid_rrf.passage.mrr@20", "results.hybrid_score.doc.acc@1",
                "throughput_batch64.hybrid_vs_dense_search", "throughput_batch64.hybrid_vs_dense_end_to_end")
    assert r["n_questions"] == 16 and positive(r["throughput_batch64"]["hybrid_vs_dense_search"])
    run_bench("bench/hybrid.py", "compare", "--index", squad_index, squad_index, "--model", tiny_model_dir,
              "--questions", tiny_squad, "--limit", 16, "--configs", "hybrid_score", "bm25", "--out",
              tmp_path / "compare.json")
    r = results(tmp_path / "compare.json", "cpu", "indexes", "results.hybrid_score.against_first",
                "results.bm25.metrics")
    name = str(squad_index)  # (a path: not looked up through results' dots)
    assert r["indexes"][name]["lexical"]["analyzer"] == "folded"
    for config in ("hybrid_score", "bm25"):
        assert {"phrase.em@1", "phrase.f1@1", "passage.acc@1", "passage.acc@5", "doc.acc@1"} <= set(
            r["results"][config]["metrics"][name])
    same = r["results"]["hybrid_score"]["against_first"][name]["phrase.em@1"]  # (an index against itself)
    assert len(same["ci95_over_articles"]) == 2
    assert same["difference"] == 0 and same["gained"] == same["lost"] == 0


@pytest.mark.slow
@smoke("bench/keyword_queries.py")
def test_keyword_queries(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/keyword_queries.py", "make", "--questions", tiny_squad, "--shuffled", "--out",
              tmp_path / "keywords.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "keywords.jsonl").read_text().splitlines()]
    assert rows and all(set(r) == {"id", "question", "answers", "title"} and "?" not in r["question"] for r in rows)
    run_bench("bench/keyword_queries.py", "run", "--index", squad_index, "--model", tiny_model_dir, "--questions",
              tiny_squad, "--limit", 16, "--weight-factors", 2, "--encode-template", "what {}?", "--out", tmp_path / "keywords.json")
    r = results(tmp_path / "keywords.json", "cpu", "keyword_queries.keywords", *(
        f"results.{key}.{m}" for key in ("hybrid/question", "dense/keywords", "lexical/shuffled",
                                         "hybrid weights x2/keywords")
        for m in ("phrase_em@1", "passage_acc@1", "passage_acc@5", "passage_acc@20", "doc_acc@1", "ci95")))
    assert r["n_questions"] == 16 and r["keyword_queries"]["keywords"] == 16 and r["keyword_queries"]["question"] == 0
    assert "vs_question" not in r["results"]["dense/question"]
    assert set(r["results"]["dense/keywords"]["vs_question"]) == {"phrase_em@1", "passage_acc@5"}


@smoke("bench/lexical_analyzer.py")
@pytest.mark.slow
def test_lexical_analyzer(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    out = tmp_path / "analyzer.json"
    run_bench("bench/lexical_analyzer.py", "choose", "--train", tiny_squad, "--articles", 8, "--out", out)
    run_bench("bench/lexical_analyzer.py", "check", "--index", squad_index, "--model", tiny_model_dir, "--questions",
              tiny_squad, "--work", tmp_path, "--out", out)
    run_bench("bench/lexical_analyzer.py", "choose", "--train", tiny_squad, "--articles", 8, "--analyzer", "folded2",
              "--against", "folded", "--out", out)
    r = results(out, "training_choice.runs.folded.acc@1", "training_choice.runs.folded2.acc@5",
                "training_choice_folded3.runs.folded3.acc@1", "validation_check.runs")  # each keeps what others wrote
    runs = r["validation_check"]["runs"]
    assert set(runs) == {f"{a}/{m}" for a in ("folded", "folded2") for m in ("hybrid", "lexical")}
    assert all("passage" in metrics for metrics in runs.values())
    assert {"folded2 -question_words", "folded +digits"} <= set(r["training_choice"]["runs"])
    assert {"folded2 +symbols", "folded2 +labels=any", "folded3 -labels"} <= set(r["training_choice_folded3"]["runs"])


@pytest.mark.slow
def test_hybrid_fit(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/hybrid.py", "fit", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--limit", 16, "--rerank-limit", 50, "--out", tmp_path / "fit.json")
    r = results(tmp_path / "fit.json", "grid.phrase", "grid.passage", "weights.phrase", "weights.doc",
                "phrase_rerank.weights", "phrase_rerank.em@1_reranked")
    assert set(r["weights"]) == {"phrase", "passage", "doc"}


def write_calibration(path: Path, units: tuple[str, ...], mode: str) -> Path:
    """A calibration file whose models rank hits by their score alone."""
    from spanseek.core.confidence import FEATURES, Calibrator, LogisticModel

    n = len(FEATURES)
    score_only = LogisticModel((0.0,) * n, (1.0,) * n, (1.0,) + (0.0,) * (n - 1), 0.0)
    Calibrator({f"{u}/{mode}": score_only for u in units}, "any", {}).save(path)
    return path


@pytest.mark.slow
@smoke("bench/confidence.py")
def test_confidence(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    calibration = write_calibration(tmp_path / "calibration.json", ("phrase", "passage", "doc"), "dense")
    search = ("bench/confidence.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--modes", "dense", "--limit", 12, "--calibration", calibration)
    # the questions alone, and each question also as keywords (one report per form)
    run_benches((*search, "--examples", tmp_path / "ex.npz", "--out", tmp_path / "confidence.json"),
                (*search, "--forms", "question", "keywords", "--examples", tmp_path / "forms.npz",
                 "--out", tmp_path / "forms.json"))
    r = results(tmp_path / "confidence.json", "by_unit_mode.phrase/dense.ece_top1",
                "by_unit_mode.passage/dense.auroc_present_vs_absent", "by_unit_mode.doc/dense.absent_dropped_at_t80",
                "by_unit_mode.phrase/dense.curve")
    assert r["questions"] == 12
    forms = results(tmp_path / "forms.json", "by_form.keywords.0.phrase/dense.reliability_top1_present")
    assert forms["questions"] == 12 and forms["by_form"]["question"]["0"] == r["by_unit_mode"]
    with np.load(tmp_path / "forms.npz") as z:  # both forms' lists, the keywords' numbered after the questions'
        assert sorted(z["phrase/dense/present/lists"]) == list(range(24))
    # both reports again from the examples the runs wrote, without searching
    again = ("bench/confidence.py", "--model", tiny_model_dir, "--calibration", calibration)
    run_benches((*again, "--from-examples", tmp_path / "ex.npz", "--out", tmp_path / "again.json"),
                (*again, "--from-examples", tmp_path / "forms.npz", "--out", tmp_path / "forms-again.json"))
    assert results(tmp_path / "again.json")["by_unit_mode"] == r["by_unit_mode"]
    assert results(tmp_path / "forms-again.json")["by_form"] == forms["by_form"]


@smoke("bench/paired_accuracy.py")
@pytest.mark.slow
def test_paired_accuracy(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    # the exact index against itself, and against itself asked with a question encoder named by INDEX@MODEL
    run_bench("bench/paired_accuracy.py", "--exact", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--indexes", squad_index, f"{squad_index}@{tiny_model_dir}", "--exact-cache", tmp_path / "exact.npz",
              "--out", tmp_path / "paired.json")
    r = results(tmp_path / "paired.json", "exact.em@1", "exact.acc@5", "indexes")
    assert r["questions"] == 50 and (tmp_path / "exact.npz").is_file()
    for row in r["indexes"]:
        assert row["em_delta"] == row["acc5_delta"] == 0 and row["em_gained"] == row["em_lost"] == 0
        assert row["em_mcnemar_z"] == 0.0  # no discordant question
        assert len(row["em_delta_ci95"]) == len(row["acc5_delta_ci95"]) == 2


@smoke("bench/paired_models.py")
@pytest.mark.slow
def test_paired_models(tmp_path, tiny_model_dir, filter_model_dir, tiny_squad):
    # a model against itself differs by nothing; another model's differences are its metrics minus the first's
    run_bench("bench/paired_models.py", "--questions", tiny_squad, "--models", tiny_model_dir, tiny_model_dir,
              filter_model_dir, "--limit", 30, "--precision", "fp32", "--out", tmp_path / "paired.json")
    r = results(tmp_path / "paired.json", "models", "against_first")
    first, same, other = r["models"]
    assert r["n_questions"] == 30 and first == {**same, "model": first["model"]}
    assert all(d["difference"] == d["gained"] == d["lost"] == 0 for d in r["against_first"][str(tiny_model_dir)].values())
    diffs = r["against_first"][str(filter_model_dir)]
    for name, key in (("rc.em", "rc_em"), ("phrase.em@1", "phrase_em@1"), ("passage.acc@5", "passage_acc@5")):
        assert diffs[name]["difference"] == pytest.approx(other[key] - first[key], abs=0.11)
        lo, hi = diffs[name]["ci95_over_articles"]
        assert lo <= diffs[name]["difference"] <= hi
        assert diffs[name]["gained"] - diffs[name]["lost"] == pytest.approx(diffs[name]["difference"] * 30 / 100,
                                                                            abs=0.02)


@smoke("bench/teacher_quality.py")
@pytest.mark.slow
def test_teacher_quality(tmp_path, tiny_model_dir, tiny_reader, tiny_squad):
    # a teacher pooled with itself reads as it does alone (the mean of equal log-probabilities picks its spans)
    run_bench("bench/teacher_quality.py", "--questions", tiny_squad, "--teachers", tiny_reader, tiny_reader,
              tiny_model_dir, "--model", tiny_model_dir, "--limit", 40, "--out", tmp_path / "tq.json")
    r = results(tmp_path / "tq.json", "em", "pairs", "seconds")
    assert r["pairs"] == 40 and set(r["em"]) == {str(tiny_reader), str(tiny_model_dir),
                                                 f"{tiny_reader},{tiny_reader},{tiny_model_dir}"}
    for row in r["em"].values():
        lo, hi = row["ci95_over_articles"]
        assert 0 <= lo <= row["em"] <= hi <= 100


def test_a_teacher_pooled_with_itself_picks_its_own_spans():
    import importlib.util

    spec = importlib.util.spec_from_file_location("teacher_quality", ROOT / "bench" / "teacher_quality.py")
    sys.path.insert(0, str(ROOT / "bench"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from spanseek.trainer.distill import pooled_logits

    g = np.random.default_rng(1)
    flags = np.full(30, 3, np.uint8)
    flags[[4, 9]] = 0  # neither start nor end
    for _ in range(20):
        x = g.normal(size=(30, 2)).astype(np.float32) * 4
        i, j = module.best_span(x, flags, 6)
        assert module.best_span(pooled_logits([x, x]), flags, 6) == (i, j)
        # brute force over every allowed span
        best = max((x[a, 0] + x[b, 1], (a, b)) for a in range(30) for b in range(a, min(a + 6, 30))
                   if flags[a] and flags[b])
        assert (i, j) == best[1]


def test_paired_differences_by_hand(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # as when run as a script
    spec = importlib.util.spec_from_file_location("paired_models", ROOT / "bench" / "paired_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # two documents, a and b, that name no title (as questions that name their document by doc_id): grouped by
    # title, the four questions were one group, and every draw the same (an interval of no width)
    groups = {"title": [""] * 4, "document": ["id:a", "id:a", "id:b", "id:b"]}
    ref = {"per_question": {"id": [1, 2, 3, 4], **groups, "rc.em": [1, 0, 1, 0], "phrase.em@1": [0, 0, 0, 0],
                            "passage.acc@5": [1, 1, 1, 1]}}
    new = {"per_question": {"id": [1, 2, 3, 4], **groups, "rc.em": [1, 1, 0, 1], "phrase.em@1": [0, 0, 0, 1],
                            "passage.acc@5": [1, 1, 1, 1]}}
    d = module.paired(ref, new)
    assert (d["rc.em"]["difference"], d["rc.em"]["gained"], d["rc.em"]["lost"], d["rc.em"]["mcnemar_z"]) == \
        (25.0, 2, 1, 0.6)  # (2 - 1) / sqrt(3)
    assert (d["phrase.em@1"]["difference"], d["phrase.em@1"]["gained"], d["phrase.em@1"]["lost"]) == (25.0, 1, 0)
    assert d["passage.acc@5"] == {"difference": 0.0, "ci95_over_articles": [0.0, 0.0], "gained": 0, "lost": 0,
                                  "mcnemar_z": 0.0}
    lo, hi = d["rc.em"]["ci95_over_articles"]  # article a gains 50 points, b gains 0: the draws' means lie in [0, 50]
    assert 0.0 <= lo < 25.0 < hi <= 50.0
    with pytest.raises(ValueError, match="different questions"):
        module.paired(ref, {"per_question": {**new["per_question"], "id": [4, 3, 2, 1]}})


@smoke("bench/gpu_search.py")
@pytest.mark.slow
def test_gpu_search_on_cpu_parts(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/gpu_search.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--limit", 16, "--batch", 8, "--device", "cpu", "--filter-docs", 2, "--out", tmp_path / "gpu.json")
    r = results(tmp_path / "gpu.json", "cpu", "placement", "rows")
    assert [row["unit"] for row in r["rows"]] == ["phrase", "passage", "doc", "passage"]
    assert all(row["top1_same"] == 100 and positive(row["device_x_cpu"]) for row in r["rows"])


@smoke("bench/compressed_index.py")
@pytest.mark.slow
def test_compressed_index(tmp_path, tiny_model_dir, squad_corpus, tiny_squad):
    run_bench("bench/compressed_index.py", "--model", tiny_model_dir, "--corpus", squad_corpus, "--questions",
              tiny_squad, "--limit-passages", 10, "--limit-questions", 12, "--factories", "IVF4,SQ8;Flat@sq8",
              "--nprobes", "1,4", "--max-train", 2000, "--workdir", tmp_path / "work", "--quiet",
              "--out", tmp_path / "compressed.json")
    r = results(tmp_path / "compressed.json", "tokens", "rows")
    assert [(row["factory"], row["vector_source"]) for row in r["rows"]] == [
        ("Flat", "fine"), ("IVF4,SQ8", "fine"), ("IVF4,SQ8", "codes"), ("Flat@sq8", "fine")]
    for row in r["rows"]:
        assert {"speed_x_exact", "em_delta_vs_exact", "ram_fraction_of_exact", "disk_bytes_per_token"} <= set(row)
    assert [s["nprobe"] for s in r["rows"][1]["nprobe_sweep"]] == [1, 4]


@smoke("bench/baselines.py")
@pytest.mark.slow
def test_baselines(tmp_path, tiny_model_dir, tiny_backbone, tiny_squad):
    run_bench("bench/baselines.py", "--questions", tiny_squad, "--model", tiny_model_dir, "--backbone", tiny_backbone,
              "--limit", 12, "--out", tmp_path / "baselines.json")
    r = results(tmp_path / "baselines.json", "results.bm25.acc@5", "results.bi_encoder_untrained.mrr@20",
                "results.spanseek.acc@20", "results.spanseek.questions_per_second")
    assert r["n_questions"] == 12 and all(positive(x["questions_per_second"]) for x in r["results"].values())


@smoke("bench/question_modes.py")
@pytest.mark.slow
def test_question_modes(tmp_path, tiny_model_dir, separate_model_dir, tiny_squad):
    run_bench("bench/question_modes.py", "--shared", tiny_model_dir, "--separate", separate_model_dir,
              "--questions", tiny_squad, "--split", "all", "--limit", 12, "--batch-size", 8, "--repeats", 1,
              "--precision", "fp32", "--device", "cpu", "--out", tmp_path / "modes.json")
    r = results(tmp_path / "modes.json", "shared.phrase.em@1", "separate.passage.acc@5", "shared.rc.f1",
                "separate.speed.encode_qps", "shared.speed.phrase_search_qps")
    assert (r["shared"]["question_mode"], r["separate"]["question_mode"]) == ("shared", "separate")


@smoke("bench/scale_run.py")
@pytest.mark.slow
def test_scale_run(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    from spanseek.core.phrase_index import Manifest

    n = 2 * Manifest.load(squad_index).tokens + 50  # two whole replicas and part of a third
    run_bench("bench/scale_run.py", "--base", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--sizes", n, "--factory", "IVF{nlist},SQ8", "--nlist", 4, "--store", "sq8", "--limit-questions", 8,
              "--exact-sample", 4, "--workdir", tmp_path / "work", "--out", tmp_path / "scale.json")
    row = results(tmp_path / "scale.json", f"sizes.{n}.qps", f"sizes.{n}.top1_start_same_as_exact",
                  f"sizes.{n}.ram_bytes_per_token", f"sizes.{n}.stages.build_seconds")["sizes"][str(n)]
    assert row["exact_sample"] == 4 and positive(row["qps"])


@smoke("bench/stale_cache_training.py")
@pytest.mark.slow
def test_stale_cache_training(tmp_path, tiny_model_dir, tiny_squad, hard_negatives):
    run_bench("bench/stale_cache_training.py", "--model", tiny_model_dir, "--train", tiny_squad,
              "--hard-negatives", hard_negatives, "--cache", tmp_path / "cache", "--steps", 2, "--batch-windows", 4,
              "--hard-per-batch", 2, "--precision", "fp32", "--work", tmp_path / "runs", "--out", tmp_path / "stale.json")
    r = results(tmp_path / "stale.json", "arms.fresh.questions_per_second", "arms.stale.ratio_to_first",
                "arms.corrected.stale_cache")
    assert r["arms"]["fresh"]["ratio_to_first"] == 1 and positive(r["arms"]["corrected"]["ratio_to_first"])


# -- the service ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@smoke("bench/service_load.py")
def test_service_load(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/service_load.py", "--index", tiny_index, "--model", tiny_model_dir, "--precision", "fp32",
              "--unit", "phrase", "--concurrency", "1,2", "--seconds", 1, "--max-batch-size", 4,
              "--soak-seconds", 1, "--out", tmp_path / "load.json")
    r = results(tmp_path / "load.json", "raw_qps", "raw_sequential_qps", "raw_pipelined_qps", "service_over_raw",
                "saturation.qps", "single.p50_ms", "half_load.p99_ms", "half_load_p99_over_single_p50",
                "levels", "soak.non_429_errors", "questions_repeated")
    assert [lv["concurrency"] for lv in r["levels"]] == [1, 2] and r["questions_repeated"] == 0
    assert all(lv["errors"] == 0 and lv["mean_batch_size"] >= 1 for lv in r["levels"])
    assert positive(r["service_over_raw"])


@smoke("bench/service_reliability.py")
@pytest.mark.slow
def test_service_reliability(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/service_reliability.py", "--index", tiny_index, "--model", tiny_model_dir, "--rounds", 2,
              "--concurrency", "1,2", "--seconds", 1, "--sweeps", 1, "--overload-factor", 2, "--overload-seconds", 1,
              "--settle-seconds", 0, "--huge-paragraph-chars", 20_000, "--indexed-chars", 2000,
              "--work", tmp_path / "work", "--out", tmp_path / "reliability.json")
    r = results(tmp_path / "reliability.json", "poison.normal_status", "poison.poisoned_status", "saturation.qps",
                "overload.p99_ms", "overload.refused_without_retry_after", "rss_mb.after_over_before",
                "bounded.phrase.bytes", "bounded.full_passage.status")
    assert r["poison"]["normal_non_200"] == 0 and set(r["poison"]["poisoned_status"]) <= {"400", "422"}
    assert r["bounded"]["doc"]["status"] == 200


@smoke("bench/reload_under_load.py")
@pytest.mark.slow
def test_reload_under_load(tmp_path, tiny_index, squad_index, tiny_model_dir):
    run_bench("bench/reload_under_load.py", "--indexes", tiny_index, squad_index, "--model", tiny_model_dir,
              "--workdir", tmp_path / "alias", "--clients", 2, "--swaps", 2, "--interval", 1, "--poll", 0.2,
              "--out", tmp_path / "reload.json")
    r = results(tmp_path / "reload.json", "statuses.during_swaps", "switch_to_new_answers_s", "latency_otherwise.p50_ms",
                "reload_seconds_by_service", "rss_mb.peak")
    assert r["swaps"] == 2 and r["stale_answers_after_swap"] == 0


@smoke("bench/attack.py")
@pytest.mark.slow
def test_attack(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/attack.py", "--index", tiny_index, "--model", tiny_model_dir, "--seconds", 1,
              "--flood-clients", 8, "--sockets", 4, "--header-timeout", 1, "--write-timeout", 1,
              "--workdir", tmp_path / "work", "--out", tmp_path / "attack.json")
    r = results(tmp_path / "attack.json", "cpu", "parts.starvation.throughput_kept", "parts.flood.errors_5xx",
                "parts.slow.never_read.all_closed_after_s", "parts.reload.spam_with_key.goodput_change",
                "parts.metadata.status")
    assert r["parts"]["flood"]["errors_5xx"] == 0 and r["parts"]["metadata"]["status"] == 400


# -- training ------------------------------------------------------------------------------------------------------


@smoke("bench/cpu_model_negatives.sh")
@pytest.mark.slow
def test_cpu_model_negatives(tmp_path, tiny_model_dir, tiny_backbone, tiny_squad):
    tiny_training = (f"--backbone {tiny_backbone} --max-seq-len 32 --stride 8 --lora-r 4 --max-steps 2 "
                     "--batch-windows 4 --hard-per-batch 2 --precision fp32")
    run_bench("bench/cpu_model_negatives.sh", tiny_model_dir, tmp_path / "run", env={
        "WORK": str(tmp_path / "work"), "TRAIN": str(tiny_squad), "VALIDATION": str(tiny_squad),
        "FACTORY": "IVF4,SQ8", "NPROBE": "2", "TRAIN_FLAGS": tiny_training,
        "SPANSEEK": str(Path(sys.executable).parent / "spanseek")})
    assert (tmp_path / "work" / "hard-model.jsonl.gz").is_file()
    r = results(tmp_path / "run" / "val-full.json", "phrase.em@1", "passage.acc@5", "rc.em")
    assert r["n_questions"] == 50


# -- on a CUDA host --------------------------------------------------------------------------------------------------


@smoke("bench/gpu_build.py")
def test_gpu_build_on_the_cpu(tmp_path):
    run_bench("bench/gpu_build.py", "--n", 3000, "--dim", 16, "--factories", "IVF8,SQ8", "IVF8,PQ4x4fs",
              "--devices", "cpu", "--out", tmp_path / "build.json")
    r = results(tmp_path / "build.json", "factories.IVF8,SQ8.cpu.recall@10", "factories.IVF8,PQ4x4fs.cpu.total_s")
    assert all(0 < row["cpu"]["recall@10"] <= 1 for row in r["factories"].values())


@smoke("bench/gpu/carry_room.py")
def test_carry_room_names_the_room_beside_a_checkout(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    out = run_bench("bench/gpu/carry_room.py", "--repo", tmp_path, "--explain")
    assert "the checkout that travels: 6 bytes" in out and "a piece may take 65 MB" in out
    assert run_bench("bench/gpu/carry_room.py", "--repo", tmp_path).strip() == "65"


@smoke("bench/gpu/carry_backbone.py")
def test_carry_backbone_help():
    for command in ("pack", "unpack"):
        assert "usage:" in run_bench("bench/gpu/carry_backbone.py", command, "--help")


def test_carried_int8_weights_round_trip_within_their_scale():
    """int8 with one fp16 scale per 128 weights of a row: every weight comes back within half a step of its
    group's scale; vectors and small matrices come back as fp16; integer tensors unchanged."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    from carry_backbone import GROUP, SCALE, shrink, widen

    torch.manual_seed(0)
    big = torch.randn(128, 4 * GROUP) * torch.logspace(-3, 0, 4 * GROUP)  # groups of very different scales
    tensors = {"big": big, "small": torch.randn(32, 12), "bias": torch.randn(7), "ids": torch.arange(5)}
    stored = shrink(tensors, "int8")
    assert stored["big"].dtype == torch.int8 and stored["big" + SCALE].shape == (128, 4)
    assert stored["small"].dtype == torch.float16 and stored["ids"].dtype == torch.int64
    back = widen(stored)
    assert set(back) == set(tensors) and all(t.dtype != torch.float16 for t in back.values())
    step = stored["big" + SCALE].float().repeat_interleave(GROUP, dim=1)
    assert torch.all((back["big"] - big).abs() <= 0.5 * step * 1.01 + 1e-7)
    assert torch.equal(back["ids"], tensors["ids"])
    assert torch.allclose(back["small"], tensors["small"], rtol=1e-3, atol=1e-3)
    assert torch.equal(widen(shrink(tensors, "fp16"))["big"], big.half().float())


@smoke("bench/gpu_training.sh")
@smoke("bench/gpu_model_negatives.sh")
@smoke("bench/gpu/train_base.sh")
@smoke("bench/gpu/slim_checkout.sh")
@pytest.mark.parametrize("script", ["bench/gpu_training.sh", "bench/gpu_model_negatives.sh", "bench/gpu/train_base.sh",
                                    "bench/gpu/host.sh", "bench/gpu/slim_checkout.sh"])
def test_gpu_shell_scripts_parse_and_state_their_usage(script):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True)
    proc = subprocess.run(["bash", str(ROOT / script)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and f"usage: {script}" in proc.stderr


@pytest.mark.slow
@smoke("bench/document_formats.py")
def test_document_formats(tmp_path, tiny_model_dir, tiny_squad):
    run_bench("bench/document_formats.py", "--squad", tiny_squad, "--articles", "all", "--model", tiny_model_dir,
              "--formats", "squad", "pdf", "docx", "--limit", 6, "--out", tmp_path / "formats")
    r = results(tmp_path / "formats" / "results.json", "squad.phrase_em@1", "pdf.passage_acc@5", "docx.passage_acc@5")
    assert r["pdf"]["n_questions"] == r["docx"]["n_questions"] == 6 and r["pdf"]["passages"] > 0


@smoke("bench/live_writes.py")
@pytest.mark.slow
def test_live_writes(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/live_writes.py", "--index", tiny_index, "--model", tiny_model_dir, "--workdir", tmp_path / "w",
              "--clients", 2, "--seconds", 1, "--warmup", 0, "--writes", 3, "--kills", 2, "--kill-writes", 4,
              "--out", tmp_path / "live.json")
    r = results(tmp_path / "live.json", "cpu", "baseline.p99_ms", "during_writes.p99_ms", "writes.visible_after_ack",
                "merge.statuses", "kill9.lost_acknowledged", "kill9.half_present_unacknowledged")
    assert r["writes"]["statuses"] == {"200": 3} and r["writes"]["visible_within_1s"] == 3
    assert r["kill9"]["kills"] == 2 and r["kill9"]["lost_acknowledged"] == 0
    assert r["kill9"]["half_present_unacknowledged"] == 0 and set(r["merge"]["statuses"]) <= {"200"}


@pytest.mark.slow
def test_live_writes_cost(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/live_writes.py", "--index", tiny_index, "--model", tiny_model_dir, "--workdir", tmp_path / "w",
              "--writes", 0, "--kills", 0, "--no-merge", "--cost-at", "0,3", "--cost-writes", 2,
              "--out", tmp_path / "cost.json")
    r = results(tmp_path / "cost.json", "cpu", "write_cost.store", "write_cost.put_documents")
    for kind in ("store", "put_documents"):
        assert [c["segment_documents"] for c in r["write_cost"][kind]] == [0, 3]
        assert all(len(c["seconds"]) == 2 and c["median_s"] > 0 for c in r["write_cost"][kind])

@smoke("bench/sync_under_search.py")
@pytest.mark.slow
def test_sync_under_search(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/sync_under_search.py", "--index", tiny_index, "--model", tiny_model_dir, "--workdir",
              tmp_path / "w", "--write-nice", 0, 5, "--repeats", 1, "--rounds", 1, "--files", 2, "--paragraphs", 1,
              "--seconds", 1, "--warmup", 0, "--out", tmp_path / "sync.json")
    r = results(tmp_path / "sync.json", "cpu", "runs")
    assert [run["write_nice"] for run in r["runs"]] == [0, 5]
    for run in r["runs"]:
        assert run["sync_exit"] == [0] and run["alone"]["requests"] > 0 and "p50_ms" in run["during_sync"]


@smoke("bench/soak.py")
@pytest.mark.slow
def test_soak(tmp_path, tiny_index, tiny_model_dir):
    run_bench("bench/soak.py", "--index", tiny_index, "--model", tiny_model_dir, "--reader", "", "--workdir",
              tmp_path / "w", "--clients", 2, "--minutes", 0.1, "--sample", 2, "--out", tmp_path / "soak.json")
    r = results(tmp_path / "soak.json", "cpu", "samples", "shrink", "stop.exit_s", "after_restart.lost_count")
    assert r["samples"][-1]["rss_mb"] > 0 and r["samples"][-1]["metric_series"] > 0
    assert r["after_restart"]["lost_count"] == r["after_restart"]["resurrected_count"] == 0
    assert not r["stop"]["hung"] and r["shrink"][0]["writes"]["segment_documents"] == 0


def tiny_squad_with_held_out(path: Path) -> Path:
    """A SQuAD file of 9 tiny articles: the 8th (index 7) is held out by the project's split."""
    import gzip

    from tests.conftest import make_squad

    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(make_squad(n_articles=9), f)
    return path


@smoke("bench/gpu/host_data.py")
def test_host_data_holds_out_the_split_and_cuts_the_corpus(tmp_path):
    """The held-out articles as questions; the corpus starts with them, then the training ones, cut at N passages."""
    from spanseek.core.io import load_squad, read_corpus

    squad = tiny_squad_with_held_out(tmp_path / "squad.json.gz")
    run_bench("bench/gpu/host_data.py", "--squad", squad, "--passages", 5, "--out", tmp_path / "data")
    held = load_squad(tmp_path / "data" / "validation.json.gz")
    assert [a["title"] for a in held] == ["Article 7"]
    docs = list(read_corpus(tmp_path / "data" / "corpus.jsonl"))
    assert [(d.title, len(d.paragraphs)) for d in docs] == [("Article 7", 3), ("Article 0", 2)]
    assert docs[0].paragraphs == tuple(p["context"] for p in held[0]["paragraphs"])


@pytest.mark.slow
@smoke("bench/gpu/host.sh")
def test_host_measure_runs_every_step_on_the_cpu(tmp_path, tiny_model_dir):
    """The GPU host script's CPU path end to end (packages already installed): every step exits 0 and writes its
    JSON; the GPU tests skip."""
    squad = tiny_squad_with_held_out(tmp_path / "squad.json.gz")
    out = tmp_path / "out"
    run_bench("bench/gpu/host.sh", "measure", env={
        "DEVICE": "cpu", "SKIP_INSTALL": "1", "MODEL": str(tiny_model_dir), "SQUAD": str(squad), "PASSAGES": "8",
        "QUESTIONS": "12", "SERVICE_S": "1", "BUILD_FACTORIES": "IVF4,SQ8", "WORK": str(tmp_path / "work"),
        "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}, timeout=900)
    summary = json.loads((out / "summary.json").read_text())
    assert {name: step["rc"] for name, step in summary["steps"].items()} == dict.fromkeys(
        ["faiss", "gpu_tests", "data", "index", "gpu_search", "service_phrase", "service_passage", "gpu_build"], 0)
    for name in ("gpu_search", "service_phrase", "service_passage", "gpu_build"):
        assert json.loads((out / f"{name}.json").read_text())


def test_slim_checkout_untracks_and_restores(tmp_path):
    """`on` leaves the weights in the working tree but out of the index and ignored; `off` tracks them as before."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "big.bin").write_bytes(b"x" * 1000)
    (tmp_path / "code.py").write_text("print(1)\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    script = str(ROOT / "bench" / "gpu" / "slim_checkout.sh")
    subprocess.run(["bash", script, "on", "big.bin"], cwd=tmp_path, check=True, capture_output=True)
    assert git("ls-files").split() == ["code.py"] and (tmp_path / "big.bin").is_file()
    assert git("status", "--short", "--untracked-files=all").split() == ["D", "big.bin"]  # ignored, not untracked
    subprocess.run(["bash", script, "off"], cwd=tmp_path, check=True, capture_output=True)
    assert git("ls-files").split() == ["big.bin", "code.py"] and git("status", "--short") == ""
    assert (tmp_path / ".git" / "info" / "exclude").read_text().splitlines()[-1] == "/.gpu/"


def test_carried_package_backbone_is_found_through_its_stand_in(tmp_path):
    """A backbone installed as a package of its own, unpacked elsewhere, resolves through the stand-in package."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    from carry_backbone import stand_in_package

    stand_in_package("my-tiny-backbone", tmp_path / "model", tmp_path / "site")
    code = "from spanseek.core.model import resolve_backbone; print(resolve_backbone('package:my-tiny-backbone'))"
    got = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                         check=True, capture_output=True, text=True).stdout.strip()
    assert got == str(tmp_path / "model")


@pytest.mark.slow
@smoke("bench/gpu/teacher_cache.py")
def test_teacher_cache_fills_and_round_trips_in_pieces(tmp_path, tiny_model_dir, tiny_reader, tiny_squad):
    """fill reads the pairs a phrase run of the model (or a reader's run) trains on; pack and unpack give the same
    cache back (logits to fp16 rounding) through pieces checked against their manifest; a damaged piece is refused."""
    from spanseek.trainer.phrase_cache import PhraseCache

    script = "bench/gpu/teacher_cache.py"
    # a phrase run's pairs, and a reader's windows as `spanseek train reader --init` cuts them
    run_benches((script, "fill", "--reader", tiny_reader, "--train", tiny_squad, "--model", tiny_model_dir,
                 "--out", tmp_path / "cache"),
                (script, "fill", "--for", "reader", "--reader", tiny_reader, "--train", tiny_squad, "--model",
                 tiny_reader, "--out", tmp_path / "reader-cache"))
    run_bench(script, "pack", tmp_path / "cache", "--out", tmp_path / "pieces", "--piece-mb", 0.002)
    assert len(list((tmp_path / "pieces").glob("teacher-cache.tar.gz.*"))) > 1
    run_bench(script, "unpack", tmp_path / "pieces", "--out", tmp_path / "back")
    filled, back = PhraseCache(tmp_path / "cache"), PhraseCache(tmp_path / "back")
    assert back.complete and back.keys == filled.keys and back.source == filled.source and len(filled.keys) > 1
    assert back.vectors.dtype == filled.vectors.dtype
    np.testing.assert_allclose(back.vectors, filled.vectors, atol=0.02, rtol=1e-3)
    assert PhraseCache(tmp_path / "reader-cache").complete and len(PhraseCache(tmp_path / "reader-cache").keys) > 1
    piece = tmp_path / "pieces" / "teacher-cache.tar.gz.000"
    piece.write_bytes(piece.read_bytes()[:-1] + b"\0")
    with pytest.raises(pytest.fail.Exception, match="sha256 differs"):
        run_bench(script, "unpack", tmp_path / "pieces", "--out", tmp_path / "again")


@smoke("bench/training_step.py")
@pytest.mark.slow
def test_training_step(tmp_path, tiny_model_dir, tiny_reader):
    run_bench("bench/training_step.py", "--phrase-model", tiny_model_dir, "--reader", tiny_reader, "--windows", 2,
              "--questions", 3, "--reader-windows", 2, "--seq-len", 16, "--steps", 1, "--out", tmp_path / "step.json")
    r = results(tmp_path / "step.json", "phrase.speedup", "reader.speedup", "cpu")
    for part in ("phrase", "reader"):
        assert r[part]["dropout_modules_swapped"] > 0
        assert positive(r[part]["torch_dropout_seconds"]) and positive(r[part]["fast_dropout_seconds"])


@smoke("bench/filtered_hybrid.py")
@pytest.mark.slow
def test_filtered_hybrid(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/filtered_hybrid.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--n", 6, "--repeat", 1, "--passage-depth", 20, "--out", tmp_path / "filtered.json")
    figures = [f"{mode} {unit}.{name}.order = unfiltered restricted" for mode in ("dense", "lexical", "hybrid")
               for unit in ("phrase", "passage", "doc") for name in ("two without the answer", "the answer's")]
    r = results(tmp_path / "filtered.json", *figures, "hybrid doc.batch CPU ms (64 questions, median).ratio")
    for mode in ("dense", "lexical", "hybrid"):  # one document: its hit is the one
        assert r[f"{mode} doc"]["the answer's"]["order = unfiltered restricted"] == "6/6"


@pytest.mark.slow
@smoke("bench/near_copies_cost.py")
def test_near_copies_cost(tmp_path, squad_index, tiny_model_dir, tiny_squad):
    run_bench("bench/near_copies_cost.py", "--index", squad_index, "--model", tiny_model_dir, "--questions", tiny_squad,
              "--top-k", 10, "--out", tmp_path / "near.json")
    r = json.loads((tmp_path / "near.json").read_text())
    assert [c["case"] for c in r["cases"]] == ["passage", "doc-2000", "doc-6000"]
    assert r["timed_questions"] == 25  # the file's 50 questions: half warm the searcher, half are timed
    for case in r["cases"]:  # the budget is spent, never past it (a comparison that would pass it is not made)
        assert 0 < case["work"] <= r["near_work"] * 10
        assert case["seconds"] > 0 and case["question_equivalents"] > 0


@pytest.mark.parametrize(("n", "warm", "timed"), [(300, 64, 64), (128, 64, 64), (50, 25, 25), (3, 1, 1), (1, 1, 1)])
def test_near_copies_cost_times_what_the_question_file_holds(monkeypatch, n, warm, timed):
    """A question-equivalent is timed on 64 questions after 64 others warmed the searcher; a file of fewer than 128
    gives half of its questions to each (it timed an empty batch, and read a question-equivalent as 0.01 ms)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from near_copies_cost import timing_batches

    questions = [f"q{i}" for i in range(n)]
    got = timing_batches(questions)
    assert (len(got[0]), len(got[1])) == (warm, timed) and set(got[1]) <= set(questions)
    assert n < 2 or not set(got[0]) & set(got[1])
    with pytest.raises(ValueError, match="--questions"):
        timing_batches([])


def test_search_throughput_without_its_questions_file_says_which_flag_before_loading(tmp_path, monkeypatch, capsys):
    """The README's command ran into a traceback on a fresh checkout: the questions' default is the development
    machines' SQuAD file, ../shared/data, which a checkout has not."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import search_throughput

    monkeypatch.setattr(search_throughput, "run", lambda *a: pytest.fail("it went on to load the model"))
    with pytest.raises(SystemExit) as e:
        search_throughput.main(["--index", str(tmp_path), "--questions", str(tmp_path / "nowhere.json.gz"),
                                "--out", str(tmp_path / "out.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f": error: --questions {tmp_path}/nowhere.json.gz: no such file" in err, err
    assert "--questions runs/validation.json.gz --split all" in err
