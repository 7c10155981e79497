"""A new operator's first commands on a local cluster (issue 28 section 2): `local up` says each
daemon as it starts and as it is ready, and starts those that do not wait on each other
together; `local status` and `local down` where nothing runs say so and exit 0; `logs -f`
follows a task's output until it ends; `jobs --watch` ends on Ctrl-C with status 0; a resize
with one limit keeps the other.

Real processes: a local cluster (TLS on, embedded brokers), the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice import local_cluster
from sluice.client import RMClient, cluster_client_tls

from .harness import Cluster, Gate, job_spec, phase, wait_until

PATIENCE = 120.0  # a bound on waiting on a loaded machine, never a measurement


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, list[str]]]:
    """A two-node cluster, and what `local up` said while starting it."""
    directory = tmp_path_factory.mktemp("local-cli")
    said: list[str] = []
    info = local_cluster.up(
        local_cluster.LocalClusterSpec(
            directory=directory, nodes=2, cpus_per_node=2.0, memory_mb_per_node=2048
        ),
        said.append,
    )
    cluster = Cluster(
        directory,
        "process",
        dict(info),
        RMClient.connect(str(info["rm"]), cluster_client_tls(info)),
    )
    try:
        yield cluster, said
    finally:
        cluster.close()
        local_cluster.down(directory, lambda _: None)


def _sluice(directory: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *argv, "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _index(lines: list[str], start: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(start)]
    assert found, f"no line starting {start!r} in:\n" + "\n".join(lines)
    return found[0]


# ---------------------------------------------------------------------------- local up


def test_up_says_each_daemon_as_it_starts_and_as_it_is_ready(
    started: tuple[Cluster, list[str]],
) -> None:
    _, said = started
    for starting, ready in [
        ("starting the embedded Kafka-protocol broker", "kafka ready at "),
        ("starting the embedded MQTT broker", "mqtt ready at "),
        ("starting the aggregator at ", "the aggregator ready at "),
        ("starting the resource manager", "the resource manager ready at "),
        ("starting 2 node agents", "agent node-1 ready at "),
        ("starting 2 node agents", "agent node-2 ready at "),
        ("agent node-1 ready at ", "node-1 registered with the resource manager"),
        ("agent node-2 ready at ", "node-2 registered with the resource manager"),
    ]:
        assert _index(said, starting) < _index(said, ready), said
    assert said[-1].startswith("2 nodes registered"), said


def test_up_starts_what_does_not_wait_on_another_together(
    started: tuple[Cluster, list[str]],
) -> None:
    """Each is started before what it does not need is waited for: the RM before the brokers
    or the aggregator (which it only names) are ready, the aggregator before the RM is ready
    unless the RM was first, and node-2's agent before node-1's is ready."""
    _, said = started
    rm_started = _index(said, "starting the resource manager")
    for ready in ("kafka ready", "mqtt ready", "the aggregator ready"):
        assert rm_started < _index(said, ready), said
    assert _index(said, "starting the aggregator") < _index(said, "the aggregator ready"), said
    assert _index(said, "starting 2 node agents") < _index(said, "agent node-1 ready"), said


# ---------------------------------------------------------------------------- nothing running


@pytest.mark.parametrize("action", ["status", "down"])
def test_status_and_down_where_there_is_no_cluster_say_so_and_exit_0(
    tmp_path: Path, action: str
) -> None:
    result = _sluice(tmp_path, "local", action)
    assert result.returncode == 0, result.stderr
    assert f"no local cluster in {tmp_path}" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_status_and_down_of_a_cluster_whose_processes_all_ended_say_so_and_exit_0(
    tmp_path: Path,
) -> None:
    """A cluster.json left by a cluster whose daemons are gone (the machine rebooted, or they
    were killed): status says stopped, down cleans up and says the cluster was not running."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    record = local_cluster._record_pid(
        {"rm": "127.0.0.1:1", "rm_argv": [sys.executable], "nodes": [], "services": []},
        "rm_pid",
        ended,
    )
    (tmp_path / "cluster.json").write_text(json.dumps(record))
    status = _sluice(tmp_path, "local", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "stopped" in status.stdout
    down = _sluice(tmp_path, "local", "down")
    assert down.returncode == 0, down.stderr
    assert "was not running" in down.stderr
    assert not (tmp_path / "cluster.json").exists()
    again = _sluice(tmp_path, "local", "down")
    assert again.returncode == 0 and "nothing to stop" in again.stderr


# ---------------------------------------------------------------------------- logs -f, watch


def test_logs_follow_prints_output_as_it_is_written_until_the_task_ends(
    started: tuple[Cluster, list[str]], gate: Gate
) -> None:
    cluster, _ = started
    script = f"echo first; {gate.hold('echo second')}"
    job_id = gate.kill_on_close(
        cluster, cluster.submit(job_spec("follow", [phase("p", 1, script)]))
    )
    cluster.wait_task_running(job_id, "p-0", PATIENCE)
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "logs",
            "-f",
            job_id,
            "p-0",
            "--dir",
            str(cluster.directory),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(lambda: "first\n" in lines, PATIENCE, "the first line, while the task runs")
        assert follower.poll() is None  # still following: the task has not ended
        gate.open(cluster, job_id, ["p-0"])
        assert follower.wait(PATIENCE) == 0, follower.stderr.read() if follower.stderr else ""
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    reader.join(10)
    assert lines == ["first\n", "second\n"]


def test_jobs_watch_redraws_until_ctrl_c_and_exits_0(started: tuple[Cluster, list[str]]) -> None:
    cluster, _ = started
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "jobs",
            "--watch",
            "--interval",
            "0.2",
            "--dir",
            str(cluster.directory),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(watcher.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: sum(line.startswith("sluice jobs every") for line in lines) >= 2,
            PATIENCE,
            "two rounds of the table",
        )
        os.kill(watcher.pid, signal.SIGINT)  # Ctrl-C
        assert watcher.wait(PATIENCE) == 0
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert "Traceback" not in (watcher.stderr.read() if watcher.stderr else "")
    assert any(line.startswith("JOB") for line in lines)


# ---------------------------------------------------------------------------- resize


@pytest.mark.parametrize(
    ("flags", "expected"),
    [(["--cpu", "0.5"], (0.5, 256)), (["--memory-mb", "128"], (1.0, 128))],
    ids=["cpu only", "memory only"],
)
def test_a_resize_with_one_limit_keeps_the_other(
    started: tuple[Cluster, list[str]], gate: Gate, flags: list[str], expected: tuple[float, int]
) -> None:
    cluster, _ = started
    spec = job_spec("resize", [phase("p", 1, gate.hold("true"), cpu=1.0, mem=256)])
    job_id = gate.kill_on_close(cluster, cluster.submit(spec))
    cluster.wait_task_running(job_id, "p-0", PATIENCE)
    try:
        result = _sluice(cluster.directory, "task", "resize", job_id, "p-0", *flags)
        assert result.returncode == 0, result.stderr
        cpu, memory = expected
        assert f"at {cpu:g} cpu, {memory} MiB" in result.stdout, result.stdout
    finally:
        gate.open(cluster, job_id, ["p-0"])
