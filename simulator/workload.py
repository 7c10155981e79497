"""Synthetic workloads: job classes read from a YAML file, turned into the simulator's jobs.

A workload file (docs/simulator-workloads.md describes every key)::

    seed: 7
    classes:
      - name: batch
        priority: 0
        max_retries: 2
        arrival: {process: poisson, rate: 0.5, count: 100, start: 0}
        phases:
          - {name: map, tasks: 20, cpu: 1, memory_mb: 1024,
             duration: {distribution: pareto, alpha: 1.6, t_min: 10}}
          - {name: reduce, after: [map], tasks: 5, cpu: 1, memory_mb: 2048, duration: 30}

Each class is a job spec without a name, an arrival process and a duration distribution per
phase.  The job spec is the product's own: a class's phases, priority and max_retries are checked
by :func:`policies.scheduling.jobspec.parse_job_spec` (with the placeholder command ``["true"]``,
which the simulator never runs), once per class when the workload is read; every job of the class
is that spec under its own name, ``{class}-{index:06d}``, which the same rules accept.

:meth:`Workload.generate` draws the jobs for a seed.  Each class has its own random streams,
derived from (seed, class name) with SHA-256: one for its arrivals and one per phase for that
phase's durations.  So the same seed gives the same jobs, and adding a class, or changing another
phase's distribution, changes nothing else.  Every refusal is a one-line :class:`WorkloadError`
naming the field, e.g. ``classes[1].phases[0].duration.alpha: must be a positive number, got -1``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from plumbing.spec_text import load_yaml_document, read_spec_file
from policies.scheduling.jobspec import (
    MAX_NAME_LENGTH,
    JobSpec,
    SpecError,
    parse_job_spec,
    quoted,
)
from simulator.distributions import (
    MAX_DURATION,
    Distribution,
    WorkloadError,
    check_keys,
    describe,
    parse_distribution,
    positive_number,
    shown,
)

__all__ = [
    "MAX_CLASSES",
    "MAX_CLASS_NAME_LENGTH",
    "MAX_JOBS_PER_CLASS",
    "PLACEHOLDER_COMMAND",
    "FixedArrival",
    "JobClass",
    "PoissonArrival",
    "SimJob",
    "Workload",
    "WorkloadError",
    "alone_time",
    "load_workload",
    "parse_workload",
]

PLACEHOLDER_COMMAND = ("true",)
"""The command of every simulated phase: the simulator never runs it."""

MAX_JOBS_PER_CLASS = 999_999
"""Job names carry a six-digit index within their class."""

MAX_CLASS_NAME_LENGTH = MAX_NAME_LENGTH - 7
"""A job's name is its class's name, a dash and six digits, and must be a valid job name."""

MAX_CLASSES = 1_000
MAX_SEED = 2**64 - 1
MIN_RATE = 1e-9
"""Jobs per second: one in about 32 years (:data:`MAX_DURATION`)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SEED_BYTES = 16


# ------------------------------------------------------------------------------ types


@dataclass(frozen=True)
class SimJob:
    """One job of a simulation: what the engine submits, when, and how long each task runs."""

    name: str
    """Unique in the workload, e.g. ``batch-000017`` (also ``spec.name``)."""
    job_class: str
    submit_time: float
    """Virtual seconds from the start of the simulation."""
    spec: JobSpec
    durations: Mapping[str, tuple[float, ...]]
    """Phase name -> each task's duration in seconds at its full CPU grant, in task-index order;
    ``len(durations[p.name]) == p.tasks`` for every phase ``p``.  Not to be mutated."""
    coupled: frozenset[str] = frozenset()
    """Names of its tightly coupled phases: a preemption kill of one of their tasks restarts
    the work of its running siblings (the engine's module docstring says how)."""
    copy_durations: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    """Like ``durations``, for a straggler copy of each task (slot reservation, Sec. IV-C): an
    independent draw from the phase's distribution, as the paper's model has it.  A phase not
    listed (a trace gives one duration per task) runs its copies as long as the original."""


