"""ONNX Runtime for the forward passes that answer requests on a CPU: the question encoder and the reader, in fp32.

torch's CPU matrix products carry a large fixed cost at the small sizes a request brings (one question, three
reader windows). On a 2-core AMD EPYC (Zen 3, AVX2) the same fp32 graphs ran under ONNX Runtime in:

| forward pass                          | torch   | ONNX Runtime |
|---------------------------------------|---------|--------------|
| question encoder, 1 question          | 30.4 ms | 8.1 ms       |
| question encoder, 64 questions        | 336 ms  | 267 ms       |
| reader, 3 windows of 128 tokens       | 141 ms  | 84 ms        |
| reader, 32 windows of 128 tokens      | 938 ms  | 812 ms       |

A module is exported once with torch's exporter (dynamic batch and length), stored in a cache directory under a
key of its weights and the library versions (``ONNX_CACHE``: ``~/.cache/spanseek/onnx``, or ``$SPANSEEK_ONNX_CACHE``;
a later process loads it in a fraction of a second; a graph is 90 MB for the default question encoder, and every
trained checkpoint has its own, so the cache keeps the graphs used last within ``ONNX_CACHE_BYTES``, or
``$SPANSEEK_ONNX_CACHE_BYTES``, and those used in the last ``RECENT_USE_SECONDS``, which another process may be about
to load: ``trim_cache``),
and run by an ONNX Runtime session on torch's number of threads, whose workers do not spin between operators (the
stage after the forward pass needs the cores). Outputs equal torch's within float rounding (about 1e-5 on
logits), as a different BLAS would give.

``runtime``: ``auto`` (ONNX Runtime for fp32 on a CPU when it is installed, else torch), ``torch``, ``onnx``.

Where ``auto`` runs bf16 on a CPU (``precision auto`` picks it where bf16's products run faster: AMX, or AVX-512
cores like Zen 4's), torch's fixed cost a pass still loses the small passes, and its bf16 products win the large
ones. On a 2-core Intel Xeon with AMX, in milliseconds (question encoder; reader, three windows a question):

| forward pass                          | torch, bf16 | ONNX Runtime, fp32 |
|---------------------------------------|-------------|--------------------|
| question encoder, 1 / 8 / 64 questions| 18.9 / 32.9 / 95.5 | 4.8 / 24.3 / 144.8 |
| reader, 1 / 8 / 64 questions          | 35.5 / 87.8 / 622  | 23.3 / 165 / 1,312 |

So ``auto`` in bf16 on a CPU runs every question pass and every reader pass on ONNX Runtime in fp32
(``every_pass``): a question's vectors, and a (question, passage) pair's reader logits, are then the same bits alone
or in any batch, in every process. A split by size, at a size a start-up timing chose, gave a question fp32 vectors
alone and bf16 ones in a large batch, 1.5% apart (200 validation questions: 24 of their top-10 lists differed), and
the split point moved from process to process. It costs large batches where bf16 is fast (the AMX Xeon above: 64
questions 144.8 against 95.5 ms, 64 questions' reads 1,312 against 622 ms); on a 2-core AMD EPYC (Zen 4, busy) ONNX
Runtime was as fast at every size (1 / 8 / 64 questions: 21 / 153 / 1,085 against 63 / 161 / 1,461 ms on torch in
bf16).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)
RUNTIMES = ("auto", "torch", "onnx")
ONNX_CACHE = Path(os.environ.get("SPANSEEK_ONNX_CACHE", Path.home() / ".cache" / "spanseek" / "onnx"))
OPSET = 17
# the cache's bound: after an export, the graphs used longest ago are removed until the rest fit (a graph in use by
# a running process is not affected: its session has read it)
ONNX_CACHE_BYTES = 2 << 30  # unless $SPANSEEK_ONNX_CACHE_BYTES says (cache_bytes)
STALE_EXPORT_SECONDS = 3600  # a part-written export this old was left by a killed process
# a graph used (found or exported: its modification time) this recently may be one another process has just chosen
# and is about to load: a trim leaves it, over the bound for that long, rather than make that process export it again
RECENT_USE_SECONDS = 120


def onnx_installed() -> bool:
    """Whether ONNX Runtime and the exporter's ``onnx`` package are importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def pick_runtime(runtime: str, device: torch.device | str, precision: str) -> str:
    """``auto`` -> ``onnx`` for fp32 on a CPU with ONNX Runtime installed, else ``torch``; ``onnx`` where it cannot
    run (a GPU, bf16, not installed) is a ValueError saying why."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if runtime == "torch":
        return "torch"
    device = torch.device(device)
    usable = device.type == "cpu" and precision == "fp32"
    if runtime == "onnx":
        if not usable:
            raise ValueError(f"runtime onnx runs fp32 on a CPU; this is {device.type} in {precision} (use auto or "
                             "torch)")
        if not onnx_installed():
            raise ValueError("runtime onnx needs onnxruntime and onnx: pip install onnxruntime onnx")
        return "onnx"
    return "onnx" if usable and onnx_installed() else "torch"


def weights_key(module: torch.nn.Module, *parts: str) -> str:
    """A digest of ``module``'s class, its parameters and buffers (names, shapes, bytes) and ``parts``."""
    h = hashlib.blake2b(digest_size=16)
    for part in (type(module).__qualname__, *parts):
        h.update(part.encode() + b"\0")
    for name, t in module.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.view(-1).view(torch.uint8).numpy())  # the bytes in place, not a copy
    return h.hexdigest()


