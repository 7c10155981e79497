"""MetricsReporter with fakes: choosing and switching the publisher, and what one sample puts
in the message (identity, sequence, counters or why not, tasks, dropped samples)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from node_agent.agent import AgentConfig, NodeAgent, TaskUsageRate
from node_agent.metrics.counters import CounterReading, CounterSampler, CounterSupport
from node_agent.metrics.host import HostSample, HostSampler
from node_agent.metrics.reporter import MetricsReporter
from node_agent.runtime.base import ResourceLimits, RunObservation, RunState, TaskRuntime
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from plumbing.kafka_outbox import KafkaOutbox
from policies.scheduling.resources import Resources
from sluice_pb import metrics_pb2 as mpb

MIB = 1024 * 1024
PLANE = DataPlane(kafka_bootstrap="k:9092", metrics_topic="m.topic")


@dataclass
class FakePublisher:
    bootstrap: str
    topic: str
    buffer: int
    dropped: int = 0
    offered: list[tuple[str, bytes]] = field(default_factory=list)
    started: int = 0
    closed: int = 0

    def offer(self, key: str, value: bytes) -> None:
        self.offered.append((key, value))

    def start(self) -> None:
        self.started += 1

    def close(self, timeout: float = 5.0) -> None:
        self.closed += 1

    def messages(self) -> list[mpb.NodeMetrics]:
        return [mpb.NodeMetrics.FromString(value) for _, value in self.offered]


class Publishers:
    """The publisher factory: builds FakePublishers and keeps them."""

    def __init__(self) -> None:
        self.built: list[FakePublisher] = []
        self.planes: list[DataPlane] = []

    def __call__(self, plane: DataPlane, buffer: int) -> KafkaOutbox:
        publisher = FakePublisher(plane.kafka_bootstrap, plane.metrics_topic, buffer)
        self.built.append(publisher)
        self.planes.append(plane)
        return cast(KafkaOutbox, publisher)


MACHINE = HostSample(
    cpu_utilization=0.5,
    memory_utilization=0.25,
    memory_total_bytes=1 << 33,
    load_average_1m=1.5,
    disk_throughput_utilization=0.1,
    disk_busy_utilization=0.2,
    disk_usage=0.3,
    net_receive_utilization=0.4,
    net_transmit_utilization=0.05,
    pressure={},
)


class FakeHost:
    def __init__(self) -> None:
        self.samples = 0

    def sample(self, now: float) -> HostSample:
        self.samples += 1
        return MACHINE


@dataclass
class FakeCounters:
    """Answers ``measure`` with ``readings`` and remembers how it was asked."""

    readings: dict[str, CounterReading] = field(default_factory=dict)
    last_failure: str = ""
    calls: list[tuple[list[str], float]] = field(default_factory=list)

    def measure(self, cgroups: Sequence[str], duration: float) -> dict[str, CounterReading]:
        self.calls.append((list(cgroups), duration))
        return self.readings


@dataclass
class FakeRuntime:
    """Observes ``observed``; ``cgroups`` are the tasks' cgroup v2 directories (for PSI)."""

    observed: list[RunObservation]
    cgroups: dict[str, Path] = field(default_factory=dict)
    name: str = "fake"

    def observe(self) -> Sequence[RunObservation]:
        return self.observed

    def pressure_dir(self, key: str) -> Path | None:
        return self.cgroups.get(key)


def observation(key: str, state: RunState, cpu: float = 1.0, memory_mb: int = 64) -> RunObservation:
    job, task, attempt = key.split("/")
    return RunObservation(
        task_key=key,
        job_id=job,
        task_id=task,
        attempt=int(attempt),
        allocation_id="a",
        state=state,
        limits=ResourceLimits(cpu=cpu, memory_mb=memory_mb),
    )


