"""The cluster aggregator's per-period candidate selection (ROSE Sec. 4.1 and Alg. 4 end to end).

Two paths give the same answer:

* full recompute — ``compute_candidates(windows, scores, config)`` approximates every window
  (Alg. 1-2) and filters (Alg. 4);
* incremental — keep a ``MachineLoads`` up to date with ``refresh_machines`` as machines'
  samples arrive (Sec. 5.3: LLA "calculated ... before populating into the data stream"), and
  run only ``filter_machines(loads, scores, config)`` each period, which is O(n).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.load_approximation import approximate_load
from policies.oversubscription.machine_filter import FilterResult, filter_machines
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.snapshot import MachineLoads, MachineWindows

FloatArray = NDArray[np.float64]
_T = TypeVar("_T", bound=np.generic)


def compute_candidates(
    windows: MachineWindows, scores: MachineRatings | ArrayLike, config: OversubscriptionConfig
) -> FilterResult:
    """Alg. 4 from raw windows: approximate every machine, then filter. ``scores`` are the
    Alg. 3 ratings (``MachineRatings`` or one score per machine)."""
    return filter_machines(approximate_machines(windows, config), scores, config)


def approximate_machines(windows: MachineWindows, config: OversubscriptionConfig) -> MachineLoads:
    """Alg. 4 lines 1-4 before normalisation: Alg. 1 on every load and queue window, and the
    window average of CPI and MPKI (Table 2). Counters are read only in RP mode."""
    _check_dimensions(windows, config)
    machines = windows.machine_count
    capacity = (
        np.ones(windows.load.shape[:2])
        if windows.load_capacity is None
        else np.asarray(windows.load_capacity)
    )
    no_counters = np.full(machines, np.nan)
    rp = config.is_responsiveness_prioritized
    return MachineLoads(
        load=approximate_load(windows.load, segments=config.lla_segments, fence=config.tukey_fence),
        load_capacity=capacity,
        queue=approximate_load(
            windows.queue, segments=config.lla_segments, fence=config.tukey_fence
        ),
        cpi=window_average(windows.cpi) if rp and windows.cpi is not None else no_counters,
        mpki=window_average(windows.mpki) if rp and windows.mpki is not None else no_counters,
        connected=np.asarray(windows.connected),
    )


def refresh_machines(
    loads: MachineLoads,
    machines: ArrayLike,
    windows: MachineWindows,
    config: OversubscriptionConfig,
) -> MachineLoads:
    """A copy of ``loads`` with the given machines re-approximated from their new ``windows``
    (``windows`` holds exactly those machines, in that order). Costs O(changed machines) plus
    one copy of the O(n) approximations."""
    indices = np.asarray(machines, dtype=np.intp)
    if indices.ndim != 1 or indices.shape[0] != windows.machine_count:
        raise ValueError("machines: expected one machine index per window row")
    if indices.size and (indices.min() < 0 or indices.max() >= loads.machine_count):
        raise ValueError("machines: machine index out of range")
    fresh = approximate_machines(windows, config)

    def merged(old: NDArray[_T], new: NDArray[_T]) -> NDArray[_T]:
        result = np.array(old)
        result[indices] = new
        return result

    return MachineLoads(
        load=merged(loads.load, fresh.load),
        load_capacity=merged(loads.load_capacity, fresh.load_capacity),
        queue=merged(loads.queue, fresh.queue),
        cpi=merged(loads.cpi, fresh.cpi),
        mpki=merged(loads.mpki, fresh.mpki),
        connected=merged(loads.connected, fresh.connected),
    )


def window_average(window: ArrayLike) -> FloatArray:
    """Per row, the mean of the finite samples (NaN for a row with none)."""
    samples = np.asarray(window, dtype=np.float64)
    if samples.shape[1] == 0:
        return np.full(samples.shape[0], np.nan)
    means: FloatArray = samples.sum(axis=1) / samples.shape[1]
    incomplete = np.flatnonzero(~np.isfinite(means))
    if incomplete.size:
        rows = samples[incomplete]
        finite = np.isfinite(rows)
        counts = finite.sum(axis=1)
        totals = np.where(finite, rows, 0.0).sum(axis=1)
        means[incomplete] = np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)
    return means


def _check_dimensions(windows: MachineWindows, config: OversubscriptionConfig) -> None:
    if windows.load.shape[1] != len(config.load_metrics):
        raise ValueError(
            f"windows.load: expected {len(config.load_metrics)} load metrics "
            f"({', '.join(config.load_metrics)}), got {windows.load.shape[1]}"
        )
    if windows.queue.shape[1] != len(config.queue_metrics):
        raise ValueError(
            f"windows.queue: expected {len(config.queue_metrics)} queue metrics "
            f"({', '.join(config.queue_metrics)}), got {windows.queue.shape[1]}"
        )
