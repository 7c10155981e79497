"""The simulator's engine: the product's core and job plan, driven with virtual time."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import ClassVar

import pytest

from policies.approximation.dispatch import DispatchMode
from policies.scheduling.containers import Goal
from policies.scheduling.framework import (
    PassContext,
    PendingAsk,
    Preemption,
    PreemptionAction,
    baseline_profile,
)
from policies.scheduling.jobspec import parse_job_spec
from resource_manager.core import CoreSettings
from simulator.engine import SimSettings, Simulation
from simulator.results import summarize, write_results
from simulator.workload import SimJob, parse_workload
from tests.builders import job_doc, phase_doc


def workload(*classes: dict[str, object]) -> dict[str, object]:
    return {"classes": list(classes)}


def job_class(
    name: str,
    *,
    count: int = 10,
    rate: float = 0.5,
    priority: int = 0,
    phases: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    return {
        "name": name,
        "priority": priority,
        "arrival": {"process": "poisson", "rate": rate, "count": count},
        "phases": phases or [{"name": "p", "tasks": 2, "cpu": 1, "memory_mb": 512, "duration": 10}],
    }


MIXED = workload(
    job_class(
        "batch",
        count=30,
        rate=0.4,
        phases=[
            {
                "name": "map",
                "tasks": 6,
                "cpu": 1,
                "memory_mb": 1024,
                "duration": {"distribution": "exponential", "mean": 15},
            },
            {
                "name": "reduce",
                "after": ["map"],
                "tasks": 2,
                "cpu": 2,
                "memory_mb": 512,
                "duration": 5,
            },
        ],
    ),
    job_class(
        "prod",
        count=8,
        rate=0.1,
        priority=5,
        phases=[
            {
                "name": "work",
                "tasks": 3,
                "cpu": 2,
                "memory_mb": 2048,
                "duration": {"distribution": "pareto", "alpha": 1.6, "t_min": 5},
            }
        ],
    ),
)


def jobs_of(document: dict[str, object], seed: int = 1) -> list[SimJob]:
    return parse_workload(document).generate(seed)


def simulate(jobs: list[SimJob], seed: int = 1, **settings: object) -> Simulation:
    simulation = Simulation(jobs, SimSettings(**settings), seed)  # type: ignore[arg-type]
    simulation.result = simulation.run()  # type: ignore[attr-defined]
    return simulation


def finish_times(simulation: Simulation) -> dict[str, float]:
    return {o.name: o.finish_time for o in simulation.result.outcomes}  # type: ignore[attr-defined]


@pytest.mark.parametrize("nodes", [2, 5, 12])
def test_skipping_idle_heartbeats_and_rounds_changes_no_result(nodes: int):
    """The default run skips heartbeats and job master rounds that exchange nothing; every job
    ends at the very same instant as in a run that simulates all of them."""
    jobs = jobs_of(MIXED)
    lean = simulate(jobs, nodes=nodes, node_cpu=4, node_memory_mb=8192)
    full = simulate(jobs, nodes=nodes, node_cpu=4, node_memory_mb=8192, heartbeats="all")
    assert finish_times(lean) == finish_times(full)
    assert all(not math.isnan(t) for t in finish_times(lean).values())
    assert lean.events < full.events / 3  # and it is what makes large runs affordable


@pytest.mark.parametrize("heartbeats", ["needed", "all"])
def test_the_rm_hears_an_end_from_the_monitor_pass_never_first_from_a_heartbeat(
    heartbeats: str, monkeypatch: pytest.MonkeyPatch
):
    """As on a live node: a heartbeat carries each task as the agent's monitor last reported
    it, so a heartbeat falling between a task's end and the next monitor pass neither reports
    that end nor leaves the task out (until issue 29 it left it out, which told the RM of the
    end up to a monitor interval early)."""
    from resource_manager.core import ResourceManagerCore

    heard_end: set[tuple[str, int]] = set()
    carried: dict[str, set[tuple[str, int]]] = {}  # node -> what its last heartbeat carried
    early: list[tuple[str, int]] = []
    heartbeat, report_events = ResourceManagerCore.heartbeat, ResourceManagerCore.report_events

    def recording_report_events(self, node_id, events, *, now, session=""):
        events = list(events)
        heard_end.update((e.allocation_id, e.attempt) for e in events if e.state.is_final)
        return report_events(self, node_id, events, now=now, session=session)

    def recording_heartbeat(self, node_id, used, live_tasks, **kwargs):
        now_carried = {(t.allocation_id, t.attempt) for t in live_tasks}
        for task in live_tasks:
            if task.state.is_final and (task.allocation_id, task.attempt) not in heard_end:
                early.append((task.allocation_id, task.attempt))
        early.extend(carried.get(node_id, set()) - now_carried - heard_end)
        carried[node_id] = now_carried
        return heartbeat(self, node_id, used, live_tasks, **kwargs)

    monkeypatch.setattr(ResourceManagerCore, "report_events", recording_report_events)
    monkeypatch.setattr(ResourceManagerCore, "heartbeat", recording_heartbeat)
    simulate(jobs_of(MIXED), nodes=5, node_cpu=4, node_memory_mb=8192, heartbeats=heartbeats)
    assert heard_end  # tasks did end
    assert early == []


def test_the_same_seed_gives_byte_identical_results(tmp_path: Path):
    def run_into(directory: Path, seed: int) -> dict[str, bytes]:
        result = simulate(jobs_of(MIXED, seed), seed, nodes=4, node_cpu=4).result  # type: ignore[attr-defined]
        summary = summarize(result.outcomes, result.samples)
        paths = write_results(directory, result.outcomes, result.samples, summary, {"seed": seed})
        return {p.name: p.read_bytes() for p in paths}

    first, again, other = (
        run_into(tmp_path / "a", 7),
        run_into(tmp_path / "b", 7),
        run_into(tmp_path / "c", 8),
    )
    assert first == again
    assert first["jobs.csv"] != other["jobs.csv"]


def test_alone_on_a_large_cluster_a_job_takes_its_critical_path_plus_the_live_overheads():
    (job,) = jobs_of(
        workload(
            {
                "name": "chain",
                "priority": 0,
                "arrival": {"process": "fixed", "times": [0]},
                "phases": [
                    {"name": "a", "tasks": 4, "cpu": 1, "memory_mb": 100, "duration": 30},
                    {
                        "name": "b",
                        "after": ["a"],
                        "tasks": 1,
                        "cpu": 1,
                        "memory_mb": 100,
                        "duration": 20,
                    },
                ],
            }
        )
    )
    (outcome,) = simulate([job], nodes=8).result.outcomes  # type: ignore[attr-defined]
    # 50 s of work on the critical path; a job master to launch (a heartbeat, ~1 s start-up),
    # then per phase a round to ask, one to launch, a monitor pass and a round to hear the end
    assert outcome.alone_time == 50
    assert 50 < outcome.completion_time < 50 + 6
    assert outcome.state == "succeeded"


def test_higher_priority_jobs_are_served_first_when_the_cluster_is_full():
    document = workload(
        job_class("low", count=20, rate=10, priority=0),
        job_class("high", count=20, rate=10, priority=9),
    )
    result = simulate(jobs_of(document), nodes=2, node_cpu=2).result  # type: ignore[attr-defined]
    waits = {
        p: sorted(o.start_time - o.submit_time for o in result.outcomes if o.priority == p)
        for p in (0, 9)
    }
    assert sum(waits[9]) < sum(waits[0])


def test_a_job_that_fits_no_node_is_refused_like_the_live_rm_refuses_it():
    too_big = job_class(
        "huge",
        count=1,
        phases=[{"name": "p", "tasks": 1, "cpu": 64, "memory_mb": 100, "duration": 1}],
    )
    simulation = simulate(jobs_of(workload(too_big, job_class("ok", count=2))), nodes=2)
    assert [name for name, _ in simulation.refused] == ["huge-000000"]
    assert [o.name for o in simulation.result.outcomes] == ["ok-000000", "ok-000001"]  # type: ignore[attr-defined]


def test_until_leaves_the_unfinished_jobs_marked():
    result = simulate(jobs_of(MIXED), nodes=1, node_cpu=2, until=60.0).result  # type: ignore[attr-defined]
    states = {o.state for o in result.outcomes}
    assert "unfinished" in states and result.end_time <= 60.0


class _Controlled(Simulation):
    """A simulation that, at given times, changes a running task's rate or kills it."""

    def __init__(self, jobs: list[SimJob], actions: list[tuple[float, str, float]]) -> None:
        super().__init__(jobs, SimSettings(nodes=1, node_cpu=2), seed=1)
        for time, what, rate in actions:
            self.at(time, functools.partial(self._act, what, rate))

    def _act(self, what: str, rate: float) -> None:
        (allocation_id,) = [
            a for a, t in self._where.items() if t.tasks[a].state.value == "running"
        ]
        if what == "rate":
            self.set_rate(allocation_id, rate)
        else:
            self.kill_task(allocation_id, "preempted")


