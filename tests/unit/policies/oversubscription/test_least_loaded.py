"""The least-loaded baseline: ranking by weighted load index, a drop-in for compute_candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.oversubscription.candidates import compute_candidates
from policies.oversubscription.config import OversubscriptionMode
from policies.oversubscription.least_loaded import least_loaded_candidates
from policies.oversubscription.machine_filter import FilterPhase
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.snapshot import MachineWindows

from .builders import LOAD_DIMS, QUEUE_DIMS, config, random_windows

C, D, N = FilterPhase.CANDIDATE, FilterPhase.DISCONNECTED, FilterPhase.NOT_LEAST_LOADED


def flat_windows(
    levels: list[float],
    *,
    connected: list[bool] | None = None,
    missing: tuple[int, ...] = (),
    queue: float = 1.0,
    samples: int = 6,
) -> MachineWindows:
    """Machine i has every load dimension at ``levels[i]`` over the whole window; machines in
    ``missing`` have no sample at all."""
    n = len(levels)
    load = np.repeat(np.asarray(levels, dtype=float)[:, None, None], LOAD_DIMS, axis=1)
    load = np.repeat(load, samples, axis=2)
    queue_windows = np.full((n, QUEUE_DIMS, samples), queue)
    for machine in missing:
        load[machine] = np.nan
        queue_windows[machine] = np.nan
    return MachineWindows(
        load=load,
        queue=queue_windows,
        connected=np.ones(n, dtype=bool) if connected is None else np.asarray(connected),
    )


@pytest.mark.parametrize(
    ("levels", "connected", "missing", "limit", "candidates", "phases"),
    [
        pytest.param([0.5, 0.1, 0.3], None, (), 3, [1, 2, 0], [C, C, C], id="ranked by load"),
        pytest.param(
            [0.5, 0.1, 0.3, 0.2], None, (), 2, [1, 3], [N, C, N, C], id="limit keeps the least"
        ),
        pytest.param(
            [0.2, 0.1, 0.2, 0.2], None, (), 3, [1, 0, 2], [C, C, C, N], id="ties to lower index"
        ),
        pytest.param(
            [0.1, 0.2, 0.3], [False, True, True], (), 3, [1, 2], [D, C, C], id="disconnected"
        ),
        pytest.param([0.1, 0.2, 0.3], None, (0,), 1, [1], [D, C, N], id="no sample"),
        pytest.param(
            [0.99, 0.98], None, (), 5, [1, 0], [C, C], id="no overload threshold in baseline"
        ),
        pytest.param([], None, (), 3, [], [], id="empty cluster"),
    ],
)
def test_least_loaded_ranking(
    levels: list[float],
    connected: list[bool] | None,
    missing: tuple[int, ...],
    limit: int,
    candidates: list[int],
    phases: list[FilterPhase],
) -> None:
    windows = flat_windows(levels, connected=connected, missing=missing)
    result = least_loaded_candidates(windows, np.zeros(len(levels)), config(candidate_limit=limit))
    assert result.candidates.tolist() == candidates
    assert result.phase.tolist() == [int(p) for p in phases]
    assert result.disconnected.tolist() == [p == D for p in phases]
    assert not (result.high_cpi | result.high_mpki | result.low_rating | result.overloaded).any()
    assert (result.overloaded_dimension == -1).all()


def test_scores_are_ignored() -> None:
    windows = random_windows(40, seed=5)
    cfg = config(candidate_limit=10)
    neutral = least_loaded_candidates(windows, np.zeros(40), cfg)
    penalised = np.where(neutral.phase == C, -5.0, 0.0)  # ROSE would blacklist these
    for scores in (penalised, MachineRatings(penalised)):
        result = least_loaded_candidates(windows, scores, cfg)
        np.testing.assert_array_equal(result.candidates, neutral.candidates)


@pytest.mark.parametrize("mode", list(OversubscriptionMode))
def test_indices_are_normalised_like_the_rose_filter(mode: OversubscriptionMode) -> None:
    windows = random_windows(50, seed=7, missing=0.05)  # capacities differ per machine
    cfg = config(
        mode=mode,
        candidate_limit=12,
        load_weights=(2.0, 1.0, 0.5, 1.0, 0.0, 1.0, 3.0, 1.0),
        queue_weights=(1.0, 0.5, 2.0),
    )
    ours = least_loaded_candidates(windows, np.zeros(50), cfg)
    rose = compute_candidates(windows, np.zeros(50), cfg)
    np.testing.assert_allclose(ours.load_index, rose.load_index, equal_nan=True)
    np.testing.assert_allclose(ours.queue_index, rose.queue_index, equal_nan=True)
    np.testing.assert_array_equal(ours.disconnected, rose.disconnected)
    # The candidates are the connected machines of smallest load index, in that order.
    ranked = np.flatnonzero(~ours.disconnected)
    order = ranked[np.lexsort((ranked, ours.load_index[ranked]))]
    np.testing.assert_array_equal(ours.candidates, order[:12])


def test_load_is_weighed_against_the_largest_capacity_in_the_cluster() -> None:
    # Run queue of 8 on a 32-core machine vs 6 on an 8-core one: normalised by the cluster's
    # largest capacity (32), the first is the more loaded, whatever its own size.
    windows = flat_windows([0.0, 0.0])
    load = np.array(windows.load)
    load[:, 2, :] = [[8.0], [6.0]]
    capacity = np.ones((2, LOAD_DIMS))
    capacity[:, 2] = [32.0, 8.0]
    windows = MachineWindows(
        load=load, queue=windows.queue, connected=windows.connected, load_capacity=capacity
    )
    weights = tuple(1.0 if j == 2 else 0.0 for j in range(LOAD_DIMS))
    result = least_loaded_candidates(windows, np.zeros(2), config(load_weights=weights))
    assert result.candidates.tolist() == [1, 0]
    np.testing.assert_allclose(result.load_index, [8 / 32, 6 / 32])


def test_zero_weight_nan_still_leaves_the_machine_out() -> None:
    windows = flat_windows([0.1, 0.2])
    load = np.array(windows.load)
    load[0, 4] = math.nan  # a dimension nobody weighs, but no reading at all
    windows = MachineWindows(load=load, queue=windows.queue, connected=windows.connected)
    weights = tuple(0.0 if j == 4 else 1.0 for j in range(LOAD_DIMS))
    result = least_loaded_candidates(windows, np.zeros(2), config(load_weights=weights))
    assert result.phase.tolist() == [D, C]


def test_result_is_read_only() -> None:
    result = least_loaded_candidates(flat_windows([0.1, 0.2]), np.zeros(2), config())
    with pytest.raises(ValueError, match="read-only"):
        result.phase[0] = 0
