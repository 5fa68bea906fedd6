"""The README's figures, and those of docs/service.md on a live write's snapshot, are the figures of the runs they
cite: each claim below is read from the page and compared with the JSON under bench/results that holds its run,
rounded as the page rounds it.

    .venv/bin/python -m pytest -q tests/test_docs_numbers.py

A figure retyped wrong, a table row moved to another run, or a result file measured again without the page
following, fails here. A claim whose words change so that its pattern no longer matches fails too: update the
pattern with the words, and the figures with the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

Key = tuple[str, ...]  # a path into a result file: keys of objects and indexes of lists


@cache
def result(name: str) -> object:
    return json.loads((RESULTS / name).read_text())


def value(name: str, key: Key) -> float:
    obj = result(name)
    for part in key:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]  # type: ignore[index]
    assert isinstance(obj, (int, float)), f"{name}: {'.'.join(key)} is {obj!r}, not a number"
    return float(obj)


def rounded(x: float, digits: int) -> str:
    """``x`` to ``digits`` decimals, halves up, as a page writes it (200.5 -> 201)."""
    return str(Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class Figure:
    """One number on the page: the result files and keys it comes from, and how the page writes it. Two or more
    sources make a range (``min-max`` of the runs, or one number where they round alike)."""

    sources: Sequence[tuple[str, Key]]
    digits: int = 1
    scale: float = 1.0

    def text(self) -> str:
        values = [value(file, key) * self.scale for file, key in self.sources]
        low, high = rounded(min(values), self.digits), rounded(max(values), self.digits)
        return low if low == high else f"{low}-{high}"

    def __str__(self) -> str:
        return ", ".join(f"{file} {'.'.join(key)}" for file, key in self.sources)


def path(key: str | Key) -> Key:
    """``a.b.0`` -> (a, b, 0); keys holding a dot are written with ``/`` instead (``by_prior/0.5/doc``), keys holding
    both as a tuple."""
    return key if isinstance(key, tuple) else tuple(key.split("/" if "/" in key else "."))


def fig(file: str, *keys: str | Key, digits: int = 1, scale: float = 1.0) -> Figure:
    """The figure at ``keys`` of ``file`` (several keys: the range of them)."""
    return Figure([(file, path(k)) for k in keys], digits, scale)


def runs(files: Sequence[str], key: str, digits: int = 0) -> Figure:
    """The range of ``key`` over the runs in ``files``."""
    return Figure([(file, path(key)) for file in files], digits)


@dataclass(frozen=True)
class Claim:
    """A pattern on the page whose groups are, in order, the figures."""

    page: str
    pattern: str
    figures: Sequence[Figure | Callable[[], str]]

    def check(self, text: str) -> list[str]:
        m = re.search(self.pattern, text, re.DOTALL)
        if m is None:
            return [f"{self.page}: no longer says {self.pattern!r}"]
        problems = []
        for i, figure in enumerate(self.figures, 1):
            want = figure.text() if isinstance(figure, Figure) else figure()
            if m.group(i) != want:
                line = text.count("\n", 0, m.start(i)) + 1
                source = str(figure) if isinstance(figure, Figure) else "its source"
                problems.append(f"{self.page}:{line}: says {m.group(i)}, {source} says {want}")
        return problems


def quality_row(label: str, file: str, keys: Sequence[str]) -> Claim:
    """A row of the README's quality table: its first cells after the label, in order."""
    cells = r" \| ".join([r"\**([\d.]+)\**"] * len(keys))
    return Claim("README.md", rf"\n\| {re.escape(label)} \| {cells} \|", [fig(file, k) for k in keys])


HYBRID = "new_default_hybrid.json"
READING = "new_default_reading.json"
AMX_SERVICE = ["service_small_passes_auto_1.json", "service_small_passes_auto_2.json"]
AVX512_SERVICE = ["service_load_phrase_avx512_auto.json", "service_load_passage_avx512_auto.json"]
AVX512_READ = "service_read_avx512_auto.json"  # one client's requests with read: its single request and first level
# the speed table's in-process runs (file, the run's key in it) and its HTTP runs at saturation
IN_PROCESS = [("search_throughput_amx.json", ()), ("search_throughput_question_passes.json", ()),
              ("search_throughput_avx512_auto.json", ())]
