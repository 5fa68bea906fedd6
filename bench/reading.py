"""Reading at search time, measured: open search with and without the reader, its confidence, its cost.

    python bench/reading.py --index runs/val-index --model default --reader default \
        --questions runs/validation.json.gz --out bench/results/reading.json

On every question of the file (or a fixed sample of --limit), searched over --index in the index's default mode:

- quality without and with ``read``: phrase EM@1 / F1@1, passage acc@1 / acc@5, document acc@1;
- read hits' confidence: the first hit's expected calibration error (10 bins) per unit, every answer in the index;
- the reader alone reading each question's gold passage (reading-comprehension EM / F1);
- speed, one run on this machine: phrase search q/s at batch 64 (--batch-size) with and without reading (question
  encoding included, after a warm-up batch), and their ratio;
- cost, what admission counts a read question for (service/cost.py): CPU seconds (this process, all its threads) of
  a batch of phrase questions read at 1, 3 and 5 passages (--cost-depths) against the same batch unread, each
  passage's share fitted as a line through them: question-equivalents a passage read;
- prior (with --absent-questions, a SQuAD file whose questions' articles the index does not hold, as many sampled
  as there are questions): read hits' first-hit ECE over both sets together (half unanswerable) at each --priors
  value, and their mean confidence on either set (the passage unit at top_k 1 here).

``--parts`` measures a subset. ``--readings FILE ...`` compares fits of reading for one reader: the with_read and prior
parts are measured for the reader's own fit and again for each reading file (``reading.json``), on the same reads
(every read is remembered, so a file reads nothing anew), under ``readings`` in the output. ``--read-below T
...`` adds, for each T, the same quality, the share of questions read and (with the speed part) the q/s with
``read_below`` T: only the questions whose best hit without read is less confident than T are read.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core import reading as reading_module  # noqa: E402
from spanseek.core.evaluate import sample_questions  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.metrics import calibration_error as ece  # noqa: E402
from spanseek.core.metrics import exact_match, f1_score, passage_has_answer  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.core.reader import reading_comprehension  # noqa: E402

RUNS = {"phrase": ("phrase", 1), "passage": ("passage", 5), "doc": ("doc", 1)}
PARTS = ("speed", "cost", "prior", "without_read", "with_read", "reader_rc")


def quality(searcher, questions, read: bool, read_passages: int | None, batch: int,
            read_below: float | None = None) -> dict:
    """Metrics of one setting over every question; the first hits' confidences and labels per unit; with
    ``read_below``, the share of questions read (their first phrase hit is a read one)."""
    em, f1, acc1, acc5, doc1, was_read = [], [], [], [], [], []
    conf: dict[str, list[float]] = {u: [] for u in RUNS}
    right: dict[str, list[float]] = {u: [] for u in RUNS}
    for b in range(0, len(questions), batch):
        chunk = questions[b:b + batch]
        texts = [q.question for q in chunk]
        q_start, q_end = searcher.encoder.encode(texts)
        found = {name: searcher.search_vectors(q_start, q_end, SearchParams(
            unit=unit, top_k=k, read=read, read_passages=read_passages if read else None, read_below=read_below),
            None, texts)
                 for name, (unit, k) in RUNS.items()}
        for i, q in enumerate(chunk):
            top = found["phrase"][i][0].text if found["phrase"][i] else ""
            was_read.append(float(bool(found["phrase"][i]) and found["phrase"][i][0].read is not None))
            em.append(exact_match(top, q.answers))
            f1.append(f1_score(top, q.answers))
            has = [passage_has_answer(h.passage, q.answers) for h in found["passage"][i]]
            acc1.append(float(any(has[:1])))
            acc5.append(float(any(has[:5])))
            doc1.append(float(bool(found["doc"][i]) and found["doc"][i][0].title == q.title))
            for unit, ok in (("phrase", em[-1]), ("passage", acc1[-1]), ("doc", doc1[-1])):
                hits = found[unit][i]
                if hits and hits[0].confidence is not None:
                    conf[unit].append(hits[0].confidence)
                    right[unit].append(ok)
    out = {"phrase_em@1": pct(em), "phrase_f1@1": pct(f1), "passage_acc@1": pct(acc1), "passage_acc@5": pct(acc5),
           "doc_acc@1": pct(doc1)}
    if read:
        out["first_hit_ece"] = {u: round(ece(np.array(conf[u]), np.array(right[u])), 6) for u in RUNS if conf[u]}
    if read_below is not None:
        out["phrase_questions_read"] = pct(was_read)
    return out


def parts_list(value: str) -> str:
    unknown = set(value.split(",")) - set(PARTS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown parts {sorted(unknown)}; choose among {', '.join(PARTS)}")
    return value


def pct(values: list[float]) -> float:
    return round(100 * float(np.mean(values)), 2)


def speed(searcher, questions, read: bool, read_passages: int | None, batches: int, batch: int,
          read_below: float | None = None) -> float:
    """Phrase-search q/s at ``batch``, encoding included, after one warm-up batch (the questions after it are timed,
    so there must be more than one batch of them)."""
    texts = [q.question for q in questions]
    params = SearchParams(read=read, read_passages=read_passages if read else None, read_below=read_below)
    searcher.search(texts[:batch], params)
    if searcher.reading is not None:
        searcher.reading._recent.clear()  # timed reads are real reads, not remembered ones
    timed = texts[batch:batch * (batches + 1)]
    if not timed:
        raise SystemExit(f"{len(texts)} questions leave none to time after a warm-up batch of {batch}")
    t0 = time.perf_counter()
    for b in range(0, len(timed), batch):
        searcher.search(timed[b:b + batch], params)
    return round(len(timed) / (time.perf_counter() - t0), 1)


def cpu_seconds(searcher, texts: list[str], params: SearchParams, batch: int) -> float:
    """CPU seconds of searching ``texts`` in batches of ``batch`` with ``params`` (read anew: nothing remembered)."""
    if searcher.reading is not None:
        searcher.reading._recent.clear()
    t0 = time.process_time()
    for b in range(0, len(texts), batch):
        searcher.search(texts[b:b + batch], params)
    return time.process_time() - t0


def read_cost(searcher, questions, depths: list[int], batches: int, batch: int) -> dict:
    """Question-equivalents of a read phrase question: each depth's CPU time against the unread batch's, and the
    least-squares line ``cost = base + per_passage x depth`` through them (after a warm-up batch of each)."""
    texts = [q.question for q in questions]
    timed = texts[batch:batch * (batches + 1)]
    settings = [SearchParams()] + [SearchParams(read=True, read_passages=d) for d in depths]
    for params in settings:
        cpu_seconds(searcher, texts[:batch], params, batch)
    unread = cpu_seconds(searcher, timed, settings[0], batch)
    ratios = [cpu_seconds(searcher, timed, params, batch) / unread for params in settings[1:]]
    per_passage, base = np.polyfit(np.array(depths, dtype=float), np.array(ratios), 1)
    return {"questions": len(timed), "batch": batch, "unread_cpu_s": round(unread, 3),
            "read_cost": {str(d): round(r, 2) for d, r in zip(depths, ratios, strict=True)},
            "per_passage": round(float(per_passage), 2), "base": round(float(base), 2)}


def read_prior(searcher, present, absent, priors: list[float], batch: int) -> dict:
    """Read hits' first-hit calibration over answerable (``present``) and unanswerable (``absent``) questions, one
    report per unit and prior; an absent question's hits are all wrong."""
    questions, out = present + absent, {}
    texts = [q.question for q in questions]
    for prior in priors:
        for unit in RUNS:
            conf, right = [], []
            for b in range(0, len(texts), batch):
                found = searcher.search(texts[b:b + batch], SearchParams(unit=unit, top_k=1, read=True,
                                                                         unanswerable_prior=prior))
                for i, hits in enumerate(found, b):
                    h, q = (hits[0] if hits else None), questions[i]
                    conf.append(h.confidence or 0.0 if h is not None else 0.0)
                    right.append(float(i < len(present) and h is not None and right_hit(unit, h, q)))
            c, r = np.array(conf), np.array(right)
            out[f"{unit}@{prior:g}"] = {"ece_half_unanswerable": round(ece(c, r), 4),
                                        "mean_confidence_present": round(float(c[:len(present)].mean()), 4),
                                        "mean_confidence_absent": round(float(c[len(present):].mean()), 4)}
    return out


