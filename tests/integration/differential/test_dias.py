"""Differential, DiAS (docs/approximation.md): the live cluster and the simulator dispatch,
drop and sprint alike.

The RM runs ``--dispatch dias --max-running-jobs 1``: priority 0 drops a quarter of its droppable
phases, priority 5 sprints a second after its first task starts.  A low priority job runs three
of its four droppable map tasks (its job master reports the fourth dropped) and then its
sum; a high priority job submitted meanwhile waits in its buffer until the low one ends (DiAS
never evicts), then runs and sprints (sprint changes are in the trace once the plan carries
them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from plumbing.wire import JOB_STATE_FROM_PB
from policies.approximation.dias_config import parse_dias_config
from policies.approximation.dispatch import DispatchMode
from policies.scheduling.lifecycle import JobState
from resource_manager.core import CoreSettings
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Gate, job_spec, phase, wait_until
from tests.integration.differential.harness import (
    assert_same_decisions,
    live_cluster,
    simulate,
)

pytestmark = pytest.mark.integration

LOW, HIGH = 0, 5
SETTINGS: dict[str, Any] = {
    "priorities": [
        {"priority": LOW, "drop_ratio": 0.25},
        {"priority": HIGH, "sprint_timeout_s": 1},
    ],
    "sprint": {"budget_s": 3, "replenish_s_per_hour": 1800, "factor": 2.0},
}


def running(detail: rm_pb.JobDetail) -> int:
    return sum(t.state == pb.TASK_RUNNING for t in detail.tasks)


def test_drops_and_buffered_dispatch_are_decided_alike_live_and_simulated(
    tmp_path: Path, gate: Gate
):
    settings = tmp_path / "dias.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    spec = {"dispatch": "dias", "max_running_jobs": 1, "dias_config": settings}
    with live_cluster(tmp_path, **spec) as live:
        low = live.submit(
            job_spec(
                "approximate",
                [
                    {**phase("map", 4, gate.hold("sleep 1"), cpu=0.5), "droppable": True},
                    phase("sum", 1, "sleep 1", ["map"], cpu=0.5),
                ],
                LOW,
            )
        )
        wait_until(lambda: running(live.cluster.job(low)) == 3, 60, "three map tasks running")
        high = live.submit(job_spec("urgent", [phase("p", 1, "sleep 3", cpu=0.5)], HIGH))
        gate.open(live.cluster, low, [])
        details = {j: live.cluster.wait_final(j, timeout=120) for j in (low, high)}
        records = live.records()
    for detail in details.values():
        assert JOB_STATE_FROM_PB[detail.summary.state] is JobState.SUCCEEDED, detail.summary
    assert any(r["decision"] == "drop" for r in records), records
    assert any(r["decision"] == "sprint_change" for r in records), records  # (the high job's)
    core = CoreSettings(
        dispatch=DispatchMode.DIAS, max_running_jobs=1, dias=parse_dias_config(SETTINGS)
    )
    simulated = simulate(live, details, core=core)
    assert_same_decisions(records, simulated.decisions)
