"""``sluice model filter SNAPSHOT.json``: which machines get speculative tasks, and why not.

Reads a cluster snapshot (per-machine metric windows, ratings, connectivity; format in
docs/model/filter.md, example in examples/model/filter_snapshot.json), runs ROSE load
approximation (Alg. 1-2) and multi-phase machine filtering (Alg. 4), and prints the ranked
candidates and, for every other machine, the phase that left it out. Every malformed field is
reported as one line naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plumbing.errors import UserError
from policies.oversubscription.candidates import approximate_machines
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.oversubscription.machine_filter import FilterPhase, FilterResult, filter_machines
from policies.oversubscription.snapshot import MachineLoads, MachineWindows
from sluice.model.fields import (
    as_flag,
    as_list,
    as_number,
    as_object,
    as_text,
    check_known_keys,
    read_json_file,
)

MODES = [mode.value for mode in OversubscriptionMode]
_TOP_FIELDS = {"mode", "config", "machines"}
_MACHINE_FIELDS = {"name", "connected", "rating", "capacity", "load", "queue", "cpi", "mpki"}
_SCALAR_KNOBS = {
    "lla_segments": int,
    "tukey_fence": float,
    "counter_blacklist_size": int,
    "rating_blacklist_size": int,
    "candidate_limit": int,
    "prefilter_factor": float,
}
_VECTOR_KNOBS = ("load_weights", "load_thresholds", "queue_weights", "queue_thresholds")

_PHASE_TEXT = {
    FilterPhase.DISCONNECTED: "B2 disconnected or no recent samples",
    FilterPhase.HIGH_CPI: "B0 among the highest CPI",
    FilterPhase.HIGH_MPKI: "B0 among the highest MPKI",
    FilterPhase.LOW_RATING: "B1 among the lowest ratings",
    FilterPhase.OVERLOADED: "B3 overloaded",
    FilterPhase.NOT_LEAST_LOADED: "not among the least loaded",
    FilterPhase.NOT_SHORTEST_QUEUE: "not among the shortest queues",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``filter`` subcommand."""
    parser = subparsers.add_parser(
        "filter",
        help="speculative-task candidates and why every other machine was left out (ROSE)",
        description="Load approximation (Alg. 1-2) and multi-phase machine filtering (Alg. 4) "
        "of ROSE on a cluster snapshot. Format: docs/model/filter.md.",
    )
    parser.add_argument("snapshot", type=Path, metavar="SNAPSHOT.json", help="cluster snapshot")
    parser.add_argument("--mode", choices=MODES, help="override the snapshot's UP/RP mode")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run_filter)


@dataclasses.dataclass(frozen=True)
class FilterSnapshot:
    """A parsed snapshot: machine names, their windows and ratings, and the knobs."""

    names: tuple[str, ...]
    windows: MachineWindows
    ratings: np.ndarray[Any, np.dtype[np.float64]]
    config: OversubscriptionConfig


def load_snapshot(path: Path, mode: str | None = None) -> FilterSnapshot:
    """Parse and validate a snapshot file; raise UserError naming the first bad field."""
    document = read_json_file(path)
    return parse_snapshot(document, mode)


def parse_snapshot(document: Any, mode: str | None = None) -> FilterSnapshot:
    """Validate a decoded snapshot (see docs/model/filter.md)."""
    doc = as_object(document, "snapshot")
    check_known_keys(doc, "snapshot", _TOP_FIELDS)
    chosen_mode = mode if mode is not None else doc.get("mode", "up")
    if chosen_mode not in MODES:
        raise UserError(f"mode: expected one of {', '.join(MODES)}, got {json.dumps(chosen_mode)}")
    config = _config(doc.get("config", {}), OversubscriptionMode(chosen_mode))
    machines = as_list(doc.get("machines"), "machines")
    if not machines:
        raise UserError("machines: need at least one machine")
    return _machines(machines, config)


