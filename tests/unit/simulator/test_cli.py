"""`sluice sim`: run, compare and import, as an operator uses them."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from sluice.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
WORKLOAD = """\
seed: 3
classes:
  - name: batch
    priority: 0
    arrival: {process: poisson, rate: 1.0, count: 12}
    phases:
      - {name: map, tasks: 3, cpu: 1, memory_mb: 512, duration: 8}
      - {name: reduce, after: [map], tasks: 1, cpu: 1, memory_mb: 512, duration: 4}
  - name: urgent
    priority: 5
    arrival: {process: fixed, times: [2, 4]}
    phases:
      - {name: work, tasks: 2, cpu: 2, memory_mb: 1024, duration: 6}
"""


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(WORKLOAD)
    return path


def test_run_writes_the_results_and_prints_the_summary(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "results"
    assert main(["sim", "run", str(workload), "--nodes", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "priority" in printed.out and "all" in printed.out and str(out) in printed.out
    assert "jobs 14/14" in printed.err  # the progress line ends with every job done
    written = {p.name for p in out.iterdir()}
    assert {"jobs.csv", "jobs.json", "summary.json", "summary.txt"} <= written
    assert {"completion_cdf.png", "utilisation.png"} <= written
    jobs = json.loads((out / "jobs.json").read_text())
    assert len(jobs) == 14 and all(j["state"] == "succeeded" for j in jobs)
    meta = json.loads((out / "summary.json").read_text())["meta"]
    assert (meta["seed"], meta["settings"]["nodes"]) == (3, 3)


def test_run_json_prints_the_summary_only(workload: Path, tmp_path: Path, capsys):
    args = ["sim", "run", str(workload), "--out", str(tmp_path / "r"), "--json", "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr()
    summary = json.loads(printed.out)
    assert summary and printed.err == ""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--set", "warp_speed=9"], "--set warp_speed: unknown setting"),
        (["--set", "nodes"], "--set 'nodes': expected KEY=VALUE"),
        (["--set", "round_interval=fast"], "--set round_interval: expected a number"),
        (["--set", "client_mode=maybe"], "--set client_mode: expected true or false"),
        (["--nodes", "0"], "settings: nodes: must be at least 1"),
    ],
)
def test_bad_settings_are_one_line_errors(workload: Path, capsys, extra: list[str], expected: str):
    assert main(["sim", "run", str(workload), "--no-progress", *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("classes: []\nbogus: 1\n", "bogus"),
        ("classes:\n  - name: a\n    priority: 0\n", "classes[0]"),
        ("{{{{", "line"),
    ],
)
def test_a_bad_workload_file_is_a_one_line_error(tmp_path: Path, capsys, text: str, expected: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["sim", "run", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and str(path) in err


def test_a_missing_workload_file_is_a_one_line_error(tmp_path: Path, capsys):
    assert main(["sim", "run", str(tmp_path / "none.yaml"), "--no-progress"]) == 2
    assert "none.yaml" in capsys.readouterr().err


def test_compare_runs_each_configuration_into_one_table(workload: Path, tmp_path: Path, capsys):
    out = tmp_path / "cmp"
    args = [
        "sim", "compare", str(workload), "--no-progress", "--nodes", "2", "--out", str(out),
        "--config", "baseline", "--config", "bigger:nodes=6",
    ]  # fmt: skip
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "baseline" in table and "bigger" in table
    assert {"comparison.txt", "comparison.json", "comparison.png"} <= {
        p.name for p in out.iterdir()
    }


def test_imported_google_trace_runs(tmp_path: Path, capsys):
    trace = tmp_path / "google.csv"
    args = [
        "sim", "import", "google",
        "--job-events", str(FIXTURES / "google_job_events.csv"),
        "--task-events", str(FIXTURES / "google_task_events.csv"),
        "--machine-cpu", "16", "--machine-memory-mb", "65536", "-o", str(trace),
    ]  # fmt: skip
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out
    run = ["sim", "run", str(trace), "--no-progress", "--out", str(tmp_path / "r"), "--json"]
    assert main(run) == 0
    assert json.loads(capsys.readouterr().out)


QUEUES = "default: long\nqueues:\n  short: {share: 0.9}\n  long: {share: 0.1, mode: kill}\n"
DIAS = "priorities:\n  - {priority: 0, name: low, drop_ratio: 0.2}\n"
RESERVATION = "{isolation: 0.8}\n"


@pytest.mark.parametrize(
    ("command", "setting", "files", "recorded"),
    [
        ("run", "dispatch=dias", {}, ("core", "dispatch", "dias")),
        ("run", "dispatch=preemptive", {}, ("core", "dispatch", "preemptive")),
        ("run", "queues=q.yaml", {"q.yaml": QUEUES}, ("settings", "queues", "long")),
        ("run", "dias=d.yaml", {"d.yaml": DIAS}, ("core", "dias", "low")),
        (
            "run",
            "default_reservation=r.yaml",
            {"r.yaml": RESERVATION},
            ("core", "default_reservation", "0.8"),
        ),
        ("run", "queues=none", {}, ("settings", "queues", "None")),
        ("compare", "dispatch=dias", {}, ()),
        ("compare", "queues=q.yaml", {"q.yaml": QUEUES}, ()),
    ],
)
def test_structured_settings_are_taken_from_files_and_words(
    workload: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    setting: str,
    files: dict[str, str],
    recorded: tuple[str, ...],
):
    """--set takes every setting docs/simulator.md lists: the RM's queue file, DiAS settings
    and default reservation as a file path (as `sluice rm` takes them), the dispatch mode as
    its name.  They used to end in AttributeError."""
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    out = tmp_path / "out"
    if command == "run":
        args = ["sim", "run", str(workload), "--set", setting]
    else:  # a configuration's change, and --set for all of them
        args = ["sim", "compare", str(workload), "--config", f"mine:{setting}", "--config", "base"]
    assert main([*args, "--nodes", "3", "--no-progress", "--out", str(out)]) == 0
    if command == "run":
        section, key, shown = recorded
        meta = json.loads((out / "summary.json").read_text())["meta"]
        assert shown in str(meta[section][key])
    else:
        assert "mine" in json.loads((out / "comparison.json").read_text())["meta"]["configs"][0]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("dispatch=fifo", "--set dispatch: expected one of priority, dias, preemptive, got 'fifo'"),
        ("queues=missing.yaml", "--set queues: missing.yaml: no such file"),
        ("queues=bad.yaml", "--set queues: bad.yaml: queues.long.share"),
        ("dias=bad.yaml", "--set dias: bad.yaml:"),
        ("dias=", "--set dias: expected a file path"),
        ("default_reservation=bad.yaml", "--set default_reservation: bad.yaml:"),
        ("dispatch=dias,client_mode=true", "client_mode: job masters outside the cluster"),
    ],
)
def test_bad_structured_settings_are_one_line_errors(
    workload: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, setting, expected
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("default: long\nqueues:\n  long: {share: 1.5}\n")
    sets = [argument for change in setting.split(",") for argument in ("--set", change)]
    assert main(["sim", "run", str(workload), "--no-progress", *sets]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


STUDY_WORKLOAD = """\
seed: 2
classes:
  - name: short
    priority: 5
    queue: short
    arrival: {process: fixed, times: [3, 6]}
    phases:
      - {name: a, tasks: 2, cpu: 1, memory_mb: 512, duration: 4}
      - {name: b, after: [a], tasks: 2, cpu: 1, memory_mb: 512, duration: 2}
  - name: long
    priority: 0
    queue: long
    arrival: {process: fixed, times: [0, 1]}
    phases:
      - {name: a, tasks: 3, cpu: 1, memory_mb: 512, duration: 20}
