"""Whose load a node reports (``--load-scope``, node_agent/metrics/share.py): a node of a
local cluster judges its own share of the host, not the whole host (issue 28 section 3)."""

from __future__ import annotations

import pytest

from node_agent.metrics.host import HostSample
from node_agent.metrics.share import LoadScope, own_sample, resolve_scope, share_of
from policies.scheduling.resources import Resources

HOST_CPUS, HOST_MB = 8, 16000


@pytest.mark.parametrize(
    ("requested", "capacity", "expected"),
    [
        (LoadScope.AUTO, Resources(8.0, 16000), LoadScope.HOST),  # the whole host
        (LoadScope.AUTO, Resources(2.0, 16000), LoadScope.OWN),  # fewer cores
        (LoadScope.AUTO, Resources(8.0, 4096), LoadScope.OWN),  # less memory
        (LoadScope.HOST, Resources(2.0, 4096), LoadScope.HOST),  # as asked
        (LoadScope.OWN, Resources(8.0, 16000), LoadScope.OWN),  # a local cluster's nodes
    ],
)
def test_resolve_scope(requested: LoadScope, capacity: Resources, expected: LoadScope) -> None:
    assert resolve_scope(requested, capacity, HOST_CPUS, HOST_MB) is expected


@pytest.mark.parametrize(
    ("used", "capacity", "expected"),
    [
        (Resources(0.0, 0), Resources(2.0, 4096), (0.0, 0.0)),
        (Resources(1.0, 1024), Resources(2.0, 4096), (0.5, 0.25)),
        (Resources(3.0, 8192), Resources(2.0, 4096), (1.0, 1.0)),  # clipped
    ],
)
def test_share_of(used: Resources, capacity: Resources, expected: tuple[float, float]) -> None:
    assert share_of(used, capacity) == expected


def test_a_busy_host_is_not_a_busy_node() -> None:
    busy_host = HostSample(
        cpu_utilization=1.0,
        memory_utilization=0.95,
        memory_total_bytes=HOST_MB << 20,
        load_average_1m=5.0,
        disk_throughput_utilization=0.1,
        disk_busy_utilization=0.2,
        disk_usage=0.3,
        net_receive_utilization=0.01,
        net_transmit_utilization=0.02,
        pressure={},
    )
    sample = own_sample(busy_host, Resources(0.25, 512), Resources(2.0, 4096))
    assert (sample.cpu_utilization, sample.memory_utilization) == (0.125, 0.125)
    assert sample.load_average_1m == 0.25  # the cores its tasks kept busy
    # What cannot be attributed to a node stays the host's.
    assert (sample.disk_busy_utilization, sample.disk_usage) == (0.2, 0.3)
    assert sample.net_transmit_utilization == 0.02
