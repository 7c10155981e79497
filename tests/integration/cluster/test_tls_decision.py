"""No daemon starts without a TLS decision: given neither --tls-dir ($SLUICE_TLS_DIR) nor
--insecure, each refuses in one line naming both flags, exit status 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# (daemon, its command line less the TLS flags; STATE is a fresh directory)
DAEMONS = [
    ("rm", ["-m", "sluice", "rm", "--listen", "127.0.0.1:0", "--state-dir", "STATE"]),
    (
        "agent",
        ["-m", "sluice", "agent", "--rm", "127.0.0.1:1", "--node-id", "n1", "--state-dir", "STATE"],
    ),
    ("aggregator", ["-m", "sluice", "aggregator", "--listen", "127.0.0.1:0", "--kafka", "x:1"]),
]


def _run(argv: list[str], state: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "SLUICE_TLS_DIR"}
    return subprocess.run(
        [sys.executable, *(str(state) if a == "STATE" else a for a in argv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environment,
    )


@pytest.mark.parametrize(("daemon", "argv"), DAEMONS, ids=[d for d, _ in DAEMONS])
def test_a_daemon_without_a_decision_refuses_in_one_line(
    tmp_path: Path, daemon: str, argv: list[str]
):
    result = _run(argv, tmp_path / "state")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "error" in x]
    assert line.startswith("sluice: error: --tls-dir or --insecure: one is required"), line
    assert f"sluice ca issue --role {daemon}" in line


def test_a_job_master_without_a_decision_refuses():
    result = _run(["-m", "job_master", "--rm", "127.0.0.1:1", "--job", "job-1"], Path())
    assert result.returncode == 2
    assert "one of the arguments --tls-dir --insecure is required" in result.stderr
    assert "Traceback" not in result.stderr
