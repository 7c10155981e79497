"""Benchmark of the simulator (issue 9): how long large runs take, on one core.

Run: .venv/bin/python bench/bench_simulator.py [--skip-large]

* the slot-reservation paper's scale: 1,000 nodes of 4 slots and 8,000 jobs
  (bench/workloads/reservation_scale.yaml, about 123,000 tasks); target <= 60 s on one core;
* 15,000 nodes of 16 cpu and 100,000 tasks (4,000 two-phase jobs of 25 tasks, job masters in
  containers): the time it takes;
* how much skipping idle heartbeats and job master rounds saves, on a small case where the
  results of both runs are compared (they must be identical).

Each run is timed from the first event to the last (the workload generated beforehand); the
simulator's events per second are printed with it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plumbing.gc_tuning import tune_for_large_heaps
from simulator.engine import SimResult, SimSettings, Simulation
from simulator.workload import SimJob, load_workload, parse_workload

HERE = Path(__file__).resolve().parent


def timed(jobs: list[SimJob], settings: SimSettings) -> tuple[SimResult, float]:
    simulation = Simulation(jobs, settings, seed=1)
    start = time.perf_counter()
    result = simulation.run()
    return result, time.perf_counter() - start


def report(label: str, jobs: list[SimJob], result: SimResult, seconds: float) -> None:
    tasks = sum(job.spec.total_tasks() for job in jobs)
    print(
        f"{label}: {len(jobs):,} jobs, {tasks:,} tasks, {result.events:,} events, "
        f"{result.end_time:,.0f} s simulated in {seconds:.1f} s "
        f"({result.events / seconds:,.0f} events/s)",
        flush=True,
    )


def large_workload() -> list[SimJob]:
    document = {
        "classes": [
            {
                "name": "batch",
                "priority": 0,
                "arrival": {"process": "poisson", "rate": 160.0, "count": 4000},
                "phases": [
                    {
                        "name": "map",
                        "tasks": 20,
                        "cpu": 1,
                        "memory_mb": 2048,
                        "duration": {"distribution": "exponential", "mean": 30},
                    },
                    {
                        "name": "reduce",
                        "after": ["map"],
                        "tasks": 5,
                        "cpu": 1,
                        "memory_mb": 2048,
                        "duration": {"distribution": "exponential", "mean": 30},
                    },
                ],
            }
        ]
    }
    return parse_workload(document).generate(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-large", action="store_true", help="skip the 15,000-node run")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    tune_for_large_heaps()
    print(f"os.cpu_count() = {os.cpu_count()}; pinned to one core")

    jobs = load_workload(HERE / "workloads" / "reservation_scale.yaml").generate(1)
    settings = SimSettings(nodes=1000, node_cpu=4, node_memory_mb=16384, client_mode=True)
    result, seconds = timed(jobs, settings)
    report("1,000 nodes x 4 slots (target <= 60 s)", jobs, result, seconds)

    if not args.skip_large:
        jobs = large_workload()
        settings = SimSettings(nodes=15_000, node_cpu=16, node_memory_mb=65536)
        result, seconds = timed(jobs, settings)
        report("15,000 nodes x 16 cpu", jobs, result, seconds)

    small = load_workload(HERE / "workloads" / "reservation_scale.yaml").generate(1)[:300]
    lean, lean_s = timed(small, SimSettings(nodes=40, node_cpu=4, node_memory_mb=16384))
    full, full_s = timed(
        small, SimSettings(nodes=40, node_cpu=4, node_memory_mb=16384, heartbeats="all")
    )
    same = [o.finish_time for o in lean.outcomes] == [o.finish_time for o in full.outcomes]
    print(
        f"skipping idle heartbeats and rounds (300 jobs, 40 nodes): {lean.events:,} events in "
        f"{lean_s:.1f} s against {full.events:,} in {full_s:.1f} s "
        f"({full_s / lean_s:.1f}x); results identical: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
