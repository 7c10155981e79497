"""``sluice local down`` signals a recorded pid only while it is still the recorded daemon
(issue 35, item 4).

A daemon that crashed leaves its pid in ``cluster.json``, and the kernel hands the pid to the
next process.  Pid reuse cannot be forced, so the test does what it amounts to: it kills two
daemons and records, in their place, the pids of two ``sleep`` processes of its own; one record
keeps the dead daemon's identity (start time, boot, command line: what a reused pid looks like
now), the other has none (a cluster recorded before identities were: the command line decides).
``down`` must leave both ``sleep`` processes alive, say so, and stop everything else.

Real processes: a local cluster (TLS on, embedded brokers) and the CLI as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice import local_cluster
from sluice.process_identity import ProcessIdentity, Verdict, judge, read_identity

from .harness import Cluster, start_cluster, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path / "cluster", "process", nodes=1)
    try:
        yield cluster
    finally:
        cluster.close()
        if (cluster.directory / "cluster.json").exists():  # the test failed before `down`
            local_cluster.down(cluster.directory, lambda _: None)


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Unrelated processes whose pids the test records as the cluster's (``sleep``)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _still_running(record: dict[str, Any], pid_key: str = "pid") -> bool:
    """Whether the daemon ``record`` names still runs (by its recorded identity)."""
    identity = ProcessIdentity.from_record(record[pid_key.removesuffix("pid") + "identity"])
    assert identity is not None, f"no identity recorded beside {pid_key}: {record}"
    pid = int(record[pid_key])
    return judge(pid, identity, [], read_identity(pid)) is Verdict.OURS


def test_down_leaves_a_pid_that_another_process_has_now_and_stops_the_rest(
    cluster: Cluster, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    path = cluster.directory / "cluster.json"
    info: dict[str, Any] = json.loads(path.read_text())
    services = {s["name"]: s for s in info["services"]}
    aggregator, kafka = services["aggregator"], services["kafka"]
    for daemon in (aggregator, kafka):  # the daemon crashes...
        cluster.kill_process(int(daemon["pid"]))
    for _ in range(2):  # ...and another process gets its pid
        sleepers.append(subprocess.Popen(["sleep", "300"], start_new_session=True))
    reused, unrecorded = sleepers
    # Reuse as it looks now: the pid is the sleeper's, the identity is still the aggregator's.
    aggregator["pid"] = aggregator.setdefault("identity", {})["pid"] = reused.pid
    # A record from before identities: the pid alone, and the command line that started it.
    kafka["pid"] = unrecorded.pid
    kafka.pop("identity", None)
    path.write_text(json.dumps(info))

    result = subprocess.run(
        [sys.executable, "-m", "sluice", "local", "down", "--dir", str(cluster.directory)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert reused.poll() is None and unrecorded.poll() is None, said
    assert (
        f"the aggregator (pid {reused.pid}) is gone; pid now belongs to another process: "
        "not signalled"
    ) in said
    assert f"the kafka broker (pid {unrecorded.pid}): no start time recorded" in said
    assert (
        f"the kafka broker (pid {unrecorded.pid}) is gone; pid now belongs to another process: "
        "not signalled"
    ) in said
    # Everything else was stopped: the agent, the RM and the MQTT broker.
    rest = [(n, "pid") for n in info["nodes"]] + [(info, "rm_pid"), (services["mqtt"], "pid")]
    wait_until(
        lambda: not any(_still_running(record, key) for record, key in rest),
        30,
        "every other daemon stopped",
    )
    assert not path.exists(), said
