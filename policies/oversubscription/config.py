"""Every knob of performance-aware speculative oversubscription (ROSE, 004_ede694cf5a6a6a3b).

One frozen dataclass holds them all, with the paper's values where the paper gives one and a
documented choice where it does not. ``mode`` is the UP/RP global switch of Sec. 3.3: it changes
exactly what the paper ties to RP and nothing else:

* Sec. 3.3 and Alg. 4 lines 7-10 — the aggregator reads machine CPI/MPKI ("for RP
  oversubscription, machine-level performance counters are also included") and builds
  blacklist B0 (top-K machines by CPI and by MPKI) only in RP;
* Sec. 6.2 — the performance-aware throttle (anomaly detection, queue blocking, preemption) runs
  only in RP ("in batch-only scenario, the throttle will be turned off");
* Sec. 6.2 — protective core classes (first-class cores for LRAs) exist only in RP.

Invalid values raise ``ValueError("field: problem")``; callers that read user files turn that into
a ``UserError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class OversubscriptionMode(StrEnum):
    """The global co-location switch (Sec. 3.1, 3.3)."""

    UTILIZATION = "up"  # batch-only co-location: aggressive, throttle off
    RESPONSIVENESS = "rp"  # batch + LRA co-location: counters, B0 and throttle on


# Table 2, loadFilter and queueFilter dimensions, in the paper's order.
LOAD_METRICS: tuple[str, ...] = (
    "cpu_ut",
    "mem_ut",
    "load_avg_1",
    "disk_s_ut",
    "disk_ut",
    "disk_usage",
    "net_rec_ut",
    "net_tra_ut",
)
QUEUE_METRICS: tuple[str, ...] = ("rc_am", "oc_w_am", "oc_r_am")

# Sec. 6.4 gives "at most 60 percent disk utilization" as a starting threshold; the other load
# thresholds are not given by the paper and default to 90 % of the machine's capacity.
_DEFAULT_LOAD_THRESHOLDS: tuple[float, ...] = (0.9, 0.9, 0.9, 0.9, 0.6, 0.9, 0.9, 0.9)


@dataclass(frozen=True)
class OversubscriptionConfig:
    """All ROSE knobs. Field docs name the paper's symbol and where it is used.

    Load thresholds are fractions of the machine's own capacity; queue thresholds are counts.
    A threshold of ``math.inf`` disables the check for that dimension.
    """

    mode: OversubscriptionMode = OversubscriptionMode.UTILIZATION
    # Alg. 1: k, the number of segments ("pre-defined granularity of accuracy", default 5).
    lla_segments: int = 5
    # Alg. 2: p, the Tukey fence multiplier ("customarily p is 1.5").
    tukey_fence: float = 1.5
    # Alg. 4 / Table 2: loadFilter dimensions, their weights and B3 thresholds.
    load_metrics: tuple[str, ...] = LOAD_METRICS
    load_weights: tuple[float, ...] = (1.0,) * len(LOAD_METRICS)
    load_thresholds: tuple[float, ...] = _DEFAULT_LOAD_THRESHOLDS
    # Alg. 4 / Table 2: queueFilter dimensions, their weights and B3 thresholds (counts).
    queue_metrics: tuple[str, ...] = QUEUE_METRICS
    queue_weights: tuple[float, ...] = (1.0,) * len(QUEUE_METRICS)
    queue_thresholds: tuple[float, ...] = (math.inf, 20.0, math.inf)
    # Alg. 4 lines 8-9: K of topK_descend(CPI) and topK_descend(MPKI) (RP only). Not in the paper.
    counter_blacklist_size: int = 10
    # Alg. 4 line 11: K of topK_ascend(MachScore). Not in the paper.
    rating_blacklist_size: int = 10
    # Alg. 4 lines 24-25: L_max and d (the load pre-filter keeps d * L_max). d is not in the paper.
    candidate_limit: int = 100
    prefilter_factor: float = 2.0
    # Alg. 3 line 9: K of topK(penaltyScore) per job master. Not in the paper.
    rating_top_k: int = 50
    # Extension (issue 4): scores are multiplied by this before each round so a machine recovers;
    # 1.0 reproduces Alg. 3 exactly (no decay).
    rating_decay: float = 1.0
    # Sec. 6.1: per-resource launch thresholds (utilisation) and oversubscription quota
    # (fraction of capacity usable by speculative tasks; Sec. 6.4 suggests starting at 10 %
    # memory), and the maximum node queue length.
    admission_resources: tuple[str, ...] = ("cpu", "memory", "disk")
    admission_thresholds: tuple[float, ...] = (0.9, 0.9, 0.6)
    oversubscription_quota: tuple[float, ...] = (0.4, 0.1, 0.4)
    max_queue_length: int = 20
    # Sec. 6.2: the "3 sigma" outlier bound and the LRA slack cores of the first class.
    anomaly_sigmas: float = 3.0
    slack_cores: int = 1
    # Sec. 6.2 blocks the queue "temporarily"; how long is not in the paper.  The queue stays
    # blocked this many seconds after the last anomalous sample, so the tasks it evicted do
    # not come straight back and stall the service again.
    throttle_hold_s: float = 10.0
    # Not in the paper: after speculative tasks were evicted to give a regular task its memory,
    # admission is held at least this long, and until the live tasks' memory limits leave the
    # speculative memory quota's room again (hysteresis: node_queue.reclaim_hold).
    reclaim_hold_s: float = 5.0
    # Alg. 5 line 12: tau ("e.g., 60 percent").
    upgrade_progress_threshold: float = 0.6
    # Sec. 6.3: the "finite timing-out bound" for queued speculative tasks, seconds. Not in paper.
    queue_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        _check_positive_int("lla_segments", self.lla_segments)
        _check_nonnegative("tukey_fence", self.tukey_fence)
        _check_vector("load", self.load_metrics, self.load_weights, self.load_thresholds)
        _check_vector("queue", self.queue_metrics, self.queue_weights, self.queue_thresholds)
        _check_nonnegative_int("counter_blacklist_size", self.counter_blacklist_size)
        _check_nonnegative_int("rating_blacklist_size", self.rating_blacklist_size)
        _check_positive_int("candidate_limit", self.candidate_limit)
        if not (math.isfinite(self.prefilter_factor) and self.prefilter_factor >= 1.0):
            raise ValueError("prefilter_factor: must be a finite number >= 1")
        _check_positive_int("rating_top_k", self.rating_top_k)
        if not 0.0 < self.rating_decay <= 1.0:
            raise ValueError("rating_decay: must be in (0, 1]")
        n = len(self.admission_resources)
        if n == 0:
            raise ValueError("admission_resources: must name at least one resource")
        for name, values in (
            ("admission_thresholds", self.admission_thresholds),
            ("oversubscription_quota", self.oversubscription_quota),
        ):
            if len(values) != n:
                raise ValueError(f"{name}: expected {n} values, one per admission resource")
            if any(not (0.0 <= v <= 1.0) for v in values):
                raise ValueError(f"{name}: every value must be a fraction in [0, 1]")
        _check_nonnegative_int("max_queue_length", self.max_queue_length)
        if not (math.isfinite(self.anomaly_sigmas) and self.anomaly_sigmas > 0):
            raise ValueError("anomaly_sigmas: must be a positive number")
        _check_nonnegative_int("slack_cores", self.slack_cores)
        if not (math.isfinite(self.throttle_hold_s) and self.throttle_hold_s >= 0):
            raise ValueError("throttle_hold_s: must be a finite number >= 0")
        if not (math.isfinite(self.reclaim_hold_s) and self.reclaim_hold_s >= 0):
            raise ValueError("reclaim_hold_s: must be a finite number >= 0")
        if not 0.0 <= self.upgrade_progress_threshold <= 1.0:
            raise ValueError("upgrade_progress_threshold: must be in [0, 1]")
        if not (self.queue_timeout_s > 0):
            raise ValueError("queue_timeout_s: must be positive")

    @property
    def is_responsiveness_prioritized(self) -> bool:
        """True in RP mode: counters, B0, throttling and core classes are active."""
        return self.mode is OversubscriptionMode.RESPONSIVENESS

    @property
    def prefilter_size(self) -> int:
        """Alg. 4 line 24: how many least-loaded machines survive, ceil(d * L_max)."""
        return math.ceil(self.prefilter_factor * self.candidate_limit)


def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: must be a positive integer")


def _check_nonnegative_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: must be a non-negative integer")


def _check_nonnegative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: must be a non-negative number")


def _check_vector(
    kind: str, names: tuple[str, ...], weights: tuple[float, ...], thresholds: tuple[float, ...]
) -> None:
    if len(names) == 0:
        raise ValueError(f"{kind}_metrics: must name at least one metric")
    if len(set(names)) != len(names):
        raise ValueError(f"{kind}_metrics: metric names must be unique")
    if len(weights) != len(names):
        raise ValueError(f"{kind}_weights: expected {len(names)} values, one per metric")
    if len(thresholds) != len(names):
        raise ValueError(f"{kind}_thresholds: expected {len(names)} values, one per metric")
    if any(not (math.isfinite(w) and w >= 0) for w in weights):
        raise ValueError(f"{kind}_weights: every weight must be a non-negative number")
    if any(math.isnan(t) or t < 0 for t in thresholds):
        raise ValueError(f"{kind}_thresholds: every threshold must be a non-negative number")
