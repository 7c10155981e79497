"""Incremental candidate sync at 2,000 machines (ROSE Sec. 5.2), through the real aggregator
process: simulated agents publish on Kafka, a subscriber measures what arrives over MQTT.

In steady state each round's candidate message (a delta, or a bit vector every few rounds)
must be under 2% of the size of the full machine list."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaProducer

from policies.oversubscription.candidate_sync import LocalReplica, SyncAction, apply_message
from sluice.brokers import ServiceProcess
from sluice_pb import metrics_pb2 as mpb
from tests.integration.cluster.harness import wait_until
from tests.integration.data_plane.mqtt_tap import MqttTap

pytestmark = pytest.mark.integration

MACHINES = 2000
SAMPLE_EVERY_S = 1.0


def simulated_sample(node_id: str, base: float, sequence: int, rng: np.random.Generator) -> bytes:
    """A quiet machine whose CPU use wobbles a little around its own level."""
    cpu = float(np.clip(base + rng.normal(0, 0.01), 0, 1))
    return mpb.NodeMetrics(
        schema_version=1,
        node_id=node_id,
        timestamp=time.time(),
        sequence=sequence,
        interval_s=SAMPLE_EVERY_S,
        cpu_capacity=16,
        memory_capacity_bytes=64 << 30,
        cpu_utilization=cpu,
        memory_utilization=base / 2,
        load_average_1m=cpu * 16,
    ).SerializeToString()


class SimulatedAgents:
    """Publishes one sample per machine every ``SAMPLE_EVERY_S`` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks=1)
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.rounds = 0

    def _run(self) -> None:
        rng = np.random.default_rng(7)
        bases = rng.uniform(0.05, 0.8, MACHINES)
        names = [f"sim-{i:04d}" for i in range(MACHINES)]
        while not self._stop.is_set():
            started = time.monotonic()
            self.rounds += 1
            for name, base in zip(names, bases, strict=True):
                self._producer.send(
                    self._topic,
                    simulated_sample(name, float(base), self.rounds, rng),
                    key=name.encode(),
                )
            self._producer.flush()
            self._stop.wait(max(0.0, SAMPLE_EVERY_S - (time.monotonic() - started)))

    def __enter__(self) -> SimulatedAgents:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.close()


@pytest.fixture
def aggregator(
    tmp_path: Path, kafka_server: ServiceProcess, mqtt_server: ServiceProcess
) -> Iterator[tuple[str, str, str]]:
    """An aggregator process on topics of its own; yields (metrics topic, MQTT prefix, addr)."""
    run = uuid.uuid4().hex[:8]
    topic, prefix = f"sim.metrics.{run}", f"sim/{run}"
    address_file = tmp_path / "aggregator.addr"
    log = (tmp_path / "aggregator.log").open("wb")
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
            kafka_server.address,
            "--metrics-topic",
            topic,
            "--outcomes-topic",
            f"sim.outcomes.{run}",
            "--mqtt",
            f"mqtt://{mqtt_server.address}",
            "--mqtt-topic-prefix",
            prefix,
            "--period",
            "1",
            "--stale-after",
            "10",
            "--window",
            "10",
            "--insecure",  # the simulated job masters below connect without TLS
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(address_file.exists, 30, "the aggregator up")
        yield topic, prefix, address_file.read_text()
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def test_steady_state_candidate_messages_are_under_two_percent_of_the_list(
    aggregator: tuple[str, str, str], kafka_server: ServiceProcess, mqtt_server: ServiceProcess
) -> None:
    topic, prefix, _ = aggregator
    with (
        MqttTap(mqtt_server.address, f"{prefix}/#") as tap,
        SimulatedAgents(kafka_server.address, topic),
    ):
        # The machine list settles once every simulated machine has been seen.
        def full_list() -> bytes:
            message = tap.wait_for(lambda m: m.topic == f"{prefix}/machines", 30).payload
            return message if message[9:13] == MACHINES.to_bytes(4, "big") else b""

        machine_list = wait_until(full_list, 60, "the full machine list")
        replica = apply_message(LocalReplica(), machine_list).replica
        assert len(replica.machines.names) == MACHINES

        sizes: dict[bytes, list[int]] = {b"C": [], b"D": []}
        applied = 0
        while applied < 8:
            message = tap.wait_for(lambda m: m.topic == f"{prefix}/candidates", 30).payload
            result = apply_message(replica, message)
            if result.action is SyncAction.NEED_FULL_LIST:
                pytest.fail("the machine list changed in steady state")
            if result.action is not SyncAction.APPLIED:
                continue  # a delta before our first bit vector
            replica = result.replica
            applied += 1
            sizes[message[:1]].append(len(message))

    full = len(machine_list)
    largest = max(sizes[b"C"] + sizes[b"D"])
    print(f"\nfull list {full} B; bit vectors {sizes[b'C']} B; deltas {sizes[b'D']} B")
    assert largest < 0.02 * full
    assert 0 < len(replica.candidates) <= 100
