"""The DiAS-shaped experiment (docs/approximation.md; DiAS Sec. 5.2-5.3): two priorities of the
same job size, high to low in a ratio of 3 to 7, through the product's own core, job masters and
sprint budget, under six configurations:

* ``P``: the preemptive baseline (``--dispatch preemptive``): an arriving high-priority job
  evicts the low-priority one in execution, which is executed again from the start later;
* ``NP``: non-preemptive buffers (``--dispatch dias``), nothing dropped, no sprint;
* ``DA(0,10)``, ``DA(0,20)``: approximation only, low-priority jobs drop 10 % or 20 % of the
  tasks of their droppable phases;
* ``DiAS(0,20) limited``: as DA(0,20), and high-priority jobs sprint after a timeout chosen so
  that they run sprinted for about 35 % of their execution time, the paper's "limited sprinting"
  (Sec. 5.3: its budget "limits the jobs to run in high frequency only for 35 % of their
  execution time based on timeout"; its 65 s).  From the NP run's mean high-priority execution
  time E and the sprint factor f: a job sprinting after T runs T + (E - T)/f, of which (E - T)/f
  sprinted, so T = E / (1 + f s / (1 - s)) with s = 0.35 (:func:`limited_timeout`);
* ``DiAS(0,20) unlimited``: as DA(0,20), and high-priority jobs sprint from dispatch.

One job is in execution at a time (``--max-running-jobs 1``, the paper's engine, which gives a
job the whole cluster).  The sprint budget is made large enough never to run dry: the timeout
limits sprinting, as in the paper's two scenarios.  A sprint is modelled as the paper's DVFS: the
job's tasks run ``sprint_factor`` times faster (:meth:`simulator.engine.Simulation._sprint`).

Reported per priority: mean and p95 latency (submission to end), the expected error of its
results (the accuracy curve at what was dropped); for the run: resource waste (the share of
machine time spent on executions that were evicted, Sec. 5.1) and energy (the linear power model
of :mod:`policies.approximation.energy`, integrated per node over the run, sprinting nodes at
the sprint power factor), twice: over the whole run, idle spells included, and over the time the
cluster executes a job (its tasks run), the energy the executions cost, which is what the
paper's comparison moves with (Sec. 5.3: "the significant reduction in execution times that
outweighs the power increase during sprinting").

:func:`model_comparison` sets the same workload before `sluice model dias`'s model (the task
level model of Eq. 1 and Cobham's formula, the very functions the command calls): its mean
response time per priority against the simulator's, for NP and DA(0,20).  The model's setup and
shuffle stages are measured from the NP run's task records (dispatch to first task; last map
task to first reduce task), not fitted to response times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from policies.approximation.dias_config import (
    DiasConfig,
    PriorityPolicy,
    SprintSettings,
)
from policies.approximation.dispatch import DispatchMode
from policies.approximation.energy import PowerModel
from policies.approximation.job_time import TaskLevelJob, task_level_model
from policies.approximation.phase_type import moments
from policies.approximation.priority_queues import Discipline, batch_mean_response_times
from policies.scheduling.lifecycle import TaskState
from simulator.distributions import Exponential
from simulator.engine import SimSettings, Simulation
from simulator.plots import save_png
from simulator.workload import JobClass, PoissonArrival, SimJob

Say = Callable[[str], None]
HIGH, LOW = 1, 0
LIMITED_SHARE = 0.35  # of high-priority execution time sprinted under limited sprinting
UNLIMITED_BUDGET_S = 1e9
PAPER_POWER = PowerModel(idle_w=180.0, peak_w=180.0 * 1.25, sprint_factor=1.5)
"""A node: the paper's 180 W servers (Sec. 5.1), a quarter more when busy, 1.5x sprinting."""


@dataclass(frozen=True)
class DiasConfigRun:
    name: str
    dispatch: DispatchMode
    low_drop: float
    sprint: str  # "", "limited" or "unlimited"


