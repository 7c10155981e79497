"""A daemon asked for a TLS data plane (``--kafka-tls``, an ``mqtts://`` URL) without a
certificate of its own refuses to start, in one line naming the flag, before it starts anything:
it could join that link neither with a certificate nor, safely, in plaintext."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

AGENT = ["agent", "--rm", "r:1", "--node-id", "node-1", "--state-dir", "{tmp}/agent"]
REFUSALS = [
    (
        ["rm", "--kafka", "k:9093", "--kafka-tls", "--insecure", "--state-dir", "{tmp}/rm"],
        "--kafka-tls: Kafka over TLS needs this daemon's certificate; give --tls-dir",
    ),
    (
        ["rm", "--kafka", "k:9093", "--mqtt", "mqtts://m", "--insecure", "--state-dir", "{tmp}/rm"],
        "--mqtt: mqtts://m is MQTT over TLS and needs this daemon's certificate",
    ),
    (
        ["aggregator", "--kafka", "k:9093", "--kafka-tls", "--insecure"],
        "--kafka-tls: Kafka over TLS needs this daemon's certificate; give --tls-dir",
    ),
    (
        ["aggregator", "--kafka", "k:9093", "--mqtt", "mqtts://m:8884", "--insecure"],
        "--mqtt: mqtts://m:8884 is MQTT over TLS and needs this daemon's certificate",
    ),
    (
        ["aggregator", "--kafka-tls", "--insecure"],
        "--kafka-tls: needs --kafka",
    ),
    (
        [*AGENT, "--kafka", "k:9093", "--kafka-tls", "--insecure"],
        "--kafka-tls: Kafka over TLS needs this daemon's certificate; give --tls-dir",
    ),
    (
        [*AGENT, "--kafka-tls", "--insecure"],
        "--kafka-tls: needs --kafka",
    ),
    (
        ["local", "up", "--dir", "{tmp}/local", "--kafka-tls"],
        "--kafka-tls: needs --kafka",
    ),
    (
        ["local", "up", "--dir", "{tmp}/local", "--mqtt", "mqtts://m", "--insecure"],
        "--insecure: a data plane over TLS (--kafka-tls, mqtts://) needs the cluster's "
        "certificates",
    ),
    (
        ["local", "up", "--dir", "{tmp}/local", "--mqtt", "mqtt+tls://m"],
        "--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got 'mqtt+tls://m'",
    ),
]


@pytest.mark.parametrize(("argv", "message"), REFUSALS, ids=[" ".join(a[:3]) for a, _ in REFUSALS])
def test_refused_in_one_line_naming_the_flag(tmp_path: Path, argv: list[str], message: str) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("sluice: error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    # Refused before starting anything: no state written, no cluster started.
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())
