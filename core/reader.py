"""The cross-attention reader: a question and a passage in one sequence, start and end logits over the passage.

An extractive reading-comprehension model (the standard SQuAD head: one linear layer giving a start and an end
logit per token) on the phrase model's backbone. It reads far better than the phrase model, because it sees the
question while it reads, and costs a forward pass per (question, passage) pair: the searcher uses it to read the
top passages of a search when a request asks for it (``read``), and the trainer as the teacher of distillation.

A reader directory holds ``reader_config.json`` (the ReaderConfig) and ``weights.safetensors``: every weight but
the word embeddings (frozen in training, so they come from the backbone package), stored in fp16, so a reader on
MiniLM-L6 is about 22 MB. ``resolve_reader("default")`` gives the reader shipped in ``core/models/reader``.

    spanseek train reader --out work/reader           # trains one (trainer.reader)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spanseek.core.config import ReaderConfig
from spanseek.core.encoding import autocast, length_passes, model_device, pad_batch
from spanseek.core.io import atomic_dir
from spanseek.core.model import ModelError, load_pretrained, read_weights, save_weights
from spanseek.core.runtime import every_pass
from spanseek.core.spans import ANSWER_CANDIDATES, merge_by_answer
from spanseek.core.text import FLAG_END, FLAG_START, ends_after_marks, prepare_marks

READER_CONFIG_NAME = "reader_config.json"
READER_WEIGHTS_NAME = "weights.safetensors"
MISSING_LOGIT = -1e4  # a token the reader did not read (finite: it survives fp16 and bf16)
DEFAULT_READER_DIR = Path(__file__).parent / "models" / "reader"
# padded tokens per forward pass: windows sorted by length are padded to their batch's longest, so small batches
# waste little (a batch of 64 questions' reads: 10% padding against 28% at 16,384) and ran 1.3x faster on 2 cores
MAX_BATCH_TOKENS = 4096
# on ONNX Runtime (a CPU) passes of a few windows run faster still: a batch of 64 questions' reads (2-core AVX2
# EPYC, medians of 12 alternating) took 5.86 s at 4,096 tokens a pass, 4.97 at 2,048, 4.50 at 1,024, 4.03 at 512
# and 768, 4.09 at 384, 4.30 at 256 (torch on the same CPU: 5.35 at 4,096, 4.87 at 1,024, 4.98 at 512)
ONNX_BATCH_TOKENS = 512
# held around a window's two tokenizer calls: a fast tokenizer keeps its truncation settings on itself, so two
# threads tokenising with the same one at once (a searcher called from several threads) could cut each other's
# windows with the other call's settings
_TOKENIZING = threading.Lock()
FROZEN = "word_embeddings"  # parameters whose name holds this are never trained and never saved


class ReaderModel(nn.Module):
    """Backbone + a linear start/end head over every token: (B, T) ids -> (B, T) start and end logits."""

    def __init__(self, config: ReaderConfig):
        super().__init__()
        from transformers import AutoModel

        self.config = config
        self.backbone = load_pretrained(config.backbone, AutoModel.from_pretrained, add_pooling_layer=False).float()
        hidden = int(getattr(self.backbone, "config").hidden_size)  # noqa: B009 (nn.Module hides its type)
        self.qa_head = nn.Linear(hidden, 2)
        for name, p in self.named_parameters():
            p.requires_grad_(FROZEN not in name)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        logits = self.qa_head(hidden).float()  # (B, T, 2)
        return logits[..., 0], logits[..., 1]

    def saved_state(self) -> dict[str, torch.Tensor]:
        return {n: t for n, t in self.state_dict().items() if FROZEN not in n}

    def save(self, out_dir: str | Path) -> Path:
        """Config + fp16 weights (all but the word embeddings) to ``out_dir``, atomically (``atomic_dir``: a save
        that fails or is stopped leaves ``out_dir`` as it was and no temporary beside it)."""
        state = {n: t.detach().to("cpu", torch.float16).contiguous() for n, t in self.saved_state().items()}
        with atomic_dir(out_dir) as tmp:
            self.config.save(tmp / READER_CONFIG_NAME)
            save_weights(state, tmp / READER_WEIGHTS_NAME)
        return Path(out_dir)

    def load_weights(self, path: str | Path) -> None:
        """A saved reader's weights; ModelError naming the file when they do not fit this config."""
        state = read_weights(path)
        own = self.saved_state()
        if set(state) != set(own):
            odd = sorted(set(state) ^ set(own))
            raise ModelError(f"{path}: weights do not fit this reader config (e.g. {odd[:3]})")
        for name, t in state.items():
            if t.shape != own[name].shape:
                raise ModelError(f"{path}: weight {name} has shape {tuple(t.shape)}, the config needs "
                                 f"{tuple(own[name].shape)}")
        self.load_state_dict({n: t.float() for n, t in state.items()}, strict=False)