CONFIGS = (
    DiasConfigRun("P", DispatchMode.PREEMPTIVE, 0.0, ""),
    DiasConfigRun("NP", DispatchMode.DIAS, 0.0, ""),
    DiasConfigRun("DA(0,10)", DispatchMode.DIAS, 0.1, ""),
    DiasConfigRun("DA(0,20)", DispatchMode.DIAS, 0.2, ""),
    DiasConfigRun("DiAS(0,20) limited", DispatchMode.DIAS, 0.2, "limited"),
    DiasConfigRun("DiAS(0,20) unlimited", DispatchMode.DIAS, 0.2, "unlimited"),
)


@dataclass(frozen=True)
class PriorityFigures:
    jobs: int
    mean_s: float
    p95_s: float
    mean_execution_s: float
    expected_error: float


@dataclass(frozen=True)
class DiasRow:
    name: str
    high: PriorityFigures
    low: PriorityFigures
    waste: float  # share of machine time spent on evicted executions
    energy_mj: float  # the whole run
    execution_energy_mj: float  # while a job's tasks run
    sprinted_share: float  # of high-priority execution time
    unfinished: int
    wall_s: float


class DiasSimulation(Simulation):
    """The engine, integrating each node's power over the run (the agents' power model)."""

    def __init__(
        self, jobs: Sequence[SimJob], settings: SimSettings, seed: int, power: PowerModel
    ) -> None:
        super().__init__(jobs, settings, seed)
        self.power = power
        self.energy_j = 0.0
        self.execution_energy_j = 0.0
        self._energy_at = 0.0

    periodic_samples = True  # (the energy integrates the state at each sample over its interval)

    def _sample(self, *, last: bool = False) -> None:
        self._integrate_energy()
        super()._sample(last=last)

    def _integrate_energy(self) -> None:
        elapsed = self.now - self._energy_at
        self._energy_at = self.now
        if elapsed <= 0:
            return
        step = 0.0
        executing = False
        for node in self._nodes.values():
            busy = sum(
                t.granted.cpu
                for t in node.tasks.values()
                if t.state is TaskState.RUNNING and not t.job_master
            )
            sprinting = any(
                t.sprint_factor > 1 and t.state is TaskState.RUNNING for t in node.tasks.values()
            )
            utilisation = busy / self.settings.node_cpu
            step += self.power.energy_j(elapsed, utilisation, sprinting)
            executing = executing or busy > 0
        self.energy_j += step
        if executing:  # (state at the sample, held over the interval, as for the energy)
            self.execution_energy_j += step


def limited_timeout(mean_execution_s: float, factor: float, share: float = LIMITED_SHARE) -> float:
    """The sprint timeout after which a job of mean unsprinted execution time ``mean_execution_s``
    runs sprinted (``factor`` times faster) for ``share`` of its execution time."""
    return mean_execution_s / (1 + factor * share / (1 - share))


def dias_settings(run: DiasConfigRun, sprint_timeout: float, factor: float) -> DiasConfig:
    """The cluster's DiAS settings for one configuration."""
    timeout = {"": math.inf, "limited": sprint_timeout, "unlimited": 0.0}[run.sprint]
    return DiasConfig(
        priorities=(
            PriorityPolicy(HIGH, "high", 0.0, 0.0, timeout),
            PriorityPolicy(LOW, "low", run.low_drop, run.low_drop, math.inf),
        ),
        sprint=SprintSettings(budget_s=UNLIMITED_BUDGET_S, replenish_s_per_hour=0.0, factor=factor),
    )


