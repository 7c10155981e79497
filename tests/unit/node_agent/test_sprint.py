"""Sprinting on the node: cpufreq detection on a recorded sysfs tree, DVFS raise and restore,
and the CPU-quota sprint's arithmetic (idle cores only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.cpufreq import Dvfs, detect
from node_agent.sprint import sprinted_cpu


def cpufreq_tree(root: Path, cpus: int, *, writable: bool = True) -> Path:
    """A sysfs tree as an Intel machine with cpufreq shows it (values in kHz)."""
    for cpu in range(cpus):
        freq = root / f"cpu{cpu}" / "cpufreq"
        freq.mkdir(parents=True)
        (freq / "cpuinfo_max_freq").write_text("2400000\n")
        (freq / "cpuinfo_min_freq").write_text("800000\n")
        scaling = freq / "scaling_max_freq"
        scaling.write_text("800000\n")
        if not writable:
            scaling.chmod(0o444)
    (root / "cpufreq").mkdir()  # the policy directory: no cpu number, ignored
    return root


def test_detect_finds_each_cpu_with_a_writable_scaling_max(tmp_path: Path) -> None:
    found = detect(cpufreq_tree(tmp_path, 2))
    assert found.available
    assert [(c.cpu, c.hardware_max_khz) for c in found.cpus] == [(0, 2400000), (1, 2400000)]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda root: root.mkdir(exist_ok=True), "no cpufreq interface"),
        (lambda root: (root / "cpu0").mkdir(parents=True), "no cpufreq interface"),
        (lambda root: None, "does not exist"),
    ],
)
def test_without_cpufreq_detection_says_why(tmp_path: Path, make: object, reason: str) -> None:
    root = tmp_path / "cpu"
    make(root)  # type: ignore[operator]
    found = detect(root)
    assert not found.available and reason in found.reason


def test_this_machine_either_has_cpufreq_or_says_why_not() -> None:
    found = detect()  # (these machines have none: the agent sprints by CPU quota)
    assert found.available or found.reason


def test_dvfs_raises_every_cpu_to_its_maximum_and_restores_what_it_found(tmp_path: Path) -> None:
    root = cpufreq_tree(tmp_path, 2)
    dvfs = Dvfs(detect(root))
    dvfs.raise_clock()
    assert (root / "cpu1/cpufreq/scaling_max_freq").read_text() == "2400000"
    dvfs.restore_clock()
    assert (root / "cpu1/cpufreq/scaling_max_freq").read_text() == "800000"


@pytest.mark.parametrize(
    ("grant", "factor", "idle", "cpu"),
    [
        (1.0, 2.0, 4.0, 2.0),  # room enough: grant times the factor
        (1.0, 2.0, 0.5, 1.5),  # only the idle half core
        (1.0, 2.0, 0.0, 1.0),  # nothing idle: no more than the grant
        (1.0, 2.0, -1.0, 1.0),  # over-committed: never below the grant
    ],
)
def test_a_quota_sprint_takes_idle_cpu_only(grant: float, factor: float, idle: float, cpu: float):
    assert sprinted_cpu(grant, factor, idle) == cpu


# The sprint decisions (quota arithmetic, DVFS clock, refit, a refused sprint): test_core.py.
