"""The decision trace (resource_manager/decision_trace.py): what a committed unit decided, as
records both the live RM and the simulator write; what job masters said in Allocate; new plan
fields flowing through with no change to the recorder; and the live trace file."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import (
    AllocationKind,
    Plan,
    Preemption,
    PreemptionAction,
)
from policies.scheduling.lifecycle import JobState
from policies.scheduling.progress import PhaseProgress
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.decision_trace import DecisionTrace, Record, decision_name, plain
from resource_manager.errors import InvalidRequestError
from resource_manager.records import KeptSlot, Now, SpeculativeNote
from resource_manager.shell import Effects, PassDue, RMShell
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables
from resource_manager.trace_file import TraceFile
from tests.builders import res
from tests.unit.resource_manager.harness import at, spec_of


class Traced:
    """An RM shell whose every unit is recorded, as the service's driver records it."""

    def __init__(self) -> None:
        self.shell = RMShell(
            ResourceManagerCore(Tables(MemoryStore()), CoreSettings(node_timeout=10.0))
        )
        self.trace = DecisionTrace()
        self.records: list[Record] = []

    def run(self, action: Callable[[ResourceManagerCore, Now], Any], t: float) -> Any:
        outcome = self.shell.run(action, at(t))
        self.records += self.trace.record(outcome.effects, self.shell.core, t)
        while outcome.effects.pass_due is not PassDue.NO:
            outcome = self.shell.schedule(at(t))
            self.records += self.trace.record(outcome.effects, self.shell.core, t)
        return outcome.result

    def running_job(self, tasks: int, t: float) -> str:
        job = self.run(lambda c, n: c.submit(spec_of(tasks), client_mode=True, now=n), t)
        self.run(lambda c, n: c.register_master(job.job_id, attempt=1, now=n), t)
        return str(job.job_id)


def decisions(records: list[Record]) -> list[tuple[str, ...]]:
    return [
        (r["decision"], r.get("job", ""), r.get("container", ""), r.get("node", ""))
        for r in records
    ]


def traced_with_nodes() -> Traced:
    traced = Traced()
    for node in ("n2", "n1"):

        def register(core: ResourceManagerCore, now: Now, node: str = node) -> None:
            core.register_node(node, f"{node}:7", "process", res(2, 2048), [], now=now)

        traced.run(register, 0.0)
    return traced


def test_a_submission_and_its_placements_are_recorded_with_containers_named_per_phase() -> None:
    traced = traced_with_nodes()
    job_id = traced.running_job(3, 1.0)
    traced.records.clear()
    traced.run(
        lambda c, n: c.allocate(job_id, [PhaseAsk("p", 3, res(1, 256))], [], [], 0, now=n), 2.0
    )
    assert decisions(traced.records) == [
        ("placement", job_id, "p#0", "n1"),
        ("placement", job_id, "p#1", "n2"),
        ("placement", job_id, "p#2", "n1"),
    ]
    assert {r["t"] for r in traced.records} == {2.0}
    assert traced.records[0]["resources"] == [1.0, 256] and traced.records[0]["kind"] == "task"


def test_the_first_records_name_the_nodes_and_the_submission() -> None:
    traced = traced_with_nodes()
    traced.run(lambda c, n: c.submit(spec_of(1), client_mode=False, now=n), 1.0)
    (nodes_1, nodes_2, submit, master) = traced.records
    # Each registration records only the node it added (not a sort of all of them).
    assert nodes_1 == {"decision": "nodes", "added": ["n2"], "removed": [], "t": 0.0}
    assert nodes_2 == {"decision": "nodes", "added": ["n1"], "removed": [], "t": 0.0}
    assert submit["decision"] == "submit" and submit["priority"] == 0
    assert (master["decision"], master["container"], master["kind"]) == (
        "placement",
        "master#0",
        "job_master",
    )


def test_what_a_job_master_says_in_allocate_is_recorded_before_the_pass_it_causes() -> None:
    traced = traced_with_nodes()
    job_id = traced.running_job(3, 1.0)
    traced.run(
        lambda c, n: c.allocate(job_id, [PhaseAsk("p", 2, res(1, 256))], [], [], 0, now=n), 2.0
    )
    first = next(a for a in traced.shell.core.tables.allocations_of_job(job_id))
    traced.records.clear()
    traced.run(
        lambda c, n: c.allocate(
            job_id,
            [PhaseAsk("p", 1, res(1, 256))],
            [],
            [PhaseProgress("p", 3, pending=1, running=1, dropped=1)],
            0,
            now=n,
            kept=[KeptSlot(first.allocation_id, "p", 99.0)],
            speculative=[SpeculativeNote("p-2", 1, "n2", "queued")],
        ),
        3.0,
    )
    assert [r["decision"] for r in traced.records] == ["kept", "drop", "speculative", "placement"]
    kept, drop, speculative, _ = traced.records
    assert (kept["container"], kept["for"]) == ("p#0", "p")
    assert (drop["phase"], drop["tasks"]) == ("p", 1)
    assert (speculative["task"], speculative["outcome"]) == ("p-2", "queued")
    # The same progress again drops nothing more.
    traced.records.clear()
    progress = [PhaseProgress("p", 3, pending=1, running=1, dropped=1)]
    traced.run(lambda c, n: c.allocate(job_id, [], [], progress, 0, now=n), 4.0)
    assert [r["decision"] for r in traced.records] == []


