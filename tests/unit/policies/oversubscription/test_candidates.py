"""The aggregator entry point: full recompute and incremental refresh agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policies.oversubscription.candidates import (
    approximate_machines,
    compute_candidates,
    refresh_machines,
    window_average,
)
from policies.oversubscription.config import OversubscriptionMode
from policies.oversubscription.load_approximation import approximate_load
from policies.oversubscription.machine_filter import FilterPhase, filter_machines
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.snapshot import MachineWindows

from .builders import config, random_windows


@pytest.mark.parametrize("mode", list(OversubscriptionMode))
def test_full_recompute_is_approximation_then_filter(mode: OversubscriptionMode) -> None:
    windows = random_windows(60, seed=1, missing=0.05)
    scores = -np.random.default_rng(2).poisson(1.0, 60).astype(float)
    cfg = config(mode=mode, candidate_limit=10)
    result = compute_candidates(windows, scores, cfg)
    loads = approximate_machines(windows, cfg)
    np.testing.assert_array_equal(result.candidates, filter_machines(loads, scores, cfg).candidates)
    np.testing.assert_allclose(loads.load, approximate_load(windows.load), equal_nan=True)
    assert len(result.candidates) == 10


def test_ratings_dataclass_and_plain_scores_agree() -> None:
    windows = random_windows(30, seed=9)
    scores = np.where(np.arange(30) % 7 == 0, -2.0, 0.0)
    cfg = config(candidate_limit=5)
    plain = compute_candidates(windows, scores, cfg)
    wrapped = compute_candidates(windows, MachineRatings(scores), cfg)
    np.testing.assert_array_equal(plain.phase, wrapped.phase)
    assert (plain.phase[::7] == FilterPhase.LOW_RATING).sum() >= 1


def test_counters_are_ignored_in_up_mode() -> None:
    windows = random_windows(5)
    up = approximate_machines(windows, config(mode=OversubscriptionMode.UTILIZATION))
    rp = approximate_machines(windows, config(mode=OversubscriptionMode.RESPONSIVENESS))
    assert np.isnan(up.cpi).all() and np.isnan(up.mpki).all()
    np.testing.assert_allclose(rp.cpi, np.asarray(windows.cpi).mean(axis=1))


def test_rp_without_any_counters_has_no_b0() -> None:
    windows = dataclasses.replace(random_windows(12), cpi=None, mpki=None)
    result = compute_candidates(
        windows, np.zeros(12), config(mode=OversubscriptionMode.RESPONSIVENESS)
    )
    assert not result.high_cpi.any() and not result.high_mpki.any()


def test_incremental_refresh_equals_full_recompute() -> None:
    cfg = config(mode=OversubscriptionMode.RESPONSIVENESS, candidate_limit=8)
    old = random_windows(50, seed=3)
    new = random_windows(50, seed=4, missing=0.1)
    changed = np.array([0, 7, 21, 49])
    # The cluster after only the changed machines received new windows.
    mixed_load = np.array(old.load)
    mixed_queue = np.array(old.queue)
    mixed_cpi, mixed_mpki = np.array(old.cpi), np.array(old.mpki)
    mixed_connected = np.array(old.connected)
    mixed_capacity = np.array(old.load_capacity)
    for target in (
        (mixed_load, new.load),
        (mixed_queue, new.queue),
        (mixed_cpi, new.cpi),
        (mixed_mpki, new.mpki),
        (mixed_connected, new.connected),
        (mixed_capacity, new.load_capacity),
    ):
        target[0][changed] = np.asarray(target[1])[changed]
    mixed = MachineWindows(
        load=mixed_load,
        queue=mixed_queue,
        connected=mixed_connected,
        load_capacity=mixed_capacity,
        cpi=mixed_cpi,
        mpki=mixed_mpki,
    )
    scores = np.zeros(50)
    incremental = refresh_machines(
        approximate_machines(old, cfg), changed, new.select(changed), cfg
    )
    full = approximate_machines(mixed, cfg)
    for name in ("load", "queue", "cpi", "mpki", "connected", "load_capacity"):
        np.testing.assert_array_equal(getattr(incremental, name), getattr(full, name))
    np.testing.assert_array_equal(
        filter_machines(incremental, scores, cfg).phase, filter_machines(full, scores, cfg).phase
    )


def test_refresh_leaves_the_previous_snapshot_alone() -> None:
    cfg = config()
    loads = approximate_machines(random_windows(10, seed=5), cfg)
    before = np.array(loads.load)
    refresh_machines(loads, [3], random_windows(10, seed=6).select(np.array([3])), cfg)
    np.testing.assert_array_equal(loads.load, before)
    with pytest.raises(ValueError, match="read-only"):
        loads.load[0, 0] = 1.0


def test_window_average_skips_missing_samples() -> None:
    window = np.array([[1.0, 3.0], [np.nan, 4.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(window_average(window), [2.0, 4.0, np.nan])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"load": np.zeros((3, 7, 4))}, "windows.load: expected 8 load metrics"),
        ({"queue": np.zeros((3, 2, 4))}, "windows.queue: expected 3 queue metrics"),
        ({"queue": np.zeros((2, 3, 4))}, "windows.queue: expected 3 machines"),
        ({"connected": np.ones(4, dtype=bool)}, "windows.connected"),
        ({"load_capacity": np.zeros((3, 8))}, "windows.load_capacity: every capacity"),
        ({"cpi": np.zeros(3)}, "windows.cpi: expected a 2-D array"),
    ],
)
def test_bad_windows_are_named(kwargs: dict[str, np.ndarray], message: str) -> None:
    fields: dict[str, np.ndarray] = {
        "load": np.zeros((3, 8, 4)),
        "queue": np.zeros((3, 3, 4)),
        "connected": np.ones(3, dtype=bool),
    }
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        compute_candidates(MachineWindows(**fields), np.zeros(3), config())