@pytest.mark.parametrize(
    ("actions", "extra_time", "lost_work", "preemptions"),
    [
        ([], 0.0, 0.0, 0),
        ([(10.0, "rate", 0.0), (30.0, "rate", 1.0)], 20.0, 0.0, 0),  # frozen 20 s: no progress
        ([(10.0, "rate", 0.5)], None, 0.0, 0),  # shrunk to half: the rest takes twice as long
        ([(10.0, "kill", 0.0)], None, None, 1),  # killed: its work is lost and done again
    ],
)
def test_a_tasks_progress_follows_its_cpu_share(
    actions: list[tuple[float, str, float]],
    extra_time: float | None,
    lost_work: float | None,
    preemptions: int,
):
    one_task = job_class(
        "t",
        count=1,
        phases=[{"name": "p", "tasks": 1, "cpu": 1, "memory_mb": 100, "duration": 40}],
    )
    jobs = jobs_of(workload(one_task))
    (baseline,) = Simulation(jobs, SimSettings(nodes=1, node_cpu=2), 1).run().outcomes
    simulation = _Controlled(jobs, actions)
    (outcome,) = simulation.run().outcomes
    delay = outcome.finish_time - baseline.finish_time
    started = baseline.start_time
    if extra_time is not None:
        assert delay == pytest.approx(extra_time, abs=0.5)
    elif actions[0][1] == "rate":
        left_at_10 = 40 - (10 - started)
        assert delay == pytest.approx(left_at_10, abs=0.5)  # twice as long for what was left
    else:
        assert delay == pytest.approx(10 - started, abs=1.5)  # its 10 - start s are redone
    assert outcome.preemptions == preemptions
    if lost_work is None:
        assert outcome.lost_work == pytest.approx(10 - started, abs=1e-6)
    else:
        assert outcome.lost_work == lost_work