def run_study(
    jobs: Sequence[SimJob],
    base: SimSettings,
    seed: int,
    *,
    factor: float = 2.0,
    power: PowerModel = PAPER_POWER,
    configs: Sequence[DiasConfigRun] = CONFIGS,
    say: Say = lambda _: None,
) -> tuple[list[DiasRow], dict[str, DiasSimulation]]:
    """Every configuration on the same jobs; NP runs first (the limited timeout comes from
    its high-priority execution times)."""
    order = sorted(configs, key=lambda c: c.name != "NP")
    rows: dict[str, DiasRow] = {}
    simulations: dict[str, DiasSimulation] = {}
    timeout = math.inf
    for run in order:
        if any(r.sprint == "limited" for r in order) and order[0].name != "NP":
            raise ValueError("limited sprinting needs the NP run first")
        say(f"{run.name}: {len(jobs)} jobs on {base.nodes} nodes")
        started = time.perf_counter()
        core = replace(
            base.core,
            dispatch=run.dispatch,
            max_running_jobs=1,
            dias=dias_settings(run, timeout, factor),
        )
        simulation = DiasSimulation(jobs, replace(base, core=core), seed, power)
        simulation.run()
        rows[run.name] = _row(run.name, simulation, time.perf_counter() - started)
        simulations[run.name] = simulation
        if run.name == "NP":
            timeout = limited_timeout(rows["NP"].high.mean_execution_s, factor)
        say(_line(rows[run.name]))
    return [rows[c.name] for c in configs], simulations


def _row(name: str, simulation: DiasSimulation, wall: float) -> DiasRow:
    core = simulation.core
    figures: dict[int, PriorityFigures] = {}
    wasted = executed = sprinted = high_executed = 0.0
    unfinished = 0
    for priority in (HIGH, LOW):
        latencies, executions, errors = [], [], []
        for job_id, job in simulation.sim_jobs.items():
            if job.spec.priority != priority:
                continue
            record = core.job(job_id)
            if not record.state.is_final:
                unfinished += 1
                continue
            latencies.append(record.finish_time - job.submit_time)
            execution = record.finish_time - record.execution.dispatched_at
            executions.append(execution)
            errors.append(record.approximation.expected_error)
            wasted += record.execution.wasted_s
            executed += execution
        figures[priority] = PriorityFigures(
            jobs=len(latencies),
            mean_s=float(np.mean(latencies)) if latencies else math.nan,
            p95_s=float(np.percentile(latencies, 95)) if latencies else math.nan,
            mean_execution_s=float(np.mean(executions)) if executions else math.nan,
            expected_error=float(np.mean(errors)) if errors else math.nan,
        )
        if priority == HIGH:
            high_executed = sum(executions)
    sprinted = sum(sprint.sprinted_s for sprint in core.sprints.history)
    simulation._integrate_energy()
    return DiasRow(
        name=name,
        high=figures[HIGH],
        low=figures[LOW],
        waste=wasted / (wasted + executed) if wasted + executed > 0 else 0.0,
        energy_mj=simulation.energy_j / 1e6,
        execution_energy_mj=simulation.execution_energy_j / 1e6,
        sprinted_share=sprinted / high_executed if high_executed > 0 else 0.0,
        unfinished=unfinished,
        wall_s=wall,
    )


def _line(row: DiasRow) -> str:
    return (
        f"  {row.name}: high mean {row.high.mean_s:.0f} s, low mean {row.low.mean_s:.0f} s, "
        f"waste {row.waste:.1%}, energy {row.energy_mj:.1f} MJ, executing "
        f"{row.execution_energy_mj:.1f} MJ ({row.wall_s:.0f} s)"
    )


