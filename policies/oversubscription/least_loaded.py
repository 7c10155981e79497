"""The baseline ranking: the least-loaded machines, without ROSE's blacklists.

``least_loaded_candidates`` is a drop-in for ``compute_candidates`` (same arguments, same
``FilterResult``), so an aggregator can run either and experiments can compare them:

1. every machine is approximated exactly as ROSE does (Alg. 1-2, ``approximate_machines``);
2. disconnected machines and machines missing a load or queue reading (no finite sample in some
   window) are left out with phase ``DISCONNECTED``, as ROSE's B2 would;
3. the rest are ranked by the weighted load index ``lIndex`` — each load dimension divided by
   the largest capacity of that dimension in the cluster, times its weight, summed — the same
   normalisation as ``machine_filter``; ties go to the lower machine index;
4. the first ``config.candidate_limit`` are the candidates, every other ranked machine gets
   ``NOT_LEAST_LOADED``.

No threshold, rating or counter check applies: the result's B0, B1 and B3 masks are all False
and ``overloaded_dimension`` is -1 everywhere. ``queue_index`` is reported (normalised like
``machine_filter``'s) for diagnostics but does not affect the ranking.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from policies.oversubscription.candidates import approximate_machines
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_filter import FilterPhase, FilterResult
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.selection import smallest_k
from policies.oversubscription.snapshot import MachineWindows

FloatArray = NDArray[np.float64]


def least_loaded_candidates(
    windows: MachineWindows, scores: MachineRatings | ArrayLike, config: OversubscriptionConfig
) -> FilterResult:
    """The ``config.candidate_limit`` least-loaded connected machines, best first.

    ``scores`` (the machine ratings) are accepted for the drop-in signature and ignored: the
    baseline does not penalise machines for past outcomes. Pure and deterministic.
    """
    del scores  # see the docstring
    loads = approximate_machines(windows, config)
    machines = loads.machine_count
    load_index = _weighted_index(
        loads.load, loads.load_capacity.max(axis=0, initial=0.0), config.load_weights
    )
    queue_index = _weighted_index(
        loads.queue, np.nanmax(np.abs(loads.queue), axis=0, initial=0.0), config.queue_weights
    )
    disconnected = ~loads.connected | np.isnan(load_index) | np.isnan(queue_index)

    ranked = np.flatnonzero(~disconnected)
    chosen = ranked[smallest_k(load_index[ranked], config.candidate_limit)]
    # smallest_k returns ascending indices; order by load, the index breaking ties.
    candidates = chosen[np.lexsort((chosen, load_index[chosen]))]

    phase = np.full(machines, FilterPhase.NOT_LEAST_LOADED, dtype=np.int8)
    phase[candidates] = FilterPhase.CANDIDATE
    phase[disconnected] = FilterPhase.DISCONNECTED
    nobody = np.zeros(machines, dtype=np.bool_)
    return FilterResult(
        candidates=candidates,
        phase=phase,
        overloaded_dimension=np.full(machines, -1, dtype=np.int16),
        load_index=load_index,
        queue_index=queue_index,
        high_cpi=nobody,
        high_mpki=nobody.copy(),
        low_rating=nobody.copy(),
        disconnected=disconnected,
        overloaded=nobody.copy(),
    )


def _weighted_index(
    readings: FloatArray, largest: FloatArray, weights: tuple[float, ...]
) -> FloatArray:
    """Sum over dimensions of ``reading * weight / largest`` (a largest of 0 counts as 1).

    A NaN reading makes the index NaN even at weight 0, as in ``machine_filter``: a machine
    without data is not ranked.
    """
    scale = np.where(largest > 0, largest, 1.0)
    index: FloatArray = (readings * (np.asarray(weights, dtype=np.float64) / scale)).sum(axis=1)
    return index
