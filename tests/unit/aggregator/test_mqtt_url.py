"""``--mqtt`` URLs: what the aggregator and the job masters accept, and the one-line refusals."""

from __future__ import annotations

import pytest

from plumbing.mqtt import parse_mqtt_url

GOOD = [
    ("mqtt://localhost:1883", ("localhost", 1883)),
    ("mqtt://broker.example", ("broker.example", 1883)),
    ("mqtt://10.0.0.5:18830", ("10.0.0.5", 18830)),
    ("mqtt://10.0.0.5:18830/", ("10.0.0.5", 18830)),
    ("mqtt://[::1]:1884", ("::1", 1884)),
    ("mqtt://[::1]", ("::1", 1883)),
    ("mqtt://host:65535", ("host", 65535)),
]

BAD = [
    ("", "expected mqtt://"),
    ("localhost:1883", "expected mqtt://"),
    ("tcp://localhost:1883", "expected mqtt://"),
    ("mqtts://localhost:8883", "expected mqtt://"),
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