def format_rows(rows: Sequence[DiasRow], title: str) -> str:
    """The table; latencies also as their change against P's."""
    base = next((r for r in rows if r.name == "P"), None)

    def change(value: float, reference: float | None) -> str:
        if reference is None or not reference or math.isnan(value):
            return "-"
        return f"{value / reference - 1:+.0%}"

    header = (
        f"{'CONFIG':<22}{'HIGH MEAN':>10}{'vs P':>7}{'HIGH P95':>10}{'LOW MEAN':>10}{'vs P':>7}"
        f"{'LOW P95':>9}{'WASTE':>8}{'ENERGY MJ':>11}{'vs P':>7}{'EXEC MJ':>9}{'vs P':>7}"
        f"{'ERR HIGH':>10}{'ERR LOW':>9}"
        f"{'SPRINT':>8}"
    )
    lines = [title, header]
    for row in rows:
        lines.append(
            f"{row.name:<22}{row.high.mean_s:>9.0f}s"
            f"{change(row.high.mean_s, base.high.mean_s if base else None):>7}"
            f"{row.high.p95_s:>9.0f}s{row.low.mean_s:>9.0f}s"
            f"{change(row.low.mean_s, base.low.mean_s if base else None):>7}"
            f"{row.low.p95_s:>8.0f}s{row.waste:>8.1%}{row.energy_mj:>11.2f}"
            f"{change(row.energy_mj, base.energy_mj if base else None):>7}"
            f"{row.execution_energy_mj:>9.2f}"
            f"{change(row.execution_energy_mj, base.execution_energy_mj if base else None):>7}"
            f"{row.high.expected_error:>10.1%}{row.low.expected_error:>9.1%}"
            f"{row.sprinted_share:>8.0%}"
        )
    return "\n".join(lines)


def plot_rows(rows: Sequence[DiasRow], path: Path) -> None:
    """Mean and p95 latency per priority, waste and energy, per configuration."""
    figure = Figure(figsize=(12, 4.6), layout="constrained")
    latency, waste, energy = figure.subplots(1, 3, width_ratios=(2.2, 1, 1))
    names = [r.name for r in rows]
    x = np.arange(len(rows))
    width = 0.2
    for offset, (label, values, colour) in enumerate(
        [
            ("high mean", [r.high.mean_s for r in rows], "#4477aa"),
            ("high p95", [r.high.p95_s for r in rows], "#88aadd"),
            ("low mean", [r.low.mean_s for r in rows], "#cc6677"),
            ("low p95", [r.low.p95_s for r in rows], "#eeaabb"),
        ]
    ):
        latency.bar(x + (offset - 1.5) * width, values, width, label=label, color=colour)
    latency.set_xticks(x, names, rotation=25, ha="right")
    latency.set_ylabel("latency (s)")
    latency.set_title("latency per priority")
    latency.legend(fontsize=8)
    waste.bar(names, [100 * r.waste for r in rows], color="#999933")
    waste.set_ylabel("resource waste (%)")
    waste.set_title("evicted work")
    waste.tick_params(axis="x", rotation=60)
    x_energy = np.arange(len(rows))
    energy.bar(x_energy - 0.2, [r.energy_mj for r in rows], 0.4, label="whole run", color="#66aa55")
    energy.bar(
        x_energy + 0.2,
        [r.execution_energy_mj for r in rows],
        0.4,
        label="while executing",
        color="#aaddaa",
    )
    energy.set_xticks(x_energy, names, rotation=60, ha="right")
    energy.set_ylabel("energy (MJ)")
    energy.set_title("energy")
    energy.legend(fontsize=8)
    save_png(figure, path)


# ------------------------------------------------------------------ the model against the run


@dataclass(frozen=True)
class ModelComparison:
    name: str
    predicted_high: float
    measured_high: float
    predicted_low: float
    measured_low: float

    def errors(self) -> tuple[float, float]:
        return (
            self.predicted_high / self.measured_high - 1,
            self.predicted_low / self.measured_low - 1,
        )


def measured_stages(simulation: Simulation) -> tuple[float, float]:
    """The mean setup (dispatch to first task start) and shuffle (last map end to first
    reduce start) of the run's jobs, from the core's records."""
    setups, shuffles = [], []
    for job_id, job in simulation.sim_jobs.items():
        record = simulation.core.job(job_id)
        tasks = simulation.core.job_tasks(job_id)
        first, last = job.spec.phases[0].name, job.spec.phases[-1].name
        starts = [t.start_time for t in tasks if t.phase == first and t.start_time]
        map_ends = [t.finish_time for t in tasks if t.phase == first and t.finish_time]
        reduce_starts = [t.start_time for t in tasks if t.phase == last and t.start_time]
        if starts and record.execution.dispatched_at:
            setups.append(min(starts) - record.execution.dispatched_at)
        if map_ends and reduce_starts and first != last:
            shuffles.append(max(0.0, min(reduce_starts) - max(map_ends)))
    return float(np.mean(setups)), float(np.mean(shuffles)) if shuffles else 1e-3


