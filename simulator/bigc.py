"""The BIG-C experiment (docs/preemption.md): five policies on one workload, as the paper's Google
trace replay (Sec. 5.4, Fig. 8): FIFO, reserve, kill, immediate (IP) and graceful (GP).

Every policy is a queue file for the same core (the policies are the product's, unchanged):

* **fifo**: one queue, no preemption; every job in submission order;
* **reserve**: the short queue has 60 % of the cluster, the long queue at most 40 % (its
  ``max_share``), no preemption (the paper's reservation for short jobs, like Hawk);
* **kill**, **immediate**, **graceful**: the short queue's share 0.95, the long queue's 0.05 in
  that mode, with the paper's r_GP, footprint and D.

:func:`run_bigc` runs them on a workload (its jobs in queues ``short`` and ``long``, the job
class's name saying which), scaled to the number of nodes, and reports, per policy: long jobs'
p50 and p90 completion time (from submission to the end), long jobs that failed, short jobs'
p95 completion time, and the preemptions (containers killed, suspended or shrunk).
:func:`format_bigc` is the table; :func:`plot_bigc` the PNG.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from policies.preemption.queues import QueueConfig, parse_queue_config
from simulator.engine import SimResult, SimSettings, Simulation
from simulator.plots import save_png
from simulator.results import JobOutcome, percentile
from simulator.workload import SimJob

__all__ = ["POLICIES", "BigcRow", "format_bigc", "plot_bigc", "run_bigc", "scale_jobs"]

PAPER_NODES = 26


def _policies() -> dict[str, QueueConfig | None]:
    def two(long: dict[str, object], short: dict[str, object] | None = None) -> QueueConfig:
        return parse_queue_config(
            {"default": "long", "queues": {"short": short or {"share": 0.95}, "long": long}}
        )

    return {
        "fifo": None,
        # Static reservation, no preemption: neither queue's containers are ever taken (a
        # queue's mode defaults to graceful, so the short queue says none too).
        "reserve": two(
            {"share": 0.4, "max_share": 0.4, "mode": "none"}, {"share": 0.6, "mode": "none"}
        ),
        "kill": two({"share": 0.05, "mode": "kill"}),
        "immediate": two({"share": 0.05, "mode": "immediate"}),
        "graceful": two({"share": 0.05, "mode": "graceful"}),
    }


POLICIES = _policies()


@dataclass(frozen=True)
class BigcRow:
    """One policy's figures (seconds; ``nan`` where no job of the kind finished)."""

    policy: str
    long_p50: float
    long_p90: float
    long_failed: int
    long_unfinished: int
    short_p95: float
    preemptions: int
    lost_work_h: float  # task-hours lost to kills
    outcomes: tuple[JobOutcome, ...]


PAPER_GP_P90_CUTS = {"kill": "67%", "immediate": "37%", "reserve": "32%"}
"""How far graceful's long-job p90 fell below each other policy's in the paper (Sec. 5.4)."""


def scale_jobs(jobs: Sequence[SimJob], nodes: int) -> list[SimJob]:
    """The workload for ``nodes`` nodes: as written for the paper's 26, the arrivals of each
    job ``k`` times over (``k = nodes / 26``, rounded), spread inside the same window, so the
    load per node is the same."""
    copies = max(1, round(nodes / PAPER_NODES))
    if copies == 1:
        return list(jobs)
    scaled = []
    for job in jobs:
        for copy in range(copies):
            offset = copy * 1e-3  # the same instant, in a set order
            scaled.append(
                dataclasses.replace(
                    job, name=f"{job.name}-x{copy}", submit_time=job.submit_time + offset
                )
            )
    return scaled


def run_bigc(
    jobs: Sequence[SimJob],
    base: SimSettings,
    seed: int,
    policies: Sequence[str] = tuple(POLICIES),
    on_policy: Callable[[str], None] | None = None,
) -> list[BigcRow]:
    """Simulate ``jobs`` under each policy on ``base``'s cluster; one row per policy."""
    rows = []
    for name in policies:
        if on_policy is not None:
            on_policy(name)
        queues = POLICIES[name]
        settings = dataclasses.replace(base, queues=queues)
        run_jobs = list(jobs) if queues is not None else [_unqueued(job) for job in jobs]
        result = Simulation(run_jobs, settings, seed).run(progress_every=0)
        rows.append(_row(name, result))
    return rows


