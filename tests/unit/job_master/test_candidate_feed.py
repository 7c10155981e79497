"""The candidate feed's pure decisions (``next_need``, ``check_kind``) and ``resync_replica``
against a fake Resync serving real ``L`` and ``C`` messages."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from job_master.candidate_feed import (
    RESYNC_ATTEMPTS,
    Need,
    check_kind,
    next_need,
    resync_replica,
)
from policies.oversubscription.candidate_sync import (
    LocalReplica,
    MachineList,
    SyncAction,
    apply_message,
    encode_candidates,
    encode_machine_list,
)

APPLIED, STALE = SyncAction.APPLIED, SyncAction.IGNORED_STALE
NEED_LIST, NEED_CANDIDATES = SyncAction.NEED_FULL_LIST, SyncAction.NEED_CANDIDATES
NOTHING, CANDIDATES, FULL = Need.NOTHING, Need.CANDIDATES, Need.FULL_LIST


@pytest.mark.parametrize(
    ("pending", "kind", "action", "expected"),
    [
        # An applied bit vector or delta makes the replica current, whatever was pending.
        (NOTHING, b"C", APPLIED, NOTHING),
        (CANDIDATES, b"C", APPLIED, NOTHING),
        (FULL, b"D", APPLIED, NOTHING),
        # An applied list has no candidates yet: a pending need narrows to the candidates.
        (NOTHING, b"L", APPLIED, NOTHING),
        (CANDIDATES, b"L", APPLIED, CANDIDATES),
        (FULL, b"L", APPLIED, CANDIDATES),
        # A message for another list version: the full list, whatever was pending.
        (NOTHING, b"C", NEED_LIST, FULL),
        (CANDIDATES, b"D", NEED_LIST, FULL),
        (FULL, b"C", NEED_LIST, FULL),
        # A delta against a version we lack: the candidates, unless more is already pending.
        (NOTHING, b"D", NEED_CANDIDATES, CANDIDATES),
        (CANDIDATES, b"D", NEED_CANDIDATES, CANDIDATES),
        (FULL, b"D", NEED_CANDIDATES, FULL),
        # A stale message changes nothing.
        (NOTHING, b"L", STALE, NOTHING),
        (CANDIDATES, b"C", STALE, CANDIDATES),
        (FULL, b"D", STALE, FULL),
    ],
)
def test_next_need(pending: Need, kind: bytes, action: SyncAction, expected: Need) -> None:
    assert next_need(pending, kind, action) is expected


MACHINES, CANDS = "p/machines", "p/candidates"


@pytest.mark.parametrize(
    ("topic", "message", "expected"),
    [
        (MACHINES, b"L...", b"L"),
        (CANDS, b"C...", b"C"),
        (CANDS, b"D...", b"D"),
        (MACHINES, b"C...", "kind b'C' does not belong on this topic"),
        (MACHINES, b"D", "kind b'D' does not belong on this topic"),
        (CANDS, b"L...", "kind b'L' does not belong on this topic"),
        (CANDS, b"X", "kind b'X' does not belong on this topic"),
        (CANDS, b"", "kind b'' does not belong on this topic"),
        (MACHINES, b"", "kind b'' does not belong on this topic"),
        ("p/other", b"L...", "unexpected topic"),
    ],
)
def test_check_kind(topic: str, message: bytes, expected: bytes | str) -> None:
    if isinstance(expected, bytes):
        assert check_kind(topic, message, MACHINES, CANDS) == expected
    else:
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            check_kind(topic, message, MACHINES, CANDS)


NAMES = ("a", "b", "c", "d")


def list_message(version: int, names: Sequence[str] = NAMES) -> bytes:
    return encode_machine_list(MachineList(version=version, names=tuple(names)))


def bits(machine_version: int, candidate_version: int, members: Sequence[str]) -> bytes:
    return encode_candidates(
        machine_version, candidate_version, [name in members for name in NAMES]
    )


class FakeResync:
    """Serves its replies in turn (the last one again once they run out); logs each call."""

    def __init__(
        self, lists: Sequence[bytes | Exception] = (), candidates: Sequence[bytes | Exception] = ()
    ) -> None:
        self._lists = list(lists)
        self._candidates = list(candidates)
        self.calls: list[str] = []

    def machine_list(self) -> bytes:
        self.calls.append("L")
        return self._next(self._lists)

    def candidates(self) -> bytes:
        self.calls.append("C")
        return self._next(self._candidates)

    @staticmethod
    def _next(replies: list[bytes | Exception]) -> bytes:
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


def holding(
    machine_version: int, candidate_version: int = 0, members: Sequence[str] = ()
) -> LocalReplica:
    """A replica that applied list ``machine_version`` (and a bit vector, if one is given)."""
    replica = apply_message(LocalReplica(), list_message(machine_version)).replica
    if candidate_version:
        replica = apply_message(replica, bits(machine_version, candidate_version, members)).replica
    return replica


@pytest.mark.parametrize(
    ("replica", "need", "replies", "calls", "versions", "members"),
    [
        # A delta we could not apply: fetch the candidates only.
        (
            holding(5, 7, ["a"]),
            CANDIDATES,
            ([], [bits(5, 9, ["b", "c"])]),
            ["C"],
            (5, 9),
            ("b", "c"),
        ),
        # A stale list: fetch the list, then the candidates.
        (
            holding(5, 7, ["a"]),
            FULL,
            ([list_message(6)], [bits(6, 10, ["d"])]),
            ["L", "C"],
            (6, 10),
            ("d",),
        ),
        # From nothing at all (a job master that just started).
        (
            LocalReplica(),
            FULL,
            ([list_message(1)], [bits(1, 1, ["a", "d"])]),
            ["L", "C"],
            (1, 1),
            ("a", "d"),
        ),
        # The list moved on since the last message: the candidates say so, fetch the list too.
        (
            holding(5, 7, ["a"]),
            CANDIDATES,
            ([list_message(6)], [bits(6, 8, ["c"])]),
            ["C", "L", "C"],
            (6, 8),
            ("c",),
        ),
        # It moved again between our list and candidate fetches: one more round.
        (
            holding(5),
            FULL,
            ([list_message(6), list_message(7)], [bits(7, 3, ["a"]), bits(7, 4, ["b"])]),
            ["L", "C", "L", "C"],
            (7, 4),
            ("b",),
        ),
    ],
    ids=["candidates", "full list", "from scratch", "list moved", "list moved twice"],
)
def test_resync_fetches_what_is_needed(
    replica: LocalReplica,
    need: Need,
    replies: tuple[list[bytes], list[bytes]],
    calls: list[str],
    versions: tuple[int, int],
    members: tuple[str, ...],
) -> None:
    resync = FakeResync(*replies)
    fresh = resync_replica(replica, resync, need)
    assert resync.calls == calls
    assert (fresh.machines.version, fresh.candidate_version) == versions
    assert fresh.candidates == members


def test_candidates_not_newer_than_the_replica_leave_it_as_it_is() -> None:
    replica = holding(5, 7, ["a"])
    assert (
        resync_replica(replica, FakeResync(candidates=[bits(5, 7, ["b"])]), CANDIDATES) is replica
    )


def test_a_list_and_candidates_that_keep_disagreeing_give_up() -> None:
    resync = FakeResync([list_message(6)], [bits(7, 1, ["a"])])
    with pytest.raises(RuntimeError, match="disagree on ver_m"):
        resync_replica(holding(5), resync, FULL)
    assert resync.calls == ["L", "C"] * RESYNC_ATTEMPTS


def test_resync_errors_reach_the_caller() -> None:
    with pytest.raises(ConnectionError):
        resync_replica(holding(5), FakeResync(candidates=[ConnectionError("down")]), CANDIDATES)
    with pytest.raises(ValueError, match="truncated"):
        resync_replica(holding(5), FakeResync(candidates=[b"C\x00"]), CANDIDATES)
