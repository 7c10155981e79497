"""perf's ``-G`` name of a task's cgroup: its path below the cgroup2 mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.metrics.reporter import cgroup2_name

HYBRID = """\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,nodev,noexec,relatime,cpu 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


@pytest.mark.parametrize(
    ("mounts", "directory", "expected"),
    [
        (UNIFIED, "/sys/fs/cgroup/sluice/node-1/job.t.1", "sluice/node-1/job.t.1"),
        (HYBRID, "/sys/fs/cgroup/unified/sluice/n/t", "sluice/n/t"),
        (HYBRID, "/sys/fs/cgroup/cpu/sluice/n/t", None),  # v1: perf needs the perf_event tree
        (UNIFIED, "/sys/fs/cgroup", None),  # the root is not a task's cgroup
        ("", "/sys/fs/cgroup/sluice/n/t", None),
    ],
)
def test_cgroup2_name(tmp_path: Path, mounts: str, directory: str, expected: str | None) -> None:
    table = tmp_path / "mounts"
    table.write_text(mounts)
    assert cgroup2_name(Path(directory), table) == expected


def test_unreadable_mount_table_means_no_name(tmp_path: Path) -> None:
    assert cgroup2_name(Path("/sys/fs/cgroup/x"), tmp_path / "missing") is None
