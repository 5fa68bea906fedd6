"""Search on the GPU vs on the CPU, same index, same question vectors: agreement, accuracy and questions/s.

    python bench/gpu_search.py --index work/acc2m/Flat --model default --questions runs/validation.json.gz \
        --limit 2000 --out bench/results/gpu_search.json
    python bench/gpu_search.py --index work/acc2m/OPQ96_IVF2048_HNSW32_PQ96-pq192 ...   # quantiser on the GPU

One PhraseIndex is searched twice: by a CPU Searcher and by one with ``core.gpu.place``'s parts (``--device
cuda``: the token index or its coarse quantiser and the fine vectors in GPU memory). The questions are encoded once
and both searchers get the same vectors, so every difference comes from search. Reported per unit (phrase,
passage, doc; dense mode, batches of ``--batch``): the share of questions whose top hit is the same on both, and
whose top-5 are the same set; phrase EM@1 and passage / doc acc@5 on each; questions/s on each after a warm-up
batch, their ratio, and the search stage's seconds per batch. With a filter (``--filter-docs N``: only the first N
documents) the GPU index part hands the search to the CPU (faiss GPU indexes ignore selectors), which the row
shows.

``--device cpu`` runs the same code path with the parts on the CPU (vectors in a torch tensor, the coarse
quantiser as an exact flat index): a check of the script and of the path, not a speed measurement.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch/faiss: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ helpers, even under PYTHONSAFEPATH
from machine import cpu_name  # noqa: E402

from spanseek.core.evaluate import sample_questions  # noqa: E402
from spanseek.core.gpu import DeviceIndex, DeviceVectors, OnDevice, place  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.metrics import exact_match, passage_has_answer  # noqa: E402
from spanseek.core.params import SearchFilter, SearchParams, Unit  # noqa: E402
from spanseek.core.plan import StageTimes  # noqa: E402
from spanseek.core.search import Searcher  # noqa: E402


def on_cpu_parts(searcher: Searcher) -> OnDevice:
    """The GPU code path with its parts on the CPU (``--device cpu``)."""
    index = searcher.index
    part = DeviceIndex(index.faiss, "quantizer", None, index.default_nprobe) if index.default_nprobe else None
    return OnDevice("cpu", part, DeviceVectors(index.vectors, "cpu"))


def run_unit(searcher: Searcher, q_start: np.ndarray, q_end: np.ndarray, params: SearchParams, batch: int):
    """(hits per question, questions/s, search seconds per batch), after one warm-up batch."""
    searcher.search_vectors(q_start[:batch], q_end[:batch], params)
    hits, timings = [], StageTimes()
    t0 = time.perf_counter()
    for a in range(0, len(q_start), batch):
        hits += searcher.search_vectors(q_start[a : a + batch], q_end[a : a + batch], params, timings)
    seconds = time.perf_counter() - t0
    batches = -(-len(q_start) // batch)
    return hits, len(q_start) / seconds, timings.search / batches


def accuracy(unit: Unit, hits, questions) -> float:
    if unit == "phrase":
        return 100 * float(np.mean([exact_match(h[0].text if h else "", q.answers) for h, q in zip(hits, questions, strict=True)]))
    return 100 * float(np.mean([any(passage_has_answer(x.passage, q.answers) for x in h[:5])
                                for h, q in zip(hits, questions, strict=True)]))


def key(unit: Unit, hit) -> tuple:
    return (hit.passage_id, hit.start, hit.end) if unit == "phrase" else (hit.passage_id,) if unit == "passage" else (hit.doc_id,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--questions", required=True, help="SQuAD-format JSON(.gz); questions of indexed passages are used")
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the same code path on the CPU)")
    ap.add_argument("--filter-docs", type=int, default=0, help="also search with a filter to the first N documents")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    cpu = open_searcher(args.index, args.model, search_device="cpu")
    index = cpu.index
    on = on_cpu_parts(cpu) if args.device == "cpu" else place(index, args.device)
    if on is None:
        raise SystemExit(f"search cannot use {args.device} here (the log says why)")
    moved = Searcher(index, cpu.encoder, on_device=on, calibrator=cpu.calibrator)
    indexed = {(index.docs[p["doc"]]["title"], p["text"]) for p in index.passages}
    pool = [q for q in squad_questions(load_squad(args.questions)) if (q.title, q.context) in indexed]
    questions = sample_questions(pool, args.limit)
    q_start, q_end = cpu.encoder.encode([q.question for q in questions])

    runs: list[tuple[str, SearchParams]] = [
        (u, SearchParams(unit=u, top_k=10 if u == "phrase" else 5, mode="dense")) for u in ("phrase", "passage", "doc")]
    if args.filter_docs:
        flt = SearchFilter(doc_ids=tuple(d["id"] for d in index.docs[: args.filter_docs]))
        runs.append(("passage", SearchParams(unit="passage", top_k=5, mode="dense", filter=flt)))
    rows = []
    for unit, params in runs:
        got = {}
        for name, searcher in (("cpu", cpu), ("device", moved)):
            hits, qps, search_s = run_unit(searcher, q_start, q_end, params, args.batch)
            got[name] = (hits, qps, search_s)
        (h_cpu, qps_cpu, s_cpu), (h_dev, qps_dev, s_dev) = got["cpu"], got["device"]
        top1 = np.mean([bool(a) == bool(b) and (not a or key(unit, a[0]) == key(unit, b[0]))
                        for a, b in zip(h_cpu, h_dev, strict=True)])
        top5 = np.mean([{key(unit, x) for x in a[:5]} == {key(unit, x) for x in b[:5]}
                        for a, b in zip(h_cpu, h_dev, strict=True)])
        row = {"unit": unit, "filter": params.filter is not None, "top1_same": round(100 * float(top1), 2),
               "top5_same": round(100 * float(top5), 2),
               "accuracy_cpu": round(accuracy(unit, h_cpu, questions), 2),
               "accuracy_device": round(accuracy(unit, h_dev, questions), 2),
               "qps_cpu": round(qps_cpu, 1), "qps_device": round(qps_dev, 1), "device_x_cpu": round(qps_dev / qps_cpu, 2),
               "search_s_per_batch_cpu": round(s_cpu, 4), "search_s_per_batch_device": round(s_dev, 4)}
        rows.append(row)
        print(row, flush=True)
        device_name = "cpu"
        if on.device.startswith("cuda"):
            import torch

            device_name = torch.cuda.get_device_name(on.device)
        write_json_atomic(args.out, {
            "index": str(args.index), "factory": index.manifest.factory, "fine_store": index.manifest.fine_store,
            "tokens": index.manifest.tokens, "questions": len(questions), "batch": args.batch,
            "placement": on.describe(), "device": device_name, "cpu": cpu_name(), "cpus": os.cpu_count(),
            "accuracy": "phrase: EM@1; passage, doc: acc@5", "rows": rows})


if __name__ == "__main__":
    main()
