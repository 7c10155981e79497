"""The power model behind Sluice's energy figures (DiAS Sec. 5.1, 5.3; docs/approximation.md).

A machine draws ``idle_w`` when idle and ``peak_w`` when every core is busy, linearly in
between (the usual linear server power model); while it sprints it draws ``sprint_factor`` times
that (the paper measured 180 W rising to 270 W, a factor of 1.5, when its DVFS sprint lifted the
clock from 800 MHz to 2.4 GHz).  Node agents integrate it over their monitor passes, and the
simulator over its samples, with this same code; where a machine exposes RAPL counters the
agent reads those instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PowerModel:
    """Watts of one machine: ``idle_w`` ≤ ``peak_w``, and ``sprint_factor`` ≥ 1."""

    idle_w: float = 180.0
    peak_w: float = 250.0
    sprint_factor: float = 1.5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_w) and 0 <= self.idle_w <= self.peak_w):
            raise ValueError("idle power must be between 0 and the peak power")
        if not math.isfinite(self.peak_w):
            raise ValueError("peak power must be finite")
        if not (math.isfinite(self.sprint_factor) and self.sprint_factor >= 1):
            raise ValueError("the sprint power factor must be at least 1")

    def power_w(self, utilisation: float, sprinting: bool = False) -> float:
        """Watts at CPU ``utilisation`` (clamped to [0, 1]), sprinting or not."""
        busy = min(max(utilisation, 0.0), 1.0)
        watts = self.idle_w + (self.peak_w - self.idle_w) * busy
        return watts * self.sprint_factor if sprinting else watts

    def energy_j(self, seconds: float, utilisation: float, sprinting: bool = False) -> float:
        """Joules over ``seconds`` (≥ 0) at a constant utilisation."""
        if seconds < 0:
            raise ValueError("time must not run backwards")
        return self.power_w(utilisation, sprinting) * seconds
