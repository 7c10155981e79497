"""Sec. 6.2 performance anomaly detection, throttling and core classes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from policies.oversubscription.anomaly import (
    AnomalyVerdict,
    Distribution,
    IndicatorSample,
    RunningSpeculativeTask,
    detect_anomaly,
    fit_cpi_baseline,
    fit_mpki_baseline,
    fit_psi_baseline,
    partition_cores,
    throttle,
)
from policies.oversubscription.config import OversubscriptionMode

from .builders import config

RP = OversubscriptionMode.RESPONSIVENESS
UP = OversubscriptionMode.UTILIZATION


def test_gamma_fit_recovers_cpi_distribution_and_3_sigma_bound() -> None:
    history = np.random.default_rng(0).gamma(shape=6.0, scale=0.25, size=4000)
    baseline = fit_cpi_baseline(history)
    assert baseline.distribution is Distribution.GAMMA
    assert baseline.shape == pytest.approx(6.0, rel=0.06)
    assert baseline.scale == pytest.approx(0.25, rel=0.06)
    fitted = stats.gamma(baseline.shape, scale=baseline.scale)
    assert baseline.upper_bound == pytest.approx(fitted.mean() + 3 * fitted.std())


def test_chi_square_fit_recovers_mpki_distribution() -> None:
    history = 0.5 * np.random.default_rng(1).chisquare(df=5.0, size=4000)
    baseline = fit_mpki_baseline(history)
    assert baseline.distribution is Distribution.CHI_SQUARE
    assert baseline.shape * baseline.scale == pytest.approx(2.5, rel=0.05)  # mean = df * scale
    assert baseline.std == pytest.approx(np.sqrt(2 * baseline.shape) * baseline.scale)


@pytest.mark.parametrize(("sample", "outlier"), [(1.5, False), (3.0, True)])
def test_samples_beyond_3_sigma_are_outliers(sample: float, outlier: bool) -> None:
    baseline = fit_cpi_baseline(np.random.default_rng(2).gamma(20.0, 0.075, 500))  # mean 1.5
    assert baseline.is_outlier(sample) is outlier


def test_psi_with_zero_readings_can_be_fitted() -> None:
    history = np.concatenate([np.zeros(20), np.random.default_rng(3).gamma(2.0, 1.0, 200)])
    baseline = fit_psi_baseline(history)
    assert baseline.upper_bound > baseline.mean > 0


@pytest.mark.parametrize(
    ("history", "message"),
    [([1.0] * 3, "at least 8"), ([2.0] * 10, "all equal"), ([0.0, -1.0] * 5, "positive")],
)
def test_unfittable_histories_are_named(history: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=f"history: .*{message}"):
        fit_cpi_baseline(history)


def _sample(name: str, value: float) -> IndicatorSample:
    return IndicatorSample(name, value, fit_cpi_baseline(np.linspace(1.0, 2.0, 50)))


@pytest.mark.parametrize(
    ("counters", "psi", "mode", "indicator"),
    [
        pytest.param([_sample("cpi", 9.0)], [], RP, "cpi", id="cpi outlier"),
        pytest.param([_sample("cpi", 1.5), _sample("mpki", 9.0)], [], RP, "mpki", id="mpki"),
        pytest.param([_sample("cpi", 1.5)], [_sample("psi", 9.0)], RP, "", id="psi unused"),
        pytest.param([], [_sample("psi", 9.0)], RP, "psi", id="psi without counters"),
        pytest.param([_sample("cpi", 9.0)], [], UP, "", id="throttle off in UP"),
    ],
)
def test_detect_anomaly(
    counters: list[IndicatorSample],
    psi: list[IndicatorSample],
    mode: OversubscriptionMode,
    indicator: str,
) -> None:
    verdict = detect_anomaly(counters, psi, config(mode=mode))
    assert verdict.anomalous is bool(indicator)
    assert verdict.indicator == indicator


TASKS = [
    RunningSpeculativeTask("second-early", cores=(6,), progress=0.1),
    RunningSpeculativeTask("first-late", cores=(0,), progress=0.9),
    RunningSpeculativeTask("first-early", cores=(1, 2), progress=0.2),
    RunningSpeculativeTask("second-late", cores=(7,), progress=0.8),
]


@pytest.mark.parametrize(
    ("cores_to_free", "expected"),
    [
        (None, ("first-early", "first-late", "second-early", "second-late")),
        (2, ("first-early",)),
        (3, ("first-early", "first-late")),
        (4, ("first-early", "first-late", "second-early")),
    ],
)
def test_throttle_preempts_first_class_then_least_progress(
    cores_to_free: int | None, expected: tuple[str, ...]
) -> None:
    classes = partition_cores(8, lra_cores=3, config=config(mode=RP, slack_cores=1))
    decision = throttle(
        AnomalyVerdict(True, "cpi", 9.0, 2.0),
        TASKS,
        classes,
        config(mode=RP),
        cores_to_free=cores_to_free,
    )
    assert decision.block_queue
    assert decision.preempt == expected


@pytest.mark.parametrize(
    ("verdict", "mode"),
    [(AnomalyVerdict(False), RP), (AnomalyVerdict(True, "cpi", 9.0, 2.0), UP)],
)
def test_no_throttle_without_anomaly_or_in_up(
    verdict: AnomalyVerdict, mode: OversubscriptionMode
) -> None:
    classes = partition_cores(8, 3, config(mode=mode))
    decision = throttle(verdict, TASKS, classes, config(mode=mode))
    assert not decision.block_queue and decision.preempt == ()


@pytest.mark.parametrize(
    ("total", "lra", "slack", "mode", "first"),
    [
        (8, 3, 1, RP, (0, 1, 2, 3)),
        (4, 5, 1, RP, (0, 1, 2, 3)),
        (8, 3, 1, UP, ()),
    ],
)
def test_core_classes(
    total: int, lra: int, slack: int, mode: OversubscriptionMode, first: tuple[int, ...]
) -> None:
    classes = partition_cores(total, lra, config(mode=mode, slack_cores=slack))
    assert classes.first_class == first
    assert set(classes.first_class) | set(classes.second_class) == set(range(total))
    assert classes.speculative_cpuset == (classes.second_class or classes.first_class)
