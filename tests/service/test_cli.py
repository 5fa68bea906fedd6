"""`spanseek serve`: flags mirror the settings, the environment fills the rest, bad paths fail before uvicorn."""

from __future__ import annotations

import argparse

import pytest

from core.model import ModelError
from core.store import IndexFormatError
from service.cli import _FLAGS, check_servable, register, settings_from_args
from service.settings import Settings


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


def test_flags_mirror_the_settings():
    assert {dest for _, dest, _, _ in _FLAGS} | {"warmup"} == set(Settings.model_fields)  # warmup: --no-warmup


def test_flags_override_environment_which_overrides_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("SPANSEEK_INDEX", str(tmp_path / "from-env"))
    monkeypatch.setenv("SPANSEEK_MAX_WAIT_MS", "7.5")
    monkeypatch.setenv("SPANSEEK_MAX_BATCH_SIZE", "3")
    s = settings_from_args(parse(["--max-batch-size", "48", "--port", "9001", "--cors-origins", "https://a,https://b",
                                  "--api-key", "k", "--no-warmup"]))
    assert s.index == tmp_path / "from-env" and s.max_wait_ms == 7.5  # environment
    assert s.max_batch_size == 48 and s.port == 9001 and not s.warmup  # flags
    assert s.cors_origins == ["https://a", "https://b"] and s.api_key.get_secret_value() == "k"
    assert s.model == "default" and s.host == "127.0.0.1" and s.max_queue == 256  # defaults


def test_invalid_settings_are_refused(tmp_path):
    with pytest.raises(ValueError):
        Settings(index=tmp_path, default_top_k=50, max_top_k=10)
    with pytest.raises(ValueError):
        Settings(index=tmp_path, max_batch_size=0)
    with pytest.raises(ValueError):
        Settings(index=tmp_path, max_queue=4, max_queries_per_request=8)


def test_serve_fails_fast_on_a_missing_index_or_model(tmp_path, tiny_index):
    with pytest.raises(IndexFormatError):
        check_servable(Settings(index=tmp_path / "none"))
    with pytest.raises(ModelError):
        check_servable(Settings(index=tiny_index, model=str(tmp_path)))


def test_spanseek_serve_is_registered():
    from spanseek.cli import build_parser

    args = build_parser().parse_args(["serve", "--index", "x", "--model", "default"])
    assert args.func.__module__ == "service.cli" and args.index == "x"
