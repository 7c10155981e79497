"""NodeMetrics -> MachineSample: field mapping, capacities, absent counters and refusals."""

from __future__ import annotations

import math

import pytest

from aggregator.samples import MachineSample, sample_from_metrics
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from sluice_pb import metrics_pb2

# Every load and queue metric with the protobuf field it must come from and a distinct value.
LOAD_SOURCES = {
    "cpu_ut": ("cpu_utilization", 0.11),
    "mem_ut": ("memory_utilization", 0.22),
    "load_avg_1": ("load_average_1m", 3.5),
    "disk_s_ut": ("disk_throughput_utilization", 0.33),
    "disk_ut": ("disk_busy_utilization", 0.44),
    "disk_usage": ("disk_usage", 0.55),
    "net_rec_ut": ("net_receive_utilization", 0.66),
    "net_tra_ut": ("net_transmit_utilization", 0.77),
}
QUEUE_SOURCES = {
    "rc_am": ("regular_running", 4),
    "oc_w_am": ("speculative_waiting", 7),
    "oc_r_am": ("speculative_running", 2),
}


def metrics(**overrides: object) -> metrics_pb2.NodeMetrics:
    fields: dict[str, object] = {
        "schema_version": 1,
        "node_id": "node-1",
        "timestamp": 1_700_000_000.25,
        "sequence": 9,
        "interval_s": 1.0,
        "cpu_capacity": 16.0,
        "regular_waiting": 99,  # not a queue metric: must not leak into one
    }
    fields.update(dict(LOAD_SOURCES.values()))
    fields.update(dict(QUEUE_SOURCES.values()))
    fields.update(overrides)
    return metrics_pb2.NodeMetrics(**fields)  # type: ignore[arg-type]


def test_every_metric_comes_from_its_field_in_config_order() -> None:
    assert set(LOAD_SOURCES) == set(LOAD_METRICS) and set(QUEUE_SOURCES) == set(QUEUE_METRICS)
    sample = sample_from_metrics(metrics())
    assert sample.load == tuple(LOAD_SOURCES[m][1] for m in LOAD_METRICS)
    assert sample.queue == tuple(float(QUEUE_SOURCES[m][1]) for m in QUEUE_METRICS)
    assert (sample.node_id, sample.timestamp, sample.interval_s) == (
        "node-1",
        1_700_000_000.25,
        1.0,
    )


@pytest.mark.parametrize(
    ("sent", "kept"),
    [(1_700_000_000.0004, 1_700_000_000.0), (1_700_000_000.0006, 1_700_000_000.001)],
)
def test_timestamps_keep_millisecond_resolution(sent: float, kept: float) -> None:
    assert sample_from_metrics(metrics(timestamp=sent)).timestamp == kept


@pytest.mark.parametrize(
    ("cores", "load_avg_capacity"),
    [(16.0, 16.0), (0.5, 0.5), (0.0, 1.0)],
    ids=["cores", "fraction of a core", "unreported falls back to 1"],
)
def test_capacity_is_one_for_fractions_and_cores_for_load_average(
    cores: float, load_avg_capacity: float
) -> None:
    sample = sample_from_metrics(metrics(cpu_capacity=cores))
    expected = tuple(load_avg_capacity if m == "load_avg_1" else 1.0 for m in LOAD_METRICS)
    assert sample.load_capacity == expected


@pytest.mark.parametrize(
    ("overrides", "cpi", "mpki"),
    [
        ({}, None, None),
        ({"cpi": 1.25, "mpki": 3.5}, 1.25, 3.5),
        ({"cpi": 0.0}, 0.0, None),
        ({"counters_unavailable": "no PMU"}, None, None),
    ],
    ids=["unset", "both", "zero is a value", "unavailable"],
)
def test_counters_are_none_only_when_unset(
    overrides: dict[str, object], cpi: float | None, mpki: float | None
) -> None:
    sample = sample_from_metrics(metrics(**overrides))
    assert (sample.cpi, sample.mpki) == (cpi, mpki)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"schema_version": 0}, "schema_version"),
        ({"schema_version": 2}, "schema_version"),
        ({"node_id": ""}, "node_id"),
        ({"timestamp": -1.0}, "timestamp"),
        ({"timestamp": math.inf}, "timestamp"),
        ({"interval_s": math.nan}, "interval_s"),
        ({"cpu_capacity": -2.0}, "cpu_capacity"),
        ({"cpu_utilization": math.nan}, "cpu_utilization"),
        ({"load_average_1m": -0.5}, "load_average_1m"),
        ({"net_transmit_utilization": math.inf}, "net_transmit_utilization"),
        ({"cpi": math.nan}, "cpi"),
        ({"mpki": -1.0}, "mpki"),
    ],
)
def test_bad_messages_are_refused_naming_the_field(
    overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        sample_from_metrics(metrics(**overrides))


def make(**overrides: object) -> MachineSample:
    fields: dict[str, object] = {
        "node_id": "n",
        "timestamp": 1.0,
        "load": (0.1,) * len(LOAD_METRICS),
        "load_capacity": (1.0,) * len(LOAD_METRICS),
        "queue": (0.0,) * len(QUEUE_METRICS),
        "cpi": None,
        "mpki": None,
        "interval_s": 1.0,
    }
    fields.update(overrides)
    return MachineSample(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"node_id": ""}, "node_id"),
        ({"timestamp": math.nan}, "timestamp"),
        ({"load": (0.1,) * 7}, "load"),
        ({"queue": (0.0,) * 4}, "queue"),
        ({"load_capacity": (1.0,) * 7 + (0.0,)}, "load_capacity"),
        ({"load_capacity": (math.nan,) * 8}, "load_capacity"),
    ],
)
def test_machine_sample_refuses_what_the_windows_cannot_hold(
    overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        make(**overrides)


def test_machine_sample_accepts_nan_readings_as_missing() -> None:
    sample = make(load=(math.nan,) * len(LOAD_METRICS))
    assert all(math.isnan(value) for value in sample.load)
