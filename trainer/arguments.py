"""The options of the training jobs, each declared once: a dataclass field with its default and help text.

    spanseek train phrase --help

The `spanseek train` flags are generated from these classes (core.options), as tevatron's and Hugging Face's
argument dataclasses are: a new option is one line here. Shared options live in base classes: ``JobOptions`` (data,
output, the held-out split, hardware) under every job, ``TrainingOptions`` (schedule, batches, negatives) under
joint training (``TrainConfig``) and query-side fine-tuning (``QsftConfig``), ``FrozenModelJob`` under the jobs
that fit something on a frozen model (``FilterConfig``, ``LengthBiasConfig``). This module imports no torch, so
the command line starts fast.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from spanseek.core.backbones import file_not_model
from spanseek.core.config import EncoderConfig, LoraSettings, QuestionMode, ReaderConfig
from spanseek.core.holdout import Holdout
from spanseek.core.options import option
from spanseek.trainer import unused
from spanseek.trainer.unused import Unused, check_teacher_weight, refuse_unused

Precision = Literal["auto", "fp32", "bf16"]


def lora_settings(r: int, alpha: int | None = None) -> LoraSettings:
    """LoRA adapters of rank r; alpha defaults to 2 r (the scale alpha / r stays 2 across ranks)."""
    return LoraSettings(r=r, alpha=alpha or 2 * r)


def int_set(text: str) -> tuple[int, ...]:
    """The distinct integers of a comma-separated list, ascending; () when it is not one."""
    try:
        return tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        return ()


def check(ok: bool, flag: str, want: str, value: object) -> None:
    """ValueError naming the flag when an option's value is out of range (raised when the config is built, before
    any data or model is loaded): ``--batch-windows must be an integer >= 1, got 0``."""
    if not ok:
        raise ValueError(f"{flag} must be {want}, got {value}")


def check_model(flag: str, ref: str | None) -> None:
    """A model flag's value is a model directory or a bundled model's name: a file (weights, a config) is named so."""
    if ref is not None and os.path.isfile(ref):
        raise file_not_model(f"{flag} {ref}")


def positive(value: float) -> bool:
    """A finite number > 0 (NaN and infinity are not)."""
    return math.isfinite(value) and value > 0


def non_negative(value: float) -> bool:
    """A finite number >= 0."""
    return math.isfinite(value) and value >= 0


def check_schedule(o: TrainingOptions | ReaderTrainConfig) -> None:
    """The checks of the schedule options every step-wise training job (phrase, qsft, reader) has, naming the flag."""
    check(positive(o.epochs), "--epochs", "a number > 0", o.epochs)
    # None (not 0) is "unset": the loop reads `max_steps or epochs`, so 0 would silently mean --epochs
    check(o.max_steps is None or o.max_steps >= 1, "--max-steps", "an integer >= 1 (leave it out to run --epochs)",
          o.max_steps)
    check(positive(o.lr), "--lr", "a number > 0", o.lr)
    check(math.isfinite(o.warmup) and 0 <= o.warmup < 1, "--warmup", "in [0, 1) (a fraction of the steps)", o.warmup)
    check(non_negative(o.weight_decay), "--weight-decay", "a number >= 0", o.weight_decay)
    check(o.limit_questions is None or o.limit_questions >= 1, "--limit-questions", "an integer >= 1 (leave it out "
          "to train on every question)", o.limit_questions)
    check(o.checkpoint_every >= 1, "--checkpoint-every", "an integer >= 1", o.checkpoint_every)
    check(o.snapshot_every >= 0, "--snapshot-every", "an integer >= 0 (0: off)", o.snapshot_every)
    check(o.val_questions >= 0, "--val-questions", "an integer >= 0", o.val_questions)


@dataclass(frozen=True, kw_only=True)
class EncoderOptions:
    """Encoder of a new model (with --init-from, the starting model's encoder is kept)."""

    backbone: str = option(EncoderConfig.backbone,
                           "transformer to start from: a local directory, a Hugging Face id or package:NAME")
    question_mode: QuestionMode = option(EncoderConfig.question_mode, "separate: two question encoders (start, "
                                         "end); shared: one question encoder with two heads (half the query cost)")
    full: bool = option(False, "full fine-tuning instead of LoRA adapters")
    lora_r: int = option(LoraSettings.r, "rank of the LoRA adapters (alpha = 2 r)")
    max_answer_tokens: int = option(EncoderConfig.max_answer_tokens, "longest answer phrase in tokens")
    max_seq_len: int = option(EncoderConfig.max_seq_len, "passage window in tokens, [CLS] and [SEP] included")
    stride: int = option(EncoderConfig.stride, "overlap of consecutive passage windows in tokens")

    def __post_init__(self) -> None:
        check(self.lora_r >= 1, "--lora-r", "an integer >= 1", self.lora_r)
        check(self.max_answer_tokens >= 1, "--max-answer-tokens", "an integer >= 1", self.max_answer_tokens)
        check(self.max_seq_len >= 3, "--max-seq-len", "an integer >= 3 ([CLS], [SEP] and a token)", self.max_seq_len)
        # a negative stride would leave tokens between windows that no window encodes
        check(0 <= self.stride < self.max_seq_len - 2, "--stride", f"in [0, --max-seq-len - 2) = [0, "
              f"{self.max_seq_len - 2})", self.stride)

    def build(self) -> EncoderConfig:
        return EncoderConfig(backbone=self.backbone, question_mode=self.question_mode,
                             max_answer_tokens=self.max_answer_tokens, max_seq_len=self.max_seq_len,
                             stride=self.stride, weights="full" if self.full else "lora",
                             lora=lora_settings(self.lora_r))


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """Data, output, held-out split and hardware."""

    train: str = option(help="SQuAD-format training file (.json or .json.gz); its held-out articles are never "
                        "trained on")
    out: str = option(help="run directory")
    holdout_every: int = option(Holdout.every, "every N-th article of the training file is held out (validation)")
    holdout_offset: int = option(Holdout.offset, "index of the first held-out article")
    seed: int = option(0, "random seed (initial weights, batch order, samples)")
    device: str = option("auto", "cpu, cuda, cuda:N or auto")
    precision: Precision = option("auto", "auto: bf16 autocast where the device supports it, else fp32")
    progress: bool = option(True, "show progress bars")

    def __post_init__(self) -> None:
        check(self.holdout_every >= 1, "--holdout-every", "an integer >= 1", self.holdout_every)
        check(0 <= self.holdout_offset < self.holdout_every, "--holdout-offset",
              f"in [0, --holdout-every) = [0, {self.holdout_every})", self.holdout_offset)
        check_model("--model", getattr(self, "model", None))  # (the jobs on a phrase model)

    @property
    def holdout(self) -> Holdout:
        return Holdout(self.holdout_every, self.holdout_offset)


@dataclass(frozen=True, kw_only=True)
class FrozenModelJob(JobOptions):
    """A job that fits something on top of a frozen trained model (the token filter head, the span length bias)."""

    model: str = option(help="trained phrase model (a directory, default or base); its encoders stay frozen")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a data-parallel run (trainer.distributed); a plain run is rank 0 of 1."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class LossConfig:
    """The loss: its kind and the weight of each group of negatives."""

    kind: Literal["unified", "two_term"] = option(
        "unified", "unified: one softmax of the gold against every group of negatives; two_term: DensePhrases' "
        "in-passage softmax plus a separate in-batch term", flag="--loss")
    lambda_inb: float = option(256.0, "weight of in-batch negatives (and of pre-batch ones unless --lambda-pre)")
    lambda_pre: float | None = option(None, "weight of pre-batch negatives (default: the in-batch weight)")
    lambda_hard: float = option(1.0, "weight of hard negatives (unified loss)")
    lambda_neg: float = option(4.0, "two_term loss: weight of its in-batch term")
    lambda_span: float = option(0.0, "weight of the span-level in-passage term (one softmax over valid spans; 0 = off)")
    lambda_kl: float = option(0.0, "weight of the distillation term (KL from the --teacher reader's start/end "
                                   "distributions; DensePhrases used 4 on SQuAD; 0 = off)")
    kl_temperature: float = option(1.0, "temperature of both distributions in the distillation term")
    kl_level: Literal["tokens", "spans"] = option(
        "tokens", "what the distillation term matches: tokens: the start and the end distributions over the window's "
        "tokens, apart (DensePhrases Eq. 7); spans: the distribution over the window's valid spans (start plus end "
        "logit), the one reading comprehension decodes")

    def __post_init__(self) -> None:
        if self.kind not in ("unified", "two_term"):
            raise ValueError(f"loss kind must be 'unified' or 'two_term', got {self.kind!r}")
        check(self.kl_level in ("tokens", "spans"), "--kl-level", "tokens or spans", self.kl_level)
        check(math.isfinite(self.kl_temperature) and self.kl_temperature > 0, "--kl-temperature", "a number > 0",
              self.kl_temperature)
        for name in ("lambda_inb", "lambda_pre", "lambda_hard", "lambda_neg", "lambda_span", "lambda_kl"):
            value = getattr(self, name)  # the loss is built in code as often as from flags: name both
            flag = f"--{name.replace('_', '-')} ({name})"
            check(value is None or non_negative(value), flag, "a number >= 0 (0: off)", value)

    @property
    def pre_weight(self) -> float:
        """The weight of pre-batch negatives: ``lambda_pre``, or the in-batch weight when it is not set."""
        return self.lambda_inb if self.lambda_pre is None else self.lambda_pre

    def resolved(self) -> LossConfig:
        """This loss with ``lambda_pre`` set to the weight it stands for (what a run's saved config records)."""
        return replace(self, lambda_pre=self.pre_weight)


@dataclass(frozen=True, kw_only=True)
class TrainingOptions(JobOptions):
    """Schedule, batches and negatives."""

    loss: LossConfig = option(factory=LossConfig, help="the loss (one flag per field of LossConfig)")
    epochs: float = option(1.0, "passes over the training windows")
    max_steps: int | None = option(None, "stop after this many steps (overrides --epochs)")
    stop_after: int | None = option(None, "end the run at this step, keeping the full run's schedule (comparisons)")
    batch_windows: int = option(24, "passage windows per step, each with all of its questions")
    lr: float = option(1e-3, "peak learning rate (LoRA and heads; about 5e-5 for full fine-tuning)")
    warmup: float = option(0.05, "fraction of steps with a linear warm-up of the learning rate")
    weight_decay: float = option(0.0, "AdamW weight decay")
    prebatch: int = option(2, "preceding batches whose gold phrases are negatives (0 = off)")
    prebatch_warmup: float = option(0.1, "fraction of steps before pre-batch negatives switch on")
    hard_negatives: str | None = option(None, "JSONL from `spanseek train mine` (unified loss)")
    hard_per_batch: int = option(8, "hard passages per step, shared by the batch's questions")
    teacher: str | None = option(None, "a reader (directory or `default`) to distil from (--lambda-kl > 0): its "
                                       "logits are computed once, before the first step, into the teacher cache; "
                                       "or a phrase model (`base`, `phrase:DIR`), or a complete teacher cache, "
                                       "whose logits stand for its teacher; several, comma-separated, teach the mean "
                                       "of their log-probabilities")
    teacher_cache: str | None = option(None, "where the teacher's logits are kept (default: OUT/teacher-cache, "
                                             "OUT/teacher-cache-N for the N-th of several; comma-separated, one a "
                                             "teacher that is not a cache); a killed fill resumes")
    limit_questions: int | None = option(None, "train on a fixed sample of this many questions")
    checkpoint_every: int = option(100, "save OUT/last (weights and optimizer state) every N steps")
    snapshot_every: int = option(0, "also keep a model copy every N steps in OUT/snapshots (0 = off)")
    val_questions: int = option(1000, "held-out questions evaluated at the end (reading comprehension and open)")

    UNUSED: ClassVar[tuple[Unused, ...]] = unused.TRAINING  # the flags a run may leave unused

    def __post_init__(self) -> None:
        super().__post_init__()
        check_schedule(self)
        check(self.stop_after is None or self.stop_after >= 1, "--stop-after", "an integer >= 1 (leave it out to "
              "run the whole schedule)", self.stop_after)
        check(self.batch_windows >= 1, "--batch-windows", "an integer >= 1", self.batch_windows)
        check(self.prebatch >= 0, "--prebatch", "an integer >= 0 (0: off)", self.prebatch)
        check(math.isfinite(self.prebatch_warmup) and 0 <= self.prebatch_warmup <= 1, "--prebatch-warmup",
              "in [0, 1] (a fraction of the steps)", self.prebatch_warmup)
        check(self.hard_per_batch >= 0, "--hard-per-batch", "an integer >= 0", self.hard_per_batch)
        check_teacher_weight(self.teacher, self.teacher_cache, self.loss)
        refuse_unused(self, unused.TRAINING)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(TrainingOptions):
    """Joint training: the starting model and hard negatives from a stale cache."""

    encoder: EncoderConfig = option(factory=EncoderConfig, options=EncoderOptions,
                                    help="the encoder of a new model (flags: EncoderOptions)")
    init_from: str | None = option(None, "start from a trained model's weights (a new optimizer and schedule)")
    widen_lora: int | None = option(None, "with --init-from: widen its LoRA adapters to rank R first (same outputs "
                                    "at step 0)", metavar="R")
    stale_cache: str | None = option(None, "read hard passages' vectors from this phrase cache of the --init-from "
                                     "model (filled if missing) instead of encoding them every step")
    corrector: bool = option(True, "with --stale-cache: correct the stale vectors with a target corrector trained "
                             "alongside")
    corrector_lr: float = option(1e-3, "learning rate of the target corrector")
    dist: DistInfo = option(factory=DistInfo, cli=False, help="data-parallel rank and world size (set by the CLI "
                            "from torchrun's environment)")

    UNUSED: ClassVar[tuple[Unused, ...]] = unused.PHRASE  # the flags a run may leave unused

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.widen_lora is None or self.widen_lora >= 1, "--widen-lora", "an integer >= 1", self.widen_lora)
        check_model("--init-from", self.init_from)
        check(positive(self.corrector_lr), "--corrector-lr", "a number > 0", self.corrector_lr)
        refuse_unused(self, unused.PHRASE)


