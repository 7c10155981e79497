"""Job specifications: parse a YAML-shaped document into a validated, immutable JobSpec.

The schema (every field, its type and constraint) is :data:`JOB_FIELDS` and :data:`PHASE_FIELDS`;
docs/jobspec.md describes it for users.  Every refusal is a :class:`SpecError` whose message names
the field and the problem, e.g. ``phases[1].after: unknown phase 'reduce'``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.scheduling.resources import Resources

DEFAULT_MAX_RETRIES = 2
MAX_TASKS_PER_PHASE = 100_000
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class SpecError(ValueError):
    """An invalid job specification; ``field`` is a path such as ``phases[0].resources.cpu``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class PhaseSpec:
    name: str
    tasks: int
    command: tuple[str, ...]
    resources: Resources
    after: tuple[str, ...] = ()
    image: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """A validated job: phases form a DAG (``after`` names upstream phases), in the order the
    user wrote them."""

    name: str
    priority: int
    phases: tuple[PhaseSpec, ...]
    max_retries: int = DEFAULT_MAX_RETRIES

    def phase(self, name: str) -> PhaseSpec:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def total_tasks(self) -> int:
        return sum(phase.tasks for phase in self.phases)


# ------------------------------------------------------------------------------ field checkers


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(field, "must be a non-empty string")
    if len(value) > 63 or not set(value) <= _NAME_CHARS:
        raise SpecError(field, "must be at most 63 letters, digits, '-', '_' or '.'")
    return value


