"""Small builders for tests of the control plane: resources, nodes, job specs, task reports.

Every builder has defaults that make a valid, minimal object, so a test spells out only what it
is about.  Documents (``phase_doc``/``job_doc``) are the YAML-shaped dicts the user writes;
``job_spec`` parses them, so a spec built here went through the same validation as a user's.
"""

from __future__ import annotations

from collections.abc import Sequence

from plumbing.node_protocol import TaskReport
from policies.scheduling.jobspec import JobSpec, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.priority_fifo import Ask, NodeSlot
from policies.scheduling.resources import Resources


def res(cpu: float = 1.0, memory_mb: int = 256) -> Resources:
    return Resources(cpu=cpu, memory_mb=memory_mb)


def node_slot(
    node_id: str = "n1",
    cpu: float = 4.0,
    memory_mb: int = 4096,
    *,
    used_cpu: float = 0.0,
    used_memory_mb: int = 0,
) -> NodeSlot:
    """A node of the placement snapshot with ``used_*`` already allocated."""
    return NodeSlot(node_id, res(cpu, memory_mb), res(used_cpu, used_memory_mb))


def ask(
    job_id: str = "j1",
    *,
    priority: int = 0,
    seq: int = 1,
    phase: str = "p",
    count: int = 1,
    cpu: float = 1.0,
    memory_mb: int = 256,
) -> Ask:
    return Ask(job_id, priority, seq, phase, count, res(cpu, memory_mb))


def phase_doc(
    name: object = "p",
    tasks: object = 1,
    *,
    cpu: object = 1.0,
    memory_mb: object = 256,
    after: Sequence[object] = (),
    command: Sequence[object] = ("true",),
    **extra: object,
) -> dict[str, object]:
    """A phase as the user writes it (values untyped, so tests can build bad ones too);
    ``extra`` adds or overrides raw fields."""
    doc: dict[str, object] = {
        "name": name,
        "tasks": tasks,
        "command": list(command),
        "resources": {"cpu": cpu, "memory_mb": memory_mb},
    }
    if after:
        doc["after"] = list(after)
    doc.update(extra)
    return doc


def job_doc(*phases: object, name: object = "job", **extra: object) -> dict[str, object]:
    """A job document; one default phase when none is given."""
    doc: dict[str, object] = {"name": name, "phases": list(phases) or [phase_doc()]}
    doc.update(extra)
    return doc


def job_spec(
    *phases: dict[str, object], name: str = "job", priority: int = 0, max_retries: int = 2
) -> JobSpec:
    """A validated JobSpec built from phase documents."""
    return parse_job_spec(job_doc(*phases, name=name, priority=priority, max_retries=max_retries))


def chain_spec(*names: str, tasks: int = 1, priority: int = 0, max_retries: int = 2) -> JobSpec:
    """Phases ``names[0] -> names[1] -> ...``, each waiting for the one before."""
    phases = [
        phase_doc(name, tasks, after=[names[index - 1]] if index else [])
        for index, name in enumerate(names)
    ]
    return job_spec(*phases, priority=priority, max_retries=max_retries)


def observation(
    job_id: str,
    task_id: str,
    state: TaskState,
    *,
    attempt: int = 1,
    allocation_id: str = "",
    exit_code: int = 0,
    message: str = "",
    timestamp: float = 0.0,
    start_time: float = 0.0,
    job_master: bool = False,
    limits: Resources | None = None,
) -> TaskReport:
    """A node agent's report of one task attempt."""
    return TaskReport(
        job_id=job_id,
        task_id=task_id,
        attempt=attempt,
        allocation_id=allocation_id,
        state=state,
        exit_code=exit_code,
        message=message,
        timestamp=timestamp,
        start_time=start_time,
        job_master=job_master,
        limits=limits,
    )


LIBYAML_DEPTH = "not valid YAML: while increasing flow level, exceeded maximum nesting depth"
"""The libyaml bundled with PyYAML 6.0.4 caps flow nesting in its scanner, which reads ahead of
the events Sluice's composer bounds: deep flow text may be refused there first (still on one
line, naming the text as a whole)."""


def same_refusal(got: str, expected: str) -> bool:
    """``got`` is the refusal ``expected``, or libyaml's own for the same too-deep text."""
    if "nests deeper than" in expected and LIBYAML_DEPTH in got:
        return True
    return got.startswith(expected)