@dataclass(frozen=True, kw_only=True)
class QsftConfig(TrainingOptions):
    """Query-side fine-tuning: the model whose question side is tuned, and its phrase cache."""

    model: str = option(help="trained phrase model (a directory, default or base); its phrase encoder stays as it is")
    cache: str | None = option(None, "phrase-vector cache directory (default OUT/phrase-cache)")
    val_index: str | None = option(None, "index of the held-out articles built with --model (else one is built)")
    from_index: str | None = option(None, "train against the vectors of this index, built with --model over "
                                    "articles of the training file, as its searches score them (its fine store "
                                    "decoded, its token filter applied): quantisation-aware fine-tuning for a "
                                    "compressed index; nothing is encoded")
    # defaults: the better of the two settings tried on the default model (qsft-b in its card); a larger in-batch
    # weight (32) traded reading comprehension for open retrieval. The phrase vectors are exact (cached from a
    # frozen encoder), so pre-batch negatives need no warm-up and hard passages cost little.
    loss: LossConfig = option(factory=lambda: LossConfig(lambda_inb=4.0))
    batch_windows: int = 32
    prebatch: int = 4
    prebatch_warmup: float = 0.0
    lr: float = 2e-4
    checkpoint_every: int = 200


@dataclass(frozen=True, kw_only=True)
class FilterConfig(FrozenModelJob):
    """The token filter head: windows sampled and its training."""

    out: str = option(help="model directory to write, with the filter head")
    train_windows: int = option(3000, "training windows sampled for the head's training tokens")
    val_windows: int = option(600, "held-out windows sampled for its validation (AUC-PR)")
    hidden: int = option(512, "width of the head's hidden layer (0: a linear head)")
    epochs: int = option(4, "passes over the training tokens")
    lr: float = option(1e-3, "Adam learning rate of the head")
    batch_tokens: int = option(4096, "tokens per training step")
    batch_windows: int = option(32, "windows per batch when computing the frozen token vectors")
    from_index: str | None = option(None, "read the token vectors from this index, built with the model over "
                                    "articles of the training file (document ids = article numbers), instead "
                                    "of encoding windows: every token of its paragraphs is used")

    UNUSED: ClassVar[tuple[Unused, ...]] = unused.FILTER  # the flags a run may leave unused

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.hidden >= 0, "--hidden", "an integer >= 0 (0: a linear head)", self.hidden)
        for flag, value in (("--train-windows", self.train_windows), ("--val-windows", self.val_windows),
                            ("--epochs", self.epochs), ("--batch-tokens", self.batch_tokens),
                            ("--batch-windows", self.batch_windows)):
            check(value >= 1, flag, "an integer >= 1", value)
        check(positive(self.lr), "--lr", "a number > 0", self.lr)
        refuse_unused(self, unused.FILTER)