def _unqueued(job: SimJob) -> SimJob:
    """The job in the RM's one queue (FIFO: no queue file)."""
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, queue=""))


def _kind(outcome: JobOutcome) -> str:
    return "short" if outcome.job_class.startswith("short") else "long"


def _row(policy: str, result: SimResult) -> BigcRow:
    long = [o for o in result.outcomes if _kind(o) == "long"]
    short = [o for o in result.outcomes if _kind(o) == "short"]

    def completion(outcomes: list[JobOutcome]) -> list[float]:
        return sorted(o.finish_time - o.submit_time for o in outcomes if o.state == "succeeded")

    long_times, short_times = completion(long), completion(short)
    return BigcRow(
        policy=policy,
        long_p50=percentile(long_times, 50),
        long_p90=percentile(long_times, 90),
        long_failed=sum(1 for o in long if o.state == "failed"),
        long_unfinished=sum(1 for o in long if o.state == "unfinished"),
        short_p95=percentile(short_times, 95),
        preemptions=sum(o.preemptions for o in result.outcomes),
        lost_work_h=sum(o.lost_work for o in result.outcomes) / 3600.0,
        outcomes=tuple(result.outcomes),
    )


def _s(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def format_bigc(rows: Sequence[BigcRow], nodes: int) -> str:
    """A markdown table of the rows, and graceful against kill."""
    lines = [
        f"{nodes} nodes",
        "",
        "| policy | long p50 (s) | long p90 (s) | long failed | short p95 (s) | preemptions "
        "| work lost to kills (task-h) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        failed = str(row.long_failed)
        if row.long_unfinished:
            failed += f" ({row.long_unfinished} unfinished)"
        lines.append(
            f"| {row.policy} | {_s(row.long_p50)} | {_s(row.long_p90)} | {failed} "
            f"| {_s(row.short_p95)} | {row.preemptions} | {row.lost_work_h:.1f} |"
        )
    by_name = {row.policy: row for row in rows}
    graceful = by_name.get("graceful")
    cuts = [
        f"{1 - graceful.long_p90 / other.long_p90:.0%} below {name}'s (the paper: {paper})"
        for name, paper in PAPER_GP_P90_CUTS.items()
        if graceful is not None and (other := by_name.get(name)) is not None and other.long_p90 > 0
    ]
    if cuts:
        lines += ["", "graceful's long-job p90 is " + ", ".join(cuts)]
    return "\n".join(lines)


def plot_bigc(rows: Sequence[BigcRow], nodes: int, path: Path) -> None:
    """Three panels: long jobs' p50 and p90, short jobs' p95, and preemptions, per policy."""
    names = [row.policy for row in rows]
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(13.0, 3.8), dpi=110)
        long_axes = figure.add_subplot(1, 3, 1)
        positions = list(range(len(names)))
        long_axes.bar(
            [p - 0.2 for p in positions], [_bar(r.long_p50) for r in rows], 0.4, label="p50"
        )
        long_axes.bar(
            [p + 0.2 for p in positions], [_bar(r.long_p90) for r in rows], 0.4, label="p90"
        )
        long_axes.set_title("long jobs: completion time")
        long_axes.set_ylabel("seconds")
        long_axes.legend(fontsize="small")
        short_axes = figure.add_subplot(1, 3, 2)
        short_axes.bar(positions, [_bar(r.short_p95) for r in rows], 0.6, color="tab:green")
        short_axes.set_title("short jobs: p95 completion time")
        short_axes.set_ylabel("seconds")
        count_axes = figure.add_subplot(1, 3, 3)
        count_axes.bar(positions, [r.preemptions for r in rows], 0.6, color="tab:red")
        count_axes.set_title("containers preempted")
        for axes in (long_axes, short_axes, count_axes):
            axes.set_xticks(positions, names, rotation=15)
            axes.grid(True, axis="y", alpha=0.3)
        figure.suptitle(f"BIG-C-shaped workload on {nodes} nodes")
        figure.tight_layout()
        save_png(figure, path)


def _bar(value: float) -> float:
    return 0.0 if math.isnan(value) else value
