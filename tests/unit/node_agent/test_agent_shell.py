"""The agent as the shell of its core: the runtime calls that carry out a preemption or a
sprint, in order (a cut and a step write CPU first, then memory; a swap that grows freezes; a
memory write the kernel refuses keeps the memory)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import pytest

from node_agent.agent import AgentConfig, NodeAgent
from node_agent.core import SwapPresence
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    RuntimeError_,
    TaskLaunch,
    TaskRuntime,
    TaskUsage,
)
from policies.scheduling.resources import Resources

Call = tuple[str, ...]


@dataclass
class ScriptedRuntime:
    """Runs tasks in memory and records every call; a memory write may be refused, and a task's
    swap grows by ``swap_per_memory_cut`` bytes at each memory cut."""

    calls: list[Call] = field(default_factory=list)
    launches: dict[str, TaskLaunch] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)
    swap: dict[str, int] = field(default_factory=dict)
    swap_per_memory_cut: int = 0
    refuse_memory: bool = False

    def start(self, launch: TaskLaunch) -> None:
        self.launches[launch.task_key] = launch

    def observe(self) -> Sequence[RunObservation]:
        return [
            RunObservation(
                task_key=key,
                job_id=launch.job_id,
                task_id=launch.task_id,
                attempt=launch.attempt,
                allocation_id=launch.allocation_id,
                state=RunState.SUSPENDED if key in self.frozen else RunState.RUNNING,
                limits=launch.limits,
            )
            for key, launch in self.launches.items()
        ]

    def usage(self, key: str) -> TaskUsage:
        return TaskUsage(cpu_seconds=0.0, memory_bytes=0)

    def resize(self, key: str, limits: ResourceLimits) -> None:
        before = self.launches[key].limits
        if limits.memory_mb < before.memory_mb:
            if self.refuse_memory:
                raise RuntimeError_("memory.limit_in_bytes: device or resource busy")
            self.swap[key] = self.swap.get(key, 0) + self.swap_per_memory_cut
        self.launches[key] = replace(self.launches[key], limits=limits)
        self.calls.append(("resize", key, f"{limits.cpu:g}", str(limits.memory_mb)))

    def suspend(self, key: str) -> None:
        self.frozen.add(key)
        self.calls.append(("suspend", key))

    def resume(self, key: str) -> None:
        self.frozen.discard(key)
        self.calls.append(("resume", key))

    def swap_bytes(self, key: str) -> int | None:
        return self.swap.get(key, 0)


KEY = "j.p-0.1"


def agent_with_task(tmp_path: Path, runtime: ScriptedRuntime) -> NodeAgent:
    config = AgentConfig(
        node_id="n1",
        cpu_ids=(0, 1, 2, 3),
        capacity=Resources(4.0, 8192),
        cpufreq_root=tmp_path / "no-cpufreq",  # sprints by CPU quota
    )
    agent = NodeAgent(config, cast(TaskRuntime, runtime))
    agent.core.handle(SwapPresence(True), 0.0)  # (not this machine's /proc/swaps)
    agent.start_task("j", "p-0", 1, "a1", ["true"], Resources(2.0, 4096), None)
    return agent


def resize(cpu: str, memory: str) -> Call:
    return ("resize", KEY, cpu, memory)


@pytest.mark.parametrize(
    ("swap_per_cut", "expected"),
    [
        # Two rounds, CPU then memory each; the second reaches the target: over.
        (
            0,
            [
                resize("1.5", "4096"),
                resize("1.5", "3072"),
                resize("1", "3072"),
                resize("1", "2048"),
            ],
        ),
        # Its swap grows at the first memory cut: frozen there.
        (1 << 22, [resize("1.5", "4096"), resize("1.5", "3072"), ("suspend", KEY)]),
    ],
)
def test_a_graceful_preemption_steps_cpu_then_memory_and_freezes_a_swapping_task(
    tmp_path: Path, swap_per_cut: int, expected: list[Call]
) -> None:
    runtime = ScriptedRuntime(swap_per_memory_cut=swap_per_cut)
    agent = agent_with_task(tmp_path, runtime)
    target, step = Resources(1.0, 2048), Resources(0.5, 1024)
    agent.resize_allocation("j", "a1", target, step, freeze_on_swap=True)
    for _ in range(4):
        agent.preemption_round()
    assert runtime.calls == expected
    assert not agent.core.shrinking(KEY)


def test_an_immediate_preemption_freezes_then_cuts_and_a_refused_memory_cut_keeps_it(
    tmp_path: Path,
) -> None:
    runtime = ScriptedRuntime(refuse_memory=True)
    agent = agent_with_task(tmp_path, runtime)
    assert agent.suspend_allocation("j", "a1", "preempted", Resources(0.1, 256)) == 1
    assert runtime.calls == [("suspend", KEY), resize("0.1", "4096")]  # the memory stays
    runtime.calls.clear()
    agent.resume_allocation("j", "a1", Resources(2.0, 4096))
    assert runtime.calls == [resize("2", "4096"), ("resume", KEY)]


def test_a_cpu_quota_sprint_is_applied_and_undone(tmp_path: Path) -> None:
    runtime = ScriptedRuntime()
    agent = agent_with_task(tmp_path, runtime)
    agent.sprint_allocation("j", "a1", 2.0)
    agent.sprint_allocation("j", "a1", 2.0)  # again: nothing more
    assert runtime.calls == [resize("4", "4096")]  # the two idle cores
    assert agent.event_for(agent.observations()[0]).limits == Resources(2.0, 4096)
    agent.sprint_allocation("j", "a1", 1.0)
    assert runtime.calls[-1] == resize("2", "4096") and agent.core.factor_of(KEY) == 1.0