@dataclass(frozen=True)
class PoissonArrival:
    """``count`` jobs, the first one exponential inter-arrival time after ``start``, then one
    every exponential inter-arrival time of mean ``1 / rate`` seconds."""

    rate: float
    count: int
    start: float = 0.0

    def arrival_times(self, rng: random.Random) -> list[float]:
        times: list[float] = []
        now = self.start
        for _ in range(self.count):
            now += rng.expovariate(self.rate)
            times.append(now)
        return times


@dataclass(frozen=True)
class FixedArrival:
    """One job at each of ``times`` (seconds), in that order (job index = position)."""

    times: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.times)

    def arrival_times(self, rng: random.Random) -> list[float]:
        return list(self.times)


Arrival = PoissonArrival | FixedArrival


@dataclass(frozen=True)
class JobClass:
    """Jobs alike but for their name, arrival time and durations."""

    name: str
    spec: JobSpec
    """Every job's spec but for its name (validated as ``{name}-000000``)."""
    durations: tuple[Distribution, ...]
    """One per phase of ``spec``, in the same order."""
    arrival: Arrival
    coupled: frozenset[str] = frozenset()
    """Names of the phases marked ``coupled: true`` (:attr:`SimJob.coupled`)."""


@dataclass(frozen=True)
class Workload:
    classes: tuple[JobClass, ...]
    seed: int | None
    """The file's default seed, if it gave one."""

    def generate(self, seed: int) -> list[SimJob]:
        """Every class's jobs for ``seed``, sorted by (submit_time, name); deterministic."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise WorkloadError("seed", f"must be an integer, not {describe(seed)}")
        jobs: list[SimJob] = []
        for job_class in self.classes:
            jobs.extend(_generate_class(job_class, seed))
        jobs.sort(key=lambda job: (job.submit_time, job.name))
        return jobs


def _stream(seed: int, *parts: str) -> random.Random:
    """A generator seeded from ``seed`` and ``parts`` alone (and so independent of the rest)."""
    text = "\0".join((str(seed), *parts)).encode("utf-8")
    digest = hashlib.sha256(text).digest()
    return random.Random(int.from_bytes(digest[:_SEED_BYTES], "big"))


def _generate_class(job_class: JobClass, seed: int) -> list[SimJob]:
    times = job_class.arrival.arrival_times(_stream(seed, job_class.name, "arrival"))
    phase_rngs = [
        _stream(seed, job_class.name, "phase", phase.name) for phase in job_class.spec.phases
    ]
    # Copies draw from streams of their own: asking for copies changes no original's duration.
    copy_rngs = [
        _stream(seed, job_class.name, "copy", phase.name) for phase in job_class.spec.phases
    ]
    jobs: list[SimJob] = []
    for index, submit_time in enumerate(times):
        name = f"{job_class.name}-{index:06d}"
        durations = {
            phase.name: tuple(distribution.sample(rng) for _ in range(phase.tasks))
            for phase, distribution, rng in zip(
                job_class.spec.phases, job_class.durations, phase_rngs, strict=True
            )
        }
        copy_durations = {
            phase.name: tuple(distribution.sample(rng) for _ in range(phase.tasks))
            for phase, distribution, rng in zip(
                job_class.spec.phases, job_class.durations, copy_rngs, strict=True
            )
        }
        jobs.append(
            SimJob(
                name=name,
                job_class=job_class.name,
                submit_time=submit_time,
                spec=dataclasses.replace(job_class.spec, name=name),
                durations=durations,
                coupled=job_class.coupled,
                copy_durations=copy_durations,
            )
        )
    return jobs


def alone_time(job: SimJob) -> float:
    """The job's completion time alone on an unlimited, empty cluster: every task starts as soon
    as its phase may, so a phase lasts as long as its longest task and starts when the last of
    its upstream phases (``after``) ends.  That is the longest path through the phase DAG, each
    phase weighing its longest task's duration."""
    phases = job.spec.phases
    waiting = {phase.name: len(phase.after) for phase in phases}
    downstream: dict[str, list[str]] = {phase.name: [] for phase in phases}
    for phase in phases:
        for upstream in phase.after:
            downstream[upstream].append(phase.name)
    start = dict.fromkeys(waiting, 0.0)
    ready = [name for name, count in waiting.items() if count == 0]
    end = 0.0
    while ready:  # Kahn's order: the spec lists phases in the user's order, not a topological one
        name = ready.pop()
        finish = start[name] + max(job.durations[name], default=0.0)
        end = max(end, finish)
        for after in downstream[name]:
            start[after] = max(start[after], finish)
            waiting[after] -= 1
            if waiting[after] == 0:
                ready.append(after)
    return end


