"""Alg. 1 on a DAG: the pre-reservation of a fork shared among the phases its barrier releases
(:func:`share_prereservation`), and n on a fork (every task the barrier releases)."""

from __future__ import annotations

import pytest

from policies.reservation.slot_decisions import (
    PhaseView,
    SlotAction,
    handle_task_completion,
    share_prereservation,
)


@pytest.mark.parametrize(
    ("rooms", "still_to_finish", "shares"),
    [
        ((8,), 1, (7,)),  # a chain: n - m once one more slot comes
        ((1, 8), 1, (0, 8)),  # a fork: the first phase is nearly full, the second has nothing
        ((4, 4), 2, (2, 4)),  # what still finishes fills the first phase first
        ((4, 4), 6, (0, 2)),
        ((2, 2), 9, (0, 0)),  # enough slots coming: nothing to pre-reserve
        ((0, 3), 0, (0, 3)),
        ((), 3, ()),
    ],
)
def test_a_forks_pre_reservation_is_what_its_own_slots_leave_of_each_phase(
    rooms: tuple[int, ...], still_to_finish: int, shares: tuple[int, ...]
):
    assert share_prereservation(rooms, still_to_finish) == shares


@pytest.mark.parametrize(("rooms", "still_to_finish"), [((-1,), 0), ((1,), -1)])
def test_negative_rooms_or_tasks_are_refused(rooms: tuple[int, ...], still_to_finish: int):
    with pytest.raises(ValueError, match="must not be negative"):
        share_prereservation(rooms, still_to_finish)


@pytest.mark.parametrize(
    ("m", "downstream", "rank", "action", "prereserve"),
    [
        # a phase of 16 feeding two of 8: every slot is kept (m = n = 16), none given back
        (16, (8, 8), 1, SlotAction.RESERVE, 0),
        (16, (8, 8), 8, SlotAction.RESERVE, 0),
        # 8 feeding two of 8: m < n, the 8 extra asked once past R = 0.5
        (8, (8, 8), 5, SlotAction.RESERVE, 8),
        # 16 feeding two of 4: the first 8 finishers give theirs back
        (16, (4, 4), 8, SlotAction.RELEASE, 0),
        (16, (4, 4), 9, SlotAction.RESERVE, 0),
    ],
)
def test_on_a_fork_n_is_every_task_the_barrier_releases(
    m: int, downstream: tuple[int, ...], rank: int, action: SlotAction, prereserve: int
):
    decision = handle_task_completion(
        PhaseView(
            job_priority=5,
            num_tasks=m,
            finished_before=rank - 1,
            downstream_num_tasks=sum(downstream),
            prereserve_threshold=0.5,
        )
    )
    assert (decision.action, decision.prereserve) == (action, prereserve)
