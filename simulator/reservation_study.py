"""The slot-reservation experiments (docs/reservation.md): the paper's large-scale simulation
(Sec. VI-B, Figs. 15-17), run on the product's own core and job master.

Both run on a workload whose high-priority classes are the foreground and the rest the
background, with the simulator's data-locality model on (a downstream task away from its
upstream output runs 5x as long) and the RM's locality wait (3 s: an ask waits that long for a
node holding its input).

* **Isolation** (:func:`run_isolation`).  The same jobs under several configurations of the
  foreground's ``reservation`` block (the background never reserves):

  - ``none``: no reservation; containers go back at every task's end (strict priority only);
  - ``R=1.0``, ``R=0.8``, ``R=0.5``: slot reservation (Alg. 1) with pre-reservation at that
    progress (1.0 never pre-reserves), P = 0.9, no straggler copies.

  A foreground job's slowdown is its completion time (submission to end) over its completion
  time when the foreground runs alone on the cluster, with reservation (``R=1.0``): the paper's
  baseline, a job that keeps its executors, with the simulated shell's own overheads (job master
  start-up, rounds, launches) in both.  The background's slowdown is, per background job, its
  completion time under the configuration over its time under ``none``, less one, averaged:
  what the reservations cost the others.

* **Straggler copies** (:func:`run_stragglers`).  The foreground's task times are redrawn from a
  Pareto distribution of shape alpha with each phase's original mean (t_min = mean (alpha - 1) /
  alpha, the paper's "same mean"), and each alpha runs with reservation without and with copies
  (unbounded, as in the paper, Sec. IV-C).  A copy's time is its own draw from the same
  distribution, independent of its original's.  The figure is the reduction of the
  foreground's mean completion time (the paper's Fig. 17), also per class and as the mean of
  each job's own reduction.

:func:`format_isolation`, :func:`format_stragglers` are the tables; :func:`plot_isolation`,
:func:`plot_stragglers` and :func:`plot_isolation_utilisation` the PNGs.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from plumbing.errors import UserError
from policies.reservation.deadline import utilization_for_isolation
from policies.scheduling.jobspec import ReservationSpec
from simulator.engine import SimSettings, Simulation
from simulator.plots import save_png
from simulator.results import JobOutcome
from simulator.workload import SimJob

__all__ = [
    "ALPHAS",
    "ISOLATION_CONFIGS",
    "IsolationRow",
    "StragglerRow",
    "format_isolation",
    "format_stragglers",
    "is_foreground",
    "plot_isolation",
    "plot_isolation_utilisation",
    "plot_stragglers",
    "redraw_pareto",
    "run_isolation",
    "run_stragglers",
]

ISOLATION_CONFIGS: dict[str, ReservationSpec | None] = {
    "none": None,
    "R=1.0": ReservationSpec(prereserve_at=1.0, max_copies=0),
    "R=0.8": ReservationSpec(prereserve_at=0.8, max_copies=0),
    "R=0.5": ReservationSpec(prereserve_at=0.5, max_copies=0),
}
ALONE = "R=1.0"
"""The configuration the foreground runs alone under: its slowdowns' denominator."""
ALPHAS = (1.2, 1.6, 2.0, 3.0)
WITHOUT_COPIES = ReservationSpec(max_copies=0)
WITH_COPIES = ReservationSpec(max_copies=None)


def is_foreground(job: SimJob) -> bool:
    """The foreground is every job above the lowest priority (the workload's high classes)."""
    return job.spec.priority > 0


def _reserving(
    jobs: Sequence[SimJob],
    reservation: ReservationSpec | None,
    foreground: Callable[[SimJob], bool],
) -> list[SimJob]:
    return [
        dataclasses.replace(job, spec=dataclasses.replace(job.spec, reservation=reservation))
        if foreground(job)
        else job
        for job in jobs
    ]


def _simulate(
    jobs: Sequence[SimJob], base: SimSettings, seed: int
) -> tuple[dict[str, JobOutcome], dict[str, int], dict[str, Mapping[str, int]]]:
    """Outcomes, non-local task counts and how kept containers ended (kind -> count, as the
    RM recorded them), by job name."""
    settings = dataclasses.replace(base, locality=True)
    simulation = Simulation(jobs, settings, seed)
    result = simulation.run(progress_every=0)
    if simulation.refused:
        # Every job's time is compared across configurations: one the RM refuses has none.
        name, why = simulation.refused[0]
        more = f" (and {len(simulation.refused) - 1} more)" if len(simulation.refused) > 1 else ""
        raise UserError(f"workload: job {name} is refused{more}: {why}")
    names = {o.job_id: o.name for o in result.outcomes}
    nonlocal_tasks = {names[j]: n for j, n in simulation.nonlocal_tasks.items() if j in names}
    kept_ends = {o.name: simulation.core.kept_log.counts(o.job_id) for o in result.outcomes}
    return {o.name: o for o in result.outcomes}, nonlocal_tasks, kept_ends