def reporter(
    *,
    tasks: Sequence[RunObservation] = (),
    cgroups: dict[str, Path] | None = None,
    counters: FakeCounters | None = None,
    support: CounterSupport | None = None,
    interval: float = 2.0,
    tls: BrokerTls | None = None,
) -> tuple[MetricsReporter, Publishers, FakeCounters]:
    config = AgentConfig(node_id="node-3", cpu_ids=(0, 1), capacity=Resources(2.0, 1024))
    agent = NodeAgent(config, cast(TaskRuntime, FakeRuntime(list(tasks), cgroups or {})))
    publishers = Publishers()
    counters = counters or FakeCounters()
    metrics = MetricsReporter(
        agent,
        cast(HostSampler, FakeHost()),
        cast(CounterSampler, counters),
        support or CounterSupport(available=False, reason="no PMU in this VM"),
        interval=interval,
        buffer=120,
        publisher_factory=publishers,
        tls=tls,
    )
    return metrics, publishers, counters


def test_sampling_needs_a_publisher() -> None:
    metrics, publishers, _ = reporter()
    metrics.use(DataPlane())  # no Kafka: nothing to publish to
    assert publishers.built == [] and metrics.publisher is None
    with pytest.raises(RuntimeError, match="no metrics publisher"):
        metrics.sample_once(1.0)


def test_use_is_idempotent_and_switches_on_a_new_address_or_topic() -> None:
    metrics, publishers, _ = reporter()
    metrics.use(PLANE)
    metrics.use(DataPlane(kafka_bootstrap="k:9092", metrics_topic="m.topic", mqtt_url="mqtt://x"))
    (first,) = publishers.built
    assert (first.bootstrap, first.topic, first.buffer, first.started) == (
        "k:9092",
        "m.topic",
        120,
        1,
    )

    metrics.use(DataPlane(kafka_bootstrap="k:9092", metrics_topic="other"))
    metrics.use(DataPlane(kafka_bootstrap="k2:9092", metrics_topic="other"))
    assert [(p.bootstrap, p.topic) for p in publishers.built] == [
        ("k:9092", "m.topic"),
        ("k:9092", "other"),
        ("k2:9092", "other"),
    ]
    assert [(p.started, p.closed) for p in publishers.built] == [(1, 1), (1, 1), (1, 0)]
    assert metrics.publisher is cast(KafkaOutbox, publishers.built[-1])
    metrics.use(DataPlane())  # losing the data plane keeps the publisher we have
    assert metrics.publisher is cast(KafkaOutbox, publishers.built[-1])
    metrics.close()
    assert publishers.built[-1].closed == 1


def test_each_sample_is_offered_keyed_by_node_with_the_next_sequence() -> None:
    metrics, publishers, _ = reporter(interval=2.0)
    metrics.use(PLANE)
    for now in (100.0, 102.0, 104.5):
        metrics.sample_once(now)
    (publisher,) = publishers.built
    assert [key for key, _ in publisher.offered] == ["node-3"] * 3
    messages = publisher.messages()
    assert [(m.sequence, m.timestamp) for m in messages] == [(1, 100.0), (2, 102.0), (3, 104.5)]
    first = messages[0]
    assert (first.node_id, first.interval_s) == ("node-3", 2.0)
    assert (first.cpu_capacity, first.memory_capacity_bytes) == (2.0, 1024 * MIB)
    assert (first.cpu_utilization, first.load_average_1m) == (0.5, 1.5)


def test_the_sequence_continues_across_publishers() -> None:
    metrics, publishers, _ = reporter()
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    metrics.use(DataPlane(kafka_bootstrap="k2:9092"))
    metrics.sample_once(2.0)
    assert [m.sequence for p in publishers.built for m in p.messages()] == [1, 2]


def test_the_publishers_dropped_count_goes_into_the_message() -> None:
    metrics, publishers, _ = reporter()
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    publishers.built[0].dropped = 9
    metrics.sample_once(2.0)
    assert [m.dropped_samples for m in publishers.built[0].messages()] == [0, 9]


