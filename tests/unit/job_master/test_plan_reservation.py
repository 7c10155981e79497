"""Speculative slot reservation in the job master's plan: containers kept across barriers
(Alg. 1), pre-reservation, the deadline of Eq. 4, and straggler copies on kept containers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from job_master.plan import AttemptKind, Container, Decisions, JobPlan
from policies.reservation.deadline import deadline_for_isolation, fit_pareto
from policies.scheduling.jobspec import JobSpec, ReservationSpec, TaskTimePrior
from policies.scheduling.lifecycle import JobState, TaskState
from tests.builders import job_spec, phase_doc, res
from tests.unit.job_master.test_plan import asked, container

RESERVE = ReservationSpec(isolation=0.9, prereserve_at=1.0, max_copies=0)


def chain(*tasks: int) -> JobSpec:
    """Phases p0 -> p1 -> ... with the given task counts."""
    phases = [
        phase_doc(f"p{index}", count, after=[f"p{index - 1}"] if index else [])
        for index, count in enumerate(tasks)
    ]
    return job_spec(*phases)


def start(plan: JobPlan, phase: str, count: int) -> list[str]:
    """Grant ``count`` containers of ``phase``; the plan launches its ready tasks there, which
    are reported running.  The launched task ids, in order."""
    for _ in range(count):
        plan.on_granted(container(phase))
    launched = [launch.task_id for launch in plan.decide().launches]
    for task_id in launched:
        report(plan, task_id, TaskState.RUNNING)
    return launched


def report(plan: JobPlan, task_id: str, state: TaskState, attempt: int | None = None) -> None:
    number = plan.tasks[task_id].attempt if attempt is None else attempt
    plan.on_task_event(task_id, number, state, 0, "")


def finish(plan: JobPlan, task_id: str, at: float) -> Decisions:
    plan.advance(at)
    report(plan, task_id, TaskState.SUCCEEDED)
    return plan.decide()


def kept_for(plan: JobPlan, phase: str) -> set[str]:
    return {
        a
        for a, c in plan.containers.items()
        if c.kept is not None and c.kept.phase == phase and c.task_id is None
    }


@pytest.mark.parametrize(
    ("m", "n", "released_first"),
    [
        (3, 3, 0),  # m = n: every container is kept
        (4, 2, 2),  # m > n: the first m - n finishers give theirs back
        (2, 2, 0),
    ],
)
def test_finished_tasks_keep_their_containers_for_the_downstream_phase(
    m: int, n: int, released_first: int
):
    plan = JobPlan(chain(m, n), RESERVE)
    start(plan, "p0", m)
    held = dict(plan.containers)
    released: list[str] = []
    for index in range(m - 1):
        decisions = finish(plan, f"p0-{index}", at=10.0 + index)
        released += decisions.releases
        assert asked(decisions) == {}  # nothing asked for p1 before its barrier
    assert len(released) == released_first
    assert len(kept_for(plan, "p1")) == m - 1 - released_first
    last = finish(plan, f"p0-{m - 1}", at=20.0)  # the barrier passes
    in_kept = {launch.container.allocation_id for launch in last.launches}
    assert {launch.task_id for launch in last.launches} == {f"p1-{i}" for i in range(n)}
    assert in_kept <= set(held)  # the downstream tasks run in the upstream containers
    assert asked(last) == {}


def test_without_reservation_every_container_goes_back_at_once():
    plan = JobPlan(chain(2, 2))
    start(plan, "p0", 2)
    assert len(finish(plan, "p0-0", at=1.0).releases) == 1


def test_the_final_phase_gives_its_containers_back():
    plan = JobPlan(chain(1, 2), RESERVE)
    start(plan, "p0", 1)
    finish(plan, "p0-0", at=5.0)
    start(plan, "p1", 1)  # p1-0 in the kept container, p1-1 in a new one
    assert finish(plan, "p1-0", at=6.0).releases  # Alg. 1 line 3


def test_with_copies_the_final_phase_keeps_its_containers_for_copies_of_its_stragglers():
    plan = JobPlan(chain(1, 2), ReservationSpec(max_copies=None))
    start(plan, "p0", 1)
    finish(plan, "p0-0", at=5.0)
    start(plan, "p1", 1)
    assert finish(plan, "p1-0", at=6.0).launches == ()  # one ongoing, one idle kept
    decisions = plan.decide()  # the next round confirms the copy
    (copy,) = decisions.launches
    assert (copy.task_id, copy.kind, decisions.releases) == ("p1-1", AttemptKind.COPY, ())
    report(plan, "p1-1", TaskState.RUNNING, attempt=2)
    report(plan, "p1-1", TaskState.SUCCEEDED, attempt=2)
    assert plan.outcome is not None and plan.outcome[0] is JobState.SUCCEEDED


def test_past_the_threshold_the_extra_slots_of_a_wider_phase_are_asked_for_ahead():
    plan = JobPlan(chain(2, 4), ReservationSpec(prereserve_at=0.4))
    start(plan, "p0", 2)
    decisions = finish(plan, "p0-0", at=3.0)  # 1/2 finished: past R = 0.4
    assert asked(decisions) == {"p1": 2}  # n - m, before p1's barrier
    (ahead,) = decisions.asks  # near p0's output only (where the RM waits for locality)
    assert (ahead.preferred_nodes, ahead.local_only) == (("n1",), True)
    start(plan, "p1", 2)  # granted: kept idle, nothing to run yet
    assert len(kept_for(plan, "p1")) == 3
    assert asked(plan.decide()) == {}  # asked once
    last = finish(plan, "p0-1", at=4.0)
    assert len(last.launches) == 4 and asked(last) == {}


@pytest.mark.parametrize(
    ("isolation", "alpha", "t_min", "tasks"),
    [(0.5, 2.0, 10.0, 2), (0.9, 1.6, 4.0, 3), (0.0, 3.0, 1.0, 2)],
)
def test_kept_containers_go_back_at_the_deadline_of_eq_4(
    isolation: float, alpha: float, t_min: float, tasks: int
):
    settings = ReservationSpec(isolation=isolation, prior=TaskTimePrior(alpha, t_min))
    plan = JobPlan(chain(tasks, tasks), settings, now=100.0)  # p0 opens at 100
    start(plan, "p0", tasks)
    deadline = deadline_for_isolation(isolation, t_min, alpha, tasks)
    assert not finish(plan, "p0-0", at=100.0 + deadline / 2).releases
    plan.advance(100.0 + deadline - 1e-6)
    assert plan.decide().releases == ()
    plan.advance(100.0 + deadline)
    assert len(plan.decide().releases) == 1
    assert kept_for(plan, "p1") == set()


@pytest.mark.parametrize("finished", [1, 4])
def test_with_no_prior_and_too_few_task_times_there_is_no_deadline_yet(finished: int):
    plan = JobPlan(chain(8, 8), ReservationSpec(isolation=0.9))
    start(plan, "p0", 8)
    for index in range(finished):
        finish(plan, f"p0-{index}", at=2.0 + index)
    plan.advance(1e9)
    assert plan.decide().releases == ()  # kept until the barrier
    assert len(kept_for(plan, "p1")) == finished


def test_the_deadline_follows_the_jobs_own_task_times_once_enough_have_finished():
    plan = JobPlan(chain(8, 8), ReservationSpec(isolation=0.9))  # no prior
    start(plan, "p0", 8)
    times = [2.0, 3.0, 4.0, 6.0, 9.0]
    for index, seconds in enumerate(times):
        finish(plan, f"p0-{index}", at=seconds)
    fit = fit_pareto(times)  # the phase opened at 0: each task's time is its finish
    deadline = deadline_for_isolation(0.9, fit.t_min, fit.alpha, 8)
    plan.advance(deadline - 1e-6)
    assert plan.decide().releases == ()
    plan.advance(deadline)
    assert len(plan.decide().releases) == 5


def test_a_deadline_that_comes_is_the_one_every_task_time_known_gives():
    """Tasks finish shortest first, so the fit in force between two doublings (here of the 5
    first finishers) sets D before slower tasks already seen: at that D the job's task times
    are fitted again, and the kept containers stay while the new D has not come.  (Before,
    they lapsed at the stale D, just before the barrier: a SQL-like join's kept containers
    in the 1,000-node isolation study.)"""
    plan = JobPlan(chain(9, 9), ReservationSpec(isolation=0.9))  # no prior
    start(plan, "p0", 9)  # every task starts at 0: time 0 of the deadline
    first = [2.0, 3.0, 4.0, 6.0, 9.0]
    stale = fit_pareto(first)
    stale_deadline = deadline_for_isolation(0.9, stale.t_min, stale.alpha, 9)
    slower = [20.0, 30.0, 50.0]
    assert max(slower) < stale_deadline < 60.0
    for index, seconds in enumerate([*first, *slower]):
        assert not finish(plan, f"p0-{index}", at=seconds).releases
    fresh = fit_pareto([*first, *slower])
    assert deadline_for_isolation(0.9, fresh.t_min, fresh.alpha, 9) > 60.0
    plan.advance(stale_deadline)
    assert plan.decide().releases == ()  # refitted: not yet
    assert len(kept_for(plan, "p1")) == 8
    barrier = finish(plan, "p0-8", at=60.0)
    assert len(barrier.launches) == 9 and asked(barrier) == {}
    assert {end.reason for end in plan.kept_ends} == {"used"}


def test_an_idle_kept_container_runs_a_copy_of_the_straggler_and_the_first_to_succeed_wins():
    plan = JobPlan(chain(2, 2), ReservationSpec(max_copies=None))
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=5.0)
    (copy,) = plan.decide().launches
    assert (copy.task_id, copy.kind, copy.phase.name) == ("p0-1", AttemptKind.COPY, "p0")
    report(plan, "p0-1", TaskState.RUNNING, attempt=2)
    plan.advance(6.0)
    report(plan, "p0-1", TaskState.SUCCEEDED, attempt=2)  # the copy wins
    decisions = plan.decide()
    (stop,) = decisions.stops
    assert (stop.task_id, stop.attempt) == ("p0-1", 1)  # the straggler is stopped
    assert plan.progress()[0].succeeded == 2  # the task counts once
    # the copy's container, kept, runs a p1 task; the straggler's is kept too, for the other
    assert copy.container.allocation_id in {la.container.allocation_id for la in decisions.launches}
    assert (decisions.releases, asked(decisions)) == ((), {})


def test_when_the_original_wins_its_copy_is_stopped_and_its_kept_container_idles_again():
    plan = JobPlan(chain(2, 3), ReservationSpec(max_copies=None))
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=5.0)
    (copy,) = plan.decide().launches
    report(plan, "p0-1", TaskState.SUCCEEDED, attempt=1)
    decisions = plan.decide()
    assert [(s.task_id, s.attempt) for s in decisions.stops] == [("p0-1", 2)]
    slot = copy.container.allocation_id
    assert slot not in {la.container.allocation_id for la in decisions.launches}  # still busy
    report(plan, "p0-1", TaskState.KILLED, attempt=2)  # the stop is seen done
    (launch,) = plan.decide().launches
    assert launch.container.allocation_id == slot and launch.task_id.startswith("p1-")


def test_copies_are_bounded_and_go_to_the_longest_running_first():
    plan = JobPlan(chain(4, 4), ReservationSpec(max_copies=1))
    plan.on_granted(container("p0"))
    plan.on_granted(container("p0"))
    for launch in plan.decide().launches:  # p0-0, p0-1 start at 0
        report(plan, launch.task_id, TaskState.RUNNING)
    plan.advance(1.0)
    start(plan, "p0", 2)  # p0-2, p0-3 start at 1
    finish(plan, "p0-0", at=2.0)
    finish(plan, "p0-2", at=3.0)  # 2 ongoing, 2 idle kept: copies, at most 1
    decisions = plan.decide()
    assert [(la.task_id, la.kind) for la in decisions.launches] == [("p0-1", AttemptKind.COPY)]


def test_a_lost_node_takes_its_kept_container_with_it():
    plan = JobPlan(chain(2, 2), RESERVE)
    start(plan, "p0", 2)
    finish(plan, "p0-0", at=1.0)
    (slot,) = kept_for(plan, "p1")
    plan.on_allocation_lost(slot)
    last = finish(plan, "p0-1", at=2.0)
    assert len(last.launches) == 1 and asked(last) == {"p1": 1}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=2, max_size=4),
    st.randoms(use_true_random=False),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_no_phase_ever_holds_more_kept_containers_than_it_has_tasks(
    sizes: list[int], rng: object, prereserve_at: float
):
    import random

    assert isinstance(rng, random.Random)
    spec = chain(*sizes)
    plan = JobPlan(spec, ReservationSpec(prereserve_at=prereserve_at, max_copies=None))
    clock = 0.0
    while plan.outcome is None:
        decisions = plan.decide()
        for ask in decisions.asks:
            for _ in range(ask.count):
                plan.on_granted(Container(f"x{clock:.3f}-{_}", ask.phase, "n", "n:1", res(1, 256)))
        for launch in decisions.launches:
            report(plan, launch.task_id, TaskState.RUNNING, attempt=launch.attempt)
        for stop in decisions.stops:
            report(plan, stop.task_id, TaskState.KILLED, attempt=stop.attempt)
        live = [(a.task_id, a.number) for a, _ in plan.live_attempts() if a.running]
        if live:
            task_id, number = rng.choice(live)
            clock += rng.uniform(0.1, 2.0)
            plan.advance(clock)
            report(plan, task_id, TaskState.SUCCEEDED, attempt=number)
        for phase in spec.phases:
            kept = [c for c in plan.containers.values() if c.kept and c.kept.phase == phase.name]
            assert len(kept) <= phase.tasks
        assert clock < 1e4


def test_the_rm_is_told_of_each_change_of_a_reservation_once():
    settings = ReservationSpec(isolation=0.5, prior=TaskTimePrior(2.0, 10.0))
    plan = JobPlan(chain(2, 2), settings)
    start(plan, "p0", 2)
    assert plan.kept_changes() == []
    finish(plan, "p0-0", at=5.0)
    ((allocation_id, phase, expiry, ended),) = plan.kept_changes()
    assert (phase, expiry, ended) == ("p1", deadline_for_isolation(0.5, 10.0, 2.0, 2), "")
    assert plan.kept_changes() == []  # told once
    last = finish(plan, "p0-1", at=6.0)  # the barrier: the kept container runs p1-0
    assert allocation_id in {launch.container.allocation_id for launch in last.launches}
    assert (allocation_id, "p1", math.inf, "used") in plan.kept_changes()


def test_without_a_prior_every_kept_container_is_told_again_once_the_deadline_is_known():
    plan = JobPlan(chain(6, 6), ReservationSpec(isolation=0.9))
    start(plan, "p0", 6)
    for index in range(4):
        finish(plan, f"p0-{index}", at=2.0 + index)
    assert {expiry for _a, _p, expiry, _e in plan.kept_changes()} == {math.inf}
    finish(plan, "p0-4", at=9.0)
    changes = plan.kept_changes()
    assert len(changes) == 5 and all(math.isfinite(expiry) for _a, _p, expiry, _e in changes)


def test_a_pre_reservation_prefers_the_nodes_of_the_upstream_tasks_done_and_running():
    plan = JobPlan(chain(3, 6), ReservationSpec(prereserve_at=0.3))
    for node_id in ("n1", "n2", "n3"):
        plan.on_granted(container("p0", node_id))
    for launch in plan.decide().launches:
        report(plan, launch.task_id, TaskState.RUNNING)
    finished_on = plan.containers[plan.tasks["p0-0"].allocation_id or ""].node_id
    (ahead,) = finish(plan, "p0-0", at=3.0).asks  # 1/3 finished: past R = 0.3
    assert ahead.local_only and ahead.preferred_nodes[0] == finished_on
    assert set(ahead.preferred_nodes) == {"n1", "n2", "n3"}  # where p0's output is, or will be
