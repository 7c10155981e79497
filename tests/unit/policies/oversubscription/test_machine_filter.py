"""Alg. 4 (multi-phase machine filtering)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.oversubscription.config import OversubscriptionMode
from policies.oversubscription.machine_filter import FilterPhase, filter_machines
from policies.oversubscription.snapshot import MachineLoads

from .builders import config, loads

HOT = [0.95, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]  # cpu over the default 0.9 threshold


@pytest.mark.parametrize(
    ("overrides", "scores", "machine", "phase"),
    [
        pytest.param({0: {"connected": False}}, {}, 0, FilterPhase.DISCONNECTED, id="B2"),
        pytest.param(
            {0: {"load": [math.nan] + [0.3] * 7}}, {}, 0, FilterPhase.DISCONNECTED, id="B2 no data"
        ),
        pytest.param({3: {"cpi": 5.0}}, {}, 3, FilterPhase.HIGH_CPI, id="B0 cpi"),
        pytest.param({4: {"mpki": 9.0}}, {}, 4, FilterPhase.HIGH_MPKI, id="B0 mpki"),
        pytest.param({}, {5: -3.0, 6: -1.0}, 5, FilterPhase.LOW_RATING, id="B1 lowest"),
        pytest.param({1: {"load": HOT}}, {}, 1, FilterPhase.OVERLOADED, id="B3 load"),
        pytest.param(
            {2: {"queue": [0.0, 21.0, 0.0]}}, {}, 2, FilterPhase.OVERLOADED, id="B3 queue length"
        ),
    ],
)
def test_each_blacklist_leaves_its_machine_out(
    overrides: dict[int, dict[str, object]],
    scores: dict[int, float],
    machine: int,
    phase: FilterPhase,
) -> None:
    rating = np.zeros(10)
    for index, score in scores.items():
        rating[index] = score
    rp = config(mode=OversubscriptionMode.RESPONSIVENESS)
    result = filter_machines(loads(10, overrides=overrides), rating, rp)
    assert result.phase[machine] == phase
    assert machine not in result.candidates


def test_b0_applies_only_in_rp_mode() -> None:
    cluster = loads(6, overrides={0: {"cpi": 9.0}, 1: {"mpki": 9.0}})
    rp = filter_machines(
        cluster,
        np.zeros(6),
        config(mode=OversubscriptionMode.RESPONSIVENESS, candidate_limit=6, prefilter_factor=1.0),
    )
    up = filter_machines(
        cluster,
        np.zeros(6),
        config(mode=OversubscriptionMode.UTILIZATION, candidate_limit=6, prefilter_factor=1.0),
    )
    assert rp.phase[0] == FilterPhase.HIGH_CPI and rp.phase[1] == FilterPhase.HIGH_MPKI
    assert set(up.candidates) == set(range(6))
    assert not up.high_cpi.any() and not up.high_mpki.any()


def test_machines_without_counters_are_not_ranked_by_them() -> None:
    cluster = loads(4, overrides={0: {"cpi": math.nan, "mpki": math.nan}, 1: {"cpi": 2.0}})
    rp = config(mode=OversubscriptionMode.RESPONSIVENESS, candidate_limit=4)
    result = filter_machines(cluster, np.zeros(4), rp)
    assert result.high_cpi.tolist() == [False, True, False, False]
    assert result.phase[0] != FilterPhase.HIGH_CPI


def test_unpenalised_machines_are_never_low_rated() -> None:
    result = filter_machines(loads(5), np.zeros(5), config(rating_blacklist_size=3))
    assert not result.low_rating.any()


def test_b3_names_the_first_dimension_over_its_threshold() -> None:
    load = [0.3, 0.3, 0.3, 0.3, 0.7, 0.3, 0.3, 0.3]  # disk_ut over its 0.6 threshold
    result = filter_machines(loads(3, overrides={2: {"load": load}}), np.zeros(3), config())
    assert result.overloaded_dimension.tolist() == [-1, -1, 4]


def test_load_is_judged_against_the_machines_own_capacity() -> None:
    cluster = loads(2, load=10.0)
    capacity = np.array([[32.0] * 8, [10.5] * 8])
    up = config(mode=OversubscriptionMode.UTILIZATION, candidate_limit=2)
    result = filter_machines(replace(cluster, load_capacity=capacity), np.zeros(2), up)
    # 10/32 is fine, 10/10.5 exceeds 0.9.
    assert result.phase.tolist() == [FilterPhase.CANDIDATE, FilterPhase.OVERLOADED]


def test_least_loaded_then_shortest_queue() -> None:
    # Load indices 0.8 * w ... ; machine 5 heaviest, machines 0-3 light.
    overrides: dict[int, dict[str, object]] = {
        0: {"load": [0.1] * 8, "queue": [5.0, 5.0, 5.0]},
        1: {"load": [0.2] * 8, "queue": [0.0, 0.0, 0.0]},
        2: {"load": [0.3] * 8, "queue": [1.0, 0.0, 0.0]},
        3: {"load": [0.4] * 8, "queue": [0.0, 0.0, 0.0]},
        4: {"load": [0.5] * 8, "queue": [0.0, 0.0, 0.0]},
        5: {"load": [0.6] * 8, "queue": [0.0, 0.0, 0.0]},
    }
    cfg = config(candidate_limit=2, prefilter_factor=2.0)  # keep 4 least loaded, then 2
    result = filter_machines(loads(6, overrides=overrides), np.zeros(6), cfg)
    # Least loaded: 0, 1, 2, 3. Shortest queues among them: 1 and 3 (tie on qIndex 0, ranked by
    # load index), so 1 first.
    assert result.candidates.tolist() == [1, 3]
    assert result.phase.tolist() == [
        FilterPhase.NOT_SHORTEST_QUEUE,
        FilterPhase.CANDIDATE,
        FilterPhase.NOT_SHORTEST_QUEUE,
        FilterPhase.CANDIDATE,
        FilterPhase.NOT_LEAST_LOADED,
        FilterPhase.NOT_LEAST_LOADED,
    ]


def test_weights_decide_the_load_index() -> None:
    # Machine 0 is CPU-heavy, machine 1 memory-heavy; weighting only memory prefers machine 0.
    overrides: dict[int, dict[str, object]] = {
        0: {"load": [0.8, 0.1] + [0.0] * 6},
        1: {"load": [0.1, 0.8] + [0.0] * 6},
    }
    weights = (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    result = filter_machines(
        loads(2, overrides=overrides),
        np.zeros(2),
        config(load_weights=weights, candidate_limit=1, prefilter_factor=1.0),
    )
    assert result.candidates.tolist() == [0]
    assert result.load_index.tolist() == pytest.approx([0.1, 0.8])


@pytest.mark.parametrize(
    ("scores", "message"),
    [(np.zeros(3), "expected 4"), (np.array([0.0, np.nan, 0.0, 0.0]), "NaN")],
)
def test_bad_scores_are_named(scores: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=f"scores: .*{message}"):
        filter_machines(loads(4), scores, config())


@st.composite
def clusters(draw: st.DrawFn) -> tuple[object, np.ndarray, object]:
    machines = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    load = rng.uniform(0, 1, (machines, 8))
    load[rng.random((machines, 8)) < 0.02] = np.nan
    queue = rng.integers(0, 25, (machines, 3)).astype(float)
    cpi = np.where(rng.random(machines) < 0.3, np.nan, rng.gamma(4, 0.3, machines))
    mpki = np.where(np.isnan(cpi), np.nan, rng.chisquare(3, machines))
    connected = rng.random(machines) > 0.1
    scores = -rng.poisson(0.7, machines).astype(float)
    cluster = MachineLoads(
        load=load,
        load_capacity=np.ones((machines, 8)),
        queue=queue,
        cpi=cpi,
        mpki=mpki,
        connected=connected,
    )
    cfg = config(
        mode=draw(st.sampled_from(list(OversubscriptionMode))),
        counter_blacklist_size=draw(st.integers(0, 5)),
        rating_blacklist_size=draw(st.integers(0, 5)),
        candidate_limit=draw(st.integers(1, 20)),
        prefilter_factor=draw(st.floats(1.0, 4.0)),
    )
    return cluster, scores, cfg


@settings(max_examples=80, deadline=None)
@given(clusters())
def test_filter_never_returns_a_blacklisted_or_disconnected_machine(case: tuple) -> None:  # type: ignore[type-arg]
    cluster, scores, cfg = case
    result = filter_machines(cluster, scores, cfg)
    chosen = result.candidates
    assert len(chosen) <= cfg.candidate_limit
    assert len(set(chosen.tolist())) == len(chosen)
    assert not result.blacklisted[chosen].any()
    assert cluster.connected[chosen].all()
    assert not np.isnan(cluster.load[chosen]).any()
    # Every machine has exactly one phase, CANDIDATE exactly for the candidates.
    assert set(np.flatnonzero(result.phase == FilterPhase.CANDIDATE)) == set(chosen.tolist())
    assert (result.phase[result.disconnected] == FilterPhase.DISCONNECTED).all()
    # Candidates are ranked by queue index; nothing outside the blacklists is lost when the
    # cluster is small enough.
    assert np.all(np.diff(result.queue_index[chosen]) >= 0)
    eligible = int((~result.blacklisted).sum())
    assert len(chosen) == min(eligible, cfg.candidate_limit, cfg.prefilter_size)
    # No blacklisted-phase machine is missing from its mask.
    assert (result.high_cpi[result.phase == FilterPhase.HIGH_CPI]).all()
    assert (result.overloaded[result.phase == FilterPhase.OVERLOADED]).all()


def test_result_is_read_only() -> None:
    result = filter_machines(loads(3), np.zeros(3), config())
    with pytest.raises(ValueError, match="read-only"):
        result.phase[0] = FilterPhase.CANDIDATE


def test_an_empty_cluster_has_no_candidates() -> None:
    result = filter_machines(loads(0), np.zeros(0), config())
    assert result.candidates.size == 0 and result.phase.size == 0
