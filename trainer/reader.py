"""Training the cross-attention reader (core.reader) on SQuAD-format questions, held-out articles excluded.

    spanseek train reader --train ../shared/data/squad-v1.1-train.json.gz --out runs/reader

Each (question, gold passage) pair becomes windows of at most ``max_len`` tokens (long passages strided); a window's
targets are the answer's first and last tokens, or the first token ([CLS]) when the answer is not inside it (the
standard SQuAD recipe). Steps take length-grouped batches (dynamic padding: about 1.5x faster than padding every
window to ``max_len``), under bf16 autocast where the CPU or GPU runs it faster. The run resumes from ``OUT/last``
(weights, optimizer, schedule, step and torch's random state, so that a resumed run ends where the uninterrupted one
does), keeps a reader every ``snapshot_every`` steps in ``OUT/snapshots`` (to average the last few: ``spanseek train
average``) and ends by reading ``val_questions`` held-out questions from their gold passages.
With ``--teacher`` (a stronger reader, or a complete teacher cache of one: ``bench/gpu/teacher_cache.py fill --for
reader``) each step adds ``lambda_kl`` times the KL divergence of the start and end distributions over the window's
passage tokens from the teacher's (trainer.distill, the teacher's logits read once into a cache), or with
``--kl-level spans`` of the distribution over the window's spans that reading decodes: whole words, of at most
``max_answer_tokens`` tokens (``reader_kl``).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.encoding import autocast, pad_batch, pick_device, pick_precision
from spanseek.core.evaluate import trained_questions
from spanseek.core.io import squad_questions, write_json_atomic
from spanseek.core.lexical import LexicalIndex
from spanseek.core.metrics import answers_in, normalized_passage
from spanseek.core.reader import (
    READER_WEIGHTS_NAME,
    PassageReader,
    ReaderModel,
    load_reader_tokenizer,
    make_windows,
    reading_comprehension,
    resolve_reader,
)
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.trainer.arguments import ReaderTrainConfig
from spanseek.trainer.checkpoints import (
    STATE,
    check_checkpoint,
    check_weights,
    read_state,
    recover_checkpoint,
    resume_point,
    save_checkpoint,
    save_snapshot,
)
from spanseek.trainer.data import answered, load_training, training_questions
from spanseek.trainer.distill import check_teacher, reader_teacher_tensors, reader_windows, teacher_cache
from spanseek.trainer.dropout import fast_dropout
from spanseek.trainer.losses import NEG_INF, masked_kl, span_kl
from spanseek.trainer.progress import Progress
from spanseek.trainer.rundir import (
    TRAIN_CONFIG,
    Trained,
    check_resume_data,
    check_run_kind,
    check_same_recipe,
    examples_digest,
    run_lock,
)
from spanseek.trainer.state import optimizer_and_resume, rng_state, set_rng_state
from spanseek.trainer.stopping import StopAfterStep, after_training
from spanseek.trainer.summary import (
    SUMMARY,
    RunSoFar,
    after_loop,
    checkpoint_saved,
    loop_summary,
    model_card,
    run_data,
    write_validated_card,
)
from spanseek.trainer.unused import left_unused

log = logging.getLogger(__name__)


def answer_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """(first, last) token of the answer's characters [start, end) in a window with these (T, 2) passage offsets
    (-1 outside the passage); (0, 0) when the answer is not wholly inside the window."""
    ctx = np.flatnonzero(offsets[:, 0] >= 0)
    if len(ctx) == 0 or offsets[ctx[0], 0] > start or offsets[ctx[-1], 1] < end:
        return 0, 0
    first = ctx[offsets[ctx, 0] <= start][-1]
    last = ctx[offsets[ctx, 1] >= end][0]
    return (int(first), int(last)) if last >= first else (0, 0)


def training_windows(tokenizer, reader_config, questions, negatives: Sequence[tuple[int, str]] = ()
                     ) -> tuple[Any, np.ndarray]:
    """The windows of every (question, gold passage) pair, then of every (question index, passage) of
    ``negatives``, and their (W, 2) target tokens: the answer's, or [CLS] (0, 0) in a window without it (every
    window of a negative). A window's pair is its question's index for gold passages, ``len(questions) + n`` for
    the n-th negative."""
    texts = [q.question for q in questions] + [questions[i].question for i, _ in negatives]
    passages = [q.context for q in questions] + [passage for _, passage in negatives]
    windows = make_windows(tokenizer, reader_config, texts, passages)
    targets = np.zeros((len(windows.ids), 2), dtype=np.int64)
    for w, p in enumerate(windows.pair):
        if p < len(questions):
            q = questions[p]
            start = q.answer_starts[0]
            targets[w] = answer_tokens(windows.offsets[w], start, start + len(q.answers[0]))
    return windows, targets


def negative_passages(articles: list[dict], questions: list, n: int) -> list[tuple[int, str]]:
    """Each question's ``n`` hardest negatives, as (question index, passage): the paragraphs of its own article
    (``articles[q.doc_index]``) without its answer (``passage_has_answer``) that BM25 (``core.lexical``, over the
    article's paragraphs) ranks highest for it. What retrieval puts beside the answer's passage at search time is
    of this kind: on the same subject, sharing the question's words, but not answering it."""
    by_article: dict[int, list[int]] = {}
    for i, q in enumerate(questions):
        by_article.setdefault(q.doc_index, []).append(i)
    out: list[tuple[int, str]] = []
    for article, asked in by_article.items():
        paragraphs = [p["context"] for p in articles[article]["paragraphs"]]
        if len(paragraphs) < 2 or n < 1:
            continue
        normalised = [normalized_passage(p) for p in paragraphs]
        scores = LexicalIndex.build(paragraphs).scores([questions[i].question for i in asked])
        for row, i in zip(scores, asked, strict=True):
            q = questions[i]
            ranked = (p for p in np.argsort(-row, kind="stable").tolist()
                      if paragraphs[p] != q.context and not answers_in(normalised[p], q.answers))
            out += [(i, paragraphs[p]) for p in itertools.islice(ranked, n)]
    return out


def length_batches(lengths: np.ndarray, size: int, seed: int) -> list[np.ndarray]:
    """One epoch's batches: a shuffled order cut into pools of 50 batches, each pool sorted by length and cut into
    batches (similar lengths pad little), the batches shuffled. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    pool = size * 50
    batches = []
    for i in range(0, len(order), pool):
        chunk = order[i:i + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[j:j + size] for j in range(0, len(chunk), size)]
    rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


def reader_kl(start: torch.Tensor, end: torch.Tensor, teacher: tuple[torch.Tensor, torch.Tensor],
              valid: torch.Tensor, flags: torch.Tensor, cfg: ReaderTrainConfig,
              max_answer_tokens: int) -> torch.Tensor:
    """The distillation term of a batch of windows: the student's (B, T) start and end logits against the teacher's
    (NEG_INF where it read no passage token), over the window's tokens (``valid``, (B, T)). ``kl_level`` tokens: the
    mean KL of the start and of the end distributions; spans: the KL of the distribution over the spans reading
    decodes an answer from (``PassageReader.read``): whole words (``flags``, the windows' (B, T) ``Windows.flags``:
    from a word's first token to a word's last) of at most ``max_answer_tokens`` tokens (``trainer.losses.span_kl``)."""
    t_start, t_end = teacher
    if cfg.kl_level == "spans":
        return span_kl(start, end, teacher, valid & (flags & FLAG_START > 0), valid & (flags & FLAG_END > 0),
                       max_answer_tokens, cfg.kl_temperature)
    valid = valid & (t_start > NEG_INF / 2)
    return (masked_kl(start, t_start, valid, cfg.kl_temperature) + masked_kl(end, t_end, valid, cfg.kl_temperature)) / 2


def init_from(model: ReaderModel, path: Path) -> None:
    """A reader's weights into ``model``: the fp32 master weights when ``path`` is a run's checkpoint, else the
    shipped (fp16) ones. A resumed run's own checkpoint then replaces them."""
    check_weights(path / READER_WEIGHTS_NAME)
    model.load_weights(path / READER_WEIGHTS_NAME)
    state = path / STATE
    if state.is_file():
        master = read_state(state).get("master")
        if master:
            model.load_state_dict(master, strict=False)
    log.info("initialised from the reader at %s", path)


def reader_questions(cfg: ReaderTrainConfig, data: list[dict]) -> list:
    """The questions a reader trains on: the answered ones (``trainer.data.answered``) of the articles neither held
    out nor reserved (their ``doc_index`` indexes ``data``; a fixed sample with ``limit_questions``)."""
    kept_out = [cfg.holdout] + ([cfg.reserved] if cfg.reserved is not None else [])
    questions = answered(training_questions(cfg.train, data, lambda i: not any(h.held(i) for h in kept_out),
                                            "held out or reserved by --reserve-offset" if cfg.reserved else "held out"),
                         cfg.train)
    if not questions:
        raise ValueError(f"{cfg.train}: no trainable questions in the training articles (none has an answer whose "
                         "answer_start points at its text)")
    if cfg.limit_questions:
        questions = random.Random(cfg.seed).sample(questions, min(cfg.limit_questions, len(questions)))
    return questions


# what a resumed reader run must keep: its data, its model, its optimiser and its loss (the resumed optimiser and
# schedule keep the first run's learning rate whatever is asked; the others would change the run midway, or, for the
# model's shape, fail to load its checkpoint). The length of the run (--epochs, --max-steps) may change. Its questions
# are checked as questions (``check_resume_data``), not by the training file's name: the same file moved resumes, an
# edited one is refused (a checkpoint written before the questions were recorded is checked by the file's name).
RECIPE = ("holdout_every", "holdout_offset", "seed", "backbone", "init", "max_len", "stride", "max_query_len",
          "max_answer_tokens", "batch_size", "lr", "warmup", "weight_decay", "limit_questions", "reserve_offset",
          "teacher", "lambda_kl", "kl_temperature", "kl_level", "negatives")


def trained_pairs(questions: list, negatives: list[tuple[int, str]], train: str) -> Trained:
    """What a reader's checkpoint records of its training (``trainer.rundir.check_resume_data``): its questions, the
    training file, and the digest of each (question, gold passage, answer) pair and each negative passage."""
    pairs = ([q.question, q.context, q.answer_starts[0], q.answers[0]] for q in questions)
    return ([q.question for q in questions], str(train), examples_digest(itertools.chain(pairs, negatives)))


def train_reader(cfg: ReaderTrainConfig) -> dict[str, Any]:
    """Train (or resume) the reader into ``cfg.out``; the reader is ``OUT/last``. Returns the run's summary."""
    check_teacher(cfg)  # before any work
    out = Path(cfg.out)
    with run_lock(out):  # makes out
        return _train(cfg, out)


def _train(cfg: ReaderTrainConfig, out: Path) -> dict[str, Any]:
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    device = pick_device(cfg.device)
    reader_config = cfg.build()
    check_run_kind(out, "reader")  # a phrase model's checkpoint would be resumed as a reader
    recover_checkpoint(out)
    if (point := resume_point(out)) is not None:  # a damaged checkpoint is found before the data is tokenised
        check_checkpoint(point, READER_WEIGHTS_NAME, out)
    settings = dataclasses.asdict(cfg)
    unrecorded = point is not None and trained_questions(point) is None
    check_same_recipe(out, settings, RECIPE + (("train",) if unrecorded else ()), unused=left_unused(cfg))
    data = load_training(cfg.train)
    held = [a for i, a in enumerate(data) if cfg.holdout.held(i)]
    questions = reader_questions(cfg, data)
    precision = pick_precision(cfg.precision, device)  # (it may log its pick: once the inputs are known good)
    model = ReaderModel(reader_config).to(device)
    if cfg.init is not None:
        init_from(model, resolve_reader(cfg.init))
    tokenizer = load_reader_tokenizer(reader_config)
    negatives = negative_passages(data, questions, cfg.negatives) if cfg.negatives else []
    trained = trained_pairs(questions, negatives, cfg.train)
    check_resume_data(out, trained)  # before the windows are tokenised or the run's settings written
    log.info("tokenising %d training questions and %d negative passages", len(questions), len(negatives))
    windows, targets = training_windows(tokenizer, reader_config, questions, negatives)
    lengths = np.array([len(ids) for ids in windows.ids])
    steps_per_epoch = math.ceil(len(lengths) / cfg.batch_size)
    total = cfg.max_steps or max(1, int(steps_per_epoch * cfg.epochs))
    write_json_atomic(out / TRAIN_CONFIG, settings)
    params = [p for p in model.parameters() if p.requires_grad]
    opt, sched, step, state = optimizer_and_resume(model, params, cfg.lr, cfg.weight_decay, cfg.warmup, total, out)
    if "master" in state:  # the fp32 weights (the checkpoint's weights file is fp16, the reader as shipped)
        model.load_state_dict(state["master"], strict=False)
    teacher, taught = None, []
    if cfg.teacher:  # a stronger reader's logits of every training window, computed once
        taught = reader_windows(questions, windows)
        teacher = teacher_cache(cfg, [w for w in taught if w is not None], device, precision)
    pad_id = int(tokenizer.pad_token_id or 0)
    # a resumed run's summary covers the whole run: the parts before it kept their time and windows in the state
    before = RunSoFar.of(state, step if step < total else None)
    progress = Progress("reader", total, step, cfg.progress, before, rate="windows_s")
    order, order_epoch = [], -1
    model.train()
    fast_dropout(model, device)  # on the CPU: the same dropout, its masks drawn 2.4x faster (trainer.dropout)
    set_rng_state(state.get("rng"), device)  # a resumed run draws the dropout masks the uninterrupted run would have

    def card(snapshot: bool = False) -> str:  # the model card of the step now, for OUT/last or a snapshot
        return model_card(cfg, loop_summary(progress.run(), step, len(lengths), len(questions), precision, str(device),
                                            1, rate="windows_per_second"), total, snapshot)

    with StopAfterStep(total, after_loop(out, bool(cfg.val_questions))) as stop:  # Ctrl-C: a clean stop
        while step < total:
            epoch, pos = divmod(step, steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = length_batches(lengths, cfg.batch_size, cfg.seed + epoch), epoch
            batch = order[pos]
            ids = pad_batch([windows.ids[w] for w in batch], pad_id).to(device)
            mask = pad_batch([np.ones(lengths[w], np.int64) for w in batch], 0).to(device)
            types = None if windows.type_ids is None else pad_batch([windows.type_ids[w] for w in batch], 0).to(device)
            gold = torch.from_numpy(targets[batch]).to(device)
            with autocast(device, precision):
                start, end = model(ids, mask, types)
            start = start.masked_fill(mask == 0, -1e4)
            end = end.masked_fill(mask == 0, -1e4)
            loss = (torch.nn.functional.cross_entropy(start, gold[:, 0]) +
                    torch.nn.functional.cross_entropy(end, gold[:, 1])) / 2
            if teacher is not None:
                t_start, t_end = (t.to(device) for t in reader_teacher_tensors(
                    [taught[w] for w in batch], [windows.offsets[w] for w in batch], teacher, ids.shape[1]))
                flags = pad_batch([windows.flags[w] for w in batch], 0).to(device)
                loss = loss + cfg.lambda_kl * reader_kl(start, end, (t_start, t_end), mask > 0, flags, cfg,
                                                        reader_config.max_answer_tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            progress.step_done(loss.item(), len(batch))
            stopping = stop.requested  # read once: the save below is the one the stop relies on
            if step % cfg.checkpoint_every == 0 or step == total or stopping:
                master = {n: t.detach().cpu().clone() for n, t in model.saved_state().items()}
                saved = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": step, "master": master,
                         "rng": rng_state(device), **progress.run().state()}
                save_checkpoint(model, out, "last", saved, trained, card())  # type: ignore[arg-type] (any model with save())
                checkpoint_saved(out)
                progress.saved(step, out / "last")
            if cfg.snapshot_every and step % cfg.snapshot_every == 0:
                save_snapshot(model, out, step, trained, card(snapshot=True))
            if stopping:  # Ctrl-C or SIGTERM: this step finished and its checkpoint is saved
                stop.stop_here(step, out / "last")
    progress.close()
    summary: dict[str, Any] = {
        **run_data(cfg), "reader": str(out / "last"), "config": reader_config.__dict__, "total_steps": total,
        "negative_passages": len(negatives), **loop_summary(progress.run(), step, len(lengths), len(questions),
                                                            precision, str(device), 1, rate="windows_per_second"),
        "batch_size": cfg.batch_size, "lr": cfg.lr, "teacher": cfg.teacher, "lambda_kl": cfg.lambda_kl,
    }
    if cfg.val_questions:
        model.eval()
        val = squad_questions(held)
        val = random.Random(0).sample(val, min(cfg.val_questions, len(val)))
        reader = PassageReader(model, tokenizer, precision=precision)
        with after_training(step, out / "last", after_loop(out, True)):
            summary["validation"] = reading_comprehension(reader, val, progress=cfg.progress)
        write_validated_card(cfg, summary)
    write_json_atomic(out / SUMMARY, summary)
    return summary
