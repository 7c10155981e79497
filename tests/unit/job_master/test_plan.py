"""The job master's plan: barriers, asks, launches, releases, retries, kill and progress."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from job_master.plan import (
    SERVICE_STABLE_S,
    STEP_TRANSITIONS,
    AttemptKind,
    Container,
    Decisions,
    JobPlan,
    Step,
)
from job_master.plan_model import AttemptRecord
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from tests.builders import chain_spec, job_doc, job_spec, phase_doc, res

_allocation_numbers = itertools.count(1)

DIAMOND = job_spec(
    phase_doc("a", 2),
    phase_doc("b", 1, after=["a"]),
    phase_doc("c", 1, after=["a"]),
    phase_doc("d", 1, after=["b", "c"]),
    max_retries=2,
)


def container(phase: str, node_id: str = "n1") -> Container:
    """A granted container with a fresh allocation id (ids sort in grant order)."""
    return Container(
        f"a{next(_allocation_numbers):06d}", phase, node_id, f"{node_id}:7000", res(1.0, 256)
    )


def grant(plan: JobPlan, phase: str, count: int = 1) -> list[str]:
    containers = [container(phase) for _ in range(count)]
    for c in containers:
        plan.on_granted(c)
    return [c.allocation_id for c in containers]


def report(plan: JobPlan, task_id: str, state: TaskState, *, exit_code: int = 0) -> None:
    """An agent's report about the task's current attempt."""
    plan.on_task_event(task_id, plan.tasks[task_id].attempt, state, exit_code, "")


def launch_next(plan: JobPlan, phase: str) -> str:
    """Grant one container of ``phase``; return the task the plan launched in it."""
    grant(plan, phase)
    (launch,) = plan.decide().launches
    return launch.task_id


def succeed_next(plan: JobPlan, phase: str) -> str:
    task_id = launch_next(plan, phase)
    report(plan, task_id, TaskState.SUCCEEDED)
    return task_id


def steps(plan: JobPlan) -> dict[str, Step]:
    return {task_id: task.step for task_id, task in plan.tasks.items()}


def asked(decisions: Decisions) -> dict[str, int]:
    return {a.phase: a.count for a in decisions.asks}


# --------------------------------------------------------------------------- barrier and asks


def test_only_phases_without_upstream_start_ready():
    plan = JobPlan(DIAMOND)
    assert steps(plan) == {
        "a-0": Step.READY,
        "a-1": Step.READY,
        "b-0": Step.WAITING,
        "c-0": Step.WAITING,
        "d-0": Step.WAITING,
    }
    decisions = plan.decide()
    assert decisions == Decisions(asks=(PhaseAsk("a", 2, res(1.0, 256)),))
    assert plan.outcome is None


@pytest.mark.parametrize(
    ("succeeded_phases", "asks"),
    [
        ([], {"a": 2}),
        (["a"], {"a": 1}),  # one of two upstream tasks done: the barrier holds
        (["a", "a"], {"b": 1, "c": 1}),
        (["a", "a", "b"], {"c": 1}),  # d waits for both b and c
        (["a", "a", "c", "b"], {"d": 1}),
        (["a", "a", "c", "b", "d"], {}),
    ],
)
def test_barrier_opens_when_every_upstream_task_succeeded(
    succeeded_phases: list[str], asks: dict[str, int]
):
    plan = JobPlan(DIAMOND)
    for phase in succeeded_phases:
        succeed_next(plan, phase)
    assert asked(plan.decide()) == asks
    for task in plan.tasks.values():
        upstream = DIAMOND.phase(task.phase).after
        if task.step is not Step.WAITING:
            assert all(t.step is Step.SUCCEEDED for t in plan.tasks.values() if t.phase in upstream)


def test_a_running_upstream_task_keeps_the_barrier_closed():
    plan = JobPlan(chain_spec("map", "sum", tasks=2))
    first = succeed_next(plan, "map")
    second = launch_next(plan, "map")
    report(plan, second, TaskState.RUNNING)
    assert (first, second) == ("map-0", "map-1")
    assert asked(plan.decide()) == {}
    assert plan.tasks["sum-0"].step is Step.WAITING


# --------------------------------------------------------------------------- launches, releases


def test_granted_containers_get_ready_tasks_in_order():
    plan = JobPlan(chain_spec("map", tasks=3))
    ids = grant(plan, "map", 2)
    decisions = plan.decide()
    assert [(ln.task_id, ln.attempt, ln.container.allocation_id) for ln in decisions.launches] == [
        ("map-0", 1, ids[0]),
        ("map-1", 1, ids[1]),
    ]
    assert decisions.launches[0].phase == plan.spec.phase("map")
    assert asked(decisions) == {"map": 1}
    assert decisions.releases == ()
    assert [plan.tasks[t].step for t in ("map-0", "map-1", "map-2")] == [
        Step.LAUNCHING,
        Step.LAUNCHING,
        Step.READY,
    ]
    assert plan.containers[ids[0]].task_id == "map-0"
    # nothing new observed: nothing new decided
    assert plan.decide() == Decisions(asks=decisions.asks)


def test_a_container_nobody_needs_is_given_back_at_once():
    plan = JobPlan(chain_spec("map", "sum"))
    (early,) = grant(plan, "sum")  # sum still waits for map
    (extra,) = grant(plan, "map")
    (spare,) = grant(plan, "map")  # map has one task
    decisions = plan.decide()
    assert [ln.container.allocation_id for ln in decisions.launches] == [extra]
    assert sorted(decisions.releases) == sorted([early, spare])
    assert set(plan.containers) == {extra}


def test_the_container_goes_back_after_each_attempt():
    plan = JobPlan(chain_spec("map", tasks=2, max_retries=1))
    first, second = grant(plan, "map", 2)
    plan.decide()
    report(plan, "map-0", TaskState.SUCCEEDED)
    report(plan, "map-1", TaskState.FAILED, exit_code=1)
    decisions = plan.decide()
    assert decisions.releases == (first, second)  # never reused for the retry
    assert decisions.launches == ()
    assert asked(decisions) == {"map": 1}
    assert plan.decide().releases == ()  # released once


def test_a_granted_container_announced_twice_is_kept_once():
    plan = JobPlan(chain_spec("map"))
    c = container("map")
    plan.on_granted(c)
    plan.decide()
    plan.on_granted(replace(c, task_id=None))  # re-announced after an RM restart
    assert plan.containers[c.allocation_id].task_id == "map-0"


# --------------------------------------------------------------------------- attempts and retries


@pytest.mark.parametrize(
    "ending",
    [TaskState.FAILED, TaskState.KILLED, TaskState.LOST],
)
def test_an_ended_attempt_is_retried_as_the_next_attempt(ending: TaskState):
    plan = JobPlan(chain_spec("map", max_retries=1))
    launch_next(plan, "map")
    report(plan, "map-0", ending, exit_code=2)
    task = plan.tasks["map-0"]
    assert (task.step, task.failures, task.attempt) == (Step.READY, 1, 1)
    assert task.last_problem == f"{ending.value} (exit code 2)"
    assert launch_next(plan, "map") == "map-0"
    assert task.attempt == 2
    assert plan.outcome is None


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_one_failure_more_than_max_retries_fails_the_job_naming_the_task(max_retries: int):
    plan = JobPlan(chain_spec("map", tasks=2, max_retries=max_retries))
    for _ in range(max_retries):
        assert launch_next(plan, "map") == "map-0"
        report(plan, "map-0", TaskState.FAILED, exit_code=7)
        assert plan.outcome is None
    assert launch_next(plan, "map") == "map-0"
    plan.on_task_event("map-0", plan.tasks["map-0"].attempt, TaskState.FAILED, 7, "out of memory")
    assert plan.outcome == (
        JobState.FAILED,
        f"task map-0 failed {max_retries + 1} times; last: out of memory",
    )
    assert plan.tasks["map-0"].step is Step.GAVE_UP


@pytest.mark.parametrize(
    ("attempt", "state"),
    [
        (1, TaskState.SUCCEEDED),  # the first attempt's late report after a retry started
        (1, TaskState.FAILED),
        (3, TaskState.SUCCEEDED),  # an attempt never launched
    ],
)
def test_reports_of_other_attempts_are_ignored(attempt: int, state: TaskState):
    plan = JobPlan(chain_spec("map", max_retries=2))
    launch_next(plan, "map")
    report(plan, "map-0", TaskState.LOST)
    launch_next(plan, "map")
    before = (plan.tasks["map-0"].step, plan.tasks["map-0"].failures)
    plan.on_task_event("map-0", attempt, state, 0, "")
    assert (plan.tasks["map-0"].step, plan.tasks["map-0"].failures) == before
    assert plan.outcome is None


def test_reports_of_unknown_tasks_or_waiting_tasks_are_ignored():
    plan = JobPlan(chain_spec("map", "sum"))
    plan.on_task_event("nope-0", 1, TaskState.SUCCEEDED, 0, "")
    plan.on_task_event("sum-0", 0, TaskState.SUCCEEDED, 0, "")  # never launched
    assert plan.tasks["sum-0"].step is Step.WAITING
    assert plan.outcome is None


@pytest.mark.parametrize("state", [TaskState.RUNNING, TaskState.SUSPENDED])
def test_running_and_suspended_count_as_running(state: TaskState):
    plan = JobPlan(chain_spec("map"))
    launch_next(plan, "map")
    report(plan, "map-0", state)
    assert plan.tasks["map-0"].step is Step.RUNNING
    assert list(plan.running_tasks()) == [plan.tasks["map-0"]]


@pytest.mark.parametrize(
    ("seen_running", "failures", "problem"),
    [(True, 1, "its node was lost"), (False, 0, "its container was lost")],
)
def test_a_lost_allocation_retries_its_task_without_releasing_it_again(
    seen_running: bool, failures: int, problem: str
):
    plan = JobPlan(chain_spec("map", tasks=2))
    busy, idle = grant(plan, "map", 2)
    plan.decide()
    if seen_running:
        report(plan, "map-0", TaskState.RUNNING)
    report(plan, "map-1", TaskState.SUCCEEDED)  # idle's task is done; its release is pending
    plan.decide()
    plan.on_allocation_lost(busy)
    plan.on_allocation_lost(idle)  # already given back: nothing happens
    plan.on_allocation_lost("a-never-granted")
    task = plan.tasks["map-0"]
    # A task never seen running there uses up no retry for it.
    assert (task.step, task.failures, task.last_problem) == (Step.READY, failures, problem)
    decisions = plan.decide()
    assert busy not in decisions.releases  # the RM released it when the node was lost
    assert asked(decisions) == {"map": 1}


def test_a_failed_launch_is_retried():
    plan = JobPlan(chain_spec("map"))
    launch_next(plan, "map")
    plan.on_launch_failed("map-0", 1, "connection refused")
    task = plan.tasks["map-0"]
    assert (task.step, task.last_problem) == (Step.READY, "launch failed: connection refused")
    plan.on_launch_failed("map-0", 1, "again")  # already handled: no second failure
    assert task.failures == 1


# --------------------------------------------------------------------------- kill, end, progress


def test_kill_gives_back_every_container_and_is_final():
    plan = JobPlan(chain_spec("map", tasks=3, max_retries=0))
    running = grant(plan, "map", 2)
    plan.decide()
    report(plan, "map-0", TaskState.SUCCEEDED)
    plan.kill("killed by user")
    decisions = plan.decide()
    assert set(decisions.releases) == set(running)
    assert (decisions.launches, decisions.asks) == ((), ())
    assert plan.outcome == (JobState.KILLED, "killed by user")
    assert set(plan.containers) == {running[1]}  # kept so the caller can stop what runs there
    report(plan, "map-1", TaskState.KILLED)  # the kill's own effect, past max_retries
    plan.kill("again")
    assert plan.outcome == (JobState.KILLED, "killed by user")


def test_the_first_failure_reason_is_kept():
    plan = JobPlan(chain_spec("map", tasks=2, max_retries=0))
    grant(plan, "map", 2)
    plan.decide()
    plan.on_task_event("map-1", 1, TaskState.FAILED, 1, "first")
    plan.on_task_event("map-0", 1, TaskState.FAILED, 1, "second")
    assert plan.outcome == (JobState.FAILED, "task map-1 failed 1 times; last: first")


def test_succeeds_when_every_task_succeeded():
    plan = JobPlan(DIAMOND)
    for phase in ["a", "a", "b", "c"]:
        succeed_next(plan, phase)
        assert plan.outcome is None
    last = launch_next(plan, "d")
    report(plan, last, TaskState.SUCCEEDED)
    assert plan.outcome == (JobState.SUCCEEDED, "")
    assert len(plan.decide().releases) == 1  # d's container


def test_progress_counts():
    plan = JobPlan(chain_spec("map", "sum", tasks=4, max_retries=1))
    grant(plan, "map", 3)
    plan.decide()
    report(plan, "map-0", TaskState.SUCCEEDED)
    report(plan, "map-1", TaskState.RUNNING)
    report(plan, "map-2", TaskState.FAILED)  # back to pending, one failed attempt
    assert list(plan.progress()) == [
        PhaseProgress("map", 4, pending=2, running=1, succeeded=1, failed=1, dropped=0),
        PhaseProgress("sum", 4, pending=4, running=0, succeeded=0, failed=0, dropped=0),
    ]
    launch_next(plan, "map")  # map-2, attempt 2
    report(plan, "map-2", TaskState.FAILED)
    assert plan.progress()[0] == PhaseProgress(
        "map", 4, pending=1, running=1, succeeded=1, failed=2, dropped=1
    )


# --------------------------------------------------------------------------- invariants

_ENDINGS = [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST]
_SUCCESSES = [TaskState.SUCCEEDED] * 8  # weighted so that runs get past the barriers
# (what the master hears of, which one, reported state, about the previous attempt?)
operations = st.lists(
    st.tuples(
        st.sampled_from(["grant"] * 4 + ["report"] * 5 + ["lose", "fail", "kill"]),
        st.integers(0, 9),
        st.sampled_from([TaskState.RUNNING, TaskState.SUSPENDED, *_ENDINGS, *_SUCCESSES]),
        st.integers(0, 3).map(lambda n: n == 0),
    ),
    min_size=20,
    max_size=60,
)


@settings(max_examples=60)
@given(operations, st.integers(0, 2))
def test_plan_invariants_under_any_observations(
    ops: list[tuple[str, int, TaskState, bool]], max_retries: int
):
    spec = replace(DIAMOND, max_retries=max_retries)
    plan = JobPlan(spec)
    granted: list[str] = []
    released: set[str] = set()
    first_outcome = None
    for kind, n, state, stale in ops:
        busy = [t for t in plan.tasks.values() if t.step in (Step.LAUNCHING, Step.RUNNING)]
        if kind == "grant":  # mostly what is wanted, sometimes a phase that waits
            ready = sorted({t.phase for t in plan.tasks.values() if t.step is Step.READY})
            phases = ready if ready and n < 8 else [p.name for p in spec.phases]
            granted += grant(plan, phases[n % len(phases)])
        elif kind == "report" and busy:
            task = busy[n % len(busy)]
            plan.on_task_event(task.task_id, task.attempt - stale, state, 1, "")
        elif kind == "lose" and granted:
            plan.on_allocation_lost(granted[n % len(granted)])
        elif kind == "fail" and busy:
            task = busy[n % len(busy)]
            plan.on_launch_failed(task.task_id, task.attempt, "refused")
        elif kind == "kill" and n == 0:
            plan.kill("killed")
        if plan.outcome is None:  # the master decides after absorbing each answer
            decisions = plan.decide()
            assert not released & set(decisions.releases), "released twice"
            assert not set(decisions.releases) & set(plan.containers)
            released |= set(decisions.releases)
            ready_count = Counter(t.phase for t in plan.tasks.values() if t.step is Step.READY)
            assert asked(decisions) == dict(ready_count)
        first_outcome = first_outcome or plan.outcome
        assert plan.outcome == first_outcome, "an ending was overwritten"
        _check_invariants(plan)


def _check_invariants(plan: JobPlan) -> None:
    tasks = plan.tasks.values()
    for task in tasks:
        upstream = plan.spec.phase(task.phase).after
        if task.step is not Step.WAITING:  # the barrier
            assert all(t.step is Step.SUCCEEDED for t in tasks if t.phase in upstream), task
        if task.step in (Step.LAUNCHING, Step.RUNNING):  # runs in a container of its phase
            held = plan.containers[task.allocation_id or ""]
            assert (held.task_id, held.phase) == (task.task_id, task.phase)
        assert task.failures <= plan.spec.max_retries + 1
    for held in plan.containers.values():
        if held.task_id is not None:
            assert plan.tasks[held.task_id].allocation_id == held.allocation_id
    if all(t.step is Step.SUCCEEDED for t in tasks):
        assert plan.outcome is not None
    if plan.outcome is not None and plan.outcome[0] is JobState.SUCCEEDED:
        assert all(t.step is Step.SUCCEEDED for t in tasks)
    if any(t.step is Step.GAVE_UP for t in tasks):
        assert plan.outcome is not None
    for counts, phase in zip(plan.progress(), plan.spec.phases, strict=True):
        total = counts.pending + counts.running + counts.succeeded + counts.dropped
        assert total == phase.tasks == counts.tasks


# --------------------------------------------------------------------------- the attempt model


def test_a_copy_that_succeeds_first_wins_and_the_regular_attempt_is_stopped():
    plan = JobPlan(chain_spec("map", "sum", tasks=1))
    regular = launch_next(plan, "map")
    (spare,) = grant(plan, "map")
    copy = plan.start_attempt(regular, AttemptKind.COPY, spare)
    assert (copy.attempt, copy.kind) == (2, AttemptKind.COPY)
    plan.on_task_event("map-0", 2, TaskState.SUCCEEDED, 0, "")
    decisions = plan.decide()
    assert [(s.task_id, s.attempt) for s in decisions.stops] == [("map-0", 1)]
    assert plan.tasks["map-0"].step is Step.SUCCEEDED
    assert asked(decisions) == {"sum": 1}  # the barrier opened
    plan.on_task_event("map-0", 1, TaskState.KILLED, 0, "")  # the stopped one's news: ignored
    assert plan.tasks["map-0"].failures == 0


def test_a_failed_copy_is_just_gone():
    plan = JobPlan(chain_spec("map", tasks=1, max_retries=0))
    launch_next(plan, "map")
    (spare,) = grant(plan, "map")
    plan.start_attempt("map-0", AttemptKind.COPY, spare)
    plan.on_task_event("map-0", 2, TaskState.FAILED, 1, "")
    assert (plan.tasks["map-0"].step, plan.tasks["map-0"].failures, plan.outcome) == (
        Step.LAUNCHING,
        0,
        None,
    )
    assert spare in plan.decide().releases


def test_a_kill_by_preemption_uses_up_no_retry():
    plan = JobPlan(chain_spec("map", max_retries=0))
    for _ in range(3):
        launch_next(plan, "map")
        plan.on_task_event(
            "map-0", plan.tasks["map-0"].attempt, TaskState.KILLED, 0, "", preempted=True
        )
    assert (plan.tasks["map-0"].step, plan.tasks["map-0"].failures, plan.outcome) == (
        Step.READY,
        0,
        None,
    )


def test_a_dropped_task_counts_as_done_for_its_barrier_and_its_attempt_is_stopped():
    plan = JobPlan(chain_spec("map", "sum", tasks=2))
    succeed_next(plan, "map")
    launch_next(plan, "map")
    plan.drop("map-1", "approximation")
    decisions = plan.decide()
    assert [(s.task_id, s.reason) for s in decisions.stops] == [("map-1", "approximation")]
    assert asked(decisions) == {"sum": 2}
    assert plan.progress()[0] == PhaseProgress(
        "map", 2, pending=0, running=0, succeeded=1, failed=0, dropped=1
    )
    for task_id in ("sum-0", "sum-1"):
        succeed_next(plan, "sum")
        assert task_id in plan.tasks
    assert plan.outcome == (JobState.SUCCEEDED, "1 tasks dropped")


@pytest.mark.parametrize(
    ("start", "to", "allowed"),
    [
        (Step.WAITING, Step.RUNNING, False),
        (Step.WAITING, Step.READY, True),
        (Step.SUCCEEDED, Step.READY, False),
        (Step.RUNNING, Step.READY, True),
        (Step.DROPPED, Step.SUCCEEDED, False),
    ],
)
def test_steps_move_only_along_the_table(start: Step, to: Step, allowed: bool):
    assert (to in STEP_TRANSITIONS[start]) is allowed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grant", "ok", "fail", "drop"]), st.integers(0, 4))))
def test_incremental_counts_always_match_a_recount(actions: list[tuple[str, int]]):
    plan = JobPlan(chain_spec("map", "sum", tasks=5, max_retries=3))
    for action, index in actions:
        if plan.outcome is not None:
            break
        if action == "grant":
            phase = "sum" if plan.progress()[0].pending == 0 else "map"
            grant(plan, phase)
            plan.decide()
            continue
        live = [t for t in plan.tasks.values() if t.step in (Step.LAUNCHING, Step.RUNNING)]
        if not live:
            continue
        task = live[index % len(live)]
        if action == "drop":
            plan.drop(task.task_id)
        else:
            state = TaskState.SUCCEEDED if action == "ok" else TaskState.FAILED
            plan.on_task_event(task.task_id, task.attempt, state, 1, "")
    for progress in plan.progress():
        steps_now = Counter(t.step for t in plan.tasks.values() if t.phase == progress.name)
        assert progress.pending == steps_now[Step.WAITING] + steps_now[Step.READY]
        assert progress.running == steps_now[Step.LAUNCHING] + steps_now[Step.RUNNING]
        assert progress.succeeded == steps_now[Step.SUCCEEDED]
        assert progress.dropped == steps_now[Step.DROPPED] + steps_now[Step.GAVE_UP]


def test_a_downstream_phase_asks_for_the_nodes_its_upstream_tasks_succeeded_on():
    plan = JobPlan(DIAMOND)
    (first,) = plan.decide().asks
    assert first.preferred_nodes == ()  # a first phase reads no upstream output
    for node_id in ("n7", "n3"):
        plan.on_granted(container("a", node_id))
        (launch,) = plan.decide().launches
        report(plan, launch.task_id, TaskState.SUCCEEDED)
    preferred = {a.phase: a.preferred_nodes for a in plan.decide().asks}
    assert preferred == {"b": ("n7", "n3"), "c": ("n7", "n3")}
    b_task = launch_next(plan, "b")
    plan.on_granted(container("c", "n9"))
    (c_launch,) = plan.decide().launches
    report(plan, b_task, TaskState.SUCCEEDED)
    report(plan, c_launch.task_id, TaskState.SUCCEEDED)
    (d_ask,) = plan.decide().asks
    assert d_ask.preferred_nodes == ("n1", "n9")  # b ran on n1, c on n9


SERVICE = parse_job_spec(job_doc(phase_doc("server", 1), kind="service", max_retries=1, name="web"))


def run_service_task(plan: JobPlan, at: float) -> str:
    plan.advance(at)
    task_id = launch_next(plan, "server")
    report(plan, task_id, TaskState.RUNNING)
    return task_id


@pytest.mark.parametrize("ending", [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED])
def test_a_service_task_that_ends_is_started_again(ending: TaskState):
    plan = JobPlan(SERVICE)
    task_id = run_service_task(plan, 0.0)
    plan.advance(100.0)  # it ran long enough to count as healthy
    report(plan, task_id, ending)
    assert plan.outcome is None and asked(plan.decide()) == {"server": 1}
    run_service_task(plan, 101.0)
    assert plan.tasks[task_id].attempt == 2 and plan.outcome is None


def test_a_service_in_a_crash_loop_fails_the_job():
    plan = JobPlan(SERVICE)  # max_retries 1: a second quick end in a row fails it
    for attempt in (1, 2):
        task_id = run_service_task(plan, 10.0 * attempt)
        plan.advance(10.0 * attempt + 1.0)
        report(plan, task_id, TaskState.FAILED, exit_code=3)
    assert plan.outcome is not None and plan.outcome[0] is JobState.FAILED
    assert "server-0 failed 2 times" in plan.outcome[1]


def test_a_service_that_ran_a_while_between_crashes_keeps_running():
    plan = JobPlan(SERVICE)
    for attempt in range(1, 5):
        task_id = run_service_task(plan, 100.0 * attempt)
        plan.advance(100.0 * attempt + SERVICE_STABLE_S)
        report(plan, task_id, TaskState.FAILED, exit_code=1)
    assert plan.outcome is None and plan.tasks["server-0"].attempt == 4


@pytest.mark.parametrize(
    ("execution", "done", "next_attempt"),
    [
        (1, True, 1),  # the same execution: a success stays done
        (2, False, 3),  # evicted and run again: everything again, the numbers continue
    ],
)
def test_adopting_an_earlier_execution_only_numbers_the_attempts(
    execution: int, done: bool, next_attempt: int
) -> None:
    plan = JobPlan(job_spec(phase_doc("a", 1)), now=0.0)
    history = [
        AttemptRecord("a-0", 1, TaskState.FAILED, "x1", "boom", execution=1),
        AttemptRecord("a-0", 2, TaskState.SUCCEEDED, "x2", execution=1),
    ]
    plan.adopt(history, execution=execution)
    assert plan.tasks["a-0"].step.is_final is done
    if not done:
        assert plan.tasks["a-0"].failures == 0
        launched = launch_next(plan, "a")
        assert plan.tasks[launched].attempt == next_attempt


@pytest.mark.parametrize(("tasks", "theta", "kept"), [(10, 0.2, 8), (7, 0.2, 6), (1, 0.9, 1)])
def test_a_droppable_phase_runs_its_kept_tasks_and_the_barrier_counts_the_rest_done(
    tasks: int, theta: float, kept: int
) -> None:
    spec = job_spec(phase_doc("m", tasks, droppable=True), phase_doc("r", 2, after=["m"]))
    plan = JobPlan(spec, now=0.0, drop_ratio=theta, drop_seed="job-000001")
    dropped = {t for t, task in plan.tasks.items() if task.step is Step.DROPPED}
    assert len(dropped) == tasks - kept
    assert {t.split("-")[0] for t in dropped} <= {"m"}  # the other phase drops nothing
    # Every job master attempt of the job drops the same tasks.
    again = JobPlan(spec, now=0.0, drop_ratio=theta, drop_seed="job-000001")
    assert {t for t, task in again.tasks.items() if task.step is Step.DROPPED} == dropped
    for _ in range(kept):
        report(plan, launch_next(plan, "m"), TaskState.SUCCEEDED)
    assert {t.step for t in plan.tasks.values() if t.phase == "r"} == {Step.READY}
    for _ in range(2):
        report(plan, launch_next(plan, "r"), TaskState.SUCCEEDED)
    assert plan.outcome is not None and plan.outcome[0] is JobState.SUCCEEDED