HTTP = [*AMX_SERVICE, *AVX512_SERVICE, "service_load_phrase_async_checks.json", "service_load_passage_async_checks.json"]
# one client's requests with read on the AVX2 EPYC: each run's single request and its first closed-loop level
AVX2_READ = Figure([(f"service_read_small_scan{run}.json", key) for run in ("", "_2")
                    for key in (("single", "p50_ms"), ("levels", "0", "p50_ms"))], 0)
SNAPSHOTS = "live_snapshot_cost.json"  # a list of runs: 100, 1,000 and 5,000 written documents
# its tables of copies in ms, as the page writes them (0.15 / 0.28 / 1.0)
COPIES = [fig(SNAPSHOTS, f"{i}.copies_s", scale=1000, digits=digits) for i, digits in enumerate((2, 2, 1))]
N = r"([\d.]+)"  # a figure in a pattern
R = r"([\d.]+(?:-[\d.]+)?)"  # a figure or a range

CLAIMS = [
    quality_row("spanseek dense, default model", HYBRID,
                [f"results.dense.{k}" for k in ("passage.acc@1", "passage.acc@5", "passage.acc@20", "phrase.em@1")]),
    quality_row("spanseek lexical (BM25: bm25s, title + passage)", HYBRID,
                [f"results.bm25.{k}" for k in ("passage.acc@1", "passage.acc@5", "passage.acc@20", "phrase.em@1")]),
    quality_row("**spanseek hybrid** (the default: dense + BM25, score fusion)", HYBRID,
                [f"results.hybrid_score.{k}" for k in ("passage.acc@1", "passage.acc@5", "passage.acc@20",
                                                       "phrase.em@1")]),
    Claim("README.md", r"\| spanseek dense, default model \| [^\n]* \| ([\d.]+) \|\n", [fig("new_default_eval.json", "rc.em")]),
    quality_row("spanseek hybrid + reading (`read`: the reader reads the top three passages)", READING,
                ["with_read.passage_acc@1", "with_read.passage_acc@5"]),
    Claim("README.md", r"\| spanseek hybrid \+ reading [^\n]* \| — \| ([\d.]+) \| ([\d.]+) \(reader\) \|",
          [fig(READING, "with_read.phrase_em@1"), fig(READING, "reader_rc.em")]),
    Claim("README.md", r"\| \*\*spanseek hybrid, base model\*\* [^|]* \| \*\*([\d.]+)\*\* \| \*\*([\d.]+)\*\* \| "
          r"\*\*([\d.]+)\*\* \| \*\*([\d.]+)\*\* \| \*\*([\d.]+)\*\* \|",
          [fig("base_longer.json", f"models/bundled (2.08 epochs)/eval/{k}") for k in
           ("passage/acc@1", "passage/acc@5", "passage/acc@20", "phrase/em@1", "rc/em")]),
    quality_row("MiniLM-L6 bi-encoder (the untrained backbone, mean pooling)", "baselines.json",
                [f"results.bi_encoder_untrained.{k}" for k in ("acc@1", "acc@5", "acc@20")]),
    # keywords against questions
    Claim("README.md", rf"passage acc@1 {N} → {N}, acc@5 {N} → {N}, document acc@1 unchanged\)[^(]*\(phrase EM@1 {N} → {N}\)",
          [fig("keyword_queries.json", ("results", f"hybrid/{form}", k)) for k, form in
           (("passage_acc@1", "question"), ("passage_acc@1", "keywords"), ("passage_acc@5", "question"),
            ("passage_acc@5", "keywords"), ("phrase_em@1", "question"), ("phrase_em@1", "keywords"))]),
    # reading at search time
    Claim("README.md", rf"adds {N} points of phrase EM@1 \({N} → {N}, F1 {N} → {N}\)\s+at {N}× the q/s",
          [lambda: rounded(value(READING, ("with_read", "phrase_em@1")) - value(READING, ("without_read",
                                                                                            "phrase_em@1")), 1),
           fig(READING, "without_read.phrase_em@1"), fig(READING, "with_read.phrase_em@1"),
           fig(READING, "without_read.phrase_f1@1"), fig(READING, "with_read.phrase_f1@1"),
           fig(READING, "speed.ratio", digits=2)]),
    Claim("README.md", rf"\({R}× on 2 AVX2 cores, where one request takes {R}\s+ms\)",
          [runs(["reading_onnx.json", "reading_small_passes.json"], "speed.ratio", digits=2), AVX2_READ]),
    Claim("README.md", rf"With `\"read_below\":\s+0\.8` only [^(]*\({N}% here\): phrase EM@1 {N} at\s+{N}× the q/s of "
          r"reading every question",
          [fig("reading_read_below.json", ("read_below", "0.8", "phrase_questions_read"), digits=0),
           fig("reading_read_below.json", ("read_below", "0.8", "phrase_em@1")),
           lambda: rounded(value("reading_read_below_speed.json", ("read_below", "0.8", "with_read_qps"))
                           / value("reading_read_below_speed.json", ("speed", "with_read_qps")), 1)]),
    Claim("README.md", rf"the reader alone: {N} EM / {N} F1",
          [fig(READING, "reader_rc.em"), fig(READING, "reader_rc.f1")]),
    Claim("README.md", rf"read hits: phrase {N}, passage {N}, doc {N}\.",
          [fig(READING, f"with_read.first_hit_ece.{u}", digits=3) for u in ("phrase", "passage", "doc")]),
    # confidence, every mode
    Claim("README.md", rf"ECE with every answer in the index: doc {N}, passage {N}, phrase {N} \(over-confident\); "
          rf"with half unanswerable\s+\(prior 0\.5\): {N} / {N} / {N} ",
          [fig("confidence_all_modes.json", ("by_prior", "0", f"{u}/hybrid", "ece_top1_present"), digits=3)
           for u in ("doc", "passage", "phrase")]
          + [fig("confidence_all_modes.json", ("by_prior", "0.5", f"{u}/hybrid", "ece_top1"), digits=3)
             for u in ("doc", "passage", "phrase")]),
    # the base model against the default
    Claim("README.md", rf"\(`--model base`\): \+{N} points of phrase EM@1 and \+{N} of RC EM over the default, for {R}× its\s+"
          rf"question and indexing throughput on a CPU \((\d+)-core (Intel Xeon), (\w+)\) and (\w+) the index size",
          [lambda: rounded(value("base_longer.json", ("models", "bundled (2.08 epochs)", "eval", "phrase", "em@1"))
                           - value(HYBRID, path("results.hybrid_score.phrase.em@1")), 1),
           lambda: rounded(value("base_longer.json", ("models", "bundled (2.08 epochs)", "eval", "rc", "em"))
                           - value("new_default_eval.json", path("rc.em")), 1),
           lambda: "-".join(sorted({rounded(value("model_cost.json", path(f"models.1.{key}"))
                                            / value("model_cost.json", path(f"models.0.{key}")), 2)
                                    for key in ("questions_per_second_batch64", "build_tokens_per_second")})),
           lambda: rounded(value("model_cost.json", ("torch_threads",)), 0),
           lambda: "Intel Xeon" if "Intel(R) Xeon(R)" in str(result("model_cost.json")["cpu"]) else "another CPU",  # type: ignore[index]
           lambda: str(result("model_cost.json")["precision"]),  # type: ignore[index]
           lambda: {2: "twice"}[round(value("model_cost.json", path("models.1.ratio_to_first.index_bytes_per_token")))]]),
    # size and build speed
    Claim("README.md", rf"An exact index takes {N} KB of disk per token \({N} KB with `base`\)",
          [fig("model_cost.json", "models.0.index_bytes_per_token", scale=1e-3),
           fig("model_cost.json", "models.1.index_bytes_per_token", scale=1e-3)]),
    Claim("README.md", r"Building an index: ([\d,]+)\s+tokens/s on the Xeon with AMX, ([\d.]+) of its encoder's own speed",
          [lambda: f"{round(value('index_throughput.json', ('build_tokens_per_second',))):,}",
           fig("index_throughput.json", "ratio", digits=2)]),
    # the speed table: in process, one client, 64 clients, with read
    Claim("README.md", rf"\| Intel Xeon with AMX \| {N} / {N} / {N} \| {R} ms \| {R} / — \| {N} ms \|",
          [fig("search_throughput_amx.json", f"units.{u}.qps", digits=0) for u in ("phrase", "passage", "doc")]
          + [runs(AMX_SERVICE, "single.p50_ms"), runs(AMX_SERVICE, "saturation.qps"),
             fig("service_read_small_passes_auto.json", "single.p50_ms", digits=0)]),
    Claim("README.md", rf"\| AMD EPYC with AVX-512 and bf16[^|]*\| {R} / {R} / {R} \| {R} ms \| {N} / {N} \| {R} ms \|",
          [fig("search_throughput_avx512_auto.json", f"units.{u}.qps", digits=0) for u in ("phrase", "passage", "doc")]
          + [runs(AVX512_SERVICE, "single.p50_ms")]
          + [fig(file, "saturation.qps", digits=0) for file in AVX512_SERVICE]
          + [Figure([(AVX512_READ, ("single", "p50_ms")), (AVX512_READ, ("levels", "0", "p50_ms"))], 0)]),
    Claim("README.md", rf"ONNX Runtime in fp32 encodes a batch of 64 questions at {N} q/s, torch in\s+bf16 at {N}, "
          rf"yet phrase search in process runs at {N} against {N} q/s[^)]*\)[^.]*one question's encoder pass takes "
          rf"{N} against {N} ms",
          [fig(f"search_throughput_avx512_{runtime}.json", "raw_encode_qps", digits=0) for runtime in ("auto", "torch")]
          + [fig(f"search_throughput_avx512_{runtime}.json", "units.phrase.qps", digits=0)
             for runtime in ("auto", "torch")]
          + [fig("encoder_batch_avx512.json", ("ms", precision, "1")) for precision in ("fp32-onnx", "bf16-torch")]),
    Claim("README.md", rf"In process, search keeps {R} of the question encoder's own q/s[^.]*\. Over HTTP the service "
          rf"keeps {R} of the in-process rate",
          [Figure([(file, (*run, "units", u, "ratio")) for file, run in IN_PROCESS
                   for u in ("phrase", "passage", "doc")], 2),
           Figure([(file, ("service_over_raw",)) for file in HTTP], 2)]),
    Claim("README.md", rf"\| AMD EPYC with AVX2 only \| {N} / {N} / {N} \| {R} ms \| {N} / {N} \| {R} ms \|",
          [fig("search_throughput_question_passes.json", f"units.{u}.qps", digits=0) for u in ("phrase", "passage", "doc")]
          + [Figure([("service_max_wait.json", ("runs", str(i), "single_p50_ms")) for i in (0, 2)], 0)]
          + [fig(f"service_load_{u}_async_checks.json", "saturation.qps", digits=0) for u in ("phrase", "passage")]
          + [AVX2_READ]),
    # a live write's snapshot over a 1M-passage base, after 100 / 1,000 / 5,000 written documents (ms)
    Claim("docs/service.md", rf"a write's snapshot {N} / {N} / {N} ms \(before: 1\.5 / 13 / 70 ms\), its BM25 part {N} / "
          rf"{N} / {N} ms", [fig(SNAPSHOTS, f"{i}.{key}", scale=1000) for key in ("snapshot_s", "lexical_s")
                             for i in range(3)]),
    *(Claim("docs/service.md", rf"{words} {N} / {N} / {N} ms", COPIES)
      for words in (r"collapses it\),", "its table of copies")),
]

