"""``sluice model preempt SNAPSHOT.json``: what the preemptive scheduler would reclaim.

Reads a cluster snapshot (resources, capacity, queues, containers; format in
docs/model/preempt.md, example in examples/model/preempt_snapshot.json), runs one round of the
BIG-C preemptive fair-share scheduler (Algorithm 1 then Algorithm 2) and prints, per queue, the
amount to reclaim and each container's action. Every malformed field is reported as one line
naming it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plumbing.errors import UserError
from policies.preemption.amounts import QueueState
from policies.preemption.plan import ClusterPlan, plan_preemption
from policies.preemption.resources import Mode, PreemptionSettings, Resources
from policies.preemption.victims import Container

PAPER_RESOURCES = ("cpu", "memory_mb")
MODES = [mode.value for mode in Mode]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``preempt`` subcommand."""
    parser = subparsers.add_parser(
        "preempt",
        help="what the preemptive scheduler would reclaim, from which containers, how",
        description="One round of BIG-C preemption (Algorithms 1-2) on a cluster snapshot.",
    )
    parser.add_argument("snapshot", type=Path, metavar="SNAPSHOT.json", help="cluster snapshot")
    parser.add_argument(
        "--mode", choices=MODES, help="preemption mode (default: the snapshot's, else graceful)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run_preempt)


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{field}: expected an object")
    return value


def _list(value: Any, field: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise UserError(f"{field}: expected a list")
    return value


def _number(value: Any, field: str, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{field}: expected a number, got {json.dumps(value)}")
    if value < minimum:
        raise UserError(f"{field}: must be >= {minimum:g}, got {value}")
    return float(value)


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"{field}: expected a non-empty string")
    return value


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{field}: expected true or false")
    return value


def _vector(value: Any, field: str, dims: int) -> Resources:
    items = _list(value, field)
    if len(items) != dims:
        raise UserError(f"{field}: expected {dims} numbers (one per resource), got {len(items)}")
    return tuple(_number(v, f"{field}[{i}]") for i, v in enumerate(items))


def _known_keys(obj: Mapping[str, Any], field: str, allowed: set[str]) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise UserError(f"{field}.{unknown[0]}: unknown field")


def _settings(doc: Mapping[str, Any], names: tuple[str, ...]) -> PreemptionSettings:
    raw = _object(doc.get("settings", {}), "settings")
    _known_keys(
        raw,
        "settings",
        {"minimal_footprint", "graceful_step", "throttle_first", "resume_after_offers"},
    )
    dims = len(names)
    defaults = PreemptionSettings()
    for key in ("minimal_footprint", "graceful_step"):
        if key not in raw and names != PAPER_RESOURCES:
            raise UserError(
                f"settings.{key}: required when resources are not {list(PAPER_RESOURCES)}"
            )
    footprint = _vector(
        raw.get("minimal_footprint", defaults.minimal_footprint), "settings.minimal_footprint", dims
    )
    step = _vector(raw.get("graceful_step", defaults.graceful_step), "settings.graceful_step", dims)
    if not any(v > 0 for v in step):
        raise UserError("settings.graceful_step: at least one value must be > 0")
    throttle = _text(
        raw.get("throttle_first", "cpu" if "cpu" in names else names[0]), "settings.throttle_first"
    )
    if throttle not in names:
        raise UserError(f"settings.throttle_first: {throttle!r} is not one of the resources")
    delay = raw.get("resume_after_offers", defaults.resume_after_offers)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise UserError("settings.resume_after_offers: expected an integer >= 0")
    return PreemptionSettings(names, footprint, step, throttle, delay)


def _queues(doc: Mapping[str, Any], dims: int) -> list[QueueState]:
    queues = []
    for i, raw in enumerate(_list(doc.get("queues"), "queues")):
        field = f"queues[{i}]"
        obj = _object(raw, field)
        _known_keys(obj, field, {"name", "fair_share", "allocation", "demand"})
        share = _number(obj.get("fair_share"), f"{field}.fair_share")
        if share > 1:
            raise UserError(f"{field}.fair_share: must be a fraction in [0, 1], got {share}")
        queues.append(
            QueueState(
                name=_text(obj.get("name"), f"{field}.name"),
                fair_share=share,
                allocation=_vector(obj.get("allocation"), f"{field}.allocation", dims),
                demand=_vector(obj.get("demand", [0] * dims), f"{field}.demand", dims),
            )
        )
    names = [q.name for q in queues]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise UserError(f"queues[{i}].name: duplicate queue {name!r}")
    return queues


def _containers(doc: Mapping[str, Any], dims: int, queues: set[str]) -> list[Container]:
    containers = []
    seen: set[str] = set()
    allowed = {"id", "job", "queue", "resources", "remaining_time", "swapping", "suspended"}
    for i, raw in enumerate(_list(doc.get("containers", []), "containers")):
        field = f"containers[{i}]"
        obj = _object(raw, field)
        _known_keys(obj, field, allowed)
        cid = _text(obj.get("id"), f"{field}.id")
        if cid in seen:
            raise UserError(f"{field}.id: duplicate container {cid!r}")
        seen.add(cid)
        queue = _text(obj.get("queue"), f"{field}.queue")
        if queue not in queues:
            raise UserError(f"{field}.queue: unknown queue {queue!r}")
        containers.append(
            Container(
                container_id=cid,
                job_id=_text(obj.get("job"), f"{field}.job"),
                queue=queue,
                resources=_vector(obj.get("resources"), f"{field}.resources", dims),
                remaining_time=_number(obj.get("remaining_time"), f"{field}.remaining_time"),
                swapping=_flag(obj.get("swapping", False), f"{field}.swapping"),
                suspended=_flag(obj.get("suspended", False), f"{field}.suspended"),
            )
        )
    return containers


def load_snapshot(
    path: Path,
) -> tuple[Resources, list[QueueState], list[Container], PreemptionSettings, Mode | None]:
    """Parse and validate a snapshot file; raise UserError naming the first bad field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        doc = _object(json.loads(text), "snapshot")
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    _known_keys(
        doc, "snapshot", {"resources", "capacity", "mode", "settings", "queues", "containers"}
    )
    raw_names = _list(doc.get("resources", list(PAPER_RESOURCES)), "resources")
    names = tuple(_text(n, f"resources[{i}]") for i, n in enumerate(raw_names))
    if not names or len(set(names)) != len(names):
        raise UserError("resources: need at least one resource name, all distinct")
    dims = len(names)
    capacity = _vector(doc.get("capacity"), "capacity", dims)
    mode = None
    if "mode" in doc:
        value = doc["mode"]
        if value not in MODES:
            raise UserError(f"mode: expected one of {', '.join(MODES)}, got {json.dumps(value)}")
        mode = Mode(value)
    queues = _queues(doc, dims)
    containers = _containers(doc, dims, {q.name for q in queues})
    return capacity, queues, containers, _settings(doc, names), mode


def _named(names: Sequence[str], values: Resources) -> dict[str, float]:
    return dict(zip(names, values, strict=True))


def _report(plan: ClusterPlan, mode: Mode, names: Sequence[str]) -> dict[str, Any]:
    plans = dict(plan.plans)
    queues = []
    for amount in plan.amounts:
        queue_plan = plans.get(amount.queue)
        queues.append(
            {
                "queue": amount.queue,
                "over_provisioned": _named(names, amount.over_provisioned),
                "preempt": _named(names, amount.preempt),
                "reclaimed": _named(
                    names, queue_plan.reclaimed if queue_plan else (0.0,) * len(names)
                ),
                "satisfied": queue_plan.satisfied if queue_plan else True,
                "actions": [
                    {
                        "container": a.container_id,
                        "job": a.job_id,
                        "action": a.kind.value,
                        "reclaimed": _named(names, a.reclaimed),
                        "limits": [{"resource": r, "limit": v} for r, v in a.limits],
                    }
                    for a in (queue_plan.actions if queue_plan else ())
                ],
            }
        )
    return {"mode": mode.value, "resources": list(names), "queues": queues}


def _format(vector: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in vector.items())


def run_preempt(args: argparse.Namespace) -> int:
    """Print the preemption plan for ``args.snapshot``; 0 on success."""
    capacity, queues, containers, settings, snapshot_mode = load_snapshot(args.snapshot)
    mode = Mode(args.mode) if args.mode else (snapshot_mode or Mode.GRACEFUL)
    try:
        plan = plan_preemption(capacity, queues, containers, mode, settings)
    except ValueError as exc:  # the policy names the field; keep it one line
        raise UserError(str(exc)) from None
    report = _report(plan, mode, settings.resource_names)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"mode: {mode.value}")
    for queue in report["queues"]:
        print(
            f"queue {queue['queue']}: over-provisioned {_format(queue['over_provisioned'])}; "
            f"preempt {_format(queue['preempt'])}"
        )
        if not queue["actions"]:
            continue
        state = "satisfied" if queue["satisfied"] else "NOT satisfied"
        print(f"  reclaimed {_format(queue['reclaimed'])} ({state})")
        for action in queue["actions"]:
            limits = ", ".join(f"{lim['resource']} -> {lim['limit']:g}" for lim in action["limits"])
            effect = (
                "swapping, frozen"
                if action["action"] == "freeze"
                else f"reclaims {_format(action['reclaimed'])}"
            )
            print(
                f"  {action['action']:<8} {action['container']} (job {action['job']}): {effect}"
                + (f"; limits {limits}" if limits else "")
            )
    return 0
