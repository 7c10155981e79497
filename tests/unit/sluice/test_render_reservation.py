"""What `sluice job` shows of slot reservation: the containers the job keeps, and until when."""

from __future__ import annotations

import time

from sluice import render
from sluice_pb import resource_manager_pb2 as rm_pb

TITLE = "kept containers (slot reservation, docs/jobspec.md)"


def detail(*kept: rm_pb.ReservedSlot) -> rm_pb.JobDetail:
    return rm_pb.JobDetail(summary=rm_pb.JobSummary(job_id="job-000001", name="ml"), kept=kept)


def test_a_job_shows_its_kept_containers_with_their_deadlines():
    until = 1_800_000_000.0
    text = render.job_detail(
        detail(
            rm_pb.ReservedSlot(allocation_id="a1", phase="reduce", until=until, node_id="n1"),
            rm_pb.ReservedSlot(allocation_id="a2", phase="reduce", node_id="n2"),
        )
    )
    header, first, second = text.split(TITLE)[1].strip().splitlines()
    assert header.split() == ["CONTAINER", "NODE", "KEPT", "FOR", "UNTIL"]
    assert first.split() == ["a1", "n1", "reduce", time.strftime("%H:%M:%S", time.localtime(until))]
    assert second.split()[:3] == ["a2", "n2", "reduce"] and "no deadline yet" in second


def test_a_job_keeping_nothing_shows_no_such_section():
    assert TITLE not in render.job_detail(detail())
