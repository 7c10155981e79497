"""``sluice model preempt SNAPSHOT.json``: what the preemptive scheduler would reclaim.

Reads a cluster snapshot (resources, capacity, queues, containers; format in
docs/model/preempt.md, example in examples/model/preempt_snapshot.json), runs one round of the
BIG-C preemptive fair-share scheduler (Algorithm 1 then Algorithm 2, in the chosen mode) and
prints, per queue, the amount to reclaim, its over-provisioned dominant resource and each
container's action. Settings left out of the snapshot take the paper's values
(:class:`policies.preemption.settings.PreemptionSettings`). Every malformed field is reported
as one line naming it.

The snapshot's vectors are lists ⟨cpu cores, memory MiB⟩; this module is the edge that turns
them into :class:`policies.scheduling.resources.Resources` (memory must be whole MiB) and the
policy's Resources back into the report's ``{"cpu": ..., "memory_mb": ...}`` objects.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plumbing.errors import UserError
from policies.preemption.amounts import QueueState
from policies.preemption.plan import ClusterPlan, plan_preemption
from policies.preemption.settings import Mode, PreemptionSettings
from policies.preemption.vectors import RESOURCE_NAMES, ResourceName
from policies.preemption.victims import Container
from policies.scheduling.resources import Resources
from sluice.model.fields import (
    as_flag,
    as_list,
    as_number,
    as_object,
    as_text,
    check_known_keys,
    read_json_file,
)

MODES = [mode.value for mode in Mode]
_BY_NAME: dict[str, ResourceName] = {name: name for name in RESOURCE_NAMES}


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


def _mib(value: Any, field: str) -> int:
    number = as_number(value, field)
    if not number.is_integer():
        raise UserError(f"{field}: expected a whole number of MiB, got {value}")
    return int(number)


def _resources(value: Any, field: str) -> Resources:
    """A vector [cpu cores, memory MiB] as Resources; the fields are named by index."""
    items = as_list(value, field)
    dims = len(RESOURCE_NAMES)
    if len(items) != dims:
        raise UserError(f"{field}: expected {dims} numbers (one per resource), got {len(items)}")
    return Resources(
        cpu=as_number(items[0], f"{field}[0]"), memory_mb=_mib(items[1], f"{field}[1]")
    )


def _settings(doc: Mapping[str, Any]) -> PreemptionSettings:
    raw = as_object(doc.get("settings", {}), "settings")
    check_known_keys(
        raw,
        "settings",
        {"minimal_footprint", "graceful_step", "throttle_first", "resume_after_offers"},
    )
    defaults = PreemptionSettings()
    footprint = (
        _resources(raw["minimal_footprint"], "settings.minimal_footprint")
        if "minimal_footprint" in raw
        else defaults.minimal_footprint
    )
    step = (
        _resources(raw["graceful_step"], "settings.graceful_step")
        if "graceful_step" in raw
        else defaults.graceful_step
    )
    if step.cpu <= 0 and step.memory_mb <= 0:
        raise UserError("settings.graceful_step: at least one value must be > 0")
    throttle_text = as_text(
        raw.get("throttle_first", defaults.throttle_first), "settings.throttle_first"
    )
    throttle = _BY_NAME.get(throttle_text)
    if throttle is None:
        raise UserError(f"settings.throttle_first: {throttle_text!r} is not one of the resources")
    delay = raw.get("resume_after_offers", defaults.resume_after_offers)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise UserError("settings.resume_after_offers: expected an integer >= 0")
    return PreemptionSettings(footprint, step, throttle, delay)


def _queues(doc: Mapping[str, Any]) -> list[QueueState]:
    queues = []
    for i, raw in enumerate(as_list(doc.get("queues"), "queues")):
        field = f"queues[{i}]"
        obj = as_object(raw, field)
        check_known_keys(obj, field, {"name", "fair_share", "allocation", "demand"})
        share = as_number(obj.get("fair_share"), f"{field}.fair_share")
        if share > 1:
            raise UserError(f"{field}.fair_share: must be a fraction in [0, 1], got {share}")
        queues.append(
            QueueState(
                name=as_text(obj.get("name"), f"{field}.name"),
                fair_share=share,
                allocation=_resources(obj.get("allocation"), f"{field}.allocation"),
                demand=_resources(obj.get("demand", [0, 0]), f"{field}.demand"),
            )
        )
    names = [q.name for q in queues]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise UserError(f"queues[{i}].name: duplicate queue {name!r}")
    return queues


def _containers(doc: Mapping[str, Any], queues: set[str]) -> list[Container]:
    containers = []
    seen: set[str] = set()
    allowed = {"id", "job", "queue", "resources", "remaining_time", "swapping", "suspended"}
    for i, raw in enumerate(as_list(doc.get("containers", []), "containers")):
        field = f"containers[{i}]"
        obj = as_object(raw, field)
        check_known_keys(obj, field, allowed)
        cid = as_text(obj.get("id"), f"{field}.id")
        if cid in seen:
            raise UserError(f"{field}.id: duplicate container {cid!r}")
        seen.add(cid)
        queue = as_text(obj.get("queue"), f"{field}.queue")
        if queue not in queues:
            raise UserError(f"{field}.queue: unknown queue {queue!r}")
        containers.append(
            Container(
                container_id=cid,
                job_id=as_text(obj.get("job"), f"{field}.job"),
                queue=queue,
                resources=_resources(obj.get("resources"), f"{field}.resources"),
                remaining_time=as_number(obj.get("remaining_time"), f"{field}.remaining_time"),
                swapping=as_flag(obj.get("swapping", False), f"{field}.swapping"),
                suspended=as_flag(obj.get("suspended", False), f"{field}.suspended"),
            )
        )
    return containers


def load_snapshot(
    path: Path,
) -> tuple[Resources, list[QueueState], list[Container], PreemptionSettings, Mode | None]:
    """Parse and validate a snapshot file; raise UserError naming the first bad field."""
    doc = as_object(read_json_file(path), "snapshot")
    check_known_keys(
        doc, "snapshot", {"resources", "capacity", "mode", "settings", "queues", "containers"}
    )
    # The scheduler has exactly two resources; the field stays so that existing snapshots, which
    # spell them out, keep working, and so that a snapshot of other resources is refused.
    names = as_list(doc.get("resources", list(RESOURCE_NAMES)), "resources")
    if list(names) != list(RESOURCE_NAMES):
        raise UserError(
            f"resources: must be {json.dumps(list(RESOURCE_NAMES))} (cpu cores, memory MiB), "
            f"got {json.dumps(names)}"
        )
    capacity = _resources(doc.get("capacity"), "capacity")
    mode = None
    if "mode" in doc:
        value = doc["mode"]
        if value not in MODES:
            raise UserError(f"mode: expected one of {', '.join(MODES)}, got {json.dumps(value)}")
        mode = Mode(value)
    queues = _queues(doc)
    containers = _containers(doc, {q.name for q in queues})
    return capacity, queues, containers, _settings(doc), mode


def _named(amount: Resources) -> dict[str, float]:
    # Floats, as before Resources carried memory as an int, so the JSON output is unchanged.
    return {"cpu": float(amount.cpu), "memory_mb": float(amount.memory_mb)}


def _report(plan: ClusterPlan, mode: Mode) -> dict[str, Any]:
    plans = dict(plan.plans)
    queues = []
    for amount in plan.amounts:
        queue_plan = plans.get(amount.queue)
        queues.append(
            {
                "queue": amount.queue,
                "over_provisioned": _named(amount.over_provisioned),
                "preempt": _named(amount.preempt),
                "reclaimed": _named(queue_plan.reclaimed if queue_plan else Resources()),
                "satisfied": queue_plan.satisfied if queue_plan else True,
                "dominant": amount.dominant,
                "actions": [
                    {
                        "container": a.container_id,
                        "job": a.job_id,
                        "action": a.kind.value,
                        "reclaimed": _named(a.reclaimed),
                        "limits": [{"resource": r, "limit": float(v)} for r, v in a.limits],
                    }
                    for a in (queue_plan.actions if queue_plan else ())
                ],
            }
        )
    return {"mode": mode.value, "resources": list(RESOURCE_NAMES), "queues": queues}


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
    report = _report(plan, mode)
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
        if queue["dominant"] is not None:
            state += f", dominant {queue['dominant']}"
        print(f"  reclaimed {_format(queue['reclaimed'])} ({state})")
        for action in queue["actions"]:
            limits = ", ".join(f"{lim['resource']} -> {lim['limit']:g}" for lim in action["limits"])
            effect = f"reclaims {_format(action['reclaimed'])}"
            if action["action"] == "freeze":
                effect = f"swapping, frozen, {effect}"
            print(
                f"  {action['action']:<8} {action['container']} (job {action['job']}): {effect}"
                + (f"; limits {limits}" if limits else "")
            )
    return 0