@dataclass(frozen=True, kw_only=True)
class LengthBiasConfig(FrozenModelJob):
    """The length-bias fit: questions sampled."""

    train: str = option(help="SQuAD-format training file (its held-out articles are only reported on)")
    out: str = option(help="model directory to write (the model's config with the bias; its weights copied)")
    questions: int = option(12000, "training questions sampled for the fit")
    val_questions: int = option(2000, "held-out questions whose likelihood is reported")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.questions >= 1, "--questions", "an integer >= 1 (training questions to fit on)", self.questions)
        check(self.val_questions >= 0, "--val-questions", "an integer >= 0", self.val_questions)


@dataclass(frozen=True, kw_only=True)
class ReaderLengthBiasConfig(JobOptions):
    """`spanseek train reader-length-bias`: the reader's span length prior, fitted on the articles it never trained
    on (``spanseek train reader --reserve-offset``)."""

    reader: str = option(help="reader directory (from `spanseek train reader`, e.g. RUN/last) or default")
    out: str = option(help="reader directory to write: the reader's config with the prior, its weights copied")
    articles_offset: int = option(12, "fit on articles i with i % holdout-every == this (the reader's --reserve-offset)")
    questions: int = option(20000, "questions of those articles sampled for the fit (all of them when fewer)")
    val_questions: int = option(2000, "held-out questions whose likelihood is reported")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.articles_offset < self.holdout_every and self.articles_offset != self.holdout_offset,
              "--articles-offset", "in [0, --holdout-every), not --holdout-offset", self.articles_offset)
        check(self.questions >= 1, "--questions", "an integer >= 1", self.questions)
        check(self.val_questions >= 0, "--val-questions", "an integer >= 0", self.val_questions)


