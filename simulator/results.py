"""Results of a simulation run: per-job records, per-priority summaries, files and comparisons.

The formats are described in docs/simulator-results.md.  In short:

* `JobOutcome` is one job's record, `UtilisationSample` one point of cluster usage;
* `summarize` turns them into a `Summary` (one `GroupSummary` per priority, descending, then
  ``"all"``; plus time-weighted utilisation and the makespan);
* `write_results` writes ``jobs.csv``, ``jobs.json``, ``utilisation.csv``, ``summary.json``,
  ``summary.txt``, ``completion_cdf.png`` and ``utilisation.png``, byte-identical for identical
  input;
* `ComparisonRow`, `format_comparison` and `write_comparison` put several runs side by side.

Floats in files are written with ``repr`` (Python's shortest round-tripping form, so they read
back exactly); a missing value (``nan``) is ``nan`` in CSV and ``null`` in JSON.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import io
import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

__all__ = [
    "JOB_COLUMNS",
    "PERCENTILES",
    "STATES",
    "UTILISATION_COLUMNS",
    "ComparisonRow",
    "Distribution",
    "GroupSummary",
    "JobOutcome",
    "Summary",
    "UtilisationSample",
    "format_comparison",
    "format_summary",
    "load_outcomes",
    "load_samples",
    "percentile",
    "relative_change",
    "summarize",
    "summary_to_dict",
    "time_weighted_mean",
    "write_comparison",
    "write_results",
]

#: The states a job can end a run in.
STATES: tuple[str, ...] = ("succeeded", "failed", "killed", "unfinished")
#: The percentiles a `Distribution` carries, in percent.
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)

_NAN = math.nan


@dataclass(frozen=True)
class JobOutcome:
    """What happened to one job in a run.  Times are virtual seconds since the run began.

    ``start_time`` is when its first task started (or its job master ran), ``nan`` if never;
    ``finish_time`` is ``nan`` exactly when ``state == "unfinished"``.  ``preemptions`` counts the
    job's containers that were preempted (suspended, shrunk or killed); ``lost_work`` is the
    task-seconds of work lost to kills.  ``alone_time`` (> 0) is the job's completion time alone on
    an empty cluster, the denominator of its slowdown.
    """

    job_id: str
    name: str
    job_class: str
    priority: int
    submit_time: float
    start_time: float
    finish_time: float
    state: str
    tasks: int
    preemptions: int
    lost_work: float
    alone_time: float

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"job {self.job_id}: state {self.state!r} is not one of {STATES}")
        if (self.state == "unfinished") != math.isnan(self.finish_time):
            raise ValueError(
                f"job {self.job_id}: finish_time {self.finish_time!r} does not fit state "
                f"{self.state!r} (nan exactly when unfinished)"
            )
        if not self.alone_time > 0:
            raise ValueError(f"job {self.job_id}: alone_time must be > 0, got {self.alone_time!r}")

    @property
    def finished(self) -> bool:
        """Whether the job ended (succeeded, failed or was killed) before the run did."""
        return self.state != "unfinished"

    @property
    def completion_time(self) -> float:
        """``finish_time − submit_time`` in seconds; ``nan`` if unfinished."""
        return self.finish_time - self.submit_time

    @property
    def slowdown(self) -> float:
        """``completion_time / alone_time`` (1 = as fast as alone); ``nan`` if unfinished."""
        return self.completion_time / self.alone_time


@dataclass(frozen=True)
class UtilisationSample:
    """Cluster usage at ``time`` (virtual seconds); holds until the next sample's time."""

    time: float
    cpu_used: float
    cpu_capacity: float
    memory_used_mb: float
    memory_capacity_mb: float

    @property
    def cpu_fraction(self) -> float:
        """``cpu_used / cpu_capacity``; 0 when there is no capacity."""
        return self.cpu_used / self.cpu_capacity if self.cpu_capacity > 0 else 0.0

    @property
    def memory_fraction(self) -> float:
        """``memory_used_mb / memory_capacity_mb``; 0 when there is no capacity."""
        return self.memory_used_mb / self.memory_capacity_mb if self.memory_capacity_mb > 0 else 0.0


