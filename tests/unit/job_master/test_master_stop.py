"""The job master's stop of an attempt: one its node does not have (a straggler copy withdrawn
before it started) is nothing to stop, and is no warning; any other failure is one, since the
RM will stop the attempt instead."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import pytest

from job_master.master import JobMaster
from sluice_pb import node_agent_pb2 as agent_pb


class Refusal(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name


class Agent:
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code
        self.asked: list[agent_pb.TaskRef] = []

    def StopTask(self, request: agent_pb.TaskRef, timeout: float) -> agent_pb.TaskStatus:
        self.asked.append(request)
        raise Refusal(self.code)


@pytest.fixture
def job_master() -> Iterator[JobMaster]:
    jm = JobMaster("127.0.0.1:1", "job-1")  # the channel connects lazily: never, here
    yield jm
    jm._launcher.shutdown(wait=True, cancel_futures=True)
    jm._channel.close()


@pytest.mark.parametrize(
    ("code", "warned"),
    [(grpc.StatusCode.NOT_FOUND, False), (grpc.StatusCode.UNAVAILABLE, True)],
)
def test_stopping_an_attempt_its_node_does_not_have_is_no_warning(
    job_master: JobMaster, caplog: pytest.LogCaptureFixture, code: grpc.StatusCode, warned: bool
) -> None:
    agent = Agent(code)
    job_master._agents["node-1:7000"] = agent  # type: ignore[assignment]
    with caplog.at_level(logging.DEBUG, logger="sluice.jm"):
        job_master._stop_task("node-1:7000", "b-3", 2, b"token")
    assert [(r.task_id, r.attempt) for r in agent.asked] == [("b-3", 2)]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bool(warnings) is warned
