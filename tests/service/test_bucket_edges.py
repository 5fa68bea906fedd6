"""The histograms' bucket edges are pinned: fixed constants, the same whatever the settings, and a superset of every
edge set an earlier version exported, so that ``histogram_quantile`` over the sum of replicas of two versions (a
rolling deploy) still reads each quantile within the right bucket.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from spanseek.service.metrics import ServiceMetrics

INF = float("inf")
LATENCY = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.075, 0.08, 0.1, 0.125,
           0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.75, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0,
           20.0, 30.0)
WRITE = (*LATENCY, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1200.0, 1800.0)
MERGE = (1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0,
         1200.0, 1800.0, 2700.0, 3600.0, 7200.0)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# the exported histogram -> its labels for one series, and its edges (+Inf apart)
PINNED = {
    "spanseek_request_duration_seconds": ({"unit": "phrase", "status": "200", "read": "false"}, LATENCY),
    "spanseek_stage_duration_seconds": ({"stage": "encode"}, LATENCY),
    "spanseek_write_step_duration_seconds": ({}, LATENCY),
    "spanseek_write_visible_seconds": ({}, WRITE),
    "spanseek_write_step_wait_seconds": ({}, WRITE),
    "spanseek_merge_duration_seconds": ({"outcome": "ok"}, MERGE),
    "spanseek_batch_size": ({}, BATCH),
}
# the edges of earlier versions: the first latency buckets (10% to 150% apart), and the 25% steps without the
# edges of the first set that they had moved; write waits ended at 60 s
FIRST_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0)
STEPS_25 = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.125, 0.15, 0.2,
            0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0)
EARLIER = {
    "spanseek_request_duration_seconds": [FIRST_LATENCY, STEPS_25],
    "spanseek_stage_duration_seconds": [FIRST_LATENCY, STEPS_25],
    "spanseek_write_step_duration_seconds": [STEPS_25],
    "spanseek_write_visible_seconds": [FIRST_LATENCY, STEPS_25],
    "spanseek_write_step_wait_seconds": [(*STEPS_25, 60.0)],
    "spanseek_batch_size": [(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)],
}


def exported_edges(metrics: ServiceMetrics, name: str, labels: dict[str, str]) -> tuple[float, ...]:
    """The finite ``le`` edges the registry exports for ``name``'s series with ``labels``."""
    return tuple(float(s.labels["le"]) for family in metrics.registry.collect() for s in family.samples
                 if s.name == f"{name}_bucket" and s.labels == {**labels, "le": s.labels["le"]}
                 and s.labels["le"] != "+Inf")


def observed(metrics: ServiceMetrics, name: str, labels: dict[str, str]):
    """The collector of ``name`` (its child for ``labels``), found by the name it exports."""
    collector = next(c for c in vars(metrics).values() if getattr(c, "_name", None) == name)
    return collector.labels(**labels) if labels else collector


@pytest.mark.parametrize("name", sorted(PINNED))
def test_bucket_edges_are_pinned(name):
    """Changing an edge breaks quantiles summed over replicas during a rolling deploy: it has to be deliberate, here
    and in the docs (docs/service.md, "Metrics")."""
    labels, edges = PINNED[name]
    metrics = ServiceMetrics()
    observed(metrics, name, labels).observe(0.5)
    assert exported_edges(metrics, name, labels) == edges


def test_bucket_edges_depend_on_no_setting():
    """The registry is built from nothing but constants: no setting can give two replicas different edges."""
    assert list(inspect.signature(ServiceMetrics).parameters) == []


@pytest.mark.parametrize("name", sorted(EARLIER))
def test_bucket_edges_keep_every_earlier_edge(name):
    labels = PINNED[name][0]
    metrics = ServiceMetrics()
    observed(metrics, name, labels).observe(0.5)
    now = set(exported_edges(metrics, name, labels))
    assert [set(old) - now for old in EARLIER[name]] == [set()] * len(EARLIER[name])


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' ``histogram_quantile`` (promql/quantile.go): counts made monotonic, then linear interpolation in
    the bucket that holds the rank."""
    edges = sorted(buckets)
    counts = list(np.maximum.accumulate([buckets[e] for e in edges]))
    rank = q * counts[-1]
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if edges[b] == INF:
        return edges[-2]
    start, below = (0.0, 0.0) if b == 0 else (edges[b - 1], counts[b - 1])
    return start + (edges[b] - start) * (rank - below) / (counts[b] - below)


def cumulative(latencies: np.ndarray, edges: tuple[float, ...]) -> dict[float, float]:
    ordered = np.sort(latencies)
    return {e: float(np.searchsorted(ordered, e, side="right")) for e in (*edges, INF)}


@pytest.mark.parametrize("median", [0.02, 0.05, 0.1, 0.2, 0.4, 0.8])
@pytest.mark.parametrize("earlier", [FIRST_LATENCY, STEPS_25], ids=["first", "steps_25"])
def test_a_rolling_deploy_reads_each_quantile_within_the_earlier_edges_bucket(median, earlier):
    """One replica of an earlier version and one of this, the same load on both, their buckets summed by ``le``
    as the dashboard and the alert do: each quantile lies in the bucket of the earlier edges that holds the true
    one. With the 25% steps beside the first edges (which they did not keep), p50 of searches around 20 ms read
    40 ms (0.025 s was an edge of the old replica only), and p99 of searches around 0.2 s (0.52 s) read 0.84 s."""
    rng = np.random.default_rng(0)
    old, new = (median * np.exp(rng.normal(0, 0.4, 5000)) for _ in range(2))
    metrics = ServiceMetrics()
    for seconds in new:
        metrics.request_duration.labels(unit="phrase", status="200", read="false").observe(float(seconds))
    a = cumulative(old, earlier)
    b = {float(s.labels["le"]): s.value for family in metrics.registry.collect() for s in family.samples
         if s.name == "spanseek_request_duration_seconds_bucket"}
    summed = {e: a.get(e, 0.0) + b.get(e, 0.0) for e in {*a, *b}}
    bounds = (0.0, *earlier, INF)
    for q in (0.5, 0.95, 0.99):
        true = float(np.quantile(np.concatenate([old, new]), q))
        i = int(np.searchsorted(bounds, true))  # bounds[i - 1] < true <= bounds[i]
        assert bounds[i - 1] <= histogram_quantile(q, summed) <= bounds[i], q


def test_batch_size_buckets_reach_the_largest_batch_the_settings_allow():
    """A batch past the last edge counts in +Inf only, and ``histogram_quantile`` reads it as that edge."""
    from annotated_types import Le

    from spanseek.service.settings import Settings

    largest = next(m.le for m in Settings.model_fields["max_batch_size"].metadata if isinstance(m, Le))
    metrics = ServiceMetrics()
    metrics.batch_size.observe(largest)
    assert exported_edges(metrics, "spanseek_batch_size", {})[-1] >= largest
