"""InfluxSampleStore against a real InfluxDB 1.x: write, read back, and ride out an outage."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aggregator.influx_store import (
    InfluxSampleStore,
    InfluxTarget,
    InfluxUnavailableError,
    parse_influx_url,
)
from aggregator.samples import MachineSample
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from sluice import brokers
from sluice.brokers import ServiceProcess

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0  # sample times are fixed; ``now`` is passed to load_recent
LOG = logging.getLogger("tests.influx_store")


def sample(node: str, t: float, *, cpi: float | None = None) -> MachineSample:
    return MachineSample(
        node_id=node,
        timestamp=t,
        load=tuple(round(0.01 * j + (t - T0) / 1000, 6) for j in range(len(LOAD_METRICS))),
        load_capacity=tuple(16.0 if m == "load_avg_1" else 1.0 for m in LOAD_METRICS),
        queue=tuple(float(j + 1) for j in range(len(QUEUE_METRICS))),
        cpi=cpi,
        mpki=None,
        interval_s=1.0,
    )


def wait_until(condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll ``condition``; the limit only turns a hang into a failure, nothing is timed."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(0.02)


def target_of(server: ServiceProcess) -> InfluxTarget:
    # A database per test: the session's server is shared.
    return parse_influx_url(f"http://{server.address}/t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def store(influxdb_server: ServiceProcess) -> Iterator[InfluxSampleStore]:
    writer = InfluxSampleStore(target_of(influxdb_server), batch_size=4, flush_interval=0.05)
    writer.start()
    yield writer
    writer.close(timeout=1.0)


def test_written_samples_come_back_newest_per_machine_oldest_first(
    store: InfluxSampleStore,
) -> None:
    written = [sample("a", T0 + i, cpi=1.0 + i / 10) for i in range(5)]
    written += [sample("rack 1,b=2", T0 + i) for i in range(2)]  # escaped in line protocol
    written += [sample("c", T0 - 500.0)]  # older than the read-back horizon
    for s in written:
        store.write(s)
    assert store.close(timeout=10.0) == 0
    assert (store.written, store.dropped, store.pending) == (len(written), 0, 0)

    recent = store.load_recent(window=3, since_s=100.0, now=T0 + 10)
    by_node: dict[str, list[MachineSample]] = {}
    for s in recent:
        by_node.setdefault(s.node_id, []).append(s)
    assert sorted(by_node) == ["a", "rack 1,b=2"]
    assert by_node["a"] == written[2:5]  # per-machine limit: the newest 3, oldest first
    assert by_node["rack 1,b=2"] == written[5:7]
    assert all(s.cpi is None for s in by_node["rack 1,b=2"])  # absent stays absent, not 0


def test_load_recent_of_a_database_never_written_is_empty(
    influxdb_server: ServiceProcess,
) -> None:
    reader = InfluxSampleStore(target_of(influxdb_server))  # not started: no database yet
    assert reader.load_recent(window=5, since_s=60.0) == []


def test_unreachable_server_buffers_drops_oldest_and_load_recent_fails() -> None:
    target = InfluxTarget(host="127.0.0.1", port=brokers.free_port(), database="sluice")
    store = InfluxSampleStore(target, batch_size=2, max_pending=3, flush_interval=0.05, log=LOG)
    store.start()  # a server that is down does not fail start-up
    for i in range(5):
        store.write(sample("a", T0 + i))
    # A batch in flight when the writes arrived is trimmed once it fails: wait for that.
    wait_until(lambda: store.pending == 3, "the failed batch to be requeued")
    assert (store.dropped, store.written) == (2, 0)
    assert store.close(timeout=0.3) == 3
    store.write(sample("a", T0 + 9))  # after close: refused and counted
    assert store.dropped == 3
    with pytest.raises(InfluxUnavailableError, match="unreachable"):
        store.load_recent(window=5, since_s=60.0)


def test_outage_buffers_counts_and_delivers_after_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = brokers.free_port()
    workdir, log_path = tmp_path / "influxdb", tmp_path / "influxdb.log"
    server = brokers.start_influxdb(port, workdir, log_path)
    store = InfluxSampleStore(
        parse_influx_url(f"http://127.0.0.1:{port}/outage"),
        batch_size=4,
        max_pending=8,
        flush_interval=0.05,
        max_backoff=0.5,
        log=LOG,
    )
    caplog.set_level(logging.INFO, logger=LOG.name)
    try:
        store.start()
        store.write(sample("a", T0))
        wait_until(lambda: store.written == 1, "the first sample to be written")

        server.stop()
        during = [sample("a", T0 + 1 + i) for i in range(10)]
        for s in during:
            store.write(s)
        wait_until(lambda: "unreachable" in caplog.text, "the outage to be noticed")
        wait_until(lambda: store.pending == 8, "a failed batch to be requeued")
        assert (store.written, store.dropped) == (1, 2)

        server = brokers.start_influxdb(port, workdir, log_path)  # same data directory
        wait_until(lambda: store.pending == 0, "the buffered samples to be delivered")
        assert (store.written, store.dropped) == (9, 2)
    finally:
        store.close(timeout=5.0)
        server.stop()

    messages = [r.getMessage() for r in caplog.records if r.name == LOG.name]
    assert sum("unreachable" in m for m in messages) == 1  # once per outage...
    assert sum("reachable again" in m for m in messages) == 1  # ...and once when back
    # The first sample survived the restart; of the ten, the two oldest were dropped.
    server = brokers.start_influxdb(port, workdir, log_path)
    try:
        recent = store.load_recent(window=20, since_s=3600.0, now=T0 + 60)
    finally:
        server.stop()
    assert recent == [sample("a", T0), *during[2:]]
