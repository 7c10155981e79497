"""The decision trace: every scheduling decision a committed unit of work made, as plain records.

One recorder serves both sides of the differential tests (issue 29): the live RM's service
writes its records as JSON lines (``sluice rm --decision-trace PATH``), the simulator keeps
them in memory (``Simulation.decisions``), and :mod:`simulator.trace_diff` compares the two.
Nothing here does I/O or reads a clock: the driver passes each committed unit's
:class:`~resource_manager.shell.Effects`, the core (to resolve a container to its job, phase
and node while it still exists) and the unit's time.

A record is a flat JSON-able dict: ``t`` (the unit's wall time; the simulator's is simulated
time), ``decision`` (what kind), ``job``, and the decision's own fields.  In the order a unit
made them:

* ``submit``: a job the trace had not seen (``name``, ``priority``): it fixes the job's rank
  for comparison (jobs are compared by submission order, not by id);
* ``nodes``: the node ids ``added`` and ``removed`` (each sorted) since the last such record,
  whenever their number changes (nodes are compared by rank among all ids seen);
* what job masters decided and said in ``Allocate`` (:class:`~resource_manager.records.
  MasterReport`): ``kept`` (a container kept for ``for`` or, with ``ended``, no longer kept:
  slot reservation), ``drop`` (``tasks`` of ``phase`` given up on: DiAS), ``speculative``
  (a speculative attempt's ``outcome``: ROSE);
* every decision of every applied plan, one record per item of each of the
  :class:`~policies.scheduling.framework.Plan`'s decision fields (``placement``,
  ``preemption``, ``resumption``, ``resize``, ``reservation``, and whatever fields the plan
  grows: the record is built from the item's dataclass fields, so a new field or a new kind
  of decision flows through with no change here).

Containers are named ``<phase>#<n>`` (``master#<n>`` for a job master's), ``n`` counting the
job's containers of that phase in grant order, so the same container has the same name in a
live run and in a simulation although their allocation ids differ.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from policies.scheduling.framework import Placement, Plan
from policies.scheduling.resources import Resources
from resource_manager.records import MasterReport

if TYPE_CHECKING:
    from resource_manager.core import ResourceManagerCore
    from resource_manager.shell import Effects

Record = dict[str, Any]

NOT_DECISIONS = frozenset({"waiting", "cut_short"})
"""Fields of a :class:`Plan` that say what did not happen: not traced."""

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def decision_name(item: object) -> str:
    """``Preemption`` -> ``preemption``, ``SprintChange`` -> ``sprint_change``."""
    return _CAMEL.sub("_", type(item).__name__).lower()


def _number(allocation_id: str) -> int:
    """The RM's allocation counter in ``<job>-a<n>``: the grant order (0 if not in that form)."""
    _, _, number = allocation_id.rpartition("-a")
    return int(number) if number.isdigit() else 0


