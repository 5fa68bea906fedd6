"""What p99 latency at half load can a micro-batching service reach, given what a batch costs?

    python bench/queue_model.py --fixed-ms 16.3 --per-question-ms 3.3       # 2-core CPU, demo index, bf16
    python bench/queue_model.py --fixed-ms 25 --per-question-ms 0.2 --max-batch-size 64 --out queue.json

A discrete-event simulation of the service's batcher (``service/batcher.py``). Requests arrive as a Poisson
stream, a batch takes everything waiting (up to --max-batch-size) once the worker is free, and an idle worker
first waits --max-wait-ms for company. A batch of k questions costs ``fixed + k * per_question``. The arrival
rate is half the saturation rate of that cost model, which is how ``bench/service_load.py`` loads the real
service. It prints p50 and p99 latency at that load as multiples of the single-request latency
(fixed + per_question + max_wait), the tail the service aims to keep under 3 times a lone request.

The two costs come from the raw pipeline: time one batch of 1 and one of 8 questions (the batch sizes half load
runs at). Where per-question cost is a fifth of the fixed cost or more (a CPU encoding each question), the ratio
stays near 3-5 for any wait setting, because Poisson bursts queue behind whole batches. When a batch costs about
the same at any size (a GPU), it falls under 3. The simulation leaves out the HTTP work that shares the cores,
so on a small CPU host the measured ratio is higher again.
"""

from __future__ import annotations

import argparse
import json
import random

from spanseek.core.io import write_json_atomic


def simulate(fixed: float, per_q: float, rate: float, max_batch: int, wait: float, n: int = 200_000,
             seed: int = 0) -> list[float]:
    """Latencies (seconds) of ``n`` Poisson arrivals at ``rate``/s through a one-worker batcher."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    latencies, free, i = [], 0.0, 0
    while i < n:
        start = arrivals[i] + wait if arrivals[i] >= free else free  # an idle worker waits for company
        j = i
        while j < n and arrivals[j] <= start and j - i < max_batch:
            j += 1
        end = start + fixed + per_q * (j - i)
        latencies += [end - a for a in arrivals[i:j]]
        free, i = end, j
    return sorted(latencies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed-ms", type=float, required=True, help="cost of a batch independent of its size")
    ap.add_argument("--per-question-ms", type=float, required=True, help="added cost of each question in a batch")
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--waits-ms", default="0,2,5,10", help="max_wait_ms values to compare")
    ap.add_argument("--load", type=float, default=0.5, help="arrival rate as a fraction of saturation")
    ap.add_argument("--arrivals", type=int, default=200_000, help="simulated requests per wait setting")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    fixed, per_q = args.fixed_ms / 1000, args.per_question_ms / 1000
    saturation = args.max_batch_size / (fixed + args.max_batch_size * per_q)
    rows = []
    for w in (float(x) / 1000 for x in args.waits_ms.split(",")):
        lat = simulate(fixed, per_q, args.load * saturation, args.max_batch_size, w, args.arrivals)
        single = fixed + per_q + w
        rows.append({"max_wait_ms": w * 1000, "single_ms": round(single * 1000, 1),
                     "p50_over_single": round(lat[len(lat) // 2] / single, 2),
                     "p99_over_single": round(lat[int(len(lat) * 0.99)] / single, 2)})
    result = {"saturation_qps": round(saturation, 1), "rate_qps": round(args.load * saturation, 1), "rows": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
