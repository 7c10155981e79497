"""Kafka stopped for 10 s and started again under a running cluster: tasks keep running, nothing
crashes, publishing resumes, and the samples the agents could not keep are counted where an
operator looks (``sluice nodes``, the agent's log)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from plumbing.data_plane import DEFAULT_METRICS_TOPIC
from sluice import brokers, local_cluster
from sluice.brokers import ServiceProcess
from sluice_pb import common_pb2 as pb
from sluice_pb import metrics_pb2 as mpb
from tests.integration.cluster.harness import (
    _alive,
    job_spec,
    phase,
    start_cluster,
    wait_until,
)
from tests.integration.data_plane.test_pipeline import read_topic, sluice_json

pytestmark = pytest.mark.integration

OUTAGE_S = 10.0
BUFFER = 4  # samples an agent keeps while Kafka is away: two seconds' worth


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    """A broker of this test's own (it gets stopped); the list holds its current process."""
    try:
        broker = brokers.start_kafka(brokers.free_port(), tmp_path / "kafka.log")
    except brokers.BrokerUnavailableError as error:
        from tests.integration.conftest import _unavailable

        _unavailable(str(error))
        raise
    current = [broker]
    yield current
    current[0].stop()


def test_agents_ride_out_a_kafka_outage(
    tmp_path: Path, kafka: list[ServiceProcess], mqtt_server: ServiceProcess
) -> None:
    address = kafka[0].address
    cluster = start_cluster(
        tmp_path / "cluster",
        "process",
        kafka=address,
        mqtt=f"mqtt://{mqtt_server.address}",
        aggregator_period=1.0,
        metrics_interval=0.5,
        metrics_buffer=BUFFER,
    )
    try:
        job_id = cluster.submit(job_spec("outage", [phase("work", 2, "sleep 16", cpu=0.5)]))
        for task in ("work-0", "work-1"):
            cluster.wait_task_running(job_id, task)
        wait_until(
            lambda: len(read_topic(address, DEFAULT_METRICS_TOPIC)) >= 4, 20, "samples flowing"
        )

        kafka[0].stop()
        time.sleep(OUTAGE_S)
        pids = {"rm": cluster.info["rm_pid"]} | {
            s["name"]: s["pid"] for s in cluster.info["services"] if s["name"] == "aggregator"
        }
        pids |= {n["node_id"]: n["pid"] for n in cluster.info["nodes"]}
        assert {name: _alive(int(pid)) for name, pid in pids.items()} == dict.fromkeys(pids, True)
        kafka[0] = brokers.start_kafka(kafka[0].port, tmp_path / "kafka.log")

        # The broker came back empty (in-memory storage): whatever is on the topic now was
        # published after the outage, by both agents.
        def republished() -> set[str]:
            return {
                mpb.NodeMetrics.FromString(m.value).node_id
                for m in read_topic(address, DEFAULT_METRICS_TOPIC)
            }

        wait_until(lambda: republished() == {"node-1", "node-2"}, 30, "publishing resumed")

        detail = cluster.wait_final(job_id, timeout=60)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        assert sorted((t.task_id, t.attempt) for t in detail.tasks) == [
            ("work-0", 1),
            ("work-1", 1),
        ]

        # About 20 samples fell due during the outage and each agent kept only BUFFER.
        def dropped() -> dict[str, int]:
            nodes = sluice_json(cluster, "nodes")
            return {
                n["node_id"]: int((n["metrics"] or {}).get("latest", {}).get("dropped_samples", 0))
                for n in nodes
            }

        counts = wait_until(
            lambda: (d := dropped()) and min(d.values()) >= 5 and d, 30, "drops visible"
        )
        assert set(counts) == {"node-1", "node-2"}
        log = (cluster.directory / "logs" / "node-1.log").read_text()
        assert "cannot publish to Kafka" in log
        assert "reachable again" in log
    finally:
        cluster.close()
        local_cluster.down(cluster.directory, lambda _: None)