@dataclasses.dataclass
class _KillLowerPriority:
    """A post-filter for tests: when an ask fits nowhere, kill (or suspend) every running
    container of lower-priority jobs.  It reads the core's records, as a plugin of issue 11
    will read a view of them."""

    simulation: Simulation | None = None
    action: PreemptionAction = PreemptionAction.KILL
    name: ClassVar[str] = "KillLowerPriority"

    def preempt(self, ask: PendingAsk, context: PassContext) -> list[Preemption]:
        assert self.simulation is not None
        core = self.simulation.core
        return [
            Preemption(a.allocation_id, self.action, f"for {ask.job_id}")
            for a in core.allocations.values()
            if not a.is_master
            and a.goal is Goal.RUN
            and core.jobs[a.job_id].spec.priority < ask.priority
        ]


def test_a_kill_by_preemption_is_redone_and_uses_up_no_retry():
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
    jobs = jobs_of(workload(low, high))
    assert all(job.spec.max_retries >= 0 for job in jobs)
    jobs = [dataclasses.replace(j, spec=dataclasses.replace(j.spec, max_retries=0)) for j in jobs]
    plugin = _KillLowerPriority()
    profile = dataclasses.replace(baseline_profile(), post_filters=(plugin,))
    simulation = Simulation(jobs, SimSettings(nodes=1, node_cpu=4), seed=1, profile=profile)
    plugin.simulation = simulation
    outcomes = {o.job_class: o for o in simulation.run().outcomes}
    assert outcomes["high"].state == outcomes["low"].state == "succeeded"
    assert outcomes["high"].finish_time < 40.0  # it did not wait 50 s for the low tasks
    assert outcomes["low"].preemptions >= 1
    assert outcomes["low"].lost_work > 0


