"""Sprinting a job's tasks on this node (DiAS Sec. 3.2-3.3; the RM keeps the budget and says
when, :mod:`resource_manager.sprints`).

Two mechanisms behind one interface, chosen once at start and said in the log:

* **DVFS** (:mod:`node_agent.cpufreq`), where the machine exposes cpufreq: every CPU runs at
  its hardware maximum while any task of the node sprints, as in the paper;
* **CPU quota**, elsewhere (virtual machines, these test machines): a sprinting task's CPU
  quota is raised from its grant ``g`` to ``min(g · factor, g + idle)``, where ``idle`` is the
  node's CPU not held by its other live tasks (their limits, sprinted ones as sprinted) — so a
  sprint uses idle cores only and never another container's grant — and lowered to ``g`` again
  when the sprint ends.

Either way the task's *limits* as reported stay its unsprinted ones, and its sprint factor is
reported beside them, so the RM sees that its command was carried out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from node_agent.cpufreq import Detection, Dvfs
from policies.scheduling.resources import Resources

log = logging.getLogger(__name__)


class Mechanism(Enum):
    DVFS = "dvfs"
    CPU_QUOTA = "cpu-quota"


@dataclass(frozen=True)
class Sprinting:
    """A sprinting task: the factor the RM asked for, its limits before the sprint, and the CPU
    it sprints at (CPU quota)."""

    factor: float
    base: Resources
    cpu: float = 0.0


def sprinted_cpu(grant_cpu: float, factor: float, idle_cpu: float) -> float:
    """A CPU-quota sprint's CPU: ``factor`` times the grant, but no more than the grant plus
    the idle CPU (never below the grant)."""
    return max(grant_cpu, min(grant_cpu * factor, grant_cpu + max(idle_cpu, 0.0)))


class NodeSprinter:
    """Which tasks sprint here, and carrying it out.  ``resize(key, limits)`` sets a task's
    CPU and memory (the agent's resize, which picks its CPUs afresh)."""

    def __init__(
        self,
        detection: Detection,
        capacity_cpu: float,
        resize: Callable[[str, Resources], object],
    ) -> None:
        self.mechanism = Mechanism.DVFS if detection.available else Mechanism.CPU_QUOTA
        self._dvfs = Dvfs(detection) if detection.available else None
        self._capacity_cpu = capacity_cpu
        self._resize = resize
        self._lock = threading.Lock()
        self._sprinting: dict[str, Sprinting] = {}
        if self._dvfs is not None:
            log.info("sprinting: by DVFS (%d CPUs can run faster)", len(detection.cpus))
        else:
            log.info(
                "sprinting: by CPU quota (%s): a sprinting task gets idle cores up to its "
                "grant times the sprint factor",
                detection.reason,
            )

    def factor_of(self, key: str) -> float:
        with self._lock:
            sprinting = self._sprinting.get(key)
        return sprinting.factor if sprinting is not None else 1.0

    def base_of(self, key: str) -> Resources | None:
        """The limits a sprinting task had before its sprint (None: it does not sprint)."""
        with self._lock:
            sprinting = self._sprinting.get(key)
        return sprinting.base if sprinting is not None else None

    @property
    def any_sprinting(self) -> bool:
        with self._lock:
            return bool(self._sprinting)

    def sprint(self, key: str, factor: float, base: Resources, others: Mapping[str, float]) -> None:
        """Sprint ``key`` at ``factor`` (1: end its sprint); ``base``: its limits unsprinted;
        ``others``: the CPU limits of the node's other live tasks now."""
        if factor <= 1.0:
            self.end(key)
            return
        with self._lock:
            if key in self._sprinting and self._sprinting[key].factor == factor:
                return  # asked again while it sprints
            self._sprinting[key] = Sprinting(factor, base)
        if self._dvfs is not None:
            self._dvfs.raise_clock()
            return
        try:
            self._fit(key, others)
        except Exception:
            # Not carried out, so not reported as sprinting either: the RM, seeing the task
            # unsprinted, asks again at the next heartbeat (a resize can fail on a busy node).
            with self._lock:
                if self._sprinting.get(key) == Sprinting(factor, base):
                    del self._sprinting[key]
            raise

    def refit(self, others_of: Callable[[str], Mapping[str, float]]) -> None:
        """The node's other tasks changed (one started): each CPU-quota sprint takes only what
        is idle now, so a task granted since gets its grant.  ``others_of(key)``: the CPU limits
        of the live tasks other than ``key``."""
        if self._dvfs is not None:
            return
        with self._lock:
            keys = list(self._sprinting)
        for key in keys:
            self._fit(key, others_of(key))

    def _fit(self, key: str, others: Mapping[str, float]) -> None:
        with self._lock:
            sprinting = self._sprinting.get(key)
        if sprinting is None:
            return
        base = sprinting.base
        idle = self._capacity_cpu - base.cpu - sum(others.values())
        cpu = sprinted_cpu(base.cpu, sprinting.factor, idle)
        if abs(cpu - sprinting.cpu) < 1e-9:
            return
        self._resize(key, Resources(cpu, base.memory_mb))
        with self._lock:
            if key in self._sprinting:
                self._sprinting[key] = Sprinting(sprinting.factor, base, cpu)
        log.info("sprinting %s: %g cpu (grant %g, factor %g)", key, cpu, base.cpu, sprinting.factor)

    def end(self, key: str) -> None:
        """End ``key``'s sprint (if it sprints): its limits go back to what they were."""
        with self._lock:
            sprinting = self._sprinting.pop(key, None)
            none_left = not self._sprinting
        if sprinting is None:
            return
        if self._dvfs is not None:
            if none_left:
                self._dvfs.restore_clock()
            return
        self._resize(key, sprinting.base)
        log.info("sprint of %s over: back to %g cpu", key, sprinting.base.cpu)

    def forget(self, key: str) -> None:
        """The task ended: nothing to restore."""
        with self._lock:
            self._sprinting.pop(key, None)
            none_left = not self._sprinting
        if self._dvfs is not None and none_left and self._dvfs.sprinting:
            self._dvfs.restore_clock()
