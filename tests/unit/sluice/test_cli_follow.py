"""`sluice logs -f`, `sluice jobs --watch` and a resize with one limit, on the CLI's side: what
is printed as a log grows, how a watch ends, which limits a resize asks for."""

from __future__ import annotations

import io

import pytest

from plumbing.errors import UserError
from sluice import cli
from sluice.cli_follow import current_limits, follow_log, resize_limits, watch
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def test_follow_writes_what_each_read_adds_and_ends_after_the_attempt_ends() -> None:
    # the log as each read sees it, and the attempt's state before each read
    reads = iter([b"a\n", b"a\nb\n", b"a\nb\n", b"a\nb\nc\n"])
    states = iter([pb.TASK_RUNNING, pb.TASK_RUNNING, pb.TASK_RUNNING, pb.TASK_SUCCEEDED])
    last = [pb.TASK_RUNNING]

    def state() -> int:
        last[0] = next(states, last[0])
        return last[0]

    out = io.BytesIO()
    ended = follow_log(lambda: next(reads), state, out, sleep=lambda _: None)
    assert out.getvalue() == b"a\nb\nc\n"
    assert ended == pb.TASK_SUCCEEDED


def test_follow_writes_a_replaced_log_again_from_its_start() -> None:
    reads = iter([b"old log\n", b"new\n"])
    states = iter([pb.TASK_RUNNING, pb.TASK_FAILED, pb.TASK_FAILED])
    out = io.BytesIO()
    follow_log(lambda: next(reads), lambda: next(states), out, sleep=lambda _: None)
    assert out.getvalue() == b"old log\nnew\n"


def test_a_watch_ended_by_ctrl_c_returns_0_without_a_traceback() -> None:
    shown = []

    def render() -> str:
        shown.append(1)
        if len(shown) == 3:
            raise KeyboardInterrupt
        return "JOB  STATE"

    out = io.StringIO()
    assert watch(render, out, interval=0.5, title="sluice jobs", sleep=lambda _: None) == 0
    assert out.getvalue().count("sluice jobs every 0.5 s") == 2
    assert out.getvalue().count("JOB  STATE") == 2


def test_a_watch_refuses_a_bad_interval() -> None:
    with pytest.raises(UserError, match="--interval: must be positive"):
        watch(lambda: "", io.StringIO(), interval=0, title="t")


def detail(*steps: rm_pb.PreemptionEvent) -> rm_pb.JobDetail:
    return rm_pb.JobDetail(
        summary=rm_pb.JobSummary(job_id="job-1"),
        spec=pb.JobSpec(
            phases=[
                pb.PhaseSpec(name="map", resources=pb.Resources(cpu=2.0, memory_mb=512)),
                pb.PhaseSpec(name="reduce", resources=pb.Resources(cpu=1.0, memory_mb=256)),
            ]
        ),
        tasks=[
            rm_pb.TaskInfo(task_id="map-0", phase="map", attempt=1),
            rm_pb.TaskInfo(task_id="map-0", phase="map", attempt=2, preemptions=list(steps)),
        ],
    )


SHRUNK = rm_pb.PreemptionEvent(action="shrunk", limits=pb.Resources(cpu=0.5, memory_mb=300))
SUSPENDED = rm_pb.PreemptionEvent(action="suspended", limits=pb.Resources(cpu=0.01, memory_mb=64))


@pytest.mark.parametrize(
    ("steps", "cpu", "memory", "asked"),
    [
        ((), 1.0, None, (1.0, 512)),  # the grant's memory
        ((), None, 128, (2.0, 128)),  # the grant's cpu
        ((SHRUNK,), 1.0, None, (1.0, 300)),  # what the last resize left
        ((SHRUNK,), None, 128, (0.5, 128)),
        ((SUSPENDED,), None, 128, (2.0, 128)),  # suspended: the grant it resumes to
        ((), 1.5, 400, (1.5, 400)),
    ],
)
def test_a_resize_with_one_limit_keeps_the_other(
    steps: tuple[rm_pb.PreemptionEvent, ...],
    cpu: float | None,
    memory: int | None,
    asked: tuple[float, int],
) -> None:
    assert resize_limits(detail(*steps), "map-0", cpu, memory) == asked


@pytest.mark.parametrize(
    ("cpu", "memory", "problem"),
    [
        (None, None, "give --cpu, --memory-mb or both"),
        (0.0, None, "--cpu must be positive"),
        (None, -1, "--memory-mb must be positive"),
    ],
)
def test_a_bad_resize_names_its_flag(cpu: float | None, memory: int | None, problem: str) -> None:
    with pytest.raises(UserError, match=problem):
        resize_limits(detail(), "map-0", cpu, memory)


def test_a_resize_of_a_task_that_has_not_run_says_so() -> None:
    with pytest.raises(UserError, match="'map-9' of job-1 has not run"):
        current_limits(detail(), "map-9")


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["logs", "j", "t", "-f"], "follow", True),
        (["logs", "j", "t", "--follow"], "follow", True),
        (["logs", "j", "t"], "follow", False),
        (["jobs", "--watch"], "watch", True),
        (["jobs", "--watch", "--interval", "0.5"], "interval", 0.5),
        (["task", "resize", "j", "t", "--cpu", "0.5"], "memory_mb", None),
    ],
)
def test_the_cli_takes_the_flags(argv: list[str], field: str, value: object) -> None:
    assert getattr(cli.build_parser(argv[0]).parse_args(argv), field) == value
