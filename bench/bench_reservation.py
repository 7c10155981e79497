"""What speculative slot reservation costs (issue 12): the RM's side at 15,000 nodes, and the
job master's.

Run: .venv/bin/python bench/bench_reservation.py [--nodes 15000] [--jobs 2000] [--repeats 200]

The RM (its core, the store in memory, through the entry points the services use): a cluster
of ``--nodes`` nodes of 4 cpu (the paper's four slots), ``--jobs`` high-priority two-phase jobs
holding 8 containers each, half of them keeping all 8 for their downstream phase (with
deadlines), and a filler job in every other slot.  Timed, each unit of work rolled back:

* **report kept**: a job master's Allocate reporting 8 containers kept at its barrier;
* **plain Allocate**: the same Allocate reporting nothing (the ratio is the report's cost);
* **override**: an ask of a higher priority that fits nowhere: its pass, whose post-filter
  takes kept containers back (Alg. 1, TryAllocateTask), and the preemptions applied;
* **preferred nodes**: on a cluster with room, an ask naming 8 preferred nodes, against the
  same ask naming none (the locality lookup).

The job master: one phase of ``--tasks`` tasks, each finishing in turn (a report, then a
round's decide), with and without a ``reservation`` (the keeping, the deadline's refits and
the copies' planning), as the ratio of the two.

It prints the machine's core count, and median / p90 / p99 of each (ms, or µs per task).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from plumbing.node_protocol import TaskReport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from job_master.plan import Container, JobPlan
from plumbing.gc_tuning import tune_for_large_heaps
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.jobspec import JobSpec, ReservationSpec, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import KeptSlot, Now
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables

NODE = Resources(4.0, 16 * 1024)
SLOT = Resources(1.0, 4 * 1024)
PER_JOB = 8
T = TypeVar("T")


def spec(name: str, priority: int, tasks: int, phases: int = 2) -> JobSpec:
    return parse_job_spec(
        {
            "name": name,
            "priority": priority,
            "phases": [
                {
                    "name": f"p{index}",
                    "tasks": tasks,
                    "command": ["true"],
                    "resources": {"cpu": SLOT.cpu, "memory_mb": SLOT.memory_mb},
                    **({"after": [f"p{index - 1}"]} if index else {}),
                }
                for index in range(phases)
            ],
        }
    )


class Cluster:
    """A core and a clock; ``unit`` runs one unit of work and the passes it made due."""

    def __init__(self, nodes: int) -> None:
        self.core = ResourceManagerCore(
            Tables(MemoryStore()), CoreSettings(node_timeout=1e9, max_placements_per_pass=0)
        )
        self.clock = 1.0
        for index in range(nodes):
            node_id = f"n{index:05d}"
            self.unit(
                partial(self.core.register_node, node_id, f"{node_id}:1", "process", NODE, [])
            )

    def unit(self, action: Callable[..., T]) -> T:
        tables = self.core.tables
        tables.begin()
        now = Now(self.clock, self.clock)
        result = action(now=now)
        tables.commit()
        while self.core.needs_pass:
            tables.begin()
            self.core.schedule(now)
            tables.commit()
        return result

    def job(self, name: str, priority: int, tasks: int) -> str:
        record = self.unit(partial(self.core.submit, spec(name, priority, tasks), client_mode=True))
        self.unit(partial(self.core.register_master, record.job_id, attempt=1))
        return str(record.job_id)

    def timed(self, action: Callable[[Now], object], repeats: int) -> list[float]:
        """``action(now)`` as a unit of work, rolled back each time; milliseconds."""
        tables, spent = self.core.tables, []
        for repeat in range(repeats):
            now = Now(1e6 + repeat, 1e6 + repeat)
            tables.begin()
            before = time.perf_counter()
            action(now)
            spent.append((time.perf_counter() - before) * 1000)
            tables.rollback()
        return spent


def build(nodes: int, jobs: int) -> tuple[Cluster, list[tuple[str, list[str]]]]:
    cluster = Cluster(nodes)
    held = []
    for number in range(jobs):
        job_id = cluster.job(f"hp-{number}", 5, PER_JOB)
        answer = cluster.unit(
            partial(cluster.core.allocate, job_id, [PhaseAsk("p0", PER_JOB, SLOT)], [], [], 0)
        )
        held.append((job_id, [a.allocation_id for a in answer.granted]))
    by_node: dict[str, list[TaskReport]] = {}
    for job_id, containers in held[: jobs // 2]:  # half ran p0 and keep theirs for p1
        for index, allocation_id in enumerate(containers):
            node_id = cluster.core.allocations[allocation_id].node_id
            by_node.setdefault(node_id, []).append(
                TaskReport(
                    job_id,
                    f"p0-{index}",
                    1,
                    allocation_id,
                    TaskState.SUCCEEDED,
                    timestamp=cluster.clock,
                    start_time=cluster.clock,
                )
            )
    for node_id, reports in by_node.items():
        cluster.unit(partial(cluster.core.report_events, node_id, reports))
    for job_id, containers in held[: jobs // 2]:  # with a deadline
        kept = [KeptSlot(a, "p1", 5e6) for a in containers]
        cluster.unit(partial(cluster.core.allocate, job_id, [], [], [], 0, kept=kept))
    left = nodes * 4 - jobs * PER_JOB
    filler = cluster.job("filler", 0, left)
    cluster.unit(partial(cluster.core.allocate, filler, [PhaseAsk("p0", left, SLOT)], [], [], 0))
    return cluster, held


def ms(values: list[float], unit: str = "ms") -> str:
    ordered = sorted(values)
    p90 = ordered[round(0.9 * (len(ordered) - 1))]
    p99 = ordered[round(0.99 * (len(ordered) - 1))]
    return f"{statistics.median(ordered):>9.3f}{p90:>9.3f}{p99:>9.3f}  {unit}"


def job_master_round(tasks: int, reservation: ReservationSpec | None) -> list[float]:
    """Microseconds per task: its report, then a round's decide, for a phase of ``tasks``."""
    plan = JobPlan(spec("jm", 5, tasks), reservation)
    for index in range(tasks):
        plan.on_granted(Container(f"a{index}", "p0", f"n{index % 97}", "x:1", SLOT))
    for launch in plan.decide().launches:
        plan.on_task_event(launch.task_id, launch.attempt, TaskState.RUNNING, 0, "")
    spent = []
    for index in range(tasks):
        plan.advance(float(index + 1))
        before = time.perf_counter()
        plan.on_task_event(
            f"p0-{index}", plan.tasks[f"p0-{index}"].attempt, TaskState.SUCCEEDED, 0, ""
        )
        decisions = plan.decide()
        for launch in decisions.launches:  # copies: started, never finishing first
            plan.on_task_event(launch.task_id, launch.attempt, TaskState.RUNNING, 0, "")
        spent.append((time.perf_counter() - before) * 1e6)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=2_000, help="the job master's phase")
    args = parser.parse_args()
    if args.jobs * PER_JOB > args.nodes * 4:
        parser.error(f"--jobs: at most {args.nodes * 4 // PER_JOB} on {args.nodes} nodes")
    tune_for_large_heaps()
    print(f"machine: {os.cpu_count()} cores; store in memory")
    started = time.perf_counter()
    cluster, held = build(args.nodes, args.jobs)
    core = cluster.core
    print(
        f"built {args.nodes} nodes, {args.jobs * PER_JOB} containers of {args.jobs} jobs, "
        f"{len(held) // 2 * PER_JOB} kept, in {time.perf_counter() - started:.1f} s"
    )
    keeper, containers = held[-1]  # one that keeps nothing yet
    kept = [KeptSlot(a, "p1", 5e6) for a in containers]
    report = cluster.timed(
        lambda now: core.allocate(keeper, [], [], [], 0, now=now, kept=kept), args.repeats
    )
    plain = cluster.timed(lambda now: core.allocate(keeper, [], [], [], 0, now=now), args.repeats)
    urgent = cluster.job("urgent", 9, 1)
    override = cluster.timed(
        lambda now: core.allocate(urgent, [PhaseAsk("p0", 1, SLOT)], [], [], 0, now=now),
        args.repeats,
    )
    tables = core.tables
    tables.begin()
    before = len(core.allocations)
    core.allocate(urgent, [PhaseAsk("p0", 1, SLOT)], [], [], 0, now=Now(1e6, 1e6))
    taken = before - len(core.allocations)
    tables.rollback()
    # Room on every node: the filler gives back a container per node.
    filler = next(j.job_id for j in core.jobs.values() if j.spec.name == "filler")
    by_node: dict[str, str] = {}
    for allocation in core.allocations.values():
        if allocation.job_id == filler:
            by_node.setdefault(allocation.node_id, allocation.allocation_id)
    cluster.unit(partial(core.allocate, filler, [], list(by_node.values()), [], 0))
    near = tuple(sorted(by_node)[:: max(1, len(by_node) // PER_JOB)][:PER_JOB])
    anywhere = cluster.timed(
        lambda now: core.allocate(urgent, [PhaseAsk("p0", 1, SLOT)], [], [], 0, now=now),
        args.repeats,
    )
    preferred = cluster.timed(
        lambda now: core.allocate(urgent, [PhaseAsk("p0", 1, SLOT, near)], [], [], 0, now=now),
        args.repeats,
    )
    print(f"{'RM, one unit of work':<34}{'median':>9}{'p90':>9}{'p99':>9}")
    for label, values in (
        ("Allocate, plain", plain),
        ("Allocate reporting 8 kept", report),
        ("override: a pass taking kept", override),
        ("ask, any node", anywhere),
        ("ask, 8 preferred nodes", preferred),
    ):
        print(f"{label:<34}{ms(values)}")
    print(f"each override took {taken} kept container(s) back")
    kept_ratio = statistics.median(report) / statistics.median(plain)
    near_ratio = statistics.median(preferred) / statistics.median(anywhere)
    print(
        f"ratios (medians): reporting kept / plain {kept_ratio:.2f}; "
        f"preferred / any {near_ratio:.2f}"
    )
    without = job_master_round(args.tasks, None)
    with_reservation = job_master_round(args.tasks, ReservationSpec(max_copies=None))
    print(f"{f'job master, phase of {args.tasks} tasks':<34}{'median':>9}{'p90':>9}{'p99':>9}")
    print(f"{'a completion, no reservation':<34}{ms(without, 'µs')}")
    print(f"{'a completion, reservation + copies':<34}{ms(with_reservation, 'µs')}")
    ratio = statistics.median(with_reservation) / statistics.median(without)
    print(f"ratio (medians): with / without {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
