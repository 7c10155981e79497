"""A service's watch in `sluice job` (issue 28 section 3): the probe's latency and the
interference verdict its node keeps, one line per task."""

from __future__ import annotations

import pytest

from sluice.service_health import health_line
from sluice_pb import node_agent_pb2 as agent_pb


@pytest.mark.parametrize(
    ("health", "line"),
    [
        (
            agent_pb.ServiceHealth(),
            "web-0: probe: no answer yet (0 ok, 0 failed); learning its baseline (30 samples "
            "before anomalies can be told)",
        ),
        (
            agent_pb.ServiceHealth(
                latency_p50_s=0.0012,
                latency_p95_s=0.0034,
                probes=40,
                probes_failed=1,
                last_problem="connection refused",
                judging=True,
                indicator="psi",
                value=0.5,
                bound=3.5,
            ),
            "web-0: probe p50 1.2 ms p95 3.4 ms (40 ok, 1 failed: connection refused); "
            "psi 0.5 under its bound 3.5: normal",
        ),
        (
            agent_pb.ServiceHealth(
                latency_p50_s=0.02,
                latency_p95_s=0.25,
                probes=12,
                anomalous=True,
                judging=True,
                indicator="psi",
                value=41.0,
                bound=3.5,
            ),
            "web-0: probe p50 20.0 ms p95 250.0 ms (12 ok, 0 failed); psi 41 over its bound "
            "3.5: ANOMALOUS",
        ),
    ],
)
def test_health_line(health: agent_pb.ServiceHealth, line: str) -> None:
    assert health_line("web-0", health) == line
