"""``sluice model dias CONFIG.yaml``: mean response time per priority under DiAS.

Reads a workload (priorities, job shapes, arrival rates, accuracy bounds), builds each class's
job-time PH with the task-level (Eq. 1) or wave-level (Sec. 4.2) model of the DiAS paper, and
prints the predicted mean job and response time per priority — for the drop ratios given, or for
those the search picks within each priority's accuracy-loss bound. Format: docs/model/dias.md.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plumbing.errors import UserError
from plumbing.spec_text import load_yaml_document, read_spec_file
from policies.approximation.accuracy import PAPER_ACCURACY_CURVE, AccuracyCurve
from policies.approximation.dias_config import parse_accuracy_curve
from policies.approximation.drop_search import (
    DropSearchResult,
    SearchClass,
    drop_ratio_grid,
    search_drop_ratios,
)
from policies.approximation.job_time import (
    TaskLevelJob,
    WaveLevelJob,
    task_level_model,
    wave_level_model,
)
from policies.approximation.phase_type import PhaseType, erlang_with_mean, scaled
from policies.approximation.priority_queues import Discipline
from policies.scheduling.jobspec import SpecError

MAX_PHASES = 2_000
"""Largest job-time PH the command builds: dense matrices of this order still solve in ~0.1 s."""

MAX_COMBINATIONS = 2_000_000
"""Largest drop-ratio grid the search scores (a few seconds and ~100 MB)."""

_FILE = "the file"
"""How messages name the document as a whole (its fields are named by their path)."""

_TOP_FIELDS = {"slots", "model", "discipline", "accuracy_curve", "search", "priorities"}
_PRIORITY_FIELDS = {
    "name",
    "arrival_rate",
    "weight",
    "max_error",
    "drop_ratio",
    "reduce_drop_ratio",
    "speedup",
    "accuracy_curve",
    "map_tasks",
    "reduce_tasks",
    "setup",
    "shuffle",
    "map_task",
    "reduce_task",
    "map_waves",
    "reduce_waves",
}
_STAGE_FIELDS = {"mean", "phases"}
_MODEL_FIELDS = {
    "task": ("setup", "map_task", "shuffle", "reduce_task"),
    "wave": ("setup", "map_waves", "shuffle", "reduce_waves"),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``dias`` subcommand."""
    parser = subparsers.add_parser(
        "dias",
        help="mean response time per priority for given or searched drop ratios (DiAS)",
        description="Predict the mean job and response time of each priority class under "
        "differential approximation (non-preemptive priority buffers, per-priority task "
        "dropping), and search the drop ratios that minimise the weighted mean response time "
        "within each priority's accuracy-loss bound. Format: docs/model/dias.md.",
    )
    parser.add_argument("config", type=Path, metavar="CONFIG.yaml", help="workload description")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run_dias)


@dataclass(frozen=True)
class PriorityConfig:
    """One priority class as configured; ``drop_ratio`` is ``None`` when it is to be searched."""

    name: str
    arrival_rate: float
    weight: float
    max_error: float
    drop_ratio: float | None
    reduce_drop_ratio: float
    speedup: float
    accuracy: AccuracyCurve
    job: TaskLevelJob | WaveLevelJob


@dataclass(frozen=True)
class DiasConfig:
    """The whole file; ``priorities`` are listed highest priority first, as in the file."""

    slots: int
    model: str
    discipline: Discipline
    search_step: float
    priorities: tuple[PriorityConfig, ...]


def run_dias(args: argparse.Namespace) -> int:
    """Print the prediction for ``args.config``; 0 on success."""
    config = load_config(args.config)
    result = evaluate(config)
    report = build_report(config, result)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_report(report))
    return 0


def load_config(path: Path) -> DiasConfig:
    """Read and validate a DiAS model file; bad input raises ``UserError`` naming the field.

    The file is read by the loader job specs use (``plumbing.spec_text``): the same limits, UTF-8
    and duplicate-key checks, and one-line YAML errors with their line."""
    try:
        document = load_yaml_document(read_spec_file(path, field=_FILE), field=_FILE)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc
    except SpecError as exc:
        raise UserError(f"{path}: {exc}") from None
    return parse_config(document)