def model_comparison(
    rows: Sequence[DiasRow],
    simulations: dict[str, DiasSimulation],
    classes: Sequence[JobClass],
    slots: int,
) -> list[ModelComparison]:
    """The model's mean response time per priority against the simulator's, for those of NP
    and DA that ran.  The setup and shuffle stages are measured from the NP run, or from the
    first DA run without it (the same dispatch: only the low-priority map phase is shorter).
    Raises ValueError when none of them ran, or the workload is not of the model's kind."""
    covered = [
        (name, low_drop)
        for name, low_drop in (("NP", 0.0), ("DA(0,10)", 0.1), ("DA(0,20)", 0.2))
        if name in simulations and any(r.name == name for r in rows)
    ]
    if not covered:
        raise ValueError("the model covers NP, DA(0,10) and DA(0,20); none of them ran")
    setup, shuffle = measured_stages(simulations[covered[0][0]])
    by_priority = {c.spec.priority: c for c in classes}
    result = []
    for name, low_drop in covered:
        row = next(r for r in rows if r.name == name)
        means, seconds, rates = [], [], []
        for priority, drop in ((LOW, low_drop), (HIGH, 0.0)):  # index = priority
            job_class = by_priority[priority]
            phases = job_class.spec.phases
            model = TaskLevelJob(
                slots=slots,
                map_tasks_pmf=_point_mass(phases[0].tasks),
                reduce_tasks_pmf=_point_mass(phases[-1].tasks),
                setup_rate=1 / setup,
                map_rate=1 / _exponential_mean(job_class, 0),
                shuffle_rate=1 / max(shuffle, 1e-3),
                reduce_rate=1 / _exponential_mean(job_class, len(phases) - 1),
            )
            first_two = moments(task_level_model(model, drop), 2)
            means.append(float(first_two[0]))
            seconds.append(float(first_two[1]))
            arrival = job_class.arrival
            if not isinstance(arrival, PoissonArrival):
                raise ValueError(f"the model needs Poisson arrivals; {job_class.name} has not")
            rates.append(arrival.rate)
        predicted = batch_mean_response_times(
            np.array(rates), np.array(means), np.array(seconds), Discipline.NON_PREEMPTIVE
        )
        result.append(
            ModelComparison(
                name, float(predicted[1]), row.high.mean_s, float(predicted[0]), row.low.mean_s
            )
        )
    return result


def format_comparison(comparisons: Sequence[ModelComparison]) -> str:
    lines = [
        "sluice model dias (task-level model, Cobham) against the simulator: mean response time",
        f"{'CONFIG':<12}{'HIGH MODEL':>12}{'HIGH SIM':>10}{'ERROR':>8}"
        f"{'LOW MODEL':>11}{'LOW SIM':>9}{'ERROR':>8}",
    ]
    for c in comparisons:
        high_error, low_error = c.errors()
        lines.append(
            f"{c.name:<12}{c.predicted_high:>11.0f}s{c.measured_high:>9.0f}s{high_error:>+8.1%}"
            f"{c.predicted_low:>10.0f}s{c.measured_low:>8.0f}s{low_error:>+8.1%}"
        )
    return "\n".join(lines)


def _point_mass(count: int) -> np.ndarray:
    pmf = np.zeros(count)
    pmf[count - 1] = 1.0
    return pmf


def _exponential_mean(job_class: JobClass, phase_index: int) -> float:
    duration = job_class.durations[phase_index]
    if not isinstance(duration, Exponential):
        raise ValueError(
            f"the model comparison needs exponential task times; phase {phase_index} of "
            f"{job_class.name} has {type(duration).__name__.lower()} ones"
        )
    return duration.mean
