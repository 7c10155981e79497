"""A latency-sensitive service's watch: the indicator histories, the 3-sigma detector on them
(ROSE Sec. 6.2), and its probe's latency."""

from __future__ import annotations

import math
import random

import pytest

from node_agent.service_probe import ProbeResult
from node_agent.service_watch import MIN_SAMPLES, ServiceWatch
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode

RP = OversubscriptionConfig(mode=OversubscriptionMode.RESPONSIVENESS)
UP = OversubscriptionConfig(mode=OversubscriptionMode.UTILIZATION)


def trained(*names: str, samples: int = MIN_SAMPLES + 20) -> ServiceWatch:
    """A watch that has seen quiet samples of the indicators (gamma noise around 2)."""
    rng = random.Random(7)
    watch = ServiceWatch("job-1/server-0/1")
    for _ in range(samples):
        assert not watch.observe({n: rng.gammavariate(8.0, 0.25) for n in names}, RP).anomalous
    return watch


def test_nothing_is_judged_before_the_history_is_long_enough():
    watch = trained("psi_cpu", samples=MIN_SAMPLES - 1)
    assert not watch.observe({"psi_cpu": 1e6}, RP).anomalous


@pytest.mark.parametrize(
    ("indicators", "sample", "config", "indicator"),
    [
        (("psi_cpu",), {"psi_cpu": 50.0}, RP, "psi_cpu"),  # no counters: PSI is judged
        (("psi_cpu",), {"psi_cpu": 2.0}, RP, ""),
        (("psi_cpu",), {"psi_cpu": 50.0}, UP, ""),  # UP: the throttle is off
        (("cpi", "mpki", "psi_cpu"), {"cpi": 50.0, "mpki": 2.0, "psi_cpu": 2.0}, RP, "cpi"),
        (("cpi", "mpki", "psi_cpu"), {"cpi": 2.0, "mpki": 40.0, "psi_cpu": 2.0}, RP, "mpki"),
        # with counters, PSI alone does not decide
        (("cpi", "mpki", "psi_cpu"), {"cpi": 2.0, "mpki": 2.0, "psi_cpu": 50.0}, RP, ""),
    ],
)
def test_a_sample_beyond_three_sigma_of_its_fitted_history_is_an_anomaly(
    indicators: tuple[str, ...],
    sample: dict[str, float],
    config: OversubscriptionConfig,
    indicator: str,
):
    watch = trained(*indicators)
    verdict = watch.observe(sample, config)
    assert verdict.anomalous is bool(indicator) and verdict.indicator == indicator
    if indicator:
        assert verdict.value == sample[indicator] > verdict.bound


def test_interference_does_not_become_the_baseline():
    watch = trained("psi_cpu")
    bound = watch.histories["psi_cpu"].baseline.upper_bound  # type: ignore[union-attr]
    for _ in range(200):  # a long episode of interference
        assert watch.observe({"psi_cpu": 60.0}, RP).anomalous
    assert watch.histories["psi_cpu"].baseline.upper_bound == bound  # type: ignore[union-attr]


def test_unknown_and_missing_values_are_left_out():
    watch = trained("psi_cpu")
    assert not watch.observe({"psi_cpu": math.nan, "temperature": 99.0}, RP).anomalous
    assert set(watch.histories) == {"psi_cpu"}


def test_the_probe_gives_latency_percentiles_and_counts_failures():
    watch = ServiceWatch("job-1/server-0/1")
    assert math.isnan(watch.latency_percentile(95))
    for millis in range(1, 101):
        watch.record_probe(ProbeResult(millis / 1000))
    watch.record_probe(ProbeResult(None, "HTTP status 503"))
    assert watch.latency_percentile(50) == pytest.approx(0.0505)
    assert watch.latency_percentile(95) == pytest.approx(0.09505)
    assert (watch.probe_failures, watch.last_problem) == (1, "HTTP status 503")


@pytest.mark.parametrize(
    ("history", "sample", "anomalous"),
    [
        ([0.0] * MIN_SAMPLES, 2.9, False),  # a quiet machine: the bound is 0 + 3 x 1 point
        ([0.0] * MIN_SAMPLES, 3.5, True),
        ([0.0] * (MIN_SAMPLES - 1) + [0.1], 2.5, False),  # barely varying: the floor holds
        ([0.0] * (MIN_SAMPLES - 1) + [0.1], 40.0, True),
    ],
)
def test_a_psi_history_that_barely_varies_is_judged_with_a_one_point_sigma(
    history: list[float], sample: float, anomalous: bool
):
    watch = ServiceWatch("job-1/server-0/1")
    for value in history:
        watch.observe({"psi_cpu": value}, RP)
    assert watch.judging
    assert watch.observe({"psi_cpu": sample}, RP).anomalous is anomalous
