"""What `sluice job` and `sluice nodes` show of preemption: each task's steps, and swap."""

from __future__ import annotations

import pytest

from sluice import render
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def detail(*steps: rm_pb.PreemptionEvent) -> rm_pb.JobDetail:
    return rm_pb.JobDetail(
        summary=rm_pb.JobSummary(job_id="job-000001", name="long"),
        tasks=[
            rm_pb.TaskInfo(task_id="work-0", attempt=1, node_id="n1", preemptions=list(steps)),
            rm_pb.TaskInfo(task_id="work-1", attempt=1, node_id="n2"),
        ],
    )


@pytest.mark.parametrize(
    ("step", "shown"),
    [
        (
            rm_pb.PreemptionEvent(
                action="suspended", limits=pb.Resources(cpu=0.01, memory_mb=64), reason="why"
            ),
            ["suspended", "0.01 cpu, 64 MiB", "(why)"],
        ),
        (
            rm_pb.PreemptionEvent(action="killed", work_lost_s=412.0),
            ["killed", "work lost 412.0 s"],
        ),
        (rm_pb.PreemptionEvent(action="resumed"), ["resumed"]),
    ],
)
def test_a_job_shows_each_step_of_its_tasks_preemptions(step, shown):
    text = render.job_detail(detail(step))
    section = text.split("preemptions (docs/preemption.md)")[1]
    assert "work-0 attempt 1 on n1" in section and "work-1" not in section
    for part in shown:
        assert part in section


def test_a_job_never_preempted_shows_no_preemption_section():
    assert "preemptions" not in render.job_detail(detail())


def column(text: str, name: str) -> list[str]:
    """The cells of one column of a rendered table, found by its header's position."""
    header, *rows = text.splitlines()
    names = header.split()
    begin = header.index(name)
    following = names.index(name) + 1
    end = header.index(names[following], begin) if following < len(names) else None
    return [row[begin:end].strip() for row in rows]


def test_nodes_show_whether_they_have_swap():
    nodes = [
        rm_pb.NodeInfo(node_id="n1", has_swap=True, state=rm_pb.NODE_READY),
        rm_pb.NodeInfo(node_id="n2", has_swap=False, state=rm_pb.NODE_READY),
    ]
    assert column(render.nodes_table(nodes), "SWAP")[:2] == ["yes", "no"]


def test_nodes_show_their_speculative_tasks_and_what_they_hold():
    nodes = [
        rm_pb.NodeInfo(node_id="n1", state=rm_pb.NODE_READY),
        rm_pb.NodeInfo(
            node_id="n2",
            state=rm_pb.NODE_READY,
            speculative_tasks=3,
            opportunistic=pb.Resources(cpu=1.5, memory_mb=768),
        ),
    ]
    assert column(render.nodes_table(nodes), "SPECULATIVE")[:2] == ["-", "3 (1.5 cpu)"]


@pytest.mark.parametrize(
    ("queue", "counts", "throttle"),
    [
        (None, "-", "-"),
        (pb.SpeculativeQueueState(admitted=4, running=4), "0/4/0/0", "-"),
        (
            pb.SpeculativeQueueState(
                queued=2, admitted=9, refused=1, blocked="cpu utilisation 0.95 over 0.9"
            ),
            "2/9/1/0",
            "waits: cpu utilisation 0.95 over 0.9",
        ),
        (
            pb.SpeculativeQueueState(
                queued=1,
                admitted=5,
                evicted=3,
                throttled=True,
                blocked="throttled: psi_cpu of service s",
            ),
            "1/5/0/3",
            "throttled: psi_cpu of service s",
        ),
    ],
)
def test_nodes_show_their_speculative_queue_and_throttle(
    queue: pb.SpeculativeQueueState | None, counts: str, throttle: str
) -> None:
    nodes = [rm_pb.NodeInfo(node_id="n1", state=rm_pb.NODE_READY, speculative=queue)]
    text = render.nodes_table(nodes)
    assert column(text, "QUEUED/ADMITTED/REFUSED/EVICTED") == [counts]
    assert column(text, "THROTTLE") == [throttle]
