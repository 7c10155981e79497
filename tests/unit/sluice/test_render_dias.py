"""What `sluice jobs` and `sluice job` show of DiAS: buffers, drop ratios, evictions."""

from __future__ import annotations

from typing import Any

import pytest

from sluice import render
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def summary(job_id: str, priority: int, state: pb.JobState, **dias: Any) -> rm_pb.JobSummary:
    return rm_pb.JobSummary(
        job_id=job_id, name="j", priority=priority, state=state, dias=rm_pb.DiasInfo(**dias)
    )


def test_jobs_without_dias_keep_the_plain_table() -> None:
    text = render.jobs_table([summary("job-000001", 0, pb.JOB_RUNNING)])
    assert "BUFFER" not in text and "DROP" not in text


def test_waiting_jobs_show_their_place_in_their_prioritys_buffer() -> None:
    jobs = [
        summary("job-000001", 0, pb.JOB_RUNNING, buffered=True, drop_ratio=0.2, dropped_tasks=2),
        summary("job-000002", 0, pb.JOB_SUBMITTED, buffered=True, drop_ratio=0.2),
        summary("job-000003", 5, pb.JOB_SUBMITTED, buffered=True),
        summary("job-000004", 0, pb.JOB_SUBMITTED, buffered=True, drop_ratio=0.2),
    ]
    rows = {line.split()[0]: line for line in render.jobs_table(jobs).splitlines()[1:]}
    assert rows["job-000001"].split()[-5:] == ["-", "0.2", "(2", "out)", "-"]
    assert "p0 #1" in rows["job-000002"]
    assert "p5 #1" in rows["job-000003"]
    assert "p0 #2" in rows["job-000004"]


@pytest.mark.parametrize(
    ("dias", "state", "line"),
    [
        (
            {"drop_ratio": 0.2, "dropped_tasks": 2, "expected_error": 0.15},
            pb.JOB_SUCCEEDED,
            "approx.    drop ratio 0.2: 2 tasks dropped, expected error 15.0%; "
            "the result is approximate",
        ),
        (
            {"evictions": 1, "wasted_s": 9.0, "execution": 2},
            pb.JOB_SUBMITTED,
            "evicted    1 time: 9.0 s of work lost; now execution 2",
        ),
        ({"buffered": True}, pb.JOB_SUBMITTED, "dispatch   waiting in the buffer of priority 0"),
    ],
)
def test_sluice_job_says_what_dias_did(dias: dict[str, Any], state: pb.JobState, line: str) -> None:
    detail = rm_pb.JobDetail(summary=summary("job-000001", 0, state, **dias))
    assert line in render.job_detail(detail).splitlines()


def test_sluice_sprint_shows_the_budget_and_the_sprints_going_on_first() -> None:
    status = rm_pb.SprintStatus(
        enabled=True,
        budget_s=42.0,
        capacity_s=360.0,
        replenish_s_per_hour=360.0,
        factor=2.0,
        sprints=[
            rm_pb.SprintRun(
                job_id="job-000001",
                started_at=10.0,
                ended_at=20.0,
                sprinted_s=10.0,
                why="the job left execution",
            ),
            rm_pb.SprintRun(job_id="job-000002", started_at=30.0, sprinted_s=3.0),
        ],
    )
    lines = render.sprint_status(status).splitlines()
    assert lines[0] == "budget     42.0 of 360 sprint-seconds (+360 per hour)"
    assert lines[4].startswith("job-000002") and "sprinting" in lines[4]
    assert lines[5].startswith("job-000001") and "the job left execution" in lines[5]


def test_sluice_sprint_says_when_sprinting_is_off() -> None:
    assert "sprinting is off" in render.sprint_status(rm_pb.SprintStatus())


@pytest.mark.parametrize(
    ("dias", "cell"),
    [
        (rm_pb.DiasInfo(sprinting=True, sprinted_s=12.4), "sprinting 12s"),
        (rm_pb.DiasInfo(sprinted_s=30.0), "sprinted 30s"),
        (rm_pb.DiasInfo(buffered=True), "-"),
    ],
)
def test_sluice_jobs_shows_each_jobs_sprint_state(dias: rm_pb.DiasInfo, cell: str) -> None:
    job = rm_pb.JobSummary(job_id="job-000001", name="j", state=pb.JOB_RUNNING, dias=dias)
    assert render.jobs_table([job]).splitlines()[1].endswith(cell)
