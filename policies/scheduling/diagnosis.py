"""Why an ask is pending, told node by node, as Kubernetes' "0/15000 nodes are available:
12000 Insufficient cpu, 3000 ..." (its scheduler's ``FitError``).

A scheduling pass stays O(what it places): it does not say, for every ask it could not place,
why each node refused it.  This is the same judgement made on demand, when a user asks
(``sluice job ID``): the permit plugins first (a refusal there holds the ask back whatever the
node: a queue at its ``max_share``, job masters at their share, DiAS's bound on jobs in
execution), the locality wait, then each schedulable node through the pass's own checks in the
pass's order (free capacity, what reserve plugins hold there for others, filter plugins), and
the nodes the shell keeps out of scheduling (not ready, draining, held), counted by why.  A
node is counted once per reason it fails, as Kubernetes counts it (a node short of both CPU and
memory counts under both), so the counts may add up to more than the nodes.

O(nodes) per ask: for reads only, never in a pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from policies.scheduling.framework import (
    AllocationKind,
    PassContext,
    PendingAsk,
    Profile,
    Refusal,
    locality_wait,
)

INSUFFICIENT_CPU = "insufficient cpu"
INSUFFICIENT_MEMORY = "insufficient memory"
NOT_NEAR_INPUT = "not near its input (locality wait)"


@dataclass(frozen=True)
class PendingWhy:
    """Why ``ask`` (``count`` containers still wanted) is pending: ``held_back``, a refusal that
    holds whatever the node; and over the ``nodes`` the cluster has, how many are
    ``available`` for one container now and, for the others, how many fail for each reason
    (most first, then by name)."""

    ask: PendingAsk
    held_back: Refusal | None
    nodes: int
    available: int
    reasons: tuple[tuple[str, int], ...]

    def text(self) -> str:
        """One line, e.g. "0/3 nodes are available: 2 insufficient cpu, 1 draining"."""
        nodes = f"{self.available}/{self.nodes} nodes are available"
        if self.reasons:
            nodes += ": " + ", ".join(f"{count} {reason}" for reason, count in self.reasons)
        if self.held_back is not None:
            return f"held back: {self.held_back}; {nodes}"
        if self.available:
            return f"{nodes}: the next pass places it, unless asks served before it take them"
        return nodes


def why_pending(
    ask: PendingAsk,
    context: PassContext,
    profile: Profile,
    *,
    unschedulable: Mapping[str, int] | None = None,
) -> PendingWhy:
    """Judge ``ask`` as a pass at ``context.now`` would, against ``context.cluster`` (the
    schedulable nodes); ``unschedulable``: the other nodes, counted by why (e.g.
    ``{"draining": 2}``).  Reads only: changes no plugin and no index."""
    held_back = None
    for permit in profile.permits:
        held_back = permit.admit(ask, context)
        if held_back is not None:
            break
    local_only = ask.local_only(context.now)
    if held_back is None and local_only:
        held_back = locality_wait(ask)
    reasons: Counter[str] = Counter(unschedulable or {})
    available = 0
    request = ask.resources
    for node in context.cluster.nodes():
        failed = False
        if local_only and node.node_id not in ask.preferred_nodes:
            reasons[NOT_NEAR_INPUT] += 1
            continue
        free = node.free
        if request.cpu > free.cpu:
            reasons[INSUFFICIENT_CPU] += 1
            failed = True
        if request.memory_mb > free.memory_mb:
            reasons[INSUFFICIENT_MEMORY] += 1
            failed = True
        if failed:
            continue
        for reserve in profile.reserves:
            held = reserve.held_for_others(ask, node)
            free = free - held
            if not request.fits_in(free):
                reasons[f"held for others ({reserve.name})"] += 1
                failed = True
                break
        if failed:
            continue
        for node_filter in profile.filters:
            if not node_filter.feasible(ask, node, context):
                reasons[f"refused by {node_filter.name}"] += 1
                failed = True
                break
        if not failed:
            available += 1
    nodes = len(context.cluster) + sum((unschedulable or {}).values())
    ordered = tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
    return PendingWhy(ask, held_back, nodes, available, ordered)


def describe(why: PendingWhy) -> str:
    """What is pending, then why: "phase map: 3 containers of 2 CPU, 512 MB: 0/3 nodes ..."."""
    ask = why.ask
    what = "its job master" if ask.kind is AllocationKind.JOB_MASTER else f"phase {ask.phase}"
    size = f"{ask.resources.cpu:g} CPU, {ask.resources.memory_mb} MB"
    count = "a container" if ask.count == 1 else f"{ask.count} containers"
    return f"{what}: {count} of {size}: {why.text()}"
