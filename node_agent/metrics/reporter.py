"""The agent's metrics loop: every interval, sample the machine and its tasks and publish one
``NodeMetrics`` message on the metrics topic (keyed by node id).

Where to publish comes from the resource manager when the agent registers (or from ``--kafka``);
until it is known, nothing is sampled.  Hardware counters are probed once at start-up: on a
machine without a PMU (most VMs) CPI and MPKI are left unset, never reported as 0, and the
message says why.

A data plane whose Kafka is TLS (``--kafka-tls``) is published to with the agent's own
certificate; an agent without one (``--insecure``) says so once and publishes nothing rather
than in plaintext.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from node_agent.agent import NodeAgent
from node_agent.metrics.counters import CounterReading, CounterSampler, CounterSupport
from node_agent.metrics.energy import EnergyMeter, detect_rapl
from node_agent.metrics.host import HostSampler
from node_agent.metrics.pressure import read_cgroup_pressure
from node_agent.metrics.report import Counters, TaskFigures, build_node_metrics
from node_agent.metrics.share import own_sample
from node_agent.runtime.base import RunObservation, RunState
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from plumbing.kafka_outbox import KafkaOutbox, kafka_producer
from policies.approximation.energy import PowerModel

log = logging.getLogger("sluice.agent.metrics")

MIB = 1024 * 1024


class MetricsReporter:
    """Samples and publishes; ``run`` is the loop, ``sample_once`` one step of it."""

    def __init__(
        self,
        agent: NodeAgent,
        host: HostSampler,
        counters: CounterSampler,
        counter_support: CounterSupport,
        *,
        interval: float,
        buffer: int,
        publisher_factory: Callable[[DataPlane, int], KafkaOutbox] | None = None,
        tls: BrokerTls | None = None,
        energy: EnergyMeter | None = None,
    ) -> None:
        """``tls``: the agent's certificate, for a Kafka over TLS (the default publisher uses
        it; a given ``publisher_factory`` must apply it itself)."""
        self.agent = agent
        self.interval = interval
        self._host = host
        self._counters = counters
        self._support = counter_support
        self._buffer = buffer
        self._tls = tls
        self._factory = publisher_factory or (
            lambda plane, buffer: _default_publisher(plane, buffer, tls)
        )
        self.publisher: KafkaOutbox | None = None
        self._in_use: tuple[str, str, bool] | None = None  # (bootstrap, topic, TLS)
        self._sequence = 0
        self._energy = energy or EnergyMeter(PowerModel(), detect_rapl())

    def use(self, plane: DataPlane) -> None:
        """Publish to ``plane``'s Kafka from now on (a no-op when it is already in use)."""
        if not plane.has_kafka:
            return
        wanted = (plane.kafka_bootstrap, plane.metrics_topic, plane.kafka_tls)
        if wanted == self._in_use:
            return
        current, self.publisher = self.publisher, None
        self._in_use = wanted
        if current is not None:
            current.close(timeout=1)
        if plane.kafka_tls and self._tls is None:
            log.warning(
                "Kafka at %s is TLS (--kafka-tls) but this agent has no certificate (it runs "
                "--insecure): no metrics are published",
                plane.kafka_bootstrap,
            )
            return
        self.publisher = self._factory(plane, self._buffer)
        self.publisher.start()
        log.info(
            "publishing metrics every %g s to Kafka %s%s, topic %s (buffer %d samples)",
            self.interval,
            plane.kafka_bootstrap,
            " over TLS" if plane.kafka_tls else "",
            plane.metrics_topic,
            self._buffer,
        )

    def run(self, stop: threading.Event) -> None:
        next_due = time.monotonic()
        while not stop.is_set():
            if self.publisher is not None:
                try:
                    self.sample_once(time.time())
                except Exception:  # one bad read must not end the loop
                    log.exception("metrics sample failed")
            next_due += self.interval
            delay = next_due - time.monotonic()
            if delay < 0:  # fell behind (a slow perf run, a paused VM): do not burst
                next_due = time.monotonic()
                delay = 0
            stop.wait(delay)

    def sample_once(self, now: float) -> None:
        """Measure and queue one sample.  Needs a publisher (see ``use``)."""
        publisher = self.publisher
        if publisher is None:
            raise RuntimeError("no metrics publisher: the data plane is not known yet")
        monotonic = time.monotonic()
        machine = self._host.sample(monotonic)  # rates need a clock that never steps
        if self.agent.config.own_share:  # several nodes on one host: judge this one's share
            machine = own_sample(machine, self.agent.used, self.agent.config.capacity)
        energy = self._energy.sample(
            monotonic, machine.cpu_utilization, self.agent.core.any_sprinting
        )
        live = self._live_tasks()
        tasks = self._task_figures(live)
        counters, per_task = self._counters_of(live)
        self._sequence += 1
        config = self.agent.config
        message = build_node_metrics(
            node_id=config.node_id,
            timestamp=now,
            sequence=self._sequence,
            interval_s=self.interval,
            cpu_capacity=config.capacity.cpu,
            memory_capacity_bytes=config.capacity.memory_mb * MIB,
            machine=machine,
            counters=counters,
            tasks=[
                dataclasses.replace(t, cpi=per_task[t.task_key].cpi, mpki=per_task[t.task_key].mpki)
                if t.task_key in per_task
                else t
                for t in tasks
            ],
            dropped_samples=publisher.dropped,
            energy=energy,
        )
        publisher.offer(config.node_id, message.SerializeToString())

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()

    def _live_tasks(self) -> list[tuple[RunObservation, Path | None]]:
        """The live tasks, each with its cgroup v2 directory (None where there is none)."""
        return [
            (o, self.agent.pressure_dir(o.task_key))
            for o in self.agent.observations()
            if o.state is not RunState.EXITED
        ]

    def _counters_of(
        self, live: list[tuple[RunObservation, Path | None]]
    ) -> tuple[Counters, dict[str, CounterReading]]:
        """Machine-wide counters, and per task where its cgroup can be counted (cgroup v2:
        ``perf stat -G`` takes the path below the cgroup2 mount), from one short perf run."""
        if not self._support.available:
            return Counters(reason=self._support.reason), {}
        roots = cgroup2_roots()
        cgroup_of = {}
        for observation, directory in live:
            name = relative_to_roots(directory, roots) if directory is not None else None
            if name:
                cgroup_of[observation.task_key] = name
        readings = self._counters.measure(
            sorted(set(cgroup_of.values())), duration=min(0.2, self.interval / 4)
        )
        per_task = {key: readings[name] for key, name in cgroup_of.items() if name in readings}
        reading = readings.get("")
        if reading is None:
            failure = self._counters.last_failure or "counted nothing this interval"
            return Counters(reason=f"perf stat: {failure}"), per_task
        if reading.cpi is None:
            return Counters(reason="perf stat: no instructions counted this interval"), per_task
        return Counters(cpi=reading.cpi, mpki=reading.mpki), per_task

    def _task_figures(self, live: list[tuple[RunObservation, Path | None]]) -> list[TaskFigures]:
        usage = self.agent.task_usage
        figures = []
        for observation, pressure_dir in live:
            rate = usage.get(observation.task_key)
            figures.append(
                TaskFigures(
                    task_key=observation.task_key,
                    job_id=observation.job_id,
                    task_id=observation.task_id,
                    speculative=False,
                    suspended=observation.state is RunState.SUSPENDED,
                    cpu_cores=rate.cpu_cores if rate else 0.0,
                    memory_bytes=rate.memory_bytes if rate else 0,
                    cpu_limit_cores=observation.limits.cpu,
                    memory_limit_bytes=observation.limits.memory_mb * MIB,
                    pressure=read_cgroup_pressure(pressure_dir) if pressure_dir else None,
                )
            )
        return figures


