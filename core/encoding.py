"""Inference-time encoding: questions -> (q_start, q_end), passages -> one vector per content token.

Used by the indexer (passages), the searcher and the service (questions). Both run under ``torch.no_grad`` and,
on CPUs where it is faster, under bf16 autocast. CPUs with AVX-512 bf16 differ: an AMD EPYC ran the encoders about
1.7x faster in bf16, an Intel Xeon without AMX 1.8x slower (``precision="auto"`` goes by the CPU's vendor and
features, ``cpu_runs_bf16_faster``, so that every process on a machine picks the same).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from spanseek.core.model import PhraseModel
from spanseek.core.runtime import every_pass
from spanseek.core.stopping import checkpoint
from spanseek.core.text import PassageTokens, best_window, tokenize_passages, window_starts

log = logging.getLogger(__name__)


def autocast(device: torch.device | str, precision: str):
    """bf16 autocast on the given device when precision == 'bf16', else a no-op context."""
    device = torch.device(device)
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision != "fp32":
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    return contextlib.nullcontext()


def pick_device(device: str, setting: str = "device") -> torch.device:
    """``auto`` -> cuda when available, else cpu; a named device that this machine lacks is a ValueError naming
    ``setting`` (the argument that asked for it: ``device``, ``search_device``) and what the machine has."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        picked = torch.device(device)
    except (RuntimeError, TypeError):  # TypeError: not a string (None)
        raise ValueError(f"{setting} must be auto, cpu, cuda or cuda:N (or another torch device), got {device!r}"
                         ) from None
    if picked.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{setting} {device!r}: no CUDA GPU is usable here (torch {torch.__version__}, "
                             f"{'built without CUDA' if torch.version.cuda is None else 'no GPU found'}); use cpu "
                             "or auto")
        if picked.index is not None and picked.index >= torch.cuda.device_count():
            raise ValueError(f"{setting} {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                             f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return picked


PRECISIONS = ("auto", "fp32", "bf16")


def pick_precision(precision: str, device: torch.device) -> str:
    """``auto`` -> bf16 where the device multiplies bf16 natively and faster (CUDA with bf16; a CPU with AMX; an AMD
    CPU with AVX-512 bf16 instructions, ``cpu_runs_bf16_faster``), else fp32.

    Decided from what the hardware is, never from a timing: a start-up probe of bf16 against fp32 timed on a
    2-core AMD EPYC (Zen 4) beside other jobs gave 0.97x, 1.42x, 1.56x, 2.20x, 3.56x and 4.38x in six processes, so
    one process of a deployment served fp32 and the next bf16, and the same question got vectors 1.5% apart and
    other hits. (AMX's tiles multiply bf16 2.3-8.4x faster than float32 on 2 Xeon cores, measured quiet.)"""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_runs_bf16_faster() else "fp32"


def cpu_runs_bf16_faster() -> bool:
    """Whether bf16 autocast runs the encoders faster than fp32 on this CPU, from its features alone: with AMX
    (``cpu_has_amx``), or on an AMD CPU with AVX-512 bf16 instructions (Zen 4 and later: the encoders about 1.7x
    faster). Not on an Intel CPU without AMX, even with AVX-512 bf16 (a Xeon with it ran them 1.7x slower), nor
    without AVX-512 bf16, where bf16 is emulated."""
    try:  # without AVX-512 in torch's kernels, bf16 autocast is emulated and always slower
        if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX512_BF16", "AMX"):
            return False
    except AttributeError:
        return False
    if cpu_has_amx():
        return True
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    try:
        native = bool(check()) if check is not None else False
    except RuntimeError:
        native = False
    from spanseek.core.flat_search import cpu_vendor

    return native and cpu_vendor() == "AuthenticAMD"


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (torch's own check, which its bf16 kernels use; False where torch has none)."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


PAD_MULTIPLE = 32  # passage windows are padded to a multiple of this many tokens
QUESTION_PAD_MULTIPLE = 8
# on ONNX Runtime (a CPU) questions are encoded in passes of at most this many padded tokens, shortest first: 64
# validation questions took 415 ms in one pass, 307 / 258 / 264 / 235 / 240 ms in passes of 768 / 512 / 384 / 256
# / 192 tokens (2-core AVX2 EPYC, medians of 12 batches, budgets alternating), one question 8.9 ms either way, the
# same vectors to the bit; on torch (a GPU, bf16, training) one pass
ONNX_QUESTION_TOKENS = 256


def pad_batch(rows: list[np.ndarray], pad_id: int, multiple: int = 8) -> torch.Tensor:
    """(B, T) tensor of rows right-padded with ``pad_id`` to a multiple of ``multiple``."""
    width = -(-max(len(r) for r in rows) // multiple) * multiple
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return torch.from_numpy(out)


def length_passes(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Rows cut into forward passes: ordered by length (shortest first, ties in row order), each pass grown while
    its padded size (rows x its longest) stays within ``max_tokens``; a pass holds at least one row."""
    order = sorted(range(len(lengths)), key=lambda r: lengths[r])
    passes, i = [], 0
    while i < len(order):
        j = i + 1
        while j < len(order) and (j - i + 1) * lengths[order[j]] <= max_tokens:
            j += 1
        passes.append(order[i:j])
        i = j
    return passes


def padded_length(n: int, multiple: int = PAD_MULTIPLE) -> int:
    """``n`` rounded up to a multiple of ``multiple``.

    Padding batches to a few lengths keeps the number of distinct tensor shapes small. On CPU every new shape
    gets its own oneDNN kernels and buffers, and glibc then keeps the freed memory: measured here, 60 batches of
    windows with lengths 120-250 left 1.9 GB held after they were freed, and filling the QSFT cache held 7 GB.
    With lengths rounded to 32 it stays flat. Padded positions are masked, so outputs do not change.
    """
    return -(-n // multiple) * multiple


def window_batch(windows: list[np.ndarray], tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] ids [SEP] for each window's content ids, padded to ``padded_length``: (B, T) ids and attention mask."""
    T = padded_length(max(len(w) for w in windows) + 2)
    ids = torch.full((len(windows), T), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((len(windows), T), dtype=torch.long)
    for r, w in enumerate(windows):
        n = len(w)
        ids[r, 0] = tokenizer.cls_token_id
        ids[r, 1 : n + 1] = torch.from_numpy(np.asarray(w, dtype=np.int64))
        ids[r, n + 1] = tokenizer.sep_token_id
        mask[r, : n + 2] = 1
    return ids, mask


class _QuestionForward(torch.nn.Module):
    """A phrase model's question side as a module of its own (what ONNX Runtime runs)."""

    def __init__(self, model: PhraseModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.encode_questions(input_ids, attention_mask)


class QuestionCache:
    """The vectors of the ``size`` questions asked last, by their exact text (least recently asked evicted first).

    On torch (a GPU, ``runtime="torch"``) a question's vectors depend a little on the pass it was encoded in: its
    padding is its batch's longest question (in bf16, 65 of 200 validation questions were up to 1.2% apart alone
    and in one batch), enough to swap two near-tied hits; on ONNX Runtime (``auto`` on a CPU) they do not. A
    service encodes each batch of whatever requests arrived together, so without the cache the same request could
    rank otherwise from one call to the next there, and the pages of one ``rank_window`` could repeat or skip a
    hit. With it, a question asked again (the next page, a retry, a popular question) reuses its first vectors: the
    same hits, and no encoder pass. About 3 KB a question (the default model: two 384-d float32 vectors) and its
    text."""

    def __init__(self, size: int):
        if size < 0:
            raise ValueError(f"the question cache holds at least 0 questions, got {size}")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, questions: list[str]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Each question's cached (q_start, q_end), or None; counts the hits and misses."""
        with self._lock:
            found = [self._items.get(q) for q in questions]
            for q, v in zip(questions, found, strict=True):
                if v is not None:
                    self._items.move_to_end(q)
            hit = sum(v is not None for v in found)
            self.hits += hit
            self.misses += len(found) - hit
        return found

    def put(self, questions: list[str], q_start: np.ndarray, q_end: np.ndarray) -> None:
        """Keep each question's vectors (rows of ``q_start``, ``q_end``; copies), evicting the least recent."""
        if not self.size:
            return
        with self._lock:
            for q, a, b in zip(questions, q_start, q_end, strict=True):
                self._items[q] = (a.copy(), b.copy())
                self._items.move_to_end(q)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class QuestionEncoder:
    """Tokenise and encode questions in batches: ``encode(["who …?"]) -> (q_start, q_end)`` as float32 arrays.

    ``runtime`` (``core.runtime``): ``auto`` runs every CPU forward pass on ONNX Runtime in fp32 (3.7x faster for
    one question on an AVX2 EPYC, 1.25x at 64 in one pass and more in the short passes of ``ONNX_QUESTION_TOKENS``),
    also where ``precision`` is bf16 (one question 4.8 against 18.9 ms on a 2-core Xeon with AMX, 64 questions 144.8
    against 95.5 ms on torch): a question's vectors are then the same bits alone or in any batch, in any position,
    on any number of threads, in every process (on torch, bf16 or fp32, they depend a little on the pass's padding
    and size); the default ``torch`` suits a model still being trained. ``cache`` (``QuestionCache``, off by
    default, and so in benchmarks, which ask the same questions again) reuses the vectors of questions asked before;
    the service keeps one (``question_cache``).
    """

    def __init__(self, model: PhraseModel, tokenizer, precision: str = "fp32", runtime: str = "torch",
                 cache: QuestionCache | None = None):
        self.model = model
        self.cache = cache
        self.tokenizer = tokenizer
        self.precision = precision
        self.max_len = model.config.max_query_len
        self.pad_id = int(tokenizer.pad_token_id or 0)
        example = torch.ones((2, QUESTION_PAD_MULTIPLE), dtype=torch.long)
        self.passes = every_pass(runtime, model_device(model), precision, _QuestionForward(model),
                                 {"input_ids": example, "attention_mask": example}, ("q_start", "q_end"))
        self.onnx = self.passes.onnx

    def encode(self, questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(B,) questions -> q_start (B, d), q_end (B, d) float32. Too-long questions are truncated. With a cache, a
        question it holds takes its cached vectors, and the others (each once) are encoded and kept."""
        if self.cache is None or not questions:
            return self._encode(questions)
        found = self.cache.get(questions)
        new = list(dict.fromkeys(q for q, v in zip(questions, found, strict=True) if v is None))
        q_start = np.empty((len(questions), self.model.dim), np.float32)
        q_end = np.empty_like(q_start)
        if new:
            new_start, new_end = self._encode(new)
            self.cache.put(new, new_start, new_end)
            row = {q: i for i, q in enumerate(new)}
        for i, (q, v) in enumerate(zip(questions, found, strict=True)):
            q_start[i], q_end[i] = v if v is not None else (new_start[row[q]], new_end[row[q]])
        return q_start, q_end

    @torch.no_grad()
    def _encode(self, questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not questions:
            d = self.model.dim
            return np.zeros((0, d), np.float32), np.zeros((0, d), np.float32)
        ids = [np.asarray(x, dtype=np.int64) for x in
               self.tokenizer(questions, truncation=True, max_length=self.max_len)["input_ids"]]
        if self.onnx is not None:
            return self._encode_onnx(ids)
        q_start, q_end = self._forward(*self._batch(ids))
        return q_start.float().cpu().numpy(), q_end.float().cpu().numpy()

    def _batch(self, ids: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (B, T) ids and attention mask, T a multiple of ``QUESTION_PAD_MULTIPLE``."""
        return (pad_batch(ids, self.pad_id, QUESTION_PAD_MULTIPLE),
                pad_batch([np.ones(len(x), np.int64) for x in ids], 0, QUESTION_PAD_MULTIPLE))

    @torch.no_grad()
    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        device = model_device(self.model)
        with autocast(device, self.precision):
            return self.model.encode_questions(input_ids.to(device), attention_mask.to(device))

    def _encode_onnx(self, ids: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` on ONNX Runtime, in passes of at most ``ONNX_QUESTION_TOKENS`` padded tokens."""
        assert self.onnx is not None
        q_start = np.empty((len(ids), self.model.dim), np.float32)
        q_end = np.empty_like(q_start)
        for rows in length_passes([len(x) for x in ids], ONNX_QUESTION_TOKENS):
            batch, mask = self._batch([ids[r] for r in rows])
            q_start[rows], q_end[rows] = self.onnx(input_ids=batch.numpy(), attention_mask=mask.numpy())
        return q_start, q_end


@dataclass(frozen=True)
class EncodedPassage:
    """Token vectors (n, d) float32 plus the tokens they belong to."""

    tokens: PassageTokens
    vectors: np.ndarray


def _window_batches(
    passages: list[PassageTokens], window: int, stride: int
) -> tuple[list[tuple[int, int]], list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """Cut every passage into windows: (passage, start) keys, id arrays, and per-passage assignments."""
    keys: list[tuple[int, int]] = []
    ids: list[np.ndarray] = []
    assign: list[tuple[np.ndarray, np.ndarray]] = []
    for p, toks in enumerate(passages):
        starts = window_starts(len(toks), window, stride)
        first = len(keys)
        for s in starts:
            keys.append((p, s))
            ids.append(toks.input_ids[s : s + window])
        win, pos = best_window(len(toks), starts, window)
        assign.append((win + first, pos))
    return keys, ids, assign


def _window_targets(passages: list[PassageTokens], keys: list[tuple[int, int]],
                    assign: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int, int]]:
    """For each window, the tokens that take their vector from it: (first row in the flat output, count, first
    position in the window). A token's best window never decreases along its passage, so each window's tokens are
    one contiguous run."""
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in passages])])
    targets = [(0, 0, 0)] * len(keys)
    for p, (win, pos) in enumerate(assign):
        if len(win) == 0:
            continue
        cuts = np.flatnonzero(np.diff(win)) + 1  # run boundaries
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(win)]]), strict=True):
            targets[int(win[a])] = (int(offsets[p] + a), int(b - a), int(pos[a]))
    return targets


T = TypeVar("T")
Y = TypeVar("Y")


def advance(steps: Generator[Y, None, T]) -> tuple[bool, Any]:
    """Run one step of ``steps``: (False, what it yielded) while steps remain, then (True, what it returns)."""
    try:
        yielded = next(steps)
    except StopIteration as done:
        return True, done.value
    return False, yielded


def drain(steps: Generator[Any, None, T]) -> T:
    """Run ``steps`` to its end; what it returns."""
    while True:
        finished, value = advance(steps)
        if finished:
            return value  # type: ignore[return-value]


class PassageEncoder:
    """Encode passages into per-token vectors with overlapping windows (see core.text)."""

    def __init__(self, model: PhraseModel, tokenizer, precision: str = "fp32", max_batch_tokens: int = 8192):
        self.model = model
        self.tokenizer = tokenizer
        self.precision = precision
        self.window = model.config.max_seq_len - 2
        self.stride = model.config.stride
        self.max_batch_tokens = max_batch_tokens

    def window_ids(self, passages: list[PassageTokens]):
        return _window_batches(passages, self.window, self.stride)

    @torch.no_grad()
    def forward_windows(self, ids: list[np.ndarray], max_batch_tokens: int | None = None
                        ) -> Iterator[tuple[list[int], torch.Tensor]]:
        """Run the phrase encoder over windows, longest first, in batches of at most ``max_batch_tokens`` (default:
        the encoder's) padded tokens, and at least one window.

        Yields (window indices, (b, T, d) content-token vectors, [CLS] stripped).
        """
        device = model_device(self.model)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        budget = max_batch_tokens or self.max_batch_tokens
        i = 0
        while i < len(order):
            longest = padded_length(len(ids[order[i]]) + 2)
            b = max(1, budget // longest)
            chunk = order[i : i + b]
            i += b
            checkpoint()  # a job asked to stop (core.stopping) ends between two forward passes
            batch, mask = window_batch([ids[w] for w in chunk], self.tokenizer)
            with autocast(device, self.precision):
                h = self.model.encode_passages(batch.to(device), mask.to(device))
            yield chunk, h[:, 1:].float()

    def encode_flat(self, passages: list[PassageTokens]) -> np.ndarray:
        """Encode already-tokenised passages into one (total tokens, d) float32 array, passage after passage.

        Each token gets its vector from its best window, copied there as soon as that window's batch is encoded,
        so besides the output only one batch of windows is held: memory stays linear in the tokens however
        long a passage is.
        """
        return drain(self.encode_flat_steps(passages))

    def encode_flat_steps(self, passages: list[PassageTokens], max_batch_tokens: int | None = None
                          ) -> Generator[int, None, np.ndarray]:
        """``encode_flat`` one forward batch (of at most ``max_batch_tokens``) a step: yields after each the number
        of tokens whose vectors it gave (progress: they sum to the passages' tokens), returns the array. A caller
        that shares the encoder's thread (live writes, between search batches) runs a step at a time, however long a
        passage is."""
        keys, ids, assign = self.window_ids(passages)
        targets = _window_targets(passages, keys, assign)
        out = np.empty((sum(len(t) for t in passages), self.model.dim), np.float32)
        for chunk, h in self.forward_windows(ids, max_batch_tokens):
            h_np = h.cpu().numpy()  # (b, T, d)
            filled = 0
            for r, w in enumerate(chunk):
                row, count, pos = targets[w]
                out[row : row + count] = h_np[r, pos : pos + count]
                filled += count
            yield filled
        return out

    def encode_tokens(self, passages: list[PassageTokens]) -> list[EncodedPassage]:
        """Encode already-tokenised passages; each token gets its vector from its best window."""
        flat = self.encode_flat(passages)
        bounds = np.concatenate([[0], np.cumsum([len(t) for t in passages])]).astype(int)
        return [EncodedPassage(toks, flat[bounds[p] : bounds[p + 1]]) for p, toks in enumerate(passages)]

    def encode(self, texts: list[str]) -> list[EncodedPassage]:
        """Tokenise and encode passage texts."""
        return self.encode_tokens(tokenize_passages(self.tokenizer, texts))
