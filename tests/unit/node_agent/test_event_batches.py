"""The agent sends its event outbox in bounded batches: a backlog kept through a long RM outage
never becomes one report over the RM's receive limit, and a batch the RM did not take goes back
to the outbox with everything after it, in order."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import grpc
import pytest

from node_agent.agent import AgentConfig
from node_agent.daemon import EVENTS_PER_REPORT, MAX_EVENT_MESSAGE, AgentDaemon
from plumbing.node_protocol import TaskReport
from plumbing.rpc import RM_MAX_RECEIVE
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from sluice_pb import resource_manager_pb2 as rm_pb


def event(index: int, message: str = "") -> TaskReport:
    return TaskReport(
        job_id="job-1",
        task_id=f"work-{index}",
        attempt=1,
        allocation_id=f"alloc-{index}",
        state=TaskState.SUCCEEDED,
        exit_code=0,
        message=message,
        timestamp=1.0,
        start_time=0.5,
    )


class Outbox:
    """What ``_report`` asks of the NodeAgent."""

    def __init__(self, events: list[TaskReport]) -> None:
        self.config = AgentConfig(node_id="n1", cpu_ids=(0,), capacity=Resources(2.0, 2048))
        self.pending = events
        self.acked: list[TaskReport] = []

    def take_outbox(self) -> list[TaskReport]:
        events, self.pending = self.pending, []
        return events

    def requeue(self, events: Sequence[TaskReport]) -> None:
        self.pending[:0] = events

    def acknowledged(self, events: Sequence[TaskReport]) -> None:
        self.acked.extend(events)


class Unreachable(grpc.RpcError):  # type: ignore[misc]
    pass


class RM:
    """A ReportTaskEvents stub that takes ``accepts`` calls, then fails."""

    def __init__(self, accepts: int) -> None:
        self.accepts = accepts
        self.sizes: list[int] = []

    def ReportTaskEvents(
        self, request: rm_pb.ReportTaskEventsRequest, timeout: float
    ) -> rm_pb.ReportTaskEventsResponse:
        if len(self.sizes) >= self.accepts:
            raise Unreachable()
        self.sizes.append(request.ByteSize())
        assert len(request.events) <= EVENTS_PER_REPORT
        return rm_pb.ReportTaskEventsResponse()


def reporter(outbox: Outbox, rm: RM) -> AgentDaemon:
    daemon = object.__new__(AgentDaemon)  # only _report's own attributes
    daemon.agent = outbox  # type: ignore[assignment]
    daemon._rm = rm  # type: ignore[assignment]
    daemon._rm_reachable = True
    daemon._rm_address = "rm:1"
    daemon._reporting = threading.Lock()
    daemon.session = "0" * 32  # (as long as a real one)
    return daemon


@pytest.mark.parametrize(
    ("backlog", "accepts", "acked", "left"),
    [
        (0, 9, 0, 0),
        (10, 9, 10, 0),
        (EVENTS_PER_REPORT * 2 + 1, 9, EVENTS_PER_REPORT * 2 + 1, 0),
        (EVENTS_PER_REPORT * 2 + 1, 1, EVENTS_PER_REPORT, EVENTS_PER_REPORT + 1),
        (EVENTS_PER_REPORT * 2 + 1, 0, 0, EVENTS_PER_REPORT * 2 + 1),
    ],
)
def test_the_outbox_goes_in_batches_and_what_was_not_taken_stays_in_order(
    backlog: int, accepts: int, acked: int, left: int
) -> None:
    events = [event(i) for i in range(backlog)]
    outbox = Outbox(list(events))
    reporter(outbox, RM(accepts))._report()
    assert outbox.acked == events[:acked]
    assert outbox.pending == events[acked:]
    assert len(outbox.pending) == left


def test_a_batch_of_the_longest_messages_fits_the_rms_receive_limit() -> None:
    rm = RM(accepts=9)
    outbox = Outbox([event(i, "x" * 100_000) for i in range(EVENTS_PER_REPORT)])
    reporter(outbox, rm)._report()
    assert len(rm.sizes) == 1
    assert rm.sizes[0] < RM_MAX_RECEIVE / 2
    assert rm.sizes[0] < EVENTS_PER_REPORT * (MAX_EVENT_MESSAGE * 3 + 200)