# ------------------------------------------------------------------------------ reading


def load_workload(path: Path) -> Workload:
    """The workload in the YAML file at ``path``; :class:`WorkloadError` for anything wrong with
    it, including YAML syntax (with its line) and a file that cannot be read.

    The file goes through the product's bounded YAML loader (``plumbing.spec_text``): at most
    1 MiB and 100,000 nodes, no duplicate keys; a longer list of jobs belongs in a trace CSV
    (:mod:`simulator.traces`)."""
    try:
        data = read_spec_file(path, field="workload")
        document = load_yaml_document(data, field="workload")
    except OSError as error:
        raise WorkloadError("workload", f"cannot read {path}: {error.strerror or error}") from None
    except SpecError as error:
        raise WorkloadError(error.field, error.problem) from None
    return parse_workload(document)


def parse_workload(document: object) -> Workload:
    """The workload a decoded YAML document describes; :class:`WorkloadError` naming the field."""
    doc = check_keys(document, "", ("classes",), ("seed",))
    seed: int | None = None
    if "seed" in doc:
        seed = _integer(doc["seed"], "seed", minimum=0, maximum=MAX_SEED)
    raw_classes = doc["classes"]
    if not isinstance(raw_classes, list) or not raw_classes:
        raise WorkloadError("classes", f"must be a non-empty list, not {_what(raw_classes)}")
    if len(raw_classes) > MAX_CLASSES:
        raise WorkloadError("classes", f"has {len(raw_classes)} classes; at most {MAX_CLASSES}")
    classes: list[JobClass] = []
    first_index: dict[str, int] = {}
    for index, raw in enumerate(raw_classes):
        job_class = _job_class(raw, f"classes[{index}]")
        if job_class.name in first_index:
            raise WorkloadError(
                f"classes[{index}].name",
                f"duplicate class name {quoted(job_class.name)} "
                f"(also classes[{first_index[job_class.name]}])",
            )
        first_index[job_class.name] = index
        classes.append(job_class)
    return Workload(classes=tuple(classes), seed=seed)


_CLASS_REQUIRED = ("name", "arrival", "phases")
_CLASS_OPTIONAL = ("priority", "max_retries", "queue", "reservation")
_PHASE_REQUIRED = ("name", "tasks", "cpu", "memory_mb", "duration")
_PHASE_OPTIONAL = ("after", "coupled", "droppable")


def _job_class(value: object, field: str) -> JobClass:
    doc = check_keys(value, field, _CLASS_REQUIRED, _CLASS_OPTIONAL)
    name = _class_name(doc["name"], f"{field}.name")
    arrival = _arrival(doc["arrival"], f"{field}.arrival")
    raw_phases = doc["phases"]
    if not isinstance(raw_phases, list) or not raw_phases:
        raise WorkloadError(f"{field}.phases", f"must be a non-empty list, not {_what(raw_phases)}")
    phase_docs = [
        check_keys(raw, f"{field}.phases[{index}]", _PHASE_REQUIRED, _PHASE_OPTIONAL)
        for index, raw in enumerate(raw_phases)
    ]
    spec_document: dict[str, object] = {
        "name": f"{name}-{0:06d}",
        "phases": [_spec_phase(phase) for phase in phase_docs],
    }
    for key in _CLASS_OPTIONAL:
        if key in doc:
            spec_document[key] = doc[key]
    try:
        spec = parse_job_spec(spec_document)
    except SpecError as error:
        raise WorkloadError(_class_field(field, error.field), error.problem) from None
    durations = tuple(
        parse_distribution(phase["duration"], f"{field}.phases[{index}].duration")
        for index, phase in enumerate(phase_docs)
    )
    coupled = frozenset(
        str(phase["name"])
        for index, phase in enumerate(phase_docs)
        if _flag(phase.get("coupled", False), f"{field}.phases[{index}].coupled")
    )
    return JobClass(name=name, spec=spec, durations=durations, arrival=arrival, coupled=coupled)


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise WorkloadError(field, f"must be true or false, not {_what(value)}")
    return value


