"""Recorded workloads: Sluice's own trace CSV, and importers for two public cluster traces.

**Sluice trace CSV** (:func:`read_trace_csv`, :func:`write_trace_csv`): UTF-8 CSV (``.gz`` for
gzip), a header row naming the columns (any order), then one row per task:

============  ========  =============================================================
column        required  value
============  ========  =============================================================
job           yes       the job's name (a job name: letter/digit first, ``[A-Za-z0-9._-]``)
class         no        the job's class, a name likewise (default ``trace``)
submit_time   yes       seconds from the start of the simulation, ``>= 0``
priority      no        integer, int32; higher wins (default 0)
max_retries   no        integer 0..100 (default 2)
phase         yes       the phase's name
after         no        the phase's upstream phases, separated by ``;``; empty for none
task          yes       the task's index in its phase, 0..tasks-1, each exactly once
cpu           yes       cores per task of the phase
memory_mb     yes       MiB per task of the phase (integer)
duration      yes       the task's duration in seconds at its full CPU grant, ``>= 0``
============  ========  =============================================================

A job's rows need not be adjacent; its phases are in the order they first appear.  The job-level
columns (class, submit_time, priority, max_retries) must agree on every row of a job, and the
phase-level ones (after, cpu, memory_mb) on every row of a phase.  Each job must be a valid job
spec (``policies.scheduling.jobspec``; its command is the placeholder ``true``).  Reading is
strict: any bad row is a :class:`WorkloadError` naming ``line N, column X``.  Numbers are written
with ``repr``, so ``read_trace_csv(write_trace_csv(jobs))`` gives back ``jobs`` exactly (sorted by
submit time, then name, as :meth:`Workload.generate` sorts them; commands and images, which a
simulated job does not use, are not kept).

**Google cluster-usage trace 2011** (:func:`read_google_2011`) and **Alibaba
cluster-trace-v2018** ``batch_task`` (:func:`read_alibaba_2018`): headerless CSV files in their
published schemas, optionally gzip.  A row that does not fit the schema (wrong number of fields, a
field that is not the number it must be, an unknown event type) is a :class:`WorkloadError` naming
the file, line and column: it means the wrong file.  What the schema allows but the simulation
cannot use (a task that never finished, a job submitted before the trace window, a job with a
failed task, ...) is skipped and counted in the :class:`TraceImport` returned, whose summary the
``import_*`` functions log.  docs/simulator-workloads.md says what is mapped how.
"""

from __future__ import annotations

import csv
import gzip
import logging
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from policies.scheduling.jobspec import (
    DEFAULT_MAX_RETRIES,
    MAX_NAME_LENGTH,
    MAX_TASKS_PER_PHASE,
    SpecError,
    parse_job_spec,
    quoted,
)
from simulator.distributions import MAX_DURATION, WorkloadError
from simulator.workload import PLACEHOLDER_COMMAND, SimJob

__all__ = [
    "ALIBABA_2018_BATCH_TASK_COLUMNS",
    "GOOGLE_2011_JOB_EVENTS_COLUMNS",
    "GOOGLE_2011_TASK_EVENTS_COLUMNS",
    "TRACE_COLUMNS",
    "TraceImport",
    "google_priority_class",
    "import_alibaba_2018",
    "import_google_2011",
    "read_alibaba_2018",
    "read_google_2011",
    "read_trace_csv",
    "write_trace_csv",
]

_log = logging.getLogger(__name__)

