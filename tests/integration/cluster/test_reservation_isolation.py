"""Slot reservation isolates a high-priority pipeline from batch work, on two real nodes
(process runtime), and its kept containers run straggler copies.

The cluster has room for the pipeline's four tasks and no more.  A low-priority batch job asks
for long tasks that would take every container the pipeline frees at a barrier.  Without a
reservation they do, and the pipeline's next phase waits for them; with one, the pipeline keeps
its containers across both barriers and no batch task starts before it ends.  (How much time
that saves is measured by bench/bench_reservation_live.py, not asserted here.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, Gate, phase, running_cluster, wait_until

WIDTH = 4  # two nodes of 2 cpu, less two job masters' 0.1 cpu: four 0.9-cpu containers
BATCH_TASK_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Two job masters (256 MiB each) are more than the RM's default share of 4 GiB
    yield from running_cluster(tmp_path_factory, "isolation", nodes=2, max_master_share=0.2)


def pipeline(gate: Gate, reservation: dict[str, object] | None) -> str:
    """Three phases of four tasks with barriers; within a phase task i sleeps 0.3 (i + 1) s, so
    containers come free one after another while the barrier holds.  The first phase waits for
    the gate: the batch job is asking by the time the first barrier comes."""
    tenths = "$(( (${SLUICE_TASK_ID##*-} + 1) * 3 ))"
    work = f"t={tenths}; sleep $(( t / 10 )).$(( t % 10 ))"
    document: dict[str, object] = {
        "name": "pipeline",
        "priority": 10,
        "max_retries": 0,
        "phases": [
            phase("p1", WIDTH, gate.hold(work), cpu=0.9),
            phase("p2", WIDTH, work, after=["p1"], cpu=0.9),
            phase("p3", WIDTH, work, after=["p2"], cpu=0.9),
        ],
    }
    if reservation is not None:
        document["reservation"] = reservation
    return yaml.safe_dump(document)


def diamond(gate: Gate, reservation: dict[str, object] | None) -> str:
    """A fork and a join: four tasks feeding two phases of two that join into four, the
    tasks timed as in :func:`pipeline`."""
    tenths = "$(( (${SLUICE_TASK_ID##*-} + 1) * 3 ))"
    work = f"t={tenths}; sleep $(( t / 10 )).$(( t % 10 ))"
    document: dict[str, object] = {
        "name": "diamond",
        "priority": 10,
        "max_retries": 0,
        "phases": [
            phase("split", WIDTH, gate.hold(work), cpu=0.9),
            phase("left", WIDTH // 2, work, after=["split"], cpu=0.9),
            phase("right", WIDTH // 2, work, after=["split"], cpu=0.9),
            phase("join", WIDTH, work, after=["left", "right"], cpu=0.9),
        ],
    }
    if reservation is not None:
        document["reservation"] = reservation
    return yaml.safe_dump(document)


def batch() -> str:
    return yaml.safe_dump(
        {
            "name": "batch",
            "priority": 0,
            "max_retries": 0,
            "phases": [phase("work", 3 * WIDTH, f"sleep {BATCH_TASK_S}", cpu=0.9)],
        }
    )


def run_beside_batch(
    cluster: Cluster, gate: Gate, reservation: dict[str, object] | None, *, dag: bool = False
) -> tuple[rm_pb.JobDetail, rm_pb.JobDetail]:
    """The pipeline (``dag``: the diamond) once its first phase runs, then the batch job; the
    pipeline's and the batch job's records once the pipeline has ended (the batch job is
    killed then)."""
    document = (diamond if dag else pipeline)(gate, reservation)
    hp = gate.kill_on_close(cluster, cluster.submit(document))
    wait_until(
        lambda: sum(t.state == pb.TASK_RUNNING for t in cluster.job(hp).tasks) == WIDTH,
        60,
        "the pipeline's first phase running",
    )
    lp = gate.kill_on_close(cluster, cluster.submit(batch()))
    wait_until(lambda: cluster.job(lp).summary.state == pb.JOB_RUNNING, 60, "the batch job asking")
    gate.open(cluster, hp, [])
    hp_detail = cluster.wait_final(hp, timeout=4 * BATCH_TASK_S + 60)
    cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=lp), timeout=10)
    lp_detail = cluster.wait_final(lp, timeout=60)
    assert hp_detail.summary.state == pb.JOB_SUCCEEDED, hp_detail.summary.message
    return hp_detail, lp_detail


def containers(detail: rm_pb.JobDetail, phase_name: str) -> set[str]:
    return {t.allocation_id for t in detail.tasks if t.phase == phase_name}


def last_barrier(hp: rm_pb.JobDetail, last: str = "p3") -> float:
    """When the pipeline's last phase started."""
    return min(t.start_time for t in hp.tasks if t.phase == last)


