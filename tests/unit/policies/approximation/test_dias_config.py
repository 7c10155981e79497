"""The cluster's DiAS settings file: defaults, the model's drop ratios, one-line errors."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies.approximation.dias_config import (
    PriorityPolicy,
    SprintSettings,
    parse_dias_config,
)
from policies.scheduling.spec_fields import SpecError

MODEL_OUTPUT = {
    "priorities": [{"name": "high", "drop_ratio": 0.0}, {"name": "low", "drop_ratio": 0.2}]
}


def test_an_empty_file_drops_nothing_and_never_sprints() -> None:
    config = parse_dias_config({})
    assert config.policy_of(3) == PriorityPolicy(3)
    assert config.sprint == SprintSettings()
    assert config.drop_ratio_for(3, None) == 0.0
    assert config.expected_error(0.2) == pytest.approx(0.15)  # the paper's Fig. 6


def test_priorities_take_the_models_drop_ratios_by_name_and_the_file_wins() -> None:
    config = parse_dias_config(
        {
            "priorities": [
                {"priority": 1, "name": "high", "sprint_timeout_s": 65},
                {"priority": 0, "name": "low", "max_drop_ratio": 0.4},
                {"priority": 2, "name": "low", "drop_ratio": 0.1},
            ],
            "drop_ratios_from": "model.json",
        },
        MODEL_OUTPUT,
    )
    assert config.policy_of(1) == PriorityPolicy(1, "high", 0.0, 0.0, 65.0)
    assert config.policy_of(0) == PriorityPolicy(0, "low", 0.2, 0.4, math.inf)
    assert config.policy_of(2).drop_ratio == 0.1
    assert config.sprint.replenish_rate == pytest.approx(0.1)


@pytest.mark.parametrize(("asked", "ratio"), [(None, 0.2), (0.0, 0.0), (0.3, 0.3), (0.4, 0.4)])
def test_a_job_may_ask_for_a_drop_ratio_within_its_prioritys_bound(
    asked: float | None, ratio: float
) -> None:
    config = parse_dias_config(
        {"priorities": [{"priority": 0, "drop_ratio": 0.2, "max_drop_ratio": 0.4}]}
    )
    assert config.drop_ratio_for(0, asked) == ratio


def test_a_job_asking_past_the_bound_is_refused_naming_its_field() -> None:
    config = parse_dias_config({"priorities": [{"priority": 0, "drop_ratio": 0.2}]})
    with pytest.raises(SpecError, match=r"approximation\.drop_ratio: 0\.3 is above .* 0\.2"):
        config.drop_ratio_for(0, 0.3)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "the file: must be a mapping"),
        ({"priority": []}, "priority: unknown field"),
        ({"priorities": {}}, "priorities: must be a list"),
        ({"priorities": [{"drop_ratio": 0.1}]}, r"priorities\[0\]\.priority: is required"),
        ({"priorities": [{"priority": -1}]}, r"priorities\[0\]\.priority: must be at least 0"),
        (
            {"priorities": [{"priority": 0}, {"priority": 0}]},
            r"priorities\[1\]\.priority: 0 is listed twice",
        ),
        (
            {"priorities": [{"priority": 0, "drop_ratio": 1.5}]},
            r"priorities\[0\]\.drop_ratio: must be in \[0, 1\], got 1.5",
        ),
        (
            {"priorities": [{"priority": 0, "drop_ratio": 0.3, "max_drop_ratio": 0.2}]},
            r"priorities\[0\]\.drop_ratio: 0\.3 is above max_drop_ratio 0\.2",
        ),
        (
            {"priorities": [{"priority": 0, "drop_ratio": 0.5}]},
            r"priorities\[0\]\.max_drop_ratio: 0\.5 is past the accuracy curve's last point 0\.4",
        ),
        (
            {"priorities": [{"priority": 0, "sprint_timeout_s": -1}]},
            r"priorities\[0\]\.sprint_timeout_s: must be 0 or more",
        ),
        ({"accuracy_curve": {0.2: 0.1, 0.4: 0.05}}, "accuracy_curve: .*must not decrease"),
        ({"accuracy_curve": {}}, "accuracy_curve: must map drop ratios"),
        ({"sprint": {"budget_s": math.inf}}, "sprint.budget_s: must be finite"),
        ({"sprint": {"factor": 0.5}}, "sprint.factor: must be between 1 and 64"),
        (
            {"sprint": {"replenish_s_per_hour": 4000}},
            "sprint.replenish_s_per_hour: must be at most",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_field(document: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_dias_config(document)


def test_a_model_output_that_is_not_one_is_refused() -> None:
    with pytest.raises(SpecError, match="drop_ratios_from: is not the output"):
        parse_dias_config({"drop_ratios_from": "x.json"}, {"slots": 20})