@dataclass(frozen=True, kw_only=True)
class ReaderTrainConfig(JobOptions):
    """`spanseek train reader`: the cross-attention reader (core.reader), a full fine-tune of the backbone with its
    word embeddings frozen."""

    backbone: str = option(ReaderConfig.backbone, "backbone: package:NAME, a model directory or a hub id")
    init: str | None = option(None, "start from this reader's weights instead of the bare backbone (a reader "
                                    "directory, `default`, or a run's OUT/last); its config replaces the flags above")
    max_len: int = option(ReaderConfig.max_len, "(question, passage) window in tokens, special tokens included")
    stride: int = option(ReaderConfig.stride, "overlap of a long passage's consecutive windows in tokens")
    max_query_len: int = option(ReaderConfig.max_query_len, "question tokens kept (longer questions are truncated)")
    max_answer_tokens: int = option(ReaderConfig.max_answer_tokens, "longest answer span in tokens")
    epochs: float = option(1.0, "passes over the training windows")
    max_steps: int | None = option(None, "stop after this many steps (overrides --epochs)")
    batch_size: int = option(32, "windows per step")
    lr: float = option(1e-4, "peak learning rate")
    warmup: float = option(0.1, "fraction of steps with a linear warm-up of the learning rate")
    weight_decay: float = option(0.01, "AdamW weight decay")
    limit_questions: int | None = option(None, "train on a fixed sample of this many questions")
    checkpoint_every: int = option(100, "save OUT/last (weights and optimizer state) every N steps")
    snapshot_every: int = option(0, "also keep the reader every N steps as OUT/snapshots/step-N (for `spanseek "
                                    "train average`; 0 = off)")
    val_questions: int = option(1000, "held-out questions read at the end (reading-comprehension EM/F1); 0 = none")
    reserve_offset: int | None = option(12, "articles i with i % holdout-every == this are kept out of training too: "
                                        "reading at search time is fitted on them (`spanseek train fit-reading`)")
    teacher: str | None = option(None, "a stronger reader (directory) to distil from (--lambda-kl > 0): its logits "
                                       "of every training window are computed once, before the first step, into the "
                                       "teacher cache; or a complete teacher cache, whose logits stand for it; "
                                       "several, comma-separated, teach the mean of their log-probabilities")
    teacher_cache: str | None = option(None, "where the teacher's logits are kept (default: OUT/teacher-cache, "
                                             "OUT/teacher-cache-N for the N-th of several); a killed fill resumes")
    lambda_kl: float = option(0.0, "weight of the distillation term: KL from the --teacher's distributions over "
                                   "each window's passage tokens, or spans (--kl-level) (0 = off)")
    kl_temperature: float = option(1.0, "temperature of both distributions in the distillation term")
    kl_level: Literal["tokens", "spans"] = option(
        "tokens", "what the distillation term matches: tokens: the start and the end distributions over the window's "
        "tokens, apart (DensePhrases Eq. 7); spans: the distribution over the window's valid spans (start plus end "
        "logit), the one reading comprehension decodes")
    negatives: int = option(0, "per question, also train on this many paragraphs of its article without its answer "
                               "(those BM25 ranks highest for it), each window's target [CLS]: the reader learns "
                               "which passages do not answer, as reading the top passages at search time needs (a "
                               "--teacher teaches the gold passages' windows only)")

    UNUSED: ClassVar[tuple[Unused, ...]] = unused.READER  # the flags a run may leave unused

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.reserve_offset is None or (0 <= self.reserve_offset < self.holdout_every
                                              and self.reserve_offset != self.holdout_offset),
              "--reserve-offset", "in [0, --holdout-every), not --holdout-offset", self.reserve_offset)
        check(self.negatives >= 0, "--negatives", "an integer >= 0", self.negatives)
        check(self.batch_size >= 1, "--batch-size", "an integer >= 1", self.batch_size)
        check_schedule(self)
        if self.init is None:  # (with --init, the reader's own config replaces these)
            check(self.max_query_len >= 1, "--max-query-len", "an integer >= 1", self.max_query_len)
            check(self.stride >= 0, "--stride", "an integer >= 0", self.stride)
            check(self.max_answer_tokens >= 1, "--max-answer-tokens", "an integer >= 1", self.max_answer_tokens)
            least = self.max_query_len + self.stride + 8  # the question, the overlap and room for the passage
            check(self.max_len >= least, "--max-len", f"an integer >= --max-query-len + --stride + 8 = {least}",
                  self.max_len)
        check(non_negative(self.lambda_kl), "--lambda-kl", "a number >= 0", self.lambda_kl)
        check_teacher_weight(self.teacher, self.teacher_cache, self)
        refuse_unused(self, unused.READER)
        check(math.isfinite(self.kl_temperature) and self.kl_temperature > 0, "--kl-temperature", "a number > 0",
              self.kl_temperature)

    @property
    def reserved(self) -> Holdout | None:
        """The articles kept out of the reader's training for fitting reading at search time."""
        return None if self.reserve_offset is None else Holdout(self.holdout_every, self.reserve_offset)

    def build(self) -> ReaderConfig:
        if self.init is not None:
            from spanseek.core.reader import READER_CONFIG_NAME, resolve_reader

            # new weights need their own length prior (`spanseek train reader-length-bias`)
            return replace(ReaderConfig.load(resolve_reader(self.init) / READER_CONFIG_NAME), length_bias=())
        return ReaderConfig(backbone=self.backbone, max_len=self.max_len, stride=self.stride,
                            max_query_len=self.max_query_len, max_answer_tokens=self.max_answer_tokens)


