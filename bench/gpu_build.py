"""faiss index build on GPU vs CPU: training and adding time, same machine, same vectors, same factories.

    python bench/gpu_build.py --n 2000000 --out gpu-build.json
    python bench/gpu_build.py --vectors work/acc2m/Flat --out gpu-build-2m.json   # real token vectors

The vectors are synthetic and clustered (k-means and OPQ cost the same on any data of this shape; accuracy is not
the point here, the format is): ``--n`` token vectors of ``--dim`` floats around 20,000 centres. For each factory the
index is trained (``indexer.faiss_index.train_index``) and filled (``add_vectors``) once with ``gpu=False`` and
once with ``gpu=True``, both from the same training sample. ``--out`` is rewritten as each factory finishes. Reported per factory: seconds for each phase on each
device, the GPU speed-up, and recall@10 against exact inner-product search on 200 held-out queries for both builds
(the GPU build must give a CPU index of the same type and about the same recall).

``--devices cpu`` builds on the CPU alone (no speed-up; a check of the script on a host without a GPU).

``--vectors INDEX`` takes real token vectors instead: the fine store of an index (every token, or the first
``--n``), with 200 of them held out as the queries.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before faiss: spinning workers made CPU OPQ training crawl

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from spanseek.core.faiss_spec import ivf_of  # noqa: E402
from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.indexer.faiss_index import add_vectors, create_index, default_nprobe, parse_factory, train_index  # noqa: E402


def clustered(n: int, dim: int, centres: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim), dtype=np.float32) * 2.0
    out = np.empty((n, dim), dtype=np.float32)
    for a in range(0, n, 500_000):
        b = min(n, a + 500_000)
        out[a:b] = c[rng.integers(0, centres, b - a)] + rng.standard_normal((b - a, dim), dtype=np.float32)
    return out


def recall_at_10(index, queries: np.ndarray, truth: np.ndarray) -> float:
    _, ids = index.search(queries, 10)
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=None, help="vectors (default: 2M synthetic, or every stored token)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--vectors", default=None, help="an index directory whose fine-store vectors to build from")
    ap.add_argument("--factories", nargs="+", default=["IVF4096,SQ8", "IVF4096,PQ96x4fs", "OPQ96,IVF4096,PQ96x4fs"])
    ap.add_argument("--max-train", type=int, default=262_144)
    ap.add_argument("--devices", nargs="+", default=["cpu", "gpu"], choices=["cpu", "gpu"], help="where to build")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import faiss

    if args.vectors:
        from spanseek.core.phrase_index import PhraseIndex

        store = PhraseIndex(args.vectors, verify_checksums=False).vectors
        n = min(len(store), args.n) if args.n else len(store)
        rows = np.asarray(store[: n], dtype=np.float32)
        held = np.random.default_rng(0).choice(n, 200, replace=False)
        queries, x = rows[held], np.delete(rows, held, axis=0)
        args.n, args.dim = len(x), x.shape[1]
    else:
        args.n = args.n or 2_000_000
        x = clustered(args.n, args.dim, 20_000, seed=0)
        queries = clustered(200, args.dim, 20_000, seed=0)[:200] + 0.1
    flat = faiss.IndexFlatIP(args.dim)
    flat.add(x)
    _, truth = flat.search(queries, 10)
    del flat
    report = {
        "n": args.n, "dim": args.dim, "vectors": args.vectors or "synthetic, clustered", "max_train": args.max_train, "faiss": faiss.__version__,
        "gpus": faiss.get_num_gpus(), "cpu_threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count(),
        "machine": platform.node(), "factories": {},
    }
    ids = np.arange(args.n, dtype=np.int64)
    for factory in args.factories:
        row = {}
        for device in args.devices:
            index = create_index(factory, args.dim, contiguous_ids=True)
            train_s = train_index(index, x, args.max_train, seed=0, gpu=device == "gpu")
            t0 = time.perf_counter()
            add_vectors(index, x, ids, progress=False, gpu=device == "gpu")
            add_s = time.perf_counter() - t0
            nlist = parse_factory(factory).nlist
            if nlist:
                ivf_of(index).nprobe = default_nprobe(nlist)
            row[device] = {"train_s": round(train_s, 2), "add_s": round(add_s, 2),
                           "total_s": round(train_s + add_s, 2), "type": type(index).__name__,
                           "recall@10": round(recall_at_10(index, queries, truth), 3)}
            print(factory, device, row[device], flush=True)
            del index
        if {"cpu", "gpu"} <= row.keys():
            row["speedup"] = {k: round(row["cpu"][k] / max(row["gpu"][k], 1e-9), 1) for k in ("train_s", "add_s", "total_s")}
            print(factory, "GPU speed-up", row["speedup"], flush=True)
        report["factories"][factory] = row
        write_json_atomic(args.out, report)  # each factory as it finishes: a build cut by a deadline keeps the others
    print(json.dumps(report["factories"], indent=1))


if __name__ == "__main__":
    main()
