"""Benchmark of the resource manager's core in process (issue 9): grants, passes, heartbeats.

Run: .venv/bin/python bench/bench_core.py [--nodes 1000 5000 15000] [--jobs 500] [--store sqlite]

For each cluster size (nodes of 16 cpu and 64 GiB) it submits ``--jobs`` client-mode jobs, each
wanting 1-cpu containers enough to fill the cluster twice over (so asks stay pending), and drives
the core as the gRPC service does, every call one unit of work over a real SQLite store:

* **fill**: each job master asks for everything (``Allocate``, which runs the pass its grown
  asks made due) until the cluster is full: sustained grants per second;
* **churn**: job masters give back a few containers and ask again, round after round, as tasks
  end: grants per second, and the p50/p99 of one ``Allocate`` and of one scheduling pass;
* **heartbeats**: a node reporting its 16 running tasks, nothing changed: p50/p99;
* **nothing fits**: a heartbeat while 500 jobs' asks fit nowhere, to show it costs nothing more.

It pins itself to one core (the target is on one core) and prints the machine's core count.
Figures are medians and percentiles of per-call wall times measured in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from plumbing.node_protocol import TaskReport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plumbing.gc_tuning import tune_for_large_heaps
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import Plan
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from resource_manager import masters, scheduling
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now
from resource_manager.shell import PassDue, RMShell
from resource_manager.sqlite_store import SqliteStore
from resource_manager.state import CoreState
from resource_manager.store import MemoryStore, Store
from resource_manager.tables import Tables

T = TypeVar("T")
NODE = Resources(16.0, 64 * 1024)
TASK = Resources(1.0, 1024)


@dataclass
class Figures:
    nodes: int
    fill_grants_per_s: float
    churn_grants_per_s: float
    allocate_p50_ms: float
    allocate_p99_ms: float
    pass_p50_ms: float
    pass_p99_ms: float
    heartbeat_p50_ms: float
    heartbeat_p99_ms: float
    blocked_heartbeat_p99_ms: float


class Driver:
    """Calls the core as the service does: each call one unit of work, timed."""

    def __init__(self, store: Store, nodes: int) -> None:
        self.core = ResourceManagerCore(Tables(store), CoreSettings(node_timeout=1e9))
        self.shell = RMShell(self.core)
        self.clock = 0.0
        self.pass_times: list[float] = []
        self.placed = 0
        self._nodes = nodes

        def timed_schedule(state: CoreState, now: Now) -> Plan:  # every pass
            start = time.perf_counter()
            plan = scheduling.schedule(state, now)
            if plan.placements:
                self.pass_times.append(time.perf_counter() - start)
            return plan

        masters.schedule = timed_schedule  # type: ignore[attr-defined]  # (passes in Allocate)
        self.core.schedule = lambda now: timed_schedule(self.core.state, now)  # type: ignore[method-assign]

    def now(self) -> Now:
        self.clock += 0.001
        return Now(self.clock, self.clock)

    def unit(self, action: Callable[[ResourceManagerCore, Now], T]) -> tuple[T, float]:
        """One unit through the RM's one shell, as the service runs it (its effects included);
        then the passes it made due, each a unit of its own (the service's timer)."""
        start = time.perf_counter()
        outcome = self.shell.run(action, self.now())
        elapsed = time.perf_counter() - start
        effects = outcome.effects
        self.placed += len(effects.placed)
        while effects.pass_due is not PassDue.NO:
            effects = self.shell.schedule(self.now()).effects
            self.placed += len(effects.placed)
        return outcome.result, elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run(nodes: int, jobs: int, store_kind: str) -> Figures:
    with _store(store_kind) as store:
        driver = Driver(store, nodes)
        for n in range(nodes):
            driver.unit(
                lambda core, now, n=n: core.register_node(  # type: ignore[misc]
                    f"node-{n:05d}", f"10.0.{n // 250}.{n % 250}:7000", "process", NODE, [], now=now
                )
            )
        slots = nodes * int(NODE.cpu / TASK.cpu)
        per_job = min(100_000, max(1, 2 * slots // jobs))
        spec = parse_job_spec(
            {
                "name": "bench",
                "priority": 0,
                "phases": [
                    {
                        "name": "p",
                        "tasks": per_job,
                        "command": ["true"],
                        "resources": {"cpu": TASK.cpu, "memory_mb": TASK.memory_mb},
                    }
                ],
            }
        )
        job_ids = []
        for _ in range(jobs):
            job, _ = driver.unit(lambda core, now: core.submit(spec, client_mode=True, now=now))
            driver.unit(lambda core, now, j=job.job_id: core.register_master(j, attempt=1, now=now))  # type: ignore[misc]
            job_ids.append(job.job_id)
        held: dict[str, list[str]] = {j: [] for j in job_ids}
        events_after = dict.fromkeys(job_ids, 0)

        def allocate(job_id: str, count: int, releases: list[str]) -> tuple[int, float]:
            result, elapsed = driver.unit(
                lambda core, now: core.allocate(
                    job_id,
                    [PhaseAsk("p", count, TASK)] if count else [],
                    releases,
                    [],
                    events_after[job_id],
                    now=now,
                )
            )
            held[job_id].extend(a.allocation_id for a in result.granted)
            return len(result.granted), elapsed

        # fill: every job asks for all it can use; Allocate's pass places what fits
        driver.pass_times.clear()
        driver.placed = 0
        start = time.perf_counter()
        for job_id in job_ids:
            allocate(job_id, per_job, [])
        fill_rate = driver.placed / (time.perf_counter() - start)
        for job_id in job_ids:  # grants other jobs' passes made, delivered now
            allocate(job_id, per_job - len(held[job_id]), [])

        # churn: rounds of "4 containers back, ask again", the grants going to the next jobs
        driver.pass_times.clear()
        driver.placed = 0
        allocate_times: list[float] = []
        churn_elapsed = 0.0
        rounds = 4 * jobs
        for r in range(rounds):
            job_id = job_ids[r % jobs]
            back, held[job_id] = held[job_id][:4], held[job_id][4:]
            want = per_job - len(held[job_id])
            _, elapsed = allocate(job_id, want, back)
            allocate_times.append(elapsed)
            churn_elapsed += elapsed
        churn_pass_times = list(driver.pass_times)

        # heartbeats of nodes with 16 running tasks, nothing changed
        sample = [f"node-{n:05d}" for n in range(0, nodes, max(1, nodes // 200))]
        live = {node_id: _running_tasks(driver, node_id) for node_id in sample}
        heartbeat_times = []
        for _ in range(5):
            for node_id in sample:
                _, elapsed = driver.unit(
                    lambda core, now, n=node_id: core.heartbeat(n, Resources(), live[n], now=now)  # type: ignore[misc]
                )
                heartbeat_times.append(elapsed)
        blocked_times = []
        for node_id in sample:  # every job still asks for containers that fit nowhere
            _, elapsed = driver.unit(
                lambda core, now, n=node_id: core.heartbeat(n, Resources(), live[n], now=now)  # type: ignore[misc]
            )
            blocked_times.append(elapsed)
        return Figures(
            nodes=nodes,
            fill_grants_per_s=fill_rate,
            churn_grants_per_s=driver.placed / churn_elapsed if churn_elapsed else 0.0,
            allocate_p50_ms=statistics.median(allocate_times) * 1000,
            allocate_p99_ms=percentile(allocate_times, 0.99),
            pass_p50_ms=statistics.median(churn_pass_times) * 1000 if churn_pass_times else 0.0,
            pass_p99_ms=percentile(churn_pass_times, 0.99) if churn_pass_times else 0.0,
            heartbeat_p50_ms=statistics.median(heartbeat_times) * 1000,
            heartbeat_p99_ms=percentile(heartbeat_times, 0.99),
            blocked_heartbeat_p99_ms=percentile(blocked_times, 0.99),
        )


def _running_tasks(driver: Driver, node_id: str) -> list[TaskReport]:
    """Start a task in each container on the node (reported once), and return what the node
    reports at every heartbeat from then on."""
    reports = [
        TaskReport(a.job_id, f"p-{a.allocation_id}", 1, a.allocation_id, TaskState.RUNNING)
        for a in driver.core.tables.allocations_of_node(node_id)
    ]
    driver.unit(lambda core, now: core.report_events(node_id, reports, now=now))
    return reports


@contextlib.contextmanager
def _store(kind: str) -> Iterator[Store]:
    if kind == "memory":
        yield MemoryStore()
        return
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as directory:
        store = SqliteStore(Path(directory) / "rm.sqlite3")
        try:
            yield store
        finally:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 15000])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    parser.add_argument(
        "--default-gc", action="store_true", help="keep CPython's collector settings"
    )
    args = parser.parse_args()
    if not args.default_gc:
        tune_for_large_heaps()  # as `sluice rm` does
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print(
        f"os.cpu_count() = {os.cpu_count()}; pinned to one core: {not args.all_cores}; "
        f"{args.jobs} jobs of 1-cpu containers on nodes of 16 cpu / 64 GiB; store {args.store}; "
        f"gc {'default' if args.default_gc else 'tuned (plumbing/gc_tuning.py)'}"
    )
    header = (
        f"{'nodes':>6} {'fill grants/s':>14} {'churn grants/s':>15} {'Allocate p50/p99 ms':>20} "
        f"{'pass p50/p99 ms':>16} {'heartbeat p50/p99 ms':>21} {'hb, asks blocked p99':>21}"
    )
    print(header)
    for nodes in args.nodes:
        f = run(nodes, args.jobs, args.store)
        print(
            f"{f.nodes:>6} {f.fill_grants_per_s:>14,.0f} {f.churn_grants_per_s:>15,.0f} "
            f"{f.allocate_p50_ms:>9.2f} / {f.allocate_p99_ms:<8.2f} "
            f"{f.pass_p50_ms:>7.2f} / {f.pass_p99_ms:<6.2f} "
            f"{f.heartbeat_p50_ms:>9.3f} / {f.heartbeat_p99_ms:<9.3f} "
            f"{f.blocked_heartbeat_p99_ms:>15.3f} ms",
            flush=True,
        )
    print(
        "targets (issue 9, 15,000 nodes, one core): grants >= 10,000/s; "
        "a heartbeat that changes nothing <= 0.2 ms p99"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
