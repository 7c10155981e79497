"""``--mqtt`` URLs: what the aggregator and the job masters accept (``mqtt://`` plaintext,
``mqtts://`` TLS), and the one-line refusals."""

from __future__ import annotations

import pytest

from plumbing.mqtt import MqttBroker, parse_mqtt_broker, parse_mqtt_url

GOOD = [
    ("mqtt://localhost:1883", ("localhost", 1883)),
    ("mqtt://broker.example", ("broker.example", 1883)),
    ("mqtt://10.0.0.5:18830", ("10.0.0.5", 18830)),
    ("mqtt://10.0.0.5:18830/", ("10.0.0.5", 18830)),
    ("mqtt://[::1]:1884", ("::1", 1884)),
    ("mqtt://[::1]", ("::1", 1883)),
    ("mqtt://host:65535", ("host", 65535)),
    ("mqtts://localhost:8884", ("localhost", 8884)),
    ("mqtts://broker.example", ("broker.example", 8883)),
    ("mqtts://[::1]", ("::1", 8883)),
]

BAD = [
    ("", "expected mqtt://"),
    ("localhost:1883", "expected mqtt://"),
    ("tcp://localhost:1883", "expected mqtt://"),
    ("ssl://localhost:8883", "or mqtts://"),
    ("MQTTS+ws://localhost:8883", "expected mqtt://"),
    ("mqtts://", "no host"),
    ("mqtts://host:", "empty port"),
    ("mqtts://user@host", "credentials"),
    ("mqtt://", "no host"),
    ("mqtt://:1883", "no host"),
    ("mqtt://host:", "empty port"),
    ("mqtt://host:0", "port 0"),
    ("mqtt://host:65536", "out of range"),
    ("mqtt://host:abc", "abc"),
    ("mqtt://user:secret@host", "credentials"),
    ("mqtt://host/sluice", "path or query"),
    ("mqtt://host?x=1", "path or query"),
]


@pytest.mark.parametrize(("url", "expected"), GOOD)
def test_accepts(url: str, expected: tuple[str, int]) -> None:
    assert parse_mqtt_url(url) == expected


@pytest.mark.parametrize(("url", "problem"), BAD)
def test_refuses_naming_the_flag_and_the_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=r"^--mqtt: ") as raised:
        parse_mqtt_url(url)
    assert problem in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://b", MqttBroker("b", 1883, tls=False)),
        ("mqtt://b:8883", MqttBroker("b", 8883, tls=False)),  # the scheme says TLS, not the port
        ("mqtts://b", MqttBroker("b", 8883, tls=True)),
        ("mqtts://b:1883", MqttBroker("b", 1883, tls=True)),
        ("MQTTS://B:9", MqttBroker("b", 9, tls=True)),  # schemes and hosts are case-blind
    ],
)
def test_the_scheme_says_whether_the_link_is_tls(url: str, expected: MqttBroker) -> None:
    assert parse_mqtt_broker(url) == expected
    assert parse_mqtt_url(url) == (expected.host, expected.port)
