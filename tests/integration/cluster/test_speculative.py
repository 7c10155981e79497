"""Speculative oversubscription on a real two-node cluster (ROSE, issue 13), checked from the
outside: through the RM's job and node views and the agents' own answers.

The cluster runs RP with a one-second aggregator period, so job masters get candidate lists
quickly.  Its agents admit speculative tasks up to half of their 2 cpu (``--speculative-quota``)
and queue at most two; the machine-wide thresholds are set to 1 so that what is checked never
depends on how busy the host is.  For the same reason the agents judge services by PSI the test
writes (:class:`SyntheticPressure`, through ``--machine-pressure``), not by the host's own,
which a saturated CI host keeps near 100 %.  A blocker job holds every container: whatever of
the speculative job runs, runs without one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, phase, running_cluster, wait_until

pytestmark = pytest.mark.integration

AGENT_ARGS = (
    "--admission-thresholds",
    "1,1,1",
    "--speculative-quota",
    "0.5,0.5,0.5",
    "--speculative-queue-length",
    "2",
    # The throttle's hold is checked on the agent (tests/integration/node_agent); here the
    # host's own load may cross a service's bound now and then, which must not keep the
    # queue blocked for long.
    "--throttle-hold",
    "1",
)

AGGREGATOR_ARGS = tuple(
    flag
    for metric in ("cpu_ut", "mem_ut", "load_avg_1")
    for flag in ("--load-threshold", f"{metric}=off")
)


class SyntheticPressure:
    """The machine's CPU PSI as the agents read it (``<directory>/cpu``, the kernel's format),
    written by the test: runnable work stalls ``stalled`` of the time (0 to 1), from now on.
    A thread advances ``total`` by the wall clock, so a sample over any interval, however late
    the agent takes it, reads that share; the file is replaced whole, never read half-written."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.stalled = 0.0
        self._total_us = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._write()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def set(self, stalled: float) -> None:
        with self._lock:
            self._advance()
            self.stalled = stalled

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _advance(self) -> None:
        now = time.monotonic()
        self._total_us += self.stalled * (now - self._last) * 1e6
        self._last = now

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                self._advance()
                self._write()

    def _write(self) -> None:
        share = 100.0 * self.stalled
        text = (
            f"some avg10={share:.2f} avg60={share:.2f} avg300={share:.2f} "
            f"total={int(self._total_us)}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        )
        temporary = self.directory / "cpu.tmp"
        temporary.write_text(text)
        temporary.replace(self.directory / "cpu")


@pytest.fixture(scope="module")
def pressure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyntheticPressure]:
    synthetic = SyntheticPressure(tmp_path_factory.mktemp("pressure"))
    yield synthetic
    synthetic.close()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, pressure: SyntheticPressure
) -> Iterator[Cluster]:
    yield from running_cluster(
        tmp_path_factory,
        "speculative",
        nodes=2,
        oversubscription="rp",
        aggregator_period=1.0,
        agent_args=(*AGENT_ARGS, "--machine-pressure", str(pressure.directory)),
        # The test host may be saturated by other work (CI's two cores): its load is not what
        # these tests are about, so the aggregator's load filter lets every machine through.
        aggregator_args=AGGREGATOR_ARGS,
        max_master_share=0.5,  # three job masters at once (256 MiB each of 4 GiB)
        # A restarted agent adopts within the node timeout; a busy host's restart can outlast
        # a local cluster's 5.5 s, and then the RM rightly counts the node lost.
        rm_args=("--node-timeout", "60"),
    )


def submit(cluster: Cluster, document: dict[str, object]) -> str:
    return cluster.submit(yaml.safe_dump(document))


def kill(cluster: Cluster, job_id: str) -> None:
    cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
    cluster.wait_final(job_id, timeout=60)


