"""Differential, BIG-C preemption (docs/preemption.md): the live cluster and the simulator
preempt the same container the same way at the same step, and give it back alike.

Two long jobs in the low-share queue (``immediate``: suspend) fill the nodes with tasks held at
a gate, the second one's single task started last (so that the victim is the scenario's choice,
not the order in which the nodes happened to report their tasks running: BIG-C takes the newest
job's newest running container first).  A short job arrives in the high-share queue: its job
master takes the last place, and its task fits nowhere, so the second long job's task is
suspended for it.  The short task runs and ends, and the long task is resumed; then the gate
opens and the long jobs end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from plumbing.wire import JOB_STATE_FROM_PB
from policies.preemption.queues import parse_queue_config
from policies.scheduling.lifecycle import JobState
from resource_manager.core import CoreSettings
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Gate, wait_until
from tests.integration.differential.harness import (
    assert_same_decisions,
    live_cluster,
    simulate,
)

pytestmark = pytest.mark.integration

QUEUES: dict[str, Any] = {
    "default": "long",
    "queues": {"short": {"share": 0.95}, "long": {"share": 0.05, "mode": "immediate"}},
}


def spec(name: str, queue: str, tasks: int, cpu: float, script: str) -> str:
    phase = {
        "name": "w",
        "tasks": tasks,
        "command": ["sh", "-c", script],
        "resources": {"cpu": cpu, "memory_mb": 64},
    }
    return yaml.safe_dump({"name": name, "queue": queue, "max_retries": 0, "phases": [phase]})


def resumed(detail: rm_pb.JobDetail) -> bool:
    """Its task runs again with its whole grant (no preemption holds it)."""
    return all(t.state == pb.TASK_RUNNING and not t.held_by for t in detail.tasks)


def test_a_suspension_for_a_short_job_is_decided_alike_live_and_simulated(
    tmp_path: Path, gate: Gate
):
    queues = tmp_path / "queues.yaml"
    queues.write_text(yaml.safe_dump(QUEUES))
    with live_cluster(tmp_path, queues=queues, max_master_share=0.3) as live:
        first = live.submit(spec("long-a", "long", 3, 0.9, gate.hold("sleep 1")))
        for index in range(3):
            live.cluster.wait_task_running(first, f"w-{index}", timeout=60)
        second = live.submit(spec("long-b", "long", 1, 0.9, gate.hold("sleep 1")))
        live.cluster.wait_task_running(second, "w-0", timeout=60)
        short = live.submit(spec("short", "short", 1, 0.5, "sleep 2"))
        short_done = live.cluster.wait_final(short, timeout=120)
        wait_until(lambda: resumed(live.cluster.job(second)), 60, "the long task resumed")
        gate.open(live.cluster, first, [])
        details = {j: live.cluster.wait_final(j, timeout=120) for j in (first, second)}
        details[short] = short_done
        records = live.records()
    for detail in details.values():
        assert JOB_STATE_FROM_PB[detail.summary.state] is JobState.SUCCEEDED
    assert any(r["decision"] == "preemption" for r in records), records
    assert any(r["decision"] == "resumption" for r in records), records  # (a plan of its own)
    simulated = simulate(
        live,
        details,
        core=CoreSettings(max_master_share=0.3),
        queues=parse_queue_config(QUEUES),
    )
    assert_same_decisions(records, simulated.decisions, causal=[("j2 placement", "j1 preemption")])