#: Columns of jobs.csv, in order: the `JobOutcome` fields then the two derived values.
JOB_COLUMNS: tuple[str, ...] = (
    *(f.name for f in fields(JobOutcome)),
    "completion_time",
    "slowdown",
)
#: Columns of utilisation.csv, in order.
UTILISATION_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(UtilisationSample))


@dataclass(frozen=True)
class Distribution:
    """Mean and percentiles of a set of values (``nan`` everywhere when the set is empty)."""

    count: int = 0
    mean: float = _NAN
    p50: float = _NAN
    p90: float = _NAN
    p95: float = _NAN
    p99: float = _NAN
    max: float = _NAN

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        """The distribution of ``values`` (``nan`` values are dropped)."""
        data = sorted(v for v in values if not math.isnan(v))
        if not data:
            return cls()
        return cls(
            count=len(data),
            mean=math.fsum(data) / len(data),
            p50=percentile(data, 50),
            p90=percentile(data, 90),
            p95=percentile(data, 95),
            p99=percentile(data, 99),
            max=data[-1],
        )


@dataclass(frozen=True)
class GroupSummary:
    """The summary of one priority (``priority`` set) or of all jobs (``priority is None``).

    ``completion_time`` (seconds) and ``slowdown`` cover the finished jobs only; ``jobs`` counts
    every job, ``finished`` those that succeeded, failed or were killed before the run ended.
    """

    priority: int | None
    jobs: int = 0
    finished: int = 0
    succeeded: int = 0
    failed: int = 0
    killed: int = 0
    unfinished: int = 0
    completion_time: Distribution = field(default_factory=Distribution)
    slowdown: Distribution = field(default_factory=Distribution)
    preemptions: int = 0
    lost_work: float = 0.0

    @property
    def label(self) -> str:
        """``"all"`` or the priority as text."""
        return "all" if self.priority is None else str(self.priority)


@dataclass(frozen=True)
class Summary:
    """A run's summary: one group per priority (descending), then ``"all"`` (always present).

    ``cpu_utilisation`` and ``memory_utilisation`` are time-weighted mean fractions (see
    `time_weighted_mean`); ``makespan`` is the latest finish minus the earliest submission, in
    seconds (``nan`` when no job finished).
    """

    groups: tuple[GroupSummary, ...]
    cpu_utilisation: float
    memory_utilisation: float
    makespan: float

    @property
    def priorities(self) -> tuple[int, ...]:
        """The priorities present, descending."""
        return tuple(g.priority for g in self.groups if g.priority is not None)

    def get(self, priority: int | None) -> GroupSummary | None:
        """The group of ``priority`` (``None`` for all jobs), or ``None`` if no job had it."""
        for group in self.groups:
            if group.priority == priority:
                return group
        return None

    def group(self, priority: int | None) -> GroupSummary:
        """The group of ``priority`` (``None`` for all jobs); ``KeyError`` if no job had it."""
        found = self.get(priority)
        if found is None:
            raise KeyError(priority)
        return found

    @property
    def overall(self) -> GroupSummary:
        """The ``"all"`` group."""
        return self.group(None)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ascending ``sorted_values`` by linear interpolation.

    This is numpy's default method ("linear", Hyndman–Fan type 7): with ``n`` values at 0-based
    ranks, the position is ``h = (n − 1)·q/100`` and the result is
    ``x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])``.  So p50 of ``[1, 2, 3, 4]`` is 2.5 and p0/p100
    are the minimum and maximum.  ``nan`` for no values.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q!r}")
    n = len(sorted_values)
    if n == 0:
        return _NAN
    position = (n - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, n - 1)
    fraction = position - low
    lower = sorted_values[low]
    if fraction == 0:
        return float(lower)
    return float(lower + fraction * (sorted_values[high] - lower))


def time_weighted_mean(times: Sequence[float], values: Sequence[float]) -> float:
    """The time-weighted mean of a step function.

    ``values[i]`` holds from ``times[i]`` until ``times[i + 1]`` (times ascending); the last
    sample marks the end of the run and gets no weight.  When the samples span no time (one
    sample, or all at the same time) the result is the last value; ``nan`` for no samples.
    """
    if len(times) != len(values):
        raise ValueError(f"{len(times)} times but {len(values)} values")
    if not times:
        return _NAN
    weighted: list[float] = []
    total = 0.0
    for i in range(len(times) - 1):
        duration = times[i + 1] - times[i]
        if duration < 0:
            raise ValueError(f"sample times go backwards at {times[i + 1]!r}")
        weighted.append(values[i] * duration)
        total += duration
    if total <= 0:
        return float(values[-1])
    return math.fsum(weighted) / total


