"""``metrics.BatchHistogram`` (the lines' latencies, observed a batch at a time) exposes what prometheus_client's
own ``Histogram`` does for the same values: the same bucket, count and sum samples, the same text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gatekeeper.metrics import LATENCY_BUCKETS, BatchHistogram

values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False) | st.sampled_from(LATENCY_BUCKETS)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.lists(values, max_size=20)), max_size=6))
def test_it_says_what_prometheus_client_s_histogram_says(batches: list[tuple[str, list[float]]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("gatekeeper_line_seconds", "One line.", LATENCY_BUCKETS, ours)
    single = Histogram("gatekeeper_line_seconds", "One line.", ["route"], buckets=LATENCY_BUCKETS, registry=theirs)
    for route, seen in batches:
        batch.observe_all(route, seen)
        for v in seen:
            single.labels(route).observe(v)
    want = _samples(theirs)
    got = _samples(ours)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)), k  # a sum may add up in another order
    text = [ln for ln in generate_latest(theirs).decode().splitlines() if "_created" not in ln and "_sum" not in ln]
    assert [ln for ln in generate_latest(ours).decode().splitlines() if "_sum" not in ln] == text
