"""Scale run: an on-disk IVF index of N tokens made of real token vectors replicated, built and searched.

    nice -n 10 python bench/scale_run.py --base INDEX_DIR --sizes 1000000,10000000,50000000 \\
        --questions runs/validation.json.gz --workdir work/scale --out work/scale.json

No corpus of 50M tokens is at hand (and encoding one on a CPU would take a day), so the index of N tokens is made
from the token vectors of a built exact index (``--base``): replica 0 is the base itself, every further replica
is the base's vectors plus small Gaussian noise (``--noise`` times each dimension's standard deviation, drawn
from a fixed table, so any row can be recomputed) with fresh passage and document ids (the passage texts
repeat). Vectors are generated on the fly: no fp16 copy of the N tokens is ever written. Each size is built with
the library's stages, timed one by one, with peak RAM sampled: token maps and passage store; faiss training on
a sample; adding block by block into on-disk inverted lists (``indexer.ondisk``); the quantised fine store
(``core.fine_store``); the manifest. Then it is searched: phrase-search q/s with real validation questions (batch
64, top-k 10), and the share of questions whose top start token (faiss, default nprobe) is the exact maximum
inner product over all N tokens (brute force over the generated vectors, on --exact-sample questions), and the
share whose top start token is the exact one or one of its replicas (beyond one replica a token has near-copies
that differ by the noise alone, and which of them wins is a coin toss for any compressed index). A size
whose manifest exists is not built again (resumable); its search is measured again.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from spanseek.core import phrase_index  # noqa: E402
from spanseek.core.evaluate import sample_questions  # noqa: E402
from spanseek.core.fine_store import write_quantized  # noqa: E402
from spanseek.core.io import atomic_path, load_squad, squad_questions, write_faiss, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.core.search import Searcher  # noqa: E402
from spanseek.indexer.faiss_index import (  # noqa: E402
    create_index,
    default_nprobe,
    parse_factory,
    train_index,
    training_size,
)
from spanseek.indexer.ondisk import add_on_disk, check_on_disk, save_trained_index  # noqa: E402
from spanseek.indexer.recall import exact_topk  # noqa: E402

NOISE_ROWS = 1 << 16


class Replicated:
    """Rows 0..n-1 of the base's vectors repeated; row i of replica r > 0 gets fixed noise (an (N, d) row source)."""

    def __init__(self, base: np.ndarray, n: int, noise: float, seed: int = 0):
        self.base, self.n0, self.n = base, len(base), n
        rng = np.random.default_rng(seed)
        sample = np.asarray(base[np.sort(rng.choice(self.n0, min(self.n0, 65536), replace=False))], np.float32)
        self.table = (rng.standard_normal((NOISE_ROWS, base.shape[1])) * noise * sample.std(0)).astype(np.float32)
        self.shape = (n, base.shape[1])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.arange(self.n)[rows] if isinstance(rows, slice) else np.asarray(rows, np.int64)
        x = np.asarray(self.base[rows % self.n0], np.float32)
        replica = rows // self.n0
        noisy = replica > 0
        x[noisy] += self.table[(rows[noisy] * 7919 + replica[noisy] * 104729) % NOISE_ROWS]
        return x


class PeakMemory:
    """Peak anonymous RSS (RssAnon: memory that cannot be dropped like page cache) and VmHWM, sampled."""

    def __init__(self):
        self.peak_anon, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_anon = max(self.peak_anon, self.status("RssAnon"))

    def reset(self) -> None:
        self.peak_anon = self.status("RssAnon")


