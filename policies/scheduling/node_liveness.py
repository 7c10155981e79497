"""When a node counts as lost: a pure function of the last heartbeats and the time now."""

from __future__ import annotations

from collections.abc import Mapping


def lost_nodes(last_heartbeat: Mapping[str, float], now: float, timeout: float) -> frozenset[str]:
    """Nodes whose last heartbeat is more than ``timeout`` seconds before ``now``."""
    return frozenset(node for node, seen in last_heartbeat.items() if now - seen > timeout)


def is_lost(last_seen: float, now: float, timeout: float) -> bool:
    """One node: silent for more than ``timeout`` seconds (the rule of :func:`lost_nodes`)."""
    return now - last_seen > timeout