"""


@pytest.mark.parametrize(
    ("command", "written", "keys"),
    [
        (["bigc", "--nodes", "2", "--node-cpu", "4", "--policy", "fifo", "--policy", "reserve"],
         "bigc-2.json", {"meta", "rows"}),
        (["reservation", "--nodes", "2", "--study", "isolation"],
         "reservation-2.json", {"meta", "isolation"}),
    ],
)  # fmt: skip
def test_the_studies_write_their_results_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], written: str, keys
):
    """The studies' tables round to whole seconds; their JSON holds every figure, written
    beside them and printed with --json (as sim run's)."""
    workload = tmp_path / "study.yaml"
    text = STUDY_WORKLOAD
    if command[0] != "bigc":  # (no queue file there: jobs naming a queue would be refused)
        text = "\n".join(line for line in text.splitlines() if "queue:" not in line)
    workload.write_text(text)
    out = tmp_path / "out"
    assert main(["sim", command[0], str(workload), *command[1:], "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == keys and printed["meta"]["seed"] == 2
    assert json.loads((out / written).read_text()) == printed
    if command[0] == "bigc":
        assert [row["policy"] for row in printed["rows"]] == ["fifo", "reserve"]
        jobs = json.loads((out / "bigc-2-jobs.json").read_text())
        assert [len(jobs[p]) for p in ("fifo", "reserve")] == [4, 4]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_reader_that_leaves_early_ends_the_command_quietly(
    workload: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, json_flag: list[str]
):
    """`sluice sim ... | head`: stdout's reader is gone before the results are printed.  The
    command ends without a traceback, and nothing is left to fail at the interpreter's exit."""
    capsys.readouterr()
    read, write = os.pipe()
    os.close(read)  # (the reader left)
    stdout = io.TextIOWrapper(os.fdopen(write, "wb"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        args = ["sim", "run", str(workload), "--no-progress", "--out", str(tmp_path / "r")]
        code = main([*args, *json_flag])
        stdout.flush()  # what the interpreter does at exit: fails if output is still due
    finally:
        monkeypatch.undo()
    stdout.close()
    assert code == 141
    assert (tmp_path / "r" / "summary.json").exists()
    assert "Traceback" not in capsys.readouterr().err