def cgroup2_roots(mounts: Path = Path("/proc/mounts")) -> list[Path]:
    """The cgroup2 mount points, deepest first (none if the mount table is unreadable)."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return []
    roots = [
        Path(f[1]) for f in (line.split() for line in lines) if len(f) > 2 and f[2] == "cgroup2"
    ]
    return sorted(roots, key=lambda r: len(r.parts), reverse=True)


def relative_to_roots(directory: Path, roots: list[Path]) -> str | None:
    """``directory`` below the first of ``roots`` holding it, or None."""
    for root in roots:
        if directory.is_relative_to(root) and directory != root:
            return str(directory.relative_to(root))
    return None


def cgroup2_name(directory: Path, mounts: Path = Path("/proc/mounts")) -> str | None:
    """``directory`` relative to the cgroup2 mount holding it (perf's ``-G`` name), or None."""
    return relative_to_roots(directory, cgroup2_roots(mounts))


def _default_publisher(plane: DataPlane, buffer: int, tls: BrokerTls | None) -> KafkaOutbox:
    tls = tls if plane.kafka_tls else None
    return KafkaOutbox(
        plane.kafka_bootstrap,
        plane.metrics_topic,
        capacity=buffer,
        producer_factory=lambda bootstrap: kafka_producer(bootstrap, "sluice-agent", tls),
        log=log,
        what="metric samples",
        tls=tls,
    )
