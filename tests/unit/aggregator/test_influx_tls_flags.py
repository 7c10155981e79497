"""``--influx-url`` and the aggregator's TLS: https needs ``--tls-dir``; http beside one is
logged as the one plaintext link."""

from __future__ import annotations

import argparse
import logging

import pytest

from aggregator import daemon
from aggregator.influx_store import parse_influx_url
from plumbing.errors import UserError


def test_an_https_url_is_refused_to_an_insecure_aggregator_in_one_line() -> None:
    parser = argparse.ArgumentParser()
    daemon.add_arguments(parser)
    args = parser.parse_args(
        ["--kafka", "127.0.0.1:9", "--insecure", "--influx-url", "https://influxdb:8087/sluice"]
    )
    with pytest.raises(UserError) as refused:
        daemon.run(args)
    assert str(refused.value) == (
        "--influx-url: https://influxdb:8087/sluice is InfluxDB over TLS and needs this "
        "daemon's certificate; give --tls-dir (it runs without TLS)"
    )


@pytest.mark.parametrize(
    ("url", "has_tls_dir", "warned"),
    [
        ("http://influxdb:8086/sluice", True, True),  # every other link is TLS: say so
        ("http://influxdb:8086/sluice", False, False),  # --insecure warns of everything already
        ("https://influxdb:8087/sluice", True, False),
    ],
)
def test_plaintext_influxdb_beside_tls_is_a_warning_not_a_refusal(
    caplog: pytest.LogCaptureFixture, url: str, has_tls_dir: bool, warned: bool
) -> None:
    caplog.set_level(logging.WARNING, logger=daemon.log.name)
    daemon._check_influx_tls(parse_influx_url(url), has_tls_dir)
    lines = [r.getMessage() for r in caplog.records if r.name == daemon.log.name]
    if warned:
        (line,) = lines
        assert line.startswith(f"--influx-url: {url} is plaintext") and "\n" not in line
    else:
        assert lines == []
