"""Speculative slot reservation on a real cluster (process runtime): a job with a
``reservation`` keeps its containers across a barrier, and its downstream tasks run in them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from sluice_pb import common_pb2 as pb
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
    kept = wait_until(lambda: list(cluster.job(job_id).kept), 60, "a kept container")
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