def _completion(outcome: JobOutcome) -> float:
    if outcome.state != "succeeded":
        return math.nan
    return outcome.finish_time - outcome.submit_time


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


# ------------------------------------------------------------------------------ isolation


@dataclass(frozen=True)
class IsolationRow:
    """One configuration's figures.  ``slowdown`` and ``nonlocal_share`` are per foreground
    class (mean slowdown against alone; the share of its downstream tasks that ran without
    local input); ``background_slowdown`` is against ``none`` (nan for ``none`` itself).
    Also per class: ``slower`` (its jobs more than 10 % slower than alone, of ``jobs``),
    ``worst`` (the largest slowdown) and ``kept_lost`` (kept containers that ended before
    their phase could use them: at their deadline, taken back or lost with their node, as the
    RM recorded them)."""

    config: str
    slowdown: Mapping[str, float]
    nonlocal_share: Mapping[str, float]
    background_slowdown: float
    background_mean_s: float
    unfinished: int
    jobs: Mapping[str, int] = dataclasses.field(default_factory=dict)
    slower: Mapping[str, int] = dataclasses.field(default_factory=dict)
    worst: Mapping[str, float] = dataclasses.field(default_factory=dict)
    kept_lost: Mapping[str, int] = dataclasses.field(default_factory=dict)


SLOWER = 1.1
"""A foreground job this many times slower than alone counts in ``IsolationRow.slower``."""
KEPT_LOST = ("deadline", "taken", "lost")
"""How a kept container ends before its phase could use it (:class:`KeptLog` kinds)."""


def run_isolation(
    jobs: Sequence[SimJob],
    base: SimSettings,
    seed: int,
    configs: Sequence[str] = tuple(ISOLATION_CONFIGS),
    foreground: Callable[[SimJob], bool] = is_foreground,
    on_run: Callable[[str], None] | None = None,
) -> list[IsolationRow]:
    """Run the foreground alone, then every configuration with the background; one row each."""
    if on_run is not None:
        on_run("alone")
    fg_only = [job for job in jobs if foreground(job)]
    alone, _, _ = _simulate(_reserving(fg_only, ISOLATION_CONFIGS[ALONE], foreground), base, seed)
    runs: dict[str, tuple[dict[str, JobOutcome], dict[str, int], dict[str, Mapping[str, int]]]] = {}
    for name in ("none", *[c for c in configs if c != "none"]):
        if on_run is not None:
            on_run(name)
        runs[name] = _simulate(_reserving(jobs, ISOLATION_CONFIGS[name], foreground), base, seed)
    baseline = runs["none"][0]
    rows = []
    for name in configs:
        outcomes, nonlocal_tasks, kept_ends = runs[name]
        rows.append(
            _isolation_row(
                name, jobs, foreground, outcomes, nonlocal_tasks, alone, baseline, kept_ends
            )
        )
    return rows


def _isolation_row(
    name: str,
    jobs: Sequence[SimJob],
    foreground: Callable[[SimJob], bool],
    outcomes: Mapping[str, JobOutcome],
    nonlocal_tasks: Mapping[str, int],
    alone: Mapping[str, JobOutcome],
    baseline: Mapping[str, JobOutcome],
    kept_ends: Mapping[str, Mapping[str, int]] | None = None,
) -> IsolationRow:
    slowdowns: dict[str, list[float]] = {}
    kept_lost: dict[str, int] = {}
    downstream: dict[str, list[int]] = {}  # class -> [non-local, downstream tasks]
    background: list[float] = []
    for job in jobs:
        time = _completion(outcomes[job.name])
        if foreground(job):
            slowdowns.setdefault(job.job_class, []).append(time / _completion(alone[job.name]))
            counts = downstream.setdefault(job.job_class, [0, 0])
            counts[0] += nonlocal_tasks.get(job.name, 0)
            counts[1] += sum(p.tasks for p in job.spec.phases if p.after)
            ends = (kept_ends or {}).get(job.name, {})
            kept_lost[job.job_class] = kept_lost.get(job.job_class, 0) + sum(
                ends.get(kind, 0) for kind in KEPT_LOST
            )
        elif name != "none":
            background.append(time / _completion(baseline[job.name]) - 1.0)
    return IsolationRow(
        config=name,
        slowdown={c: _mean(v) for c, v in sorted(slowdowns.items())},
        nonlocal_share={c: n / max(1, total) for c, (n, total) in sorted(downstream.items())},
        background_slowdown=_mean(background) if background else math.nan,
        background_mean_s=_mean([_completion(outcomes[j.name]) for j in jobs if not foreground(j)]),
        unfinished=sum(1 for o in outcomes.values() if o.state != "succeeded"),
        jobs={c: len(v) for c, v in sorted(slowdowns.items())},
        slower={c: sum(1 for x in v if not x <= SLOWER) for c, v in sorted(slowdowns.items())},
        worst={c: max(v, default=math.nan) for c, v in sorted(slowdowns.items())},
        kept_lost=dict(sorted(kept_lost.items())),
    )


