"""Each server's receive limit holds its largest legitimate request (plumbing/rpc.py says how
each was sized): built here at the bounds the specs and the job master allow."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from plumbing.rpc import AGENT_MAX_RECEIVE, AGGREGATOR_MAX_RECEIVE, RM_MAX_RECEIVE
from policies.scheduling.asks import MAX_PREFERRED_NODES
from policies.scheduling.jobspec import (
    MAX_COMMAND_ARGS,
    MAX_COMMAND_BYTES,
    MAX_IMAGE_LENGTH,
    MAX_PHASES,
    MAX_SPEC_BYTES,
)
from policies.scheduling.service_spec import MAX_PROBE_PATH
from policies.scheduling.spec_fields import MAX_NAME_LENGTH
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb

NAME = "p" * MAX_NAME_LENGTH
JOB_ID = "job-" + "9" * 12
TASK_ID = f"{NAME}-99999"


def _yaml_spec() -> Message:
    return rm_pb.SubmitJobRequest(spec_yaml="#" * MAX_SPEC_BYTES, idempotency_key="k" * 64)


def _structured_spec() -> Message:
    """Every counted byte spent on empty command arguments (one counted byte each, two on the
    wire): the most wire bytes a spec within MAX_SPEC_BYTES can take, over MAX_PHASES phases."""
    budget = MAX_SPEC_BYTES - MAX_PHASES * (MAX_NAME_LENGTH + 1)
    per_phase = min(MAX_COMMAND_ARGS, budget // MAX_PHASES)
    phases = [
        pb.PhaseSpec(
            name=NAME,
            tasks=100_000,
            command=[""] * per_phase,
            resources=pb.Resources(cpu=4096.0, memory_mb=64 * 1024 * 1024),
            droppable=True,
        )
        for _ in range(MAX_PHASES)
    ]
    return rm_pb.SubmitJobRequest(
        spec=pb.JobSpec(name=NAME, priority=1_000_000, phases=phases, max_retries=100),
        idempotency_key="k" * 64,
    )


def _heartbeat(tasks: int) -> Message:
    return rm_pb.HeartbeatRequest(
        node_id="node-" + "1" * 20,
        instance_id="i" * 32,
        live_tasks=[
            pb.TaskEvent(
                job_id=JOB_ID,
                task_id=f"map-{i}",
                attempt=1,
                allocation_id=f"{JOB_ID}/a-{i}",
                state=pb.TASK_RUNNING,
                timestamp=1.7e9,
                node_id="node-" + "1" * 20,
                start_time=1.7e9,
                limits=pb.Resources(cpu=0.5, memory_mb=512),
            )
            for i in range(tasks)
        ],
    )


def _allocate() -> Message:
    return rm_pb.AllocateRequest(
        job_id=JOB_ID,
        asks=[
            rm_pb.Ask(
                phase=NAME,
                count=100_000,
                preferred_nodes=[f"node-{i}" for i in range(MAX_PREFERRED_NODES)],
            )
        ]
        * 4,
        releases=[f"{JOB_ID}/a-{i}" for i in range(10_000)],
    )


def _start_task() -> agent_pb.StartTaskRequest:
    per_arg = MAX_COMMAND_BYTES // MAX_COMMAND_ARGS - 1  # each counted with its NUL
    return agent_pb.StartTaskRequest(
        job_id=JOB_ID,
        task_id=TASK_ID,
        attempt=100,
        allocation_id=f"{JOB_ID}/a-99999999",
        command=["x" * per_arg] * MAX_COMMAND_ARGS,
        resources=pb.Resources(cpu=4096.0, memory_mb=64 * 1024 * 1024),
        image="i" * MAX_IMAGE_LENGTH,
        env={"SLUICE_JOB_ID": JOB_ID, "SLUICE_TASK_ID": TASK_ID, "SLUICE_ATTEMPT": "100"},
        grant_token=b"t" * 64,
        service=pb.ServiceSpec(
            latency_sensitive=True, probe=pb.ProbeSpec(http="/" * MAX_PROBE_PATH, port=65535)
        ),
    )


@pytest.mark.parametrize(
    ("request_message", "limit"),
    [
        pytest.param(_yaml_spec(), RM_MAX_RECEIVE, id="rm-SubmitJob-yaml"),
        pytest.param(_structured_spec(), RM_MAX_RECEIVE, id="rm-SubmitJob-structured"),
        pytest.param(_heartbeat(20_000), RM_MAX_RECEIVE, id="rm-Heartbeat-20000-tasks"),
        pytest.param(_allocate(), RM_MAX_RECEIVE, id="rm-Allocate"),
        pytest.param(_start_task(), AGENT_MAX_RECEIVE, id="agent-StartTask"),
        pytest.param(
            agent_pb.EnqueueSpeculativeRequest(task=_start_task(), speculative_pass=b"p" * 64),
            AGENT_MAX_RECEIVE,
            id="agent-EnqueueSpeculative",
        ),
        pytest.param(apb.GetCandidatesRequest(), AGGREGATOR_MAX_RECEIVE, id="aggregator"),
    ],
)
def test_the_largest_legitimate_request_fits(request_message: Message, limit: int) -> None:
    size = request_message.ByteSize()
    assert size <= limit, f"{size:,} bytes > {limit:,}"
    assert size * 1.5 <= limit or limit == RM_MAX_RECEIVE  # room to spare where it is cheap


def test_the_limits_are_well_below_what_the_probe_sent() -> None:
    # 60 MB submissions grew the RM by GBs; each server now turns them away unread.
    assert max(RM_MAX_RECEIVE, AGENT_MAX_RECEIVE, AGGREGATOR_MAX_RECEIVE) < 8_000_000
