"""What `sluice job` shows of an operator's hand (issue 28): who holds a task preempted, and
what a job sprinted, running or finished."""

from __future__ import annotations

import pytest

from sluice import render
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def detail(held_by: str, *steps: rm_pb.PreemptionEvent) -> rm_pb.JobDetail:
    return rm_pb.JobDetail(
        summary=rm_pb.JobSummary(job_id="job-000001", name="long"),
        tasks=[
            rm_pb.TaskInfo(
                task_id="work-0", attempt=1, node_id="n1", held_by=held_by, preemptions=steps
            ),
        ],
    )


@pytest.mark.parametrize(
    ("held_by", "shown"),
    [
        ("operator", "held by an operator until `sluice task resume job-000001 work-0`"),
        ("scheduler", "held by the scheduler's preemption until its node has room"),
    ],
)
def test_a_job_says_who_holds_a_preempted_task(held_by: str, shown: str) -> None:
    step = rm_pb.PreemptionEvent(time=100.0, action="suspended", reason="by an operator")
    section = render.job_detail(detail(held_by, step)).split("preemptions (docs/preemption.md)")[1]
    assert f"work-0 attempt 1 on n1: {shown}" in section


def test_a_hold_its_node_has_not_carried_out_yet_is_shown_too() -> None:
    assert "held by an operator" in render.job_detail(detail("operator"))


def test_a_task_running_whole_after_its_steps_says_nothing_of_a_hold() -> None:
    step = rm_pb.PreemptionEvent(time=100.0, action="resumed")
    assert "held by" not in render.job_detail(detail("", step))


@pytest.mark.parametrize("state", [pb.JOB_RUNNING, pb.JOB_SUCCEEDED])
def test_the_job_view_shows_what_the_job_sprinted(state: pb.JobState) -> None:
    summary = rm_pb.JobSummary(
        job_id="job-000001", state=state, dias=rm_pb.DiasInfo(sprinted_s=24.7)
    )
    assert "sprint     sprinted 24.7 s" in render.job_detail(rm_pb.JobDetail(summary=summary))