# The speed table's rows and the runs behind their cells. A row names its runtime when its runs did not run as
# ``--runtime auto`` runs now on that CPU (ONNX Runtime for every question pass; torch too in bf16).
SPEED_ROWS = {
    "Intel Xeon with AMX": ["search_throughput_amx.json", *AMX_SERVICE, "service_read_small_passes_auto.json"],
    "AMD EPYC with AVX-512 and bf16": ["search_throughput_avx512_auto.json", *AVX512_SERVICE, AVX512_READ],
    "AMD EPYC with AVX2 only": ["search_throughput_question_passes.json", "service_max_wait.json",
                                "service_load_phrase_async_checks.json", "service_load_passage_async_checks.json",
                                "service_read_small_scan.json", "service_read_small_scan_2.json"],
}


def runtimes(name: str) -> set[str]:
    """The runtimes the runs of a result file ran on (each of its ``runs`` may name its own)."""
    data = result(name)
    assert isinstance(data, dict)
    return {run.get("runtime", data.get("runtime")) for run in data.get("runs", [data])}


def row_label(text: str, row: str) -> str:
    m = re.search(rf"^\| ({re.escape(row)}[^|]*) \|", text, re.MULTILINE)
    assert m, f"README.md: the speed table has no row for {row}"
    return m.group(1)