def blocker(cluster: Cluster) -> str:
    """A job holding every container of the cluster that is free: once it runs, no node has
    0.5 cpu left.  Its further tasks wait behind the speculative job's (a lower priority), so
    the latter's job master is placed in what is left, and the containers freed later go to
    the speculative job first."""
    job_id = submit(
        cluster,
        {"name": "blocker", "priority": 1, "phases": [phase("hold", 8, "sleep 600", cpu=0.5)]},
    )
    wait_until(
        lambda: all(n.capacity.cpu - n.allocated.cpu < 0.5 for n in nodes(cluster)),
        60,
        "the blocker holding every container",
    )
    return job_id


def speculative_job(tasks: int, script: str, **block: object) -> dict[str, object]:
    return {
        "name": "spec",
        "priority": 10,
        "speculative": {"after_s": 0.5, **block},
        "phases": [phase("map", tasks, script, cpu=0.5, mem=64)],
    }


def nodes(cluster: Cluster) -> list[rm_pb.NodeInfo]:
    return list(cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes)


def outcomes(detail: rm_pb.JobDetail) -> dict[str, int]:
    counts: dict[str, int] = {}
    for attempt in detail.speculative:
        counts[attempt.outcome] = counts.get(attempt.outcome, 0) + 1
    return counts


def test_speculative_tasks_run_without_containers_within_the_quota(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(12, "sleep 4"))
    try:
        # Past the quota (two 0.5-cpu tasks per node), the head of a queue waits, and says why.
        waiting = wait_until(
            lambda: [
                n.speculative
                for n in nodes(cluster)
                if n.speculative.blocked.startswith("cpu oversubscription")
            ],
            60,
            "a queue waiting on the quota",
        )
        assert "would exceed quota 0.5" in waiting[0].blocked
        busy = wait_until(
            lambda: [n for n in nodes(cluster) if n.speculative_tasks], 30, "speculative tasks"
        )
        assert all(n.opportunistic.cpu <= 1.0 for n in busy)  # never past the quota
        assert all(n.speculative.running <= 2 for n in nodes(cluster))
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        # Every task ran speculatively: the RM granted the job nothing and recorded no task.
        assert not detail.tasks
        assert outcomes(detail)["succeeded"] == 12
        refused = sum(n.speculative.refused for n in nodes(cluster))
        admitted = sum(n.speculative.admitted for n in nodes(cluster))
        assert admitted >= 12
        assert outcomes(detail).get("refused", 0) == refused  # a full queue answered so
    finally:
        kill(cluster, hold)


def test_a_granted_container_upgrades_the_speculative_task_on_its_node(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(2, "sleep 6"))
    try:
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("running", 0) == 2,
            60,
            "both tasks running speculatively",
        )
        kill(cluster, hold)  # containers come: on the nodes the speculative tasks run on
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        shown = outcomes(detail)
        assert shown.get("upgraded", 0) >= 1, detail.speculative
        upgraded = {(a.task_id, a.attempt) for a in detail.speculative if a.outcome == "upgraded"}
        # An upgraded attempt is the task's regular one from then on: the RM recorded it,
        # under the same attempt number, in a container.
        recorded = {(t.task_id, t.attempt): t for t in detail.tasks}
        for key in upgraded:
            assert recorded[key].state == pb.TASK_SUCCEEDED
            assert not recorded[key].allocation_id.startswith("speculative-")
    finally:
        if cluster.job(hold).summary.state not in (pb.JOB_KILLED, pb.JOB_SUCCEEDED):
            kill(cluster, hold)


