"""A teacher cache filled where its reader runs fast, carried back in pieces, and distilled from on the CPU.

    python bench/gpu/teacher_cache.py fill --reader /tmp/reader/last --model default --out /tmp/tcache \
        --train .gpu/a/squad-v1.1-train.json.gz --tokenizer .gpu/a/skeleton-minilm     # there (a GPU)
    python bench/gpu/teacher_cache.py fill --for reader --model default ... --out /tmp/tcache-reader  # a reader's
    python bench/gpu/teacher_cache.py pack /tmp/tcache --out "$OUT" --piece-mb 15             # there: fp16 pieces
    python bench/gpu/teacher_cache.py unpack DOWNLOADED --out runs/teacher-mpnet            # here: fp32 cache
    spanseek train phrase --init-from default --teacher runs/teacher-mpnet --lambda-kl 4 ...  # here, an epoch or more
    spanseek train reader --init default --teacher runs/teacher-mpnet-reader --lambda-kl 1 ...  # or the reader

A base-size reader (MPNet-base, a full fine-tune) is a far stronger teacher than the bundled MiniLM one, but reading
the 80.5k training (question, window) pairs with it takes hours on two CPU cores and about a minute and a half on an
H200. ``fill`` reads the pairs of the windows that ``spanseek train phrase`` makes for ``--model`` (its tokenizer and
window sizes, every training question: what a run of an epoch or more trains on) with ``--reader`` into a teacher
cache (trainer.distill); ``--tokenizer`` names a directory with the model's tokenizer files where its backbone is not
installed (only the tokenizer is used). ``--for reader`` reads the windows of ``spanseek train reader --init
MODEL`` instead (the reader's questions and windows; the teacher reads each window's passage tokens), to distil a
small reader from a large one. ``pack`` stores the logits as fp16 (they are logits of at most a few tens;
fp16 keeps them to about 0.01) in a gzip'd tar cut into pieces of at most ``--piece-mb`` MB with a manifest of their
sha256; ``unpack`` checks and joins them and writes the cache back with fp32 logits, as a local fill makes it. The
cache then stands for its reader: ``--teacher DIR``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside carry_backbone.py, even under PYTHONSAFEPATH
from carry_backbone import join_pieces, write_pieces  # noqa: E402

from spanseek.trainer.phrase_cache import CACHE_DONE, CACHE_FLAGS, CACHE_META, CACHE_VECTORS, PhraseCache

HALF = "vectors.f16.npy"  # the logits as carried


def fill(reader: str, train: str, model: str, out: Path, tokenizer: str | None, limit_questions: int | None,
         student: str, progress: bool) -> None:
    from spanseek.core.encoding import pick_device, pick_precision
    from spanseek.core.io import load_squad
    from spanseek.trainer.distill import fill_teacher_cache

    data = load_squad(train)
    of = phrase_windows if student == "phrase" else reader_windows_of
    windows = of(data, train, model, tokenizer, limit_questions)
    device = pick_device("auto")
    cache = fill_teacher_cache(out, reader, windows, device, pick_precision("auto", device), progress=progress)
    print(f"{len(cache.keys)} pairs of {len(windows)} {student} windows in {out} (device {device})")


def phrase_windows(data: list, train: str, model: str, tokenizer: str | None, limit_questions: int | None) -> list:
    """The windows of `spanseek train phrase --init-from MODEL` (its tokenizer and window sizes)."""
    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME, load_tokenizer, resolve_model
    from spanseek.trainer.arguments import TrainConfig
    from spanseek.trainer.data import training_windows

    enc = EncoderConfig.load(resolve_model(model) / CONFIG_NAME)
    tok = load_tokenizer(replace(enc, backbone=tokenizer) if tokenizer else enc)
    cfg = TrainConfig(train=train, out="unused", limit_questions=limit_questions)  # the trainer's own split, sample
    return training_windows(cfg, data, tok, enc, None)[0]


def reader_windows_of(data: list, train: str, model: str, tokenizer: str | None, limit_questions: int | None) -> list:
    """What a teacher reads of the windows of `spanseek train reader --init MODEL` (its tokenizer and window sizes;
    only MODEL's config is read)."""
    from spanseek.core.config import ReaderConfig
    from spanseek.core.reader import DEFAULT_READER_DIR, READER_CONFIG_NAME, load_reader_tokenizer
    from spanseek.trainer.arguments import ReaderTrainConfig
    from spanseek.trainer.distill import reader_windows
    from spanseek.trainer.reader import reader_questions, training_windows

    config = ReaderConfig.load((DEFAULT_READER_DIR if model == "default" else Path(model)) / READER_CONFIG_NAME)
    tok = load_reader_tokenizer(replace(config, backbone=tokenizer) if tokenizer else config)
    questions = reader_questions(ReaderTrainConfig(train=train, out="unused", limit_questions=limit_questions), data)
    return [w for w in reader_windows(questions, training_windows(tok, config, questions)[0]) if w is not None]


def pack(cache: Path, out: Path, piece_mb: float) -> None:
    if not PhraseCache(cache).complete:
        raise SystemExit(f"{cache}: not filled yet (run the fill again: it resumes)")
    meta = json.loads((cache / CACHE_META).read_text())
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buf, mode="w:gz") as tar:
        half = Path(tmp) / HALF
        np.save(half, np.load(cache / CACHE_VECTORS, mmap_mode="r").astype(np.float16))
        for name in (CACHE_META, CACHE_DONE, CACHE_FLAGS):
            tar.add(cache / name, name)
        tar.add(half, HALF)
    pieces = write_pieces(buf.getvalue(), out, "teacher-cache.tar.gz", [piece_mb])
    (out / "manifest.json").write_text(json.dumps({"teacher_cache": meta["source"], "pairs": len(meta["keys"]),
                                                   "pieces": pieces}, indent=1))
    print(f"{len(pieces)} pieces in {out}: {sum((out / p['file']).stat().st_size for p in pieces) / 1e6:.1f} MB")