def test_a_refused_allocate_records_nothing() -> None:
    traced = traced_with_nodes()
    job_id = traced.running_job(1, 1.0)
    traced.records.clear()
    with pytest.raises(InvalidRequestError):
        traced.run(
            lambda c, n: c.allocate(
                job_id,
                [PhaseAsk("nope", 1, res(1, 256))],
                [],
                [],
                0,
                now=n,
                speculative=[SpeculativeNote("p-0", 1, "n1", "queued")],
            ),
            2.0,
        )
    assert traced.records == []
    assert traced.shell.core.drain_heard() == []


class Verdict(enum.Enum):
    OUT = "out"


@dataclasses.dataclass(frozen=True)
class Eviction:  # a decision kind the recorder has never heard of
    allocation_id: str
    verdict: Verdict
    by: str


def test_a_new_plan_field_and_a_new_decision_kind_flow_through_unchanged() -> None:
    traced = traced_with_nodes()
    job_id = traced.running_job(1, 1.0)
    traced.run(
        lambda c, n: c.allocate(job_id, [PhaseAsk("p", 1, res(1, 256))], [], [], 0, now=n), 2.0
    )
    (allocation,) = traced.shell.core.tables.allocations_of_job(job_id)
    Wider = dataclasses.make_dataclass(
        "Wider", [("evictions", tuple, dataclasses.field(default=()))], bases=(Plan,), frozen=True
    )
    plan = Wider(
        preemptions=(Preemption(allocation.allocation_id, PreemptionAction.SUSPEND, "for j"),),
        evictions=(Eviction(allocation.allocation_id, Verdict.OUT, "DiasEviction"),),
    )
    effects = Effects(
        changed_jobs=frozenset(),
        placed=(),
        plans=(plan,),
        heard=(),
        nodes_to_tell=(),
        pass_due=PassDue.NO,
        version=0,
    )
    preemption, eviction = traced.trace.record(effects, traced.shell.core, 5.0)
    assert preemption["decision"] == "preemption" and preemption["action"] == "suspend"
    assert eviction == {
        "decision": "eviction",
        "job": job_id,
        "container": "p#0",
        "node": allocation.node_id,
        "verdict": "out",
        "by": "DiasEviction",
        "t": 5.0,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (res(0.5, 64), [0.5, 64]),
        (res(1 / 3, 1), [0.333, 1]),
        (PreemptionAction.SHRINK, "shrink"),
        (AllocationKind.JOB_MASTER, "job_master"),
        (1.23456, 1.235),
        (None, None),
        (("a", 2), ["a", 2]),
        (frozenset({"b", "a"}), ["a", "b"]),
        (KeptSlot("x", "p"), {"allocation_id": "x", "phase": "p", "until": 0.0, "ended": ""}),
        (Path("/p"), "/p"),
    ],
)
def test_field_values_become_plain_json(value: object, expected: object) -> None:
    assert plain(value) == expected
    json.dumps(plain(value))


@pytest.mark.parametrize(
    ("item", "name"),
    [
        (Preemption("a", PreemptionAction.KILL, ""), "preemption"),
        (Eviction("a", Verdict.OUT, ""), "eviction"),
    ],
)
def test_decision_names(item: object, name: str) -> None:
    assert decision_name(item) == name


def test_the_trace_file_writes_json_lines_and_a_write_failure_ends_it_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traced = traced_with_nodes()
    path = tmp_path / "trace.jsonl"
    trace_file = TraceFile(path)
    outcome = traced.shell.run(lambda c, n: c.submit(spec_of(1), client_mode=False, now=n), at(1.0))
    trace_file.write(outcome.effects, traced.shell.core, 1.0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["decision"] for r in lines] == ["nodes", "submit"]

    class Broken:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None: ...

        def close(self) -> None: ...

    trace_file._out = Broken()  # type: ignore[assignment]
    passed = traced.shell.schedule(at(1.1))
    trace_file.write(passed.effects, traced.shell.core, 1.1)  # (does not raise)
    assert not trace_file.open
    assert sum("No space left" in r.message for r in caplog.records) == 1


def test_the_trace_file_stops_at_its_bound(tmp_path: Path) -> None:
    traced = traced_with_nodes()
    trace_file = TraceFile(tmp_path / "trace.jsonl", max_bytes=10)
    outcome = traced.shell.run(lambda c, n: c.submit(spec_of(1), client_mode=False, now=n), at(1.0))
    trace_file.write(outcome.effects, traced.shell.core, 1.0)
    assert not trace_file.open
    assert (tmp_path / "trace.jsonl").read_text() == ""


def test_the_recorder_forgets_an_ended_jobs_containers_and_names_a_job_submitted_once() -> None:
    traced = traced_with_nodes()
    job_id = traced.running_job(1, 1.0)
    traced.run(
        lambda c, n: c.allocate(job_id, [PhaseAsk("p", 1, res(1, 256))], [], [], 0, now=n), 2.0
    )
    assert [r["decision"] for r in traced.records].count("submit") == 1
    traced.run(lambda c, n: c.finish_job(job_id, JobState.SUCCEEDED, "", [], now=n), 3.0)
    # A trace left on for weeks holds the names of live jobs' containers only.
    assert traced.trace._containers == {} and not traced.trace._counts
    assert [r["decision"] for r in traced.records].count("submit") == 1