def resolve_reader(ref: str | Path, flag: str | None = None) -> Path:
    """``default`` -> the bundled reader; otherwise a reader directory (ModelError when it is not one). ``flag``: the
    command's flag (or setting) that gave ``ref``, which leads the error, ``--reader runs/r: not a reader directory``
    (else ``reader 'runs/r'``)."""
    path = DEFAULT_READER_DIR if str(ref) == "default" else Path(ref)
    given = f"{flag} {ref}" if flag is not None else f"reader {str(ref)!r}"
    if str(path) != str(ref):  # (the bundled one: where it is)
        given += f" ({path})"
    if not (path / READER_CONFIG_NAME).is_file() or not (path / READER_WEIGHTS_NAME).is_file():
        if (path / "last" / READER_CONFIG_NAME).is_file():  # a `train reader` run's directory, as models' are named
            raise ModelError(f"{given}: a training run, not a reader directory; its reader is {path / 'last'}")
        raise ModelError(f"{given}: not a reader directory (it needs {READER_CONFIG_NAME} and {READER_WEIGHTS_NAME}; "
                         "train one with `spanseek train reader`)")
    return path


def load_reader_model(ref: str | Path) -> ReaderModel:
    path = resolve_reader(ref)
    model = ReaderModel(ReaderConfig.load(path / READER_CONFIG_NAME))
    model.load_weights(path / READER_WEIGHTS_NAME)
    return model.eval()


def load_reader_tokenizer(config: ReaderConfig):
    from transformers import AutoTokenizer

    return load_pretrained(config.backbone, AutoTokenizer.from_pretrained, use_fast=True)


# --- windows -------------------------------------------------------------------------------------------------------


@dataclass
class Windows:
    """(question, passage) pairs tokenised into windows.

    ids[w]: token ids of window w; pair[w]: the pair it belongs to; offsets[w]: (T, 2) character offsets into the
    passage, (-1, -1) for tokens outside it (question, special tokens); type_ids[w] where the backbone uses them;
    flags[w]: (T,) uint8, FLAG_START on a passage token that starts a word and FLAG_END on one that ends a word
    (``core.text``, as a passage's tokens in the index are flagged), judged over the whole passage, so a window
    that begins or ends inside a word flags its part of that word as neither.
    """

    ids: list[np.ndarray]
    pair: np.ndarray
    offsets: list[np.ndarray]
    type_ids: list[np.ndarray] | None
    flags: list[np.ndarray]


def make_windows(tokenizer, config: ReaderConfig, questions: list[str], passages: list[str]) -> Windows:
    """Tokenise pairs into windows of at most ``max_len`` tokens, long passages in strided windows. Text that spells
    a special token ("[SEP]", "[CLS]", "[PAD]") is read as text: a question or passage holding one would otherwise
    put a separator or padding token inside the pair."""
    if not questions:
        return Windows([], np.zeros(0, np.int64), [], None, [])
    with _TOKENIZING:
        return _windows(tokenizer, config, questions, passages)


def _windows(tokenizer, config: ReaderConfig, questions: list[str], passages: list[str]) -> Windows:
    """``make_windows``' work, under its lock."""
    limit = config.max_query_len
    q_off = tokenizer(questions, add_special_tokens=False, truncation=True, max_length=limit + 1,
                      return_offsets_mapping=True, split_special_tokens=True)["offset_mapping"]
    # a long question cut where its first token past ``limit`` starts, so the pair budget holds (decoded ids would
    # spell a character the vocabulary lacks, an emoji, as the text "[UNK]"); a character cut into tokens on both
    # sides of the limit (a Hangul syllable's letters) is left out whole, as its text cannot be cut between them
    questions = [q[: off[limit][0]] if len(off) > limit else q for q, off in zip(questions, q_off, strict=True)]
    enc = tokenizer(questions, passages, truncation="only_second", max_length=config.max_len, stride=config.stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=False,
                    split_special_tokens=True)
    uses_types = "token_type_ids" in tokenizer.model_input_names
    ids, offsets, types, words = [], [], [], []
    for w in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(w)
        off = np.array(enc["offset_mapping"][w], dtype=np.int64).reshape(-1, 2)
        outside = np.array([s != 1 for s in seq])
        off[outside] = -1
        ids.append(np.array(enc["input_ids"][w], dtype=np.int64))
        offsets.append(off)
        # the passage's word of each token (numbered over the whole passage, in every window), -1 outside it
        words.append(np.array([-1 if s != 1 or x is None else x for s, x in zip(seq, enc.word_ids(w), strict=True)],
                              dtype=np.int64))
        if uses_types:
            types.append(np.array(enc["token_type_ids"][w], dtype=np.int64))
    pair = np.array(enc["overflow_to_sample_mapping"], dtype=np.int64)
    for p in np.unique(pair).tolist():  # "Zoë" decomposed, not "Zoe", as the whole passage's tokens end
        if not passages[p].isascii():
            mine = np.flatnonzero(pair == p).tolist()
            starts = np.concatenate([offsets[w][(offsets[w][:, 0] >= 0) & (offsets[w][:, 1] > offsets[w][:, 0]), 0]
                                     for w in mine])
            for w in mine:
                offsets[w] = ends_after_marks(passages[p], offsets[w], starts)
    return Windows(ids, pair, offsets, types if uses_types else None, word_flags(pair, offsets, words))


