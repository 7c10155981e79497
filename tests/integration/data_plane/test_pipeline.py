"""The metrics pipeline end to end, from the outside, on real servers: two agents publish to a
Kafka-protocol broker (Tansu), the aggregator keeps the samples in InfluxDB 1.x and publishes
machine and candidate lists over Mosquitto.  Read back with plain clients of each protocol.

Both agents report the load of the one host the tests run on, so ROSE's ranking would mark both
machines overloaded whenever that host is busy (another test run, a CPU hog): what these tests
check must not depend on it.  The aggregator ranks with ``least-loaded``, which leaves out only
machines that went silent, so candidacy here follows connectivity alone.  (ROSE's thresholds
are tested on samples the tests make: ``test_sync_at_scale.py`` and the unit tests.)"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from influxdb import InfluxDBClient
from kafka import KafkaConsumer, TopicPartition

from plumbing.data_plane import DEFAULT_METRICS_TOPIC
from policies.oversubscription.candidate_sync import LocalReplica, SyncAction, apply_message
from sluice.brokers import ServiceProcess
from sluice.machines import get_candidates, list_machines
from sluice_pb import metrics_pb2 as mpb
from tests.integration.cluster.harness import Cluster, start_cluster, wait_until
from tests.integration.data_plane.mqtt_tap import MqttTap

pytestmark = pytest.mark.integration

INTERVAL = 0.5
PERIOD = 1.0
NODES = {"node-1", "node-2"}


@pytest.fixture(scope="module")
def influx_db(influxdb_server: ServiceProcess) -> str:
    return f"sluice_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    kafka_server: ServiceProcess,
    mqtt_server: ServiceProcess,
    influxdb_server: ServiceProcess,
    influx_db: str,
) -> Iterator[Cluster]:
    from sluice import local_cluster

    directory = tmp_path_factory.mktemp("pipeline")
    cluster = start_cluster(
        directory,
        "process",
        kafka=kafka_server.address,
        mqtt=f"mqtt://{mqtt_server.address}",
        influx_url=f"http://{influxdb_server.address}/{influx_db}",
        aggregator_period=PERIOD,
        metrics_interval=INTERVAL,
        aggregator_ranking="least-loaded",
    )
    try:
        yield cluster
    finally:
        cluster.close()
        local_cluster.down(directory, lambda _: None)


def sluice_json(cluster: Cluster, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "sluice", "--dir", str(cluster.directory), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every message on ``topic`` so far, with a plain consumer (no group)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not partitions:
            return []
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(partitions)
        messages: list[Any] = []
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for batch in consumer.poll(timeout_ms=1000).values():
                messages.extend(batch)
        return messages
    finally:
        consumer.close()


def test_metrics_topic_holds_one_message_per_node_per_interval(
    cluster: Cluster, kafka_server: ServiceProcess
) -> None:
    wait_until(
        lambda: len(read_topic(kafka_server.address, DEFAULT_METRICS_TOPIC)) >= 16,
        30,
        "eight samples per node",
    )
    samples: dict[str, list[mpb.NodeMetrics]] = {}
    for message in read_topic(kafka_server.address, DEFAULT_METRICS_TOPIC):
        sample = mpb.NodeMetrics.FromString(message.value)
        assert message.key == sample.node_id.encode()
        samples.setdefault(sample.node_id, []).append(sample)
    assert set(samples) == {"node-1", "node-2"}
    for node_samples in samples.values():
        node_samples.sort(key=lambda s: s.sequence)
        sequences = [s.sequence for s in node_samples]
        # One message per interval: consecutive sequence numbers, none twice, and the
        # publishing agent stamped each with the interval it samples at.
        assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
        assert {s.interval_s for s in node_samples} == {INTERVAL}
        spacing = [b.timestamp - a.timestamp for a, b in itertools.pairwise(node_samples)]
        assert sorted(spacing)[len(spacing) // 2] == pytest.approx(INTERVAL, abs=0.2)
        newest = node_samples[-1]
        assert newest.schema_version == 1
        assert 0.0 <= newest.cpu_utilization <= 1.0
        assert newest.memory_capacity_bytes == 2048 * 1024 * 1024
        if Path("/proc/pressure/cpu").exists():
            assert newest.pressure.HasField("cpu")
        # The energy estimate grows from sample to sample (RAPL, or the power model here).
        assert newest.energy_source in ("rapl", "model")
        assert newest.energy_j > node_samples[0].energy_j and newest.power_w > 0
        # This VM has no PMU: the counters are absent, not zero, and the reason is given.
        if not newest.HasField("cpi"):
            assert not newest.HasField("mpki")
            assert newest.counters_unavailable


def test_sluice_nodes_shows_each_machines_power_and_energy(cluster: Cluster) -> None:
    def shown() -> dict[str, str]:
        out = subprocess.run(
            [sys.executable, "-m", "sluice", "--dir", str(cluster.directory), "nodes"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return {line.split()[0]: line for line in out.splitlines() if line.startswith("node-")}

    rows = wait_until(
        lambda: (r := shown()) and all(" kJ (" in row for row in r.values()) and r,
        30,
        "every node's power in sluice nodes",
    )
    assert set(rows) == {"node-1", "node-2"}
    assert all(re.search(r"\d+\.\d W \d+\.\d kJ \((model|rapl)\)", r) for r in rows.values())


def test_influxdb_answers_for_the_samples(
    cluster: Cluster, influxdb_server: ServiceProcess, influx_db: str
) -> None:
    host, port = influxdb_server.address.rsplit(":", 1)
    client = InfluxDBClient(host=host, port=int(port), database=influx_db)
    try:

        def counts() -> dict[str, int]:
            result = client.query('SELECT count("cpu_ut") FROM "node_metrics" GROUP BY "node"')
            return {tags["node"]: next(points)["count"] for (_, tags), points in result.items()}

        found = wait_until(
            lambda: (c := counts()) and len(c) == 2 and min(c.values()) >= 4 and c,
            30,
            "samples of both nodes in InfluxDB",
        )
        assert set(found) == {"node-1", "node-2"}
    finally:
        client.close()


def next_candidates(tap: MqttTap) -> bytes:
    return tap.wait_for(lambda m: m.topic == "sluice/v1/candidates", 10).payload


def retained_machine_list(address: str) -> bytes:
    """The machine list the broker retains: the first message a new subscriber receives."""
    with MqttTap(address, "sluice/v1/machines") as tap:
        message = tap.wait_for(lambda m: m.topic == "sluice/v1/machines", 10)
    assert message.retain, "the first machine list a new subscriber gets is the retained one"
    return message.payload


def machine_names(message: bytes) -> set[str]:
    return set(apply_message(LocalReplica(), message).replica.machines.names)


def test_mqtt_lists_agree_with_sluice_candidates(
    cluster: Cluster, mqtt_server: ServiceProcess
) -> None:
    # The aggregator starts before the agents and publishes (and the broker retains) its list as
    # it is then; the list naming both nodes follows once their first samples were ranked.
    wait_until(
        lambda: machine_names(retained_machine_list(mqtt_server.address)) == NODES,
        30,
        "the broker retains a machine list of both nodes",
    )
    with MqttTap(mqtt_server.address, "sluice/v1/#") as tap:
        machine_list = tap.wait_for(lambda m: m.topic == "sluice/v1/machines", 10)
        assert machine_list.retain
        replica = apply_message(LocalReplica(), machine_list.payload).replica
        assert set(replica.machines.names) == NODES
        # A subscriber joining between rounds may get a delta first: it waits for the next
        # bit vector (a keyframe comes every few rounds), then applies every delta.
        applied: list[bytes] = []
        while len(applied) < 3:
            message = next_candidates(tap)
            result = apply_message(replica, message)
            if result.action is SyncAction.APPLIED:
                replica = result.replica
                applied.append(message[:1])
            else:
                assert result.action is SyncAction.NEED_CANDIDATES and not applied
        assert set(applied) <= {b"C", b"D"}
        # The CLI shows the latest round; follow MQTT up to that very round and compare.
        shown = sluice_json(cluster, "candidates")
        target = int(shown["candidate_version"])
        assert int(shown["machine_version"]) == replica.machines.version
        while replica.candidate_version < target:
            result = apply_message(replica, next_candidates(tap))
            assert result.action is SyncAction.APPLIED, result.action
            replica = result.replica
        assert replica.candidate_version == target
        assert list(replica.candidates) == sorted(
            shown["candidates"], key=replica.machines.names.index
        )


def aggregator_setting(cluster: Cluster, flag: str) -> float:
    """A number the aggregator was started with (``local up`` derives some of them)."""
    argv = [str(a) for a in cluster.service("aggregator")["argv"]]
    return float(argv[argv.index(flag) + 1])


def test_a_silent_agent_leaves_the_candidates_and_comes_back(cluster: Cluster) -> None:
    # Asked over gRPC, as `sluice candidates` does, but in this process: a CLI started per look
    # would see only every few rounds on a busy machine.
    address = str(cluster.info["data_plane"]["aggregator"])
    stale_after = aggregator_setting(cluster, "--stale-after")
    rounds: dict[int, tuple[float, bool]] = {}  # ver_c -> (computed_at, node-2 a candidate)

    def node_2_candidate() -> bool:
        reply = get_candidates(address, cluster.client.tls)
        present = "node-2" in reply.candidates
        rounds[int(reply.candidate_version)] = (reply.computed_at, present)
        return present

    wait_until(node_2_candidate, 30, "node-2 a candidate")
    pid = int(cluster.node("node-2")["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        rounds.clear()
        wait_until(lambda: not node_2_candidate(), 30, "node-2 gone")
        (status,) = [
            m for m in list_machines(address, cluster.client.tls).machines if m.node_id == "node-2"
        ]
        assert not status.connected
        assert status.excluded_by == "disconnected"
        # The newest sample of node-2 was taken before it stopped; every round that still
        # listed it was computed before that sample went stale, so the first round after it
        # went stale dropped it.  Measured on the aggregator's clock: how busy this host is
        # changes when rounds happen, not which of them may list a silent machine.
        # (The round current when it stopped is among them: looked at right after SIGSTOP.)
        kept = {v: at - status.last_seen for v, (at, present) in rounds.items() if present}
        assert kept, rounds
        assert all(age <= stale_after + 0.01 for age in kept.values()), (kept, stale_after)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(node_2_candidate, 30, "node-2 back")


def test_aggregator_restart_refills_its_windows_from_influxdb(
    cluster: Cluster, influxdb_server: ServiceProcess, influx_db: str
) -> None:
    def window(node: str) -> int:
        machines = {n["node_id"]: n["metrics"] for n in sluice_json(cluster, "nodes")}
        return int((machines.get(node) or {}).get("window_samples", 0))

    host, port = influxdb_server.address.rsplit(":", 1)
    client = InfluxDBClient(host=host, port=int(port), database=influx_db)
    try:

        def stored(node: str) -> int:
            result = client.query(
                f'SELECT count("cpu_ut") FROM "node_metrics" WHERE "node" = \'{node}\''
            )
            points = list(result.get_points())
            return int(points[0]["count"]) if points else 0

        # What InfluxDB holds when the aggregator is killed is what it must come back with
        # (its writes trail its windows by up to a flush interval).
        wait_until(lambda: stored("node-1") >= 10, 30, "ten samples of node-1 in InfluxDB")
        log = cluster.directory / "logs" / "aggregator.log"
        offset = log.stat().st_size
        kept = stored("node-1")
        cluster.restart_aggregator()
    finally:
        client.close()
    after = wait_until(lambda: (w := window("node-1")) and w, 30, "the aggregator back")
    # The windows are refilled before the restarted aggregator answers: right away its window
    # is as long as what InfluxDB kept (not a few samples).
    assert after >= min(kept, 60)
    restart_log = log.read_text()[offset:]
    refilled = [line for line in restart_log.splitlines() if "refilled" in line]
    assert refilled and "of 2 machines from InfluxDB" in refilled[0], restart_log[-2000:]
    assert int(refilled[0].split("refilled ")[1].split()[0]) >= min(kept, 60)
