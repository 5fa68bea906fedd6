"""Open an index together with the model's question encoder, as the CLI, evaluation and service do."""

from __future__ import annotations

from pathlib import Path

from spanseek.core.confidence import load_calibrator
from spanseek.core.encoding import QuestionEncoder, pick_device, pick_precision
from spanseek.core.model import (
    load_model,
    load_tokenizer,
    model_fingerprint,
    phrase_fingerprint,
    resolve_model,
)
from spanseek.core.search import Searcher
from spanseek.core.store import PhraseIndex


def open_searcher(index_dir: str | Path, model: str | Path, device: str = "auto", precision: str = "auto") -> Searcher:
    """Load an index and the model's question encoder (and its calibrator, if it has one), refusing a model that does
    not match the index."""
    index = PhraseIndex(index_dir)
    model_dir = resolve_model(model)
    phrase_model = load_model(model_dir)
    fingerprint = model_fingerprint(model_dir)
    index.manifest.check_model(phrase_model.config, fingerprint, phrase_fingerprint(model_dir))
    dev = pick_device(device)
    phrase_model.to(dev)
    encoder = QuestionEncoder(phrase_model, load_tokenizer(phrase_model.config), pick_precision(precision, dev))
    return Searcher(index, encoder, calibrator=load_calibrator(model_dir, fingerprint))