AVAILABLE = CounterSupport(available=True)


@pytest.mark.parametrize(
    ("support", "counters", "cpi", "mpki", "reason", "measured"),
    [
        (
            CounterSupport(False, "no PMU in this VM"),
            FakeCounters(),
            None,
            None,
            "no PMU in this VM",
            False,
        ),
        (AVAILABLE, FakeCounters({"": CounterReading(3000.0, 2000.0, 10.0)}), 1.5, 5.0, "", True),
        (
            AVAILABLE,
            FakeCounters(last_failure="perf exited 129"),
            None,
            None,
            "perf stat: perf exited 129",
            True,
        ),
        (AVAILABLE, FakeCounters(), None, None, "perf stat: counted nothing this interval", True),
        # A reading for some cgroup is not the machine's.
        (
            AVAILABLE,
            FakeCounters({"/t": CounterReading(1.0, 1.0, 1.0)}),
            None,
            None,
            "perf stat: counted nothing this interval",
            True,
        ),
    ],
    ids=["unsupported", "measured", "perf failed", "nothing counted", "no machine reading"],
)
def test_counters_are_measured_machine_wide_or_left_unset_with_a_reason(
    support: CounterSupport,
    counters: FakeCounters,
    cpi: float | None,
    mpki: float | None,
    reason: str,
    measured: bool,
) -> None:
    metrics, publishers, counters = reporter(support=support, counters=counters, interval=2.0)
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    (message,) = publishers.built[0].messages()
    assert (message.cpi if message.HasField("cpi") else None) == cpi
    assert (message.mpki if message.HasField("mpki") else None) == mpki
    assert message.counters_unavailable == reason
    # Machine-wide (no cgroups), for at most 0.2 s of the interval.
    assert counters.calls == ([([], 0.2)] if measured else [])


def test_short_intervals_measure_counters_for_a_quarter_of_the_interval() -> None:
    counters = FakeCounters({"": CounterReading(1.0, 1.0, 0.0)})
    metrics, _, counters = reporter(support=AVAILABLE, counters=counters, interval=0.4)
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    assert counters.calls == [([], 0.1)]


def test_live_tasks_are_reported_with_their_usage_and_limits() -> None:
    tasks = [
        observation("j1/t1/1", RunState.RUNNING, cpu=1.5, memory_mb=256),
        observation("j1/t2/1", RunState.SUSPENDED, cpu=0.5, memory_mb=64),
        observation("j2/t1/2", RunState.EXITED),
    ]
    metrics, publishers, _ = reporter(tasks=tasks)
    metrics.agent.task_usage = {"j1/t1/1": TaskUsageRate(cpu_cores=0.75, memory_bytes=100 * MIB)}
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    (message,) = publishers.built[0].messages()
    assert (message.regular_running, message.speculative_running) == (1, 0)
    by_key = {t.task_key: t for t in message.tasks}
    assert set(by_key) == {"j1/t1/1", "j1/t2/1"}  # an exited task is not live
    running, suspended = by_key["j1/t1/1"], by_key["j1/t2/1"]
    assert (running.job_id, running.task_id) == ("j1", "t1")
    assert (running.cpu_cores, running.memory_bytes) == (0.75, 100 * MIB)
    assert (running.cpu_limit_cores, running.memory_limit_bytes) == (1.5, 256 * MIB)
    assert (running.suspended, running.speculative) == (False, False)
    assert suspended.suspended
    assert (suspended.cpu_cores, suspended.memory_bytes) == (0.0, 0)  # no usage measured yet
    assert (suspended.cpu_limit_cores, suspended.memory_limit_bytes) == (0.5, 64 * MIB)


