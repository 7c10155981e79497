"""What `sluice job` shows of slot reservation: the containers the job keeps, and until when."""

from __future__ import annotations

import time

import pytest

from sluice import render
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

TITLE = "kept containers (slot reservation, docs/reservation.md)"


def detail(*kept: rm_pb.ReservedSlot, tasks: tuple[rm_pb.TaskInfo, ...] = ()) -> rm_pb.JobDetail:
    summary = rm_pb.JobSummary(job_id="job-000001", name="ml")
    ran = (rm_pb.TaskInfo(task_id="map-0", attempt=1, allocation_id="a1", state=pb.TASK_SUCCEEDED),)
    return rm_pb.JobDetail(summary=summary, kept=kept, tasks=tasks or ran)


def attempt(
    task_id: str, number: int, state: pb.TaskState, start: float, end: float = 0.0
) -> rm_pb.TaskInfo:
    return rm_pb.TaskInfo(
        task_id=task_id, attempt=number, state=state, start_time=start, finish_time=end
    )


@pytest.mark.parametrize(
    ("attempts", "line"),
    [
        # the copy (attempt 2) started while the straggler ran, and won
        (
            [
                attempt("m-1", 1, pb.TASK_KILLED, 10.0, 50.0),
                attempt("m-1", 2, pb.TASK_SUCCEEDED, 30.0, 40.0),
            ],
            "m-1: attempts 1, 2; attempt 2 won",
        ),
        # both still running
        (
            [attempt("m-1", 1, pb.TASK_RUNNING, 10.0), attempt("m-1", 2, pb.TASK_RUNNING, 30.0)],
            "m-1: attempts 1, 2; none has won yet",
        ),
        # a retry after a failure is no copy
        (
            [
                attempt("m-1", 1, pb.TASK_FAILED, 10.0, 20.0),
                attempt("m-1", 2, pb.TASK_SUCCEEDED, 21.0, 30.0),
            ],
            None,
        ),
    ],
)
def test_a_task_run_side_by_side_with_its_copy_says_which_attempt_won(
    attempts: list[rm_pb.TaskInfo], line: str | None
):
    text = render.job_detail(detail(tasks=tuple(attempts)))
    section = "straggler copies (attempts that ran side by side; the first to succeed won)"
    assert (section in text) is (line is not None)
    if line is not None:
        assert text.split(section)[1].strip().splitlines()[0].strip() == line


def test_a_job_shows_its_kept_containers_with_their_deadlines():
    until = 1_800_000_000.0
    text = render.job_detail(
        detail(
            rm_pb.ReservedSlot(allocation_id="a1", phase="reduce", until=until, node_id="n1"),
            rm_pb.ReservedSlot(allocation_id="a2", phase="reduce", node_id="n2"),
        )
    )
    header, first, second = text.split(TITLE)[1].strip().splitlines()
    assert header.split() == ["CONTAINER", "NODE", "KEPT", "FOR", "FROM", "UNTIL"]
    clock = time.strftime("%H:%M:%S", time.localtime(until))
    assert first.split() == ["a1", "n1", "reduce", "task", "map-0", clock]
    assert second.split()[:4] == ["a2", "n2", "reduce", "pre-reserved"]
    assert "no deadline yet" in second


def test_a_job_keeping_nothing_shows_no_such_section():
    assert TITLE not in render.job_detail(detail())