def _group_summary(priority: int | None, outcomes: Sequence[JobOutcome]) -> GroupSummary:
    done = [o for o in outcomes if o.finished]
    return GroupSummary(
        priority=priority,
        jobs=len(outcomes),
        finished=len(done),
        succeeded=sum(o.state == "succeeded" for o in outcomes),
        failed=sum(o.state == "failed" for o in outcomes),
        killed=sum(o.state == "killed" for o in outcomes),
        unfinished=len(outcomes) - len(done),
        completion_time=Distribution.of(o.completion_time for o in done),
        slowdown=Distribution.of(o.slowdown for o in done),
        preemptions=sum(o.preemptions for o in outcomes),
        lost_work=math.fsum(o.lost_work for o in outcomes),
    )


def summarize(outcomes: Iterable[JobOutcome], samples: Iterable[UtilisationSample]) -> Summary:
    """Summarise a run.

    One `GroupSummary` per priority (descending) then one for all jobs.  Completion time and
    slowdown statistics cover finished jobs (succeeded, failed or killed) only; unfinished jobs
    are counted in ``jobs`` and ``unfinished``, and their preemptions and lost work are included.
    Means use ``math.fsum``; percentiles are `percentile`'s linear interpolation.

    Utilisation is the time-weighted mean of ``cpu_used/cpu_capacity`` (and of memory likewise)
    over the samples taken as a step function, each value holding until the next sample's time
    (`time_weighted_mean`; samples are sorted by time first, stably).  The makespan is the latest
    finish time minus the earliest submit time.  Empty input gives zero counts and ``nan``
    statistics, never an exception.
    """
    jobs = list(outcomes)
    ordered = sorted(samples, key=lambda s: s.time)
    by_priority: dict[int, list[JobOutcome]] = {}
    for outcome in jobs:
        by_priority.setdefault(outcome.priority, []).append(outcome)
    groups = [_group_summary(p, by_priority[p]) for p in sorted(by_priority, reverse=True)]
    groups.append(_group_summary(None, jobs))
    times = [s.time for s in ordered]
    finishes = [o.finish_time for o in jobs if o.finished]
    makespan = max(finishes) - min(o.submit_time for o in jobs) if finishes else _NAN
    return Summary(
        groups=tuple(groups),
        cpu_utilisation=time_weighted_mean(times, [s.cpu_fraction for s in ordered]),
        memory_utilisation=time_weighted_mean(times, [s.memory_fraction for s in ordered]),
        makespan=makespan,
    )


# --- serialisation -------------------------------------------------------------------------