def batch_starts_before(lp: rm_pb.JobDetail, end: float) -> list[rm_pb.TaskInfo]:
    return [t for t in lp.tasks if 0 < t.start_time < end]


def test_without_a_reservation_batch_tasks_take_the_slots_freed_at_a_barrier(
    cluster: Cluster, gate: Gate
) -> None:
    hp, lp = run_beside_batch(cluster, gate, None)
    assert batch_starts_before(lp, last_barrier(hp))  # they took its slots at a barrier
    assert containers(hp, "p2") != containers(hp, "p1")


def test_with_a_reservation_the_pipeline_keeps_its_slots_and_no_batch_task_starts_on_them(
    cluster: Cluster, gate: Gate
) -> None:
    # P = 0.999 keeps them t_min (1 - 0.999^(1/4))^(-1/alpha) past each phase's start (Eq. 4):
    # with these task times (t_min about 0.3 s, alpha 1 to 3) 4 s at the least, far longer
    # than a phase takes, so none lapses here.
    hp, lp = run_beside_batch(cluster, gate, {"isolation": 0.999})
    assert containers(hp, "p3") == containers(hp, "p2") == containers(hp, "p1")
    # Until the last barrier passed every container was kept (the final phase gives each
    # back as its task ends, Alg. 1 line 3, and batch tasks may start there then)
    assert batch_starts_before(lp, last_barrier(hp)) == []


def test_with_a_reservation_a_fork_and_a_join_keep_their_slots_and_no_batch_task_starts(
    cluster: Cluster, gate: Gate
) -> None:
    # The fork keeps its four containers for both of its downstream phases (two each), the
    # join takes the four they keep; each kept container's end is recorded: all four used
    # at each of the two barriers, none lost to a deadline, a takeover or its node.
    hp, lp = run_beside_batch(cluster, gate, {"isolation": 0.999}, dag=True)
    assert containers(hp, "left") | containers(hp, "right") == containers(hp, "split")
    assert containers(hp, "join") == containers(hp, "split")
    assert batch_starts_before(lp, last_barrier(hp, "join")) == []
    ends = [(e.phase, e.ended) for e in hp.kept_ended]
    assert sorted(ends) == sorted(
        [("left", "used")] * 2 + [("right", "used")] * 2 + [("join", "used")] * WIDTH
    ), ends


def test_a_planted_straggler_is_overtaken_by_its_copy_on_a_kept_container(
    cluster: Cluster,
) -> None:
    # a-0's first attempt would run for ten minutes; any other attempt (its copy) ends at once.
    straggle = '[ "$SLUICE_TASK_ID/$SLUICE_ATTEMPT" = a-0/1 ] && sleep 600; true'
    document = {
        "name": "straggler",
        "priority": 10,
        "max_retries": 0,
        "reservation": {"isolation": 0.9, "straggler_copies": True},
        "phases": [
            phase("a", 2, straggle, cpu=0.9),
            phase("b", 2, "true", after=["a"], cpu=0.9),
        ],
    }
    job_id = cluster.submit(yaml.safe_dump(document))
    detail = cluster.wait_final(job_id, timeout=90)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    attempts = {t.attempt: t for t in detail.tasks if t.task_id == "a-0"}
    assert attempts[2].state == pb.TASK_SUCCEEDED  # the copy won ...
    assert attempts[1].state == pb.TASK_KILLED  # ... and the straggler was stopped
    kept_from_a1 = next(t.allocation_id for t in detail.tasks if t.task_id == "a-1")
    assert attempts[2].allocation_id == kept_from_a1  # on the container a-1 left
