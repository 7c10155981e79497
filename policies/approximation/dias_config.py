"""The cluster's DiAS settings (``sluice rm --dias-config FILE``): per priority, the drop ratio
``θ_k`` its jobs get and the bound a job's own spec may ask up to, and the sprinting timeout
``T_k``; the accuracy curve that turns a drop ratio into the expected relative error; and the
sprinting budget (DiAS Sec. 3, 5.1).

The file is YAML (docs/approximation.md)::

    priorities:                      # by the job spec's `priority`; others: no drop, no sprint
      - {priority: 1, name: high, sprint_timeout_s: 65}
      - {priority: 0, name: low, drop_ratio: 0.2, max_drop_ratio: 0.4}
    accuracy_curve: {0.1: 0.085, 0.2: 0.15, 0.4: 0.32}   # the paper's Fig. 6 (the default)
    sprint: {budget_s: 360, replenish_s_per_hour: 360, factor: 2.0, power_factor: 1.5}
    drop_ratios_from: model.json     # optional: `sluice model dias --json` output

With ``drop_ratios_from``, each priority whose ``name`` matches a class of the model's output
takes that class's ``drop_ratio`` (a ``drop_ratio`` written in this file wins).  Parsing is
pure: the shell reads the files and passes their documents in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from policies.approximation.accuracy import PAPER_ACCURACY_CURVE, AccuracyCurve
from policies.scheduling.spec_fields import (
    SpecError,
    check_keys,
    describe,
    fraction_field,
    integer_field,
    join_field,
    name_field,
)

MAX_PRIORITY = 1_000_000  # as the job spec's bound
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class PriorityPolicy:
    """What DiAS does to jobs of one priority.  ``drop_ratio``: ``θ_k`` for jobs that name
    none; ``max_drop_ratio``: the most a job's own spec may ask for; ``sprint_timeout_s``:
    ``T_k`` (``inf``: never sprints; 0: at dispatch)."""

    priority: int
    name: str = ""
    drop_ratio: float = 0.0
    max_drop_ratio: float = 0.0
    sprint_timeout_s: float = math.inf


@dataclass(frozen=True)
class SprintSettings:
    """The budget the RM keeps (DiAS Sec. 3.3: "e.g. 6 sprinting minutes per hour"), in
    sprint-seconds of one job; ``factor``: a CPU-quota sprint raises a task's quota to its grant
    times this (idle cores only); ``power_factor``: a sprinting machine's power over its
    normal power (1.5 in Sec. 5.1: 180 W to 270 W)."""

    budget_s: float = 360.0
    replenish_s_per_hour: float = 360.0
    factor: float = 2.0
    power_factor: float = 1.5

    @property
    def replenish_rate(self) -> float:
        """Sprint-seconds gained per second."""
        return self.replenish_s_per_hour / SECONDS_PER_HOUR


@dataclass(frozen=True)
class DiasConfig:
    priorities: tuple[PriorityPolicy, ...] = ()
    accuracy: AccuracyCurve = PAPER_ACCURACY_CURVE
    sprint: SprintSettings = SprintSettings()

    def policy_of(self, priority: int) -> PriorityPolicy:
        """The policy of ``priority``: its entry, or no dropping and no sprinting."""
        for policy in self.priorities:
            if policy.priority == priority:
                return policy
        return PriorityPolicy(priority)

    def drop_ratio_for(self, priority: int, asked: float | None) -> float:
        """The drop ratio a job of ``priority`` runs with: the one its spec asks for (SpecError
        past its priority's bound), else its priority's."""
        policy = self.policy_of(priority)
        if asked is None:
            return policy.drop_ratio
        if asked > policy.max_drop_ratio:
            raise SpecError(
                "approximation.drop_ratio",
                f"{asked:g} is above the cluster's bound of {policy.max_drop_ratio:g} for "
                f"priority {priority}",
            )
        return asked

    def expected_error(self, drop_ratio: float) -> float:
        """The relative error the accuracy curve expects at ``drop_ratio``."""
        return self.accuracy.error_at(drop_ratio)


_TOP = {"priorities": False, "accuracy_curve": False, "sprint": False, "drop_ratios_from": False}
_PRIORITY = {
    "priority": True,
    "name": False,
    "drop_ratio": False,
    "max_drop_ratio": False,
    "sprint_timeout_s": False,
}
_SPRINT = {"budget_s": False, "replenish_s_per_hour": False, "factor": False, "power_factor": False}


def parse_dias_config(
    document: object, model_output: Mapping[str, object] | None = None
) -> DiasConfig:
    """The settings in ``document`` (the YAML file, parsed); ``model_output``: the JSON of
    ``sluice model dias --json`` its ``drop_ratios_from`` names.  SpecError names the field."""
    if not isinstance(document, Mapping):
        raise SpecError("the file", f"must be a mapping, not {describe(document)}")
    doc = check_keys(document, "", _TOP)
    accuracy = (
        parse_accuracy_curve(doc["accuracy_curve"], "accuracy_curve")
        if "accuracy_curve" in doc
        else PAPER_ACCURACY_CURVE
    )
    from_model = _model_drop_ratios(model_output) if model_output is not None else {}
    raw = doc.get("priorities", [])
    if not isinstance(raw, list):
        raise SpecError("priorities", f"must be a list, not {describe(raw)}")
    priorities: list[PriorityPolicy] = []
    for index, item in enumerate(raw):
        policy = _priority(item, f"priorities[{index}]", from_model, accuracy)
        if any(p.priority == policy.priority for p in priorities):
            raise SpecError(f"priorities[{index}].priority", f"{policy.priority} is listed twice")
        priorities.append(policy)
    sprint = _sprint(doc["sprint"]) if "sprint" in doc else SprintSettings()
    return DiasConfig(tuple(priorities), accuracy, sprint)


def parse_accuracy_curve(raw: object, field: str) -> AccuracyCurve:
    """``{drop ratio: relative error}``, e.g. ``{0.1: 0.085, 0.2: 0.15, 0.4: 0.32}``."""
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError(field, "must map drop ratios to relative errors, e.g. {0.1: 0.085}")
    points = []
    for key, value in raw.items():
        where = join_field(field, key)
        ratio = fraction_field(key, where)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(where, f"must be a relative error (a number), not {describe(value)}")
        points.append((ratio, float(value)))
    points.sort()
    try:
        return AccuracyCurve(tuple(p[0] for p in points), tuple(p[1] for p in points))
    except ValueError as error:
        raise SpecError(field, str(error)) from None


def _priority(
    item: object, field: str, from_model: Mapping[str, float], accuracy: AccuracyCurve
) -> PriorityPolicy:
    doc = check_keys(item, field, _PRIORITY)
    priority = integer_field(doc["priority"], f"{field}.priority", minimum=0, maximum=MAX_PRIORITY)
    name = name_field(doc["name"], f"{field}.name") if "name" in doc else ""
    if "drop_ratio" in doc:
        drop_ratio = fraction_field(doc["drop_ratio"], f"{field}.drop_ratio")
    else:
        drop_ratio = from_model.get(name, 0.0) if name else 0.0
    max_drop_ratio = (
        fraction_field(doc["max_drop_ratio"], f"{field}.max_drop_ratio")
        if "max_drop_ratio" in doc
        else drop_ratio
    )
    if drop_ratio > max_drop_ratio:
        raise SpecError(
            f"{field}.drop_ratio", f"{drop_ratio:g} is above max_drop_ratio {max_drop_ratio:g}"
        )
    if math.isinf(accuracy.error_at(max_drop_ratio)):
        raise SpecError(
            f"{field}.max_drop_ratio",
            f"{max_drop_ratio:g} is past the accuracy curve's last point "
            f"{accuracy.drop_ratios[-1]:g} (its error is unknown)",
        )
    timeout = _seconds(doc.get("sprint_timeout_s", math.inf), f"{field}.sprint_timeout_s")
    return PriorityPolicy(priority, name, drop_ratio, max_drop_ratio, timeout)


def _sprint(raw: object) -> SprintSettings:
    doc = check_keys(raw, "sprint", _SPRINT)
    defaults = SprintSettings()
    budget = _seconds(doc.get("budget_s", defaults.budget_s), "sprint.budget_s", finite=True)
    replenish = _seconds(
        doc.get("replenish_s_per_hour", defaults.replenish_s_per_hour),
        "sprint.replenish_s_per_hour",
        finite=True,
    )
    if replenish > SECONDS_PER_HOUR:
        raise SpecError("sprint.replenish_s_per_hour", "must be at most 3600 (one per second)")
    factor = _factor(doc.get("factor", defaults.factor), "sprint.factor")
    power = _factor(doc.get("power_factor", defaults.power_factor), "sprint.power_factor")
    return SprintSettings(budget, replenish, factor, power)


def _seconds(value: object, field: str, *, finite: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise SpecError(field, f"must be a number of seconds, not {describe(value)}")
    if value < 0 or (finite and math.isinf(value)):
        word = "finite and 0 or more" if finite else "0 or more (.inf: never)"
        raise SpecError(field, f"must be {word}, got {value}")
    return float(value)


def _factor(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, f"must be a number, not {describe(value)}")
    if not 1 <= value <= 64:  # NaN fails too
        raise SpecError(field, f"must be between 1 and 64, got {value}")
    return float(value)


def _model_drop_ratios(output: Mapping[str, object]) -> dict[str, float]:
    """Class name -> drop ratio, from `sluice model dias --json` output."""
    classes = output.get("priorities")
    if not isinstance(classes, list):
        raise SpecError("drop_ratios_from", "is not the output of `sluice model dias --json`")
    ratios = {}
    for index, item in enumerate(classes):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SpecError(f"drop_ratios_from: priorities[{index}]", "has no name")
        ratios[str(item["name"])] = fraction_field(
            item.get("drop_ratio"), f"drop_ratios_from: priorities[{index}].drop_ratio"
        )
    return ratios
