"""`ChangeTask`: an operator's suspend, resume, resize or preemption of a task's container,
through the RM's gRPC service (real server, in process), and the `sluice task` command."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sluice.cli import main
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.unit.resource_manager.test_service import SPEC, Served


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


def running_task(served: Served) -> tuple[str, str]:
    """A job whose task p-0 runs on n1 (0.5 cpu, 64 MiB): (job id, its container)."""
    served.register()
    job = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True), timeout=5)
    job_id = job.job.job_id
    served.masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job_id, attempt=1), timeout=5)
    ask = rm_pb.Ask(phase="p", count=1, resources=pb.Resources(cpu=0.5, memory_mb=64))
    (granted,) = served.masters.Allocate(
        rm_pb.AllocateRequest(job_id=job_id, asks=[ask], master_attempt=1), timeout=5
    ).granted
    running = pb.TaskEvent(
        job_id=job_id,
        task_id="p-0",
        attempt=1,
        allocation_id=granted.allocation_id,
        state=pb.TASK_RUNNING,
    )
    served.nodes.ReportTaskEvents(rm_pb.ReportTaskEventsRequest(node_id="n1", events=[running]))
    return job_id, granted.allocation_id


def change(served: Served, job_id: str, what: int, **fields: object) -> rm_pb.ChangeTaskResponse:
    request = rm_pb.ChangeTaskRequest(job_id=job_id, task_id="p-0", change=what, **fields)  # type: ignore[arg-type]
    return served.jobs.ChangeTask(request, timeout=5)


def test_a_suspension_is_set_at_the_rm_and_sent_to_the_node(served: Served):
    job_id, allocation_id = running_task(served)
    answer = change(served, job_id, rm_pb.TASK_SUSPEND, reason="investigating")
    assert (answer.allocation_id, answer.node_id, answer.goal) == (allocation_id, "n1", "suspend")
    live = pb.TaskEvent(
        job_id=job_id, task_id="p-0", attempt=1, allocation_id=allocation_id, state=pb.TASK_RUNNING
    )
    beat = served.nodes.Heartbeat(
        rm_pb.HeartbeatRequest(node_id="n1", live_tasks=[live]), timeout=5
    )
    (command,) = beat.commands
    assert command.WhichOneof("command") == "suspend_allocation"
    assert command.suspend_allocation.reason == "investigating"


def test_a_resize_answers_the_new_limits(served: Served):
    job_id, _ = running_task(served)
    limits = pb.Resources(cpu=0.25, memory_mb=32)
    answer = change(served, job_id, rm_pb.TASK_RESIZE, limits=limits)
    assert (answer.goal, answer.limits) == ("run", limits)


@pytest.mark.parametrize(
    ("job", "what", "fields", "code", "details"),
    [
        ("job-404", rm_pb.TASK_SUSPEND, {}, grpc.StatusCode.NOT_FOUND, "job 'job-404' not found"),
        (
            None,
            rm_pb.TASK_CHANGE_UNSPECIFIED,
            {},
            grpc.StatusCode.INVALID_ARGUMENT,
            "change: must be suspend, resume, resize or preempt",
        ),
        (None, rm_pb.TASK_RESIZE, {}, grpc.StatusCode.INVALID_ARGUMENT, "limits: a resize needs"),
        (
            None,
            rm_pb.TASK_RESIZE,
            {"limits": pb.Resources(cpu=4, memory_mb=64)},
            grpc.StatusCode.FAILED_PRECONDITION,
            "must be positive and within its grant of 0.5 cpu, 64 MiB",
        ),
        (
            None,
            rm_pb.TASK_SUSPEND,
            {"reason": "x" * 201},
            grpc.StatusCode.INVALID_ARGUMENT,
            "reason: at most 200",
        ),
    ],
)
def test_refusals_name_the_problem_in_one_line_and_change_nothing(
    served: Served, job, what, fields, code, details
):
    job_id, allocation_id = running_task(served)
    before = served.core.allocations[allocation_id]
    with pytest.raises(grpc.RpcError) as caught:
        change(served, job or job_id, what, **fields)
    assert caught.value.code() is code
    assert details in caught.value.details()
    assert "\n" not in caught.value.details()
    assert served.core.allocations[allocation_id] == before


def test_a_preempted_task_cannot_be_resumed_and_an_unknown_task_is_not_found(served: Served):
    job_id, _ = running_task(served)
    assert change(served, job_id, rm_pb.TASK_PREEMPT).goal == "stop"
    with pytest.raises(grpc.RpcError) as caught:
        change(served, job_id, rm_pb.TASK_RESUME)
    assert caught.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "goal stop -> run is not allowed" in caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:
        served.jobs.ChangeTask(
            rm_pb.ChangeTaskRequest(job_id=job_id, task_id="p-9", change=rm_pb.TASK_SUSPEND),
            timeout=5,
        )
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == f"task 'p-9' of {job_id} has no live attempt"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["resize", "job-1", "p-0"], "resize: give --cpu, --memory-mb or both"),
        (["resize", "job-1", "p-0", "--cpu", "0", "--memory-mb", "5"], "must be positive"),
    ],
)
def test_the_cli_checks_a_resize_before_calling(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
):
    assert main(["--rm", "127.0.0.1:1", "task", *argv]) == 2
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1


def test_the_cli_prints_what_the_rm_set(served: Served, capsys: pytest.CaptureFixture[str]):
    job_id, allocation_id = running_task(served)
    assert main(["--rm", served.address, "task", "suspend", job_id, "p-0"]) == 0
    assert capsys.readouterr().out.startswith(
        f"{job_id} p-0: container {allocation_id} on n1 to suspend at 0.5 cpu, 64 MiB"
    )
    assert main(["--rm", served.address, "task", "resume", job_id, "p-9"]) == 1
    assert "task 'p-9'" in capsys.readouterr().err
