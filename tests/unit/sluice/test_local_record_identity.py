"""`sluice local` records each daemon it spawns with its identity (sluice.process_identity), and
judges a recorded pid later by it: a daemon just spawned must be recorded as itself.  Right after
``Popen`` returns, the child's command line may not be published yet (an empty
``/proc/PID/cmdline``), and a record made then judged the daemon another process: `local down`
left it running and `local status` called it down."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from sluice import local_cluster

# Old code recorded an empty command line for about a quarter of `sleep`s (cheap to spawn).
SPAWNS = 200


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


def test_a_daemon_recorded_as_it_is_spawned_is_judged_itself(
    children: list[subprocess.Popen[bytes]],
) -> None:
    argv = ["sleep", "60"]
    for _ in range(SPAWNS):
        child = subprocess.Popen(argv, start_new_session=True)
        children.append(child)
        record = local_cluster._record_pid({}, "pid", child)
        assert record["identity"]["cmdline"] == argv  # type: ignore[index]
        recorded = local_cluster._recorded_process(record, "child", "pid", argv)
        assert local_cluster._still_ours(recorded)
        child.kill()
        child.wait()


def test_a_child_that_already_exited_is_recorded_as_nobody() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    record = local_cluster._record_pid({}, "pid", child)
    recorded = local_cluster._recorded_process(record, "child", "pid", [sys.executable])
    assert not local_cluster._still_ours(recorded)