def format_isolation(rows: Sequence[IsolationRow], nodes: int, cpu: float) -> str:
    classes = list(rows[0].slowdown) if rows else []
    lines = [
        f"{nodes} nodes of {cpu:g} cpu; foreground slowdown against running alone with its "
        "slots kept (mean; 1.00 = none; the worst job; jobs more than 10 % slower), share of "
        "its downstream tasks without local input, kept containers lost before their phase "
        "could use them (deadline, taken back, node lost), and the background's mean slowdown "
        "against `none`",
        "",
        "| configuration | "
        + " | ".join(
            f"{c} slowdown | {c} worst | {c} > +10 % | {c} non-local | {c} kept lost"
            for c in classes
        )
        + " | background slowdown | background mean (s) | not succeeded |",
        "|---|" + "---|---|---|---|---|" * len(classes) + "---|---|---|",
    ]
    for row in rows:
        cells = []
        for c in classes:
            cells += [
                f"{row.slowdown[c]:.2f}",
                f"{row.worst.get(c, math.nan):.2f}",
                f"{row.slower.get(c, 0)} of {row.jobs.get(c, 0)}",
                f"{row.nonlocal_share[c]:.0%}",
                f"{row.kept_lost.get(c, 0)}",
            ]
        bg = "-" if math.isnan(row.background_slowdown) else f"{row.background_slowdown:+.2%}"
        lines.append(
            f"| {row.config} | "
            + " | ".join(cells)
            + f" | {bg} | {row.background_mean_s:.1f} | {row.unfinished} |"
        )
    return "\n".join(lines)


def plot_isolation(rows: Sequence[IsolationRow], nodes: int, path: Path) -> None:
    """Foreground slowdown per class and configuration, and the background's slowdown."""
    classes = list(rows[0].slowdown) if rows else []
    width = 0.8 / max(1, len(rows))
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(12.0, 4.0), dpi=110)
        axes = figure.add_subplot(1, 2, 1)
        for i, row in enumerate(rows):
            positions = [k + (i - (len(rows) - 1) / 2) * width for k in range(len(classes))]
            axes.bar(positions, [row.slowdown[c] for c in classes], width, label=row.config)
        axes.axhline(1.1, color="black", linestyle="--", linewidth=0.8, label="10 % slowdown")
        axes.set_xticks(range(len(classes)), classes)
        axes.set_ylabel("slowdown (completion time / alone)")
        axes.set_title("foreground jobs")
        axes.legend(fontsize="small")
        axes.grid(True, axis="y", alpha=0.3)
        bg_axes = figure.add_subplot(1, 2, 2)
        shown = [r for r in rows if not math.isnan(r.background_slowdown)]
        bg_axes.bar(
            [r.config for r in shown],
            [100 * r.background_slowdown for r in shown],
            0.6,
            color="tab:gray",
        )
        bg_axes.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        bg_axes.set_ylabel("mean slowdown against none (%)")
        bg_axes.set_title("background jobs")
        bg_axes.grid(True, axis="y", alpha=0.3)
        figure.suptitle(f"Speculative slot reservation on {nodes} nodes (locality model on)")
        figure.tight_layout()
        save_png(figure, path)


# ------------------------------------------------------------------------------ stragglers


def redraw_pareto(
    jobs: Sequence[SimJob], alpha: float, seed: int, foreground: Callable[[SimJob], bool]
) -> list[SimJob]:
    """The foreground's task times redrawn Pareto(alpha) with each phase's original mean."""
    redrawn = []
    for job in jobs:
        if not foreground(job):
            redrawn.append(job)
            continue
        rng = random.Random(f"{seed}:{job.name}:pareto:{alpha}")
        durations, copies = {}, {}
        for phase, times in job.durations.items():
            t_min = statistics.fmean(times) * (alpha - 1) / alpha if times else 0.0
            durations[phase] = tuple(t_min * rng.paretovariate(alpha) for _ in times)
            copies[phase] = tuple(t_min * rng.paretovariate(alpha) for _ in times)
        redrawn.append(dataclasses.replace(job, durations=durations, copy_durations=copies))
    return redrawn


