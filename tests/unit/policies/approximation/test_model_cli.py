"""``sluice model dias``: the example file, predictions, and one-line errors for bad input."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from plumbing.errors import UserError
from policies.approximation.job_time import TaskLevelJob, task_level_model
from policies.approximation.phase_type import moments
from policies.approximation.priority_queues import (
    PriorityWorkload,
    non_preemptive_response_times,
)
from sluice.model import dias

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "model" / "dias.yaml"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice model")
    dias.register(top.add_subparsers())
    return top


def run(path: Path, *flags: str) -> int:
    args = parser().parse_args(["dias", str(path), *flags])
    return int(args.handler(args))


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "dias.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def base_document() -> dict[str, Any]:
    """Two classes, small enough to check by hand: high fixed at 0, low searched."""
    job = {"map_tasks": 8, "reduce_tasks": 2, "setup": 2.0, "shuffle": 1.0}
    return {
        "slots": 4,
        "priorities": [
            {"name": "high", "arrival_rate": 0.01, "drop_ratio": 0.0, "map_task": 1.0,
             "reduce_task": 0.5, **job},
            {"name": "low", "arrival_rate": 0.04, "max_error": 0.15, "map_task": 2.0,
             "reduce_task": 0.5, **job},
        ],
    }  # fmt: skip


def test_example_file_runs_and_searches(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(EXAMPLE) == 0
    text = capsys.readouterr().out
    assert "high" in text
    assert "medium" in text
    assert "searched over" in text
    assert run(EXAMPLE, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in report["priorities"]}
    assert rows["high"]["drop_ratio"] == 0.0
    assert not rows["high"]["searched"]
    assert rows["medium"]["error"] <= 0.085 + 1e-12
    assert rows["low"]["error"] <= 0.15 + 1e-12
    assert rows["low"]["drop_ratio"] > 0.0
    assert 0.0 < report["utilisation"] < 1.0


def test_fixed_ratios_match_the_policies(tmp_path: Path, capsys) -> None:
    document = base_document()
    document["priorities"][1]["drop_ratio"] = 0.25
    assert run(write(tmp_path, document), "--json") == 0
    report = json.loads(capsys.readouterr().out)

    def job(map_mean: float) -> TaskLevelJob:
        return TaskLevelJob(4, np.eye(8)[7], np.eye(2)[1], 1 / 2.0, 1 / map_mean, 1.0, 2.0)

    stats = np.array(
        [moments(task_level_model(job(2.0), 0.25), 2), moments(task_level_model(job(1.0), 0.0), 2)]
    )
    expected = non_preemptive_response_times(
        PriorityWorkload(np.array([0.04, 0.01]), stats[:, 0], stats[:, 1])
    )
    low, high = report["priorities"][1], report["priorities"][0]
    assert low["mean_response_time"] == pytest.approx(expected[0], rel=1e-12)
    assert high["mean_response_time"] == pytest.approx(expected[1], rel=1e-12)
    assert low["error"] == pytest.approx(0.15 + 0.05 * 0.17 / 0.2)
    assert report["combinations"] == 1


def test_sprint_speedup_shortens_the_job(tmp_path: Path, capsys) -> None:
    document = base_document()
    assert run(write(tmp_path, document), "--json") == 0
    plain = json.loads(capsys.readouterr().out)["priorities"][0]["mean_job_time"]
    document["priorities"][0]["speedup"] = 2.0
    assert run(write(tmp_path, document), "--json") == 0
    sprinted = json.loads(capsys.readouterr().out)["priorities"][0]["mean_job_time"]
    assert sprinted == pytest.approx(plain / 2)


def test_wave_model(tmp_path: Path, capsys) -> None:
    document = base_document()
    document["model"] = "wave"
    for priority in document["priorities"]:
        del priority["map_task"], priority["reduce_task"]
        priority["map_waves"] = [{"mean": 3.0, "phases": 4}, {"mean": 2.0, "phases": 4}]
        priority["reduce_waves"] = {"mean": 1.0, "phases": 2}
    document["priorities"][1]["drop_ratio"] = 0.5  # 8 maps → 4: one wave of 4 slots, not two
    assert run(write(tmp_path, document), "--json") == 0
    rows = json.loads(capsys.readouterr().out)["priorities"]
    # setup + map waves m(1), m(2) + shuffle + one reduce wave
    assert rows[0]["mean_job_time"] == pytest.approx(2.0 + 3.0 + 2.0 + 1.0 + 1.0)
    # With W = 1 the only map block is m(1)
    assert rows[1]["mean_job_time"] == pytest.approx(2.0 + 3.0 + 1.0 + 1.0)


def test_unstable_load_is_reported(tmp_path: Path, capsys) -> None:
    document = base_document()
    document["priorities"][1]["arrival_rate"] = 1.0
    assert run(write(tmp_path, document)) == 0
    assert "unstable" in capsys.readouterr().out
    assert run(write(tmp_path, document), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["priorities"][1]["mean_response_time"] is None
    assert report["weighted_mean_response_time"] is None


def set_path(document: dict[str, Any], dotted: str, value: Any) -> None:
    """``priorities.0.setup`` style assignment; ``value`` None deletes the key."""
    keys = dotted.split(".")
    target: Any = document
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last: Any = int(keys[-1]) if isinstance(target, list) else keys[-1]
    if value is None:
        del target[last]
    else:
        target[last] = value


# (dotted path, new value or None to delete, expected one-line message)
BAD = [
    ("slots", None, "slots: required"),
    ("slots", 0, "slots: must be >= 1, got 0"),
    ("slots", "many", "slots: must be an integer"),
    ("model", "job", "model: must be one of task, wave, got 'job'"),
    ("discipline", "fifo", "discipline: must be one of non_preemptive, preemptive_resume"),
    ("colour", "blue", "colour: unknown field"),
    ("search", {"step": 0}, "search.step: must be > 0, got 0"),
    ("search", {"stride": 1}, "search.stride: unknown field"),
    ("priorities", [], "priorities: must be a non-empty list"),
    ("accuracy_curve", {0.1: 0.2, 0.2: 0.1}, "accuracy_curve: accuracy curve errors must not"),
    ("accuracy_curve", {1.5: 0.2}, "accuracy_curve.1.5: must be in [0, 1], got 1.5"),
    ("priorities.0.name", None, "priorities[0].name: must be a non-empty string"),
    ("priorities.1.name", "high", "priorities[1].name: duplicate name 'high'"),
    ("priorities.0.arrival_rate", -1, "priorities[0].arrival_rate: must be >= 0, got -1"),
    ("priorities.0.arrival_rate", None, "priorities[0].arrival_rate: required"),
    ("priorities.0.drop_ratio", 1.5, "priorities[0].drop_ratio: must be <= 1, got 1.5"),
    ("priorities.0.colour", 1, "priorities[0].colour: unknown field"),
    ("priorities.1.map_tasks", {3: 0.5}, "priorities[1].map_tasks: probabilities must sum to 1"),
    ("priorities.1.map_tasks", {0: 1.0}, "priorities[1].map_tasks.0: must be >= 1, got 0"),
    ("priorities.1.map_tasks", 5000, "priorities[1].map_tasks: must be <= 2000, got 5000"),
    ("priorities.1.map_tasks", {"uniform": [5, 2]}, "priorities[1].map_tasks.uniform[1]: must"),
    ("priorities.1.map_tasks", 2000, "priorities[1]: the job-time model would need 2004 phases"),
    ("priorities.1.map_task", None, "priorities[1].map_task: required for the task-level model"),
    ("priorities.1.map_task", 0, "priorities[1].map_task: must be > 0, got 0"),
    ("priorities.1.map_waves", [1.0], "priorities[1].map_waves: not used by the task-level"),
    ("priorities.0.setup", {"mean": 2, "phases": 3}, "priorities[0].setup.phases: the task-level"),
    ("priorities.0.setup", {"mean": "x"}, "priorities[0].setup.mean: must be a number, got 'x'"),
    ("priorities.0.speedup", 0, "priorities[0].speedup: must be > 0, got 0"),
    ("priorities.1.accuracy_curve", {0.0: 0.2, 0.5: 0.3}, "priorities[1].max_error: even"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), BAD)
def test_bad_input_gets_one_line_naming_the_field(
    tmp_path: Path, dotted: str, value: Any, message: str
) -> None:
    document = copy.deepcopy(base_document())
    set_path(document, dotted, value)
    with pytest.raises(UserError) as caught:
        run(write(tmp_path, document))
    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text


def test_wave_model_requires_its_fields(tmp_path: Path) -> None:
    document = base_document()
    document["model"] = "wave"
    with pytest.raises(UserError, match=r"priorities\[0\]\.map_waves: required"):
        run(write(tmp_path, document))


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        run(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("slots: [1, 2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"the file: not valid YAML: .* \(line 2, column 1\)$"):
        run(broken)
    # read by the job specs' loader (plumbing.spec_text): PyYAML alone would keep the last "slots"
    twice = tmp_path / "twice.yaml"
    twice.write_text("slots: 4\nslots: 8\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"slots: duplicate key \(line 2; first at line 1\)$"):
        run(twice)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n", encoding="utf-8")
    with pytest.raises(UserError, match="the file: must be a mapping"):
        run(scalar)
