"""Benchmark of DiAS's costs (issue 14): buffered dispatch, the sprint budget, task dropping.

Run: .venv/bin/python bench/bench_dias.py [--nodes 15000] [--waiting 2000] [--repeat 200]

On a core of ``--nodes`` nodes (16 cpu, 64 GiB) with ``--waiting`` jobs in the buffers and 100
in execution, every call one unit of work over the in-memory store, it times:

* **submit**: one submission into the buffers, p50/p99, under ``--dispatch dias`` and under the
  default ``priority`` (the ratio is the cost of the buffers);
* **pass**: one scheduling pass while the waiting jobs' job masters are held back by the
  permit, p50/p99 (the permit is shape-only: a held-back master costs O(1));
* **heartbeat**: a node reporting 16 running tasks, nothing changed, with sprinting configured
  and without (the sprint budget's fast path);
* **drop**: a job master's plan for a job with a droppable phase of 10,000 tasks at θ = 0.2
  (choosing the kept subset), against one without dropping.

It prints the machine's core count; figures are medians and p99s of per-call wall times, and
the ratios are measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from plumbing.node_protocol import TaskReport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from job_master.plan import JobPlan
from policies.approximation.dias_config import DiasConfig, PriorityPolicy
from policies.approximation.dispatch import DispatchMode
from policies.scheduling.jobspec import JobSpec, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables

T = TypeVar("T")
NODE = Resources(16.0, 64 * 1024)
SPRINTING = DiasConfig(priorities=(PriorityPolicy(5, sprint_timeout_s=60.0),))


def spec(priority: int, tasks: int = 4, droppable: bool = False) -> JobSpec:
    phase = {
        "name": "map",
        "tasks": tasks,
        "command": ["true"],
        "resources": {"cpu": 1, "memory_mb": 1024},
        "droppable": droppable,
    }
    return parse_job_spec({"name": "bench", "priority": priority, "phases": [phase]})


class Core:
    def __init__(self, nodes: int, settings: CoreSettings) -> None:
        self.core = ResourceManagerCore(Tables(MemoryStore()), settings)
        self.clock = 1.0
        for index in range(nodes):
            self.register(f"n{index:05d}")

    def register(self, node_id: str) -> None:
        self.unit(
            lambda core, now: core.register_node(
                node_id, f"{node_id}:1", "process", NODE, [], now=now
            )
        )

    def submit(self, priority: int) -> None:
        self.unit(lambda core, now: core.submit(spec(priority), client_mode=False, now=now))

    def unit(self, action: Callable[[ResourceManagerCore, Now], T]) -> T:
        self.clock += 0.001
        now = Now(self.clock, self.clock)
        tables = self.core.tables
        tables.begin()
        result = action(self.core, now)
        tables.commit()
        return result

    def schedule(self) -> float:
        started = time.perf_counter()
        self.unit(lambda core, now: core.schedule(now))
        return time.perf_counter() - started


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def submissions(nodes: int, waiting: int, repeat: int, mode: DispatchMode) -> list[float]:
    bench = Core(nodes, CoreSettings(dispatch=mode, max_running_jobs=100, node_timeout=1e9))
    for index in range(waiting):
        bench.submit(index % 3)
        if index % 500 == 0:
            bench.schedule()
    bench.schedule()
    return timed(lambda: bench.submit(1), repeat)


def passes(nodes: int, waiting: int, repeat: int) -> list[float]:
    bench = Core(nodes, CoreSettings(dispatch=DispatchMode.DIAS, max_running_jobs=100))
    for index in range(waiting):
        bench.submit(index % 3)
    bench.schedule()
    times = []
    for _ in range(repeat):
        bench.core.state.asks_grew = True  # (a pass as one after a change would run)
        times.append(bench.schedule())
    return times


def heartbeats(nodes: int, repeat: int, dias: DiasConfig) -> list[float]:
    bench = Core(nodes, CoreSettings(dias=dias, node_timeout=1e9))
    job = bench.unit(lambda core, now: core.submit(spec(5, 16), client_mode=True, now=now))
    bench.unit(lambda core, now: core.register_master(job.job_id, attempt=1, now=now))
    from policies.scheduling.asks import PhaseAsk

    granted = bench.unit(
        lambda core, now: core.allocate(
            job.job_id, [PhaseAsk("map", 16, Resources(1.0, 1024))], [], [], 0, now=now
        )
    ).granted
    node = granted[0].node_id
    live = [
        TaskReport(job.job_id, f"map-{i}", 1, a.allocation_id, TaskState.RUNNING)
        for i, a in enumerate(granted)
        if a.node_id == node
    ]
    bench.unit(lambda core, now: core.report_events(node, live, now=now))
    return timed(
        lambda: bench.unit(lambda core, now: core.heartbeat(node, Resources(), live, now=now)),
        repeat,
    )


def plans(repeat: int, droppable: bool) -> list[float]:
    job = spec(0, 10_000, droppable=droppable)
    theta = 0.2 if droppable else 0.0
    return timed(lambda: JobPlan(job, now=0.0, drop_ratio=theta, drop_seed="job-1"), repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--waiting", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; {args.nodes:,} nodes, {args.waiting:,} jobs waiting")
    dias = submissions(args.nodes, args.waiting, args.repeat, DispatchMode.DIAS)
    plain = submissions(args.nodes, args.waiting, args.repeat, DispatchMode.PRIORITY)
    ratio = statistics.median(dias) / statistics.median(plain)
    print(
        f"submit    dias p50 {p(dias, 0.5):.3f} ms p99 {p(dias, 0.99):.3f} ms | priority p50 "
        f"{p(plain, 0.5):.3f} ms p99 {p(plain, 0.99):.3f} ms | ratio {ratio:.2f}"
    )
    held = passes(args.nodes, args.waiting, args.repeat)
    print(
        f"pass      {args.waiting:,} masters held back: p50 {p(held, 0.5):.3f} ms "
        f"p99 {p(held, 0.99):.3f} ms"
    )
    sprint = heartbeats(args.nodes, args.repeat * 5, SPRINTING)
    none = heartbeats(args.nodes, args.repeat * 5, DiasConfig())
    ratio = statistics.median(sprint) / statistics.median(none)
    print(
        f"heartbeat sprinting configured p50 {p(sprint, 0.5):.3f} ms p99 {p(sprint, 0.99):.3f} ms "
        f"| not p50 {p(none, 0.5):.3f} ms | ratio {ratio:.2f}"
    )
    dropping = plans(max(5, args.repeat // 20), droppable=True)
    whole = plans(max(5, args.repeat // 20), droppable=False)
    ratio = statistics.median(dropping) / statistics.median(whole)
    print(
        f"drop      plan of 10,000 tasks at θ 0.2: p50 {p(dropping, 0.5):.1f} ms | without "
        f"dropping {p(whole, 0.5):.1f} ms | ratio {ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