@pytest.mark.parametrize("row", SPEED_ROWS)
def test_a_speed_row_names_the_runtime_its_runs_used(row: str):
    """A row measured with every pass on torch says so; one measured as ``auto`` runs says nothing."""
    label = row_label((ROOT / "README.md").read_text(encoding="utf-8"), row)
    used = set().union(*(runtimes(name) for name in SPEED_ROWS[row]))
    assert ("`--runtime torch`" in label) == (used == {"torch"}), f"README.md: row {label!r}, runs on {sorted(used)}"
    assert used <= {"torch", "onnx", "onnx+torch"}


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.pattern[:40])
def test_the_readme_figure_is_its_run(claim: Claim):
    problems = claim.check((ROOT / claim.page).read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_a_figure_that_is_not_its_run_is_caught():
    claim = CLAIMS[0]
    page = (ROOT / claim.page).read_text(encoding="utf-8")
    dense = rounded(value(HYBRID, path("results.dense.passage.acc@1")), 1)
    wrong = page.replace(f"| spanseek dense, default model | {dense} |", "| spanseek dense, default model | 12.3 |")
    assert wrong != page and claim.check(wrong) == [f"README.md:{page.count(chr(10), 0, page.index('| spanseek dense, default model |')) + 1}: says 12.3, {HYBRID} results.dense.passage.acc@1 says {dense}"]
    assert claim.check("nothing") == [f"README.md: no longer says {claim.pattern!r}"]
    assert rounded(200.5, 0) == "201" and rounded(0.0415, 3) == "0.042"
    assert runs(AMX_SERVICE, "single.p50_ms").text() == "30-33"


MODELS = ROOT / "core" / "models"
MODES = {"hybrid", "dense", "lexical"}


def calibrated_modes(model: str) -> set[str]:
    """The search modes a bundled model's ``calibration.json`` has question models for (``unit/mode[/form]``)."""
    models = json.loads((MODELS / model / "calibration.json").read_text())["models"]
    return {key.split("/")[1] for key in models}


def test_the_readme_says_which_modes_each_bundled_model_gives_a_confidence_in():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"\*\*Confidence\.\*\* With the (\w+) model, in every mode \(hybrid[^)]*, dense, lexical\) every hit "
                  r"carries `confidence`, the calibrated probability that it is right \(([^()]*): hybrid mode only; elsewhere it is "
                  r"null\)", text)
    assert m, "README.md: the Confidence paragraph no longer says which models are calibrated in which modes"
    bundled = sorted(p.name for p in MODELS.iterdir() if (p / "calibration.json").is_file())
    assert m.group(1) == "default" and calibrated_modes("default") == MODES
    hybrid_only = set(re.findall(r"`(?:--model )?([\w-]+)`", m.group(2)))
    assert hybrid_only == {model for model in bundled if calibrated_modes(model) == {"hybrid"}}
    assert {"default", *hybrid_only} == set(bundled)
