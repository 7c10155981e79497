"""Sec. 5.2 incremental candidate synchronisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.oversubscription.candidate_sync import (
    LocalReplica,
    MachineList,
    SyncAction,
    apply_message,
    decode_machine_list,
    encode_candidates,
    encode_machine_list,
    needs_full_list,
)

MACHINES = MachineList(version=3, names=("m0", "m1", "m2", "m3", "m4"))


def synced() -> LocalReplica:
    return apply_message(LocalReplica(), encode_machine_list(MACHINES)).replica


def test_machine_list_round_trips() -> None:
    assert decode_machine_list(encode_machine_list(MACHINES)) == MACHINES


def test_bit_vector_installs_candidates() -> None:
    message = encode_candidates(3, 1, [False, True, False, True, False])
    result = apply_message(synced(), message)
    assert result.action is SyncAction.APPLIED
    assert result.replica.candidates == ("m1", "m3")
    assert result.replica.candidate_version == 1


@pytest.mark.parametrize(
    ("machine_version", "candidate_version", "count", "action"),
    [
        pytest.param(4, 1, 5, SyncAction.NEED_FULL_LIST, id="newer machine list"),
        pytest.param(2, 1, 5, SyncAction.IGNORED_STALE, id="older machine list"),
        pytest.param(3, 0, 5, SyncAction.IGNORED_STALE, id="old candidate version"),
        pytest.param(3, 1, 6, SyncAction.NEED_FULL_LIST, id="length mismatch"),
    ],
)
def test_version_checks(
    machine_version: int, candidate_version: int, count: int, action: SyncAction
) -> None:
    message = encode_candidates(machine_version, candidate_version, [True] * count)
    replica = synced()
    result = apply_message(replica, message)
    assert result.action is action
    assert result.replica is replica


def test_delta_is_used_when_smaller_and_needs_its_base() -> None:
    names = tuple(f"m{i}" for i in range(1000))
    replica = apply_message(LocalReplica(), encode_machine_list(MachineList(1, names))).replica
    first = np.zeros(1000, dtype=bool)
    first[::10] = True
    replica = apply_message(replica, encode_candidates(1, 1, first)).replica
    second = first.copy()
    second[[0, 5]] = [False, True]
    delta = encode_candidates(1, 2, second, previous=(1, first))
    assert delta[:1] == b"D"
    assert len(delta) < len(encode_candidates(1, 2, second))
    applied = apply_message(replica, delta)
    assert applied.action is SyncAction.APPLIED
    np.testing.assert_array_equal(applied.replica.membership, second)
    # A replica that missed version 2 cannot apply a delta based on it.
    third = encode_candidates(1, 3, first, previous=(2, second))
    assert apply_message(replica, third).action is SyncAction.NEED_CANDIDATES


def test_full_list_resets_candidates_and_stale_lists_are_ignored() -> None:
    replica = apply_message(synced(), encode_candidates(3, 1, [True] * 5)).replica
    newer = MachineList(version=4, names=("a", "b"))
    result = apply_message(replica, encode_machine_list(newer))
    assert result.action is SyncAction.APPLIED and result.replica.candidates == ()
    stale = apply_message(result.replica, encode_machine_list(MACHINES))
    assert stale.action is SyncAction.IGNORED_STALE


@pytest.mark.parametrize(("local", "aggregator", "expected"), [(1, 2, True), (2, 2, False)])
def test_heartbeat_version_decides_full_resync(local: int, aggregator: int, expected: bool) -> None:
    assert needs_full_list(local, aggregator) is expected


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"", "empty"),
        (b"X123", "unknown kind"),
        (b"C\x00", "truncated"),
        (encode_candidates(3, 1, [True] * 5)[:-1], "length"),
        (b"L" + (1).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"a\nb", "announces 3"),
        (b"L" + (1).to_bytes(8, "big") + (0).to_bytes(4, "big") + b"a", "announces 0"),
    ],
)
def test_malformed_messages_raise(message: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply_message(synced(), message)


@pytest.mark.parametrize("names", [("",), ("a\nb",)], ids=["empty name", "newline in name"])
def test_machine_names_must_be_lines(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=r"machine_list.names\[0\]"):
        MachineList(version=1, names=names)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 300),
    st.lists(st.lists(st.integers(0, 299), max_size=40), min_size=1, max_size=6),
    st.data(),
)
def test_replica_tracks_the_aggregator_through_any_message_sequence(
    machines: int, rounds: list[list[int]], data: st.DataObject
) -> None:
    names = tuple(f"host-{i}" for i in range(machines))
    replica = apply_message(LocalReplica(), encode_machine_list(MachineList(1, names))).replica
    previous: tuple[int, np.ndarray] | None = None
    for version, chosen in enumerate(rounds, start=1):
        membership = np.zeros(machines, dtype=bool)
        membership[[i for i in chosen if i < machines]] = True
        message = encode_candidates(1, version, membership, previous=previous)
        previous = (version, membership)
        if data.draw(st.booleans(), label="lost"):
            continue  # the message is lost; later deltas may then need a bit vector
        result = apply_message(replica, message)
        if result.action is SyncAction.NEED_CANDIDATES:
            result = apply_message(replica, encode_candidates(1, version, membership))
        assert result.action is SyncAction.APPLIED
        replica = result.replica
        np.testing.assert_array_equal(replica.membership, membership)
