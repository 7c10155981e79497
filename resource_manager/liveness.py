"""Time-driven work of the RM core: nodes lost by silence, nodes that held work when this RM
started and never registered since, lost nodes forgotten, suspensions past their queue's
limit, preemption decisions and locality waits coming due, and the sprint budget's changes.

All of it is found from timers (:func:`next_wakeup`) in O(what is due), never by scanning the
cluster: a tick may run as often as the next wake-up asks.
"""

from __future__ import annotations

from dataclasses import replace

from policies.scheduling.framework import Plan, Preemption, PreemptionAction
from policies.scheduling.node_liveness import is_lost
from policies.scheduling.resources import Resources
from resource_manager.goals import next_suspension_deadline, overdue_suspensions
from resource_manager.plans import apply_plan, update_sprints
from resource_manager.reconcile import lose
from resource_manager.records import NodeRecord, NodeState, Now
from resource_manager.scheduling import end_locality_waits
from resource_manager.state import CoreState, log


def started(state: CoreState, now: Now) -> None:
    """The RM serves from ``now`` on (the shell calls it once, at start; :func:`tick` calls
    it too, for a shell that does not).  Nodes are kept in memory only, so a restarted RM
    knows none: every node that holds a container or a live task attempt in the recovered
    state counts as silent since ``now``, and is lost after the node timeout, through the
    path of a node lost by silence (its tasks retried or failed as their job says, its
    containers freed), unless it registers before (then its registration reconciles what
    it holds).  Later calls change nothing."""
    if state.started is not None:
        return
    state.started = now.monotonic
    unheard = state.unheard
    if unheard:
        log.info(
            "%d nodes hold work in the recovered state (%s): each is lost unless it "
            "registers within %g s",
            len(unheard),
            ", ".join(list(unheard)[:5]) + (", ..." if len(unheard) > 5 else ""),
            state.settings.node_timeout,
        )


def tick(state: CoreState, now: Now) -> None:
    """Time-driven housekeeping: declare silent nodes lost (by the monotonic clock, so a step
    of the wall clock loses nobody), nodes that held work when this RM started and have not
    registered since (:func:`started`), and forget nodes lost long ago.  Finds them from
    timers in O(what is due), so it may run as often as :func:`next_wakeup` asks."""
    state.wall_minus_monotonic = now.wall - now.monotonic
    started(state, now)
    timeout = state.settings.node_timeout
    since = state.started
    if state.unheard and since is not None and is_lost(since, now.monotonic, timeout):
        # (first: they were last heard of before any node registered since, so the lost
        # nodes' list stays oldest first)
        for node_id in list(state.unheard):
            _lose_unheard(state, node_id, since, now)
    silent = state.tables.silent_nodes(before=now.monotonic - timeout)
    for node_id in sorted(silent):
        if is_lost(state.nodes[node_id].last_seen, now.monotonic, timeout):
            _lose_node(state, node_id, now)
    retention = state.settings.lost_node_retention
    for node_id, since in list(state.lost_since.items()):
        if now.monotonic - since <= retention:
            break  # oldest first: the rest were lost later
        state.forget_lost(node_id)
        lost = state.nodes.get(node_id)
        if lost is not None and lost.state is NodeState.LOST:
            state.tables.remove_node(node_id)
            log.info("node %s forgotten: lost for more than %.0f s", node_id, retention)
    overdue = tuple(
        Preemption(
            allocation.allocation_id,
            PreemptionAction.KILL,
            f"preempted for longer than its queue's max_suspended_s ({limit:g} s)",
            by="MaxSuspended",
        )
        for allocation, limit in overdue_suspensions(state, now)
    )
    if overdue:
        apply_plan(state, Plan(preemptions=overdue), now)
    if state.decision_due(now) and state.book.wanted:
        state.asks_grew = True  # run the pass that wanted a decision
    end_locality_waits(state, now)
    update_sprints(state, now)


def next_wakeup(state: CoreState) -> float | None:
    """The monotonic time :func:`tick` has something to do, or None when nothing is timed."""
    settings = state.settings
    times = []
    oldest = state.tables.oldest_heartbeat()
    if oldest is not None:
        times.append(oldest + settings.node_timeout)
    if state.unheard and state.started is not None:
        times.append(state.started + settings.node_timeout)
    for since in state.lost_since.values():
        times.append(since + settings.lost_node_retention)
        break
    if state.book.wanted:
        times.append(state.book.last_decision + settings.preemption_interval)
    if state.locality_ends:
        times.append(state.locality_ends[0][0])
    deadline = next_suspension_deadline(state)
    if deadline is not None:
        # Suspensions are timed by the wall clock (they outlive an RM restart); the shell
        # sleeps by the monotonic one, converted by the offset last seen.
        times.append(deadline - state.wall_minus_monotonic)
    sprint = state.sprints.next_change()
    if sprint is not None:  # (wall-clock too)
        times.append(sprint - state.wall_minus_monotonic)
    return min(times, default=None)


def _lose_unheard(state: CoreState, node_id: str, since: float, now: Now) -> None:
    """A node that held work when this RM started (at ``since``, monotonic) and has not
    registered since is lost: listed as lost (its address and capacity unknown to this
    RM), and what it held is lost as a silent node's is."""
    state.hear(node_id)
    log.warning(
        "node %s held work when this resource manager started and has not registered since",
        node_id,
    )
    state.tables.put_node(
        NodeRecord(
            node_id=node_id,
            address="",
            runtime="",
            capacity=Resources(),
            instance_id="",
            last_heartbeat=since + (now.wall - now.monotonic),
            last_seen=since,
            state=NodeState.LOST,
        )
    )
    _lose_node(state, node_id, now)


def _lose_node(state: CoreState, node_id: str, now: Now) -> None:
    node = state.nodes[node_id]
    state.tables.put_node(replace(node, state=NodeState.LOST))
    state.opportunistic.pop(node_id, None)  # its speculative tasks are lost with it
    state.mark_lost(node_id, node.last_seen)
    log.warning("node %s lost: no heartbeat for %.1f s", node_id, now.monotonic - node.last_seen)
    lose(
        state,
        state.tables.allocations_of_node(node_id),
        state.tables.live_tasks_of_node(node_id),
        f"job master's node {node_id} was lost",
        f"node {node_id} lost",
        now,
    )
