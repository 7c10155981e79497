"""`sluice submit` creates a job exactly once, whatever happens to the answers."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from plumbing.errors import UserError
from sluice.client import RMClient
from sluice_pb import resource_manager_pb2 as rm_pb


class _Error(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name


class FlakyRM:
    """A JobService that creates the job on every request it sees, keyed by idempotency key as
    the RM does, and loses the first ``lost`` answers."""

    def __init__(self, lost: int, failure: grpc.StatusCode = grpc.StatusCode.DEADLINE_EXCEEDED):
        self.lost = lost
        self.failure = failure
        self.jobs: dict[str, str] = {}
        self.keys: list[str] = []

    def SubmitJob(self, request: rm_pb.SubmitJobRequest, timeout: float) -> rm_pb.SubmitJobResponse:
        self.keys.append(request.idempotency_key)
        job_id = self.jobs.setdefault(request.idempotency_key, f"job-{len(self.jobs) + 1:06d}")
        if self.lost:
            self.lost -= 1
            raise _Error(self.failure)
        return rm_pb.SubmitJobResponse(job=rm_pb.JobSummary(job_id=job_id))


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr("sluice.client.time.sleep", lambda _: None)
    yield


def client_of(rm: FlakyRM) -> RMClient:
    return RMClient("rm:1", None, rm)  # type: ignore[arg-type]


def test_lost_answers_are_retried_with_one_key_and_create_one_job() -> None:
    rm = FlakyRM(lost=2)
    job = client_of(rm).submit("spec")
    assert job.job_id == "job-000001"
    assert len(rm.keys) == 3 and len(set(rm.keys)) == 1
    assert rm.jobs == {rm.keys[0]: "job-000001"}


def test_a_refusal_is_final() -> None:
    rm = FlakyRM(lost=1, failure=grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(grpc.RpcError):
        client_of(rm).submit("spec")
    assert len(rm.keys) == 1


def test_no_answer_at_all_says_the_job_may_exist_and_names_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter(range(0, 1000, 10))
    monkeypatch.setattr("sluice.client.time.monotonic", lambda: float(next(ticks)))
    rm = FlakyRM(lost=1000, failure=grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(UserError, match=r"the job may have been created \(idempotency key \w+\)"):
        client_of(rm).submit("spec")
    assert len(set(rm.keys)) == 1
