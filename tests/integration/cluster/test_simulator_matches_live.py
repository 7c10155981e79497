"""The simulator against the live system: the demo's workload on a real 2-node local cluster, then
replayed by the simulator with the task durations and job master start-up measured in the live
run (issue 9's second check: the same completion order, completion times within 25 %)."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

import pytest

from plumbing.spec_text import load_job_document
from plumbing.wire import JOB_STATE_FROM_PB, TASK_STATE_FROM_PB
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from simulator.engine import SimSettings, Simulation
from simulator.workload import SimJob
from sluice import local_cluster
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import start_cluster

pytestmark = pytest.mark.integration

NODES, CPUS, MEMORY_MB = 2, 2.0, 2048  # the harness's local cluster


def example(name: str) -> str:
    return (resources.files("sluice") / "examples" / name).read_text()


def measured_durations(detail: rm_pb.JobDetail) -> dict[str, tuple[float, ...]]:
    """Each task's duration in the live run: its succeeded attempt, start to finish."""
    spec = parse_job_spec(load_job_document(example(f"{detail.summary.name}.yaml")))
    took: dict[str, float] = {}
    for task in detail.tasks:
        if TASK_STATE_FROM_PB[task.state] is TaskState.SUCCEEDED:
            took[task.task_id] = max(0.0, task.finish_time - task.start_time)
    return {
        phase.name: tuple(took[f"{phase.name}-{i}"] for i in range(phase.tasks))
        for phase in spec.phases
    }


def test_the_demo_workload_simulated_matches_the_live_run(tmp_path: Path):
    directory = tmp_path / "cluster"
    cluster = start_cluster(directory, "process", nodes=NODES)
    try:
        # As `sluice demo` submits them: the batch job, then a second later the analytics job.
        batch = cluster.submit(example("batch.yaml"))
        time.sleep(1.0)  # the demo's pause between submissions, part of the workload
        analytics = cluster.submit(example("analytics.yaml"))
        details = {job_id: cluster.wait_final(job_id, timeout=180) for job_id in (batch, analytics)}
    finally:
        cluster.close()
        local_cluster.down(directory, lambda _: None)
    for detail in details.values():
        assert JOB_STATE_FROM_PB[detail.summary.state] is JobState.SUCCEEDED

    first_submit = min(d.summary.submit_time for d in details.values())
    jobs = [
        SimJob(
            name=detail.summary.name,
            job_class=detail.summary.name,
            submit_time=detail.summary.submit_time - first_submit,
            spec=parse_job_spec(load_job_document(example(f"{detail.summary.name}.yaml"))),
            durations=measured_durations(detail),
        )
        for detail in details.values()
    ]
    # The job master's start-up as measured: from submission to registration, less the half
    # heartbeat its node waits on average before launching it.  The quickest job's: a job whose
    # job master had to wait for room (the job master share) measures that wait too, which the
    # simulation reproduces by itself.
    startups = [d.summary.start_time - d.summary.submit_time for d in details.values()]
    settings = SimSettings(
        nodes=NODES,
        node_cpu=CPUS,
        node_memory_mb=MEMORY_MB,
        master_startup=max(0.0, min(startups) - 0.5),
        master_startup_jitter=0.01,
    )
    simulated = {o.name: o for o in Simulation(jobs, settings, seed=1).run().outcomes}
    live = {d.summary.name: d.summary for d in details.values()}

    def finishing_order(finish: dict[str, float]) -> list[str]:
        return sorted(finish, key=finish.__getitem__)

    assert finishing_order({n: s.finish_time for n, s in live.items()}) == finishing_order(
        {n: o.finish_time for n, o in simulated.items()}
    )
    for name, summary in live.items():
        completion = summary.finish_time - summary.submit_time
        assert simulated[name].completion_time == pytest.approx(completion, rel=0.25), (
            f"{name}: simulated {simulated[name].completion_time:.1f} s, live {completion:.1f} s"
        )
