"""``sluice model filter SNAPSHOT.json``: output and one-line errors naming the field."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from plumbing.errors import UserError
from sluice.model import filter as filter_model

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "model" / "filter_snapshot.json"


def run(path: Path, *flags: str) -> int:
    parser = argparse.ArgumentParser()
    filter_model.register(parser.add_subparsers())
    args = parser.parse_args(["filter", str(path), *flags])
    result: int = args.handler(args)
    return result


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def example() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    return document


def test_example_reports_every_phase_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(EXAMPLE, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in report["candidates"]] == ["node-02", "node-01"]
    phases = {item["name"]: item["phase"] for item in report["left_out"]}
    assert phases == {
        "node-03": "not_shortest_queue",
        "node-04": "not_least_loaded",
        "node-05": "disconnected",
        "node-06": "high_cpi",
        "node-07": "overloaded",
        "node-08": "low_rating",
    }
    overloaded = next(i for i in report["left_out"] if i["name"] == "node-07")
    assert overloaded["dimension"] == "disk_ut" and overloaded["limit"] == 0.6
    assert report["mode"] == "rp" and report["prefilter_size"] == 3


def test_text_output_names_candidates_and_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(EXAMPLE) == 0
    out = capsys.readouterr().out
    assert "1. node-02" in out
    assert "node-07  B3 overloaded: disk_ut" in out
    assert "node-05  B2 disconnected" in out


def test_mode_flag_switches_off_b0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(EXAMPLE, "--mode", "up", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert "high_cpi" not in {item["phase"] for item in report["left_out"]}
    assert report["candidates"][0]["name"] == "node-06"


def _set(document: dict[str, Any], path: str, value: Any) -> None:
    target: Any = document
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("mode", "fast", "mode: expected one of up, rp"),
        ("machines", [], "machines: need at least one machine"),
        ("color", 1, "snapshot.color: unknown field"),
        ("config.candidate_limit", 0, "config.candidate_limit: must be a positive integer"),
        ("config.candidate_limit", 1.5, "config.candidate_limit: expected an integer"),
        ("config.load_weights", {"gpu": 1}, "config.load_weights.gpu: unknown field"),
        ("config.load_thresholds", {"disk_ut": -1}, "config.load_thresholds.disk_ut: must be"),
        ("machines.1.name", "node-01", "machines[1].name: duplicate machine 'node-01'"),
        ("machines.0.load.cpu_ut", _DELETE, "machines[0].load.cpu_ut: missing"),
        ("machines.0.load.cpu_ut.2", "high", "machines[0].load.cpu_ut[2]: expected a number"),
        ("machines.0.load.cpu_ut", [], "machines[0].load.cpu_ut: expected at least one sample"),
        ("machines.0.queue", [1, 2], "machines[0].queue: expected an object"),
        ("machines.0.capacity.load_avg_1", 0, "machines[0].capacity.load_avg_1: must be > 0"),
        ("machines.0.connected", "yes", "machines[0].connected: expected true or false"),
        ("machines.0.rating", None, "machines[0].rating: expected a number"),
        ("machines.0.cpi", 1.1, "machines[0].cpi: expected a list"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(
    tmp_path: Path, path: str, value: Any, message: str
) -> None:
    document = copy.deepcopy(example())
    _set(document, path, value)
    with pytest.raises(UserError) as error:
        run(write(tmp_path, document))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("content", "message"), [("{", "not JSON"), ("[]", "snapshot: expected an object")]
)
def test_unreadable_snapshots(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        run(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        run(tmp_path / "absent.json")


def test_ragged_windows_and_missing_samples_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = example()
    document["machines"][0]["load"]["cpu_ut"] = [0.2, None, 0.21]
    del document["machines"][1]["cpi"]
    assert run(write(tmp_path, document), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["machines"] == 8
