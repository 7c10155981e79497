"""compute_round: versions across rounds, C/D/keyframe choice, ranked names, shape errors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from policies.oversubscription.candidate_sync import (
    LocalReplica,
    SyncAction,
    apply_message,
    decode_machine_list,
)
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS, OversubscriptionConfig
from policies.oversubscription.least_loaded import least_loaded_candidates
from policies.oversubscription.machine_filter import FilterPhase, FilterResult
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.rounds import Ranking, Round, compute_round, first_versions
from policies.oversubscription.snapshot import MachineWindows

CONFIG = OversubscriptionConfig()
START = 1_700_000_000.25
BASE = first_versions(START)


def windows(n: int, cpu: Sequence[float] | None = None) -> MachineWindows:
    """``n`` connected machines with one sample each; ``cpu`` sets their CPU utilisation."""
    load = np.zeros((n, len(LOAD_METRICS), 1))
    if cpu is not None:
        load[:, LOAD_METRICS.index("cpu_ut"), 0] = cpu
    return MachineWindows(
        load=load, queue=np.zeros((n, len(QUEUE_METRICS), 1)), connected=np.ones(n, dtype=bool)
    )


def picks(*indices: int) -> Ranking:
    """A ranking that always answers ``indices``, best first, whatever it is given."""

    def ranking(
        w: MachineWindows, ratings: MachineRatings, config: OversubscriptionConfig
    ) -> FilterResult:
        n = w.machine_count
        phase = np.full(n, FilterPhase.NOT_LEAST_LOADED, dtype=np.int8)
        phase[list(indices)] = FilterPhase.CANDIDATE
        nobody = np.zeros(n, dtype=bool)
        return FilterResult(
            candidates=np.array(indices, dtype=np.intp),
            phase=phase,
            overloaded_dimension=np.full(n, -1, dtype=np.int16),
            load_index=np.zeros(n),
            queue_index=np.zeros(n),
            high_cpi=nobody,
            high_mpki=nobody.copy(),
            low_rating=nobody.copy(),
            disconnected=nobody.copy(),
            overloaded=nobody.copy(),
        )

    return ranking


def names(n: int, prefix: str = "node") -> tuple[str, ...]:
    return tuple(f"{prefix}-{i:04d}" for i in range(n))


def step(
    previous: Round | None,
    node_ids: tuple[str, ...],
    chosen: Sequence[int],
    *,
    keyframe_every: int = 6,
    now: float = START + 1,
) -> Round:
    n = len(node_ids)
    return compute_round(
        previous,
        BASE,
        node_ids,
        windows(n),
        MachineRatings.unrated(n),
        CONFIG,
        picks(*chosen),
        now,
        keyframe_every=keyframe_every,
    )


def run(
    steps: Sequence[tuple[tuple[str, ...], Sequence[int]]], keyframe_every: int = 6
) -> list[Round]:
    rounds: list[Round] = []
    for node_ids, chosen in steps:
        rounds.append(
            step(rounds[-1] if rounds else None, node_ids, chosen, keyframe_every=keyframe_every)
        )
    return rounds


@pytest.mark.parametrize(
    ("start", "expected"),
    [(0.0, (0, 0)), (1.5, (1500, 1500)), (1_700_000_000.25, (1_700_000_000_250,) * 2)],
)
def test_first_versions_are_the_start_time_in_milliseconds(
    start: float, expected: tuple[int, int]
) -> None:
    assert first_versions(start) == expected


def test_the_first_round_builds_on_the_start_versions() -> None:
    first = step(None, names(3), [1])
    assert (first.machines.version, first.candidate_version) == (BASE[0] + 1, BASE[1] + 1)
    assert first.machines.names == names(3)
    assert first.computed_at == START + 1
    assert decode_machine_list(first.machine_list_message) == first.machines


A, B = names(4), names(4, prefix="other")


@pytest.mark.parametrize(
    ("lists", "expected_ver_m"),
    [
        ([A, A, A], [1, 1, 1]),
        ([A, B, B], [1, 2, 2]),
        ([A, B, A], [1, 2, 3]),  # back to an earlier list is still a change
        ([A, A[:3], A[:3], A], [1, 2, 2, 3]),  # a machine leaves, then returns
        ([A, A[::-1]], [1, 2]),  # same machines, different order: positions changed
    ],
    ids=["unchanged", "changed once", "changed back", "leave and return", "reordered"],
)
def test_ver_m_moves_only_when_the_names_change_and_ver_c_every_round(
    lists: list[tuple[str, ...]], expected_ver_m: list[int]
) -> None:
    rounds = run([(node_ids, [0]) for node_ids in lists])
    assert [r.machines.version - BASE[0] for r in rounds] == expected_ver_m
    assert [r.candidate_version - BASE[1] for r in rounds] == list(range(1, len(lists) + 1))
    for r, node_ids in zip(rounds, lists, strict=True):
        assert r.machines.names == node_ids
        assert decode_machine_list(r.machine_list_message) == r.machines


def test_an_unchanged_list_reuses_the_machine_list_and_its_message() -> None:
    first, second = run([(A, [0]), (A, [1])])
    assert second.machines is first.machines
    assert second.machine_list_message is first.machine_list_message


MANY = names(1000)  # a C message is 21 + 125 bytes, a D is 33 + 2 per flip


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ([1, 2, 3], [1, 2, 3], b"D"),  # nothing flipped: the smallest message there is
        ([1, 2, 3], [1, 2, 4], b"D"),  # two flips
        ([1, 2, 3], [3, 2, 1], b"D"),  # reranked, same set: nothing flipped
        (list(range(0, 100)), list(range(100, 200)), b"C"),  # 200 flips: D would be larger
        (list(range(0, 50)), list(range(50, 100)), b"C"),  # 100 flips: 233 > 146 bytes
        (list(range(0, 28)), list(range(28, 56)), b"D"),  # 56 flips: 145 < 146 bytes
    ],
)
def test_a_delta_goes_out_when_the_list_is_unchanged_and_it_is_smaller(
    before: list[int], after: list[int], kind: bytes
) -> None:
    first, second = run([(MANY, before), (MANY, after)])
    assert first.candidate_message[:1] == b"C"
    assert second.candidate_message[:1] == kind
    assert len(second.candidate_message) <= len(second.bit_vector_message)
    assert second.bit_vector_message[:1] == b"C"
    # Whatever went out, a replica that followed every round holds this round's membership.
    replica = follow([first, second])
    assert replica.candidate_version == second.candidate_version
    assert np.array_equal(replica.membership, second.membership)


def test_no_delta_across_a_change_of_the_machine_list() -> None:
    # Same length and same membership, so a delta would be tiny; but positions mean other names.
    first, second = run([(MANY, [1, 2]), (names(1000, prefix="x"), [1, 2])])
    assert second.machines.version == first.machines.version + 1
    assert second.candidate_message[:1] == b"C"
    assert second.candidate_message == second.bit_vector_message


@pytest.mark.parametrize("every", [1, 2, 3, 6])
def test_a_keyframe_goes_out_every_keyframe_every_rounds(every: int) -> None:
    rounds = run([(MANY, [7])] * (3 * every + 1), keyframe_every=every)
    kinds = [r.candidate_message[:1] for r in rounds]
    # Round i (1-based) is a keyframe when i is a multiple of `every`; the first is a C anyway.
    expected = [b"C" if i == 1 or i % every == 0 else b"D" for i in range(1, len(rounds) + 1)]
    assert kinds == expected
    for r in rounds:
        if r.candidate_message[:1] == b"C":
            assert r.candidate_message == r.bit_vector_message


def test_a_replica_that_missed_a_delta_recovers_at_the_next_keyframe() -> None:
    rounds = run([(MANY, [i]) for i in range(7)], keyframe_every=3)
    replica = follow(rounds[:1])
    actions = []
    for r in rounds[2:]:  # round 2's delta is lost
        result = apply_message(replica, r.candidate_message)
        replica, action = result.replica, result.action
        actions.append((r.candidate_message[:1], action))
    # Rounds 3 and 6 are keyframes; the deltas of rounds 4, 5 and 7 build on what came before.
    assert actions == [
        (b"C", SyncAction.APPLIED),
        (b"D", SyncAction.APPLIED),
        (b"D", SyncAction.APPLIED),
        (b"C", SyncAction.APPLIED),
        (b"D", SyncAction.APPLIED),
    ]
    assert np.array_equal(replica.membership, rounds[-1].membership)


def follow(rounds: Sequence[Round]) -> LocalReplica:
    """A job master's replica after the L message of the first round and every round's
    candidate message."""
    replica = apply_message(LocalReplica(), rounds[0].machine_list_message).replica
    for r in rounds:
        result = apply_message(replica, r.candidate_message)
        assert result.action is SyncAction.APPLIED
        replica = result.replica
    return replica


@pytest.mark.parametrize(
    ("chosen", "ranked", "membership"),
    [
        ([], (), [False] * 4),
        ([2], ("node-0002",), [False, False, True, False]),
        ([3, 0, 1], ("node-0003", "node-0000", "node-0001"), [True, True, False, True]),
    ],
)
def test_ranked_names_follow_the_ranking_order_and_membership_marks_them(
    chosen: list[int], ranked: tuple[str, ...], membership: list[bool]
) -> None:
    r = step(None, names(4), chosen)
    assert r.ranked == ranked
    assert r.membership.tolist() == membership
    assert not r.membership.flags.writeable
    assert r.result.candidates.tolist() == chosen


def test_the_real_least_loaded_ranking_orders_by_load() -> None:
    node_ids = ("a", "b", "c", "d")
    r = compute_round(
        None,
        BASE,
        node_ids,
        windows(4, cpu=[0.9, 0.1, 0.5, 0.3]),
        MachineRatings.unrated(4),
        OversubscriptionConfig(candidate_limit=3),
        least_loaded_candidates,
        START,
    )
    assert r.ranked == ("b", "d", "c")
    assert r.membership.tolist() == [False, True, True, True]


@pytest.mark.parametrize(
    ("rows", "scores", "keyframe_every", "error"),
    [
        (2, 3, 6, "windows: expected one row per machine id"),
        (4, 3, 6, "windows: expected one row per machine id"),
        (3, 2, 6, "ratings: expected one score per machine id"),
        (3, 3, 0, "keyframe_every: must be a positive integer"),
    ],
)
def test_shape_errors(rows: int, scores: int, keyframe_every: int, error: str) -> None:
    with pytest.raises(ValueError, match=f"^{error}$"):
        compute_round(
            None,
            BASE,
            names(3),
            windows(rows),
            MachineRatings.unrated(scores),
            CONFIG,
            picks(),
            START,
            keyframe_every=keyframe_every,
        )