def test_an_agent_restart_loses_and_duplicates_no_speculative_task(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(8, "sleep 5", queue_timeout_s=600))
    try:
        node_id = wait_until(
            lambda: next(
                (
                    n.node_id
                    for n in nodes(cluster)
                    if n.speculative.running >= 1 and n.speculative.queued >= 1
                ),
                None,
            ),
            60,
            "a node with speculative tasks running and queued",
        )
        cluster.restart_agent(node_id)
        detail = cluster.wait_final(job_id, timeout=180)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        assert "lost" not in outcomes(detail), detail.speculative
        # Every task succeeded exactly once: speculatively, or in a container.  Containers may
        # come while the agent is away (on a busy host it can take longer than the node
        # timeout, and the blocker's tasks there are lost and retried): a speculative task
        # upgraded into one is the task's regular attempt from then on, recorded by the RM.
        succeeded = [a.task_id for a in detail.speculative if a.outcome == "succeeded"] + [
            t.task_id for t in detail.tasks if t.phase == "map" and t.state == pb.TASK_SUCCEEDED
        ]
        assert sorted(succeeded) == sorted(f"map-{i}" for i in range(8)), detail
        recorded = {(t.task_id, t.attempt) for t in detail.tasks}
        upgraded = {(a.task_id, a.attempt) for a in detail.speculative if a.outcome == "upgraded"}
        assert upgraded <= recorded, detail
        node = cluster.node(node_id)
        keys = [
            (s.task.task_id, s.task.attempt)
            for s in cluster.agent_tasks(node["address"])
            if s.task.job_id == job_id
        ]
        assert len(keys) == len(set(keys))  # nothing ran twice under one name
    finally:
        kill(cluster, hold)


def service_healths(cluster: Cluster, job_id: str) -> list[agent_pb.ServiceHealth]:
    """The agents' watch of the job's running service tasks."""
    return [
        status.service
        for n in cluster.info["nodes"]
        for status in cluster.agent_tasks(n["address"])
        if status.task.job_id == job_id
        and status.task.task_id != "master"
        and status.state == pb.TASK_RUNNING
    ]


def test_interference_throttles_the_queue_and_evicts_speculative_tasks(
    cluster: Cluster, pressure: SyntheticPressure
) -> None:
    """A latency-sensitive service's PSI history is learnt (30 samples, one a second); then
    interference makes it anomalous: its node's queue blocks and its speculative tasks are
    evicted, reported as such.  The machine's PSI is what is judged (cgroup v1 keeps none per
    group), and the test writes it: no stall while the baseline is learnt (its bound is then
    the floor's 3 points), half the time stalled for the interference.  Real CPU burners on
    a host that other work already saturates would neither lower a learnt bound nor reliably
    cross it (CI saw the host's own PSI keep the bound above 90 % for 300 s)."""
    pressure.set(0.0)
    service = submit(
        cluster,
        {
            "name": "web",
            "kind": "service",
            "priority": 20,
            "service": {"latency_sensitive": True},
            "phases": [phase("server", 2, "sleep 600", cpu=0.5)],
        },
    )
    job_id = hold = ""
    try:
        wait_until(
            lambda: (
                (found := service_healths(cluster, service))
                and len(found) == 2
                and all(h.judging and h.indicator == "psi_cpu" and h.bound < 10 for h in found)
            ),
            300,
            "the service's baselines fitted on the quiet samples",
        )
        hold = blocker(cluster)  # what the service leaves
        job_id = submit(cluster, speculative_job(4, "sleep 600", queue_timeout_s=600))
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("running", 0) >= 2,
            60,
            "speculative tasks running beside the service",
        )
        pressure.set(0.5)  # interference: runnable work stalls half the time
        throttled = wait_until(
            lambda: [n.speculative for n in nodes(cluster) if n.speculative.throttled],
            60,
            "a node throttled",
        )
        assert throttled[0].blocked.startswith("throttled: psi_cpu of service")
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("evicted", 0) >= 1,
            30,
            "an eviction reported",
        )
        evicted = [a for a in cluster.job(job_id).speculative if a.outcome == "evicted"]
        assert evicted[0].message.startswith("evicted: psi_cpu")
        assert sum(n.speculative.evicted for n in nodes(cluster)) >= 1
    finally:
        pressure.set(0.0)
        for started in (job_id, hold):
            if started:
                kill(cluster, started)
        kill(cluster, service)
