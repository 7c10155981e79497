"""``GetJob`` says why each pending ask is pending (issue 29), served for real: the RM judges
its asks with the plugins the next pass would use, and ``sluice job`` shows the line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.render import job_detail
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.unit.resource_manager.test_service import Served

SPEC = """
name: wide
phases:
  - name: map
    tasks: 3
    command: ["true"]
    resources: {cpu: 2, memory_mb: 64}
"""


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


def test_a_job_with_more_tasks_than_room_says_why_they_wait(served: Served) -> None:
    served.register("n1")  # 2 cpu: room for one task
    job_id = served.jobs.SubmitJob(
        rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True), timeout=5
    ).job.job_id
    served.masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job_id), timeout=5)
    answer = served.masters.Allocate(
        rm_pb.AllocateRequest(
            job_id=job_id,
            master_attempt=1,
            asks=[rm_pb.Ask(phase="map", count=3, resources={"cpu": 2, "memory_mb": 64})],
        ),
        timeout=5,
    )
    assert len(answer.granted) == 1
    detail = served.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5)
    (pending,) = detail.pending
    assert (pending.phase, pending.job_master, pending.count) == ("map", False, 2)
    assert (pending.nodes, pending.available, pending.held_back) == (1, 0, "")
    assert [(r.reason, r.nodes) for r in pending.reasons] == [("insufficient cpu", 1)]
    assert pending.text == "0/1 nodes are available: 1 insufficient cpu"
    shown = job_detail(detail)
    assert (
        "  phase map: 2 containers of 2 cpu, 64 MB: 0/1 nodes are available: 1 insufficient cpu"
        in shown.splitlines()
    )


def test_a_job_with_nothing_pending_shows_no_section(served: Served) -> None:
    served.register("n1")
    job_id = served.jobs.SubmitJob(
        rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True), timeout=5
    ).job.job_id
    detail = served.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5)
    assert list(detail.pending) == []  # (client mode, no master registered: nothing asked yet)
    assert "pending (why" not in job_detail(detail)