def _config(raw: Any, mode: OversubscriptionMode) -> OversubscriptionConfig:
    knobs = as_object(raw, "config")
    check_known_keys(knobs, "config", set(_SCALAR_KNOBS) | set(_VECTOR_KNOBS))
    defaults = OversubscriptionConfig(mode=mode)
    fields: dict[str, Any] = {"mode": mode}
    for name, kind in _SCALAR_KNOBS.items():
        if name in knobs:
            value = knobs[name]
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise UserError(f"config.{name}: expected an integer, got {json.dumps(value)}")
            fields[name] = as_number(value, f"config.{name}") if kind is float else value
    for name in _VECTOR_KNOBS:
        if name in knobs:
            metrics = defaults.load_metrics if name.startswith("load") else defaults.queue_metrics
            overrides = as_object(knobs[name], f"config.{name}")
            check_known_keys(overrides, f"config.{name}", set(metrics))
            values = dict(zip(metrics, getattr(defaults, name), strict=True))
            for metric, value in overrides.items():
                values[metric] = as_number(value, f"config.{name}.{metric}")
            fields[name] = tuple(values[m] for m in metrics)
    try:
        return OversubscriptionConfig(**fields)
    except ValueError as exc:  # the config names the field; keep it one line
        raise UserError(f"config.{exc}") from None


def _machines(raw_machines: Sequence[Any], config: OversubscriptionConfig) -> FilterSnapshot:
    names: list[str] = []
    ratings: list[float] = []
    connected: list[bool] = []
    capacities: list[list[float]] = []
    loads: list[list[list[float]]] = []
    queues: list[list[list[float]]] = []
    counters: dict[str, list[list[float] | None]] = {"cpi": [], "mpki": []}
    for i, raw in enumerate(raw_machines):
        field = f"machines[{i}]"
        machine = as_object(raw, field)
        check_known_keys(machine, field, _MACHINE_FIELDS)
        name = as_text(machine.get("name"), f"{field}.name")
        if name in names:
            raise UserError(f"{field}.name: duplicate machine {name!r}")
        names.append(name)
        connected.append(as_flag(machine.get("connected", True), f"{field}.connected"))
        ratings.append(as_number(machine.get("rating", 0), f"{field}.rating", minimum=-math.inf))
        capacity = as_object(machine.get("capacity", {}), f"{field}.capacity")
        check_known_keys(capacity, f"{field}.capacity", set(config.load_metrics))
        capacities.append(
            [
                _positive(capacity.get(metric, 1), f"{field}.capacity.{metric}")
                for metric in config.load_metrics
            ]
        )
        loads.append(_windows(machine.get("load"), f"{field}.load", config.load_metrics))
        queues.append(_windows(machine.get("queue"), f"{field}.queue", config.queue_metrics))
        for counter in ("cpi", "mpki"):
            value = machine.get(counter)
            counters[counter].append(
                None if value is None else _samples(value, f"{field}.{counter}")
            )
    return FilterSnapshot(
        names=tuple(names),
        windows=MachineWindows(
            load=_pad(loads),
            queue=_pad(queues),
            connected=np.array(connected),
            load_capacity=np.array(capacities),
            cpi=_pad_counters(counters["cpi"]),
            mpki=_pad_counters(counters["mpki"]),
        ),
        ratings=np.array(ratings),
        config=config,
    )


def _windows(value: Any, field: str, metrics: Sequence[str]) -> list[list[float]]:
    windows = as_object(value, field)
    check_known_keys(windows, field, set(metrics))
    for metric in metrics:
        if metric not in windows:
            raise UserError(f"{field}.{metric}: missing (every metric needs a window)")
    return [_samples(windows[metric], f"{field}.{metric}") for metric in metrics]


def _samples(value: Any, field: str) -> list[float]:
    items = as_list(value, field)
    if not items:
        raise UserError(f"{field}: expected at least one sample")
    return [
        math.nan if item is None else as_number(item, f"{field}[{j}]", minimum=-math.inf)
        for j, item in enumerate(items)
    ]


