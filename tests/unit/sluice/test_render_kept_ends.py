"""What `sluice job` shows of how its kept containers ended (slot reservation, issue 28): a
count per way, and a line for each that ended before its phase could use it."""

from __future__ import annotations

import time

import pytest

from sluice import render
from sluice_pb import resource_manager_pb2 as rm_pb


def ended(allocation_id: str, why: str, at: float = 1_800_000_000.0) -> rm_pb.ReservedSlot:
    return rm_pb.ReservedSlot(
        allocation_id=allocation_id, phase="reduce", node_id="node-2", ended=why, ended_at=at
    )


def view(*ends: rm_pb.ReservedSlot) -> str:
    summary = rm_pb.JobSummary(job_id="job-000004", name="ml")
    return render.job_detail(rm_pb.JobDetail(summary=summary, kept_ended=ends))


@pytest.mark.parametrize(
    ("ends", "title", "listed"),
    [
        ((), None, []),
        ((ended("a1", "used"), ended("a2", "used")), "used 2", []),
        (
            (ended("a1", "used"), ended("a2", "deadline"), ended("a3", "released")),
            "deadline 1, released 1, used 1",
            ["a2"],
        ),
        (
            (
                ended("a4", "taken: reservation of job-000004 yields to job-000009"),
                ended("a5", "node node-2 lost"),
            ),
            "lost 1, taken 1",
            ["a4", "a5"],
        ),
    ],
)
def test_the_job_view_counts_each_way_and_lists_the_kept_containers_lost(
    ends: tuple[rm_pb.ReservedSlot, ...], title: str | None, listed: list[str]
):
    text = view(*ends)
    if title is None:
        assert "kept containers that ended" not in text
        return
    assert f"kept containers that ended ({title}; docs/reservation.md)" in text
    for end in ends:
        line = next((row for row in text.splitlines() if row.startswith(end.allocation_id)), None)
        if end.allocation_id in listed:
            assert line is not None and end.ended in line and "reduce" in line
            assert time.strftime("%H:%M:%S", time.localtime(end.ended_at)) in line
        else:
            assert line is None
