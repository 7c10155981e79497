"""The aggregator's edge translation: one ``NodeMetrics`` protobuf into one ``MachineSample``.

A ``MachineSample`` holds exactly what the machine windows and the sample store keep of a node's
report, in the order the ROSE policies use (``config.LOAD_METRICS`` and ``config.QUEUE_METRICS``).
Everything else in the message (pressure, per-task figures, sequence numbers) is left to other
consumers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from sluice_pb import metrics_pb2

SCHEMA_VERSIONS: frozenset[int] = frozenset({1})

# Load metric -> the NodeMetrics field it is read from (metrics.proto names the same mapping).
_LOAD_FIELDS: dict[str, str] = {
    "cpu_ut": "cpu_utilization",
    "mem_ut": "memory_utilization",
    "load_avg_1": "load_average_1m",
    "disk_s_ut": "disk_throughput_utilization",
    "disk_ut": "disk_busy_utilization",
    "disk_usage": "disk_usage",
    "net_rec_ut": "net_receive_utilization",
    "net_tra_ut": "net_transmit_utilization",
}
# Queue metric -> the NodeMetrics counter it is read from.
_QUEUE_FIELDS: dict[str, str] = {
    "rc_am": "regular_running",
    "oc_w_am": "speculative_waiting",
    "oc_r_am": "speculative_running",
}
# The one load metric not reported as a fraction of capacity: the run queue, whose capacity is
# the machine's core count.
_CORE_SCALED = "load_avg_1"


@dataclass(frozen=True)
class MachineSample:
    """One machine's metrics at one instant.

    * ``load``: one value per ``LOAD_METRICS`` entry, same order (fractions, except
      ``load_avg_1`` in runnable tasks);
    * ``load_capacity``: the capacity of each load metric in the same unit (1.0 for fractions,
      the offered cores for ``load_avg_1``); always finite and positive;
    * ``queue``: one count per ``QUEUE_METRICS`` entry, same order;
    * ``cpi`` / ``mpki``: machine-wide hardware counters, ``None`` when the machine has none
      (absent is not zero);
    * ``timestamp``: wall-clock seconds (``sample_from_metrics`` rounds it to the millisecond);
    * ``interval_s``: the agent's sampling interval.

    NaN in ``load`` or ``queue`` means "not measured" (the windows treat it as a missing sample).
    Raises ``ValueError`` for tuples of the wrong length or an unusable capacity or timestamp.
    """

    node_id: str
    timestamp: float
    load: tuple[float, ...]
    load_capacity: tuple[float, ...]
    queue: tuple[float, ...]
    cpi: float | None
    mpki: float | None
    interval_s: float

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("node_id: must not be empty")
        if not math.isfinite(self.timestamp):
            raise ValueError("timestamp: must be a finite number")
        for name, values, expected in (
            ("load", self.load, len(LOAD_METRICS)),
            ("load_capacity", self.load_capacity, len(LOAD_METRICS)),
            ("queue", self.queue, len(QUEUE_METRICS)),
        ):
            if len(values) != expected:
                raise ValueError(f"{name}: expected {expected} values, got {len(values)}")
        if not all(math.isfinite(c) and c > 0 for c in self.load_capacity):
            raise ValueError("load_capacity: every capacity must be a positive number")


def sample_from_metrics(message: metrics_pb2.NodeMetrics) -> MachineSample:
    """The ``MachineSample`` of one agent report.

    Raises ``ValueError("field: problem")`` naming the protobuf field for an unknown
    ``schema_version``, an empty ``node_id``, or a negative or non-finite figure. A
    ``cpu_capacity`` of 0 (an agent that does not report it) gives ``load_avg_1`` a capacity of
    1.0 rather than a division by zero downstream.
    """
    if message.schema_version not in SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in sorted(SCHEMA_VERSIONS))
        raise ValueError(
            f"schema_version: unknown version {message.schema_version} (known: {known})"
        )
    if not message.node_id:
        raise ValueError("node_id: must not be empty")
    # Millisecond resolution, what InfluxDB keeps: a sample read back from it then equals its
    # Kafka copy, and a replay after a restart sees the copy as the duplicate it is.
    timestamp = round(_figure(message, "timestamp") * 1000) / 1000
    interval_s = _figure(message, "interval_s")
    cores = _figure(message, "cpu_capacity")
    load = tuple(_figure(message, _LOAD_FIELDS[metric]) for metric in LOAD_METRICS)
    capacity = tuple(
        (cores if cores > 0 else 1.0) if metric == _CORE_SCALED else 1.0 for metric in LOAD_METRICS
    )
    # uint32 counters: never negative nor NaN, nothing to check.
    queue = tuple(float(getattr(message, _QUEUE_FIELDS[metric])) for metric in QUEUE_METRICS)
    return MachineSample(
        node_id=message.node_id,
        timestamp=timestamp,
        load=load,
        load_capacity=capacity,
        queue=queue,
        cpi=_figure(message, "cpi") if message.HasField("cpi") else None,
        mpki=_figure(message, "mpki") if message.HasField("mpki") else None,
        interval_s=interval_s,
    )


def _figure(message: metrics_pb2.NodeMetrics, field: str) -> float:
    value = float(getattr(message, field))
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{field}: must be a finite non-negative number, got {value!r}")
    return value
