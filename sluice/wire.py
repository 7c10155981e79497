"""Conversions at the wire's edge shared by every service: lifecycle states and resources."""

from __future__ import annotations

from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb

JOB_STATE_TO_PB = {
    JobState.SUBMITTED: pb.JOB_SUBMITTED,
    JobState.STARTING: pb.JOB_STARTING,
    JobState.RUNNING: pb.JOB_RUNNING,
    JobState.SUCCEEDED: pb.JOB_SUCCEEDED,
    JobState.FAILED: pb.JOB_FAILED,
    JobState.KILLED: pb.JOB_KILLED,
}
JOB_STATE_FROM_PB = {v: k for k, v in JOB_STATE_TO_PB.items()}

TASK_STATE_TO_PB = {
    TaskState.PENDING: pb.TASK_PENDING,
    TaskState.LAUNCHING: pb.TASK_LAUNCHING,
    TaskState.RUNNING: pb.TASK_RUNNING,
    TaskState.SUSPENDED: pb.TASK_SUSPENDED,
    TaskState.SUCCEEDED: pb.TASK_SUCCEEDED,
    TaskState.FAILED: pb.TASK_FAILED,
    TaskState.KILLED: pb.TASK_KILLED,
    TaskState.LOST: pb.TASK_LOST,
}
TASK_STATE_FROM_PB = {v: k for k, v in TASK_STATE_TO_PB.items()}


def job_state_name(state: pb.JobState) -> str:
    """'running' for JOB_RUNNING, and so on (for people and JSON output)."""
    return JOB_STATE_FROM_PB[state].value if state in JOB_STATE_FROM_PB else "unknown"


def task_state_name(state: pb.TaskState) -> str:
    return TASK_STATE_FROM_PB[state].value if state in TASK_STATE_FROM_PB else "unknown"


def resources_to_pb(resources: Resources) -> pb.Resources:
    return pb.Resources(cpu=resources.cpu, memory_mb=resources.memory_mb)


def resources_from_pb(message: pb.Resources) -> Resources:
    return Resources(cpu=message.cpu, memory_mb=int(message.memory_mb))
