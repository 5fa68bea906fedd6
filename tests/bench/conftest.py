"""Fixtures of the benchmark smoke tests: an index of the tiny SQuAD file's paragraphs (the question file's own
articles, as the accuracy benchmarks expect), built once per test session with the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def squad_corpus(tmp_path_factory, tiny_squad) -> Path:
    """``tiny_squad``'s articles as a JSONL corpus."""
    from spanseek.core.io import load_squad, squad_documents, write_corpus

    path = tmp_path_factory.mktemp("squad-corpus") / "corpus.jsonl"
    write_corpus(path, squad_documents(load_squad(tiny_squad)))
    return path


@pytest.fixture(scope="session")
def squad_index(tmp_path_factory, squad_corpus, tiny_model_dir) -> Path:
    """An exact (Flat) index of ``tiny_squad``'s paragraphs, built with the tiny model."""
    from spanseek.indexer.build import BuildOptions, build_index

    out = tmp_path_factory.mktemp("squad-index") / "index"
    build_index(squad_corpus, tiny_model_dir, out, BuildOptions(progress=False, precision="fp32", device="cpu"))
    return out


@pytest.fixture(scope="session")
def separate_model_dir(tmp_path_factory, tiny_config) -> Path:
    """A tiny phrase model with two question encoders (``question_mode="separate"``)."""
    from dataclasses import replace

    import torch

    from spanseek.core.model import PhraseModel

    torch.manual_seed(2)
    return PhraseModel(replace(tiny_config, question_mode="separate")).save(tmp_path_factory.mktemp("models") / "sep")


@pytest.fixture(scope="session")
def hard_negatives(tmp_path_factory, tiny_squad) -> Path:
    """BM25 hard negatives of ``tiny_squad``'s questions (`spanseek train mine`)."""
    from spanseek.trainer import mining

    out = tmp_path_factory.mktemp("hard") / "hard.jsonl"
    mining.mine(tiny_squad, out, chunk=50, progress=False)
    return out
