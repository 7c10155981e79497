"""Benchmark of one preemption decision at scale (issue 11): 15,000 nodes, 100,000 containers.

Run: .venv/bin/python bench/bench_preemption.py [--nodes 15000] [--containers 100000]
     [--jobs 500] [--mode graceful|immediate|kill] [--repeats 200]

It builds, through the core's own entry points (submit, register, allocate, report events),
a cluster of ``--nodes`` nodes (32 cpu, 128 GiB, with swap) filled by ``--jobs`` client-mode
jobs of the ``long`` queue (share 0.05, the given mode), ``--containers`` running task
containers in all (each job with its own progress, so remaining-time estimates differ); the
``short`` queue (share 0.95) is empty.  Then a short job's ask that fits nowhere arrives, and it
times, ``--repeats`` times on that same cluster (each repetition's unit of work rolled back):

* **in a pass**: the short job master's ``Allocate``, whose scheduling pass finds the
  container fits nowhere and has the post-filter decide (the decision, and everything around
  it: the queues' profile, the pending asks, applying the preemptions as container goals);
* **decision alone**: :func:`policies.preemption.cluster.decide` on the queues' view and the
  lazily ordered victims, as the post-filter calls it.

It prints the machine's core count, the build time, and median / p90 / p99 / max of each, and
whether p99 is within the issue's 20 ms.  The store is in memory (the decision reads memory
only; SQLite would only slow the build).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from plumbing.node_protocol import TaskReport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plumbing.gc_tuning import tune_for_large_heaps
from policies.preemption.cluster import decide
from policies.preemption.queues import parse_queue_config
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.jobspec import JobSpec, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.queues import JobVictims
from resource_manager.records import Now
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables

NODE = Resources(32.0, 128 * 1024)
TASK = Resources(4.0, 16 * 1024)  # 8 per node: 100,000 containers fill 12,500 nodes
SHORT = Resources(8.0, 32 * 1024)  # the short job's container: fits nowhere once full
BUDGET_MS = 20.0
T = TypeVar("T")


def spec(name: str, queue: str, tasks: int, size: Resources) -> JobSpec:
    return parse_job_spec(
        {
            "name": name,
            "queue": queue,
            "phases": [
                {
                    "name": "p",
                    "tasks": tasks,
                    "command": ["true"],
                    "resources": {"cpu": size.cpu, "memory_mb": size.memory_mb},
                }
            ],
        }
    )


def build(nodes: int, containers: int, jobs: int, mode: str) -> tuple[ResourceManagerCore, str]:
    queues = parse_queue_config(
        {"queues": {"short": {"share": 0.95}, "long": {"share": 0.05, "mode": mode}}}
    )
    core = ResourceManagerCore(
        Tables(MemoryStore()),
        CoreSettings(node_timeout=1e9, preemption_interval=0.0, max_placements_per_pass=0),
        queues=queues,
    )
    tables = core.tables
    clock = [1.0]

    def unit(action: Callable[..., T]) -> T:
        """``action(now=...)`` as one unit of work, then the passes it made due."""
        tables.begin()
        now = Now(clock[0], clock[0])
        result = action(now=now)
        tables.commit()
        while core.needs_pass:
            tables.begin()
            core.schedule(now)
            tables.commit()
        return result

    for index in range(nodes):
        node_id = f"n{index:05d}"
        unit(
            partial(core.register_node, node_id, f"{node_id}:1", "process", NODE, [], has_swap=True)
        )
    per_job = containers // jobs
    long_jobs = []
    for number in range(jobs):
        job = unit(
            partial(
                core.submit, spec(f"long-{number}", "long", per_job * 2, TASK), client_mode=True
            )
        )
        unit(partial(core.register_master, job.job_id, attempt=1))
        long_jobs.append(job.job_id)
    by_node: dict[str, list[TaskReport]] = {}
    for number, job_id in enumerate(long_jobs):
        clock[0] += 1.0
        granted = unit(partial(core.allocate, job_id, [PhaseAsk("p", per_job, TASK)], [], [], 0))
        # each job done to its own degree, so their remaining times differ
        done = (number * 7) % per_job
        progress = [PhaseProgress("p", per_job * 2, pending=per_job * 2 - done, succeeded=done)]
        unit(partial(core.allocate, job_id, [], [], progress, 0))
        for index, allocation in enumerate(granted.granted):
            by_node.setdefault(allocation.node_id, []).append(
                TaskReport(
                    job_id,
                    f"p-{index}",
                    1,
                    allocation.allocation_id,
                    TaskState.RUNNING,
                    timestamp=clock[0],
                    start_time=clock[0],
                )
            )
    for node_id, reports in by_node.items():
        unit(partial(core.report_events, node_id, reports))
    # Fill what is left (containers granted, no task yet), so the short job's fits nowhere.
    left = nodes * 8 - per_job * jobs
    if left:
        filler = unit(partial(core.submit, spec("filler", "long", left, TASK), client_mode=True))
        unit(partial(core.register_master, filler.job_id, attempt=1))
        unit(partial(core.allocate, filler.job_id, [PhaseAsk("p", left, TASK)], [], [], 0))
    short = unit(partial(core.submit, spec("short", "short", 1, SHORT), client_mode=True))
    unit(partial(core.register_master, short.job_id, attempt=1))
    return core, short.job_id


def percentiles(values: list[float]) -> tuple[float, float, float, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return statistics.median(ordered), at(0.9), at(0.99), ordered[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--mode", choices=["graceful", "immediate", "kill"], default="graceful")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    if args.containers > args.nodes * 8:
        parser.error("--containers: at most 8 per node (32 cpu nodes, 4 cpu containers)")
    tune_for_large_heaps()
    print(f"machine: {os.cpu_count()} cores; store in memory; mode {args.mode}")
    started = time.perf_counter()
    core, short_job = build(args.nodes, args.containers, args.jobs, args.mode)
    running = sum(1 for a in core.allocations.values() if not a.is_master)
    print(
        f"built {args.nodes} nodes, {running} task containers ({args.containers} running) "
        f"of {args.jobs + 1} jobs in {time.perf_counter() - started:.1f} s"
    )
    tables = core.tables
    in_pass: list[float] = []
    alone: list[float] = []
    chosen = 0
    for repeat in range(args.repeats):
        now = Now(1e6 + repeat, 1e6 + repeat)
        tables.begin()
        before = time.perf_counter()
        core.allocate(short_job, [PhaseAsk("p", 1, SHORT)], [], [], 0, now=now)
        in_pass.append((time.perf_counter() - before) * 1000)
        chosen = sum(1 for a in tables.preempted())
        tables.rollback()
        # The decision alone, on the same cluster with the short job's ask pending.
        uses = [
            replace(u, demand=SHORT) if u.spec.name == "short" else u for u in core.queues.uses()
        ]
        victims = JobVictims(tables, core.queues, now.wall)
        before = time.perf_counter()
        decide(tables.capacity.total_capacity, uses, victims, for_queue="short")
        alone.append((time.perf_counter() - before) * 1000)
    print(f"each decision preempted {chosen} containers")
    print(f"{'':<16}{'median':>10}{'p90':>10}{'p99':>10}{'max':>10}   (ms)")
    for label, values in (("in a pass", in_pass), ("decision alone", alone)):
        median, p90, p99, worst = percentiles(values)
        print(f"{label:<16}{median:>10.2f}{p90:>10.2f}{p99:>10.2f}{worst:>10.2f}")
    p99 = percentiles(in_pass)[2]
    verdict = "within" if p99 <= BUDGET_MS else "OVER"
    print(f"p99 of a decision in its pass: {p99:.2f} ms, {verdict} the {BUDGET_MS:g} ms budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
