"""--influx-url parsing."""

from __future__ import annotations

import pytest

from aggregator.influx_store import InfluxTarget, parse_influx_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://db.example:8086", InfluxTarget("db.example", 8086)),
        ("https://db.example:8086/", InfluxTarget("db.example", 8086, ssl=True)),
        ("http://127.0.0.1:9999/metrics", InfluxTarget("127.0.0.1", 9999, "metrics")),
        (
            "http://ops:s%40cret@h:1/m",
            InfluxTarget("h", 1, "m", username="ops", password="s@cret"),
        ),
        ("http://[::1]:8086/x", InfluxTarget("::1", 8086, "x")),
    ],
)
def test_influx_urls(url: str, expected: InfluxTarget) -> None:
    assert parse_influx_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "db.example:8086",
        "udp://db.example:8086",
        "http://db.example",
        "http://:8086/x",
        "http://db.example:notaport",
        "http://db.example:70000",
        "http://db.example:8086/a/b",
        "http://db.example:8086/a?precision=s",
        "http://:pw@db.example:8086",
    ],
)
def test_bad_influx_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"^--influx-url: "):
        parse_influx_url(url)


def test_password_is_not_in_the_repr() -> None:
    target = parse_influx_url("http://ops:hunter2@h:1/m")
    assert "hunter2" not in repr(target) and "hunter2" not in target.url
