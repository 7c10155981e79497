"""DVFS through Linux's cpufreq interface: the sprint mechanism DiAS used (Sec. 5.1: the clock
raised from 800 MHz to 2.4 GHz with ``cpupower``).

:func:`detect` finds the CPUs whose ``cpufreq/scaling_max_freq`` can be written and whose
``cpuinfo_max_freq`` is above it; :class:`Dvfs` raises every one of them to its hardware maximum
and later restores what it found.  The paper sprints all cores at once; so does this.  Machines
without cpufreq (virtual machines, such as the ones Sluice's tests run on) sprint by CPU quota
instead (:mod:`node_agent.sprint`); the agent says which applies, once, at start.

The sysfs root is a parameter so the parsing is tested against a recorded tree.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SYSFS_CPUS = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuFreq:
    """One CPU's cpufreq files: where to write, and the hardware's maximum (kHz)."""

    cpu: int
    scaling_max: Path
    hardware_max_khz: int


@dataclass(frozen=True)
class Detection:
    """The CPUs DVFS can raise; ``reason`` says why there are none."""

    cpus: tuple[CpuFreq, ...]
    reason: str = ""

    @property
    def available(self) -> bool:
        return bool(self.cpus)


def detect(root: Path = SYSFS_CPUS) -> Detection:
    """The CPUs under ``root`` whose maximum frequency can be raised by writing
    ``scaling_max_freq``."""
    if not root.is_dir():
        return Detection((), f"{root} does not exist")
    found: list[CpuFreq] = []
    seen_cpufreq = False
    for entry in sorted(root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        freq = entry / "cpufreq"
        if not freq.is_dir():
            continue
        seen_cpufreq = True
        scaling, hardware = freq / "scaling_max_freq", freq / "cpuinfo_max_freq"
        try:
            maximum = int(hardware.read_text().strip())
            int(scaling.read_text().strip())
        except (OSError, ValueError):
            continue
        if os.access(scaling, os.W_OK):
            found.append(CpuFreq(int(entry.name[3:]), scaling, maximum))
    if found:
        return Detection(tuple(found))
    if not seen_cpufreq:
        return Detection((), "no cpufreq interface (no CPU frequency scaling on this machine)")
    return Detection((), "cpufreq is there but scaling_max_freq cannot be written")


class Dvfs:
    """Raise every detected CPU to its hardware maximum while any task sprints."""

    def __init__(self, detection: Detection) -> None:
        self._cpus = detection.cpus
        self._saved: dict[int, str] = {}  # cpu -> scaling_max_freq before the sprint

    @property
    def sprinting(self) -> bool:
        return bool(self._saved)

    def raise_clock(self) -> None:
        if self._saved:
            return
        for cpu in self._cpus:
            self._saved[cpu.cpu] = cpu.scaling_max.read_text().strip()
            cpu.scaling_max.write_text(str(cpu.hardware_max_khz))
        log.info("DVFS sprint: %d CPUs at their maximum frequency", len(self._cpus))

    def restore_clock(self) -> None:
        for cpu in self._cpus:
            saved = self._saved.pop(cpu.cpu, None)
            if saved is not None:
                cpu.scaling_max.write_text(saved)
        log.info("DVFS sprint over: CPU frequencies restored")
