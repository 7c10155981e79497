"""The agent's part of preemption, without a kernel: graceful steps, and reading swap from the
cgroup files (recorded on this machine: cgroup v1 with swap accounting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.preemption import machine_has_swap, next_step, swap_bytes_v1, swap_bytes_v2
from tests.builders import res as R  # noqa: N812 - reads as a vector in the tables

# /sys/fs/cgroup/memory/<task>/memory.stat, cut short (the order and names are the kernel's)
V1_MEMORY_STAT = """\
cache 9527296
rss 4145152
rss_huge 0
shmem 9166848
mapped_file 7110656
dirty 86016
writeback 0
workingset_refault_anon 0
workingset_refault_file 5494
swap 123731968
swapcached 0
pgpgin 78107
pgmajfault 0
hierarchical_memory_limit 9223372036854771712
hierarchical_memsw_limit 9223372036854771712
total_swap 123731968
"""


@pytest.mark.parametrize(
    ("current", "target", "step", "expected"),
    [
        (R(4, 8192), R(0.5, 1024), R(2, 4096), R(2, 4096)),  # one step of r_GP
        (R(2, 4096), R(0.5, 1024), R(2, 4096), R(0.5, 1024)),  # never below the target
        (R(1, 1024), R(1, 512), R(2, 4096), R(1, 512)),  # only what differs moves
        (R(1, 512), R(2, 1024), R(0.5, 128), R(2, 1024)),  # growing back: at once
        (R(4, 8192), R(1, 1024), R(0, 4096), R(4, 4096)),  # a step of no CPU keeps it
    ],
)
def test_a_graceful_round_takes_at_most_one_step(current, target, step, expected):
    assert next_step(current, target, step) == expected


def test_rounds_reach_the_target_and_stop_there():
    limits, rounds = R(4, 8192), 0
    while limits != R(0.01, 64):
        limits = next_step(limits, R(0.01, 64), R(2, 4096))
        rounds += 1
    assert rounds == 2


def test_swap_of_a_v1_cgroup_is_its_own_swap_line():
    assert swap_bytes_v1(V1_MEMORY_STAT) == 123731968
    assert swap_bytes_v1("cache 1\nrss 2\n") is None  # no swap accounting: cannot tell


@pytest.mark.parametrize(("text", "expected"), [("4096\n", 4096), ("max\n", None), ("", None)])
def test_swap_of_a_v2_cgroup(text, expected):
    assert swap_bytes_v2(text) == expected


@pytest.mark.parametrize(
    ("proc_swaps", "expected"),
    [
        ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n", False),
        (
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
            "/var/tmp/x.swap                         file\t\t1048572\t\t0\t\t-2\n",
            True,
        ),
    ],
)
def test_whether_the_machine_has_swap(tmp_path: Path, proc_swaps: str, expected: bool):
    path = tmp_path / "swaps"
    path.write_text(proc_swaps)
    assert machine_has_swap(path) is expected
    assert machine_has_swap(tmp_path / "missing") is False