def _json_value(value: object) -> object:
    """``value`` as plain JSON data: non-finite floats become ``None``, paths and other scalars
    keep a stable text form; anything else raises ``TypeError`` (its repr may not be stable)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, numbers.Integral):  # e.g. numpy integers
        return int(value)
    if isinstance(value, numbers.Real):  # e.g. numpy floats that are not float subclasses
        return _json_value(float(value))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):  # e.g. the dispatch mode: its value names it
        return _json_value(value.value)
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a study's row
        return {f.name: _json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_json_value(v) for v in value), key=repr)
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to JSON")


def _dump_json(data: object) -> str:
    return json.dumps(_json_value(data), sort_keys=True, indent=2, allow_nan=False) + "\n"


def to_json(data: object) -> str:
    """``data`` as JSON text (keys sorted, ``nan`` as ``null``): mappings, lists, tuples, sets,
    dataclasses (a study's rows), enums, paths and scalars; anything else raises TypeError."""
    return _dump_json(data)


def write_json(path: Path, data: object) -> Path:
    """Write :func:`to_json` of ``data`` to ``path``; return the path."""
    return _write_text(path, _dump_json(data))


def _csv_cell(value: object) -> str:
    if isinstance(value, float):
        return repr(value)  # 'nan' for missing values
    return str(value)


def _distribution_dict(d: Distribution) -> dict[str, object]:
    return {f.name: getattr(d, f.name) for f in fields(Distribution)}


def _group_dict(g: GroupSummary) -> dict[str, object]:
    return {
        "label": g.label,
        "priority": g.priority,
        "jobs": g.jobs,
        "finished": g.finished,
        "succeeded": g.succeeded,
        "failed": g.failed,
        "killed": g.killed,
        "unfinished": g.unfinished,
        "completion_time": _distribution_dict(g.completion_time),
        "slowdown": _distribution_dict(g.slowdown),
        "preemptions": g.preemptions,
        "lost_work": g.lost_work,
    }


def summary_to_dict(summary: Summary) -> dict[str, object]:
    """``summary`` as JSON-ready data (``nan`` becomes ``null`` when written)."""
    return {
        "groups": [_group_dict(g) for g in summary.groups],
        "cpu_utilisation": summary.cpu_utilisation,
        "memory_utilisation": summary.memory_utilisation,
        "makespan": summary.makespan,
    }


def _outcome_dict(o: JobOutcome) -> dict[str, object]:
    row: dict[str, object] = {f.name: getattr(o, f.name) for f in fields(JobOutcome)}
    row["completion_time"] = o.completion_time
    row["slowdown"] = o.slowdown
    return row


def _sorted_outcomes(outcomes: Iterable[JobOutcome]) -> list[JobOutcome]:
    return sorted(outcomes, key=lambda o: (o.submit_time, o.job_id))


def outcomes_to_dicts(outcomes: Iterable[JobOutcome]) -> list[dict[str, object]]:
    """Per-job records as ``jobs.json`` has them (sorted by submit time, then job id)."""
    return [_outcome_dict(o) for o in _sorted_outcomes(outcomes)]


def _jobs_csv(outcomes: Sequence[JobOutcome]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(JOB_COLUMNS)
    for o in outcomes:
        row = _outcome_dict(o)
        writer.writerow([_csv_cell(row[c]) for c in JOB_COLUMNS])
    return buffer.getvalue()


def _samples_csv(samples: Sequence[UtilisationSample]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(UTILISATION_COLUMNS)
    for s in samples:
        writer.writerow([_csv_cell(float(getattr(s, c))) for c in UTILISATION_COLUMNS])
    return buffer.getvalue()


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", newline="\n")
    return path


def _completion_series(outcomes: Sequence[JobOutcome]) -> dict[str, list[float]]:
    """Completion times (``nan`` for unfinished) per ``"priority P"``, descending, then all."""
    series: dict[str, list[float]] = {}
    for p in sorted({o.priority for o in outcomes}, reverse=True):
        series[f"priority {p}"] = [o.completion_time for o in outcomes if o.priority == p]
    series["all"] = [o.completion_time for o in outcomes]
    return series


def write_results(
    directory: Path,
    outcomes: Iterable[JobOutcome],
    samples: Iterable[UtilisationSample],
    summary: Summary,
    meta: Mapping[str, object],
) -> list[Path]:
    """Write a run's results into ``directory`` (created if needed) and return the paths written.

    ``jobs.csv`` and ``jobs.json`` hold one record per job (sorted by submit time, then job id),
    ``utilisation.csv`` the samples (sorted by time), ``summary.json`` ``{"meta": meta,
    "summary": ...}``, ``summary.txt`` `format_summary`'s table, ``completion_cdf.png`` one CDF per
    priority and ``utilisation.png`` cpu and memory utilisation over time.  ``meta`` (e.g. the
    seed and the configuration) must hold JSON-like data: mappings, lists, tuples, str, int,
    float, bool, None or paths.  Identical input gives byte-identical files.
    """
    from simulator import plots

    directory.mkdir(parents=True, exist_ok=True)
    jobs = _sorted_outcomes(outcomes)
    ordered = sorted(samples, key=lambda s: s.time)
    written = [
        _write_text(directory / "jobs.csv", _jobs_csv(jobs)),
        _write_text(directory / "jobs.json", _dump_json([_outcome_dict(o) for o in jobs])),
        _write_text(directory / "utilisation.csv", _samples_csv(ordered)),
        _write_text(
            directory / "summary.json",
            _dump_json({"meta": dict(meta), "summary": summary_to_dict(summary)}),
        ),
        _write_text(directory / "summary.txt", format_summary(summary)),
    ]
    cdf = directory / "completion_cdf.png"
    plots.plot_cdfs(_completion_series(jobs), cdf, title="Job completion time by priority")
    written.append(cdf)
    utilisation = directory / "utilisation.png"
    plots.plot_utilisation(
        [s.time for s in ordered],
        {
            f"cpu (mean {_percent(summary.cpu_utilisation)})": [s.cpu_fraction for s in ordered],
            f"memory (mean {_percent(summary.memory_utilisation)})": [
                s.memory_fraction for s in ordered
            ],
        },
        utilisation,
    )
    written.append(utilisation)
    return written


def _float_or_nan(value: object) -> float:
    return _NAN if value is None else float(str(value))


def load_outcomes(path: Path) -> tuple[JobOutcome, ...]:
    """Read the job records back from a ``jobs.json`` written by `write_results` (``path`` is the
    file or its directory)."""
    if path.is_dir():
        path = path / "jobs.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    outcomes = []
    for r in records:
        outcomes.append(
            JobOutcome(
                job_id=str(r["job_id"]),
                name=str(r["name"]),
                job_class=str(r["job_class"]),
                priority=int(r["priority"]),
                submit_time=_float_or_nan(r["submit_time"]),
                start_time=_float_or_nan(r["start_time"]),
                finish_time=_float_or_nan(r["finish_time"]),
                state=str(r["state"]),
                tasks=int(r["tasks"]),
                preemptions=int(r["preemptions"]),
                lost_work=_float_or_nan(r["lost_work"]),
                alone_time=_float_or_nan(r["alone_time"]),
            )
        )
    return tuple(outcomes)


def load_samples(path: Path) -> tuple[UtilisationSample, ...]:
    """Read the utilisation samples back from a ``utilisation.csv`` written by `write_results`
    (``path`` is the file or its directory)."""
    if path.is_dir():
        path = path / "utilisation.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        return tuple(
            UtilisationSample(**{c: float(row[c]) for c in UTILISATION_COLUMNS})
            for row in csv.DictReader(handle)
        )


# --- text tables -----------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:.1f}" if math.isfinite(value) else "-"


def _ratio(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "-"


def _percent(value: float) -> str:
    return f"{100.0 * value:.1f}%" if math.isfinite(value) else "-"


def _signed_percent(value: float) -> str:
    return f"{value:+.1f}%" if math.isfinite(value) else "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned table: first column left-aligned, the others right-aligned, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [
            r[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)),
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


_STAT_HEADER = (
    "jobs",
    "finished",
    "mean(s)",
    "p50(s)",
    "p95(s)",
    "p99(s)",
    "slowdown",
    "p95 slowdown",
    "preemptions",
    "lost work(task-s)",
)


def _stat_cells(g: GroupSummary) -> list[str]:
    c, s = g.completion_time, g.slowdown
    return [
        str(g.jobs),
        str(g.finished),
        _seconds(c.mean),
        _seconds(c.p50),
        _seconds(c.p95),
        _seconds(c.p99),
        _ratio(s.mean),
        _ratio(s.p95),
        str(g.preemptions),
        _seconds(g.lost_work),
    ]


def format_summary(summary: Summary) -> str:
    """A plain-text table of ``summary``: one row per priority (descending) and one for all jobs,
    with completion times in seconds over finished jobs (``-`` where there are none), mean and p95
    slowdown, preemptions and lost work; then one line of utilisation and makespan."""
    rows = [[g.label, *_stat_cells(g)] for g in summary.groups]
    table = _table(["priority", *_STAT_HEADER], rows)
    tail = (
        f"utilisation (time-weighted): cpu {_percent(summary.cpu_utilisation)}, "
        f"memory {_percent(summary.memory_utilisation)}; "
        f"makespan {_seconds(summary.makespan)} s\n"
    )
    return table + tail


# --- comparisons -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ComparisonRow:
    """One configuration's run in a comparison; ``outcomes`` (optional) feed the CDF panels."""

    configuration: str
    summary: Summary
    outcomes: tuple[JobOutcome, ...] = ()


def relative_change(value: float, base: float) -> float:
    """``(value − base) / base`` in percent; ``nan`` when either is ``nan`` or ``base`` is 0."""
    if not (math.isfinite(value) and math.isfinite(base)) or base == 0:
        return _NAN
    return 100.0 * (value - base) / base


def _group_or_empty(summary: Summary, priority: int | None) -> GroupSummary:
    found = summary.get(priority)
    return found if found is not None else GroupSummary(priority=priority)


def _comparison_priorities(rows: Sequence[ComparisonRow]) -> list[int]:
    return sorted({p for r in rows for p in r.summary.priorities}, reverse=True)


def format_comparison(rows: Sequence[ComparisonRow], priority: int | None = None) -> str:
    """One table with a row per configuration for jobs of ``priority`` (``None``: all jobs).

    Besides `format_summary`'s columns it shows the change of mean and p95 completion time
    relative to the first row, in percent (``-`` when undefined), and each run's utilisation and
    makespan.  A configuration with no job of that priority shows zeros and ``-``.
    """
    title = "all jobs" if priority is None else f"priority {priority}"
    if not rows:
        return f"{title}: no configurations\n"
    base = _group_or_empty(rows[0].summary, priority).completion_time
    table_rows = []
    for r in rows:
        g = _group_or_empty(r.summary, priority)
        c = g.completion_time
        table_rows.append(
            [
                r.configuration,
                *_stat_cells(g)[:6],
                _signed_percent(relative_change(c.mean, base.mean)),
                _signed_percent(relative_change(c.p95, base.p95)),
                *_stat_cells(g)[6:],
                _percent(r.summary.cpu_utilisation),
                _percent(r.summary.memory_utilisation),
                _seconds(r.summary.makespan),
            ]
        )
    header = [
        "configuration",
        *_STAT_HEADER[:6],
        "Δmean",
        "Δp95",
        *_STAT_HEADER[6:],
        "cpu",
        "memory",
        "makespan(s)",
    ]
    return f"{title} (Δ: change against {rows[0].configuration})\n" + _table(header, table_rows)


def write_comparison(
    directory: Path,
    rows: Sequence[ComparisonRow],
    meta: Mapping[str, object] | None = None,
) -> list[Path]:
    """Write ``comparison.txt`` (the all-jobs table then one per priority), ``comparison.json``
    (each configuration's summary, the relative changes and ``meta``) and ``comparison.png``
    (completion-time p50/p95/p99 per configuration as grouped bars, one panel per group, and CDFs
    beside them when the rows carry outcomes) into ``directory``; return the paths written."""
    from simulator import plots

    directory.mkdir(parents=True, exist_ok=True)
    priorities: list[int | None] = [None, *_comparison_priorities(rows)]
    text = "\n".join(format_comparison(rows, p) for p in priorities)

    changes: dict[str, object] = {}
    for p in priorities:
        label = "all" if p is None else str(p)
        base = _group_or_empty(rows[0].summary, p).completion_time if rows else Distribution()
        changes[label] = {
            r.configuration: {
                "mean_completion_time_percent": relative_change(
                    _group_or_empty(r.summary, p).completion_time.mean, base.mean
                ),
                "p95_completion_time_percent": relative_change(
                    _group_or_empty(r.summary, p).completion_time.p95, base.p95
                ),
            }
            for r in rows
        }
    data = {
        "meta": dict(meta or {}),
        "baseline": rows[0].configuration if rows else None,
        "configurations": [
            {"configuration": r.configuration, "summary": summary_to_dict(r.summary)} for r in rows
        ],
        "relative_change": changes,
    }
    written = [
        _write_text(directory / "comparison.txt", text),
        _write_text(directory / "comparison.json", _dump_json(data)),
    ]

    percentiles: dict[str, dict[str, list[float]]] = {}
    cdfs: dict[str, dict[str, list[float]]] = {}
    with_outcomes = any(r.outcomes for r in rows)
    for p in priorities:
        label = "all jobs" if p is None else f"priority {p}"
        percentiles[label] = {}
        cdfs[label] = {}
        for r in rows:
            c = _group_or_empty(r.summary, p).completion_time
            percentiles[label][r.configuration] = [c.p50, c.p95, c.p99]
            cdfs[label][r.configuration] = [
                o.completion_time for o in r.outcomes if p is None or o.priority == p
            ]
    png = directory / "comparison.png"
    plots.plot_comparison(percentiles if rows else {}, png, cdfs=cdfs if with_outcomes else None)
    written.append(png)
    return written
