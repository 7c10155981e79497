"""Which host CPUs a task may run on: a node-local decision of the node agent.

The invariant the choice keeps: for every set of pinned tasks, the CPU granted to them fits in
the union of their cpusets.  Equivalently (Hall's theorem), each task's grant can be spread over
the cores of its cpuset so that no core carries more than one CPU: the kernel can then give
every task its grant.  :func:`choose_cpuset` keeps it whenever the grants fit the node; a grant
that no longer fits anywhere (the node's grants exceed its cores) is not pinned at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

_EPS = 1e-9


class Pinned(NamedTuple):
    """A live task's pinning: its cpuset (empty: all of the node's CPUs) and its granted CPU."""

    cpuset: Sequence[int]
    cpu: float


def choose_cpuset(
    node_cpus: Sequence[int], pinned: Mapping[str, Pinned], cpu: float
) -> tuple[int, ...]:
    """The CPUs of ``node_cpus`` to pin a new task granted ``cpu`` to, given the live tasks.

    ``pinned`` maps each live task to its cpuset and grant (CPUs outside the node are ignored; an
    empty or foreign-only cpuset means the whole node).  The answer keeps the invariant of the
    module docstring, and is the smallest set (at least ``ceil(cpu)`` CPUs, one for a fraction)
    of the CPUs with the most spare capacity, the fewest tasks pinned and the lowest id first:
    the spare capacity is what a spread of the live tasks' grants (a max flow) leaves on each
    core.  The CFS quota, not the cpuset, enforces fractions: two 0.5-cpu tasks may share a core.
    If the grant fits in no set, the answer is every CPU of the node (not pinned).  Pure and
    deterministic; never more CPUs than the node has.
    """
    cores = sorted(set(node_cpus))
    if not cores:
        return ()
    tasks = [(_within(p.cpuset, cores), max(0.0, p.cpu)) for _, p in sorted(pinned.items())]
    spare = _spare(cores, tasks)
    count = {c: sum(c in cpuset for cpuset, _ in tasks) for c in cores}
    order = sorted(cores, key=lambda c: (-round(spare[c], 6), count[c], c))
    wanted = min(len(cores), max(1, math.ceil(cpu - _EPS)))
    enough = wanted  # the shortest prefix of ``order`` whose spare capacity holds the grant
    while enough <= len(cores) and sum(spare[c] for c in order[:enough]) < cpu - _EPS:
        enough += 1
    if enough > len(cores):
        return tuple(cores)  # it fits nowhere: not pinned
    # The spread behind ``spare`` is one of many: a shorter prefix may fit once the live tasks'
    # grants are spread differently (checked exactly).
    for size in range(wanted, enough):
        candidate = order[:size]
        if _fits([*tasks, (frozenset(candidate), cpu)], cores):
            return tuple(sorted(candidate))
    return tuple(sorted(order[:enough]))


def fits(node_cpus: Sequence[int], pinned: Mapping[str, Pinned]) -> bool:
    """Whether the invariant holds: every task's grant can be spread over its cpuset's cores
    with no core carrying more than one CPU."""
    cores = sorted(set(node_cpus))
    tasks = [(_within(p.cpuset, cores), max(0.0, p.cpu)) for _, p in sorted(pinned.items())]
    return _fits(tasks, cores)


def _within(cpuset: Sequence[int], cores: Sequence[int]) -> frozenset[int]:
    inside = frozenset(cpuset) & frozenset(cores)
    return inside or frozenset(cores)


def _fits(tasks: Sequence[tuple[frozenset[int], float]], cores: Sequence[int]) -> bool:
    load = _route(cores, tasks)
    routed = sum(load.values())
    return routed >= sum(cpu for _, cpu in tasks) - _EPS * (1 + len(tasks))


def _spare(cores: Sequence[int], tasks: Sequence[tuple[frozenset[int], float]]) -> dict[int, float]:
    load = _route(cores, tasks)
    return {c: max(0.0, 1.0 - load[c]) for c in cores}


def _route(cores: Sequence[int], tasks: Sequence[tuple[frozenset[int], float]]) -> dict[int, float]:
    """A maximum flow of the tasks' grants onto their cores (capacity one CPU each), by
    augmenting paths; the load it puts on each core.  Tasks are routed in order, each onto the
    lowest free cores of its set first, so spare capacity stays together on the other cores."""
    flow: list[dict[int, float]] = [{} for _ in tasks]  # task -> core -> CPU routed there
    load = dict.fromkeys(cores, 0.0)
    for index, (_, demand) in enumerate(tasks):
        left = demand
        while left > _EPS:
            path = _augmenting_path(index, tasks, flow, load)
            if path is None:
                break  # this task's grant does not fit with the others'
            core, steps = path
            amount = min(left, 1.0 - load[core])
            for task, from_core, _to_core in steps:
                if from_core is not None:
                    amount = min(amount, flow[task][from_core])
            for task, from_core, to_core in steps:
                flow[task][to_core] = flow[task].get(to_core, 0.0) + amount
                if from_core is not None:
                    flow[task][from_core] -= amount
                    if flow[task][from_core] <= _EPS:
                        del flow[task][from_core]
            load[core] += amount
            left -= amount
    return load


def _augmenting_path(
    start: int,
    tasks: Sequence[tuple[frozenset[int], float]],
    flow: Sequence[Mapping[int, float]],
    load: Mapping[int, float],
) -> tuple[int, list[tuple[int, int | None, int]]] | None:
    """A shortest path from task ``start`` to a core with room: each step moves some of one
    task's CPU from one of its cores (None for the start) to another.  Breadth-first over cores
    in id order, so the result is deterministic."""
    reached: dict[int, tuple[int, int | None]] = {}  # core -> (task that moves onto it, from)
    frontier: list[tuple[int, int | None]] = [(start, None)]
    while frontier:
        following: list[tuple[int, int | None]] = []
        for task, from_core in frontier:
            for core in sorted(tasks[task][0]):
                if core in reached or core == from_core:
                    continue
                reached[core] = (task, from_core)
                if load[core] < 1.0 - _EPS:
                    return core, _steps(core, reached)
                for other, routed in enumerate(flow):
                    if other != task and routed.get(core, 0.0) > _EPS:
                        following.append((other, core))
        frontier = following
    return None


def _steps(
    core: int, reached: Mapping[int, tuple[int, int | None]]
) -> list[tuple[int, int | None, int]]:
    steps: list[tuple[int, int | None, int]] = []
    at: int | None = core
    while at is not None:
        task, from_core = reached[at]
        steps.append((task, from_core, at))
        at = from_core
    return steps