@dataclass(frozen=True, kw_only=True)
class FitReadingConfig(JobOptions):
    """`spanseek train fit-reading`: how read spans combine with retrieval (core.reading), fitted on training
    articles the reader never trained on (``spanseek train reader --reserve-offset``)."""

    out: str = option(help="reader directory to write reading.json into (usually the --reader itself)")
    reader: str = option(help="reader directory (from `spanseek train reader`, e.g. RUN/last) or default")
    model: str = option("default", "phrase model that retrieves the passages read")
    articles_offset: int = option(12, "fit on articles i with i % holdout-every == this (the reader's --reserve-offset)")
    questions: int = option(2000, "questions of those articles sampled for the fit")
    read_passages: str = option("1,2,3,5,8", "passages read per question to choose from (comma-separated): the "
                                "fewest whose phrase EM@1 is within --tolerance of the best is the default")
    tolerance: float = option(0.5, "EM@1 points a smaller read_passages may lose to the best and still be chosen")
    default_passages: int | None = option(None, "passages a request reads by default, one of --read-passages, in place "
                                                "of the fit's choice (which favours fewer where retrieval is easy)")
    spans_per_passage: int = option(3, "best spans kept per passage read")
    window_chars: str = option("0,200", "characters read each side of a unit's best phrase to choose from (comma-"
                               "separated; 0: the whole passage), chosen as --read-passages is, by EM@1 and cost")
    index: str | None = option(None, "index of those articles built with --model (else a temporary one is built)")
    mode: Literal["dense", "lexical", "hybrid"] | None = option(None, "retrieval mode (default: the index's)")
    features: str | None = option(None, "the read features the models use (comma-separated names of "
                                        "core.reading.READ_FEATURES; the others get weight 0); default: all")
    absent_questions: int = option(0, "questions of other training articles read over the fit's index too, all wrong: "
                                   "a read hit's confidence learns to fall where the index holds no answer")
    reads: str | None = option(None, "keep every question's reads in this file, and fit from them without reading "
                                     "again when a rerun with the same questions and reading settings finds it")

    def __post_init__(self) -> None:
        super().__post_init__()
        from spanseek.core.reading import READ_FEATURES

        unknown = sorted(set(self.feature_names) - set(READ_FEATURES))
        check(not unknown and bool(self.feature_names), "--features",
              f"comma-separated names among {', '.join(READ_FEATURES)}", self.features)
        check(0 <= self.articles_offset < self.holdout_every and self.articles_offset != self.holdout_offset,
              "--articles-offset", "in [0, --holdout-every), not --holdout-offset", self.articles_offset)
        check(self.questions >= 10, "--questions", "an integer >= 10", self.questions)
        check(self.absent_questions >= 0, "--absent-questions", "an integer >= 0", self.absent_questions)
        check(self.spans_per_passage >= 1, "--spans-per-passage", "an integer >= 1", self.spans_per_passage)
        check(min(self.depths, default=0) >= 1, "--read-passages", "comma-separated integers >= 1", self.read_passages)
        check(self.default_passages is None or self.default_passages in self.depths, "--default-passages",
              f"one of --read-passages ({self.read_passages})", self.default_passages)
        check(min(self.windows, default=-1) >= 0, "--window-chars", "comma-separated integers >= 0",
              self.window_chars)

    @property
    def depths(self) -> tuple[int, ...]:
        return int_set(self.read_passages)

    @property
    def windows(self) -> tuple[int, ...]:
        return int_set(self.window_chars)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features the fitted models use (all of ``READ_FEATURES`` by default)."""
        from spanseek.core.reading import READ_FEATURES

        if self.features is None:
            return READ_FEATURES
        return tuple(f.strip() for f in self.features.split(",") if f.strip())
