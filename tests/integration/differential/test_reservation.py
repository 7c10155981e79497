"""Differential, slot reservation (docs/reservation.md): the live cluster and the simulator keep
the same container across a barrier and hand it over alike to a higher priority job.

A low priority filler takes half the cluster (its tasks held at a gate).  A two-phase job with
a reservation runs ``up`` in the rest: ``up-0`` ends at once and its container is kept for
``down`` while ``up-1`` waits at the gate (the barrier holds).  A high priority job then asks for a container
that fits nowhere but in the kept one: the reservation override takes it over (Algorithm 1,
lines 18-22), and the high job's task runs there.  Then the gate opens and everything ends.
(Before issue 29 the simulated job master never reported kept containers, so no simulation
could make this takeover.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from plumbing.wire import JOB_STATE_FROM_PB
from policies.scheduling.lifecycle import JobState
from resource_manager.core import CoreSettings
from tests.integration.cluster.harness import Gate, job_spec, phase, wait_until
from tests.integration.differential.harness import (
    TaskGates,
    assert_same_decisions,
    live_cluster,
    simulate,
)

pytestmark = pytest.mark.integration

CPU = 0.9


def keeper(gate: Gate) -> str:
    document = {
        "name": "keeper",
        "priority": 5,
        "max_retries": 0,
        # A long deadline (t_min): the kept container is taken over, never lapses.
        "reservation": {"isolation": 0.9, "prior": {"alpha": 2.0, "t_min": 600}},
        "phases": [
            phase("up", 2, f'[ "$SLUICE_TASK_ID" = up-0 ] || {{ {gate.hold("true")}; }}', cpu=CPU),
            phase("down", 2, "sleep 1", after=["up"], cpu=CPU),
        ],
    }
    return yaml.safe_dump(document)


def test_a_kept_container_and_its_takeover_are_decided_alike_live_and_simulated(
    tmp_path: Path, gate: Gate, gates: TaskGates
):
    with live_cluster(tmp_path, max_master_share=0.3) as live:
        filler = live.submit(
            job_spec("filler", [phase("f", 2, gates.hold("filler", "sleep 1"), cpu=CPU)], 1)
        )
        for index in range(2):
            live.cluster.wait_task_running(filler, f"f-{index}", timeout=60)
        kept_by = live.submit(keeper(gate))
        wait_until(lambda: list(live.cluster.job(kept_by).kept), 60, "up-0's container kept")
        urgent = live.submit(job_spec("urgent", [phase("u", 1, "sleep 2", cpu=CPU)], 9))
        urgent_done = live.cluster.wait_final(urgent, timeout=120)
        # The filler ends before the barrier does, so that where down's new container goes
        # does not hang on which node reports first.
        gates.open("filler", "f-0")
        gates.open("filler", "f-1")
        filler_done = live.cluster.wait_final(filler, timeout=120)
        gate.open(live.cluster, kept_by, [])
        details = {kept_by: live.cluster.wait_final(kept_by, timeout=120), filler: filler_done}
        details[urgent] = urgent_done
        records = live.records()
    for detail in details.values():
        assert JOB_STATE_FROM_PB[detail.summary.state] is JobState.SUCCEEDED, detail.summary
    assert any(r["decision"] == "kept" for r in records), records
    simulated = simulate(live, details, core=CoreSettings(max_master_share=0.3))
    assert_same_decisions(
        records,
        simulated.decisions,
        causal=[("j2 placement", "j1 preemption")],  # (the takeover is for the urgent job)
    )
