"""How well each distillation teacher, and their pool, reads: the exact-match rate of the best span of each
(question, window) pair that a phrase model's training run would distil on.

    python bench/teacher_quality.py --questions runs/validation.json.gz --teachers default base \
        --out bench/results/teacher_quality.json

The pairs are those of ``spanseek train phrase`` (trainer.data.build_windows with ``--model``'s tokenizer and window
sizes: every window that holds a question's answer), so each teacher is measured on the distribution it teaches
(``trainer.distill``: a reader's logits, or a phrase model's products, at the student's tokens). Each teacher alone
and all of them pooled (the mean of their log-probabilities, as ``--teacher A,B`` trains) pick the span (i, j),
i <= j < i + max_answer_tokens, that maximises start + end log-probability over tokens that may start and end a
phrase; EM as SQuAD scores it, with a 95% bootstrap interval over articles. Choose teachers on training questions
(the reserved articles, which no reader trained on); report on held-out ones.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.config import EncoderConfig  # noqa: E402
from spanseek.core.encoding import pick_device, pick_precision  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.metrics import cluster_bootstrap_ci, exact_match, pct  # noqa: E402
from spanseek.core.model import CONFIG_NAME, load_tokenizer, resolve_model  # noqa: E402
from spanseek.core.reader import MISSING_LOGIT, PassageReader  # noqa: E402
from spanseek.core.text import FLAG_END, FLAG_START  # noqa: E402
from spanseek.trainer.data import TrainWindow, build_windows  # noqa: E402
from spanseek.trainer.distill import PhraseTeacher, pooled_logits, read_pairs, resolve_teacher  # noqa: E402


def best_span(logits: np.ndarray, flags: np.ndarray, max_tokens: int) -> tuple[int, int]:
    """The (i, j) with i <= j < i + max_tokens maximising log p_start(i) + log p_end(j), over tokens that may start
    (end) a phrase and that the teacher read."""
    read = logits[:, 0] > MISSING_LOGIT / 2
    ls = np.where(read & (flags & FLAG_START > 0), logits[:, 0], -np.inf)
    le = np.where(read & (flags & FLAG_END > 0), logits[:, 1], -np.inf)
    n = len(ls)
    best, span = -np.inf, (0, 0)
    for length in range(min(max_tokens, n)):
        s = ls[: n - length] + le[length:]
        i = int(np.argmax(s))
        if s[i] > best:
            best, span = float(s[i]), (i, i + length)
    return span


def teacher_logits(ref: str, pairs: list[tuple[str, TrainWindow]], batch: int) -> list[np.ndarray]:
    kind, path = resolve_teacher(ref)
    device = pick_device("auto")
    precision = pick_precision("auto", device)
    if kind == "reader":
        reader = PassageReader.load(path, device=device, precision=precision)
        return [x for a in range(0, len(pairs), batch) for x in read_pairs(reader, pairs[a : a + batch])]
    teacher = PhraseTeacher(path, device, precision)
    return [x for a in range(0, len(pairs), batch) for x in teacher.token_logits(pairs[a : a + batch])]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", required=True, help="SQuAD-format questions")
    ap.add_argument("--teachers", nargs="+", required=True, help="readers (`default`, a directory) or phrase models "
                    "(`base`, `phrase:DIR`), as --teacher takes them")
    ap.add_argument("--model", default="default", help="the student whose windows and tokens are taught")
    ap.add_argument("--limit", type=int, default=None, help="a fixed random sample of N pairs")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args(argv)

    config = EncoderConfig.load(resolve_model(args.model) / CONFIG_NAME)
    questions = squad_questions(load_squad(args.questions))
    title = {q.question: q.title for q in questions}
    windows, _ = build_windows(questions, load_tokenizer(config), config.max_seq_len, config.stride,
                               config.max_answer_tokens)
    pairs = [(q, w, answers) for w in windows for q, answers in zip(w.questions, w.answers, strict=True)]
    if args.limit is not None and args.limit < len(pairs):
        pairs = random.Random(0).sample(pairs, args.limit)
    taught = [(q, w) for q, w, _ in pairs]
    logits, seconds = {}, {}
    for ref in args.teachers:
        t0 = time.perf_counter()
        logits[ref] = teacher_logits(ref, taught, args.batch)
        seconds[ref] = round(time.perf_counter() - t0, 1)
    arms = {ref: logits[ref] for ref in args.teachers}
    if len(args.teachers) > 1:
        arms[",".join(args.teachers)] = [pooled_logits(list(rows)) for rows in zip(*logits.values(), strict=True)]
    groups = [title.get(q, "") for q, _, _ in pairs]
    result: dict[str, Any] = {"benchmark": "teacher_quality", "questions": args.questions, "model": args.model,
                              "pairs": len(pairs), "cpu": cpu_name(), "seconds": seconds, "em": {}}
    for name, rows in arms.items():
        em = []
        for (_, w, answers), x in zip(pairs, rows, strict=True):
            assert w.offsets is not None
            i, j = best_span(x, w.flags, config.max_answer_tokens)
            em.append(exact_match(w.passage[int(w.offsets[i, 0]) : int(w.offsets[j, 1])], list(answers)))
        values = np.asarray(em, dtype=np.float64)
        result["em"][name] = {"em": pct(float(values.mean())),
                              "ci95_over_articles": list(cluster_bootstrap_ci(values, groups))}
        print(f"{name:<40} EM {result['em'][name]['em']:.1f}  {result['em'][name]['ci95_over_articles']}")
    if args.out:
        write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
