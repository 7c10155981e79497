"""Queues on a real RM: `sluice rm --queues`, `sluice queues`, SIGHUP reloads, and refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from sluice import local_cluster
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, start_cluster, wait_until

pytestmark = pytest.mark.integration


def write_queues(path: Path, long_share: float, mode: str = "graceful") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "default": "long",
                "queues": {
                    "short": {"share": round(1 - long_share, 6)},
                    "long": {"share": long_share, "mode": mode},
                },
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    directory = tmp_path_factory.mktemp("queues")
    queues = write_queues(directory / "queues.yaml", 0.05)
    running = start_cluster(directory / "cluster", "process", 1, queues=queues)
    try:
        yield running, queues
    finally:
        running.close()
        local_cluster.down(directory / "cluster", lambda _: None)


def sluice(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", "--dir", str(cluster.directory), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def shares(cluster: Cluster) -> dict[str, float]:
    listing = cluster.client.jobs.ListQueues(rm_pb.ListQueuesRequest(), timeout=10)
    return {q.name: round(q.share, 6) for q in listing.queues}


def rm_log(cluster: Cluster) -> str:
    return (cluster.directory / "logs" / "rm.log").read_text()


def test_sluice_queues_shows_each_queue_from_the_file(cluster: tuple[Cluster, Path]) -> None:
    running, queues = cluster
    done = sluice(running, "queues", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    rows = {q["name"]: q for q in listing["queues"]}
    assert set(rows) == {"short", "long"}
    assert rows["long"]["mode"] == "graceful" and rows["long"]["is_default"] is True
    assert listing["source"] == str(queues.resolve())
    table = sluice(running, "queues")
    assert table.returncode == 0 and "long *" in table.stdout and "graceful" in table.stdout


def test_a_sighup_reloads_a_valid_file_and_keeps_the_queues_on_an_invalid_one(
    cluster: tuple[Cluster, Path],
) -> None:
    running, queues = cluster
    pid = int(running.info["rm_pid"])
    write_queues(queues, 0.2)
    os.kill(pid, signal.SIGHUP)
    wait_until(lambda: shares(running) == {"short": 0.8, "long": 0.2}, 60, "queues reloaded")
    queues.write_text("queues:\n  long: {share: 7}\n")
    os.kill(pid, signal.SIGHUP)
    wait_until(lambda: "queue reload refused" in rm_log(running), 60, "the refusal logged")
    assert "queues.long.share: must be a number in [0, 1], got 7" in rm_log(running)
    assert shares(running) == {"short": 0.8, "long": 0.2}
    write_queues(queues, 0.05)
    os.kill(pid, signal.SIGHUP)
    wait_until(lambda: shares(running) == {"short": 0.95, "long": 0.05}, 60, "queues back")


def test_a_job_naming_an_unknown_queue_is_refused_in_one_line(
    cluster: tuple[Cluster, Path],
) -> None:
    running, _ = cluster
    spec = yaml.safe_dump(
        {
            "name": "x",
            "queue": "batch",
            "phases": [
                {
                    "name": "p",
                    "tasks": 1,
                    "command": ["true"],
                    "resources": {"cpu": 0.1, "memory_mb": 16},
                }
            ],
        }
    )
    with pytest.raises(grpc.RpcError) as caught:
        running.submit(spec)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (
        caught.value.details() == "queue: unknown queue 'batch' (queues: long, short)"
    )  # the file's order


def test_an_invalid_queue_file_stops_the_rm_at_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text("queues:\n  long: {share: 0.5, mode: pause}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice",
            "rm",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(tmp_path / "rm"),
            "--queues",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].endswith(
        f"--queues: {bad}: queues.long.mode: must be kill, immediate, graceful or none, got 'pause'"
    )
    assert "Traceback" not in done.stderr
