"""Compare two decision traces: a live RM's (``--decision-trace``) and a simulation's.

Both are lists of records from :class:`resource_manager.decision_trace.DecisionTrace`.  Their
ids and clocks differ, so each is first normalised (:func:`normalise`):

* jobs are named by submission order (``j0``, ``j1``, ... in the order of the ``submit``
  records), nodes by their rank among the sorted ids of every node the ``nodes`` records
  added (``n0``, ``n1``), wherever they occur (a field, or inside a reason's text);
  containers already are ``<phase>#<n>`` within their job;
* times are seconds after the first submission;
* fields a comparison is told to ignore (a reason's wording, a live footprint) are left out.

Then :func:`compare` checks, and says in words what differs:

1. **the same decisions, in the same order, per job** (a job's decisions follow from one
   another: its job master's placement before its tasks', a kept container before its
   takeover); decisions that belong to no job (none today) form one more sequence;
2. **the same order across jobs where time decides it**: two decisions of different jobs
   that the live run made more than the time tolerance apart come in the same order in the
   simulation (a preemption after the submission that caused it), and the pairs a test names
   as causal are checked whatever their distance;
3. **times within the tolerance** (:class:`Tolerance`), decision by decision.

:func:`render` prints a normalised trace one decision a line, for a failure's message.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Tolerance:
    """Two times match when they differ by at most ``seconds`` or ``relative`` of the later."""

    seconds: float = 5.0
    relative: float = 0.3

    def allows(self, a: float, b: float) -> bool:
        return abs(a - b) <= max(self.seconds, self.relative * max(abs(a), abs(b)))


@dataclass(frozen=True)
class Step:
    """One normalised decision: when (seconds after the first submission), whose, and what."""

    t: float
    job: str
    what: str  # the decision and its fields, "preemption action=suspend container=map#0 ..."

    def __str__(self) -> str:
        return f"{self.t:8.2f} s  {self.job or '-':4}  {self.what}"


def normalise(
    records: Iterable[Record],
    ignore_fields: Iterable[str] = (),
    ignore_decisions: Iterable[str] = (),
) -> list[Step]:
    """A trace as comparable steps (see the module's docstring), in its order."""
    records = list(records)
    jobs: dict[str, str] = {}
    node_ids: set[str] = set()
    start: float | None = None
    for record in records:
        if record["decision"] == "submit" and record["job"] not in jobs:
            jobs[record["job"]] = f"j{len(jobs)}"
            start = record["t"] if start is None else start
        elif record["decision"] == "nodes":
            node_ids.update(record["added"])
    nodes = {node: f"n{rank}" for rank, node in enumerate(sorted(node_ids))}
    names = {**jobs, **nodes}
    # Longest first: a job id never replaces a part of a longer one.
    pattern = (
        re.compile("|".join(re.escape(i) for i in sorted(names, key=len, reverse=True)))
        if names
        else None
    )

    def rename(value: Any) -> Any:
        if isinstance(value, str) and pattern is not None:
            return pattern.sub(lambda m: names[m.group(0)], value)
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    skip_fields = {"t", "decision", "job", *ignore_fields}
    skip_decisions = {"nodes", *ignore_decisions}
    steps = []
    for record in records:
        if record["decision"] in skip_decisions:
            continue
        fields = " ".join(
            f"{k}={json.dumps(rename(v), separators=(',', ':'))}"
            for k, v in sorted(record.items())
            if k not in skip_fields
        )
        steps.append(
            Step(
                t=round(record["t"] - (start or 0.0), 3),
                job=rename(record.get("job", "")),
                what=f"{record['decision']} {fields}".strip(),
            )
        )
    return steps


def compare(
    live: Sequence[Step],
    simulated: Sequence[Step],
    tolerance: Tolerance = Tolerance(),
    causal: Iterable[tuple[str, str]] = (),
) -> list[str]:
    """What differs between two normalised traces, in words (empty: they match).

    ``causal``: pairs of step prefixes ("j1 submit", "j0 preemption action=suspend") whose
    first matching steps must come in that order in both traces, however close in time."""
    problems: list[str] = []
    by_job_live, by_job_sim = _by_job(live), _by_job(simulated)
    pairs: list[tuple[Step, Step]] = []
    for job in sorted(by_job_live.keys() | by_job_sim.keys()):
        mine, theirs = by_job_live.get(job, []), by_job_sim.get(job, [])
        if [s.what for s in mine] != [s.what for s in theirs]:
            diff = difflib.unified_diff(
                [s.what for s in mine],
                [s.what for s in theirs],
                "live",
                "simulated",
                lineterm="",
                n=2,
            )
            problems.append(f"job {job or '-'}: the decisions differ:\n  " + "\n  ".join(diff))
            continue
        pairs.extend(zip(mine, theirs, strict=True))
    for a, b in pairs:
        if not tolerance.allows(a.t, b.t):
            problems.append(f"{a.job} {a.what}: live at {a.t:.2f} s, simulated at {b.t:.2f} s")
    problems.extend(_order_across_jobs(live, simulated, pairs, tolerance))
    for first, then in causal:
        problems.extend(
            _causal(first, then, live, "live") + _causal(first, then, simulated, "simulated")
        )
    return problems


def render(steps: Sequence[Step]) -> str:
    return "\n".join(str(s) for s in steps)


def report(live: Sequence[Step], simulated: Sequence[Step], problems: Sequence[str]) -> str:
    """A failure's message: what differs, then both traces."""
    return (
        "the traces differ:\n"
        + "\n".join(f"- {p}" for p in problems)
        + f"\n\nlive:\n{render(live)}\n\nsimulated:\n{render(simulated)}"
    )


def _by_job(steps: Sequence[Step]) -> dict[str, list[Step]]:
    jobs: defaultdict[str, list[Step]] = defaultdict(list)
    for step in steps:
        jobs[step.job].append(step)
    return jobs


def _order_across_jobs(
    live: Sequence[Step],
    simulated: Sequence[Step],
    pairs: Sequence[tuple[Step, Step]],
    tolerance: Tolerance,
) -> list[str]:
    """Decisions of different jobs more than the tolerance apart live keep their order."""
    position = {id(s): i for i, s in enumerate(simulated)}
    ordered = sorted(pairs, key=lambda p: p[0].t)
    problems = []
    for i, (a_live, a_sim) in enumerate(ordered):
        for b_live, b_sim in ordered[i + 1 :]:
            if a_live.job == b_live.job or tolerance.allows(a_live.t, b_live.t):
                continue
            if position[id(b_sim)] < position[id(a_sim)]:
                problems.append(
                    f"order: live {a_live.job} {a_live.what} ({a_live.t:.2f} s) before "
                    f"{b_live.job} {b_live.what} ({b_live.t:.2f} s); simulated after "
                    f"({a_sim.t:.2f} s, {b_sim.t:.2f} s)"
                )
    return problems


def _causal(first: str, then: str, steps: Sequence[Step], side: str) -> list[str]:
    def index(prefix: str) -> int | None:
        return next(
            (i for i, s in enumerate(steps) if f"{s.job} {s.what}".startswith(prefix)), None
        )

    i, j = index(first), index(then)
    if i is None or j is None:
        missing = first if i is None else then
        return [f"{side}: no decision {missing!r} (named as causal)"]
    if j < i:
        return [f"{side}: {then!r} came before {first!r}, which causes it"]
    return []