class _Directed(Simulation):
    """A simulation that, at given times, changes one named task's rate or kills it."""

    def __init__(self, jobs: list[SimJob], actions: list[tuple[float, str, str, float]]) -> None:
        super().__init__(jobs, SimSettings(nodes=1, node_cpu=4), seed=1)
        for time, task_id, what, rate in actions:
            self.at(time, functools.partial(self._act, task_id, what, rate))

    def _running(self) -> dict[str, str]:
        """Task id -> allocation of each running task attempt."""
        return {
            task.task_id: allocation_id
            for allocation_id, node in self._where.items()
            for task in [node.tasks[allocation_id]]
            if not task.job_master and task.state.value == "running"
        }

    def _act(self, task_id: str, what: str, rate: float) -> None:
        if what == "rate":
            self.set_rate(self._running()[task_id], rate)
        elif what == "kill":
            self.kill_task(self._running()[task_id], "preempted")


def pair_of_tasks(*, coupled: bool) -> list[SimJob]:
    phase: dict[str, object] = {"name": "p", "tasks": 2, "cpu": 1, "memory_mb": 100}
    phase |= {"duration": 40, "coupled": coupled}
    return jobs_of(workload(job_class("pair", count=1, phases=[phase])))


FREEZE_10_TO_30 = [(10.0, "p-0", "rate", 0.0), (30.0, "p-0", "rate", 1.0)]


@pytest.mark.parametrize(
    ("coupled", "actions", "lost_tasks", "delay"),
    [
        (False, [], 0, "none"),
        (True, [], 0, "none"),
        (False, FREEZE_10_TO_30, 0, "frozen 20 s"),
        (True, FREEZE_10_TO_30, 0, "frozen 20 s"),
        (False, [(10.0, "p-0", "rate", 0.5)], 0, "the rest at half speed"),
        (True, [(10.0, "p-0", "rate", 0.5)], 0, "the rest at half speed"),
        (False, [(10.0, "p-0", "kill", 0.0)], 1, "redone"),  # the killed task's work
        (True, [(10.0, "p-0", "kill", 0.0)], 2, "redone"),  # ... and its sibling's: restarted
    ],
)
def test_a_kill_in_a_coupled_phase_loses_the_phases_progress(
    coupled: bool, actions: list[tuple[float, str, str, float]], lost_tasks: int, delay: str
):
    settings = SimSettings(nodes=1, node_cpu=4)
    (alone,) = Simulation(pair_of_tasks(coupled=coupled), settings, 1).run().outcomes
    (outcome,) = _Directed(pair_of_tasks(coupled=coupled), actions).run().outcomes
    done_at_10 = 10 - alone.start_time  # what each task had done when the action came
    assert outcome.lost_work == pytest.approx(lost_tasks * done_at_10, abs=1e-6)
    expected = {
        "none": 0.0,
        "frozen 20 s": 20.0,
        "the rest at half speed": 40 - done_at_10,
        "redone": done_at_10,
    }[delay]
    late = outcome.finish_time - alone.finish_time
    assert late == pytest.approx(expected, abs=1.5)  # 1.5: a retry's launch


def kept_job(reservation: dict[str, object] | None) -> SimJob:
    """p0 (tasks of 10 s and 100 s) -> p1: p0-0's container is kept while p0-1 runs."""
    extra = {} if reservation is None else {"reservation": reservation}
    phases = (phase_doc("p0", 2, memory_mb=64), phase_doc("p1", 2, memory_mb=64, after=["p0"]))
    spec = parse_job_spec(job_doc(*phases, name="kept", **extra))
    return SimJob("kept", "kept", 0.0, spec, {"p0": (10.0, 100.0), "p1": (5.0, 5.0)})


@pytest.mark.parametrize(
    ("reservation", "containers_at_50"),
    [
        (None, 1),  # p0-0's container went back when it ended
        ({"isolation": 0.5}, 2),  # kept: no task times to fit, no deadline yet
        # D = 10 (1 - 0.5^(1/2))^(-1/2) = 18.5 s after p0 opened: back before 50 s, although
        # no event of the job's marks it
        ({"isolation": 0.5, "prior": {"alpha": 2, "t_min": 10}}, 1),
    ],
)
def test_a_kept_container_goes_back_at_its_deadline(
    reservation: dict[str, object] | None, containers_at_50: int
):
    simulation = Simulation(
        [kept_job(reservation)], SimSettings(nodes=1, node_cpu=4, until=50.0), 1
    )
    simulation.run()
    held = [a for a in simulation.core.allocations.values() if not a.is_master]
    assert len(held) == containers_at_50


