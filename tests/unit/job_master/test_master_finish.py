"""A job master finishes its own teardown — the job-ended outcome published, the data-plane
clients closed, the launcher stopped — before it reports the job's final state to the RM, and a
broker that is down or stuck delays that report by a few seconds at most.

Once the RM has the final state, the job master's process is expected to end: the RM stops a
lingering one, and ``sluice local down`` drains the nodes; a job master still flushing Kafka or
closing MQTT then was counted as a task stopped ("stopped 1 tasks")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.errors import KafkaError

from job_master import outcomes
from job_master.candidate_feed import CandidateFeed
from job_master.master import FEED_CLOSE_S, JobMaster
from job_master.outcomes import CLOSE_S, FLUSH_AT_END_S, OutcomeReporter
from job_master.plan import JobPlan
from plumbing.data_plane import DataPlane
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import JobState
from sluice_pb import resource_manager_pb2 as rm_pb

SPEC = {
    "name": "j",
    "phases": [
        {"name": "p", "tasks": 1, "command": ["true"], "resources": {"cpu": 0.5, "memory_mb": 64}}
    ],
}


class RecordingRM:
    """The RM's MasterService, as far as ``_finish`` uses it."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.finished_at: float | None = None
        self.requests: list[rm_pb.FinishJobRequest] = []

    def FinishJob(self, request: rm_pb.FinishJobRequest, timeout: float) -> None:
        self.finished_at = time.monotonic()
        self.requests.append(request)
        self.events.append("FinishJob")


class RecordingOutcomes:
    def __init__(self, events: list[str], on_end: threading.Event) -> None:
        self.events = events
        self.on_end = on_end

    def job_ended(self, final_state: str) -> None:
        self.events.append(f"job_ended {final_state}")
        self.on_end.set()

    def close(self) -> None:
        self.events.append("outcomes closed")


class Recording:
    def __init__(self, events: list[str], name: str) -> None:
        self.events = events
        self.name = name

    def close(self, timeout: float | None = None) -> None:
        self.events.append(f"{self.name} closed")


@pytest.fixture
def job_master() -> Iterator[JobMaster]:
    jm = JobMaster("127.0.0.1:1", "job-1")  # the channel connects lazily: never, here
    yield jm
    jm._launcher.shutdown(wait=True, cancel_futures=True)
    jm._channel.close()


def finish(jm: JobMaster, state: JobState = JobState.SUCCEEDED) -> JobState:
    plan = JobPlan(parse_job_spec(SPEC))
    return jm._finish(plan, (state, ""), plan.progress())


def test_the_teardown_comes_before_the_final_report(job_master: JobMaster) -> None:
    events: list[str] = []
    rm = RecordingRM(events)
    job_master._rm = rm  # type: ignore[assignment]
    release = threading.Event()
    job_master._outcomes = RecordingOutcomes(events, release)  # type: ignore[assignment]
    job_master._feed = Recording(events, "feed")  # type: ignore[assignment]
    job_master._resync = Recording(events, "resync")  # type: ignore[assignment]
    # A launch under way when the job ends: it ends (here: once the outcome is published)
    # before the report, so no task is started after the RM learned the job is over.
    started = threading.Event()

    def launch() -> None:
        started.set()
        assert release.wait(10)
        events.append("launch ended")

    job_master._launcher.submit(launch)
    assert started.wait(10)

    assert finish(job_master, JobState.FAILED) is JobState.FAILED

    assert events == [
        "job_ended failed",
        "feed closed",
        "resync closed",
        "launch ended",
        "FinishJob",
    ]
    assert rm.requests[0].job_id == "job-1"
    # The run's own clean-up afterwards finds nothing left to close.
    job_master._leave_data_plane()
    assert events[-1] == "FinishJob"


@pytest.fixture
def silent_mqtt_broker() -> Iterator[str]:
    """A TCP listener that never answers: an MQTT broker that is stuck."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"mqtt://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for connection in accepted:
        connection.close()


def test_brokers_that_hang_delay_the_report_by_seconds_only(
    job_master: JobMaster, silent_mqtt_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka hangs (the producer never comes up) and MQTT never answers a CONNECT."""
    hung = threading.Event()

    def hanging_producer(bootstrap: str, client_id: str, tls: object = None) -> Any:
        hung.wait(60)
        raise KafkaError("the test's broker is gone")

    monkeypatch.setattr(outcomes, "kafka_producer", hanging_producer)
    events: list[str] = []
    rm = RecordingRM(events)
    job_master._rm = rm  # type: ignore[assignment]
    job_master._outcomes = OutcomeReporter("job-1", DataPlane(kafka_bootstrap="127.0.0.1:9"))
    feed = CandidateFeed(silent_mqtt_broker)
    feed.start()
    job_master._feed = feed
    try:
        started = time.monotonic()
        assert finish(job_master) is JobState.SUCCEEDED
        assert rm.finished_at is not None
        bound = FLUSH_AT_END_S + 2 * CLOSE_S + 2 * FEED_CLOSE_S + 1.0
        assert rm.finished_at - started < bound
        left: tuple[object, object] = (job_master._outcomes, job_master._feed)
        assert left == (None, None)  # closed, and forgotten
    finally:
        hung.set()  # let the outbox's sender thread end
        feed.close(timeout=1)
