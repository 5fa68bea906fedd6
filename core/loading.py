"""Open an index together with the model's question encoder, as the CLI, evaluation and service do."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from spanseek.core.confidence import load_calibrator
from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import PRECISIONS, QuestionEncoder, model_device, pick_device, pick_precision
from spanseek.core.gpu import OnDevice, place
from spanseek.core.hits import HitBuilder
from spanseek.core.model import (
    BUNDLED_MODELS,
    CONFIG_NAME,
    ModelError,
    load_model,
    load_tokenizer,
    model_fingerprint,
    phrase_fingerprint,
    resolve_model,
)
from spanseek.core.phrase_index import IndexFormatError, Manifest, PhraseIndex
from spanseek.core.reader import PassageReader, resolve_reader
from spanseek.core.reading import READING_NAME, Reading, ReadingStage
from spanseek.core.runtime import RUNTIMES
from spanseek.core.search import Searcher
from spanseek.core.selection import SELECTION_CACHE_BYTES

log = logging.getLogger(__name__)


def index_model(manifest: Manifest, model: str | Path | None, where: str | Path = "the index") -> Path:
    """The model directory to search or extend the index of ``manifest`` with when ``model`` is asked for (None: the
    one recorded in the manifest): ``model``'s own, unless ``model`` names a bundled model (``default``) whose current
    weights did not build the index and an earlier version of it, kept under a dated name (``default-2026-11``), did:
    then that one, so an index keeps serving after the default changes. Another bundled model is never taken instead
    (``base`` for ``default`` or the reverse): a model asked for by name is used, and refused by
    ``check_index_model`` when it did not build the index."""
    if model is None:
        try:
            return index_model(manifest, manifest.model_ref, where)
        except ModelError as e:
            raise ModelError(f"{where} was built with the model {manifest.model_ref!r}, which is not here ({e}); "
                             "give the model that built it (--model)") from None
    model_dir = resolve_model(model)
    if str(model) not in BUNDLED_MODELS or manifest.built_by(model_fingerprint(model_dir), phrase_fingerprint(model_dir)):
        return model_dir
    for name, other in BUNDLED_MODELS.items():
        if (is_earlier_version(name, str(model)) and other != model_dir and (other / CONFIG_NAME).is_file()
                and manifest.built_by(model_fingerprint(other), phrase_fingerprint(other))):
            log.warning("%s was built with the bundled model %r, not the current %r: using %r", where, name,
                        str(model), name)
            return other
    return model_dir


def is_earlier_version(name: str, model: str) -> bool:
    """Whether the bundled model ``name`` is an earlier version of ``model`` kept under a dated name
    (``default-2026-11`` of ``default``)."""
    return re.fullmatch(rf"{re.escape(model)}-\d{{4}}-\d{{2}}(-\d{{2}})?", name) is not None


def bundled_builder(manifest: Manifest) -> str | None:
    """The bundled model that makes the index's token vectors (``default``, an earlier default kept under a dated
    name such as ``default-2026-11``, ``base``), or None: another model, or an index that records no phrase
    fingerprint."""
    if not manifest.phrase_fingerprint:
        return None
    return next((name for name, path in BUNDLED_MODELS.items()
                 if (path / CONFIG_NAME).is_file() and phrase_fingerprint(path) == manifest.phrase_fingerprint), None)


def builder_name(manifest: Manifest) -> str:
    """The model that built the index, as a user names it now: the bundled model whose vectors it holds (an index
    built by ``default`` before the default changed is ``default-2026-11``'s), else the reference it recorded."""
    return bundled_builder(manifest) or manifest.model_ref


def check_index_model(index: PhraseIndex, model_dir: Path, config: EncoderConfig) -> None:
    """Refuse (IndexFormatError) an index built by a model other than ``model_dir`` (whose config is ``config``),
    naming the model that built it."""
    try:
        index.manifest.check_model(config, model_fingerprint(model_dir), phrase_fingerprint(model_dir))
    except IndexFormatError as e:
        raise IndexFormatError(f"{index.dir}: {e} (it was built with the model {builder_name(index.manifest)!r})"
                               ) from None


def search_placement(index: PhraseIndex, search_device: str, encoder_device: str) -> OnDevice | None:
    """Where ``index`` is searched: ``auto`` follows the question encoder onto a CUDA GPU, ``cpu`` keeps it on the
    CPU, ``cuda`` / ``cuda:N`` ask for that GPU (``core.gpu.place``: what does not fit stays on the CPU), a
    ValueError where the machine has no such GPU (``check_search_device``)."""
    check_search_device(search_device)
    device = encoder_device if search_device == "auto" else search_device
    return None if device == "cpu" or not device.startswith("cuda") else place(index, device)


def check_search_device(search_device: object) -> None:
    """ValueError unless ``search_device`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, and a CUDA GPU it names is
    one this machine has: the rule of ``device`` (``core.encoding.pick_device``), so that neither falls back to the
    CPU unasked."""
    if not isinstance(search_device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", search_device):
        raise ValueError(f"search device must be auto, cpu, cuda or cuda:N, got {search_device!r}")
    if search_device.startswith("cuda"):
        pick_device(search_device, "search_device")


def reading_dir(reader: str | Path) -> Path:
    """The directory of a reader that can read at search time (``default``: the bundled reader): a reader with its
    fitted ``reading.json``; ModelError naming what is missing (cheap: what loads one checks it first)."""
    path = resolve_reader(reader)
    if not (path / READING_NAME).is_file():
        raise ModelError(f"reader {str(reader)!r}: {path} has no {READING_NAME} (fit one with `spanseek train "
                         "fit-reading`)")
    return path


def open_reading(reader: str | Path, hits: HitBuilder, device: str = "auto", precision: str = "auto",
                 runtime: str = "auto") -> ReadingStage:
    """The reading stage of a reader directory (``default``: the bundled reader): the reader and its fitted
    ``reading.json``; ModelError naming what is missing. ``runtime``: see ``core.runtime``."""
    path = reading_dir(reader)
    dev = pick_device(device)
    return ReadingStage(PassageReader.load(path, dev, pick_precision(precision, dev), runtime),
                        Reading.load(path / READING_NAME), hits)


def open_searcher(index_dir: str | Path, model: str | Path | None, device: str = "auto", precision: str = "auto",
                  search_device: str = "auto", reader: str | Path | None = None,
                  reader_precision: str = "auto", selection_cache_bytes: int = SELECTION_CACHE_BYTES,
                  unanswerable_prior: float = 0.0, runtime: str = "auto", calibrated: bool = True) -> Searcher:
    """Load an index and the model's question encoder (and its calibrator, if it has one), refusing a model that does
    not match the index; ``model`` None: the one recorded in the index's manifest (``index_model``).
    ``search_device``: see ``search_placement``; ``reader``: a reader directory (or ``default``) for requests with
    ``read``; ``selection_cache_bytes``, ``unanswerable_prior``: see ``Searcher``; ``runtime``: what runs the
    encoder's and the reader's forward passes (``core.runtime``: ``auto``, ``torch``, ``onnx``); ``calibrated``
    False: the model's calibration file is not read (hits carry no confidence; what refits it opens it so)."""
    if isinstance(unanswerable_prior, bool) or not isinstance(unanswerable_prior, int | float) or not (
            0 <= unanswerable_prior <= 1):  # every confidence was 0 at 2.0, refused only by a request's own prior
        raise ValueError(f"unanswerable_prior must be a number in [0, 1], got {unanswerable_prior!r}")
    # every setting is checked before the index and the model load (seconds), each error naming its argument
    for name, value, allowed in (("precision", precision, PRECISIONS), ("reader_precision", reader_precision, PRECISIONS),
                                 ("runtime", runtime, RUNTIMES)):
        if value not in allowed:  # refused at the first search, after the model had loaded
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    for name, path in (("index_dir", index_dir), ("model", model), ("reader", reader)):
        # (pathlib's own TypeError, deep in the loading, named no argument)
        if not isinstance(path, str | Path) and (path is not None or name == "index_dir"):
            raise TypeError(f"{name} must be a path (str or Path), got {type(path).__name__}")
    dev = pick_device(device)  # device="cuda" (or search_device) on a machine without one
    check_search_device(search_device)
    index = PhraseIndex(index_dir)
    model_dir = index_model(index.manifest, model, index.dir)
    # the config is enough to refuse a model that did not build the index, before its backbone is loaded (or found
    # missing: an optional extra such as the base model's)
    check_index_model(index, model_dir, EncoderConfig.load(model_dir / CONFIG_NAME))
    phrase_model = load_model(model_dir)
    phrase_model.to(dev)
    encoder = QuestionEncoder(phrase_model, load_tokenizer(phrase_model.config), pick_precision(precision, dev),
                              runtime)
    reading = None if reader is None else open_reading(reader, HitBuilder(index), device, reader_precision, runtime)
    calibrator = load_calibrator(model_dir, model_fingerprint(model_dir)) if calibrated else None
    return Searcher(index, encoder, calibrator=calibrator,
                    on_device=search_placement(index, search_device, str(dev)), reading=reading,
                    selection_cache_bytes=selection_cache_bytes, unanswerable_prior=unanswerable_prior)


def reopen_searcher(index_dir: str | Path, model: str | Path, encoder: QuestionEncoder,
                    search_device: str = "auto", current: Searcher | None = None,
                    verify_checksums: bool = True) -> Searcher:
    """A searcher over another index for an already loaded question encoder of ``model`` (the service's hot
    reload): the index is loaded and checked (checksums, and that the encoder's model built it: the directory its
    weights were loaded from, which for ``model`` ``default`` may be an earlier version that built the served
    index, ``index_model``); the encoder is shared.

    The ``current`` searcher's GPU parts are released once the new index has passed its checks, so the new one can
    take the GPU memory (the current one answers from the CPU until it is swapped out). The current searcher's
    selection cache budget and unanswerable prior carry over. ``verify_checksums`` False: sizes only, for a caller
    that has checked the contents itself."""
    index = PhraseIndex(index_dir, verify_checksums=verify_checksums)
    model_dir = getattr(encoder.model, "source", None) or resolve_model(model)
    check_index_model(index, model_dir, encoder.model.config)
    if current is not None and current.on_device is not None:
        current.on_device.release()
    cache_bytes = current.selection_cache_bytes if current is not None else SELECTION_CACHE_BYTES
    reading = None  # the current searcher's reader, over the new index's passages
    if current is not None and current.reading is not None:
        reading = current.reading.over(HitBuilder(index))
    return Searcher(index, encoder, calibrator=load_calibrator(model_dir, model_fingerprint(model_dir)),
                    on_device=search_placement(index, search_device, str(model_device(encoder.model))),
                    reading=reading, selection_cache_bytes=cache_bytes,
                    unanswerable_prior=current.pager.unanswerable_prior if current is not None else 0.0)
