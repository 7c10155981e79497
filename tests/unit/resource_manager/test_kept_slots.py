"""Slot reservations the job master reports (Allocate's ``kept``): recorded on the containers,
checked, listed for `sluice job`, and kept across an RM restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resource_manager.errors import InvalidRequestError
from resource_manager.records import KeptSlot
from resource_manager.sqlite_store import SCHEMA_VERSION
from tests.builders import chain_spec, job_spec, phase_doc
from tests.unit.resource_manager.harness import Driver, add_node, new_core, running_job, want


def two_held(core: Driver) -> tuple[str, str, str]:
    """A running two-phase job holding two containers of its first phase."""
    add_node(core, "n1", 4.0, 4096)
    job_id = running_job(core, chain_spec("map", "sum", tasks=2))
    first, second = core.allocate(job_id, [want(2, phase="map")], [], [], 0, now=2.0).granted
    return job_id, first.allocation_id, second.allocation_id


def test_kept_containers_are_recorded_listed_and_unkept():
    core = new_core()
    job_id, first, second = two_held(core)
    core.allocate(job_id, [], [], [], 0, now=3.0, kept=[KeptSlot(first, "sum", 100.0)])
    (kept,) = core.kept_slots(job_id)
    assert (kept.allocation_id, kept.kept_for, kept.kept_until) == (first, "sum", 100.0)
    core.allocate(
        job_id, [], [], [], 0, now=4.0, kept=[KeptSlot(first, ""), KeptSlot(second, "sum")]
    )
    (kept,) = core.kept_slots(job_id)
    assert (kept.allocation_id, kept.kept_until) == (second, 0.0)  # no deadline yet
    core.allocate(job_id, [], [second], [], 0, now=5.0, kept=[KeptSlot("gone-a9", "sum", 1.0)])
    assert core.kept_slots(job_id) == []  # released; an unknown id is ignored


@pytest.mark.parametrize(
    ("slot", "message"),
    [
        (KeptSlot("FIRST", "reduce"), r"kept\[0\]\.phase: the job has no phase 'reduce'"),
        (KeptSlot("FIRST", "sum", -1.0), r"kept\[0\]\.until: must be a time >= 0, got -1.0"),
        (KeptSlot("FIRST", "sum", float("inf")), r"kept\[0\]\.until: must be a time >= 0"),
        (KeptSlot("OTHER", "sum"), r"kept\[0\]\.allocation_id: .* is not a task container of"),
    ],
)
def test_a_bad_report_is_refused_whole(slot: KeptSlot, message: str):
    core = new_core()
    job_id, first, _second = two_held(core)
    other = running_job(core, chain_spec("map", "sum", tasks=2))
    (theirs,) = core.allocate(other, [want(1, phase="map")], [], [], 0, now=2.0).granted
    ids = {"FIRST": first, "OTHER": theirs.allocation_id}
    bad = KeptSlot(ids[slot.allocation_id], slot.phase, slot.until)
    with pytest.raises(InvalidRequestError, match=message):
        core.allocate(job_id, [], [first], [], 0, now=3.0, kept=[bad])
    assert first in core.allocations  # nothing changed: not even the release


def test_kept_containers_survive_an_rm_restart(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    before = new_core(path)
    job_id, first, _second = two_held(before)
    before.allocate(job_id, [], [], [], 0, now=3.0, kept=[KeptSlot(first, "sum", 100.0)])
    after = new_core(path)
    assert [(a.allocation_id, a.kept_for, a.kept_until) for a in after.kept_slots(job_id)] == [
        (first, "sum", 100.0)
    ]


def test_a_version_6_state_directory_is_migrated(tmp_path: Path):
    path = tmp_path / "rm.sqlite"
    core = new_core(path)
    job_id, _first, _second = two_held(core)
    core.core.tables._store.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE allocations DROP COLUMN kept_for")
        db.execute("ALTER TABLE allocations DROP COLUMN kept_until")
        db.execute("PRAGMA user_version=6")
    after = new_core(path)
    assert len(after.allocations) == 2 and after.kept_slots(job_id) == []
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("priority", "until", "taken"),
    [
        (9, 0.0, True),  # a strictly higher priority takes the idle kept container
        (3, 0.0, False),  # the same priority waits ...
        (3, 2.5, True),  # ... until the reservation has lapsed
        (1, 0.0, False),  # a lower one waits
    ],
)
def test_a_kept_container_yields_to_a_higher_priority_or_once_it_lapsed(
    priority: int, until: float, taken: bool
):
    core = new_core()
    add_node(core, "n1", 2.0, 4096)  # room for the keeper's two containers, no more
    keeper = running_job(core, chain_spec("map", "sum", tasks=2, priority=3))
    first, second = core.allocate(keeper, [want(2, phase="map")], [], [], 0, now=2.0).granted
    kept = KeptSlot(first.allocation_id, "sum", until)
    core.allocate(keeper, [], [], [], 0, now=3.0, kept=[kept])
    other = running_job(core, chain_spec("x", tasks=1, priority=priority), now=3.0)
    core.allocate(other, [want(1, phase="x")], [], [], 0, now=4.0)  # fits nowhere
    answer = core.allocate(keeper, [], [], [], 0, now=5.0)
    assert (answer.lost_allocations == (first.allocation_id,)) is taken
    assert second.allocation_id in core.allocations  # never the one that is not kept
    granted = core.allocate(other, [want(1, phase="x")], [], [], 0, now=6.0).granted
    assert bool(granted) is taken


KEEPER_PRIORITY = 5


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 10.0, 20.0, 30.0]), min_size=1, max_size=4),
    st.lists(
        st.tuples(st.floats(0.5, 8.0), st.integers(0, 9), st.sampled_from(["cpu", "memory"])),
        min_size=1,
        max_size=8,
    ),
)
def test_a_kept_container_is_never_granted_to_another_job_before_its_deadline(
    deadlines: list[float], arrivals: list[tuple[float, int, str]]
):
    """Property (Alg. 1, TryAllocateTask): whatever other jobs ask for, and when, the RM takes
    a kept container back only once its deadline has passed or for a strictly higher
    priority; a container the keeper runs a task in is never taken."""
    core = new_core()
    add_node(core, "n1", 4.0, 4096)  # exactly the keeper's four containers
    keeper = running_job(core, chain_spec("map", "sum", tasks=4, priority=KEEPER_PRIORITY))
    held = core.allocate(keeper, [want(4, phase="map")], [], [], 0, now=2.0).granted
    kept = {c.allocation_id: until for c, until in zip(held, deadlines, strict=False)}
    core.allocate(
        keeper, [], [], [], 0, now=3.0, kept=[KeptSlot(a, "sum", u) for a, u in kept.items()]
    )
    clock, highest = 3.0, -1
    for step, priority, shape in arrivals:
        clock += step
        cpu, memory_mb = (1.0, 256) if shape == "cpu" else (0.5, 900)
        spec = job_spec(phase_doc("x", 1, cpu=cpu, memory_mb=memory_mb), priority=priority)
        other = running_job(core, spec, now=clock)
        highest = max(highest, priority)
        core.allocate(
            other, [want(1, phase="x", cpu=cpu, memory_mb=memory_mb)], [], [], 0, now=clock
        )
        lost = core.allocate(keeper, [], [], [], 0, now=clock).lost_allocations
        for allocation_id in lost:
            assert allocation_id in kept, "a container running the keeper's task was taken"
            until = kept[allocation_id]
            lapsed = 0.0 < until <= clock
            assert lapsed or highest > KEEPER_PRIORITY, (allocation_id, until, clock, highest)
