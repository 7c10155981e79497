"""Differential, plain priority scheduling: the live cluster and the simulator place the same
containers in the same order, on the same nodes (tolerance: harness.TOLERANCE).

Every task waits at a gate of its own, and the test lets them end one at a time, each after
the scheduler has answered the one before: what the scheduler decides at each step is the
test's subject, the order of the ends is the scenario's.  A low priority job fills both nodes
with four tasks.  A middle and then a high priority job arrive (their job masters fit beside)
and ask for three tasks each.  As each low task ends, its place goes to the high job, three
times, then to the middle one; the middle job's last two tasks take the places the high job's
tasks leave."""

from __future__ import annotations

from pathlib import Path

import pytest

from resource_manager.core import CoreSettings
from sluice_pb import common_pb2 as pb
from tests.integration.cluster.harness import job_spec, phase, wait_until
from tests.integration.differential.harness import (
    LiveRun,
    TaskGates,
    assert_same_decisions,
    live_cluster,
    simulate,
)

pytestmark = pytest.mark.integration

CPU = 0.9  # four tasks fill two nodes of 2 cpu beside the job masters


def asking(live: LiveRun, job_id: str, tasks: int) -> bool:
    """The job's master registered and asks for ``tasks`` more task containers."""
    detail = live.cluster.job(job_id)
    return any(p.phase and p.count == tasks for p in detail.pending)


def count(live: LiveRun, job_id: str, state: int) -> int:
    return sum(t.state == state for t in live.cluster.job(job_id).tasks)


def started(live: LiveRun, job_id: str) -> int:
    """The job's tasks running or done."""
    return sum(
        t.state in (pb.TASK_RUNNING, pb.TASK_SUCCEEDED) for t in live.cluster.job(job_id).tasks
    )


def test_priority_scheduling_decides_alike_live_and_simulated(tmp_path: Path, gates: TaskGates):
    with live_cluster(tmp_path, max_master_share=0.3) as live:
        low = live.submit(
            job_spec("low", [phase("w", 4, gates.hold("low", "sleep 1"), cpu=CPU)], 1)
        )
        wait_until(lambda: count(live, low, pb.TASK_RUNNING) == 4, 60, "low's tasks running")
        mid = live.submit(
            job_spec("mid", [phase("w", 3, gates.hold("mid", "sleep 1"), cpu=CPU)], 5)
        )
        high = live.submit(
            job_spec("high", [phase("w", 3, gates.hold("high", "sleep 1"), cpu=CPU)], 9)
        )
        wait_until(lambda: asking(live, mid, 3) and asking(live, high, 3), 60, "both asking")
        # Each end, then the job whose task takes its place, with how many of its tasks placed.
        steps = [
            ("low", "w-0", high, 1),
            ("low", "w-1", high, 2),
            ("low", "w-2", high, 3),
            ("low", "w-3", mid, 1),
            ("high", "w-0", mid, 2),
            ("high", "w-1", mid, 3),
        ]
        for name, task, placed, running in steps:
            gates.open(name, task)
            wait_until(
                lambda: started(live, placed) >= running,  # noqa: B023 (called in this turn)
                60,
                f"{name}'s {task} ended and its place taken",
            )
        gates.open("high", "w-2")
        for task in ("w-0", "w-1", "w-2"):
            gates.open("mid", task)
        details = {j: live.cluster.wait_final(j, timeout=120) for j in (low, mid, high)}
        records = live.records()
    simulated = simulate(live, details, core=CoreSettings(max_master_share=0.3))
    assert_same_decisions(records, simulated.decisions)