TRACE_COLUMNS = (
    "job",
    "class",
    "submit_time",
    "priority",
    "max_retries",
    "phase",
    "after",
    "task",
    "cpu",
    "memory_mb",
    "duration",
)
_REQUIRED_COLUMNS = frozenset(
    {"job", "submit_time", "phase", "task", "cpu", "memory_mb", "duration"}
)
_DEFAULTS: Mapping[str, str] = {
    "class": "trace",
    "priority": "0",
    "max_retries": str(DEFAULT_MAX_RETRIES),
    "after": "",
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")
_MAX_NUMBER_TEXT = 64
_MAX_REFUSALS_KEPT = 10


@dataclass(frozen=True)
class TraceImport:
    """What an importer made of a trace: the jobs, and what it skipped and why."""

    jobs: list[SimJob]
    rows: int
    """Rows read, over all files."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """What was skipped (e.g. ``tasks that never finished``) -> how many."""
    refusals: tuple[str, ...] = ()
    """The first few job-spec refusals, for jobs skipped as ``jobs the job-spec rules refuse``."""

    def summary(self) -> str:
        """One line: ``12 jobs from 40 rows; skipped: 3 tasks that never finished, ...``."""
        skipped = ", ".join(f"{count} {what}" for what, count in self.skipped.items() if count)
        return f"{len(self.jobs)} jobs from {self.rows} rows; skipped: {skipped or 'nothing'}"


# ------------------------------------------------------------------------------ files


def _open_text(path: Path) -> TextIO:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def _csv_rows(path: Path, label: str) -> Iterator[tuple[int, list[str]]]:
    """Each non-blank row of the CSV file at ``path`` with its line number; problems reading it
    become :class:`WorkloadError` naming ``label``."""
    line = 0
    try:
        with _open_text(path) as file:
            reader = csv.reader(file, strict=True)
            for row in reader:
                line = reader.line_num
                if row:
                    yield line, row
    except OSError as error:  # including gzip.BadGzipFile
        raise WorkloadError(label, f"cannot read {path}: {error.strerror or error}") from None
    except (EOFError, zlib.error):
        raise WorkloadError(label, f"{path} is a truncated or corrupt gzip file") from None
    except UnicodeDecodeError:
        raise WorkloadError(label, f"{path} is not UTF-8 text (after line {line})") from None
    except csv.Error as error:
        raise WorkloadError(f"{label} line {line + 1}", f"not valid CSV: {error}") from None


def _paths(value: Path | Sequence[Path]) -> list[Path]:
    return [value] if isinstance(value, Path) else list(value)


# ------------------------------------------------------------------------------ fields


class _Row:
    """One row being read, for messages that name ``{where}line N, column X``."""

    def __init__(self, where: str, line: int, columns: Sequence[str], values: Sequence[str]):
        self.where = where
        self.line = line
        self.columns = columns
        self.values = values

    def field(self, column: str) -> str:
        return f"{self.where}line {self.line}, column {column}"

    def error(self, column: str, problem: str) -> WorkloadError:
        return WorkloadError(self.field(column), problem)

    def text(self, column: str) -> str:
        return self.values[self.columns.index(column)]

    def integer(self, column: str, *, empty: int | None = None) -> int:
        text = self.text(column)
        if text == "" and empty is not None:
            return empty
        if len(text) > _MAX_NUMBER_TEXT or not _INT.fullmatch(text):
            raise self.error(column, f"must be an integer, got {quoted(text)}")
        return int(text)

    def optional_integer(self, column: str) -> int | None:
        return None if self.text(column) == "" else self.integer(column)

    def number(self, column: str) -> float:
        text = self.text(column)
        if len(text) > _MAX_NUMBER_TEXT or not _FLOAT.fullmatch(text):
            raise self.error(column, f"must be a number, got {quoted(text)}")
        value = float(text)
        if not math.isfinite(value):
            raise self.error(column, f"must be a finite number, got {quoted(text)}")
        return value

    def optional_number(self, column: str) -> float | None:
        return None if self.text(column) == "" else self.number(column)

    def seconds(self, column: str, *, maximum: float = math.inf) -> float:
        value = self.number(column)
        if value < 0 or value > maximum:
            bound = f"in 0..{maximum:g}" if maximum < math.inf else ">= 0"
            raise self.error(column, f"must be a number of seconds {bound}, got {value}")
        return value

    def name(self, column: str) -> str:
        text = self.text(column)
        if len(text) > MAX_NAME_LENGTH or not _NAME.fullmatch(text):
            raise self.error(
                column,
                f"must be at most {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', starting "
                f"with a letter or digit, got {quoted(text)}",
            )
        return text


def _cpu(cores: float) -> float:
    """A CPU request in cores as a job spec holds it: to a thousandth of a core, at least one."""
    return max(round(cores, 3), 0.001)


def _memory(mib: float) -> int:
    return max(round(mib), 1)


def _check_machine(value: float, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise WorkloadError(name, f"must be a positive number, got {value!r}")


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise WorkloadError("limit", f"must be a non-negative integer or None, got {limit!r}")


def _phase_document(
    name: str, tasks: int, cpu: float, memory_mb: int, after: Sequence[str] = ()
) -> dict[str, object]:
    document: dict[str, object] = {
        "name": name,
        "tasks": tasks,
        "command": list(PLACEHOLDER_COMMAND),
        "resources": {"cpu": cpu, "memory_mb": memory_mb},
    }
    if after:
        document["after"] = list(after)
    return document


# ------------------------------------------------------------------------------ Sluice trace CSV


@dataclass
class _PhaseRows:
    line: int
    after: tuple[str, ...]
    cpu: float
    memory_mb: int
    durations: dict[int, tuple[float, int]]  # task index -> (duration, line)


@dataclass
class _JobRows:
    line: int
    job_class: str
    submit_time: float
    priority: int
    max_retries: int
    phases: dict[str, _PhaseRows]


def read_trace_csv(path: Path) -> list[SimJob]:
    """The jobs of a Sluice trace CSV (module docstring), sorted by (submit_time, name);
    :class:`WorkloadError` naming ``line N, column X`` for the first bad row."""
    rows = _csv_rows(path, "trace")
    header_row = next(rows, None)
    if header_row is None:
        raise WorkloadError("line 1", "the header row is missing (the file is empty)")
    header_line, header = header_row
    _check_header(header, header_line)
    columns = [*header, *(column for column in _DEFAULTS if column not in header)]
    jobs: dict[str, _JobRows] = {}
    for line, values in rows:
        if len(values) != len(header):
            raise WorkloadError(
                f"line {line}", f"has {len(values)} fields; the header has {len(header)}"
            )
        row = _Row("", line, columns, [*values, *(_DEFAULTS[c] for c in columns[len(header) :])])
        _read_trace_row(row, jobs)
    result = [_trace_job(name, job) for name, job in jobs.items()]
    result.sort(key=lambda job: (job.submit_time, job.name))
    return result


def _check_header(header: list[str], line: int) -> None:
    seen: set[str] = set()
    for column in header:
        if column not in TRACE_COLUMNS:
            raise WorkloadError(
                f"line {line}",
                f"unknown column {quoted(column)} (columns: {', '.join(TRACE_COLUMNS)})",
            )
        if column in seen:
            raise WorkloadError(f"line {line}", f"column {quoted(column)} appears twice")
        seen.add(column)
    missing = [column for column in TRACE_COLUMNS if column in _REQUIRED_COLUMNS - seen]
    if missing:
        raise WorkloadError(f"line {line}", f"the header lacks the column(s) {', '.join(missing)}")


def _read_trace_row(row: _Row, jobs: dict[str, _JobRows]) -> None:
    name = row.name("job")
    job_class = row.name("class")
    submit_time = row.seconds("submit_time")
    priority = row.integer("priority")
    max_retries = row.integer("max_retries")
    phase_name = row.text("phase")
    after_text = row.text("after")
    after = tuple(after_text.split(";")) if after_text else ()
    task = row.integer("task")
    if not 0 <= task < MAX_TASKS_PER_PHASE:
        raise row.error("task", f"must be in 0..{MAX_TASKS_PER_PHASE - 1}, got {task}")
    cpu = row.number("cpu")
    memory_mb = row.integer("memory_mb")
    duration = row.seconds("duration", maximum=MAX_DURATION)
    job = jobs.get(name)
    if job is None:
        job = jobs[name] = _JobRows(row.line, job_class, submit_time, priority, max_retries, {})
    else:
        for column, value, first in (
            ("class", job_class, job.job_class),
            ("submit_time", submit_time, job.submit_time),
            ("priority", priority, job.priority),
            ("max_retries", max_retries, job.max_retries),
        ):
            if value != first:
                raise row.error(
                    column,
                    f"is {value}, but {first} on line {job.line} for job {quoted(name)}",
                )
    phase = job.phases.get(phase_name)
    if phase is None:
        phase = job.phases[phase_name] = _PhaseRows(row.line, after, cpu, memory_mb, {})
    else:
        for column, shown, first_shown, same in (
            ("after", after_text, ";".join(phase.after), after == phase.after),
            ("cpu", cpu, phase.cpu, cpu == phase.cpu),
            ("memory_mb", memory_mb, phase.memory_mb, memory_mb == phase.memory_mb),
        ):
            if not same:
                raise row.error(
                    column,
                    f"is {shown!r}, but {first_shown!r} on line {phase.line} for phase "
                    f"{quoted(phase_name)} of job {quoted(name)}",
                )
    if task in phase.durations:
        raise row.error(
            "task",
            f"task {task} of phase {quoted(phase_name)} of job {quoted(name)} is also on line "
            f"{phase.durations[task][1]}",
        )
    phase.durations[task] = (duration, row.line)


_SPEC_COLUMNS: Mapping[str, str] = {
    "name": "phase",
    "tasks": "task",
    "after": "after",
    "resources": "cpu",
    "cpu": "cpu",
    "memory_mb": "memory_mb",
}


def _trace_job(name: str, job: _JobRows) -> SimJob:
    phase_docs: list[dict[str, object]] = []
    durations: dict[str, tuple[float, ...]] = {}
    for phase_name, phase in job.phases.items():
        tasks = len(phase.durations)
        for index in range(tasks):
            if index not in phase.durations:
                raise WorkloadError(
                    f"line {phase.line}, column task",
                    f"phase {quoted(phase_name)} of job {quoted(name)} has {tasks} rows but no "
                    f"task {index} (tasks are numbered 0..{tasks - 1})",
                )
        durations[phase_name] = tuple(phase.durations[index][0] for index in range(tasks))
        phase_docs.append(
            _phase_document(phase_name, tasks, phase.cpu, phase.memory_mb, phase.after)
        )
    document = {
        "name": name,
        "priority": job.priority,
        "max_retries": job.max_retries,
        "phases": phase_docs,
    }
    try:
        spec = parse_job_spec(document)
    except SpecError as error:
        raise WorkloadError(_trace_field(error.field, job), error.problem) from None
    return SimJob(name, job.job_class, job.submit_time, spec, durations)


def _trace_field(spec_field: str, job: _JobRows) -> str:
    """A job spec's field (``phases[1].resources.cpu``) as the trace's line and column."""
    match = re.match(r"phases\[(\d+)\](?:\.([a-z_]+))?(?:\.([a-z_]+))?", spec_field)
    if match is None:
        columns = {"priority": "priority", "max_retries": "max_retries", "phases": "after"}
        column = columns.get(spec_field, "job")
        return f"line {job.line}, column {column}"
    phase = list(job.phases.values())[int(match.group(1))]
    key = match.group(3) or match.group(2) or "name"
    return f"line {phase.line}, column {_SPEC_COLUMNS.get(key, 'phase')}"


def write_trace_csv(jobs: Iterable[SimJob], path: Path) -> None:
    """Write ``jobs`` as a Sluice trace CSV (gzip if ``path`` ends in ``.gz``), every column,
    in the order given; :func:`read_trace_csv` reads them back exactly."""
    seen: set[str] = set()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS)
        for job in jobs:
            if job.name in seen:
                raise WorkloadError("jobs", f"job name {quoted(job.name)} appears twice")
            seen.add(job.name)
            for phase in job.spec.phases:
                durations = job.durations[phase.name]
                if len(durations) != phase.tasks:
                    raise WorkloadError(
                        f"jobs[{quoted(job.name)}].durations",
                        f"phase {quoted(phase.name)} has {phase.tasks} tasks but "
                        f"{len(durations)} durations",
                    )
                for index, duration in enumerate(durations):
                    writer.writerow(
                        (
                            job.name,
                            job.job_class,
                            repr(float(job.submit_time)),
                            job.spec.priority,
                            job.spec.max_retries,
                            phase.name,
                            ";".join(phase.after),
                            index,
                            repr(float(phase.resources.cpu)),
                            phase.resources.memory_mb,
                            repr(float(duration)),
                        )
                    )


# ------------------------------------------------------------------------------ shared by importers


def _build_jobs(
    candidates: Iterable[tuple[int | float, str, str, _TraceJob]],
    *,
    limit: int | None,
    skipped: Counter[str],
    refusals: list[str],
) -> list[SimJob]:
    """Jobs from (submit time in the trace's unit, name, class, parts), taken in order of submit
    time up to ``limit``, with submit times shifted so that the first is 0 and scaled to seconds
    by the parts' ``time_scale``."""
    jobs: list[SimJob] = []
    first: float | None = None
    for submit, name, job_class, parts in sorted(candidates, key=lambda c: (c[0], c[1])):
        if limit is not None and len(jobs) >= limit:
            break
        try:
            spec = parse_job_spec(parts.document(name))
        except SpecError as error:
            skipped["jobs the job-spec rules refuse"] += 1
            if len(refusals) < _MAX_REFUSALS_KEPT:
                refusals.append(f"job {quoted(name)}: {error}")
            continue
        if first is None:
            first = submit
        jobs.append(
            SimJob(
                name=name,
                job_class=job_class,
                submit_time=(submit - first) / parts.time_scale,
                spec=spec,
                durations=parts.durations,
            )
        )
    return jobs


@dataclass(frozen=True)
class _TraceJob:
    """A job from a trace before it is a :class:`SimJob`: its phases and their durations."""

    priority: int
    phases: tuple[dict[str, object], ...]
    durations: Mapping[str, tuple[float, ...]]
    time_scale: float
    """Trace time units per second (10**6 for Google's microseconds)."""

    def document(self, name: str) -> dict[str, object]:
        return {"name": name, "priority": self.priority, "phases": list(self.phases)}


def _finish_import(
    jobs: list[SimJob], rows: int, skipped: Counter[str], refusals: list[str], source: str
) -> TraceImport:
    result = TraceImport(jobs=jobs, rows=rows, skipped=dict(skipped), refusals=tuple(refusals))
    _log.info("%s: %s", source, result.summary())
    for refusal in refusals:
        _log.info("%s: skipped %s", source, refusal)
    return result


# ------------------------------------------------------------------------------ Google 2011

GOOGLE_2011_JOB_EVENTS_COLUMNS = (
    "timestamp",
    "missing_info",
    "job_id",
    "event_type",
    "user",
    "scheduling_class",
    "job_name",
    "logical_job_name",
)
GOOGLE_2011_TASK_EVENTS_COLUMNS = (
    "timestamp",
    "missing_info",
    "job_id",
    "task_index",
    "machine_id",
    "event_type",
    "user",
    "scheduling_class",
    "priority",
    "cpu_request",
    "memory_request",
    "disk_request",
    "different_machine_restriction",
)
_SUBMIT, _SCHEDULE, _EVICT, _FAIL, _FINISH, _KILL, _LOST = range(7)
_EVENT_TYPES = range(9)  # 7 UPDATE_PENDING, 8 UPDATE_RUNNING
_BEFORE_WINDOW = 0
_AFTER_WINDOW = 2**63 - 1
_MICROSECONDS = 1_000_000
_GOOGLE_PRIORITIES = range(12)


def google_priority_class(priority: int) -> str:
    """The band a Google 2011 priority belongs to, as the trace's analyses name them:
    ``free`` (0-1), ``middle`` (2-8), ``production`` (9-11)."""
    if priority <= 1:
        return "free"
    if priority <= 8:
        return "middle"
    return "production"


class _GoogleTask:
    __slots__ = ("cpu", "duration", "memory", "priority", "scheduled")

    def __init__(self) -> None:
        self.scheduled: int | None = None
        self.duration: int | None = None
        self.priority = 0
        self.cpu: float | None = None
        self.memory: float | None = None


def read_google_2011(
    job_events: Path | Sequence[Path],
    task_events: Path | Sequence[Path],
    *,
    machine_cpu: float,
    machine_memory_mb: int,
    limit: int | None = None,
) -> TraceImport:
    """Jobs of the Google cluster-usage trace 2011 (``job_events`` and ``task_events`` files, or
    lists of their parts in time order; CSV without header, ``.gz`` read as gzip), with what was
    skipped.  Each job is one phase, ``tasks``, of its tasks that finished:

    - a task's duration is its last SCHEDULE to its FINISH after it (µs to seconds); a task that
      never finished so, or was scheduled before the trace window, is skipped; a job without a
      finished task is skipped;
    - a job's submit time is its first SUBMIT in ``job_events``, shifted so that the first job
      kept is at 0; a job submitted before the window (timestamp 0), or with no SUBMIT in
      ``job_events``, is skipped with its tasks' events;
    - priority is the highest priority of its tasks (0-11); the class is its band
      (:func:`google_priority_class`);
    - a phase's resources are the largest request among its finished tasks (each task's last
      request given) times ``machine_cpu`` cores / ``machine_memory_mb`` MiB, to a thousandth of a
      core and at least 0.001 core and 1 MiB; a finished task that never gave a request is
      skipped.

    ``limit`` keeps the first ``limit`` jobs by submit time (every file is still read).  A row
    that does not fit the published schema is a :class:`WorkloadError`."""
    _check_machine(machine_cpu, "machine_cpu")
    _check_machine(machine_memory_mb, "machine_memory_mb")
    _check_limit(limit)
    skipped: Counter[str] = Counter()
    rows = 0
    submits: dict[int, int] = {}  # job ID -> first SUBMIT, or _BEFORE_WINDOW
    for path in _paths(job_events):
        for line, values in _csv_rows(path, path.name):
            rows += 1
            row = _google_row(path, line, values, GOOGLE_2011_JOB_EVENTS_COLUMNS)
            timestamp = row.integer("timestamp")
            job_id = row.integer("job_id")
            if row.integer("event_type") == _SUBMIT and job_id not in submits:
                submits[job_id] = timestamp
    tasks: dict[int, dict[int, _GoogleTask]] = {}
    for job_id, submit in submits.items():
        if submit in (_BEFORE_WINDOW, _AFTER_WINDOW):
            skipped["jobs submitted outside the trace window"] += 1
        else:
            tasks[job_id] = {}
    for path in _paths(task_events):
        for line, values in _csv_rows(path, path.name):
            rows += 1
            row = _google_row(path, line, values, GOOGLE_2011_TASK_EVENTS_COLUMNS)
            _google_task_event(row, tasks, skipped)
    candidates: list[tuple[int | float, str, str, _TraceJob]] = []
    for job_id, job_tasks in tasks.items():
        parts = _google_job(job_tasks, machine_cpu, machine_memory_mb, skipped)
        if parts is None:
            skipped["jobs without a finished task"] += 1
            continue
        name = f"google-{job_id}"
        candidates.append((submits[job_id], name, google_priority_class(parts.priority), parts))
    refusals: list[str] = []
    jobs = _build_jobs(candidates, limit=limit, skipped=skipped, refusals=refusals)
    return _finish_import(jobs, rows, skipped, refusals, "google 2011 trace")


def import_google_2011(
    job_events: Path | Sequence[Path],
    task_events: Path | Sequence[Path],
    *,
    machine_cpu: float,
    machine_memory_mb: int,
    limit: int | None = None,
) -> list[SimJob]:
    """:func:`read_google_2011`'s jobs (its summary of what was skipped is logged)."""
    return read_google_2011(
        job_events,
        task_events,
        machine_cpu=machine_cpu,
        machine_memory_mb=machine_memory_mb,
        limit=limit,
    ).jobs


def _google_row(path: Path, line: int, values: list[str], columns: tuple[str, ...]) -> _Row:
    if len(values) != len(columns):
        raise WorkloadError(
            f"{path.name} line {line}",
            f"has {len(values)} fields; the schema has {len(columns)} ({', '.join(columns)})",
        )
    row = _Row(f"{path.name} ", line, columns, values)
    event_type = row.integer("event_type")
    if event_type not in _EVENT_TYPES:
        raise row.error("event_type", f"must be 0..8, got {event_type}")
    return row


def _google_task_event(
    row: _Row, tasks: dict[int, dict[int, _GoogleTask]], skipped: Counter[str]
) -> None:
    timestamp = row.integer("timestamp")
    job_id = row.integer("job_id")
    index = row.integer("task_index")
    event_type = row.integer("event_type")
    priority = row.integer("priority")
    if priority not in _GOOGLE_PRIORITIES:
        raise row.error("priority", f"must be 0..11, got {priority}")
    cpu = _request(row, "cpu_request")
    memory = _request(row, "memory_request")
    job_tasks = tasks.get(job_id)
    if job_tasks is None:
        skipped["task events of jobs not kept (no SUBMIT in the window)"] += 1
        return
    task = job_tasks.get(index)
    if task is None:
        task = job_tasks[index] = _GoogleTask()
    task.priority = max(task.priority, priority)
    if cpu is not None:
        task.cpu = cpu
    if memory is not None:
        task.memory = memory
    in_window = timestamp not in (_BEFORE_WINDOW, _AFTER_WINDOW)
    if event_type == _SCHEDULE:
        task.scheduled = timestamp if in_window else None
    elif event_type == _FINISH:
        if task.scheduled is not None and in_window and timestamp >= task.scheduled:
            task.duration = timestamp - task.scheduled
        task.scheduled = None
    elif event_type in (_EVICT, _FAIL, _KILL, _LOST):
        task.scheduled = None


def _request(row: _Row, column: str) -> float | None:
    value = row.optional_number(column)
    if value is not None and value < 0:
        raise row.error(column, f"must be a normalised request >= 0, got {value}")
    return value


def _google_job(
    job_tasks: Mapping[int, _GoogleTask],
    machine_cpu: float,
    machine_memory_mb: int,
    skipped: Counter[str],
) -> _TraceJob | None:
    finished: list[tuple[int, _GoogleTask]] = []
    priority = 0
    for index, task in job_tasks.items():
        priority = max(priority, task.priority)
        if task.duration is None:
            skipped["tasks that never finished in the window"] += 1
        elif task.cpu is None or task.memory is None:
            skipped["finished tasks without a resource request"] += 1
        else:
            finished.append((index, task))
    if not finished:
        return None
    finished.sort(key=lambda item: item[0])
    cpu = max(task.cpu or 0.0 for _, task in finished)
    memory = max(task.memory or 0.0 for _, task in finished)
    durations = tuple((task.duration or 0) / _MICROSECONDS for _, task in finished)
    phase = _phase_document(
        "tasks", len(finished), _cpu(cpu * machine_cpu), _memory(memory * machine_memory_mb)
    )
    return _TraceJob(
        priority=priority,
        phases=(phase,),
        durations={"tasks": durations},
        time_scale=_MICROSECONDS,
    )


# ------------------------------------------------------------------------------ Alibaba 2018

ALIBABA_2018_BATCH_TASK_COLUMNS = (
    "task_name",
    "instance_num",
    "job_name",
    "task_type",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
)
_DAG_TASK = re.compile(r"[A-Za-z]+(\d+)((?:_\d+)*)")
_NOT_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9._-]")
ALIBABA_CLASS = "alibaba"


@dataclass(frozen=True)
class _AlibabaTask:
    name: str
    instances: int
    status: str
    start: int | None
    end: int | None
    plan_cpu: float | None
    plan_mem: float | None


def read_alibaba_2018(
    batch_task: Path | Sequence[Path], *, machine_memory_mb: int, limit: int | None = None
) -> TraceImport:
    """Jobs of Alibaba cluster-trace-v2018's ``batch_task`` table (CSV without header, ``.gz``
    read as gzip), with what was skipped.  Each task is a phase of ``instance_num`` tasks:

    - the DAG is in task names: ``M1``, ``R2_1``, ``J3_1_2`` (letters, the task's number, then
      ``_`` and the number of each task it waits for) keep their names and become ``after``
      lists; any other name (``task_LTg0...``, ``MergeTask``) is an independent phase, named
      after it with characters a phase name cannot hold replaced by ``_`` (made unique);
    - each instance's duration is the task's ``end_time - start_time`` (seconds): the table has
      one time span per task, not per instance;
    - a job's submit time is its earliest ``start_time``, shifted so that the first job kept is
      at 0; its class is ``alibaba``, its priority 0;
    - ``plan_cpu`` / 100 cores (to a thousandth, at least 0.001) and ``plan_mem`` / 100 ×
      ``machine_memory_mb`` MiB (at least 1).

    A job is kept only if every one of its tasks is ``Terminated``, has valid times
    (``0 < start_time <= end_time``), a ``plan_cpu`` and ``plan_mem`` and at least one instance,
    and its dependencies name tasks of the job; ``limit`` keeps the first ``limit`` jobs by
    submit time.  A row that does not fit the published schema is a :class:`WorkloadError`."""
    _check_machine(machine_memory_mb, "machine_memory_mb")
    _check_limit(limit)
    rows = 0
    by_job: dict[str, list[_AlibabaTask]] = {}
    for path in _paths(batch_task):
        for line, values in _csv_rows(path, path.name):
            rows += 1
            if len(values) != len(ALIBABA_2018_BATCH_TASK_COLUMNS):
                raise WorkloadError(
                    f"{path.name} line {line}",
                    f"has {len(values)} fields; the schema has "
                    f"{len(ALIBABA_2018_BATCH_TASK_COLUMNS)} "
                    f"({', '.join(ALIBABA_2018_BATCH_TASK_COLUMNS)})",
                )
            row = _Row(f"{path.name} ", line, ALIBABA_2018_BATCH_TASK_COLUMNS, values)
            job_name = row.text("job_name")
            task_name = row.text("task_name")
            for column, text in (("job_name", job_name), ("task_name", task_name)):
                if not text:
                    raise row.error(column, "must not be empty")
            by_job.setdefault(job_name, []).append(
                _AlibabaTask(
                    name=task_name,
                    instances=row.integer("instance_num", empty=0),
                    status=row.text("status"),
                    start=row.optional_integer("start_time"),
                    end=row.optional_integer("end_time"),
                    plan_cpu=row.optional_number("plan_cpu"),
                    plan_mem=row.optional_number("plan_mem"),
                )
            )
    skipped: Counter[str] = Counter()
    candidates: list[tuple[int | float, str, str, _TraceJob]] = []
    for job_name, job_tasks in by_job.items():
        problem = _alibaba_problem(job_tasks)
        parts = _alibaba_job(job_tasks, machine_memory_mb) if problem is None else None
        if parts is None:
            skipped[
                problem or "jobs whose task names make no DAG (a missing or repeated number)"
            ] += 1
            continue
        submit = min(task.start or 0 for task in job_tasks)
        candidates.append((submit, job_name, ALIBABA_CLASS, parts))
    refusals: list[str] = []
    jobs = _build_jobs(candidates, limit=limit, skipped=skipped, refusals=refusals)
    return _finish_import(jobs, rows, skipped, refusals, "alibaba 2018 trace")


def import_alibaba_2018(
    batch_task: Path | Sequence[Path], *, machine_memory_mb: int, limit: int | None = None
) -> list[SimJob]:
    """:func:`read_alibaba_2018`'s jobs (its summary of what was skipped is logged)."""
    return read_alibaba_2018(batch_task, machine_memory_mb=machine_memory_mb, limit=limit).jobs


def _alibaba_problem(job_tasks: Sequence[_AlibabaTask]) -> str | None:
    """Why the job cannot be simulated (the skip counter's key), or None."""
    names: set[str] = set()
    for task in job_tasks:
        if task.status != "Terminated":
            return "jobs with a task not Terminated"
        if task.start is None or task.end is None or not 0 < task.start <= task.end:
            return "jobs with a task without valid times"
        if task.plan_cpu is None or task.plan_mem is None or task.plan_cpu < 0 or task.plan_mem < 0:
            return "jobs with a task without a resource request"
        if task.instances < 1:
            return "jobs with a task of no instances"
        if task.name in names:
            return "jobs with a task listed twice"
        names.add(task.name)
    return None


def _alibaba_job(job_tasks: Sequence[_AlibabaTask], machine_memory_mb: int) -> _TraceJob | None:
    """The job's phases, or None when a dependency names a task number the job lacks (or two
    tasks share a number)."""
    by_number: dict[int, str] = {}
    for task in job_tasks:
        match = _DAG_TASK.fullmatch(task.name)
        if match is not None:
            number = int(match.group(1))
            if number in by_number:
                return None
            by_number[number] = task.name
    used = set(by_number.values())
    phases: list[dict[str, object]] = []
    durations: dict[str, tuple[float, ...]] = {}
    for task in job_tasks:
        match = _DAG_TASK.fullmatch(task.name)
        if match is not None:
            name = task.name
            after: list[str] = []
            for dependency in match.group(2).split("_")[1:]:
                upstream = by_number.get(int(dependency))
                if upstream is None:
                    return None
                after.append(upstream)
        else:
            name = _independent_phase_name(task.name, used)
            used.add(name)
            after = []
        assert task.start is not None and task.end is not None  # by _alibaba_problem
        assert task.plan_cpu is not None and task.plan_mem is not None
        phases.append(
            _phase_document(
                name,
                task.instances,
                _cpu(task.plan_cpu / 100),
                _memory(task.plan_mem / 100 * machine_memory_mb),
                after,
            )
        )
        durations[name] = (float(task.end - task.start),) * task.instances
    return _TraceJob(priority=0, phases=tuple(phases), durations=durations, time_scale=1)


def _independent_phase_name(task_name: str, used: set[str]) -> str:
    """A phase name for a task name outside the DAG notation: the name with characters a phase
    name cannot hold replaced by ``_``, cut to fit, made unique with ``-2``, ``-3``, ..."""
    base = _NOT_NAME_CHARACTER.sub("_", task_name)
    if not base[:1].isalnum() or not base[:1].isascii():
        base = "t" + base
    base = base[: MAX_NAME_LENGTH - 8]
    name, suffix = base, 1
    while name in used:
        suffix += 1
        name = f"{base}-{suffix}"
    return name
