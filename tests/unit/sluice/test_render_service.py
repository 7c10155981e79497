"""What `sluice job` says of a service: its kind, whether it is latency-sensitive, its probe."""

from __future__ import annotations

import pytest

from plumbing.wire import spec_to_pb
from policies.scheduling.jobspec import parse_job_spec
from sluice import render
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import job_doc, phase_doc


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ({}, None),
        ({"kind": "service"}, "kind       service"),
        (
            {"kind": "service", "service": {"latency_sensitive": True}},
            "kind       service (latency-sensitive)",
        ),
        (
            {
                "kind": "service",
                "service": {"latency_sensitive": True, "probe": {"http": "/h", "port": 80}},
            },
            "kind       service (latency-sensitive, probed by GET :80/h every 1 s)",
        ),
        (
            {"kind": "service", "service": {"probe": {"tcp": True, "port": 6379, "period_s": 2}}},
            "kind       service (probed by TCP :6379 every 2 s)",
        ),
    ],
)
def test_a_service_says_so_under_its_priority(extra: dict[str, object], line: str | None):
    spec = spec_to_pb(parse_job_spec(job_doc(phase_doc("server"), **extra)))
    summary = rm_pb.JobSummary(job_id="job-000001", name="job")
    text = render.job_detail(rm_pb.JobDetail(summary=summary, spec=spec))
    lines = text.splitlines()
    if line is None:
        assert not any(entry.startswith("kind") for entry in lines)
    else:
        assert lines[lines.index("priority   0") + 1] == line
