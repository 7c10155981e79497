"""The job master's outcome events: which task states are reported and how, the job-ended
marker, and the reporter (a no-op without Kafka; keyed by job id through the outbox with it;
over TLS with the job master's certificate when the data plane says so, and never in plaintext
then; at the end, outcomes kept through an outage are delivered once the broker is back, or
counted in one line when it stays away)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aggregator.state import OUTCOME_FROM_PB
from job_master import outcomes
from job_master.outcomes import (
    OUTCOME_OF_STATE,
    OutcomeReporter,
    job_ended_event,
    task_outcome_event,
)
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from policies.scheduling.lifecycle import TaskState
from sluice_pb import metrics_pb2 as mpb
from tests.unit.plumbing.test_kafka_outbox import wait_until


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        (TaskState.SUCCEEDED, mpb.TASK_OUTCOME_FINISHED),
        (TaskState.FAILED, mpb.TASK_OUTCOME_FAILED),
        (TaskState.KILLED, mpb.TASK_OUTCOME_KILLED),
        (TaskState.LOST, mpb.TASK_OUTCOME_LOST),  # the machine went away under it
        (TaskState.PENDING, None),
        (TaskState.LAUNCHING, None),
        (TaskState.RUNNING, None),
        (TaskState.SUSPENDED, None),
    ],
)
def test_final_states_map_to_outcome_kinds(state: TaskState, kind: int | None) -> None:
    event = task_outcome_event("job-1", "task-2", 3, "node-4", state, now=1234.5)
    if kind is None:
        assert event is None
        return
    assert event is not None
    decoded = mpb.OutcomeEvent.FromString(event.SerializeToString())
    assert decoded.WhichOneof("event") == "task"
    assert (decoded.schema_version, decoded.job_id, decoded.timestamp) == (1, "job-1", 1234.5)
    assert (decoded.task.task_id, decoded.task.attempt, decoded.task.node_id) == (
        "task-2",
        3,
        "node-4",
    )
    assert decoded.task.kind == kind


@pytest.mark.parametrize(
    ("state", "preempted", "kind"),
    [
        (TaskState.KILLED, True, mpb.TASK_OUTCOME_EVICTED),  # a preemption kill
        (TaskState.KILLED, False, mpb.TASK_OUTCOME_KILLED),  # by a person, or the job's end
        (TaskState.FAILED, True, mpb.TASK_OUTCOME_FAILED),  # only a kill can be preempted
    ],
)
def test_a_preemption_kill_is_reported_as_evicted(
    state: TaskState, preempted: bool, kind: mpb.TaskOutcomeKind
) -> None:
    event = task_outcome_event("job-1", "t", 1, "node-4", state, now=1.0, preempted=preempted)
    assert event is not None and event.task.kind == kind
    assert kind in OUTCOME_FROM_PB  # the aggregator rates it


def test_every_kind_the_job_master_sends_is_one_the_aggregator_rates() -> None:
    assert set(OUTCOME_OF_STATE.values()) <= set(OUTCOME_FROM_PB)


@pytest.mark.parametrize("state", [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED])
def test_a_task_that_never_reached_a_node_is_not_reported(state: TaskState) -> None:
    assert task_outcome_event("job-1", "task-2", 1, "", state, now=1.0) is None


def test_the_job_ended_event() -> None:
    event = mpb.OutcomeEvent.FromString(
        job_ended_event("job-1", "succeeded", now=99.0).SerializeToString()
    )
    assert event.WhichOneof("event") == "job_ended"
    assert (event.schema_version, event.job_id, event.timestamp) == (1, "job-1", 99.0)
    assert event.job_ended.final_state == "succeeded"


def outbox_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "kafka-outbox"}


def test_without_kafka_the_reporter_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_producer(*args: object) -> object:
        raise AssertionError("no producer without Kafka")

    monkeypatch.setattr(outcomes, "kafka_producer", no_producer)
    before = outbox_threads()
    reporter = OutcomeReporter("job-1", DataPlane(mqtt_url="mqtt://localhost"))
    reporter.task_ended("task-1", 1, "node-1", TaskState.FAILED)
    reporter.job_ended("failed")
    reporter.close()
    assert outbox_threads() - before == set()  # none started (ones of earlier tests may end)


@dataclass
class Ack:
    def get(self, timeout: float | None = None) -> None:
        return None


@dataclass
class RecordingProducer:
    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    closed: bool = False

    def send(self, topic: str, value: bytes, key: bytes) -> Ack:
        self.sent.append((topic, key, value))
        return Ack()

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def test_with_kafka_outcomes_and_the_end_go_to_the_outcomes_topic_keyed_by_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producers: list[RecordingProducer] = []

    def factory(bootstrap: str, client_id: str, tls: BrokerTls | None = None) -> Any:
        assert (bootstrap, client_id, tls) == ("k:9092", "sluice-jm", None)
        producers.append(RecordingProducer())
        return producers[-1]

    monkeypatch.setattr(outcomes, "kafka_producer", factory)
    plane = DataPlane(kafka_bootstrap="k:9092", outcomes_topic="jm.outcomes")
    reporter = OutcomeReporter("job-1", plane)
    reporter.task_ended("t1", 1, "node-1", TaskState.FAILED)
    reporter.task_ended("t2", 1, "node-2", TaskState.RUNNING)  # not final: nothing sent
    reporter.task_ended("t3", 2, "", TaskState.KILLED)  # never placed: nothing sent
    reporter.task_ended("t4", 1, "node-2", TaskState.SUCCEEDED)
    reporter.job_ended("succeeded")  # flushes, then closes

    (producer,) = producers
    assert producer.closed
    assert {(topic, key) for topic, key, _ in producer.sent} == {("jm.outcomes", b"job-1")}
    events = [mpb.OutcomeEvent.FromString(value) for _, _, value in producer.sent]
    assert [(e.task.task_id, e.task.kind) for e in events[:2]] == [
        ("t1", mpb.TASK_OUTCOME_FAILED),
        ("t4", mpb.TASK_OUTCOME_FINISHED),
    ]
    assert events[2].WhichOneof("event") == "job_ended"
    assert len(events) == 3
    reporter.task_ended("t5", 1, "node-1", TaskState.FAILED)  # after the end: dropped quietly
    assert len(producer.sent) == 3


TLS = BrokerTls(Path("/tls/ca.crt"), Path("/tls/tls.crt"), Path("/tls/tls.key"))


@pytest.mark.parametrize(
    ("kafka_tls", "given", "expected"),
    [(True, TLS, TLS), (False, TLS, None), (False, None, None)],
    ids=["tls", "plaintext although it has a certificate", "plaintext"],
)
def test_the_producer_speaks_tls_when_the_data_plane_says_so(
    monkeypatch: pytest.MonkeyPatch,
    kafka_tls: bool,
    given: BrokerTls | None,
    expected: BrokerTls | None,
) -> None:
    used: list[BrokerTls | None] = []

    def factory(bootstrap: str, client_id: str, tls: BrokerTls | None = None) -> Any:
        used.append(tls)
        return RecordingProducer()

    monkeypatch.setattr(outcomes, "kafka_producer", factory)
    plane = DataPlane(kafka_bootstrap="k:9093", kafka_tls=kafka_tls)
    reporter = OutcomeReporter("job-1", plane, given)
    reporter.task_ended("t1", 1, "node-1", TaskState.FAILED)
    reporter.job_ended("failed")
    assert used == [expected]


def test_without_a_certificate_a_tls_kafka_gets_nothing_and_the_log_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_producer(*args: object) -> object:
        raise AssertionError("never in plaintext to a TLS broker")

    monkeypatch.setattr(outcomes, "kafka_producer", no_producer)
    before = outbox_threads()
    with caplog.at_level(logging.WARNING, logger="sluice.jm.outcomes"):
        reporter = OutcomeReporter("job-1", DataPlane(kafka_bootstrap="k:9093", kafka_tls=True))
    reporter.task_ended("t1", 1, "node-1", TaskState.FAILED)
    reporter.job_ended("failed")
    assert outbox_threads() - before == set()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "Kafka at k:9093 is TLS (--kafka-tls) but this job master has no certificate: its task "
        "outcomes are not published"
    )


class Outage:
    """A producer factory whose broker is away for the first ``failures`` attempts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.producers: list[RecordingProducer] = []

    def __call__(self, bootstrap: str, client_id: str, tls: BrokerTls | None = None) -> Any:
        from kafka.errors import KafkaConnectionError

        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaConnectionError("no broker")
        self.producers.append(RecordingProducer())
        return self.producers[-1]


