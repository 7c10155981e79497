"""The InfluxDB point schema of a MachineSample, and the way back (no server needed)."""

from __future__ import annotations

import math

import pytest

from aggregator.influx_store import point_sample, sample_point
from aggregator.samples import MachineSample, sample_from_metrics
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from sluice_pb import metrics_pb2


def sample(**overrides: object) -> MachineSample:
    fields: dict[str, object] = {
        "node_id": "rack1 node=2,x",  # characters line protocol must escape in a tag
        "timestamp": 1_700_000_000.123,
        "load": tuple(0.1 * (j + 1) for j in range(len(LOAD_METRICS))),
        "load_capacity": tuple(24.0 if m == "load_avg_1" else 1.0 for m in LOAD_METRICS),
        "queue": (3.0, 0.0, 1.0),
        "cpi": 1.5,
        "mpki": None,
        "interval_s": 1.0,
    }
    fields.update(overrides)
    return MachineSample(**fields)  # type: ignore[arg-type]


def test_point_schema() -> None:
    point = sample_point(sample(), "node_metrics")
    assert point["measurement"] == "node_metrics"
    assert point["tags"] == {"node": "rack1 node=2,x"}
    assert point["time"] == 1_700_000_000_123
    expected = {
        *LOAD_METRICS,
        *QUEUE_METRICS,
        *(f"{m}_capacity" for m in LOAD_METRICS),
        "interval_s",
        "cpi",  # mpki is None: not written at all
    }
    assert set(point["fields"]) == expected
    assert all(type(v) is float for v in point["fields"].values())  # one type per field, ever
    assert point["fields"]["load_avg_1_capacity"] == 24.0


@pytest.mark.parametrize(
    ("overrides", "absent"),
    [
        ({"cpi": None, "mpki": None}, {"cpi", "mpki"}),
        ({"mpki": 0.0}, set()),  # zero is a reading
        ({"load": (math.nan,) + (0.1,) * 7}, {"cpu_ut", "mpki"}),
        ({"interval_s": math.inf}, {"interval_s", "mpki"}),
    ],
)
def test_missing_and_non_finite_figures_are_left_out(
    overrides: dict[str, object], absent: set[str]
) -> None:
    fields = sample_point(sample(**overrides), "m")["fields"]
    assert {"cpi", "mpki", "cpu_ut", "interval_s"} - set(fields) == absent


@pytest.mark.parametrize(
    "overrides", [{}, {"cpi": None}, {"mpki": 2.0}, {"load_capacity": (1.0,) * 8}]
)
def test_a_point_read_back_is_the_same_sample(overrides: dict[str, object]) -> None:
    original = sample(**overrides)
    row = dict(sample_point(original, "m")["fields"], time=sample_point(original, "m")["time"])
    assert point_sample(original.node_id, row) == original


def test_a_kafka_sample_survives_the_millisecond_round_trip() -> None:
    message = metrics_pb2.NodeMetrics(
        schema_version=1, node_id="n", timestamp=1_700_000_000.123456, cpu_capacity=4.0
    )
    original = sample_from_metrics(message)
    point = sample_point(original, "m")
    assert point_sample("n", dict(point["fields"], time=point["time"])) == original


def test_fields_a_point_lacks_read_as_missing() -> None:
    restored = point_sample("n", {"time": 5000, "cpu_ut": 0.5})
    assert restored.timestamp == 5.0 and restored.load[0] == 0.5
    assert all(math.isnan(v) for v in restored.load[1:] + restored.queue)
    assert restored.load_capacity == (1.0,) * len(LOAD_METRICS)
    assert restored.cpi is None and restored.mpki is None