@pytest.mark.parametrize(
    ("locality", "wait", "expected"),
    [
        (False, 0.0, 20.0),  # no locality model: 10 s + 10 s
        (True, 0.0, 60.0),  # the second p1 task runs away from p0's output: 5 x 10 s
        (True, 3.0, 63.0),  # ... after waiting 3 s for p0's node (the RM's locality wait)
    ],
)
def test_a_downstream_task_away_from_its_input_runs_slower_after_the_locality_wait(
    locality: bool, wait: float, expected: float
):
    """Two nodes of one slot; p0 (one task) -> p1 (two tasks): one p1 task fits on p0's node,
    the other must go to the other node."""
    phases = (phase_doc("p0", 1, memory_mb=64), phase_doc("p1", 2, memory_mb=64, after=["p0"]))
    spec = parse_job_spec(job_doc(*phases, name="pipe"))
    job = SimJob("pipe", "pipe", 0.0, spec, {"p0": (10.0,), "p1": (10.0, 10.0)})
    settings = SimSettings(
        nodes=2,
        node_cpu=1,
        client_mode=True,
        locality=locality,
        core=CoreSettings(locality_wait=wait),
    )
    simulation = Simulation([job], settings, 1)
    (outcome,) = simulation.run().outcomes
    assert outcome.finish_time - outcome.start_time == pytest.approx(expected, abs=1.5)
    assert simulation.nonlocal_tasks.get(outcome.job_id, 0) == (1 if locality else 0)


def fixed_job(name: str, priority: int, at: float) -> dict[str, object]:
    return {
        "name": name,
        "priority": priority,
        "arrival": {"process": "fixed", "times": [at]},
        "phases": [{"name": "map", "tasks": 4, "cpu": 1, "memory_mb": 256, "duration": 5}],
    }


@pytest.mark.parametrize("high_at", [1.2, 0.6, 3.0])
def test_a_job_evicted_while_its_job_master_starts_is_executed_again(high_at: float):
    """Preemptive dispatch evicts the low-priority job while its job master is starting (at
    1.2 s: launched, not yet registered; the stop reaches the node at its next heartbeat): the
    process's registration is refused and it exits, instead of the run dying of the refusal.
    (The live core's side of the race: tests/unit/resource_manager/
    test_evicted_while_starting.py.)"""
    jobs = jobs_of(workload(fixed_job("low", 0, 0.0), fixed_job("high", 1, high_at)))
    core = CoreSettings(dispatch=DispatchMode.PREEMPTIVE, max_running_jobs=1)
    simulation = simulate(jobs, nodes=2, node_cpu=2.0, node_memory_mb=4096, core=core)
    outcomes = {o.job_class: o for o in simulation.result.outcomes}  # type: ignore[attr-defined]
    assert {c: o.state for c, o in outcomes.items()} == {"low": "succeeded", "high": "succeeded"}
    assert outcomes["high"].finish_time < outcomes["low"].finish_time
    low = next(j for j, job in simulation.sim_jobs.items() if job.job_class == "low")
    assert simulation.core.job(low).execution.evictions == 1


def one_long_task(duration: float) -> list[SimJob]:
    phase = {"name": "p", "tasks": 1, "cpu": 2, "memory_mb": 512, "duration": duration}
    return jobs_of(workload(job_class("long", count=1, phases=[phase])))


def test_utilisation_is_sampled_on_change_not_through_idle_spells():
    """A task running 100,000 s alone costs the events and samples of one running 1,000 s:
    nothing changes while it runs (it used to take a sample event, and a row, every 10 s).
    The time-weighted utilisation is the same step function: the task's 2 of 4 cpus and its
    job master's 0.1 while it runs."""
    runs = {
        duration: simulate(one_long_task(duration), nodes=1, node_cpu=4) for duration in (1e3, 1e5)
    }
    short, long = (runs[d].result for d in (1e3, 1e5))  # type: ignore[attr-defined]
    assert long.events == short.events
    assert len(long.samples) == len(short.samples) <= 6
    utilisation = {
        d: summarize(r.outcomes, r.samples).cpu_utilisation for d, r in ((1e3, short), (1e5, long))
    }
    assert utilisation[1e5] == pytest.approx(2.1 / 4, abs=0.001)
    assert 0.5 < utilisation[1e3] < 0.53