def word_flags(pair: np.ndarray, offsets: list[np.ndarray], words: list[np.ndarray]) -> list[np.ndarray]:
    """Each window's (T,) FLAG_START / FLAG_END flags (``Windows.flags``): a token starts a word where it starts at
    the word's first character, and ends one where it ends at the word's last, the word's characters taken over all
    the pair's windows (``words[w]``: each token's word in its passage, -1 outside it): a window cut after "dia" of
    "dia ##rr ##hea" ends no word there."""
    flags = [np.zeros(len(o), np.uint8) for o in offsets]
    for p in np.unique(pair).tolist():
        mine = np.flatnonzero(pair == p).tolist()
        word = np.concatenate([words[w] for w in mine])
        off = np.concatenate([offsets[w] for w in mine])[word >= 0]
        word = word[word >= 0]
        if not len(word):
            continue
        first = np.full(int(word.max()) + 1, np.iinfo(np.int64).max)
        last = np.full(len(first), -1)
        np.minimum.at(first, word, off[:, 0])
        np.maximum.at(last, word, off[:, 1])
        for w in mine:
            inside = words[w] >= 0
            at = words[w][inside]
            flags[w][inside] = ((offsets[w][inside, 0] == first[at]) * FLAG_START
                                + (offsets[w][inside, 1] == last[at]) * FLAG_END)
    return flags


# --- span decoding -------------------------------------------------------------------------------------------------


