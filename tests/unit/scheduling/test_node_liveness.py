"""A node is lost when its last heartbeat is more than the timeout before now."""

from __future__ import annotations

import pytest

from policies.scheduling.node_liveness import lost_nodes


@pytest.mark.parametrize(
    ("last_heartbeat", "now", "timeout", "lost"),
    [
        ({}, 100.0, 10.0, set()),
        ({"a": 95.0}, 100.0, 10.0, set()),
        ({"a": 90.0}, 100.0, 10.0, set()),  # exactly the timeout: still alive
        ({"a": 89.9}, 100.0, 10.0, {"a"}),
        ({"a": 50.0, "b": 99.0, "c": 0.0}, 100.0, 10.0, {"a", "c"}),
        ({"a": 101.0}, 100.0, 0.0, set()),  # a heartbeat stamped after now is not late
        ({"a": 99.0}, 100.0, 0.0, {"a"}),
    ],
)
def test_lost_nodes(last_heartbeat: dict[str, float], now: float, timeout: float, lost: set[str]):
    assert lost_nodes(last_heartbeat, now, timeout) == frozenset(lost)