class OnnxForward:
    """``module``'s forward run by ONNX Runtime: ``forward(name=array, ...) -> [output arrays]``.

    ``example`` names the module's positional inputs (in order) with example tensors of the dtypes the calls pass;
    every input and output has a dynamic batch (axis 0) and, when it has one, length (axis 1). The graph is exported
    on first use (or found in ``cache_dir``); the session follows torch's thread count.
    """

    def __init__(self, module: torch.nn.Module, example: Mapping[str, torch.Tensor], outputs: Sequence[str],
                 cache_dir: str | Path | None = None):
        self.module = module
        self.example = dict(example)
        self.outputs = list(outputs)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else ONNX_CACHE
        self._session: Any = None
        self._threads = 0
        self._path: Path | None = None  # the graph's file once found or exported (a new thread count reuses it)
        self._lock = threading.Lock()

    def path(self) -> Path:
        import onnxruntime

        key = weights_key(self.module, ",".join(self.example), ",".join(self.outputs), str(OPSET), torch.__version__,
                          onnxruntime.__version__)
        return self.cache_dir / f"{type(self.module).__name__.lower()}-{key}.onnx"

    def export(self) -> Path:
        """The exported graph's file: from the cache, or exported now and moved into it in one rename."""
        if self._path is not None and self._path.is_file():
            return self._path
        path = self.path()
        if path.is_file():
            self._path = path
            _touch(path)  # used now: the last to be trimmed
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        dynamic = {name: {0: "batch", 1: "length"} if t.dim() > 1 else {0: "batch"}
                   for name, t in self.example.items()}
        dynamic.update({name: {0: "batch", 1: "length"} for name in self.outputs})
        modes = [(m, m.training) for m in self.module.modules()]  # exported in eval mode, each module's mode restored
        self.module.eval()
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(self.module, tuple(self.example.values()), str(tmp), input_names=list(self.example),
                                  output_names=self.outputs, dynamic_axes=dynamic, opset_version=OPSET, dynamo=False)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
            for m, training in modes:
                m.training = training
        log.info("exported %s for ONNX Runtime to %s", type(self.module).__name__, path)
        self._path = path
        trim_cache(path.parent, cache_bytes(), keep=path)
        return path

    def session(self) -> Any:
        threads = torch.get_num_threads()
        with self._lock:
            if self._session is None or self._threads != threads:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                try:
                    self._session = onnxruntime.InferenceSession(str(self.export()), options,
                                                                 providers=["CPUExecutionProvider"])
                except Exception:
                    if self._path is None or self._path.is_file():
                        raise
                    self._path = None  # another process trimmed it from the cache between export and load
                    self._session = onnxruntime.InferenceSession(str(self.export()), options,
                                                                 providers=["CPUExecutionProvider"])
                self._threads = threads
            return self._session

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        return self.session().run(self.outputs, inputs)


def cache_bytes() -> int:
    """The cache's bound: ``$SPANSEEK_ONNX_CACHE_BYTES`` (bytes; ``0`` keeps only the graphs in use, ``trim_cache``), else
    ``ONNX_CACHE_BYTES``; a value that is not a whole number of bytes is warned of and the default kept."""
    value = os.environ.get("SPANSEEK_ONNX_CACHE_BYTES")
    if value is None:
        return ONNX_CACHE_BYTES
    try:
        n = int(value)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        log.warning("SPANSEEK_ONNX_CACHE_BYTES=%r is not a number of bytes: the ONNX cache keeps %d", value,
                    ONNX_CACHE_BYTES)
        return ONNX_CACHE_BYTES


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # a read-only cache (a mounted volume) keeps its order
        pass


