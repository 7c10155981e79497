"""Comparing decision traces (simulator/trace_diff.py): ids and clocks normalised away; a dropped
decision, a reordered pair (within a job, or across jobs far apart in time, or named causal) or
a time beyond the tolerance fails; and the simulator records its trace with the RM's recorder,
deterministically, without changing its results."""

from __future__ import annotations

from typing import Any

import pytest

from policies.scheduling.jobspec import parse_job_spec
from simulator.engine import SimSettings, Simulation
from simulator.trace_diff import Step, Tolerance, compare, normalise, report
from simulator.workload import SimJob

Record = dict[str, Any]


def trace(jobs: tuple[str, str], nodes: tuple[str, str], shift: float = 0.0) -> list[Record]:
    """A small live-like trace: a low priority job, a high one that preempts it."""
    low, high = jobs
    a, b = nodes

    def at(t: float) -> float:
        return 1000.0 + shift + t

    return [
        {"decision": "nodes", "added": [b], "removed": [], "t": at(0)},
        {"decision": "nodes", "added": [a], "removed": [], "t": at(0)},
        {"decision": "submit", "job": low, "name": "low", "priority": 1, "t": at(0)},
        {"decision": "placement", "job": low, "container": "master#0", "node": a, "t": at(0.1)},
        {"decision": "placement", "job": low, "container": "p#0", "node": b, "t": at(1.5)},
        {"decision": "placement", "job": low, "container": "p#1", "node": a, "t": at(1.5)},
        {"decision": "submit", "job": high, "name": "high", "priority": 9, "t": at(10)},
        {"decision": "placement", "job": high, "container": "master#0", "node": a, "t": at(10.1)},
        {
            "decision": "preemption",
            "job": low,
            "container": "p#1",
            "node": a,
            "action": "suspend",
            "reason": f"preempted for {high} on {a}",
            "t": at(11.5),
        },
        {"decision": "placement", "job": high, "container": "p#0", "node": a, "t": at(20)},
    ]


LIVE = normalise(trace(("job-7f3a", "job-9c21"), ("host-b", "host-a")))


def test_ids_and_clocks_are_normalised_away() -> None:
    simulated = normalise(trace(("job-000001", "job-000002"), ("node-00001", "node-00000"), 77))
    assert compare(LIVE, simulated) == []
    assert LIVE[6].what == (
        'preemption action="suspend" container="p#1" node="n1" reason="preempted for j1 on n1"'
    )
    assert (LIVE[0].t, LIVE[0].job, LIVE[-1].t) == (0.0, "j0", 20.0)


def mutate(index: int, how: str) -> list[Step]:
    steps = list(LIVE)
    if how == "drop":
        del steps[index]
    elif how == "swap":
        steps[index], steps[index + 1] = steps[index + 1], steps[index]
    elif how == "late":
        steps[index] = Step(steps[index].t + 30, steps[index].job, steps[index].what)
    elif how == "early":
        steps[index] = Step(steps[index].t - 3, steps[index].job, steps[index].what)
    return steps


@pytest.mark.parametrize(
    ("index", "how", "fails", "says"),
    [
        (6, "drop", True, "job j0: the decisions differ"),  # the preemption is missing
        (2, "swap", True, "job j0: the decisions differ"),  # two tasks' placements swapped
        (7, "late", True, "live at 20.00 s, simulated at 50.00 s"),  # beyond the tolerance
        (7, "early", False, ""),  # 3 s off at 20 s: within it
        # Across jobs: the high job's submission (10 s) after the low job's tasks (1.5 s).
        (2, "cross", True, 'order: live j0 placement container="p#0"'),
    ],
)
def test_a_dropped_reordered_or_late_decision_fails(
    index: int, how: str, fails: bool, says: str
) -> None:
    if how == "cross":
        # The high job submitted before the low job's tasks are placed, each time within the
        # tolerance of the live one (1.5 s -> 6.4 s, 10 s -> 6 s).
        s = [*LIVE[:2], *(Step(6.4, x.job, x.what) for x in LIVE[2:4]), *LIVE[4:]]
        s[4] = Step(6.0, s[4].job, s[4].what)
        simulated = [s[0], s[1], s[4], s[2], s[3], *s[5:]]
    else:
        simulated = mutate(index, how)
    problems = compare(LIVE, simulated, Tolerance(seconds=5, relative=0.3))
    assert bool(problems) is fails
    assert says in "\n".join(problems)
    if fails:
        assert "live:" in report(LIVE, simulated, problems)


def test_a_causal_pair_is_checked_however_close() -> None:
    steps = list(LIVE)
    # the preemption 0.5 s before the submission that causes it: within any time tolerance
    early = Step(9.5, steps[6].job, steps[6].what)
    simulated = [*steps[:4], early, steps[4], steps[5], *steps[7:]]
    causal = [("j1 submit", "j0 preemption")]
    assert compare(LIVE, simulated, Tolerance()) == []
    assert compare(LIVE, simulated, Tolerance(), causal) == [
        "simulated: 'j0 preemption' came before 'j1 submit', which causes it"
    ]
    assert compare(LIVE, LIVE, Tolerance(), [("j1 submit", "j0 kill")]) == [
        "live: no decision 'j0 kill' (named as causal)",
        "simulated: no decision 'j0 kill' (named as causal)",
    ]


def test_fields_and_decisions_can_be_left_out() -> None:
    records = trace(("a", "b"), ("x", "y"))
    other = [dict(r, reason="worded otherwise") if "reason" in r else r for r in records]
    assert compare(normalise(records), normalise(other)) != []
    assert compare(normalise(records, {"reason"}), normalise(other, {"reason"})) == []
    without = normalise(records, ignore_decisions={"preemption"})
    assert all(not s.what.startswith("preemption") for s in without)


def simulation(record: bool) -> Simulation:
    def spec(name: str, priority: int, tasks: int) -> Any:
        phase = {"name": "p", "tasks": tasks, "command": ["true"]}
        phase["resources"] = {"cpu": 0.5, "memory_mb": 64}
        return parse_job_spec({"name": name, "priority": priority, "phases": [phase]})

    jobs = [
        SimJob("low", "low", 0.0, spec("low", 1, 4), {"p": (3.0,) * 4}),
        SimJob("high", "high", 1.0, spec("high", 9, 2), {"p": (2.0,) * 2}),
    ]
    settings = SimSettings(nodes=2, node_cpu=2.0, node_memory_mb=2048)
    return Simulation(jobs, settings, seed=1, record_decisions=record)


def test_the_simulator_records_deterministically_and_recording_changes_nothing() -> None:
    recorded, plain = simulation(True), simulation(False)
    outcomes = recorded.run().outcomes
    assert outcomes == plain.run().outcomes
    assert plain.decisions == []
    again = simulation(True)
    again.run()
    assert again.decisions == recorded.decisions
    kinds = [r["decision"] for r in recorded.decisions]
    assert kinds.count("submit") == 2 and kinds.count("placement") == 2 + 4 + 2
