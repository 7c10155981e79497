"""The ROSE knobs: paper defaults, validation, and the UP/RP switch."""

from __future__ import annotations

import math

import pytest

from policies.oversubscription.config import (
    LOAD_METRICS,
    QUEUE_METRICS,
    OversubscriptionConfig,
    OversubscriptionMode,
)


def test_paper_defaults() -> None:
    cfg = OversubscriptionConfig()
    assert cfg.lla_segments == 5  # Alg. 1 "default value is 5"
    assert cfg.tukey_fence == 1.5  # Alg. 2 "customarily p is 1.5"
    assert cfg.upgrade_progress_threshold == 0.6  # Alg. 5 "e.g., 60 percent"
    assert cfg.anomaly_sigmas == 3.0  # Sec. 6.2 "3 sigma"
    assert cfg.load_metrics == LOAD_METRICS and len(LOAD_METRICS) == 8  # Table 2
    assert cfg.queue_metrics == QUEUE_METRICS == ("rc_am", "oc_w_am", "oc_r_am")
    assert cfg.load_thresholds[LOAD_METRICS.index("disk_ut")] == 0.6  # Sec. 6.4
    assert cfg.mode is OversubscriptionMode.UTILIZATION
    assert not cfg.is_responsiveness_prioritized


@pytest.mark.parametrize(("factor", "limit", "size"), [(1.0, 10, 10), (2.0, 100, 200), (1.5, 3, 5)])
def test_prefilter_size_is_d_times_l_max(factor: float, limit: int, size: int) -> None:
    cfg = OversubscriptionConfig(prefilter_factor=factor, candidate_limit=limit)
    assert cfg.prefilter_size == size


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lla_segments", 0, "lla_segments: must be a positive integer"),
        ("tukey_fence", -1.0, "tukey_fence"),
        ("load_weights", (1.0,), "load_weights: expected 8 values"),
        ("load_thresholds", (math.nan,) * 8, "load_thresholds"),
        ("queue_metrics", ("a", "a", "b"), "queue_metrics: metric names must be unique"),
        ("candidate_limit", 0, "candidate_limit"),
        ("prefilter_factor", 0.5, "prefilter_factor"),
        ("rating_decay", 0.0, "rating_decay"),
        ("admission_thresholds", (0.9,), "admission_thresholds: expected 3"),
        ("oversubscription_quota", (0.4, 1.2, 0.4), "oversubscription_quota"),
        ("upgrade_progress_threshold", 1.5, "upgrade_progress_threshold"),
        ("queue_timeout_s", 0.0, "queue_timeout_s"),
        ("counter_blacklist_size", True, "counter_blacklist_size"),
    ],
)
def test_invalid_knobs_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OversubscriptionConfig(**{field: value})  # type: ignore[arg-type]
