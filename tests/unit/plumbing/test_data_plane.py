"""DataPlane: validation with one-line errors naming the flag, protobuf round trip, defaults,
the shared command-line flags, and which links are TLS."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from plumbing.data_plane import (
    DEFAULT_METRICS_TOPIC,
    DEFAULT_MQTT_TOPIC_PREFIX,
    DEFAULT_OUTCOMES_TOPIC,
    DataPlane,
    add_arguments,
    from_arguments,
    require_tls_dir,
)
from sluice_pb import common_pb2 as pb

FULL = DataPlane(
    kafka_bootstrap="k1:9092,k2:9093",
    metrics_topic="m.topic",
    outcomes_topic="o.topic",
    mqtt_url="mqtts://broker:8884",
    mqtt_topic_prefix="site/a",
    aggregator_address="agg.local:7070",
    kafka_tls=True,
)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"kafka_bootstrap": "localhost:9092"},
        {"kafka_bootstrap": "k1:9092, k2:9092"},  # spaces after commas are tolerated
        {"kafka_bootstrap": "[::1]:9092"},
        {"kafka_bootstrap": "k:1"},
        {"kafka_bootstrap": "k:65535"},
        {"aggregator_address": "10.0.0.1:50051"},
        {"mqtt_url": "mqtt://localhost"},
        {"mqtt_url": "mqtt://localhost:1883"},
        {"mqtt_url": "mqtts://localhost"},
        {"mqtt_url": "mqtts://localhost:8883"},
        {"kafka_bootstrap": "k:9093", "kafka_tls": True},
        {"metrics_topic": "a.b-c_d"},
        {"mqtt_topic_prefix": "a/b/c"},
    ],
)
def test_valid_values_are_accepted(fields: dict[str, Any]) -> None:
    plane = DataPlane(**fields)
    for name, value in fields.items():
        assert getattr(plane, name) == value


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"kafka_bootstrap": "localhost"}, "--kafka: expected host:port, got 'localhost'"),
        ({"kafka_bootstrap": ":9092"}, "--kafka: expected host:port, got ':9092'"),
        ({"kafka_bootstrap": "k:"}, "--kafka: expected host:port, got 'k:'"),
        ({"kafka_bootstrap": "k:0"}, "--kafka: expected host:port, got 'k:0'"),
        ({"kafka_bootstrap": "k:65536"}, "--kafka: expected host:port, got 'k:65536'"),
        ({"kafka_bootstrap": "k:90x"}, "--kafka: expected host:port, got 'k:90x'"),
        ({"kafka_bootstrap": "k:1,,k:2"}, "--kafka: expected host:port, got ''"),
        ({"kafka_bootstrap": "k:1,bad"}, "--kafka: expected host:port, got 'bad'"),
        ({"aggregator_address": "agg"}, "--aggregator: expected host:port, got 'agg'"),
        ({"aggregator_address": "agg:-1"}, "--aggregator: expected host:port, got 'agg:-1'"),
        (
            {"mqtt_url": "localhost:1883"},
            "--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got "
            "'localhost:1883'",
        ),
        (
            {"mqtt_url": "tcp://b:1883"},
            "--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got 'tcp://b:1883'",
        ),
        (
            {"mqtt_url": "ssl://b:8883"},
            "--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got 'ssl://b:8883'",
        ),
        ({"mqtt_url": "mqtts://"}, "--mqtt: no host in 'mqtts://'"),
        ({"kafka_tls": True}, "--kafka-tls: needs --kafka (the brokers to speak TLS to)"),
        # Job masters parse the URL again when they subscribe: what passes here must pass there.
        ({"mqtt_url": "mqtt://"}, "--mqtt: no host in 'mqtt://'"),
        (
            {"mqtt_url": "mqtt://b:x"},
            "--mqtt: Port could not be cast to integer value as 'x' in 'mqtt://b:x'",
        ),
        ({"mqtt_url": "mqtt://b:1883/x"}, "--mqtt: unexpected path or query in 'mqtt://b:1883/x'"),
        (
            {"metrics_topic": ""},
            "--metrics-topic: must be a non-empty name without spaces, '#' or '+'",
        ),
        (
            {"metrics_topic": "a b"},
            "--metrics-topic: must be a non-empty name without spaces, '#' or '+'",
        ),
        (
            {"outcomes_topic": "a#"},
            "--outcomes-topic: must be a non-empty name without spaces, '#' or '+'",
        ),
        (
            {"mqtt_topic_prefix": "a/+"},
            "--mqtt-topic-prefix: must be a non-empty name without spaces, '#' or '+'",
        ),
    ],
)
def test_invalid_values_raise_one_line_naming_the_flag(fields: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        DataPlane(**fields)


def test_has_kafka_follows_the_bootstrap() -> None:
    assert not DataPlane().has_kafka
    assert DataPlane(kafka_bootstrap="k:1").has_kafka


@pytest.mark.parametrize("plane", [DataPlane(), FULL], ids=["defaults", "everything set"])
def test_protobuf_round_trip(plane: DataPlane) -> None:
    wire = pb.DataPlane.FromString(plane.to_pb().SerializeToString())
    assert DataPlane.from_pb(wire) == plane


def test_an_empty_protobuf_means_no_data_plane_with_default_topics() -> None:
    plane = DataPlane.from_pb(pb.DataPlane())
    assert plane == DataPlane()
    assert (plane.metrics_topic, plane.outcomes_topic, plane.mqtt_topic_prefix) == (
        DEFAULT_METRICS_TOPIC,
        DEFAULT_OUTCOMES_TOPIC,
        DEFAULT_MQTT_TOPIC_PREFIX,
    )
    assert not plane.has_kafka and not plane.mqtt_url and not plane.aggregator_address


def test_from_pb_validates_what_it_receives() -> None:
    with pytest.raises(ValueError, match=r"^--kafka: "):
        DataPlane.from_pb(pb.DataPlane(kafka_bootstrap="nonsense"))


@pytest.mark.parametrize("with_aggregator", [True, False])
def test_flags_parse_into_a_data_plane(with_aggregator: bool) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, with_aggregator=with_aggregator)
    argv = ["--kafka", "k1:9092,k2:9093", "--metrics-topic", "m.topic"]
    argv += ["--outcomes-topic", "o.topic", "--mqtt", "mqtts://broker:8884"]
    argv += ["--mqtt-topic-prefix", "site/a", "--kafka-tls"]
    if with_aggregator:
        argv += ["--aggregator", "agg.local:7070"]
    plane = from_arguments(parser.parse_args(argv))
    expected = FULL if with_aggregator else DataPlane(**{**FULL.__dict__, "aggregator_address": ""})
    assert plane == expected


def test_flag_defaults_are_no_data_plane() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_arguments(parser.parse_args([])) == DataPlane()


@pytest.mark.parametrize(
    ("plane", "kafka_tls", "mqtt_tls"),
    [
        (DataPlane(), False, False),
        (DataPlane(kafka_bootstrap="k:1", mqtt_url="mqtt://m"), False, False),
        (DataPlane(kafka_bootstrap="k:1", kafka_tls=True, mqtt_url="mqtt://m"), True, False),
        (DataPlane(kafka_bootstrap="k:1", mqtt_url="mqtts://m"), False, True),
        (DataPlane(mqtt_url="mqtts://m:1883"), False, True),  # the scheme says it, not the port
        (DataPlane(mqtt_url="mqtt://m:8883"), False, False),
    ],
)
def test_which_links_are_tls(plane: DataPlane, kafka_tls: bool, mqtt_tls: bool) -> None:
    assert (plane.kafka_tls, plane.mqtt_tls) == (kafka_tls, mqtt_tls)


def test_the_tls_setting_travels_to_agents_and_job_masters() -> None:
    wire = pb.DataPlane.FromString(
        DataPlane(kafka_bootstrap="k:1", kafka_tls=True, mqtt_url="mqtts://m")
        .to_pb()
        .SerializeToString()
    )
    assert wire.kafka_tls and wire.mqtt_url == "mqtts://m"
    assert DataPlane.from_pb(wire).kafka_tls and DataPlane.from_pb(wire).mqtt_tls
    assert not DataPlane.from_pb(pb.DataPlane(kafka_bootstrap="k:1")).kafka_tls  # an older RM


@pytest.mark.parametrize(
    ("plane", "error"),
    [
        (DataPlane(), None),
        (DataPlane(kafka_bootstrap="k:1", mqtt_url="mqtt://m"), None),
        (
            DataPlane(kafka_bootstrap="k:1", kafka_tls=True),
            "--kafka-tls: Kafka over TLS needs this daemon's certificate; give --tls-dir (it "
            "runs without TLS)",
        ),
        (
            DataPlane(mqtt_url="mqtts://m:8883"),
            "--mqtt: mqtts://m:8883 is MQTT over TLS and needs this daemon's certificate; give "
            "--tls-dir (it runs without TLS)",
        ),
    ],
)
def test_a_daemon_without_a_certificate_refuses_a_tls_link(
    plane: DataPlane, error: str | None
) -> None:
    require_tls_dir(plane, has_tls_dir=True)  # with one, every plane is fine
    if error is None:
        require_tls_dir(plane, has_tls_dir=False)
    else:
        with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
            require_tls_dir(plane, has_tls_dir=False)
