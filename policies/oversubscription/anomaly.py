"""Performance-aware resource throttling for RP oversubscription (ROSE Sec. 6.2).

* Early awareness of performance anomaly: the history of an LRA's CPI is fitted with a gamma
  distribution and its MPKI with a chi-square distribution (maximum likelihood, location fixed
  at 0, scale free); a sample above the fitted distribution's ``mean + 3 sigma`` is an outlier.
  Non-positive history samples (outside both supports) are raised to half the smallest positive
  sample before fitting. Where hardware counters are absent, the same detector (gamma fit) runs
  on pressure-stall-information (PSI) values.
* Runtime throttling: on an anomaly the node blocks its speculative queue and preempts running
  speculative tasks, those on first-class cores first and, among those, least progress first.
  Without an amount to free, every running speculative task is preempted ("all pending and
  existing oversubscription tasks will be postponed").
* Protective isolation: first-class cores are the LRAs' request plus slack cores, the rest are
  second class and host batch and speculative tasks.

The throttle and the core classes are RP-only (Sec. 3.3): in UP mode the detector never blocks
and every core is second class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from policies.oversubscription.config import OversubscriptionConfig

_MIN_HISTORY = 8


class Distribution(StrEnum):
    """The best-fit families of Sec. 6.2 (Fig. 9)."""

    GAMMA = "gamma"
    CHI_SQUARE = "chi2"


@dataclass(frozen=True)
class Baseline:
    """A fitted distribution of one indicator and its outlier bound ``mean + sigmas * std``.

    For gamma ``shape`` is ``a``; for chi-square it is the degrees of freedom ``df``.
    """

    distribution: Distribution
    shape: float
    scale: float
    mean: float
    std: float
    upper_bound: float

    def is_outlier(self, sample: float) -> bool:
        """Is ``sample`` beyond the 3-sigma bound (higher CPI/MPKI/PSI means degradation)?"""
        return sample > self.upper_bound


def fit_baseline(history: ArrayLike, distribution: Distribution, sigmas: float = 3.0) -> Baseline:
    """Maximum-likelihood fit of ``distribution`` (loc = 0) to the finite samples of
    ``history``; needs at least 8 samples that are not all equal."""
    samples = np.asarray(history, dtype=np.float64)
    samples = samples[np.isfinite(samples)]
    if samples.size < _MIN_HISTORY:
        raise ValueError(f"history: need at least {_MIN_HISTORY} finite samples")
    if np.all(samples == samples[0]):
        raise ValueError("history: samples are all equal, no distribution to fit")
    positive = samples[samples > 0]
    if positive.size == 0:
        raise ValueError("history: needs positive samples")
    samples = np.maximum(samples, positive.min() / 2)
    if distribution is Distribution.GAMMA:
        shape, _, scale = stats.gamma.fit(samples, floc=0)
        mean, std = shape * scale, np.sqrt(shape) * scale
    else:
        shape, _, scale = stats.chi2.fit(samples, floc=0)
        mean, std = shape * scale, np.sqrt(2 * shape) * scale
    return Baseline(
        distribution=distribution,
        shape=float(shape),
        scale=float(scale),
        mean=float(mean),
        std=float(std),
        upper_bound=float(mean + sigmas * std),
    )


def fit_cpi_baseline(history: ArrayLike, sigmas: float = 3.0) -> Baseline:
    """CPI follows a gamma distribution (Sec. 6.2)."""
    return fit_baseline(history, Distribution.GAMMA, sigmas)


def fit_mpki_baseline(history: ArrayLike, sigmas: float = 3.0) -> Baseline:
    """MPKI follows a chi-square distribution (Sec. 6.2)."""
    return fit_baseline(history, Distribution.CHI_SQUARE, sigmas)


def fit_psi_baseline(history: ArrayLike, sigmas: float = 3.0) -> Baseline:
    """PSI stands in for the counters where a machine has none; fitted like CPI (gamma)."""
    return fit_baseline(history, Distribution.GAMMA, sigmas)


@dataclass(frozen=True)
class IndicatorSample:
    """The latest value of one indicator and the baseline it is judged against."""

    name: str
    value: float
    baseline: Baseline


@dataclass(frozen=True)
class AnomalyVerdict:
    """Whether the node must throttle, and which indicator (if any) crossed its bound."""

    anomalous: bool
    indicator: str = ""
    value: float = float("nan")
    bound: float = float("nan")


def detect_anomaly(
    counters: Sequence[IndicatorSample],
    psi: Sequence[IndicatorSample],
    config: OversubscriptionConfig,
) -> AnomalyVerdict:
    """Sec. 6.2: judge CPI/MPKI samples, or the PSI samples when the node has no counters.

    Always "no anomaly" in UP mode (the throttle is off)."""
    if not config.is_responsiveness_prioritized:
        return AnomalyVerdict(anomalous=False)
    for sample in counters if counters else psi:
        if sample.baseline.is_outlier(sample.value):
            return AnomalyVerdict(True, sample.name, sample.value, sample.baseline.upper_bound)
    return AnomalyVerdict(anomalous=False)


@dataclass(frozen=True)
class CoreClasses:
    """Sec. 6.2 protective isolation: core ids reserved for LRAs and the rest."""

    first_class: tuple[int, ...]
    second_class: tuple[int, ...]

    @property
    def speculative_cpuset(self) -> tuple[int, ...]:
        """Where speculative tasks go: second-class cores, or all cores if there are none."""
        return self.second_class or self.first_class


def partition_cores(
    total_cores: int, lra_cores: int, config: OversubscriptionConfig
) -> CoreClasses:
    """First class: the LRAs' requested cores plus ``config.slack_cores`` (RP only)."""
    if total_cores < 1:
        raise ValueError("total_cores: must be a positive integer")
    if lra_cores < 0:
        raise ValueError("lra_cores: must be non-negative")
    reserved = min(total_cores, lra_cores + config.slack_cores)
    if not config.is_responsiveness_prioritized:
        reserved = 0
    return CoreClasses(
        first_class=tuple(range(reserved)), second_class=tuple(range(reserved, total_cores))
    )


@dataclass(frozen=True)
class RunningSpeculativeTask:
    """A running speculative task: the cores it is pinned to and its progress in [0, 1]."""

    task_id: str
    cores: tuple[int, ...]
    progress: float


@dataclass(frozen=True)
class ThrottleDecision:
    """Block the node's speculative queue? Which running speculative tasks to preempt, in
    order."""

    block_queue: bool
    preempt: tuple[str, ...]


def throttle(
    verdict: AnomalyVerdict,
    running: Sequence[RunningSpeculativeTask],
    classes: CoreClasses,
    config: OversubscriptionConfig,
    *,
    cores_to_free: int | None = None,
) -> ThrottleDecision:
    """Sec. 6.2 runtime throttling: on an anomaly (RP only) block the queue and preempt tasks on
    first-class cores first, least progress first, until ``cores_to_free`` cores are freed
    (all tasks when ``None``). Ties go to the task id."""
    if not (verdict.anomalous and config.is_responsiveness_prioritized):
        return ThrottleDecision(block_queue=False, preempt=())
    first = set(classes.first_class)
    order = sorted(
        running,
        key=lambda task: (not first.intersection(task.cores), task.progress, task.task_id),
    )
    if cores_to_free is None:
        return ThrottleDecision(block_queue=True, preempt=tuple(t.task_id for t in order))
    chosen: list[str] = []
    freed = 0
    for task in order:
        if freed >= cores_to_free:
            break
        chosen.append(task.task_id)
        freed += len(task.cores)
    return ThrottleDecision(block_queue=True, preempt=tuple(chosen))
