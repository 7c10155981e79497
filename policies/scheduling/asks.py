"""What a job master may ask the resource manager for, and the check of every ask against the
job's spec.

A job master asks per phase for the number of containers it still wants (an absolute count, so
a lost answer costs nothing).  The RM holds each ask to the job's spec before anything changes:
the phase exists, the containers are the phase's size, and the count is no more than the phase
can still use.  The check is a pure function so the simulator applies exactly the same rules.

An ask may name the nodes its containers would rather be on (``preferred_nodes``: where the
phase's input is, the nodes that ran its upstream tasks).  The RM tries them first and, for up
to its locality wait, only them (delay scheduling, as Spark's ``spark.locality.wait`` and
YARN's node-local requests; docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.scheduling.jobspec import JobSpec
from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class PhaseAsk:
    """``count`` more containers of ``resources`` wanted for tasks of ``phase`` (absolute: the
    total still wanted beyond the containers the job master holds, not an increment)."""

    phase: str
    count: int
    resources: Resources
    preferred_nodes: tuple[str, ...] = ()
    local_only: bool = False
    """Take only preferred nodes, however long that takes, where the RM has a locality wait:
    a slot pre-reserved ahead of a barrier is worth having only near the phase's input."""


MAX_PREFERRED_NODES = 4096
"""Nodes one ask may prefer: the job master names the nodes its upstream tasks ran on, and
trims the list to this many."""


class AskError(ValueError):
    """An ask the job's spec does not allow; ``field`` is a path such as ``asks[1].count``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def check_asks(spec: JobSpec, asks: Sequence[PhaseAsk], held: Mapping[str, int]) -> None:
    """Raise :class:`AskError` unless every ask fits the job's spec.

    ``held`` counts the task containers the job master already knows it holds, per phase.  A
    phase of n tasks never needs more than n containers at once (one per task attempt), so an
    ask may want at most ``n - held[phase]`` more.  Each phase is asked for at most once."""
    first: dict[str, int] = {}
    for index, ask in enumerate(asks):
        field = f"asks[{index}]"
        try:
            phase = spec.phase(ask.phase)
        except KeyError:
            raise AskError(f"{field}.phase", f"the job has no phase {ask.phase!r}") from None
        if ask.phase in first:
            raise AskError(
                f"{field}.phase",
                f"{ask.phase!r} is asked for twice (also asks[{first[ask.phase]}])",
            )
        first[ask.phase] = index
        if ask.resources != phase.resources:
            raise AskError(
                f"{field}.resources",
                f"must be phase {ask.phase!r}'s {phase.resources.cpu:g} cpu / "
                f"{phase.resources.memory_mb} MiB, got {ask.resources.cpu:g} cpu / "
                f"{ask.resources.memory_mb} MiB",
            )
        if ask.count < 0:
            raise AskError(f"{field}.count", f"must not be negative, got {ask.count}")
        _check_preferred(ask.preferred_nodes, f"{field}.preferred_nodes")
        usable = phase.tasks - held.get(ask.phase, 0)
        if ask.count > usable:
            raise AskError(
                f"{field}.count",
                f"{ask.count} is more than phase {ask.phase!r} can still use ({phase.tasks} "
                f"tasks, {held.get(ask.phase, 0)} containers held)",
            )


def _check_preferred(nodes: Sequence[str], field: str) -> None:
    if len(nodes) > MAX_PREFERRED_NODES:
        raise AskError(field, f"at most {MAX_PREFERRED_NODES} nodes, got {len(nodes)}")
    seen: set[str] = set()
    for position, node_id in enumerate(nodes):
        if not node_id:
            raise AskError(f"{field}[{position}]", "must be a node id, got an empty string")
        if node_id in seen:
            raise AskError(f"{field}[{position}]", f"{node_id!r} is named twice")
        seen.add(node_id)
