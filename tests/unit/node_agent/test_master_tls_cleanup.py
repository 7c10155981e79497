"""A job master's TLS directory (its private key) leaves the node when the job master ends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from node_agent.agent import MASTER_TASK_ID, AgentConfig, NodeAgent, task_key
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    TaskRuntime,
    TaskUsage,
)
from policies.scheduling.resources import Resources


@dataclass
class Masters:
    """Job masters in given states (a runtime seen from the agent)."""

    states: dict[tuple[str, int], RunState] = field(default_factory=dict)

    def observe(self) -> Sequence[RunObservation]:
        return [
            RunObservation(
                task_key=task_key(job, MASTER_TASK_ID, attempt),
                job_id=job,
                task_id=MASTER_TASK_ID,
                attempt=attempt,
                allocation_id=f"{job}-m",
                state=state,
                limits=ResourceLimits(0.5, 256, (0,)),
                finished_at=None if state is not RunState.EXITED else 1.0,
            )
            for (job, attempt), state in self.states.items()
        ]

    def usage(self, key: str) -> TaskUsage:
        return TaskUsage(cpu_seconds=0.0, memory_bytes=0)

    def forget(self, key: str) -> None:
        pass


def _agent(root: Path, masters: Masters) -> NodeAgent:
    config = AgentConfig(
        node_id="n1",
        cpu_ids=(0,),
        capacity=Resources(1.0, 1024),
        ca_pem=b"ca",
        masters_tls_root=root,
    )
    return NodeAgent(config, cast(TaskRuntime, masters))


def test_an_exited_job_masters_directory_is_removed_and_a_running_ones_kept(tmp_path: Path):
    for name in ("job-1-1", "job-2-1", "job-3-1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tls.key").write_text("secret")
    masters = Masters({("job-1", 1): RunState.RUNNING, ("job-2", 1): RunState.RUNNING})
    agent = _agent(tmp_path, masters)  # job-3's master is gone: swept at start
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job-1-1", "job-2-1"]
    masters.states[("job-2", 1)] = RunState.EXITED
    agent.monitor_once(2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job-1-1"]
