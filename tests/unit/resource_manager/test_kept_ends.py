"""How kept containers stop being kept (slot reservation, issue 28): the RM records each end,
with the job master's reason (used, deadline, released) or its own (taken back by a higher
priority or once lapsed, lost with its node), for `sluice job` and the simulator's results."""

from __future__ import annotations

import pytest

from resource_manager.records import KeptSlot
from resource_manager.reservations import KeptEnded, KeptLog
from tests.builders import chain_spec
from tests.unit.resource_manager.harness import Driver, add_node, new_core, running_job, want


def keeping(core: Driver) -> tuple[str, str, str]:
    """A running job (priority 3) holding two containers of its first phase on n1 (full),
    the first kept for its second phase until 100."""
    add_node(core, "n1", 2.0, 4096)
    job_id = running_job(core, chain_spec("map", "sum", tasks=2, priority=3))
    first, second = core.allocate(job_id, [want(2, phase="map")], [], [], 0, now=2.0).granted
    core.allocate(job_id, [], [], [], 0, now=3.0, kept=[KeptSlot(first.allocation_id, "sum", 100)])
    return job_id, first.allocation_id, second.allocation_id


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        ("used", "used"),  # a task of its phase runs in it
        ("deadline", "deadline"),
        ("released", "released"),
        ("", "released"),  # an older job master gives no reason
    ],
)
def test_the_job_masters_reason_is_recorded(report: str, reason: str):
    core = new_core()
    job_id, first, _second = keeping(core)
    releases = [] if report == "used" else [first]  # (gone with the report, as a JM does it)
    core.allocate(job_id, [], releases, [], 0, now=5.0, kept=[KeptSlot(first, "", 0.0, report)])
    (end,) = core.kept_log.of(job_id)
    assert (end.allocation_id, end.node_id, end.phase, end.reason, end.at) == (
        first,
        "n1",
        "sum",
        reason,
        5.0,
    )
    assert core.kept_log.counts(job_id) == {reason: 1}


def test_a_release_of_a_kept_container_with_no_report_is_recorded_as_released():
    core = new_core()
    job_id, first, second = keeping(core)
    core.allocate(job_id, [], [first, second], [], 0, now=5.0)
    assert [(e.allocation_id, e.reason) for e in core.kept_log.of(job_id)] == [(first, "released")]


@pytest.mark.parametrize(("priority", "kind"), [(9, "taken"), (1, None)])
def test_a_takeover_by_a_higher_priority_is_recorded_with_its_reason(
    priority: int, kind: str | None
):
    core = new_core()
    keeper, first, _second = keeping(core)
    other = running_job(core, chain_spec("x", tasks=1, priority=priority), now=3.0)
    core.allocate(other, [want(1, phase="x")], [], [], 0, now=4.0)  # fits nowhere
    ends = core.kept_log.of(keeper)
    if kind is None:
        assert ends == []
        return
    (end,) = ends
    assert (end.allocation_id, end.kind) == (first, "taken")
    assert end.reason.startswith(f"taken: reservation of {keeper} yields to {other}")


def test_a_lost_node_records_its_kept_containers_as_lost():
    core = new_core(node_timeout=10.0)
    job_id, first, _second = keeping(core)
    core.tick(60.0)  # n1 sent no heartbeat since: lost
    (end,) = core.kept_log.of(job_id)
    assert (end.allocation_id, end.kind, end.reason) == (first, "lost", "node n1 lost")


def test_the_log_is_bounded_per_job_and_in_jobs():
    log = KeptLog()
    log.PER_JOB, log.JOBS = 3, 2
    for index in range(5):
        log.record(KeptEnded("j1", f"a{index}", "n", "p", "deadline", float(index)))
    log.record(KeptEnded("j2", "b", "n", "p", "used", 0.0))
    assert [e.allocation_id for e in log.of("j1")] == ["a2", "a3", "a4"]
    assert log.counts("j1") == {"deadline": 5}  # counted, though only the last are kept
    log.record(KeptEnded("j3", "c", "n", "p", "taken: x", 0.0))
    assert log.of("j1") == [] and log.counts("j1") == {}  # the oldest job is forgotten
    assert log.counts("j3") == {"taken": 1}


def test_an_end_and_a_new_keeping_in_one_report_are_both_taken_in_order():
    # kept for sum, used by a task of sum that ended, kept again: all between two rounds
    core = new_core()
    job_id, first, _second = keeping(core)
    core.allocate(
        job_id,
        [],
        [],
        [],
        0,
        now=5.0,
        kept=[KeptSlot(first, "sum", 0.0, "used"), KeptSlot(first, "sum", 50.0)],
    )
    assert [(e.phase, e.reason) for e in core.kept_log.of(job_id)] == [("sum", "used")]
    (kept,) = core.kept_slots(job_id)
    assert (kept.allocation_id, kept.kept_for, kept.kept_until) == (first, "sum", 50.0)
    core.allocate(job_id, [], [], [], 0, now=6.0, kept=[KeptSlot(first, "sum", 0.0, "deadline")])
    assert core.kept_slots(job_id) == []
    assert core.kept_log.counts(job_id) == {"used": 1, "deadline": 1}
