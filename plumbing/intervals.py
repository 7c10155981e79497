"""The live system's timing defaults, in one place: the daemons use them, and the simulator
models the same intervals (docs/simulator.md), so a change here changes both."""

from __future__ import annotations

HEARTBEAT_INTERVAL_S = 1.0
"""A node agent's heartbeat to the resource manager (``sluice agent --heartbeat-interval``)."""

MONITOR_INTERVAL_S = 0.2
"""How often a node agent observes its tasks and reports their changes at once
(``--monitor-interval``)."""

JOB_MASTER_ROUND_S = 0.2
"""The pause between a job master's rounds: decide, launch, Allocate, absorb."""

SCHEDULING_PASS_DELAY_S = 0.02
"""The resource manager's pass runs this long after the first change that could let something
be placed: the requests in between are one batch."""

# ---------------------------------------------------------------- node timeout, adoption, lease
#
# One rule ties them (docs/architecture.md, "Node timeout and lease"):
#
#     node timeout >= HEARTBEATS_PER_NODE_TIMEOUT * heartbeat interval + AGENT_START_BUDGET_S
#
# A node is lost after ``--node-timeout`` of silence; until then a restarted agent adopts its
# tasks (the RM still holds them), so the timeout must let a node miss a couple of heartbeats
# and let an agent be restarted and register.  The agent fences (stops its own tasks) when it
# has not reached the RM for the node timeout less FENCE_STOP_GRACE_S and a monitor interval,
# so that its tasks are gone by the time the RM counts them lost and retries them elsewhere.

NODE_TIMEOUT_S = 10.0
"""The resource manager's default ``--node-timeout``."""

HEARTBEATS_PER_NODE_TIMEOUT = 3
"""Heartbeats a node may take per node timeout: it survives two lost ones."""

AGENT_START_BUDGET_S = 4.0
"""What a restarted node agent may take from its start to its registration.  It takes 0.6 s on
an idle 2-core machine (``bench/bench_agent_start.py``); the rest is for a loaded one."""

FENCE_STOP_GRACE_S = 1.0
"""SIGTERM to SIGKILL for the tasks an agent stops when its lease on the RM expired."""

MAX_BACKOFF_S = 10.0
"""The longest wait of a node agent between attempts to reach a lost RM (``--max-backoff``)."""


def min_node_timeout(heartbeat_interval: float) -> float:
    """The shortest node timeout that obeys the rule above for agents heartbeating every
    ``heartbeat_interval`` seconds."""
    return HEARTBEATS_PER_NODE_TIMEOUT * heartbeat_interval + AGENT_START_BUDGET_S


def node_timeout_problem(node_timeout: float, heartbeat_interval: float) -> str | None:
    """Why ``node_timeout`` breaks the rule for ``heartbeat_interval`` (one line naming both),
    or None."""
    least = min_node_timeout(heartbeat_interval)
    if node_timeout >= least:
        return None
    return (
        f"a node timeout of {node_timeout:g} s is too short for heartbeats every "
        f"{heartbeat_interval:g} s: it must be at least {HEARTBEATS_PER_NODE_TIMEOUT} heartbeats "
        f"+ {AGENT_START_BUDGET_S:g} s for a restarted agent to register, {least:g} s"
    )


def fence_after(node_timeout: float, monitor_interval: float) -> float:
    """Seconds without reaching the RM after which an agent stops its tasks: the node timeout
    less the stop's grace and one monitor pass (the agent's check), so that they are stopped
    before the RM, which counts from a later moment (when it received the heartbeat), declares
    the node lost.  Never less than one monitor interval."""
    return max(node_timeout - FENCE_STOP_GRACE_S - monitor_interval, monitor_interval)


def node_timeout_for(heartbeat_interval: float) -> float:
    """The node timeout a local cluster gives its RM: the rule's least, and never less than 5 s
    (what it was before the rule)."""
    return max(5.0, min_node_timeout(heartbeat_interval))