def _spec_phase(phase: Mapping[str, object]) -> dict[str, object]:
    """A phase of the workload as a phase of a job spec."""
    spec_phase: dict[str, object] = {
        "name": phase["name"],
        "tasks": phase["tasks"],
        "command": list(PLACEHOLDER_COMMAND),
        "resources": {"cpu": phase["cpu"], "memory_mb": phase["memory_mb"]},
    }
    if "after" in phase:
        spec_phase["after"] = phase["after"]
    if "droppable" in phase:
        spec_phase["droppable"] = phase["droppable"]  # (checked by the job spec's rules)
    return spec_phase


_RESOURCES_FIELD = re.compile(r"^(phases\[\d+\])\.resources")


def _class_field(prefix: str, spec_field: str) -> str:
    """A job spec's field (``phases[0].resources.cpu``) as the class's (``....phases[0].cpu``)."""
    if spec_field == "job":
        return prefix
    return prefix + "." + _RESOURCES_FIELD.sub(r"\1", spec_field)


def _class_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise WorkloadError(field, f"must be a non-empty string, not {_what(value)}")
    if len(value) > MAX_CLASS_NAME_LENGTH or not _NAME.fullmatch(value):
        raise WorkloadError(
            field,
            f"must be at most {MAX_CLASS_NAME_LENGTH} letters, digits, '-', '_' or '.', "
            f"starting with a letter or digit, got {shown(value)}",
        )
    return value


_ARRIVALS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "poisson": (("process", "rate", "count"), ("start",)),
    "fixed": (("process", "times"), ()),
}


def _arrival(value: object, field: str) -> Arrival:
    if isinstance(value, Mapping):
        if "process" not in value:
            raise WorkloadError(f"{field}.process", "is required")
        process = value["process"]
        if not isinstance(process, str) or process not in _ARRIVALS:
            raise WorkloadError(
                f"{field}.process", f"must be one of {', '.join(_ARRIVALS)}, got {shown(process)}"
            )
        required, optional = _ARRIVALS[process]
    else:
        process, required, optional = "", ("process",), ()
    doc = check_keys(value, field, required, optional)
    if process == "poisson":
        rate = positive_number(doc["rate"], f"{field}.rate")
        if rate < MIN_RATE:
            raise WorkloadError(f"{field}.rate", f"must be at least {MIN_RATE:g}, got {rate!r}")
        count = _integer(doc["count"], f"{field}.count", minimum=1, maximum=MAX_JOBS_PER_CLASS)
        start = _time(doc.get("start", 0), f"{field}.start")
        return PoissonArrival(rate=rate, count=count, start=start)
    raw_times = doc["times"]
    if not isinstance(raw_times, list) or not raw_times:
        raise WorkloadError(
            f"{field}.times", f"must be a non-empty list of times, not {_what(raw_times)}"
        )
    if len(raw_times) > MAX_JOBS_PER_CLASS:
        raise WorkloadError(
            f"{field}.times", f"has {len(raw_times)} times; at most {MAX_JOBS_PER_CLASS}"
        )
    return FixedArrival(
        tuple(_time(item, f"{field}.times[{index}]") for index, item in enumerate(raw_times))
    )


def _time(value: object, field: str) -> float:
    """Seconds from the start: a finite number in [0, MAX_DURATION]."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        raise WorkloadError(field, f"must be a number of seconds >= 0, got {shown(value)}")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise WorkloadError(field, f"must be a number of seconds >= 0, not {describe(value)}")
    return positive_number(value, field, maximum=MAX_DURATION)


def _integer(value: object, field: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(field, f"must be an integer, not {describe(value)}")
    if not minimum <= value <= maximum:
        raise WorkloadError(field, f"must be in {minimum}..{maximum}, got {shown(value)}")
    return value


def _what(value: object) -> str:
    """``value`` described for "must be a non-empty list, not ...": an empty list says so."""
    if isinstance(value, list) and not value:
        return "an empty list"
    return describe(value)
