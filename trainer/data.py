"""Training examples from SQuAD-format data: each passage window is encoded once for all of its questions.

A paragraph is tokenised once; long paragraphs are cut into the same windows the indexer uses, and each
question goes to the window where its answer has the most context. A batch is a set of windows with all of
their questions, so the phrase encoder runs once per window (SQuAD has ~4.6 questions per paragraph). A question
is trained on only where its ``answer_start`` points at its answer's text (``answer_span``): an offset past the
context or at other words would teach the wrong span (or, to the reader, "no answer here").

A training file is read by ``load_training``: SQuAD format only (JSON Lines, CSV and TSV lists of questions and
answers have no passages to train on, and are refused as such); a blank question, a blank answer or a question id used twice is
refused, naming the file and the place; questions left out (an answer not at its offset, inside a word, too long)
are named in a warning (``warn_left_out``). A run's windows (``training_windows``: its training articles'
questions, or a fixed sample of them) are visited in a fixed order for its seed (``epoch_batches``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import QUESTION_PAD_MULTIPLE, padded_length
from spanseek.core.io import CorpusError, Question, has_text, load_squad, squad_questions
from spanseek.core.metrics import answers_in, normalized_passage
from spanseek.core.questions import FORMAT_NAMES, OPEN_FORMATS, question_format
from spanseek.core.text import FLAG_END, FLAG_START, char_to_token, tokenize_passages, window_starts
from spanseek.trainer.arguments import TrainingOptions
from spanseek.trainer.losses import HardNegatives

log = logging.getLogger(__name__)


def answer_span(q: Question) -> tuple[int, int] | None:
    """The characters [start, end) of the question's first answer in its context; None when it has no answer, no
    ``answer_start``, or one that does not point at the answer's text (past the context's end, or at other words:
    a file whose offsets were shifted, or counted in another encoding)."""
    return placed(q.context, q.answers[0], q.answer_starts[0]) if q.answers and q.answer_starts else None


def placed(context: str, answer: str, start: int | None) -> tuple[int, int] | None:
    """The characters [start, end) of ``answer`` in ``context`` where its ``answer_start`` points at its text; None
    where it gives none, or points elsewhere (``answer_span``'s rule for one answer)."""
    if start is None or start < 0:
        return None
    end = start + len(answer)
    return (start, end) if context[start:end] == answer else None


def unplaced(q: Question) -> str | None:
    """Why the question has no ``answer_span`` (a reason of ``LEFT_OUT``: no answer or offset, or an offset not at
    its answer's text); None when it has one."""
    if not q.answers or not q.answer_starts or q.answer_starts[0] is None:  # (a negative one is not at its answer)
        return "no_answer_tokens"
    return "answer_not_at_offset" if answer_span(q) is None else None


def answered(questions: list[Question], path: str | Path, kind: str = "training") -> list[Question]:
    """The questions with an ``answer_span``; those left out are named in a warning per reason (``warn_left_out``:
    how many, and the first one's id, place in ``path`` and answer)."""
    left_out: dict[str, list[Question]] = {}
    for q in questions:
        if (reason := unplaced(q)) is not None:
            left_out.setdefault(reason, []).append(q)
    warn_left_out(path, left_out, len(questions), kind)
    return [q for q in questions if unplaced(q) is None]


def training_questions(path: str | Path, data: list[dict[str, Any]], keep: Callable[[int], bool],
                       kept_out: str = "held out") -> list[Question]:
    """The questions of the articles ``i`` of ``data`` a job trains on (``keep(i)``), placed by their index in the
    file (``core.io.squad_questions``); ValueError naming the file when those articles hold none (``kept_out``: how
    the others are kept out of training, as the message says it)."""
    questions = squad_questions(data, keep)
    if not questions:
        kept = sum(map(keep, range(len(data))))
        raise ValueError(f"{path}: no questions in its training articles ({len(data)} articles, {len(data) - kept} "
                         f"of them {kept_out})")
    return questions


def reserved_articles_hint(every: int, offset: int, data: list[dict[str, Any]]) -> str:
    """Which articles of ``data`` a fit on a reader's reserved articles reads, and what to change when they hold
    nothing to fit on, as a refusal says it (fit-reading, reader-length-bias: their --articles-offset)."""
    reserved = sum(i % every == offset for i in range(len(data)))
    return (f"(article i with i % {every} == {offset}, --holdout-every and --articles-offset: {reserved} of its "
            f"{len(data)} articles); give a file with more articles or another --articles-offset")


def load_training(path: str | Path) -> list[dict[str, Any]]:
    """The ``data`` list of a SQuAD-format training file (``core.io.load_squad``), refusing what would train on
    nothing or on the wrong question (``check_training_data``). Open-domain question lists (JSON Lines, CSV, TSV)
    are refused as such: every training job (``train qsft`` too) learns each answer's place in its passage; a file
    with no question at all, as the --train file it is (not as a split of it that holds none)."""
    fmt = question_format(path)
    if fmt in OPEN_FORMATS:
        raise CorpusError(f"{path}: {FORMAT_NAMES[fmt]} questions and answers, without their passages; training reads "
                          "each question's passage (its context) and the answer's place in it (answer_start): "
                          "give SQuAD-format JSON with the passages (docs/training.md shows how to convert questions "
                          "kept with their contexts). `spanseek eval --index` and `spanseek search --questions` read "
                          "this file as it is")
    data = load_squad(path)
    check_training_data(data, path)
    if not any(para.get("qas") for art in data for para in art["paragraphs"]):  # named before any split of it is
        articles = f"{len(data)} article" + ("" if len(data) == 1 else "s")
        raise CorpusError(f"--train {path}: no questions in it ({articles}); training learns from the questions of a "
                          "SQuAD-format file (each paragraph's qas)")
    return data


def check_training_data(data: list[dict[str, Any]], path: str | Path) -> None:
    """CorpusError naming the file and the place (``data[0].paragraphs[2].qas[5]``) at the first question with no
    text to read, answer with no text, or id used before (naming where): an empty question would be trained to find
    its answer from nothing, and ids key the hard negatives and the results of each question."""
    seen: dict[str, str] = {}
    for i, art in enumerate(data):
        for j, para in enumerate(art["paragraphs"]):
            for k, qa in enumerate(para.get("qas", ())):
                place = f"{path}: data[{i}].paragraphs[{j}].qas[{k}]"
                if not has_text(qa["question"]):
                    raise CorpusError(f"{place}: the question is blank; write its question or remove it")
                for m, ans in enumerate(qa.get("answers") or ()):
                    if not has_text(ans["text"]):
                        raise CorpusError(f"{place}.answers[{m}]: the answer's text is blank; write the answer as it "
                                          "reads in the context, or remove it (a question with no answer has "
                                          "\"answers\": [])")
                if "id" in qa:
                    qid = str(qa["id"])
                    if qid in seen:
                        raise CorpusError(f"{place}: question id {qid!r} is also the id of {seen[qid]}; give each "
                                          "question its own id")
                    seen[qid] = f"data[{i}].paragraphs[{j}].qas[{k}]"


# why build_windows leaves a question out -> how a warning says it
LEFT_OUT = {
    "no_answer_tokens": "have no answer to train on (no answer, no answer_start, or one that covers no word)",
    "answer_not_at_offset": "have an answer that is not at its answer_start",
    "too_long": "have an answer longer than the model's longest phrase",
    "inside_word": "have an answer that starts or ends inside a word (phrases start and end at word boundaries)",
    "no_window": "have an answer that no passage window holds whole",
}


def warn_left_out(path: str | Path, left_out: dict[str, list[Question]], total: int, kind: str = "training") -> None:
    """Log one warning per reason ``build_windows`` (or ``answered``) left questions out, with the count and the
    first one's place and answer, so that a user can find and fix them in the file (``kind``: which of its questions,
    training or held-out)."""
    for reason, questions in left_out.items():
        if questions:
            log.warning("%s: %d of %d %s questions %s and are left out; the first: %s", path,
                        len(questions), total, kind, LEFT_OUT[reason], _where(questions[0], reason))


def _where(q: Question, reason: str) -> str:
    """A question's id, article and paragraph, and (for a misplaced answer) where its answer is, for a warning."""
    at = f"question {q.id!r} (data[{q.doc_index}].paragraphs[{q.para_index}])"
    if not q.answers or not q.answer_starts or q.answer_starts[0] is None:
        return at
    answer, start = q.answers[0], q.answer_starts[0]
    if reason == "answer_not_at_offset":
        found = q.context.find(answer)
        where = f"its context has it at character {found}" if found >= 0 else "its context does not hold it"
        return f"{at}: {answer!r} is not at character {start} ({where})"
    if reason == "inside_word" and start >= 0:
        return f"{at}: {answer!r} in {q.context[max(0, start - 15):start + len(answer) + 15]!r}"
    return f"{at}: {answer!r}"


@dataclass
class TrainWindow:
    """One window: content token ids and flags, and its questions with gold (start, end) content positions."""

    input_ids: np.ndarray
    flags: np.ndarray
    questions: list[str]
    starts: list[int]
    ends: list[int]
    answers: list[tuple[str, ...]]
    hard: list[str]  # hard-negative passage texts mined for its questions, best first
    passage: str = ""  # the text the window was cut from
    first: int = 0  # the passage token at the window's content position 0
    offsets: np.ndarray | None = None  # (n, 2) characters of ``passage`` each content token covers


@dataclass
class Batch:
    """Tensors for one step (joint training and QSFT alike): P windows, Q questions; positions index the rows of
    ``start_ok``.

    Joint training encodes the passages: ``input_ids`` holds the windows ([CLS] ... [SEP], so content token k is
    at position k + 1) and, after them, the hard-negative passages it encodes too. Query-side fine-tuning reads
    the windows' token vectors from a phrase cache instead: ``vectors`` (content token k at position k) and
    ``hard``, the hard-negative tokens from the cache.
    """

    start_ok: torch.Tensor  # (P, T) bool: token may start a phrase (rows after P: hard passages)
    end_ok: torch.Tensor  # (P, T) bool
    q_input_ids: torch.Tensor  # (Q, Tq)
    q_attention_mask: torch.Tensor  # (Q, Tq)
    q_passage: torch.Tensor  # (Q,) window of each question
    gold_start: torch.Tensor  # (Q,) position in its window's row
    gold_end: torch.Tensor  # (Q,)
    n_windows: int  # rows [0, n_windows) are windows; the rows after them are hard-negative passages
    content_shift: int = 1  # the row position of content token 0: 1 after [CLS], 0 in cached vectors
    windows: list[TrainWindow] = field(default_factory=list)
    input_ids: torch.Tensor | None = None  # (P + Hp, T) with [CLS] ... [SEP] and padding
    attention_mask: torch.Tensor | None = None  # (P + Hp, T)
    hard_allowed: torch.Tensor | None = None  # (Q, Hp) bool: hard passage h does not contain question q's answer
    vectors: torch.Tensor | None = None  # (P, T, d) cached token vectors of the windows
    hard: HardNegatives | None = None  # cached hard-negative tokens

    def to(self, device: torch.device) -> Batch:
        def move(v):
            if isinstance(v, HardNegatives):
                return HardNegatives(*(t.to(device) for t in (v.vectors, v.start_ok, v.end_ok, v.allowed)))
            return v.to(device) if isinstance(v, torch.Tensor) else v

        return Batch(**{k: move(v) for k, v in self.__dict__.items()})


def question_tensors(windows: list[TrainWindow], tokenizer, max_query_len: int, shift: int) -> dict[str, torch.Tensor]:
    """The batch's questions, window by window: token ids, each one's window, and gold positions + ``shift``."""
    q = tokenizer([s for w in windows for s in w.questions], padding=True, truncation=True,
                  max_length=max_query_len, return_tensors="pt", pad_to_multiple_of=QUESTION_PAD_MULTIPLE)
    return {
        "q_input_ids": q["input_ids"],
        "q_attention_mask": q["attention_mask"],
        "q_passage": torch.tensor([p for p, w in enumerate(windows) for _ in w.questions]),
        "gold_start": torch.tensor([s + shift for w in windows for s in w.starts]),
        "gold_end": torch.tensor([e + shift for w in windows for e in w.ends]),
    }


def build_windows(
    questions: list[Question],
    tokenizer,
    max_seq_len: int,
    stride: int,
    max_answer_tokens: int,
    hard: dict[str, list[str]] | None = None,
    left_out: dict[str, list[Question]] | None = None,
) -> tuple[list[TrainWindow], dict[str, int]]:
    """Group questions by context, tokenise each context once, and assign questions to windows.

    ``hard`` maps question ids to mined hard-negative passages (trainer.mining). Returns the windows that have at
    least one question, and counts of what was skipped; ``left_out``, when given, gets the skipped questions
    themselves, by reason (for ``warn_left_out``).
    """
    hard = hard or {}
    by_ctx: dict[str, list[Question]] = {}
    for q in questions:
        by_ctx.setdefault(q.context, []).append(q)
    contexts = list(by_ctx)
    window = max_seq_len - 2
    skipped = {"no_answer_tokens": 0, "answer_not_at_offset": 0, "too_long": 0, "no_window": 0, "inside_word": 0}
    skipped_questions: dict[str, list[Question]] = left_out if left_out is not None else {}
    for reason in skipped:
        skipped_questions.setdefault(reason, [])

    def skip(reason: str, q: Question) -> None:
        skipped[reason] += 1
        skipped_questions[reason].append(q)

    windows: list[TrainWindow] = []
    for c0 in range(0, len(contexts), 1024):
        chunk = contexts[c0 : c0 + 1024]
        for ctx, toks in zip(chunk, tokenize_passages(tokenizer, chunk), strict=True):
            starts = window_starts(len(toks), window, stride)
            per_window = [TrainWindow(toks.input_ids[s : s + window], toks.flags[s : s + window], [], [], [], [], [],
                                      passage=ctx, first=s, offsets=toks.offsets[s : s + window]) for s in starts]
            for q in by_ctx[ctx]:
                chars = answer_span(q)
                if chars is None:  # no answer, or its offset is past the context or at other words: a wrong span
                    skip(unplaced(q) or "no_answer_tokens", q)
                    continue
                span = char_to_token(toks.offsets, *chars)
                if span is None:
                    skip("no_answer_tokens", q)
                    continue
                i, j = span
                if j - i >= max_answer_tokens:
                    skip("too_long", q)
                    continue
                if not (toks.flags[i] & FLAG_START and toks.flags[j] & FLAG_END):
                    skip("inside_word", q)  # its gold token is masked out of the softmax: it cannot be learned
                    continue
                # window with the most context around the answer
                best, best_ctx = -1, -1
                for w, s in enumerate(starts):
                    if s <= i and j < s + window:
                        c = min(i - s, s + window - 1 - j)
                        if c > best_ctx:
                            best, best_ctx = w, c
                if best < 0:  # longer than the windows' overlap and across a window edge: no window holds it
                    skip("no_window", q)
                    continue
                tw = per_window[best]
                tw.questions.append(q.question)
                tw.starts.append(i - starts[best])
                tw.ends.append(j - starts[best])
                tw.answers.append(q.answers)
                tw.hard.extend(h for h in hard.get(q.id, []) if h not in tw.hard)
            windows.extend(w for w in per_window if w.questions)
    return windows, skipped


def pick_hard(windows: list[TrainWindow], n: int) -> list[str]:
    """Up to n distinct hard passages for a batch, taken round-robin from its windows' lists (best first)."""
    picked: list[str] = []
    for rank in range(max((len(w.hard) for w in windows), default=0)):
        for w in windows:
            if len(picked) == n:
                return picked
            if rank < len(w.hard) and w.hard[rank] not in picked:
                picked.append(w.hard[rank])
    return picked


def hard_allowed(hard_texts: list[str], answers: Sequence[Sequence[str]]) -> torch.Tensor:
    """(Q, H) bool: hard passage h may be a negative of question q (it does not contain one of q's answers). Each
    passage is normalised once per batch, not once per question (that was most of a GPU step's time)."""
    norm = [normalized_passage(h) for h in hard_texts]
    return torch.tensor([[not answers_in(n, a) for n in norm] for a in answers],
                        dtype=torch.bool).reshape(len(answers), len(hard_texts))


def collate(windows: list[TrainWindow], tokenizer, max_query_len: int, hard_per_batch: int = 0) -> Batch:
    """Pad windows (adding [CLS]/[SEP]) and tokenise their questions; gold positions shift by 1 for [CLS].

    With ``hard_per_batch`` > 0, that many mined hard passages (first window of each) are appended as extra rows.
    """
    hard_texts = pick_hard(windows, hard_per_batch)
    max_content = max(len(w.input_ids) for w in windows)
    hard_rows = tokenize_passages(tokenizer, hard_texts) if hard_texts else []
    rows = [(w.input_ids, w.flags) for w in windows] + [(t.input_ids[:max_content], t.flags[:max_content]) for t in hard_rows]
    T = padded_length(max_content + 2)
    P = len(windows)
    ids = torch.full((len(rows), T), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    flags = torch.zeros((len(rows), T), dtype=torch.uint8)
    for p, (row_ids, row_flags) in enumerate(rows):
        n = len(row_ids)
        ids[p, 0] = tokenizer.cls_token_id
        ids[p, 1 : n + 1] = torch.from_numpy(row_ids)
        ids[p, n + 1] = tokenizer.sep_token_id
        mask[p, : n + 2] = 1
        flags[p, 1 : n + 1] = torch.from_numpy(row_flags)
    answers = [a for w in windows for a in w.answers]
    return Batch(
        input_ids=ids,
        attention_mask=mask,
        start_ok=(flags & FLAG_START) > 0,
        end_ok=(flags & FLAG_END) > 0,
        **question_tensors(windows, tokenizer, max_query_len, shift=1),  # [CLS] comes first
        n_windows=P,
        content_shift=1,
        windows=windows,
        hard_allowed=hard_allowed(hard_texts, answers),
    )


def epoch_batches(windows: list[TrainWindow], size: int, seed: int) -> list[list[int]]:
    """A deterministic epoch order: shuffle, sort by length within pools of 50 batches (less padding), shuffle."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(windows))
    pool = size * 50
    batches = []
    for a in range(0, len(order), pool):
        chunk = sorted(order[a : a + pool].tolist(), key=lambda i: len(windows[i].input_ids))
        batches.extend(chunk[b : b + size] for b in range(0, len(chunk), size))
    rng.shuffle(batches)
    return batches


def visited_windows(windows: list[TrainWindow], size: int, seed: int, steps: int, world: int = 1) -> list[TrainWindow]:
    """The windows that the first ``steps`` steps train on (every data-parallel rank's), in their first visit's order:
    a run shorter than an epoch needs the teacher's logits of those only."""
    steps_per_epoch = max(1, math.ceil(len(windows) / size) // world)
    seen: dict[int, None] = {}
    for epoch in range(math.ceil(steps / steps_per_epoch)):
        order = epoch_batches(windows, size, seed + epoch)
        for pos in range(min(steps_per_epoch, steps - epoch * steps_per_epoch)):
            for rank in range(world):
                seen |= dict.fromkeys(order[pos * world + rank])
        if len(seen) == len(windows):
            break
    return [windows[i] for i in seen]


def question_windows(path: str | Path, questions: list[Question], tokenizer, enc: EncoderConfig,
                     hard: dict[str, list[str]] | None = None, kind: str = "training"
                     ) -> tuple[list[TrainWindow], dict[str, int]]:
    """``build_windows`` of ``questions`` (of the file ``path``; ``kind``: training or held-out), warning of those
    left out (``warn_left_out``); ValueError naming the file when no window holds a question."""
    left_out: dict[str, list] = {}
    windows, skipped = build_windows(questions, tokenizer, enc.max_seq_len, enc.stride, enc.max_answer_tokens, hard,
                                     left_out)
    warn_left_out(path, left_out, len(questions), kind)
    if not windows:
        raise ValueError(f"{path}: no trainable questions in the {kind} articles (none has an answer a window can "
                         f"hold: skipped {skipped})")
    return windows, skipped


def training_windows(
    cfg: TrainingOptions, data: list[dict], tokenizer, enc: EncoderConfig, hard: dict[str, list[str]] | None
) -> tuple[list[TrainWindow], dict[str, int]]:
    """The windows of the training articles' questions (a fixed sample with ``limit_questions``), and what
    ``build_windows`` skipped."""
    questions = training_questions(cfg.train, data, lambda i: not cfg.holdout.held(i))
    if cfg.limit_questions and cfg.limit_questions > len(questions):
        raise ValueError(f"--limit-questions {cfg.limit_questions}: {cfg.train} has {len(questions)} training "
                         "questions; ask for at most that many, or leave it out to use them all")
    if cfg.limit_questions:
        rng = np.random.default_rng(cfg.seed)
        questions = [questions[i] for i in sorted(rng.choice(len(questions), cfg.limit_questions, replace=False))]
    windows, skipped = question_windows(cfg.train, questions, tokenizer, enc, hard)
    log.info("training on %d questions in %d windows (skipped %s)", sum(len(w.questions) for w in windows),
             len(windows), skipped)
    return windows, skipped
