"""Sprinting a job's tasks on this node (DiAS Sec. 3.2-3.3; the RM keeps the budget and says
when, :mod:`resource_manager.sprints`): the mechanisms and the CPU-quota arithmetic.  The
decisions are :class:`node_agent.core.NodeCore`'s; the agent carries them out.

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

from dataclasses import dataclass
from enum import Enum

from policies.scheduling.resources import Resources


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