@dataclass(frozen=True)
class StragglerRow:
    """At one alpha: the foreground's mean completion time without and with copies (s), the
    reduction of that mean (the paper's "average JCT reduction"), the mean of each job's own
    reduction, and the reduction of the mean per foreground class."""

    alpha: float
    without_s: float
    with_s: float
    reduction: float
    per_job_reduction: float
    by_class: Mapping[str, float]


def run_stragglers(
    jobs: Sequence[SimJob],
    base: SimSettings,
    seed: int,
    alphas: Sequence[float] = ALPHAS,
    foreground: Callable[[SimJob], bool] = is_foreground,
    on_run: Callable[[str], None] | None = None,
) -> list[StragglerRow]:
    rows = []
    for alpha in alphas:
        redrawn = redraw_pareto(jobs, alpha, seed, foreground)
        times: dict[str, dict[str, float]] = {}
        for label, reservation in (("without", WITHOUT_COPIES), ("with", WITH_COPIES)):
            if on_run is not None:
                on_run(f"alpha={alpha:g} {label} copies")
            outcomes, _, _ = _simulate(_reserving(redrawn, reservation, foreground), base, seed)
            times[label] = {j.name: _completion(outcomes[j.name]) for j in redrawn if foreground(j)}
        classes: dict[str, list[str]] = {}
        for job in redrawn:
            if foreground(job):
                classes.setdefault(job.job_class, []).append(job.name)
        rows.append(
            StragglerRow(
                alpha=alpha,
                without_s=_mean(list(times["without"].values())),
                with_s=_mean(list(times["with"].values())),
                reduction=_reduction(times, list(times["without"])),
                per_job_reduction=_mean(
                    [1.0 - times["with"][n] / t for n, t in times["without"].items() if t > 0]
                ),
                by_class={c: _reduction(times, names) for c, names in sorted(classes.items())},
            )
        )
    return rows


def _reduction(times: Mapping[str, Mapping[str, float]], names: Sequence[str]) -> float:
    """1 - mean completion with copies / mean without, over ``names``."""
    without = _mean([times["without"][n] for n in names])
    return 1.0 - _mean([times["with"][n] for n in names]) / without if without > 0 else math.nan


PAPER_REDUCTION_AT_1_6 = 0.73


def format_stragglers(rows: Sequence[StragglerRow]) -> str:
    classes = list(rows[0].by_class) if rows else []
    lines = [
        "foreground task times Pareto(alpha) with their original means; reservation on "
        f"(P = {WITH_COPIES.isolation}, R = {WITH_COPIES.prereserve_at}); reductions of the mean "
        "completion time from straggler copies",
        "",
        "| alpha | mean without copies (s) | with copies (s) | reduction | "
        + " | ".join(classes)
        + " | mean of each job's reduction |",
        "|---|---|---|---|" + "---|" * len(classes) + "---|",
    ]
    for row in rows:
        cells = " | ".join(f"{row.by_class[c]:.0%}" for c in classes)
        lines.append(
            f"| {row.alpha:g} | {row.without_s:.1f} | {row.with_s:.1f} | {row.reduction:.0%} | "
            f"{cells} | {row.per_job_reduction:.0%} |"
        )
    lines += ["", f"the paper: {PAPER_REDUCTION_AT_1_6:.0%} at alpha = 1.6 (Fig. 17)"]
    return "\n".join(lines)


def plot_stragglers(rows: Sequence[StragglerRow], path: Path) -> None:
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(6.0, 4.0), dpi=110)
        axes = figure.add_subplot(1, 1, 1)
        axes.bar([f"{r.alpha:g}" for r in rows], [100 * r.reduction for r in rows], 0.6)
        axes.set_xlabel("Pareto shape alpha of the foreground's task times")
        axes.set_ylabel("completion-time reduction from copies (%)")
        axes.set_title("Straggler copies on reserved slots")
        axes.grid(True, axis="y", alpha=0.3)
        figure.tight_layout()
        save_png(figure, path)


def plot_isolation_utilisation(
    path: Path, alphas: Sequence[float] = ALPHAS, tasks: int = 16
) -> None:
    """The knob's trade-off from the paper's model (Eq. 3, Eq. 4): a phase of ``tasks`` tasks,
    isolation P against the utilisation bound of its reserved slots, per alpha."""
    levels = [i / 100 for i in range(1, 100)]
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(6.0, 4.0), dpi=110)
        axes = figure.add_subplot(1, 1, 1)
        for alpha in alphas:
            axes.plot(
                levels,
                [100 * utilization_for_isolation(p, alpha, tasks) for p in levels],
                label=f"alpha = {alpha:g}",
            )
        axes.set_xlabel("isolation P (probability the phase is not interrupted)")
        axes.set_ylabel("utilisation bound of reserved slots (%)")
        axes.set_title(f"Isolation against utilisation, N = {tasks} tasks")
        axes.legend(fontsize="small")
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        save_png(figure, path)
