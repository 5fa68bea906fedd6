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
a later process loads it in a fraction of a second),
and run by an ONNX Runtime session on torch's number of threads, whose workers do not spin between operators (the
stage after the forward pass needs the cores). Outputs equal torch's within float rounding (about 1e-5 on
logits), as a different BLAS would give.

``runtime``: ``auto`` (ONNX Runtime for fp32 on a CPU when it is installed, else torch), ``torch``, ``onnx``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)
RUNTIMES = ("auto", "torch", "onnx")
ONNX_CACHE = Path(os.environ.get("SPANSEEK_ONNX_CACHE", Path.home() / ".cache" / "spanseek" / "onnx"))
OPSET = 17


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
                self._session = onnxruntime.InferenceSession(str(self.export()), options,
                                                             providers=["CPUExecutionProvider"])
                self._threads = threads
            return self._session

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        return self.session().run(self.outputs, inputs)


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