def absent_questions(args) -> list:
    """The questions of --absent-questions whose articles --questions does not hold (the index's)."""
    held = {q.title for q in squad_questions(load_squad(args.questions))}
    absent = [q for q in squad_questions(load_squad(args.absent_questions)) if q.title not in held]
    if not absent:
        raise SystemExit(f"every question of {args.absent_questions} is of an article of {args.questions}: "
                         "the prior part needs questions whose articles the index does not hold")
    return absent


def right_hit(unit: str, hit, q) -> bool:
    """Whether a first hit is right: the phrase an exact answer, the passage holds one, the question's document."""
    if unit == "phrase":
        return bool(exact_match(hit.text, q.answers))
    return passage_has_answer(hit.passage, q.answers) if unit == "passage" else hit.title == q.title


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--reader", default="default")
    ap.add_argument("--questions", required=True, help="SQuAD-format file whose paragraphs the index holds")
    ap.add_argument("--limit", type=int, default=None, help="a fixed random sample of N questions")
    ap.add_argument("--read-passages", type=int, default=None, help="default: the reader's fitted one")
    ap.add_argument("--speed-batches", type=int, default=8, help="timed batches for the q/s")
    ap.add_argument("--absent-questions", default=None,
                    help="prior part: SQuAD file of questions whose articles the index does not hold")
    ap.add_argument("--priors", type=float, nargs="+", default=[0.0, 0.5], help="prior part: unanswerable_prior")
    ap.add_argument("--cost-depths", type=int, nargs="+", default=[1, 3, 5], metavar="N",
                    help="read_passages the cost part reads at")
    ap.add_argument("--batch-size", type=int, default=64, help="questions per search batch")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"], help="question encoder")
    ap.add_argument("--reader-precision", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--runtime", default="auto", choices=["auto", "torch", "onnx"], help="forward passes: auto (ONNX Runtime in fp32 on a CPU), torch or onnx")
    ap.add_argument("--read-below", type=float, nargs="*", default=[], metavar="T",
                    help="also measure read with read_below T (quality, questions read, speed), for each T")
    ap.add_argument("--readings", nargs="*", default=[], metavar="FILE",
                    help="reading.json files of --reader to compare on the same reads (with_read and prior parts)")
    ap.add_argument("--parts", default=",".join(PARTS), type=parts_list,
                    help=f"what to measure, comma-separated among {','.join(PARTS)} (default: all)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    searcher = open_searcher(args.index, args.model, precision=args.precision, reader=args.reader,
                             reader_precision=args.reader_precision, runtime=args.runtime)
    assert searcher.reading is not None
    questions = sample_questions(squad_questions(load_squad(args.questions)), args.limit)
    parts = set(args.parts.split(","))
    result = {
        "cpu": cpu_name(), "cores": os.cpu_count(), "questions": len(questions), "index": args.index,
        "model": args.model, "reader": args.reader, "mode": searcher.default_mode,
        "read_passages": args.read_passages or searcher.reading.reading.read_passages,
        "reader_precision": searcher.reading.reader.precision,
        "runtime": searcher.reading.reader.passes.name,
    }
    if "speed" in parts:
        result["speed"] = {
            "without_read_qps": speed(searcher, questions, False, None, args.speed_batches, args.batch_size),
            "with_read_qps": speed(searcher, questions, True, args.read_passages, args.speed_batches, args.batch_size)}
        result["speed"]["ratio"] = round(result["speed"]["with_read_qps"] / result["speed"]["without_read_qps"], 3)
    if "cost" in parts:
        result["cost"] = read_cost(searcher, questions, args.cost_depths, args.speed_batches, args.batch_size)
    if args.readings:  # every pair read once: each fit scores the reads of the reader's own
        reading_module.RECENT_READS = 1 << 40
    absent = absent_questions(args) if "prior" in parts and args.absent_questions else None
    if absent is not None:
        result["prior"] = read_prior(searcher, questions, sample_questions(absent, len(questions)), args.priors,
                                     args.batch_size)
    if "without_read" in parts:
        result["without_read"] = quality(searcher, questions, False, None, args.batch_size)
    if "with_read" in parts:
        result["with_read"] = quality(searcher, questions, True, args.read_passages, args.batch_size)
    if args.readings:
        result["readings"] = {}
        for path in args.readings:
            searcher.reading.reading = reading_module.Reading.load(path)
            got = result["readings"][path] = {}
            if "with_read" in parts:
                got["with_read"] = quality(searcher, questions, True, args.read_passages, args.batch_size)
            if absent is not None:
                got["prior"] = read_prior(searcher, questions, sample_questions(absent, len(questions)), args.priors,
                                          args.batch_size)
    for below in args.read_below:  # a question is read only when its search's best hit is below ``below``
        got = result.setdefault("read_below", {})[str(below)] = quality(
            searcher, questions, True, args.read_passages, args.batch_size, below)
        if "speed" in parts:
            got["with_read_qps"] = speed(searcher, questions, True, args.read_passages, args.speed_batches,
                                         args.batch_size, below)
            got["ratio"] = round(got["with_read_qps"] / result["speed"]["without_read_qps"], 3)
    if "reader_rc" in parts:
        result["reader_rc"] = reading_comprehension(searcher.reading.reader, questions)
    write_json_atomic(args.out, result)
    print(json.dumps(result, indent=2))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
