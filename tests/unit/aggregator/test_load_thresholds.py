"""The aggregator's ``--load-threshold METRIC=FRACTION`` flag."""

from __future__ import annotations

import math

import pytest

from aggregator.daemon import load_thresholds_of
from policies.oversubscription.config import LOAD_METRICS, OversubscriptionConfig

DEFAULTS = OversubscriptionConfig().load_thresholds


def at(thresholds: tuple[float, ...], metric: str) -> float:
    return thresholds[LOAD_METRICS.index(metric)]


def test_no_override_keeps_the_defaults() -> None:
    assert load_thresholds_of([]) == DEFAULTS


@pytest.mark.parametrize(
    ("overrides", "metric", "expected"),
    [
        (["cpu_ut=0.75"], "cpu_ut", 0.75),
        (["load_avg_1=off"], "load_avg_1", math.inf),
        (["disk_usage=INF"], "disk_usage", math.inf),
        (["cpu_ut=0.5", "cpu_ut=0.7"], "cpu_ut", 0.7),  # the last one wins
        (["load_avg_1=2"], "load_avg_1", 2.0),  # load may exceed the core count
    ],
)
def test_an_override_changes_only_its_metric(
    overrides: list[str], metric: str, expected: float
) -> None:
    thresholds = load_thresholds_of(overrides)
    assert at(thresholds, metric) == expected
    others = [i for i, name in enumerate(LOAD_METRICS) if name != metric]
    assert [thresholds[i] for i in others] == [DEFAULTS[i] for i in others]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("cpu_ut", "expected METRIC=FRACTION"),
        ("cpu=0.5", "expected METRIC=FRACTION"),
        ("cpu_ut=high", "cpu_ut must be a positive fraction or 'off', got 'high'"),
        ("cpu_ut=0", "cpu_ut must be a positive fraction"),
        ("cpu_ut=-1", "cpu_ut must be a positive fraction"),
        ("cpu_ut=nan", "cpu_ut must be a positive fraction"),
    ],
)
def test_a_bad_entry_names_the_flag(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^--load-threshold: ") as error:
        load_thresholds_of([entry])
    assert message in str(error.value)