def outage_reporter(monkeypatch: pytest.MonkeyPatch, failures: int) -> tuple[Any, Outage]:
    factory = Outage(failures)
    monkeypatch.setattr(outcomes, "kafka_producer", factory)
    reporter = OutcomeReporter("job-1", DataPlane(kafka_bootstrap="k:9092"))
    for task in ("t1", "t2", "t3"):
        reporter.task_ended(task, 1, "node-1", TaskState.SUCCEEDED)
    outbox = reporter._outbox
    assert outbox is not None
    wait_until(lambda: outbox.unreachable)  # the outage is noticed: the sender backs off
    return reporter, factory


def test_a_job_master_ending_during_an_outage_delivers_once_the_broker_is_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Six failures back off 15.5 s; the end's wait hurries the retries instead (and ends as
    # soon as all is delivered: its bound is raised here only so a loaded host cannot reach it).
    reporter, factory = outage_reporter(monkeypatch, failures=6)
    monkeypatch.setattr(outcomes, "FLUSH_AT_END_S", 60.0)
    with caplog.at_level(logging.WARNING, logger="sluice.jm.outcomes"):
        reporter.job_ended("succeeded")
    (producer,) = factory.producers
    events = [mpb.OutcomeEvent.FromString(value) for _, _, value in producer.sent]
    assert [e.task.task_id or e.WhichOneof("event") for e in events] == [
        "t1",
        "t2",
        "t3",
        "job_ended",
    ]
    assert not [r for r in caplog.records if "not delivered" in r.getMessage()]


def test_a_job_master_ending_while_kafka_stays_away_says_how_many_it_lost(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reporter, factory = outage_reporter(monkeypatch, failures=10**9)
    monkeypatch.setattr(outcomes, "FLUSH_AT_END_S", 0.5)
    with caplog.at_level(logging.WARNING, logger="sluice.jm.outcomes"):
        reporter.job_ended("failed")
    lines = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert lines == [
        "4 task outcomes (with the job's end) not delivered to Kafka at k:9092 within 0.5 s; "
        "the machine rating misses them"
    ]
    assert factory.producers == []