def test_a_tasks_pressure_comes_from_its_cgroup_directory(tmp_path: Path) -> None:
    (tmp_path / "cpu.pressure").write_text(
        "some avg10=1.50 avg60=0.50 avg300=0.10 total=1234\n"
        "full avg10=0.25 avg60=0.00 avg300=0.00 total=56\n"
    )
    tasks = [observation("j1/t1/1", RunState.RUNNING), observation("j1/t2/1", RunState.RUNNING)]
    metrics, publishers, _ = reporter(tasks=tasks, cgroups={"j1/t1/1": tmp_path})
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    (message,) = publishers.built[0].messages()
    by_key = {t.task_key: t for t in message.tasks}
    pressure = by_key["j1/t1/1"].pressure
    assert pressure.HasField("cpu") and not pressure.HasField("memory")  # no memory.pressure
    assert (pressure.cpu.some_avg10, pressure.cpu.some_total_us) == (1.5, 1234)
    assert pressure.cpu.full_total_us == 56
    assert not by_key["j1/t2/1"].HasField("pressure")  # no cgroup v2 directory


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def test_per_task_counters_come_from_the_same_perf_run() -> None:
    # The reporter names a task's cgroup relative to the cgroup2 mount of this machine.
    root = cgroup2_mount()
    if root is None:
        pytest.skip("no cgroup2 mount on this machine")
    tasks = [
        observation("j1/t1/1", RunState.RUNNING),
        observation("j1/t2/1", RunState.RUNNING),
        observation("j1/t3/1", RunState.RUNNING),
    ]
    cgroups = {  # directories need not exist: their PSI is then simply absent
        "j1/t1/1": root / "sluice-test" / "t1",
        "j1/t2/1": root / "sluice-test" / "t2",
    }
    counters = FakeCounters(
        {
            "": CounterReading(4000.0, 2000.0, 20.0),
            "sluice-test/t1": CounterReading(300.0, 100.0, 1.0),
            # t2's cgroup was not counted (perf reports nothing for it): no figures, not zeros.
        }
    )
    metrics, publishers, counters = reporter(
        tasks=tasks, cgroups=cgroups, support=AVAILABLE, counters=counters
    )
    metrics.use(PLANE)
    metrics.sample_once(1.0)
    assert counters.calls == [(["sluice-test/t1", "sluice-test/t2"], 0.2)]
    (message,) = publishers.built[0].messages()
    assert (message.cpi, message.mpki) == (2.0, 10.0)
    by_key = {t.task_key: t for t in message.tasks}
    assert (by_key["j1/t1/1"].cpi, by_key["j1/t1/1"].mpki) == (3.0, 10.0)
    for key in ("j1/t2/1", "j1/t3/1"):
        assert not by_key[key].HasField("cpi") and not by_key[key].HasField("mpki")


AGENT_TLS = BrokerTls(Path("/tls/ca.crt"), Path("/tls/tls.crt"), Path("/tls/tls.key"))


def test_a_change_to_tls_alone_switches_the_publisher() -> None:
    metrics, publishers, _ = reporter(tls=AGENT_TLS)
    metrics.use(DataPlane(kafka_bootstrap="k:9093"))
    metrics.use(DataPlane(kafka_bootstrap="k:9093", kafka_tls=True))
    metrics.use(DataPlane(kafka_bootstrap="k:9093", kafka_tls=True))  # the same: kept
    assert [p.kafka_tls for p in publishers.planes] == [False, True]
    assert [(p.started, p.closed) for p in publishers.built] == [(1, 1), (1, 0)]


def test_without_a_certificate_a_tls_kafka_gets_no_samples_and_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics, publishers, _ = reporter(tls=None)
    plane = DataPlane(kafka_bootstrap="k:9093", kafka_tls=True)
    with caplog.at_level(logging.WARNING, logger="sluice.agent.metrics"):
        metrics.use(plane)
        metrics.use(plane)  # every registration hands it again: said once
    assert publishers.built == [] and metrics.publisher is None
    assert [r.getMessage() for r in caplog.records] == [
        "Kafka at k:9093 is TLS (--kafka-tls) but this agent has no certificate (it runs "
        "--insecure): no metrics are published"
    ]
