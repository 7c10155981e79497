"""Multi-phase machine filtering (ROSE Alg. 4, MMF, Sec. 5.1).

Given the approximated loads of every machine (Alg. 1, lines 1-4) and their ratings (Alg. 3,
line 5), the candidates for speculative tasks are chosen in phases:

1. blacklists, all computed over the whole cluster and then removed together (line 14):
   * B0 (RP mode only, lines 7-10): the K machines with the highest window-average CPI and the
     K with the highest MPKI, among machines that have counters;
   * B1 (line 11): the K lowest-rated machines, among machines that have been penalised (score
     below 0) — an unpenalised cluster has no weak machine to blacklist;
   * B2 (line 12): disconnected machines, and machines with no sample in some load or queue
     window (the paper's "temporarily timing-out machines");
   * B3 (line 13): machines with any dimension over its threshold — load dimensions as a
     fraction of the machine's own capacity, queue dimensions as counts;
2. load pre-filter (line 24): of the rest, the ``ceil(d * L_max)`` smallest load indices
   ``lIndex = LM_i^l . loadFilter``;
3. queue selection (line 25): of those, the ``L_max`` smallest queue indices
   ``qIndex = LM_i^q . queueFilter``.

``LM`` is normalised per dimension (lines 1-4, "by the maximum machine capacity in the
cluster"): a load dimension is divided by the largest capacity of that dimension in the cluster,
a queue dimension by its largest value in the cluster. Candidates are returned ranked by
(qIndex, lIndex, machine index); every other machine gets the phase that left it out. When a
machine is on several blacklists the first in the order B2, B0 (CPI, MPKI), B1, B3 is reported
(a disconnected machine's other readings are stale) and all memberships are kept in the masks.
Ties in any top-K go to the lower machine index.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.selection import largest_k, smallest_k
from policies.oversubscription.snapshot import MachineLoads

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IndexArray = NDArray[np.intp]


class FilterPhase(IntEnum):
    """Why a machine is (not) a candidate, with the Alg. 4 line that decided it."""

    CANDIDATE = 0
    DISCONNECTED = 1  # B2, line 12
    HIGH_CPI = 2  # B0, line 8 (RP only)
    HIGH_MPKI = 3  # B0, line 9 (RP only)
    LOW_RATING = 4  # B1, line 11
    OVERLOADED = 5  # B3, line 13
    NOT_LEAST_LOADED = 6  # line 24
    NOT_SHORTEST_QUEUE = 7  # line 25


@dataclass(frozen=True, eq=False)
class FilterResult:
    """Outcome of one Alg. 4 round over ``n`` machines.

    * ``candidates``: machine indices, best first (ascending qIndex, then lIndex, then index);
    * ``phase``: (n,) ``FilterPhase`` code per machine (``CANDIDATE`` for the candidates);
    * ``overloaded_dimension``: (n,) index of the first dimension over its threshold, counting
      load dimensions then queue dimensions, -1 when none;
    * ``load_index`` / ``queue_index``: (n,) lIndex and qIndex (NaN where data is missing);
    * ``high_cpi``, ``high_mpki``, ``low_rating``, ``disconnected``, ``overloaded``: (n,) masks
      of B0 (CPI part, MPKI part), B1, B2 and B3.
    """

    candidates: IndexArray
    phase: NDArray[np.int8]
    overloaded_dimension: NDArray[np.int16]
    load_index: FloatArray
    queue_index: FloatArray
    high_cpi: BoolArray
    high_mpki: BoolArray
    low_rating: BoolArray
    disconnected: BoolArray
    overloaded: BoolArray

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            getattr(self, field.name).flags.writeable = False

    @property
    def blacklisted(self) -> BoolArray:
        """B0 | B1 | B2 | B3 (Alg. 4 line 14)."""
        mask: BoolArray = (
            self.high_cpi | self.high_mpki | self.low_rating | self.disconnected | self.overloaded
        )
        return mask


def filter_machines(
    loads: MachineLoads, scores: MachineRatings | ArrayLike, config: OversubscriptionConfig
) -> FilterResult:
    """Alg. 4 lines 5-31 on approximated loads and machine ratings (higher is better), given as
    ``MachineRatings`` or one score per machine."""
    machines = loads.machine_count
    ratings = _checked_ratings(loads, scores, config)
    load_index, queue_index, overloaded = _indices_and_overload(loads, config)

    # Lines 7-13: the blacklists.
    high_cpi = np.zeros(machines, dtype=np.bool_)
    high_mpki = np.zeros(machines, dtype=np.bool_)
    if config.is_responsiveness_prioritized:
        high_cpi = _top_counter(loads.cpi, config.counter_blacklist_size)
        high_mpki = _top_counter(loads.mpki, config.counter_blacklist_size)
    low_rating = np.zeros(machines, dtype=np.bool_)
    penalised = np.flatnonzero(ratings < 0)
    low_rating[penalised[smallest_k(ratings[penalised], config.rating_blacklist_size)]] = True
    # A NaN reading makes its index NaN (NaN * w is NaN even for w = 0).
    disconnected = ~loads.connected | np.isnan(load_index) | np.isnan(queue_index)

    # Line 14 and 17-25: the rest, least loaded first, then shortest queues.
    remaining = np.flatnonzero(~(high_cpi | high_mpki | low_rating | disconnected | overloaded))
    prefiltered = remaining[smallest_k(load_index[remaining], config.prefilter_size)]
    chosen = prefiltered[smallest_k(queue_index[prefiltered], config.candidate_limit)]
    candidates = chosen[np.lexsort((chosen, load_index[chosen], queue_index[chosen]))]

    phase = np.full(machines, FilterPhase.NOT_SHORTEST_QUEUE, dtype=np.int8)
    phase[candidates] = FilterPhase.CANDIDATE
    not_prefiltered = np.ones(machines, dtype=np.bool_)
    not_prefiltered[prefiltered] = False
    # Later assignments win: write the phases from the last to the first one.
    phase[not_prefiltered] = FilterPhase.NOT_LEAST_LOADED
    phase[overloaded] = FilterPhase.OVERLOADED
    phase[low_rating] = FilterPhase.LOW_RATING
    phase[high_mpki] = FilterPhase.HIGH_MPKI
    phase[high_cpi] = FilterPhase.HIGH_CPI
    phase[disconnected] = FilterPhase.DISCONNECTED

    return FilterResult(
        candidates=candidates,
        phase=phase,
        overloaded_dimension=_first_overloaded_dimension(loads, overloaded, config),
        load_index=load_index,
        queue_index=queue_index,
        high_cpi=high_cpi,
        high_mpki=high_mpki,
        low_rating=low_rating,
        disconnected=disconnected,
        overloaded=overloaded,
    )


def _checked_ratings(
    loads: MachineLoads, scores: MachineRatings | ArrayLike, config: OversubscriptionConfig
) -> FloatArray:
    machines = loads.machine_count
    values = scores.scores if isinstance(scores, MachineRatings) else scores
    ratings = np.asarray(values, dtype=np.float64)
    if ratings.shape != (machines,):
        raise ValueError(f"scores: expected {machines} machine ratings")
    if np.isnan(ratings).any():
        raise ValueError("scores: ratings must not be NaN")
    if loads.load.shape[1] != len(config.load_metrics):
        raise ValueError(f"loads.load: expected {len(config.load_metrics)} load metrics")
    if loads.queue.shape[1] != len(config.queue_metrics):
        raise ValueError(f"loads.queue: expected {len(config.queue_metrics)} queue metrics")
    return ratings


def _indices_and_overload(
    loads: MachineLoads, config: OversubscriptionConfig
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Lines 1-4, 13 and 19-20: lIndex, qIndex over normalised dimensions, and B3.

    Everything runs column by column: with the column-major arrays ``approximate_machines``
    produces, each step streams one contiguous vector (a per-row reduction over (n, dims)
    would cost a call per machine).
    """
    machines = loads.machine_count
    load_index = np.zeros(machines)
    overloaded = np.zeros(machines, dtype=np.bool_)
    for j, (weight, threshold) in enumerate(
        zip(config.load_weights, config.load_thresholds, strict=True)
    ):
        reading, capacity = loads.load[:, j], loads.load_capacity[:, j]
        largest = capacity.max(initial=0.0)
        load_index += reading * (weight / (largest if largest > 0 else 1.0))
        overloaded |= reading > capacity * threshold
    queue_index = np.zeros(machines)
    for j, (weight, threshold) in enumerate(
        zip(config.queue_weights, config.queue_thresholds, strict=True)
    ):
        reading = loads.queue[:, j]
        largest = np.nanmax(np.abs(reading), initial=0.0)
        queue_index += reading * (weight / (largest if largest > 0 else 1.0))
        overloaded |= reading > threshold
    return load_index, queue_index, overloaded


def _first_overloaded_dimension(
    loads: MachineLoads, overloaded: BoolArray, config: OversubscriptionConfig
) -> NDArray[np.int16]:
    """For each B3 machine, the first dimension (load, then queue) over its threshold."""
    result = np.full(loads.machine_count, -1, dtype=np.int16)
    flagged = np.flatnonzero(overloaded)
    if flagged.size:
        queue_limits = np.asarray(config.queue_thresholds)
        limits = np.concatenate(
            [
                loads.load_capacity[flagged] * np.asarray(config.load_thresholds),
                np.broadcast_to(queue_limits, (flagged.size, queue_limits.size)),
            ],
            axis=1,
        )
        readings = np.concatenate([loads.load[flagged], loads.queue[flagged]], axis=1)
        result[flagged] = np.argmax(readings > limits, axis=1)
    return result


def _top_counter(values: FloatArray, k: int) -> BoolArray:
    """Alg. 4 lines 8-9: the ``k`` highest counter averages among machines that have one."""
    mask = np.zeros(values.shape[0], dtype=np.bool_)
    measured = np.flatnonzero(~np.isnan(values))
    mask[measured[largest_k(values[measured], k)]] = True
    return mask
