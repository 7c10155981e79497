"""Speculative slot reservation on a real cluster (process runtime): a job with a
``reservation`` keeps its containers across a barrier, and its downstream tasks run in them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, Gate, phase, running_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "reservation", nodes=1)


def two_phase_job(reservation: dict[str, object] | None) -> str:
    # The upstream tasks end one after another, so the first ones' containers are free while
    # the barrier still holds.
    document: dict[str, object] = {
        "name": "kept",
        "priority": 5,
        "max_retries": 0,
        "phases": [
            phase("up", 3, "sleep $(( ${SLUICE_TASK_ID#up-} + 1 ))", cpu=0.5, mem=64),
            phase("down", 3, "true", after=["up"], cpu=0.5, mem=64),
        ],
    }
    if reservation is not None:
        document["reservation"] = reservation
    return yaml.safe_dump(document)


@pytest.mark.parametrize(
    ("reservation", "kept"),
    [(None, False), ({"isolation": 0.9}, True)],
    ids=["without", "with"],
)
def test_with_a_reservation_the_downstream_tasks_run_in_the_upstream_containers(
    cluster: Cluster, reservation: dict[str, object] | None, kept: bool
) -> None:
    job_id = cluster.submit(two_phase_job(reservation))
    detail = cluster.wait_final(job_id, timeout=90)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    up = {t.allocation_id for t in detail.tasks if t.phase == "up"}
    down = {t.allocation_id for t in detail.tasks if t.phase == "down"}
    assert len(up) == len(down) == 3
    assert (down == up) is kept


def test_the_rm_shows_the_kept_container_and_its_deadline_while_the_barrier_holds(
    cluster: Cluster, gate: Gate
) -> None:
    document = {
        "name": "held",
        "priority": 5,
        "max_retries": 0,
        "reservation": {"isolation": 0.9, "prior": {"alpha": 2.0, "t_min": 600}},
        "phases": [
            # up-0 ends at once, up-1 waits for the gate: up-0's container is kept for "down"
            phase("up", 2, f'[ "$SLUICE_TASK_ID" = up-0 ] || {{ {gate.hold("true")}; }}'),
            phase("down", 2, "true", after=["up"]),  # m = n: every slot is kept (Alg. 1)
        ],
    }
    job_id = gate.kill_on_close(cluster, cluster.submit(yaml.safe_dump(document)))
    # The deadline counts from the start of up's last task: "no deadline yet" until up-1 is
    # seen running (up-0 may end before that), then up-1's start + D.
    kept = wait_until(
        lambda: [k for k in cluster.job(job_id).kept if k.until], 60, "a kept container's deadline"
    )
    (slot,) = kept
    up_0 = next(t for t in cluster.job(job_id).tasks if t.task_id == "up-0")
    assert (slot.allocation_id, slot.phase) == (up_0.allocation_id, "down")
    assert slot.until > time.time() + 600  # D of Eq. 4 is past t_min
    gate.open(cluster, job_id, ["up-1"])
    detail = cluster.wait_final(job_id, timeout=60)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    down = {t.allocation_id for t in detail.tasks if t.phase == "down"}
    assert slot.allocation_id in down
    assert list(detail.kept) == []


def test_a_copy_that_wins_leaves_both_its_and_the_losers_container_kept_for_the_next_phase(
    cluster: Cluster, gate: Gate
) -> None:
    # b-1's first attempt would run ten minutes; its copy (attempt 2) waits for the gate, so
    # the test sees it running on the container b-0 left, then lets it win.
    straggle = (
        '[ "$SLUICE_TASK_ID/$SLUICE_ATTEMPT" = b-1/1 ] && sleep 600; '
        f'[ "$SLUICE_TASK_ID" = b-1 ] && {{ {gate.hold("true")}; }}; true'
    )
    marks = f"{gate.path}-c"
    both_running = (
        f"touch {marks}-$SLUICE_TASK_ID; "
        f"while [ ! -e {marks}-c-0 ] || [ ! -e {marks}-c-1 ]; do sleep 0.1; done"
    )
    document = {
        "name": "copy-wins",
        "priority": 10,
        "max_retries": 0,
        "reservation": {"isolation": 0.9, "straggler_copies": True},
        "phases": [
            phase("a", 2, "true", cpu=0.5, mem=64),
            phase("b", 2, straggle, after=["a"], cpu=0.5, mem=64),
            # Each c task waits until both run: neither container goes back to its phase's
            # own copies before the loser's has served (a final phase keeps its freed ones).
            phase("c", 2, both_running, after=["b"], cpu=0.5, mem=64),
        ],
    }
    job_id = gate.kill_on_close(cluster, cluster.submit(yaml.safe_dump(document)))

    def copy_running() -> rm_pb.JobDetail | None:
        detail = cluster.job(job_id)
        running = any(
            t.task_id == "b-1" and t.attempt == 2 and t.state == pb.TASK_RUNNING
            for t in detail.tasks
        )
        return detail if running else None

    held = wait_until(copy_running, 90, "b-1's copy running")
    b_0 = next(t.allocation_id for t in held.tasks if t.task_id == "b-0")
    attempts = {t.attempt: t for t in held.tasks if t.task_id == "b-1"}
    assert attempts[2].allocation_id == b_0  # the copy runs on the container b-0 left
    loser = attempts[1].allocation_id
    gate.open(cluster, job_id, ["b-1"])
    detail = cluster.wait_final(job_id, timeout=90)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    attempts = {t.attempt: t for t in detail.tasks if t.task_id == "b-1"}
    assert (attempts[1].state, attempts[2].state) == (pb.TASK_KILLED, pb.TASK_SUCCEEDED)
    # The next phase runs on both: the winner's and the loser's, no new container.
    assert {t.allocation_id for t in detail.tasks if t.phase == "c"} == {b_0, loser}
    assert list(detail.kept) == []
    for task in ("c-0", "c-1"):
        Path(f"{marks}-{task}").unlink(missing_ok=True)