class DecisionTrace:
    """Turns committed units' effects into decision records.  One per RM (live) or simulation;
    it remembers the jobs, nodes and containers it has named."""

    def __init__(self) -> None:
        self._last_seq = 0  # the last submission seen (jobs are numbered in submission order)
        self._nodes: set[str] = set()
        self._containers: dict[str, tuple[str, str, str]] = {}  # allocation -> job, name, node
        self._counts: defaultdict[tuple[str, str], int] = defaultdict(int)  # (job, phase) -> n
        # job -> its containers named (allocation, phase)
        self._named: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)

    def record(self, effects: Effects, core: ResourceManagerCore, at: float) -> list[Record]:
        """The decisions of one committed unit, in the order it made them (``at``: its time)."""
        records: list[Record] = []
        if len(core.nodes) != len(self._nodes):
            # Only what changed is sorted: a cluster of n nodes registering costs O(n) per
            # registration here, not a sort of all of them each time.
            ids = core.nodes.keys()
            added, removed = ids - self._nodes, self._nodes - ids
            self._nodes.update(added)
            self._nodes.difference_update(removed)
            records.append(
                {"decision": "nodes", "added": sorted(added), "removed": sorted(removed)}
            )
        changed = [
            job for job in map(core.tables.find_job, effects.changed_jobs) if job is not None
        ]
        for job in sorted(changed, key=lambda j: j.seq):
            if job.seq > self._last_seq:
                self._last_seq = job.seq
                records.append(
                    {
                        "decision": "submit",
                        "job": job.job_id,
                        "name": job.spec.name,
                        "priority": job.spec.priority,
                    }
                )
        for report in effects.heard:
            records.extend(self._heard(report, core))
        for plan in effects.plans:
            records.extend(self._plan(plan, core))
        for record in records:
            record["t"] = round(at, 3)
        for job in changed:
            if job.state.is_final:
                self._forget(job.job_id)
        return records

    def _forget(self, job_id: str) -> None:
        """Drop the names of an ended job's containers: a trace left on for weeks holds only
        the live jobs'.  (A decision about one after its job ended, none today, would name it
        afresh.)"""
        for allocation_id, phase in self._named.pop(job_id, ()):
            self._containers.pop(allocation_id, None)
            self._counts.pop((job_id, phase), None)

    # ------------------------------------------------------------------ job masters

    def _heard(self, report: MasterReport, core: ResourceManagerCore) -> list[Record]:
        job = report.job_id
        records: list[Record] = []
        for slot in report.kept:
            record: Record = {
                "decision": "kept",
                "job": job,
                **self._container(slot.allocation_id, core),
            }
            if slot.ended:
                record["ended"] = slot.ended
            else:
                record["for"] = slot.phase
            records.append(record)
        for phase, tasks in report.dropped:
            records.append({"decision": "drop", "job": job, "phase": phase, "tasks": tasks})
        for note in report.speculative:
            records.append(
                {
                    "decision": "speculative",
                    "job": job,
                    "task": note.task_id,
                    "attempt": note.attempt,
                    "node": note.node_id,
                    "outcome": note.outcome,
                }
            )
        return records

    # ------------------------------------------------------------------ plans

    def _plan(self, plan: Plan, core: ResourceManagerCore) -> list[Record]:
        fresh = self._learn_placed(plan.placements, core)
        records: list[Record] = []
        for field in dataclasses.fields(plan):
            if field.name in NOT_DECISIONS:
                continue
            items = getattr(plan, field.name)
            for item in items if isinstance(items, tuple) else ():
                record = {"decision": decision_name(item), **self._fields(item, core)}
                if isinstance(item, Placement):
                    waiting = fresh.get((item.job_id, item.phase))
                    if waiting:
                        record["container"] = waiting.pop(0)
                records.append(record)
        return records

    def _learn_placed(
        self, placements: tuple[Placement, ...], core: ResourceManagerCore
    ) -> dict[tuple[str, str], list[str]]:
        """Name the containers the plan's placements granted, in grant order: (job, phase) ->
        their names."""
        fresh: dict[tuple[str, str], list[str]] = {}
        for job_id in dict.fromkeys(p.job_id for p in placements):
            new = [
                a
                for a in core.tables.allocations_of_job(job_id)
                if a.allocation_id not in self._containers
            ]
            for allocation in sorted(new, key=lambda a: _number(a.allocation_id)):
                name = self._name(
                    allocation.allocation_id, job_id, allocation.phase, allocation.node_id
                )
                fresh.setdefault((job_id, allocation.phase), []).append(name)
        return fresh

    def _name(self, allocation_id: str, job_id: str, phase: str, node_id: str) -> str:
        key = (job_id, phase)
        name = f"{phase or 'master'}#{self._counts[key]}"
        self._counts[key] += 1
        self._containers[allocation_id] = (job_id, name, node_id)
        self._named[job_id].append((allocation_id, phase))
        return name

    def _container(self, allocation_id: str, core: ResourceManagerCore) -> Record:
        """``job``, ``container`` and ``node`` of an allocation (named on first sight)."""
        known = self._containers.get(allocation_id)
        if known is None:
            allocation = core.tables.allocations.get(allocation_id)
            if allocation is None:
                return {"container": allocation_id}  # (unknown: kept as is, and compared so)
            self._name(allocation_id, allocation.job_id, allocation.phase, allocation.node_id)
            known = self._containers[allocation_id]
        job_id, name, node_id = known
        return {"job": job_id, "container": name, "node": node_id}

    def _fields(self, item: object, core: ResourceManagerCore) -> Record:
        record: Record = {}
        for field in dataclasses.fields(item):  # type: ignore[arg-type]
            value = getattr(item, field.name)
            if field.name == "allocation_id":
                record.update(self._container(value, core))
            elif field.name == "job_id":
                record["job"] = value
            elif field.name == "node_id":
                record["node"] = value
            else:
                record[field.name] = plain(value)
        return record


def plain(value: Any) -> Any:
    """A JSON-able form of a decision's field: resources as [cpu, memory_mb], enums by value,
    floats to the millisecond / thousandth, dataclasses as dicts."""
    if isinstance(value, Resources):
        return [round(value.cpu, 3), value.memory_mb]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return round(value, 3)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (frozenset, set)) else items
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)