def _pad(per_machine: list[list[list[float]]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Ragged windows to one array; NaN (missing) pads the end, which Alg. 1 drops."""
    longest = max(len(window) for machine in per_machine for window in machine)
    array = np.full((len(per_machine), len(per_machine[0]), longest), np.nan)
    for i, machine in enumerate(per_machine):
        for j, window in enumerate(machine):
            array[i, j, : len(window)] = window
    return array


def _pad_counters(
    per_machine: list[list[float] | None],
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    present = [window for window in per_machine if window is not None]
    if not present:
        return None
    array = np.full((len(per_machine), max(len(w) for w in present)), np.nan)
    for i, window in enumerate(per_machine):
        if window is not None:
            array[i, : len(window)] = window
    return array


def _report(snapshot: FilterSnapshot, loads: MachineLoads, result: FilterResult) -> dict[str, Any]:
    config = snapshot.config
    dimensions = (*config.load_metrics, *config.queue_metrics)
    readings = np.concatenate([loads.load, loads.queue], axis=1)
    limits = np.concatenate(
        [
            loads.load_capacity * np.asarray(config.load_thresholds),
            np.broadcast_to(np.asarray(config.queue_thresholds), loads.queue.shape),
        ],
        axis=1,
    )

    def entry(machine: int) -> dict[str, Any]:
        return {
            "name": snapshot.names[machine],
            "load_index": _finite_or_none(result.load_index[machine]),
            "queue_index": _finite_or_none(result.queue_index[machine]),
        }

    candidates = [
        {"rank": rank, **entry(machine)}
        for rank, machine in enumerate(result.candidates.tolist(), start=1)
    ]
    left_out = []
    for machine in range(len(snapshot.names)):
        phase = FilterPhase(int(result.phase[machine]))
        if phase is FilterPhase.CANDIDATE:
            continue
        item = {**entry(machine), "phase": phase.name.lower(), "reason": _PHASE_TEXT[phase]}
        if phase is FilterPhase.OVERLOADED:
            dimension = int(result.overloaded_dimension[machine])
            item["dimension"] = dimensions[dimension]
            item["value"] = float(readings[machine, dimension])
            item["limit"] = float(limits[machine, dimension])
        elif phase is FilterPhase.HIGH_CPI:
            item["value"] = float(loads.cpi[machine])
        elif phase is FilterPhase.HIGH_MPKI:
            item["value"] = float(loads.mpki[machine])
        elif phase is FilterPhase.LOW_RATING:
            item["rating"] = float(snapshot.ratings[machine])
        left_out.append(item)
    return {
        "mode": config.mode.value,
        "machines": len(snapshot.names),
        "candidate_limit": config.candidate_limit,
        "prefilter_size": config.prefilter_size,
        "candidates": candidates,
        "left_out": left_out,
    }


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def run_filter(args: argparse.Namespace) -> int:
    """Print the candidates for ``args.snapshot`` and why the others were left out; 0 on
    success."""
    snapshot = load_snapshot(args.snapshot, args.mode)
    try:
        loads = approximate_machines(snapshot.windows, snapshot.config)
        result = filter_machines(loads, snapshot.ratings, snapshot.config)
    except ValueError as exc:  # the policy names the field; keep it one line
        raise UserError(str(exc)) from None
    report = _report(snapshot, loads, result)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"mode: {report['mode']}; {report['machines']} machines; "
        f"L_max {report['candidate_limit']}, pre-filter keeps {report['prefilter_size']}"
    )
    print(f"candidates ({len(report['candidates'])}, best first):")
    for item in report["candidates"]:
        print(
            f"  {item['rank']:>3}. {item['name']}  queue index {item['queue_index']:.3f}  "
            f"load index {item['load_index']:.3f}"
        )
    if report["left_out"]:
        print("left out:")
    for item in report["left_out"]:
        detail = ""
        if "dimension" in item:
            detail = f": {item['dimension']} {item['value']:.3g} > {item['limit']:.3g}"
        elif "value" in item:
            detail = f": window average {item['value']:.3g}"
        elif "rating" in item:
            detail = f": rating {item['rating']:g}"
        elif item["phase"] == "not_least_loaded":
            detail = f": load index {item['load_index']:.3f}"
        elif item["phase"] == "not_shortest_queue":
            detail = f": queue index {item['queue_index']:.3f}"
        print(f"  {item['name']}  {item['reason']}{detail}")
    return 0


def _positive(value: Any, field: str) -> float:
    number = as_number(value, field)
    if number <= 0:
        raise UserError(f"{field}: must be > 0, got {value}")
    return number