def _integer(value: object, field: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer, not {_describe(value)}")
    if minimum is not None and value < minimum:
        word = "positive" if minimum == 1 else f"at least {minimum}"
        raise SpecError(field, f"must be {word}, got {value}")
    return value


def _positive_number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, f"must be a number, not {_describe(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float: math.isfinite would raise too
        raise SpecError(field, "is too large") from None
    if not math.isfinite(number) or number <= 0:
        raise SpecError(field, f"must be positive, got {value}")
    return number


def _string_list(value: object, field: str, *, non_empty: bool) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SpecError(field, f"must be a list of strings, not {_describe(value)}")
    if non_empty and not value:
        raise SpecError(field, "must not be empty")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise SpecError(f"{field}[{index}]", f"must be a string, not {_describe(item)}")
    return tuple(value)


def _mapping(value: object, field: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise SpecError(field, f"must be a mapping, not {_describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise SpecError(field, f"keys must be strings, not {_describe(key)}")
    return value


def _describe(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


# ------------------------------------------------------------------------------ the schema

# Field name -> required?  The checks of each value are in the parse functions below.
JOB_FIELDS: Mapping[str, bool] = {
    "name": True,
    "priority": False,
    "phases": True,
    "max_retries": False,
}
PHASE_FIELDS: Mapping[str, bool] = {
    "name": True,
    "tasks": True,
    "command": True,
    "resources": True,
    "after": False,
    "image": False,
}
RESOURCE_FIELDS: Mapping[str, bool] = {"cpu": True, "memory_mb": True}


def _check_keys(value: object, field: str, schema: Mapping[str, bool]) -> Mapping[str, object]:
    """Refuse a non-mapping, unknown keys and missing required keys."""
    doc = _mapping(value, field)
    for key in doc:
        if key not in schema:
            raise SpecError(_join(field, key), f"unknown field (allowed: {', '.join(schema)})")
    for key, required in schema.items():
        if required and key not in doc:
            raise SpecError(_join(field, key), "is required")
    return doc


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _image(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, "must be a non-empty image reference")
    return value


def _resources(value: object, field: str) -> Resources:
    doc = _check_keys(value, field, RESOURCE_FIELDS)
    return Resources(
        cpu=_positive_number(doc["cpu"], f"{field}.cpu"),
        memory_mb=_integer(doc["memory_mb"], f"{field}.memory_mb", minimum=1),
    )


def _phase(value: object, field: str) -> PhaseSpec:
    doc = _check_keys(value, field, PHASE_FIELDS)
    tasks = _integer(doc["tasks"], f"{field}.tasks", minimum=1)
    if tasks > MAX_TASKS_PER_PHASE:
        raise SpecError(f"{field}.tasks", f"must be at most {MAX_TASKS_PER_PHASE}, got {tasks}")
    return PhaseSpec(
        name=_name(doc["name"], f"{field}.name"),
        tasks=tasks,
        command=_string_list(doc["command"], f"{field}.command", non_empty=True),
        resources=_resources(doc["resources"], f"{field}.resources"),
        after=_string_list(doc.get("after", []), f"{field}.after", non_empty=False),
        image=_image(doc["image"], f"{field}.image") if "image" in doc else None,
    )


# ------------------------------------------------------------------------------ entry points


def parse_job_spec(document: object) -> JobSpec:
    """Validate a decoded YAML/JSON document and return the JobSpec; raise SpecError."""
    doc = _check_keys(document, "", JOB_FIELDS)
    raw_phases = doc["phases"]
    if not isinstance(raw_phases, list) or not raw_phases:
        raise SpecError("phases", "must be a non-empty list of phases")
    phases = [_phase(raw, f"phases[{index}]") for index, raw in enumerate(raw_phases)]
    first_index: dict[str, int] = {}
    for index, phase in enumerate(phases):
        if phase.name in first_index:
            raise SpecError(
                f"phases[{index}].name",
                f"duplicate phase name '{phase.name}' (also phases[{first_index[phase.name]}])",
            )
        first_index[phase.name] = index
    for index, phase in enumerate(phases):
        for upstream in phase.after:
            if upstream not in first_index:
                raise SpecError(f"phases[{index}].after", f"unknown phase '{upstream}'")
    _check_acyclic(phases)
    return JobSpec(
        name=_name(doc["name"], "name"),
        priority=_integer(doc.get("priority", 0), "priority"),
        phases=tuple(phases),
        max_retries=_integer(doc.get("max_retries", DEFAULT_MAX_RETRIES), "max_retries", minimum=0),
    )


def _check_acyclic(phases: Sequence[PhaseSpec]) -> None:
    """Raise a SpecError naming the first dependency cycle found, if any.

    A depth-first search with an explicit stack: recursion would overflow (a RecursionError
    traceback instead of an answer) on a long chain of phases listed downstream first."""
    by_name = {phase.name: phase for phase in phases}
    done: set[str] = set()
    for phase in phases:
        if phase.name in done:
            continue
        path = [phase.name]  # each phase on the path waits for the next one
        on_path = {phase.name}
        upstreams = [iter(phase.after)]  # what is left to visit of each phase on the path
        while path:
            upstream = next(upstreams[-1], None)
            if upstream is None:
                finished = path.pop()
                on_path.remove(finished)
                done.add(finished)
                upstreams.pop()
            elif upstream in on_path:
                cycle = [*path[path.index(upstream) :], upstream]
                raise SpecError("phases", f"dependency cycle {' -> '.join(cycle)}")
            elif upstream not in done:
                path.append(upstream)
                on_path.add(upstream)
                upstreams.append(iter(by_name[upstream].after))


def check_fits_cluster(spec: JobSpec, capacities: Sequence[Resources]) -> None:
    """Refuse phases whose per-task resources fit on no node.  An empty cluster accepts all:
    nodes may register later, and refusing then would be a guess."""
    if not capacities:
        return
    for index, phase in enumerate(spec.phases):
        if not any(phase.resources.fits_in(capacity) for capacity in capacities):
            largest_cpu = max(c.cpu for c in capacities)
            largest_mem = max(c.memory_mb for c in capacities)
            raise SpecError(
                f"phases[{index}].resources",
                f"{phase.resources.cpu:g} cpu / {phase.resources.memory_mb} MiB per task fits on "
                f"no node (largest: {largest_cpu:g} cpu, {largest_mem} MiB)",
            )


def job_spec_to_document(spec: JobSpec) -> dict[str, object]:
    """The inverse of :func:`parse_job_spec`: a plain document that parses back to ``spec``."""
    phases: list[dict[str, object]] = []
    for phase in spec.phases:
        doc: dict[str, object] = {
            "name": phase.name,
            "tasks": phase.tasks,
            "command": list(phase.command),
            "resources": {"cpu": phase.resources.cpu, "memory_mb": phase.resources.memory_mb},
        }
        if phase.after:
            doc["after"] = list(phase.after)
        if phase.image is not None:
            doc["image"] = phase.image
        phases.append(doc)
    return {
        "name": spec.name,
        "priority": spec.priority,
        "phases": phases,
        "max_retries": spec.max_retries,
    }
