"""The node's energy estimate (DiAS Sec. 5.3; docs/approximation.md), in every metrics sample.

Where the machine exposes Intel RAPL through ``/sys/class/powercap`` (``intel-rapl:N``, one per
CPU package, with ``energy_uj`` counters that wrap at ``max_energy_range_uj``), the agent reads
it: the joules the packages used.  Elsewhere (virtual machines, such as Sluice's test machines)
it integrates the documented power model of :mod:`policies.approximation.energy` over its
samples: idle to peak watts, linear in the machine's CPU utilisation, times the sprint power
factor while a task sprints here.  Which one applies is said once, at start.

The powercap root is a parameter so the parsing is tested against a recorded tree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from policies.approximation.energy import PowerModel

log = logging.getLogger(__name__)

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class RaplDomain:
    name: str
    energy: Path
    wrap_uj: int  # the counter wraps to 0 past this


def detect_rapl(root: Path = POWERCAP) -> tuple[RaplDomain, ...]:
    """The readable RAPL package domains (``intel-rapl:N``; their sub-domains are inside)."""
    if not root.is_dir():
        return ()
    found = []
    for entry in sorted(root.glob("intel-rapl:*")):
        if entry.name.count(":") != 1:
            continue  # a sub-domain (core, uncore, dram): counted in its package
        try:
            int((entry / "energy_uj").read_text())
            wrap = int((entry / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        found.append(RaplDomain(entry.name, entry / "energy_uj", wrap))
    return tuple(found)


@dataclass(frozen=True)
class EnergyReading:
    energy_j: float  # since the agent started
    power_w: float  # over the last interval
    source: str  # "rapl" or "model"


class EnergyMeter:
    """Joules used since the agent started; :meth:`sample` once per metrics sample."""

    def __init__(self, model: PowerModel, rapl: tuple[RaplDomain, ...] = ()) -> None:
        self.model = model
        self._rapl = rapl
        self._last_uj: dict[str, int] = {}
        self._last_at: float | None = None
        self.energy_j = 0.0
        if rapl:
            log.info("energy: read from RAPL (%s)", ", ".join(d.name for d in rapl))
        else:
            log.info(
                "energy: no RAPL counters here; estimated by the power model (%g W idle, %g W "
                "busy, x%g while sprinting)",
                model.idle_w,
                model.peak_w,
                model.sprint_factor,
            )

    @property
    def source(self) -> str:
        return "rapl" if self._rapl else "model"

    def sample(self, now: float, cpu_utilization: float, sprinting: bool) -> EnergyReading:
        """``now``: monotonic seconds; the utilisation and sprint state over the last interval."""
        elapsed = 0.0 if self._last_at is None else max(0.0, now - self._last_at)
        self._last_at = now
        if self._rapl:
            joules = self._rapl_joules()
        else:
            joules = self.model.energy_j(elapsed, cpu_utilization, sprinting)
        self.energy_j += joules
        return EnergyReading(self.energy_j, joules / elapsed if elapsed > 0 else 0.0, self.source)

    def _rapl_joules(self) -> float:
        total_uj = 0
        for domain in self._rapl:
            try:
                value = int(domain.energy.read_text())
            except (OSError, ValueError):
                continue
            last = self._last_uj.get(domain.name)
            self._last_uj[domain.name] = value
            if last is not None:
                total_uj += value - last if value >= last else value + domain.wrap_uj - last
        return total_uj / 1e6