def write_maps(base: phrase_index.PhraseIndex, out: Path, n: int) -> tuple[int, int]:
    """Token maps and passage / document stores of n tokens: whole base replicas, the last one cut at a passage
    end. Returns (tokens, passages)."""
    pt0 = np.asarray(base.passage_tokens)
    n0, p0 = int(pt0[-1]), len(pt0) - 1
    reps, rest = divmod(n, n0)
    cut = int(np.searchsorted(pt0, rest, side="right") - 1)  # whole passages of the last, partial replica
    counts = [p0] * reps + ([cut] if cut else [])
    n_tok = reps * n0 + int(pt0[cut])
    lengths = np.diff(pt0)
    passage_tokens = np.concatenate([[0], np.cumsum(np.concatenate([lengths[:c] for c in counts]))]).astype(np.int64)
    np.save(out / phrase_index.PASSAGE_TOKENS, passage_tokens)
    np.save(out / phrase_index.TOKEN_PASSAGE, np.repeat(np.arange(len(passage_tokens) - 1, dtype=np.int32),
                                                 np.diff(passage_tokens)))
    for name, arr in ((phrase_index.TOKEN_OFFSETS, base.token_offsets), (phrase_index.TOKEN_FLAGS, base.token_flags)):
        mm = np.lib.format.open_memmap(out / name, mode="w+", dtype=arr.dtype, shape=(n_tok, *arr.shape[1:]))
        for r, c in enumerate(counts):
            mm[r * n0 : r * n0 + int(pt0[c])] = arr[: int(pt0[c])]
        mm.flush()
        del mm
    with open(out / phrase_index.PASSAGES, "w", encoding="utf-8") as fp, open(out / phrase_index.DOCS, "w", encoding="utf-8") as fd:
        n_docs = len(base.docs)
        for r, c in enumerate(counts):
            for p in base.passages[:c]:
                fp.write(json.dumps({**p, "doc": p["doc"] + r * n_docs}, ensure_ascii=False) + "\n")
            last_doc = base.passages[c - 1]["doc"]
            for doc in base.docs[: last_doc + 1]:
                fd.write(json.dumps({**doc, "id": f"{doc['id']}#{r}"}, ensure_ascii=False) + "\n")
    return n_tok, len(passage_tokens) - 1


def build(base: phrase_index.PhraseIndex, out: Path, n: int, args, mem: PeakMemory) -> dict:
    """Build the n-token index in ``out`` stage by stage; returns seconds and peak anonymous RAM per stage."""
    import faiss

    stages: dict = {}

    def stage(name, fn):
        mem.reset()
        t0 = time.perf_counter()
        result = fn()
        stages[name] = {"seconds": round(time.perf_counter() - t0, 1), "peak_anon_gb": round(mem.peak_anon / 2**30, 2)}
        print(f"  {name}: {stages[name]}", flush=True)
        return result

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    n_tok, n_pass = stage("maps", lambda: write_maps(base, out, n))
    vecs = Replicated(base.vectors.data, n_tok, args.noise)
    dim = vecs.shape[1]
    nlist = args.nlist or max(1024, 2 ** round(np.log2(4 * np.sqrt(n_tok))))
    factory = args.factory.format(nlist=nlist)
    spec = parse_factory(factory)
    check_on_disk(spec)
    n_train = training_size(spec, n_tok, args.max_train)
    shared = Path(args.workdir) / f"trained-{hashlib.sha1(f'{factory} {n_train}'.encode()).hexdigest()[:12]}.faiss"
    if args.train_once and shared.is_file():  # the same quantisers for every size: training cost is paid once
        index = faiss.read_index(str(shared))
        stages["train"] = {"seconds": 0.0, "reused": str(shared)}
    else:
        index = create_index(spec, dim, contiguous_ids=True)
        stage("train", lambda: train_index(index, vecs, n_train))
        if args.train_once:
            write_faiss(index, shared)
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = default_nprobe(nlist)
    save_trained_index(out, index, "scale")
    ids = np.arange(n_tok, dtype=np.int64)
    stage("add (on-disk blocks + merge)", lambda: add_on_disk(index, vecs, ids, out, progress=False))
    stage("fine store", lambda: write_quantized(out, args.store, vecs, args.max_train))
    write_faiss(index, out / phrase_index.FAISS_INDEX)
    shutil.rmtree(out / "ivf_blocks", ignore_errors=True)
    fields = {**base.manifest.to_dict(), "factory": factory, "tokens": n_tok, "indexed_tokens": n_tok,
              "passages": n_pass, "documents": sum(1 for _ in open(out / phrase_index.DOCS, encoding="utf-8")),
              "fine_store": args.store, "lexical": None, "filter_threshold": None,
              "faiss_params": {"nlist": nlist, "nprobe": int(ivf.nprobe), "on_disk": True, "train_size": n_train,
                               "vector_source": "fine", "synthetic": f"replicas of {args.base}, noise {args.noise}"}}
    manifest = stage("manifest (checksums)", lambda: phrase_index.Manifest.create(out, fields))
    stages["build_seconds"] = round(sum(s["seconds"] for s in stages.values()), 1)
    with atomic_path(out / "build_stages.json") as tmp:
        tmp.write_text(json.dumps(stages))
    manifest.write(out)
    return stages