def parse_config(document: object) -> DiasConfig:
    """Validate an already-parsed document (see docs/model/dias.md)."""
    top = _mapping(document, "", _TOP_FIELDS)
    slots = _integer(top.get("slots"), "slots", minimum=1)
    model = _choice(top.get("model", "task"), "model", ("task", "wave"))
    discipline_name = _choice(
        top.get("discipline", "non_preemptive"),
        "discipline",
        tuple(d.value for d in Discipline),
    )
    curve = (
        _curve(top["accuracy_curve"], "accuracy_curve")
        if "accuracy_curve" in top
        else PAPER_ACCURACY_CURVE
    )
    search = _mapping(top.get("search", {}), "search", {"step"})
    step = _number(search.get("step", 0.05), "search.step", low=0.0, high=1.0, low_open=True)
    raw_priorities = top.get("priorities")
    if not isinstance(raw_priorities, list) or not raw_priorities:
        raise UserError("priorities: must be a non-empty list, highest priority first")
    priorities = tuple(
        _priority(raw, f"priorities[{index}]", slots, model, curve)
        for index, raw in enumerate(raw_priorities)
    )
    names = [p.name for p in priorities]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise UserError(f"priorities[{index}].name: duplicate name {name!r}")
    return DiasConfig(slots, model, Discipline(discipline_name), step, priorities)


def evaluate(config: DiasConfig) -> DropSearchResult:
    """Predict (fixed ratios) or search (missing ratios); results indexed by priority ``k``."""
    # The policies index priority k with higher k = higher priority; the file lists highest first.
    by_level = config.priorities[::-1]
    grid = drop_ratio_grid(config.search_step)
    classes = []
    for level, priority in enumerate(by_level):
        path = f"priorities[{len(by_level) - 1 - level}]"
        if priority.drop_ratio is None:
            if priority.accuracy.error_at(0.0) > priority.max_error:
                raise UserError(f"{path}.max_error: even dropping nothing exceeds it")
            candidates, bound = grid, priority.max_error
        else:
            candidates, bound = (priority.drop_ratio,), math.inf
        classes.append(
            SearchClass(
                priority.arrival_rate, priority.weight, priority.accuracy, bound, candidates
            )
        )

    def job_time(level: int, theta: float) -> PhaseType:
        priority = by_level[level]
        if isinstance(priority.job, TaskLevelJob):
            ph = task_level_model(priority.job, theta, priority.reduce_drop_ratio)
        else:
            ph = wave_level_model(priority.job, theta, priority.reduce_drop_ratio)
        return scaled(ph, priority.speedup) if priority.speedup != 1.0 else ph

    _check_size(config, by_level, classes)
    try:
        return search_drop_ratios(classes, job_time, config.discipline, MAX_COMBINATIONS)
    except ValueError as exc:
        raise UserError(f"search.step: {exc}") from None


def build_report(config: DiasConfig, result: DropSearchResult) -> dict[str, Any]:
    """The JSON-ready report; infinite times (unstable classes) become ``null``."""
    levels = len(config.priorities)
    rows = []
    total_load = 0.0
    for index, priority in enumerate(config.priorities):
        level = levels - 1 - index
        total_load += priority.arrival_rate * result.mean_job_times[level]
        rows.append(
            {
                "name": priority.name,
                "drop_ratio": result.drop_ratios[level],
                "searched": priority.drop_ratio is None,
                "reduce_drop_ratio": priority.reduce_drop_ratio,
                "error": _finite_or_none(result.errors[level]),
                "mean_job_time": result.mean_job_times[level],
                "mean_response_time": _finite_or_none(result.response_times[level]),
            }
        )
    return {
        "model": config.model,
        "discipline": config.discipline.value,
        "slots": config.slots,
        "utilisation": total_load,
        "combinations": result.combinations,
        "weighted_mean_response_time": _finite_or_none(result.objective),
        "priorities": rows,
    }


def render_report(report: dict[str, Any]) -> str:
    """Human-readable table of :func:`build_report`."""
    searched = any(row["searched"] for row in report["priorities"])
    how = f"searched over {report['combinations']} combinations" if searched else "as given"
    lines = [
        f"DiAS {report['model']}-level model, {report['discipline'].replace('_', '-')} "
        f"priority, {report['slots']} slots; drop ratios {how}",
        f"{'priority':<16}{'drop':>7}{'error':>9}{'job time':>12}{'response':>12}",
    ]
    for row in report["priorities"]:
        error = "unknown" if row["error"] is None else f"{row['error']:.1%}"
        response = (
            "unstable" if row["mean_response_time"] is None else _seconds(row["mean_response_time"])
        )
        mark = "*" if row["searched"] else " "
        lines.append(
            f"{row['name']:<16}{row['drop_ratio']:>6.2f}{mark}{error:>9}"
            f"{_seconds(row['mean_job_time']):>12}{response:>12}"
        )
    objective = report["weighted_mean_response_time"]
    lines.append(
        f"utilisation {report['utilisation']:.3f}; weighted mean response time "
        + ("unbounded (unstable)" if objective is None else _seconds(objective))
    )
    if searched:
        lines.append("* searched drop ratio")
    return "\n".join(lines)


