"""Alg. 5 task upgrading and Sec. 6.3 time-out rescheduling."""

from __future__ import annotations

import numpy as np
import pytest

from policies.oversubscription.task_upgrade import (
    SpeculativeState,
    SpeculativeTask,
    UpgradeAction,
    on_resource_approved,
    reschedule_timed_out,
    should_dispatch_speculative,
    timed_out,
)

from .builders import config


@pytest.mark.parametrize(
    ("state", "machine", "progress", "action"),
    [
        pytest.param(
            SpeculativeState.UNPLACED,
            None,
            0.0,
            UpgradeAction.CANCEL_AND_START_REGULAR,
            id="lines 7-9 unplaced",
        ),
        pytest.param(
            SpeculativeState.QUEUED,
            "m1",
            0.0,
            UpgradeAction.CANCEL_AND_START_REGULAR,
            id="lines 7-9 queued",
        ),
        pytest.param(
            SpeculativeState.RUNNING,
            "m0",
            0.1,
            UpgradeAction.UPGRADE_IN_PLACE,
            id="lines 10-11 same machine",
        ),
        pytest.param(
            SpeculativeState.RUNNING,
            "m1",
            0.61,
            UpgradeAction.KEEP_AND_RESERVE,
            id="lines 12-14 past tau",
        ),
        pytest.param(
            SpeculativeState.RUNNING,
            "m1",
            0.6,
            UpgradeAction.KILL_AND_START_REGULAR,
            id="lines 15-17 at tau",
        ),
        pytest.param(
            SpeculativeState.RUNNING,
            "m1",
            0.2,
            UpgradeAction.KILL_AND_START_REGULAR,
            id="lines 15-17 early",
        ),
    ],
)
def test_resource_approval(
    state: SpeculativeState, machine: str | None, progress: float, action: UpgradeAction
) -> None:
    task = SpeculativeTask("t", state, machine, progress)
    assert on_resource_approved(task, "m0", config()) is action


def test_tau_is_configurable() -> None:
    task = SpeculativeTask("t", SpeculativeState.RUNNING, "m1", 0.5)
    assert on_resource_approved(task, "m0", config(upgrade_progress_threshold=0.4)) is (
        UpgradeAction.KEEP_AND_RESERVE
    )


@pytest.mark.parametrize(("pending", "dispatch"), [(0, False), (3, True)])
def test_dispatch_while_requests_unsatisfied(pending: int, dispatch: bool) -> None:
    assert should_dispatch_speculative(pending) is dispatch


@pytest.mark.parametrize(
    ("state", "enqueued_at", "now", "expected"),
    [
        (SpeculativeState.QUEUED, 0.0, 60.0, False),
        (SpeculativeState.QUEUED, 0.0, 60.5, True),
        (SpeculativeState.RUNNING, 0.0, 600.0, False),
    ],
)
def test_timeout(state: SpeculativeState, enqueued_at: float, now: float, expected: bool) -> None:
    task = SpeculativeTask("t", state, "m0", enqueued_at=enqueued_at)
    assert timed_out(task, now, config(queue_timeout_s=60.0)) is expected


def test_reschedule_moves_only_timed_out_tasks_to_other_candidates() -> None:
    tasks = [
        SpeculativeTask("old", SpeculativeState.QUEUED, "m0", enqueued_at=0.0),
        SpeculativeTask("fresh", SpeculativeState.QUEUED, "m0", enqueued_at=100.0),
        SpeculativeTask("stuck", SpeculativeState.QUEUED, "m2", enqueued_at=0.0),
    ]
    rng = np.random.default_rng(7)
    moves = reschedule_timed_out(tasks, ["m0", "m1", "m2"], 120.0, rng, config())
    assert [m.task_id for m in moves] == ["old", "stuck"]
    assert all(m.destination != m.source for m in moves)
    again = reschedule_timed_out(
        tasks, ["m0", "m1", "m2"], 120.0, np.random.default_rng(7), config()
    )
    assert again == moves  # the generator alone decides


@pytest.mark.parametrize("candidates", [[], ["m0"]])
def test_no_move_without_another_candidate(candidates: list[str]) -> None:
    task = SpeculativeTask("t", SpeculativeState.QUEUED, "m0", enqueued_at=0.0)
    rng = np.random.default_rng(0)
    assert reschedule_timed_out([task], candidates, 1000.0, rng, config()) == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state": SpeculativeState.RUNNING, "machine": None}, "task.machine"),
        ({"state": SpeculativeState.RUNNING, "machine": "m", "progress": 1.5}, "task.progress"),
    ],
)
def test_bad_tasks_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeculativeTask("t", **kwargs)  # type: ignore[arg-type]
