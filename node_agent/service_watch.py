"""A latency-sensitive service as its node agent watches it (ROSE Sec. 6.2): the history of its
interference indicators, the fitted-distribution 3-sigma detector on that history, and its
latency as its probe measures it.

Indicators, each a history of its own (:class:`IndicatorHistory`):

* ``cpi`` and ``mpki`` where the machine has hardware counters (fitted gamma and chi-square);
* ``psi_cpu``, the CPU pressure (``some avg10``) of the service's cgroup where the kernel keeps
  one, else the machine's, always (fitted gamma).  The detector judges the counters when
  there are any, else PSI, as :func:`policies.oversubscription.anomaly.detect_anomaly` does.

A history learns only the samples it did not judge anomalous: interference must not become
the baseline it is measured against.  It is bounded (:data:`HISTORY_WINDOW`), needs
:data:`MIN_SAMPLES` before it judges anything, and is refitted every :data:`REFIT_EVERY`
samples it learns (a maximum-likelihood fit costs a millisecond; samples come every few
seconds).  Everything here is pure: the agent passes the samples and the time in.

Departure (PSI only): a quiet machine's CPU pressure is often exactly 0 for minutes, where
no distribution can be fitted, and a history that barely varies gives a bound a hair above
its mean, which the smallest stall would cross.  So PSI's sigma is at least
:data:`PSI_STD_FLOOR` (one percentage point of stalled time): a constant history gets the
bound ``value + 3`` points, and a fitted one never less than ``mean + 3``.  The paper's
counters (CPI, MPKI) are fitted as they are.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from node_agent.service_probe import ProbeResult
from policies.oversubscription.anomaly import (
    AnomalyVerdict,
    Baseline,
    Distribution,
    IndicatorSample,
    detect_anomaly,
    fit_cpi_baseline,
    fit_mpki_baseline,
    fit_psi_baseline,
)
from policies.oversubscription.config import OversubscriptionConfig

HISTORY_WINDOW = 300
"""Samples an indicator's history keeps: five minutes at the agent's 1 s monitor."""
MIN_SAMPLES = 30
"""Samples before a history judges: a baseline fitted on fewer would flag ordinary noise."""
REFIT_EVERY = 10
SIGMAS = 3.0  # the fits' own (ROSE Sec. 6.2's 3 sigma)
LATENCY_WINDOW = 300
"""Probe results kept for the latency percentiles."""

FITS: Mapping[str, Callable[[ArrayLike], Baseline]] = {
    "cpi": fit_cpi_baseline,
    "mpki": fit_mpki_baseline,
    "psi_cpu": fit_psi_baseline,
}
COUNTERS = ("cpi", "mpki")
PSI_STD_FLOOR = 1.0
"""The least sigma of the PSI history, in percentage points (see the module docstring)."""
STD_FLOORS: Mapping[str, float] = {"psi_cpu": PSI_STD_FLOOR}


@dataclass
class IndicatorHistory:
    """One indicator's recent normal samples and the baseline fitted on them."""

    name: str
    fit: Callable[[ArrayLike], Baseline]
    samples: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_WINDOW))
    baseline: Baseline | None = None
    _since_fit: int = 0

    def judge(self, value: float) -> IndicatorSample | None:
        """The sample against the current baseline, or None while there is none yet."""
        if self.baseline is None:
            return None
        return IndicatorSample(self.name, value, self.baseline)

    def learn(self, value: float) -> None:
        """Keep a sample judged normal; refit when enough have come since the last fit."""
        self.samples.append(value)
        self._since_fit += 1
        if len(self.samples) >= MIN_SAMPLES and (
            self.baseline is None or self._since_fit >= REFIT_EVERY
        ):
            self.refit()

    def refit(self) -> None:
        """Fit the baseline on the samples kept (once there are enough)."""
        if len(self.samples) < MIN_SAMPLES:
            return
        self._since_fit = 0
        samples = np.fromiter(self.samples, dtype=np.float64)
        floor = STD_FLOORS.get(self.name, 0.0)
        try:
            fitted = self.fit(samples)
        except ValueError:  # all equal (an idle service)
            if not floor:
                return  # nothing to fit yet: the old baseline stands
            value = float(samples[0])
            fitted = Baseline(Distribution.GAMMA, math.nan, math.nan, value, 0.0, value)
        if fitted.std < floor:
            fitted = replace(fitted, std=floor, upper_bound=fitted.mean + SIGMAS * floor)
        self.baseline = fitted