# ---- parsing helpers: each raises UserError("path: problem") ----


def _priority(
    raw: object, path: str, slots: int, model: str, default_curve: AccuracyCurve
) -> PriorityConfig:
    fields = _mapping(raw, path, _PRIORITY_FIELDS)
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{path}.name: must be a non-empty string")
    needed = _MODEL_FIELDS[model]
    other = _MODEL_FIELDS["wave" if model == "task" else "task"]
    for key in ("map_tasks", "reduce_tasks", *needed):
        if key not in fields:
            raise UserError(f"{path}.{key}: required for the {model}-level model")
    for key in set(other) - set(needed):
        if key in fields:
            raise UserError(f"{path}.{key}: not used by the {model}-level model")
    drop = fields.get("drop_ratio")
    arrival_rate = _number(fields.get("arrival_rate"), f"{path}.arrival_rate", low=0.0)
    map_pmf = _task_pmf(fields["map_tasks"], f"{path}.map_tasks")
    reduce_pmf = _task_pmf(fields["reduce_tasks"], f"{path}.reduce_tasks")
    setup = _stage(fields["setup"], f"{path}.setup", exponential_only=model == "task")
    shuffle = _stage(fields["shuffle"], f"{path}.shuffle", exponential_only=model == "task")
    job: TaskLevelJob | WaveLevelJob
    if model == "task":
        job = TaskLevelJob(
            slots=slots,
            map_tasks_pmf=map_pmf,
            reduce_tasks_pmf=reduce_pmf,
            setup_rate=1.0 / setup.mean_time,
            map_rate=1.0 / _positive(fields["map_task"], f"{path}.map_task"),
            shuffle_rate=1.0 / shuffle.mean_time,
            reduce_rate=1.0 / _positive(fields["reduce_task"], f"{path}.reduce_task"),
        )
    else:
        job = WaveLevelJob(
            slots=slots,
            map_tasks_pmf=map_pmf,
            reduce_tasks_pmf=reduce_pmf,
            setup=setup.ph,
            shuffle=shuffle.ph,
            map_waves=_waves(fields["map_waves"], f"{path}.map_waves"),
            reduce_waves=_waves(fields["reduce_waves"], f"{path}.reduce_waves"),
        )
    return PriorityConfig(
        name=name.strip(),
        arrival_rate=arrival_rate,
        # By default each class weighs by its arrival rate: the objective is then the mean
        # response time over all jobs.
        weight=_number(fields.get("weight", arrival_rate), f"{path}.weight", low=0.0),
        max_error=_number(fields.get("max_error", 0.0), f"{path}.max_error", low=0.0),
        drop_ratio=None if drop is None else _number(drop, f"{path}.drop_ratio", low=0.0, high=1.0),
        reduce_drop_ratio=_number(
            fields.get("reduce_drop_ratio", 0.0), f"{path}.reduce_drop_ratio", low=0.0, high=1.0
        ),
        speedup=_positive(fields.get("speedup", 1.0), f"{path}.speedup"),
        accuracy=_curve(fields["accuracy_curve"], f"{path}.accuracy_curve")
        if "accuracy_curve" in fields
        else default_curve,
        job=job,
    )


@dataclass(frozen=True)
class _Stage:
    mean_time: float
    ph: PhaseType


def _stage(raw: object, path: str, exponential_only: bool = False) -> _Stage:
    if isinstance(raw, dict):
        fields = _mapping(raw, path, _STAGE_FIELDS)
        mean_time = _positive(fields.get("mean"), f"{path}.mean")
        phases = _integer(fields.get("phases", 1), f"{path}.phases", minimum=1, maximum=MAX_PHASES)
    else:
        mean_time, phases = _positive(raw, path), 1
    if exponential_only and phases != 1:
        raise UserError(f"{path}.phases: the task-level model (Eq. 1) uses exponential stages")
    return _Stage(mean_time, erlang_with_mean(mean_time, phases))