def best_spans(start: torch.Tensor, end: torch.Tensor, flags: torch.Tensor, max_tokens: int,
               k: int = 1, length_bias: Sequence[float] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` best spans i <= j < i + max_tokens of each row, from a token that may start a span to one that may
    end it, as ``core.spans.span_scores`` has them: whole words, their length counted in tokens.

    start, end: (B, T) logits; flags: (B, T) integers, FLAG_START where a span may start, FLAG_END where it may end
    (``Windows.flags``); length_bias: added to the score of a span of l + 1 tokens (``ReaderConfig.length_bias``; at
    least ``max_tokens`` entries, or none). Returns (B, k) scores (start[i] + end[j] + length_bias[j - i]), starts
    and ends; rows with fewer than k spans give -inf scores there.
    """
    b, t = start.shape
    width = min(max_tokens, t)
    # band[b, i, l] = start[b, i] + end[b, i + l]: every span of l + 1 tokens from i, (B, T, width)
    end_pad = torch.cat([end, end.new_full((b, width), float("-inf"))], dim=1)
    can_end = torch.cat([flags & FLAG_END > 0, flags.new_zeros((b, width), dtype=torch.bool)], dim=1)
    idx = torch.arange(t, device=start.device)[:, None] + torch.arange(width, device=start.device)[None, :]
    band = start[:, :, None] + end_pad[:, idx]
    if len(length_bias):
        band = band + torch.tensor(length_bias[:width], dtype=band.dtype, device=band.device)
    ok = (flags & FLAG_START > 0)[:, :, None] & can_end[:, idx]
    band = band.masked_fill(~ok, float("-inf")).reshape(b, -1)
    k = min(k, band.shape[1])
    scores, flat = band.topk(k, dim=1)
    starts = torch.div(flat, width, rounding_mode="floor")
    return scores, starts, starts + flat % width


@dataclass(frozen=True)
class ReadSpan:
    """An answer read from a passage: its characters in the passage, text, and reader score (logit sum); ``null``
    is the [CLS] score (start + end logit of "no answer here") of the window it was read in."""

    pair: int
    start: int
    end: int
    text: str
    score: float
    null: float = 0.0


class PassageReader:
    """Reads (question, passage) pairs in batches and gives each pair's best spans.

        reader = PassageReader.load("default")
        spans = reader.read(["who wrote hamlet?"], ["Hamlet is a tragedy by William Shakespeare."])
    """

    def __init__(self, model: ReaderModel, tokenizer, precision: str = "fp32",
                 max_batch_tokens: int | None = None, runtime: str = "torch"):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.precision = precision
        example = {"input_ids": torch.ones((2, 8), dtype=torch.long), "attention_mask": torch.ones((2, 8), dtype=torch.long)}
        if "token_type_ids" in tokenizer.model_input_names:
            example["token_type_ids"] = torch.zeros((2, 8), dtype=torch.long)
        # ``core.runtime``: ``auto`` reads on ONNX Runtime in fp32 on a CPU (1.7x faster for one request's three
        # windows on an AVX2 EPYC, 1.15x for a pass of 4,096 tokens), every pass, also where ``precision`` is bf16
        # (``every_pass``): a pair's logits are then the same bits alone or among any others, in every process;
        # ``torch`` suits a reader being trained
        self.passes = every_pass(runtime, model_device(model), precision, model, example, ("start", "end"))
        self.onnx = self.passes.onnx
        # padded tokens a forward pass (default: by runtime, measured above)
        self.max_batch_tokens = max_batch_tokens or (ONNX_BATCH_TOKENS if self.passes.name == "onnx" else MAX_BATCH_TOKENS)
        prepare_marks()  # here, while a server loads, not in the first request that reads a non-ASCII passage

    @classmethod
    def load(cls, ref: str | Path, device: str | torch.device = "cpu", precision: str = "fp32",
             runtime: str = "auto") -> PassageReader:
        model = load_reader_model(ref).to(device)
        return cls(model, load_reader_tokenizer(model.config), precision=precision, runtime=runtime)

    @torch.inference_mode()
    def logits(self, windows: Windows) -> list[tuple[np.ndarray, np.ndarray]]:
        """(start, end) logits of every window, each (T_w,), batched by length."""
        out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0), np.zeros(0))] * len(windows.ids)
        pad_id = int(self.tokenizer.pad_token_id or 0)
        for batch in length_passes([len(w) for w in windows.ids], self.max_batch_tokens):
            ids = pad_batch([windows.ids[w] for w in batch], pad_id)
            mask = pad_batch([np.ones(len(windows.ids[w]), np.int64) for w in batch], 0)
            types = None if windows.type_ids is None else pad_batch([windows.type_ids[w] for w in batch], 0)
            if self.onnx is not None:
                feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
                if types is not None:
                    feed["token_type_ids"] = types.numpy()
                start, end = self.onnx(**feed)
            else:
                start, end = self._forward(ids, mask, types)
                start, end = start.float().cpu().numpy(), end.float().cpu().numpy()
            for row, w in enumerate(batch):
                n = len(windows.ids[w])
                out[w] = (start[row, :n], end[row, :n])
        return out

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor,
                 types: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, end) logits of a padded pass on torch, at the reader's precision."""
        device = model_device(self.model)
        with autocast(device, self.precision):
            return self.model(ids.to(device), mask.to(device), None if types is None else types.to(device))

    def token_logits(self, questions: list[str], passages: list[str],
                     char_starts: list[np.ndarray]) -> list[np.ndarray]:
        """(n_p, 2) start and end logits of each pair at the tokens the caller cut its passage into, given by their
        first characters ``char_starts[p]`` (another tokenizer's tokens, e.g. the phrase model's): each from the
        reader token that starts at the same character, in the window where it has the most context; -1e4 where
        no reader token starts there (a distillation target masks those)."""
        windows = make_windows(self.tokenizer, self.config, questions, passages)
        out = [np.full((len(c), 2), MISSING_LOGIT, dtype=np.float32) for c in char_starts]
        context = [np.full(len(c), -1, dtype=np.int64) for c in char_starts]
        for w, (start, end) in enumerate(self.logits(windows)):
            p = int(windows.pair[w])
            inside = np.flatnonzero(windows.offsets[w][:, 0] >= 0)
            if not len(inside):
                continue
            chars = windows.offsets[w][inside, 0]
            wanted = np.asarray(char_starts[p])
            at = np.searchsorted(chars, wanted).clip(0, len(chars) - 1)
            hit = chars[at] == wanted
            tok = inside[at]
            ctx = np.minimum(tok - inside[0], inside[-1] - tok)
            better = hit & (ctx > context[p])
            out[p][better, 0], out[p][better, 1] = start[tok[better]], end[tok[better]]
            context[p][better] = ctx[better]
        return out

    def read(self, questions: list[str], passages: list[str], k: int = 1, decode: str = "span",
             max_answer_tokens: int | None = None) -> list[list[ReadSpan]]:
        """The ``k`` best spans of each (question, passage) pair over all its windows, best first; spans of at most
        ``max_answer_tokens`` tokens when given (and fewer than the reader's own limit). A span is whole words, as a
        phrase of the index is: it starts at a word's first token and ends at a word's last (a word being what the
        reader's tokenizer splits text into before its sub-word pieces: "diarrhea", "1410", ","), so a word longer
        than ``max_answer_tokens`` tokens is never read as an answer, nor a part of it.

        ``decode="answer"``: the ``k`` most probable answer strings instead, as the phrase model's reading
        comprehension decodes (``core.spans.best_answer``): among the pair's ``ANSWER_CANDIDATES`` best spans, those
        that read the same once normalised are one answer, scored log sum exp over them and given by its best span.
        """
        if decode not in ("span", "answer"):
            raise ValueError(f"decode must be 'span' or 'answer', got {decode!r}")
        windows = make_windows(self.tokenizer, self.config, questions, passages)
        logits = self.logits(windows)
        found: list[list[ReadSpan]] = [[] for _ in questions]
        per_window = max(k, ANSWER_CANDIDATES) if decode == "answer" else k
        longest = min(self.config.max_answer_tokens, max_answer_tokens or self.config.max_answer_tokens)
        for w, (start, end) in enumerate(logits):
            off = windows.offsets[w]
            scores, starts, ends = best_spans(torch.from_numpy(start)[None], torch.from_numpy(end)[None],
                                              torch.from_numpy(windows.flags[w])[None], longest, per_window,
                                              self.config.length_bias)
            p = int(windows.pair[w])
            null = float(start[0] + end[0])  # [CLS]: the window holds no answer
            for s, i, j in zip(scores[0].tolist(), starts[0].tolist(), ends[0].tolist(), strict=True):
                if s == float("-inf"):
                    continue
                c0, c1 = int(off[i, 0]), int(off[j, 1])
                found[p].append(ReadSpan(p, c0, c1, passages[p][c0:c1], float(s), null))
        for p, spans in enumerate(found):
            best: dict[tuple[int, int], ReadSpan] = {}
            for span in spans:  # overlapping windows read the same span twice: keep its best score
                key = (span.start, span.end)
                if key not in best or span.score > best[key].score:
                    best[key] = span
            ranked = sorted(best.values(), key=lambda s: -s.score)
            if decode == "answer":
                ranked = [replace(ranked[i], score=float(score)) for i, score in
                          merge_by_answer([s.text for s in ranked[:ANSWER_CANDIDATES]],
                                          [s.score for s in ranked[:ANSWER_CANDIDATES]])]
            found[p] = ranked[:k]
        return found


def reader_summary(path: Path) -> dict[str, Any]:
    """What a reader directory holds (for /info and model cards)."""
    config = ReaderConfig.load(path / READER_CONFIG_NAME)
    return {"path": str(path), **asdict(config), "bytes": (path / READER_WEIGHTS_NAME).stat().st_size}


def reading_comprehension(reader: PassageReader, questions: list, batch: int = 64,
                          progress: bool = False, decode: str = "answer") -> dict[str, Any]:
    """Reading-comprehension EM/F1 (percent) of the reader on questions (core.io.Question) read from their gold
    passages (decoded as ``PassageReader.read``'s ``decode``; ``answer``, as the phrase model's is by default), and
    its rate."""
    from tqdm.auto import tqdm

    from spanseek.core.metrics import exact_match, f1_score

    em = f1 = 0.0
    t0 = time.perf_counter()
    for i in tqdm(range(0, len(questions), batch), desc="reading", unit="batch", disable=not progress):
        chunk = questions[i:i + batch]
        spans = reader.read([q.question for q in chunk], [q.context for q in chunk], decode=decode)
        for q, found in zip(chunk, spans, strict=True):
            text = found[0].text if found else ""
            em += exact_match(text, q.answers)
            f1 += f1_score(text, q.answers)
    n = max(1, len(questions))
    seconds = time.perf_counter() - t0
    return {"questions": len(questions), "em": round(100 * em / n, 2), "f1": round(100 * f1 / n, 2),
            "questions_per_second": round(len(questions) / seconds, 1) if seconds > 0 else None}