def measure(out: Path, base_searcher: Searcher, q_start, q_end, n_exact: int, args) -> dict:
    """q/s of phrase search and top-1 start-token agreement with exact inner-product search."""
    index = phrase_index.PhraseIndex(out, verify_checksums=False)
    searcher = Searcher(index, base_searcher.encoder)
    params = SearchParams(unit="phrase", top_k=10, mode="dense")
    searcher.search_vectors(q_start[:64], q_end[:64], params)  # warm-up
    t0 = time.perf_counter()
    for a in range(0, len(q_start), 64):
        searcher.search_vectors(q_start[a : a + 64], q_end[a : a + 64], params)
    qps = len(q_start) / (time.perf_counter() - t0)
    vecs = Replicated(base_searcher.index.vectors.data, index.num_tokens, args.noise)
    q = np.ascontiguousarray(q_start[:n_exact], np.float32)
    t1 = time.perf_counter()
    exact = exact_topk(vecs, np.arange(index.num_tokens), q, 1)[:, 0]
    exact_seconds = time.perf_counter() - t1
    approx = index.faiss.search(q, 1)[1][:, 0]
    n0 = len(base_searcher.index.vectors)  # replicas of one base token differ by the noise only
    disk = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    ram_files = (phrase_index.FAISS_INDEX, phrase_index.PASSAGES, phrase_index.DOCS)
    ram = sum((out / f).stat().st_size for f in ram_files) + 8 * len(index.passages)
    return {"tokens": index.num_tokens, "qps": round(qps, 1), "exact_sample": len(q),
            "top1_start_same_as_exact": round(float(np.mean(approx == exact)), 4),
            "top1_start_same_base_token": round(float(np.mean(approx % n0 == exact % n0)), 4),
            "exact_seconds": round(exact_seconds, 1),
            "disk_bytes_per_token": round(disk / index.num_tokens, 1),
            "ram_bytes_per_token": round(ram / index.num_tokens, 1),
            "ram_breakdown_bytes_per_token": {f: round((out / f).stat().st_size / index.num_tokens, 2)
                                              for f in ram_files}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="a built exact index whose fp16 vectors are replicated")
    p.add_argument("--model", default="default")
    p.add_argument("--questions", required=True)
    p.add_argument("--sizes", default="1000000,10000000,50000000")
    p.add_argument("--factory", default="IVF{nlist}_HNSW32,SQ8", help="{nlist} is filled in from the size")
    p.add_argument("--nlist", type=int, default=None)
    p.add_argument("--store", default="sq4", choices=["sq8", "sq4"])
    p.add_argument("--train-once", action="store_true",
                   help="train the quantisers on the first size's sample and reuse them for the larger sizes "
                        "(needs a fixed --nlist)")
    p.add_argument("--noise", type=float, default=0.05, help="noise std as a share of each dimension's std")
    p.add_argument("--max-train", type=int, default=131_072)
    p.add_argument("--limit-questions", type=int, default=512)
    p.add_argument("--exact-sample", type=int, default=100)
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.train_once and args.nlist is None:
        raise SystemExit("--train-once needs a fixed --nlist (the trained coarse quantiser is shared)")
    mem = PeakMemory()
    base_searcher = open_searcher(args.base, args.model)
    if base_searcher.index.manifest.fine_store != "fp16":
        raise SystemExit("--base must have an fp16 fine store")
    questions = sample_questions(squad_questions(load_squad(args.questions)), args.limit_questions)
    q_start, q_end = base_searcher.encoder.encode([q.question for q in questions])
    result = {"base": args.base, "factory": args.factory, "store": args.store, "noise": args.noise, "sizes": {}}
    if Path(args.out).is_file():
        result = {**result, **json.loads(Path(args.out).read_text())}
    for n in [int(x) for x in args.sizes.split(",")]:
        out = Path(args.workdir) / f"n{n}"
        print(f"{n} tokens -> {out}", flush=True)
        row = result["sizes"].get(str(n), {})
        if not (out / phrase_index.MANIFEST).is_file():
            row["stages"] = build(base_searcher.index, out, n, args, mem)
        elif (out / "build_stages.json").is_file():
            row["stages"] = json.loads((out / "build_stages.json").read_text())
        row.update(measure(out, base_searcher, q_start, q_end, args.exact_sample, args))
        row["vm_hwm_gb"] = round(PeakMemory.status("VmHWM") / 2**30, 2)
        result["sizes"][str(n)] = row
        print(json.dumps(row), flush=True)
        write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
