"""The Kafka-protocol broker killed and started again empty on the same port (Tansu keeps its
logs in memory), under a running aggregator and under publishers that keep going.

The aggregator must see the machine again without being restarted, and say once that it read
the new logs from their beginning: its consumer's old positions are far past the new logs' ends
(thousands of samples were read before the restart), and a Tansu fetch past a log's end answers
nothing, without an error.  A job master that ends while the broker is away must deliver the task
outcomes it kept once the broker is back.  (An outage the broker survives with its data:
test_kafka_outage.py; the decision itself: tests/unit/aggregator/test_broker_restart.py.)"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from job_master import outcomes
from job_master.outcomes import OutcomeReporter
from plumbing.data_plane import DataPlane
from plumbing.kafka_outbox import KafkaOutbox
from policies.scheduling.lifecycle import TaskState
from sluice import brokers
from sluice.brokers import ServiceProcess
from sluice.machines import list_machines
from sluice_pb import metrics_pb2 as mpb
from tests.integration.cluster.harness import wait_until
from tests.integration.data_plane.test_pipeline import read_topic

pytestmark = pytest.mark.integration

METRICS, OUTCOMES = "restart.metrics", "restart.outcomes"
MACHINE = "restart-1"
FILLER = 3000  # samples read before the restart: the old position the new log stays below
EVERY_S = 0.25  # between the live samples: the new log would take 750 s to reach the old end
RESET_LINE = "came back with new logs"


class Broker:
    """A Tansu of this test's own on a fixed port, killed and started again empty."""

    def __init__(self, directory: Path) -> None:
        self.port = brokers.free_port()
        self.log_path = directory / "kafka.log"
        self.process: ServiceProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        try:
            self.process = brokers.start_kafka(self.port, self.log_path)
        except brokers.BrokerUnavailableError as error:
            from tests.integration.conftest import _unavailable

            _unavailable(str(error))
            raise

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed (there is nothing on disk to flush anyway)."""
        assert self.process is not None
        self.process.process.send_signal(signal.SIGKILL)
        self.process.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


def sample(node_id: str, sequence: int, timestamp: float) -> bytes:
    return mpb.NodeMetrics(
        schema_version=1,
        node_id=node_id,
        timestamp=timestamp,
        sequence=sequence,
        interval_s=EVERY_S,
        cpu_capacity=4,
        memory_capacity_bytes=8 << 30,
        cpu_utilization=0.1,
        memory_utilization=0.1,
        load_average_1m=0.4,
    ).SerializeToString()


class Agent:
    """A machine's metrics publisher: the node agent's outbox, a sample every ``EVERY_S``."""

    def __init__(self, bootstrap: str) -> None:
        self.outbox = KafkaOutbox(bootstrap, METRICS, what="samples")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-agent", daemon=True)

    def _run(self) -> None:
        sequence = 0
        while not self._stop.wait(EVERY_S):
            sequence += 1
            self.outbox.offer(MACHINE, sample(MACHINE, sequence, time.time()))

    def __enter__(self) -> Agent:
        self.outbox.start()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.outbox.close(timeout=2)


@pytest.fixture
def aggregator(tmp_path: Path, broker: Broker) -> Iterator[tuple[str, Path]]:
    """The aggregator process on the broker; yields its address and its log."""
    address_file = tmp_path / "aggregator.addr"
    log_path = tmp_path / "aggregator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "aggregator",
                "--listen",
                "127.0.0.1:0",
                "--address-file",
                str(address_file),
                "--kafka",
                broker.address,
                "--metrics-topic",
                METRICS,
                "--outcomes-topic",
                OUTCOMES,
                "--period",
                "0.5",
                "--stale-after",
                "2",
                "--insecure",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(address_file.exists, 60, "the aggregator up")
        yield address_file.read_text(), log_path
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def connected(address: str) -> bool | None:
    """Whether the aggregator lists MACHINE as connected (None: not listed)."""
    for machine in list_machines(address).machines:
        if machine.node_id == MACHINE:
            return machine.connected
    return None


def test_the_aggregator_sees_machines_again_after_the_broker_comes_back_empty(
    broker: Broker, aggregator: tuple[str, Path]
) -> None:
    address, log_path = aggregator
    # Samples of another machine on the same partition (same key) as MACHINE's, so that the
    # aggregator's position there ends up thousands of messages past where the new log starts.
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=20, acks=1)
    started = time.time() - FILLER * 0.01
    for i in range(FILLER):
        producer.send(METRICS, sample("filler", i + 1, started + i * 0.01), key=MACHINE.encode())
    producer.flush(30)
    producer.close()

    with Agent(broker.address) as agent:
        wait_until(lambda: connected(address), 60, "the machine connected")
        broker.kill()
        wait_until(lambda: connected(address) is False, 60, "the machine disconnected")
        broker.start()  # empty, on the same port
        wait_until(lambda: agent.outbox.sent > 0 and not agent.outbox.unreachable, 60, "published")
        wait_until(lambda: connected(address), 90, "the machine connected again")

    def reset_lines() -> list[str]:
        return [line for line in log_path.read_text().splitlines() if RESET_LINE in line]

    lines = wait_until(reset_lines, 30, "the reset logged")
    assert len(lines) == 1, lines
    assert f"{METRICS}[" in lines[0] and "log end" in lines[0]
    assert "from the beginning" in lines[0]


def test_outcomes_kept_through_the_restart_arrive_when_the_broker_is_back(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The end's wait stops as soon as all is delivered; its bound is raised only so that a
    # loaded host restarting the broker slowly cannot reach it.
    monkeypatch.setattr(outcomes, "FLUSH_AT_END_S", 120.0)
    reporter = OutcomeReporter(
        "job-r", DataPlane(kafka_bootstrap=broker.address, outcomes_topic=OUTCOMES)
    )
    try:
        reporter.task_ended("before", 1, "node-1", TaskState.SUCCEEDED)
        wait_until(lambda: read_topic(broker.address, OUTCOMES), 60, "the first outcome")

        broker.kill()
        with caplog.at_level(logging.WARNING, logger="sluice.jm.outcomes"):
            for task in ("t1", "t2", "t3"):
                reporter.task_ended(task, 1, "node-1", TaskState.FAILED)
            wait_until(lambda: "cannot publish to Kafka" in caplog.text, 60, "the outage seen")
            # The job ends while the broker is away: its job master flushes on its way out.
            ending = threading.Thread(target=reporter.job_ended, args=("failed",))
            ending.start()
            broker.start()  # empty, on the same port
            ending.join(180)
            assert not ending.is_alive()
            assert "not delivered" not in caplog.text
    finally:
        reporter.close()

    events = [mpb.OutcomeEvent.FromString(m.value) for m in read_topic(broker.address, OUTCOMES)]
    # "before" was acknowledged by the old broker and went with its memory.
    assert [e.task.task_id or e.WhichOneof("event") for e in events] == [
        "t1",
        "t2",
        "t3",
        "job_ended",
    ]
    assert {e.job_id for e in events} == {"job-r"}
