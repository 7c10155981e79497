"""The simulator and the node agent read the RM's commands the same way: a preemption kill is
the typed ``StopAllocation.preempted`` the RM's core sets (plumbing/node_protocol.py), which the
simulator dispatches on and the agent receives unchanged over the wire (plumbing/node_wire.py);
no side decides by the reason's text."""

from __future__ import annotations

import dataclasses

from plumbing.node_protocol import NodeCommand, StopAllocation
from plumbing.node_wire import command_from_pb, command_to_pb
from policies.scheduling.framework import baseline_profile
from resource_manager.core import ResourceManagerCore
from simulator.engine import SimSettings, Simulation
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.unit.simulator.test_engine import _KillLowerPriority, job_class, jobs_of, workload


class _Recording(Simulation):
    """A simulation that records every stop its nodes are sent, and the tasks it kills as a
    preemption (losing their work)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.stops: list[StopAllocation] = []
        self.killed: set[str] = set()
        core: ResourceManagerCore = self.core
        heartbeat = core.heartbeat

        def recorded(*args: object, **kwargs: object) -> tuple[bool, list[NodeCommand]]:
            reregister, commands = heartbeat(*args, **kwargs)  # type: ignore[arg-type]
            self.stops.extend(c for c in commands if isinstance(c, StopAllocation))
            return reregister, commands

        core.heartbeat = recorded  # type: ignore[method-assign]

    def kill_task(self, allocation_id: str, reason: str) -> None:
        self.killed.add(allocation_id)
        super().kill_task(allocation_id, reason)


def agent_reads(command: NodeCommand) -> NodeCommand | None:
    """The command as the node agent's daemon parses it from the heartbeat answer's bytes."""
    message = command_to_pb(command).SerializeToString()
    return command_from_pb(rm_pb.NodeCommand.FromString(message))


def test_a_preemption_kill_is_the_typed_field_for_the_simulator_and_the_agent() -> None:
    low = job_class(
        "low",
        count=1,
        rate=10.0,
        phases=[{"name": "p", "tasks": 2, "cpu": 2, "memory_mb": 100, "duration": 50}],
    )
    high = job_class(
        "high",
        count=1,
        priority=5,
        phases=[{"name": "p", "tasks": 1, "cpu": 2, "memory_mb": 100, "duration": 10}],
    )
    high["arrival"] = {"process": "fixed", "times": [20.0]}
    plugin = _KillLowerPriority()
    profile = dataclasses.replace(baseline_profile(), post_filters=(plugin,))
    simulation = _Recording(
        jobs_of(workload(low, high)), SimSettings(nodes=1, node_cpu=4), seed=1, profile=profile
    )
    plugin.simulation = simulation
    simulation.run()

    preempted = {s.allocation_id for s in simulation.stops if s.preempted}
    assert preempted, "the scenario must preempt by killing"
    assert simulation.killed == preempted  # the simulator kills exactly what the core marked
    for stop in simulation.stops:
        assert agent_reads(stop) == stop  # the agent gets the same field over the wire