def unpack(src: Path, out: Path) -> None:
    if out.exists():
        raise SystemExit(f"{out}: exists already (a teacher cache is written once; choose another --out)")
    manifest = json.loads((src / "manifest.json").read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".unpack.") as tmp:  # same file system: one rename
        joined, cache = Path(tmp) / "cache.tar.gz", Path(tmp) / "cache"
        join_pieces(manifest["pieces"], [src], joined)
        with tarfile.open(joined) as tar:
            tar.extractall(cache, filter="data")
        np.save(cache / CACHE_VECTORS, np.load(cache / HALF).astype(np.float32))
        (cache / HALF).unlink()
        cache.rename(out)
    print(f"teacher cache of {manifest['pairs']} pairs ({manifest['teacher_cache']}) in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fill", help="read the training pairs of --model's windows with --teacher")
    p.add_argument("--teacher", "--reader", dest="reader", required=True,
                   help="the teacher: a reader (a directory or `default`) or a phrase model (`base`, `phrase:DIR`)")
    p.add_argument("--train", required=True, help="SQuAD-format training file, as the phrase run will be given")
    p.add_argument("--for", dest="student", choices=("phrase", "reader"), default="phrase",
                   help="the windows of a phrase model's training run, or of a reader's (distilling a reader)")
    p.add_argument("--model", default="default", help="the phrase model (--for phrase) or reader (--for reader) "
                   "whose training windows are read: `default` or a directory (its config and tokenizer)")
    p.add_argument("--out", type=Path, required=True, help="the teacher cache (a killed fill resumes)")
    p.add_argument("--tokenizer", help="directory of the model's tokenizer files, where its backbone is not installed")
    p.add_argument("--limit-questions", type=int, help="as the phrase run's --limit-questions (a fixed sample)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=False)
    p = sub.add_parser("pack", help="the cache as fp16 pieces with a manifest")
    p.add_argument("cache", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--piece-mb", type=float, default=15.0)
    p = sub.add_parser("unpack", help="check, join and widen the pieces into a teacher cache")
    p.add_argument("src", type=Path, help="folder of manifest.json and its pieces")
    p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "fill":
        fill(args.reader, args.train, args.model, args.out, args.tokenizer, args.limit_questions, args.student,
             args.progress)
    elif args.cmd == "pack":
        pack(args.cache, args.out, args.piece_mb)
    else:
        unpack(args.src, args.out)


if __name__ == "__main__":
    main()
