"""Differential, plain priority scheduling: the live cluster and the simulator place the same
containers in the same order (tolerance: harness.TOLERANCE).

A low priority job fills both nodes with four tasks held at a gate.  A middle and then a high
priority job arrive (their job masters fit beside) and ask for three tasks each, of which only
four fit in all.  Once both are asking, the gate opens: as each low task ends, the freed place
goes to the high job first, then to the middle one, whose last tasks wait for the high job's to
end."""

from __future__ import annotations

from pathlib import Path

import pytest

from resource_manager.core import CoreSettings
from tests.integration.cluster.harness import Gate, job_spec, phase, wait_until
from tests.integration.differential.harness import (
    LiveRun,
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


def test_priority_scheduling_decides_alike_live_and_simulated(tmp_path: Path, gate: Gate):
    with live_cluster(tmp_path, max_master_share=0.3) as live:
        low = live.submit(job_spec("low", [phase("w", 4, gate.hold("sleep 1"), cpu=CPU)], 1))
        for index in range(4):
            live.cluster.wait_task_running(low, f"w-{index}", timeout=60)
        mid = live.submit(job_spec("mid", [phase("w", 3, "sleep 2", cpu=CPU)], 5))
        high = live.submit(job_spec("high", [phase("w", 3, "sleep 2", cpu=CPU)], 9))
        wait_until(lambda: asking(live, mid, 3) and asking(live, high, 3), 60, "both asking")
        gate.open(live.cluster, low, [])
        details = {j: live.cluster.wait_final(j, timeout=120) for j in (low, mid, high)}
        records = live.records()
    simulated = simulate(live, details, core=CoreSettings(max_master_share=0.3))
    assert_same_decisions(records, simulated.decisions)