def trim_cache(cache_dir: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the graphs of ``cache_dir`` used longest ago (by modification time: a graph is touched when a process
    finds it) until the rest take at most ``max_bytes``; and part-written exports older than ``STALE_EXPORT_SECONDS``.
    Never ``keep``, nor a graph used within ``RECENT_USE_SECONDS`` (looked at again just before it would be removed):
    another process may have just chosen it, and would export it again. Returns what was removed."""
    removed: list[Path] = []
    now = time.time()
    graphs = []
    for p in cache_dir.iterdir() if cache_dir.is_dir() else []:
        try:
            st = p.stat()
        except OSError:  # removed meanwhile by another process
            continue
        if p.name.endswith(".tmp") and now - st.st_mtime > STALE_EXPORT_SECONDS:
            p.unlink(missing_ok=True)
            removed.append(p)
        elif p.suffix == ".onnx":
            graphs.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in graphs)
    for _, size, p in sorted(graphs, key=lambda g: g[0]):
        if total <= max_bytes:
            break
        if keep is not None and p == keep:
            continue
        try:
            if time.time() - p.stat().st_mtime < RECENT_USE_SECONDS:  # chosen by another process, maybe since listed
                continue
        except OSError:  # removed meanwhile by another process
            total -= size
            continue
        p.unlink(missing_ok=True)
        removed.append(p)
        total -= size
    if removed:
        log.info("trimmed %d files from the ONNX cache %s (bound %.1f GB)", len(removed), cache_dir, max_bytes / 1e9)
    return removed


def onnx_forward(runtime: str, device: torch.device | str, precision: str, module: torch.nn.Module,
                 example: Mapping[str, torch.Tensor], outputs: Sequence[str]) -> OnnxForward | None:
    """The ``OnnxForward`` of ``module`` when ``runtime`` picks ONNX Runtime (``pick_runtime``), its session made now
    (a load pays the export, not the first request); None for torch. Under ``auto`` a module that does not export
    stays on torch, with a warning; under ``onnx`` that is an error."""
    if pick_runtime(runtime, device, precision) != "onnx":
        return None
    forward = OnnxForward(module, example, outputs)
    try:
        forward.session()
    except Exception as e:  # an exporter or runtime that cannot take this graph: torch still can
        if runtime == "onnx":
            raise
        log.warning("%s runs on torch: it did not export to ONNX Runtime (%s: %s)", type(module).__name__,
                    type(e).__name__, e)
        return None
    return forward


@dataclass(frozen=True)
class Passes:
    """What runs a module's forward passes: ``onnx`` (ONNX Runtime, fp32) for every one, or torch where it is None."""

    onnx: OnnxForward | None = None

    @property
    def name(self) -> str:
        """``onnx`` or ``torch``."""
        return "torch" if self.onnx is None else "onnx"


def fp32_forward(runtime: str, device: torch.device | str, precision: str, module: torch.nn.Module,
                 example: Mapping[str, torch.Tensor], outputs: Sequence[str]) -> OnnxForward | None:
    """``onnx_forward`` of ``module``, also under ``auto`` on a CPU in bf16 (ONNX Runtime runs it in fp32); None
    where torch runs it (asked for, a GPU, not installed, not exported)."""
    forward = onnx_forward(runtime, device, precision, module, example, outputs)
    if forward is not None or runtime != "auto" or torch.device(device).type != "cpu" or precision != "bf16":
        return forward
    return onnx_forward("auto", device, "fp32", module, example, outputs)


def every_pass(runtime: str, device: torch.device | str, precision: str, module: torch.nn.Module,
               example: Mapping[str, torch.Tensor], outputs: Sequence[str]) -> Passes:
    """What runs ``module``'s passes when each row's outputs must not depend on its pass: ONNX Runtime (fp32) for
    every pass where ``fp32_forward`` runs it, even in bf16, else torch. ONNX Runtime's fp32 outputs of a row are
    the same bits in a pass of any size, padded to any length, on any number of threads; torch's, in bf16 or fp32,
    depend a little on the pass, and a split by size would put one row in fp32 alone and in bf16 in a large pass."""
    forward = fp32_forward(runtime, device, precision, module, example, outputs)
    if forward is not None and precision == "bf16":
        log.info("%s: every pass on ONNX Runtime (fp32)", type(module).__name__)
    return Passes(forward)