@dataclass
class ServiceWatch:
    """One latency-sensitive service task on this node."""

    task_key: str  # job/task/attempt, as the agent names its tasks
    histories: dict[str, IndicatorHistory] = field(default_factory=dict)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    probe_failures: int = 0
    last_problem: str = ""
    verdict: AnomalyVerdict = field(default_factory=lambda: AnomalyVerdict(anomalous=False))
    # The indicator the detector judges, as last seen against its bound (anomalous or not).
    judged: IndicatorSample | None = None

    def observe(
        self, indicators: Mapping[str, float], config: OversubscriptionConfig
    ) -> AnomalyVerdict:
        """One round of indicator samples (names in :data:`FITS`; absent ones are not known
        on this machine): judge them (Sec. 6.2), then learn the normal ones."""
        judged: dict[str, list[IndicatorSample]] = {"counters": [], "psi": []}
        for name, value in indicators.items():
            fit = FITS.get(name)
            if fit is None or not np.isfinite(value):
                continue
            known = self.histories.setdefault(name, IndicatorHistory(name, fit))
            sample = known.judge(value)
            if sample is not None:
                judged["counters" if name in COUNTERS else "psi"].append(sample)
        self.verdict = detect_anomaly(judged["counters"], judged["psi"], config)
        looked_at = judged["counters"] or judged["psi"]
        if looked_at:
            self.judged = looked_at[0]
        for name, value in indicators.items():
            history = self.histories.get(name)
            if history is None:
                continue
            sample = history.judge(value)
            if sample is None or not sample.baseline.is_outlier(value):
                history.learn(value)
        return self.verdict

    def to_record(self) -> dict[str, Any]:
        """What a restarted agent needs to go on judging at once (:meth:`from_record`): the
        histories' normal samples (their baselines are refitted from them) and the probes'."""
        return {
            "histories": {name: list(h.samples) for name, h in self.histories.items()},
            "latencies": list(self.latencies),
            "probe_failures": self.probe_failures,
            "last_problem": self.last_problem,
        }

    @classmethod
    def from_record(cls, task_key: str, record: Mapping[str, Any]) -> ServiceWatch:
        """The watch :meth:`to_record` kept; indicators this agent does not know are left out.
        Raises ValueError (KeyError, TypeError) on a malformed record."""
        watch = cls(task_key)
        for name, samples in dict(record.get("histories", {})).items():
            fit = FITS.get(name)
            if fit is None:
                continue
            history = IndicatorHistory(name, fit)
            history.samples.extend(float(v) for v in samples if math.isfinite(float(v)))
            history.refit()
            watch.histories[name] = history
        watch.latencies.extend(float(v) for v in record.get("latencies", []))
        watch.probe_failures = int(record.get("probe_failures", 0))
        watch.last_problem = str(record.get("last_problem", ""))
        return watch

    def record_probe(self, result: ProbeResult) -> None:
        if result.latency_s is None:
            self.probe_failures += 1
            self.last_problem = result.problem
        else:
            self.latencies.append(result.latency_s)

    @property
    def judging(self) -> bool:
        """Whether an indicator has a baseline yet (before, no sample is judged)."""
        return any(history.baseline is not None for history in self.histories.values())

    def latency_percentile(self, percent: float) -> float:
        """The probe's latency percentile over its window (seconds), ``nan`` without one."""
        if not self.latencies:
            return float("nan")
        return float(np.percentile(np.fromiter(self.latencies, dtype=np.float64), percent))