def _waves(raw: object, path: str) -> tuple[PhaseType, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise UserError(f"{path}: must list at least one wave")
    return tuple(_stage(item, f"{path}[{i}]").ph for i, item in enumerate(items))


def _task_pmf(raw: object, path: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    """An int (always that many), ``{uniform: [low, high]}`` or ``{count: probability}``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        count = _integer(raw, path, minimum=1, maximum=MAX_PHASES)
        pmf = np.zeros(count)
        pmf[-1] = 1.0
        return pmf
    if isinstance(raw, dict) and set(raw) == {"uniform"}:
        bounds = raw["uniform"]
        if not (isinstance(bounds, list) and len(bounds) == 2):
            raise UserError(f"{path}.uniform: must be [low, high]")
        low = _integer(bounds[0], f"{path}.uniform[0]", minimum=1, maximum=MAX_PHASES)
        high = _integer(bounds[1], f"{path}.uniform[1]", minimum=low, maximum=MAX_PHASES)
        pmf = np.zeros(high)
        pmf[low - 1 :] = 1.0 / (high - low + 1)
        return pmf
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: must be a task count, {{uniform: [low, high]}} or {{count: p}}")
    counts = {}
    for key, value in raw.items():
        count = _integer(key, f"{path}.{key}", minimum=1, maximum=MAX_PHASES)
        counts[count] = _number(value, f"{path}.{key}", low=0.0, high=1.0)
    total = sum(counts.values())
    if abs(total - 1.0) > 1e-6:
        raise UserError(f"{path}: probabilities must sum to 1, got {total:.6g}")
    pmf = np.zeros(max(counts))
    for count, probability in counts.items():
        pmf[count - 1] = probability / total
    return pmf


def _curve(raw: object, path: str) -> AccuracyCurve:
    """``{drop ratio: relative error}``, e.g. ``{0.1: 0.085, 0.2: 0.15, 0.4: 0.32}``."""
    try:
        return parse_accuracy_curve(raw, path)
    except SpecError as error:
        raise UserError(str(error)) from None


def _check_size(
    config: DiasConfig, by_level: tuple[PriorityConfig, ...], classes: list[SearchClass]
) -> None:
    for level, priority in enumerate(by_level):
        path = f"priorities[{len(by_level) - 1 - level}]"
        job = priority.job
        if isinstance(job, TaskLevelJob):
            phases = len(job.map_tasks_pmf) + len(job.reduce_tasks_pmf) + 2
        else:
            waves = [
                math.ceil(len(job.map_tasks_pmf) / job.slots),
                math.ceil(len(job.reduce_tasks_pmf) / job.slots),
            ]
            largest = max(w.order for w in (*job.map_waves, *job.reduce_waves))
            phases = job.setup.order + job.shuffle.order + sum(waves) * largest
        if phases > MAX_PHASES:
            raise UserError(
                f"{path}: the job-time model would need {phases} phases, more than {MAX_PHASES}"
                + ("; try model: wave" if config.model == "task" else "")
            )
    combinations = math.prod(len(c.candidates) for c in classes)
    if combinations > MAX_COMBINATIONS:
        raise UserError(
            f"search.step: {combinations} drop-ratio combinations exceed {MAX_COMBINATIONS}; "
            "use a coarser step or fix some drop ratios"
        )


def _mapping(raw: object, path: str, allowed: set[str]) -> dict[str, Any]:
    where = path or _FILE
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a mapping")
    for key in raw:
        if key not in allowed:
            prefix = f"{path}." if path else ""
            raise UserError(f"{prefix}{key}: unknown field")
    return raw


def _number(
    raw: object,
    path: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    if raw is None:
        raise UserError(f"{path}: required")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise UserError(f"{path}: must be a number")
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{path}: must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise UserError(f"{path}: must be finite")
    if low is not None and (value < low or (low_open and value == low)):
        raise UserError(f"{path}: must be {'>' if low_open else '>='} {low:g}, got {value:g}")
    if high is not None and value > high:
        raise UserError(f"{path}: must be <= {high:g}, got {value:g}")
    return value


def _positive(raw: object, path: str) -> float:
    return _number(raw, path, low=0.0, low_open=True)


def _integer(raw: object, path: str, minimum: int, maximum: int | None = None) -> int:
    if raw is None:
        raise UserError(f"{path}: required")
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise UserError(f"{path}: must be an integer")
    if raw < minimum:
        raise UserError(f"{path}: must be >= {minimum}, got {raw}")
    if maximum is not None and raw > maximum:
        raise UserError(f"{path}: must be <= {maximum}, got {raw}")
    return raw


def _choice(raw: object, path: str, options: tuple[str, ...]) -> str:
    if raw not in options:
        raise UserError(f"{path}: must be one of {', '.join(options)}, got {raw!r}")
    return str(raw)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _seconds(value: float) -> str:
    return f"{value:.4g} s"
