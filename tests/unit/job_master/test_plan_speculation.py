"""The job master's speculative tasks (ROSE Alg. 5 and Sec. 6.3): dispatch after the asks
starve, refusals, rescheduling, and what a granted container does to a speculative attempt."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from job_master.plan import AttemptKind, Container, Decisions, JobPlan, Step
from job_master.speculation import Candidate
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from tests.builders import job_doc, job_spec, phase_doc, res

_ids = itertools.count(1)
NODES = [Candidate(f"n{i}", f"n{i}:7000") for i in range(1, 4)]
ROTATIONS = [["n1", "n2", "n3"], ["n2", "n3", "n1"], ["n3", "n1", "n2"]]


def plan_of(tasks: int = 3, **speculative: object) -> JobPlan:
    block = {"after_s": 2.0, "queue_timeout_s": 10.0, **speculative}
    return JobPlan(parse_job_spec(job_doc(phase_doc("map", tasks), speculative=block)), now=0.0)


def container(node: str, phase: str = "map") -> Container:
    return Container(f"a{next(_ids):06d}", phase, node, f"{node}:7000", res(1.0, 256))


def decide(plan: JobPlan, now: float, candidates: list[Candidate] | None = None) -> Decisions:
    plan.advance(now)
    return plan.decide(NODES if candidates is None else candidates, np.random.default_rng(1))


def speculating(plan: JobPlan, now: float = 2.0) -> dict[str, str]:
    """Dispatch; every queue accepts.  Task id -> node."""
    placed = decide(plan, now).speculative
    for launch in placed:
        plan.on_speculative_answer(launch.task_id, launch.attempt, accepted=True)
    return {launch.task_id: launch.node_id for launch in placed}


def step_of(plan: JobPlan, task_id: str) -> Step:
    return plan.tasks[task_id].step


def attempt_of(plan: JobPlan, task_id: str) -> int:
    number = plan.tasks[task_id].speculative
    assert number is not None
    return number


def run(plan: JobPlan, task_id: str, state: TaskState = TaskState.RUNNING, **kw: object) -> None:
    plan.on_speculative_status(task_id, attempt_of(plan, task_id), state, **kw)  # type: ignore[arg-type]


def test_nothing_is_speculative_until_the_asks_have_starved_for_after_s() -> None:
    plan = plan_of()
    assert decide(plan, 1.9).speculative == ()
    placed = decide(plan, 2.0).speculative
    assert [(p.task_id, p.attempt) for p in placed] == [("map-0", 1), ("map-1", 1), ("map-2", 1)]
    assert [p.node_id for p in placed] in ROTATIONS  # one per candidate, in the list's order
    assert plan.tasks["map-0"].step is Step.READY  # still asked for
    assert decide(plan, 3.0).asks[0].count == 3


def test_one_task_per_candidate_per_round_round_robin() -> None:
    plan = plan_of(tasks=5)
    first = decide(plan, 2.0, NODES[:2]).speculative
    second = decide(plan, 2.1, NODES[:2]).speculative
    assert sorted(p.node_id for p in first) == ["n1", "n2"]
    # the round-robin moved on by one
    assert [p.node_id for p in second] == [p.node_id for p in reversed(first)]


def test_job_masters_start_at_random_places_on_the_same_list() -> None:
    """Every job master holds the same list: starting all at its head would herd them."""
    many = [Candidate(f"m{i}", f"m{i}:7000") for i in range(50)]
    firsts = set()
    for seed in range(20):
        plan = plan_of(tasks=1)
        plan.advance(2.0)
        (placed,) = plan.decide(many, np.random.default_rng(seed)).speculative
        firsts.add(placed.node_id)
    assert len(firsts) > 10


def test_a_grant_resets_the_starvation_clock() -> None:
    plan = plan_of(tasks=4)
    decide(plan, 1.5)
    plan.on_granted(container("n9"))
    assert decide(plan, 2.5).speculative == ()  # 1.0 s since the grant
    assert len(decide(plan, 3.5).speculative) == 3


def test_max_tasks_bounds_live_speculative_attempts() -> None:
    plan = plan_of(tasks=5, max_tasks=2)
    assert len(speculating(plan)) == 2
    assert decide(plan, 3.0).speculative == ()


def test_a_refusing_node_backs_off_and_the_task_goes_elsewhere() -> None:
    plan = plan_of(tasks=1)
    (launch,) = decide(plan, 2.0, NODES[:1]).speculative
    plan.on_speculative_answer("map-0", launch.attempt, accepted=False)
    assert plan.tasks["map-0"].speculative is None
    assert decide(plan, 2.5, NODES[:1]).speculative == ()  # n1 backs off
    (again,) = decide(plan, 2.6, NODES[:2]).speculative
    assert (again.node_id, again.attempt) == ("n2", 2)
    assert plan.speculation is not None and plan.speculation.counts.refused == 1


def test_a_queued_attempt_is_cancelled_when_a_container_comes() -> None:
    """Alg. 5 lines 7-9."""
    plan = plan_of(tasks=1)
    nodes = speculating(plan)
    plan.on_granted(container("n5"))
    decisions = decide(plan, 3.0)
    assert [(s.task_id, s.node_address) for s in decisions.stops] == [
        ("map-0", f"{nodes['map-0']}:7000")
    ]
    assert [(x.task_id, x.kind) for x in decisions.launches] == [("map-0", AttemptKind.REGULAR)]
    assert plan.tasks["map-0"].speculative is None


def test_a_running_attempt_on_the_granted_node_is_upgraded_in_place() -> None:
    """Alg. 5 lines 10-11."""
    plan = plan_of(tasks=2)
    nodes = speculating(plan)
    run(plan, "map-1")
    plan.on_granted(container(nodes["map-1"]))
    decisions = decide(plan, 3.0)
    assert decisions.launches == () and decisions.stops == ()
    (upgrade,) = decisions.upgrades
    assert (upgrade.task_id, upgrade.attempt, upgrade.container.node_id) == (
        "map-1",
        1,
        nodes["map-1"],
    )
    assert step_of(plan, "map-1") is Step.LAUNCHING
    assert plan.tasks["map-1"].attempts[1].kind is AttemptKind.REGULAR
    plan.on_task_event("map-1", 1, TaskState.RUNNING, 0, "")  # the RM's record of it
    assert step_of(plan, "map-1") is Step.RUNNING
    plan.on_task_event("map-1", 1, TaskState.SUCCEEDED, 0, "")
    assert step_of(plan, "map-1") is Step.SUCCEEDED


def finished_phase_time(plan: JobPlan, seconds: float) -> None:
    """One task of the phase finished after ``seconds`` (the mean progress is measured by)."""
    assert plan.speculation is not None
    plan.speculation.finished("map", seconds)


@pytest.mark.parametrize(
    ("ran_for", "step", "stops", "launches"),
    [
        (7.0, Step.COVERED, 0, 0),  # progress 0.7 > tau: kept, the container reserved (l. 12-14)
        (5.0, Step.LAUNCHING, 1, 1),  # 0.5 <= tau: killed, started on the container (l. 15-17)
    ],
)
def test_a_running_attempt_elsewhere_is_kept_or_killed_by_its_progress(
    ran_for: float, step: Step, stops: int, launches: int
) -> None:
    plan = plan_of(tasks=1)
    speculating(plan, now=2.0)
    run(plan, "map-0")
    finished_phase_time(plan, 10.0)
    plan.on_granted(container("n7"))
    decisions = decide(plan, 2.0 + ran_for)
    assert plan.tasks["map-0"].step is step
    assert (len(decisions.stops), len(decisions.launches)) == (stops, launches)


def test_a_covered_task_gives_its_reserve_back_when_the_speculative_attempt_succeeds() -> None:
    plan = plan_of(tasks=1)
    speculating(plan)
    run(plan, "map-0")
    finished_phase_time(plan, 1.0)
    reserve = container("n7")
    plan.on_granted(reserve)
    decide(plan, 5.0)
    run(plan, "map-0", TaskState.SUCCEEDED)
    decisions = decide(plan, 5.1)
    assert reserve.allocation_id in decisions.releases
    assert plan.outcome == (JobState.SUCCEEDED, "")


def test_a_covered_task_runs_on_its_reserve_when_the_speculative_attempt_is_evicted() -> None:
    plan = plan_of(tasks=1)
    speculating(plan)
    run(plan, "map-0")
    finished_phase_time(plan, 1.0)
    reserve = container("n7")
    plan.on_granted(reserve)
    decide(plan, 5.0)
    run(plan, "map-0", TaskState.KILLED, evicted=True, message="evicted: psi_cpu")
    decisions = decide(plan, 5.1, [])
    assert [(x.task_id, x.container.allocation_id) for x in decisions.launches] == [
        ("map-0", reserve.allocation_id)
    ]
    assert plan.speculation is not None and plan.speculation.counts.evicted == 1


def test_an_attempt_queued_too_long_is_rescheduled_elsewhere() -> None:
    """Sec. 6.3: a random latest candidate other than its node."""
    plan = plan_of(tasks=1)
    nodes = speculating(plan, now=2.0)
    assert decide(plan, 11.9).speculative == ()  # within the 10 s time-out
    decisions = decide(plan, 12.5)
    assert [s.node_address for s in decisions.stops] == [f"{nodes['map-0']}:7000"]
    (moved,) = decisions.speculative
    assert moved.node_id != nodes["map-0"] and moved.attempt == 2


def test_a_speculative_success_finishes_the_task_and_its_asks() -> None:
    plan = plan_of(tasks=1)
    speculating(plan)
    run(plan, "map-0")
    run(plan, "map-0", TaskState.SUCCEEDED)
    assert plan.tasks["map-0"].step is Step.SUCCEEDED
    assert plan.outcome == (JobState.SUCCEEDED, "")


def test_an_evicted_attempt_leaves_its_task_ready_for_another_placement() -> None:
    plan = plan_of(tasks=1)
    speculating(plan)
    run(plan, "map-0")
    run(plan, "map-0", TaskState.KILLED, evicted=True)
    task = plan.tasks["map-0"]
    assert (task.step, task.speculative, task.failures) == (Step.READY, None, 0)
    (again,) = decide(plan, 3.0).speculative
    assert again.attempt == 2


def test_a_failed_upgrade_stops_the_attempt_and_gives_the_container_back() -> None:
    plan = plan_of(tasks=1)
    nodes = speculating(plan)
    run(plan, "map-0")
    granted = container(nodes["map-0"])
    plan.on_granted(granted)
    (upgrade,) = decide(plan, 3.0).upgrades
    plan.on_upgrade_failed("map-0", upgrade.attempt, "no live task")
    decisions = decide(plan, 3.1, [])
    assert granted.allocation_id in decisions.releases
    assert [s.reason for s in decisions.stops] == ["upgrade failed: no live task"]
    assert plan.tasks["map-0"].step is Step.READY


def test_without_a_speculative_block_candidates_change_nothing() -> None:
    plan = JobPlan(job_spec(phase_doc("map", 2)), now=0.0)
    assert decide(plan, 100.0).speculative == ()
