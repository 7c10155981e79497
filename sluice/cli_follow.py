"""What the CLI shows over time, and the operator's resize with one limit:

* ``sluice logs -f``: a task attempt's output as it is written, until the attempt ends;
* ``sluice jobs --watch``: the jobs table again every few seconds, until interrupted (Ctrl-C
  ends it, exit status 0);
* ``sluice task resize`` with only ``--cpu`` or only ``--memory-mb``: the other limit stays
  what the container has now.

Light on purpose (the CLI starts fast): the RM's and agents' messages only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import BinaryIO, TextIO

from plumbing.errors import UserError
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

FOLLOW_INTERVAL = 1.0  # seconds between two reads of a followed log
ENDED = frozenset({pb.TASK_SUCCEEDED, pb.TASK_FAILED, pb.TASK_KILLED, pb.TASK_LOST})
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def follow_log(
    read: Callable[[], bytes],
    attempt_state: Callable[[], int],
    out: BinaryIO,
    *,
    interval: float = FOLLOW_INTERVAL,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Write what ``read()`` (the attempt's whole log so far) adds to ``out`` until
    ``attempt_state()`` is one of ``ENDED``, then what the last read adds; return that state.
    A log that got shorter (replaced) is written again from its start."""
    written = 0
    while True:
        ended = attempt_state() in ENDED  # before the read: what it wrote before it ended is in
        data = read()
        if len(data) < written:
            written = 0
        if len(data) > written:
            out.write(data[written:])
            out.flush()
            written = len(data)
        if ended:
            return attempt_state()
        sleep(interval)


def watch(
    render: Callable[[], str],
    out: TextIO,
    *,
    interval: float,
    title: str,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
) -> int:
    """Print ``render()`` every ``interval`` seconds (on a terminal, in place) until Ctrl-C
    (or ``rounds`` times); returns 0, the exit status of a watch the user ended."""
    if not interval > 0:
        raise UserError("--interval: must be positive")
    terminal = out.isatty()
    shown = 0
    try:
        while rounds is None or shown < rounds:
            text = render()
            stamp = datetime.now().strftime("%H:%M:%S")
            head = f"{title} every {interval:g} s, {stamp} (Ctrl-C ends)"
            out.write(f"{CLEAR if terminal else ''}{head}\n{text}\n{'' if terminal else chr(10)}")
            out.flush()
            shown += 1
            if rounds is None or shown < rounds:
                sleep(interval)
    except KeyboardInterrupt:
        if terminal:
            out.write("\n")
    return 0


def latest_attempt(detail: rm_pb.JobDetail, task_id: str) -> rm_pb.TaskInfo | None:
    attempts = [t for t in detail.tasks if t.task_id == task_id]
    return max(attempts, key=lambda t: t.attempt) if attempts else None


def attempt_state(detail: rm_pb.JobDetail, task_id: str, attempt: int) -> int:
    """The state of ``task_id``'s ``attempt`` in ``detail`` (TASK_LOST when the RM no longer
    lists it)."""
    for task in detail.tasks:
        if task.task_id == task_id and task.attempt == attempt:
            return int(task.state)
    return int(pb.TASK_LOST)


def check_resize_flags(cpu: float | None, memory_mb: int | None) -> None:
    """UserError naming a bad resize flag, before anything is asked of the RM."""
    if cpu is None and memory_mb is None:
        raise UserError("resize: give --cpu, --memory-mb or both (the new limits)")
    if cpu is not None and not cpu > 0:
        raise UserError("resize: --cpu must be positive")
    if memory_mb is not None and memory_mb <= 0:
        raise UserError("resize: --memory-mb must be positive")


def resize_limits(
    detail: rm_pb.JobDetail | None, task_id: str, cpu: float | None, memory_mb: int | None
) -> tuple[float, int]:
    """The limits a resize asks for: those given, and for one not given the container's now
    (its last resize's, or its grant's: its phase's resources, from ``detail``, which only a
    resize with both limits may leave None).  UserError names a bad flag."""
    check_resize_flags(cpu, memory_mb)
    if cpu is not None and memory_mb is not None:
        return cpu, memory_mb
    assert detail is not None, "one limit given: the job's detail says the other"
    now = current_limits(detail, task_id)
    return (now.cpu if cpu is None else cpu), (now.memory_mb if memory_mb is None else memory_mb)


def current_limits(detail: rm_pb.JobDetail, task_id: str) -> pb.Resources:
    """What ``task_id``'s latest attempt runs at: its last resize (shrunk) while that is its
    last step, else its grant (suspended, it keeps the grant it resumes to)."""
    task = latest_attempt(detail, task_id)
    if task is None:
        known = sorted({t.task_id for t in detail.tasks})
        hint = f" (known: {', '.join(known[:10])})" if known else ""
        raise UserError(f"task: {task_id!r} of {detail.summary.job_id} has not run{hint}")
    if task.preemptions and task.preemptions[-1].action == "shrunk":
        return task.preemptions[-1].limits
    grants = [p.resources for p in detail.spec.phases if p.name == task.phase]
    if not grants:
        raise UserError(f"task: {task_id!r}: its phase {task.phase!r} is not in the job's spec")
    return grants[0]
