"""`sluice model preempt SNAPSHOT.json`, through a tiny parser, on the documented example."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from plumbing.errors import UserError
from policies.preemption.settings import PreemptionSettings
from sluice.cli import main
from sluice.model import preempt

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "model" / "preempt_snapshot.json"
DOCS = ROOT / "docs" / "model" / "preempt.md"
PAPER = PreemptionSettings()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser()
    preempt.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    return capsys.readouterr().out


def example() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return doc


def write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_example_graceful_plan(capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads(run(["preempt", str(EXAMPLE), "--json"], capsys))
    long_ = report["queues"][0]
    assert report["mode"] == "graceful"
    assert long_["over_provisioned"] == {"cpu": 10.0, "memory_mb": 15360.0}
    # the worked example's proportions: CPU dominant, memory as 10 CPU x 10240/20 MB per CPU
    assert long_["preempt"] == {"cpu": 10.0, "memory_mb": 5120.0}
    assert long_["reclaimed"] == pytest.approx({"cpu": 10.0, "memory_mb": 5120.0})
    actions = {a["container"]: a["action"] for a in long_["actions"]}
    assert actions == {"spark-exec-1": "shrink", "spark-exec-2": "freeze", "spark-exec-3": "shrink"}
    assert report["queues"][1]["actions"] == []
    # amounts stay JSON floats, as they were before memory became whole MiB in the policy
    assert isinstance(long_["preempt"]["memory_mb"], float)
    assert long_["dominant"] == "cpu"
    # the swapping executor is frozen and gives back its CPU above the footprint (Sec. 4.2)
    assert long_["actions"][0]["reclaimed"] == pytest.approx({"cpu": 5.99, "memory_mb": 0.0})
    assert long_["actions"][0]["limits"] == [{"resource": "cpu", "limit": 0.01}]
    assert long_["actions"][1]["limits"] == [
        {"resource": "cpu", "limit": 3.99},
        {"resource": "memory_mb", "limit": 8192.0},
    ]


@pytest.mark.parametrize(
    ("mode", "preempt", "actions", "reclaimed"),
    [
        # the worked example: kill and IP reclaim p = a (Alg. 1 line 9 of the capacity
        # scheduler) and take spark-exec-1 then spark-exec-2, until CPU (dominant) is reclaimed,
        # past a (Alg. 2 lines 4-8); the suspended mr-reduce-3 is never chosen
        (
            "kill",
            {"cpu": 10.0, "memory_mb": 15360.0},
            [("spark-exec-1", "kill"), ("spark-exec-2", "kill")],
            {"cpu": 12.0, "memory_mb": 24576.0},
        ),
        (
            "immediate",
            {"cpu": 10.0, "memory_mb": 15360.0},
            [("spark-exec-1", "suspend"), ("spark-exec-2", "suspend")],
            {"cpu": 11.98, "memory_mb": 24448.0},
        ),
        (
            "graceful",
            {"cpu": 10.0, "memory_mb": 5120.0},
            [("spark-exec-2", "freeze"), ("spark-exec-1", "shrink"), ("spark-exec-3", "shrink")],
            {"cpu": 10.0, "memory_mb": 5120.0},
        ),
    ],
)
def test_example_plan_per_mode(
    mode: str,
    preempt: dict[str, float],
    actions: list[tuple[str, str]],
    reclaimed: dict[str, float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = json.loads(run(["preempt", str(EXAMPLE), "--mode", mode, "--json"], capsys))
    long_ = report["queues"][0]
    assert long_["preempt"] == preempt
    assert [(a["container"], a["action"]) for a in long_["actions"]] == actions
    assert long_["reclaimed"] == pytest.approx(reclaimed)
    assert long_["satisfied"] is True


def test_text_output_is_the_documented_one(capsys: pytest.CaptureFixture[str]) -> None:
    prompt = "$ sluice model preempt examples/model/preempt_snapshot.json\n"
    documented = DOCS.read_text().split(prompt, 1)[1].split("```", 1)[0]
    assert run(["preempt", str(EXAMPLE)], capsys) == documented


def test_fractional_mib_is_reported_rounded_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "capacity": [10, 1001],
        "queues": [
            {"name": "long", "fair_share": 0.5, "allocation": [10, 1001.0]},
            {"name": "short", "fair_share": 0.5, "allocation": [0, 0], "demand": [10, 201]},
        ],
        "containers": [
            {"id": "c", "job": "j", "queue": "long", "resources": [10, 1001], "remaining_time": 9}
        ],
    }
    long_ = json.loads(run(["preempt", write(tmp_path, doc), "--json"], capsys))["queues"][0]
    # fair memory 500.5 MiB: a = 500.5 -> 501 and p = 100.5 -> 101 (never less than the target)
    assert long_["over_provisioned"] == {"cpu": 5.0, "memory_mb": 501.0}
    assert long_["preempt"] == {"cpu": 5.0, "memory_mb": 101.0}
    assert long_["reclaimed"] == {"cpu": 5.0, "memory_mb": 101.0}


@pytest.mark.parametrize(
    ("mode", "kind"), [("kill", "kill"), ("immediate", "suspend"), ("graceful", "shrink")]
)
def test_mode_flag_overrides_the_snapshot(
    mode: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(["preempt", str(EXAMPLE), "--mode", mode], capsys)
    assert out.startswith(f"mode: {mode}\n")
    assert f"  {kind} " in out


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = example()
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("capacity", [40], "capacity: expected 2 numbers (one per resource), got 1"),
        ("capacity", KeyError, "capacity: expected a list"),
        ("capacity.1", "lots", 'capacity[1]: expected a number, got "lots"'),
        ("mode", "gentle", 'mode: expected one of kill, graceful, immediate, got "gentle"'),
        ("queues.0.fair_share", 1.5, "queues[0].fair_share: must be a fraction in [0, 1]"),
        ("queues.1.name", "long", "queues[1].name: duplicate queue 'long'"),
        ("queues.0.allocation", [1, 2, 3], "queues[0].allocation: expected 2 numbers"),
        ("queues.0.demand.0", -1, "queues[0].demand[0]: must be >= 0"),
        ("queues.0.weight", 2, "queues[0].weight: unknown field"),
        ("containers.2.queue", "batch", "containers[2].queue: unknown queue 'batch'"),
        ("containers.1.id", "spark-exec-1", "containers[1].id: duplicate container 'spark-exec-1'"),
        ("containers.0.swapping", "yes", "containers[0].swapping: expected true or false"),
        ("containers.0.remaining_time", None, "containers[0].remaining_time: expected a number"),
        ("containers.0.job", "", "containers[0].job: expected a non-empty string"),
        ("settings.graceful_step", [0, 0], "settings.graceful_step: at least one value"),
        ("settings.throttle_first", "gpu", "settings.throttle_first: 'gpu' is not one"),
        ("settings.resume_after_offers", -1, "settings.resume_after_offers: expected an integer"),
        ("settings.minimal_footprint.1", 64.5, "settings.minimal_footprint[1]: expected a whole"),
        ("capacity.1", 61440.5, "capacity[1]: expected a whole number of MiB, got 61440.5"),
        ("containers.0.resources.1", 1.5, "containers[0].resources[1]: expected a whole number"),
        ("queues.1.demand.1", True, "queues[1].demand[1]: expected a number, got true"),
        ("resources", "cpu", "resources: expected a list"),
        ("resources", ["cpu", "cpu"], 'resources: must be ["cpu", "memory_mb"] (cpu cores, memory'),
        ("resources", ["memory_mb", "cpu"], 'resources: must be ["cpu", "memory_mb"]'),
        ("resources", ["cores", "ram_gb"], 'resources: must be ["cpu", "memory_mb"]'),
        ("resources", ["cpu", "memory_mb", "gpu"], 'resources: must be ["cpu", "memory_mb"]'),
        ("extra", 1, "snapshot.extra: unknown field"),
    ],
)
def test_bad_snapshot_gives_one_line_naming_the_field(
    path: str, value: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write(tmp_path, mutate(path, value))
    with pytest.raises(UserError) as caught:
        run(["preempt", snapshot], capsys)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_resources_and_settings_may_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = copy.deepcopy(example())
    del doc["resources"]
    del doc["settings"]
    doc["capacity"] = [40.0, 61440.0]  # a whole number of MiB may be written as a float
    assert run(["preempt", write(tmp_path, doc)], capsys) == run(["preempt", str(EXAMPLE)], capsys)


def test_unreadable_and_malformed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="cannot read"):
        run(["preempt", str(tmp_path / "missing.json")], capsys)
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    with pytest.raises(UserError, match="not JSON"):
        run(["preempt", str(broken)], capsys)
    with pytest.raises(UserError, match=r"^snapshot: expected an object"):
        run(["preempt", write(tmp_path, [1, 2])], capsys)


@pytest.mark.parametrize(
    "omitted",
    [
        ["settings"],
        ["settings.minimal_footprint"],
        ["settings.graceful_step"],
        ["settings.throttle_first"],
        ["settings.resume_after_offers"],
        ["settings", "mode", "resources"],
    ],
)
@pytest.mark.parametrize("mode", ["kill", "immediate", "graceful"])
def test_the_cli_entry_point_applies_the_paper_defaults_to_omitted_settings(
    omitted: list[str], mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the example spells out the paper's values (settings.py), so leaving any of them out, through
    # the `sluice` command itself, must give the same plan
    assert example()["settings"] == {
        "minimal_footprint": [PAPER.minimal_footprint.cpu, PAPER.minimal_footprint.memory_mb],
        "graceful_step": [PAPER.graceful_step.cpu, PAPER.graceful_step.memory_mb],
        "throttle_first": PAPER.throttle_first,
        "resume_after_offers": PAPER.resume_after_offers,
    }
    doc = example()
    for path in omitted:
        doc = mutate_doc(doc, path)
    assert main(["model", "preempt", str(EXAMPLE), "--mode", mode, "--json"]) == 0
    expected = capsys.readouterr().out
    assert main(["model", "preempt", write(tmp_path, doc), "--mode", mode, "--json"]) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (expected, "")


def mutate_doc(doc: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[key]
    del node[last]
    return doc
