"""The slot-reservation experiments on a small cluster: the same core and job master as the
live system, the locality model on (docs/reservation.md)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml

from simulator.engine import SimSettings
from simulator.reservation_study import (
    format_isolation,
    format_stragglers,
    redraw_pareto,
    run_isolation,
    run_stragglers,
)
from simulator.workload import parse_workload
from sluice.cli import main

# A foreground pipeline beside background jobs whose long tasks would take every slot its
# tasks free: 2 nodes of 4 slots.
WORKLOAD = """\
seed: 5
classes:
  - name: batch
    priority: 0
    arrival: {process: fixed, times: [3, 3, 3, 4, 4, 4, 5, 5]}
    phases:
      - {name: work, tasks: 4, cpu: 1, memory_mb: 256, duration: 60}
  - name: fg
    priority: 10
    arrival: {process: fixed, times: [0]}
    phases:
      - {name: a, tasks: 4, cpu: 1, memory_mb: 256, duration: {distribution: empirical, values: [5, 10, 15, 20]}}
      - {name: b, after: [a], tasks: 4, cpu: 1, memory_mb: 256, duration: 10}
"""


def jobs():
    return parse_workload(yaml.safe_load(WORKLOAD)).generate(5)


BASE = SimSettings(nodes=2, node_cpu=4, node_memory_mb=8192, client_mode=True)


def test_reservation_isolates_the_foreground_and_the_table_shows_every_configuration():
    rows = run_isolation(jobs(), BASE, 5)
    by_config = {row.config: row for row in rows}
    assert list(by_config) == ["none", "R=1.0", "R=0.8", "R=0.5"]
    # without: the batch tasks take the slots a frees, and b waits for them
    assert by_config["none"].slowdown["fg"] > 1.2
    assert by_config["R=1.0"].slowdown["fg"] == pytest.approx(1.0, abs=0.05)
    assert by_config["R=1.0"].nonlocal_share["fg"] == 0.0
    table = format_isolation(rows, 2, 4)
    assert "| none |" in table and "| R=0.5 |" in table


def test_redrawn_task_times_keep_each_phases_mean_and_leave_the_background_alone():
    before = jobs()
    after = redraw_pareto(before, 1.6, 5, lambda job: job.spec.priority > 0)
    for old, new in zip(before, after, strict=True):
        if old.spec.priority == 0:
            assert new == old
            continue
        assert set(new.copy_durations) == set(new.durations) == set(old.durations)
        for phase, times in new.durations.items():
            t_min = statistics.fmean(old.durations[phase]) * 0.6 / 1.6
            assert min(times) >= t_min and min(new.copy_durations[phase]) >= t_min


def test_copies_on_kept_slots_cut_the_foregrounds_completion_time():
    (row,) = run_stragglers(jobs(), BASE, 5, alphas=(1.2,))
    assert row.with_s < row.without_s
    assert row.reduction > 0 and "| 1.2 |" in format_stragglers([row])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--alpha", "1"], "--alpha: must be above 1"),
        (["--locality-factor", "0.5"], "locality_factor: must be at least 1"),
        (["--locality-wait", "-1"], "--locality-wait: must not be negative"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
):
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    assert main(["sim", "reservation", str(workload), "--nodes", "2", *extra]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_command_writes_tables_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "out"
    args = [
        "sim",
        "reservation",
        str(workload),
        "--nodes",
        "2",
        "--alpha",
        "1.6",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} == {
        "isolation-2.md",
        "isolation-2.png",
        "isolation-utilisation.png",
        "reservation-2.json",
        "stragglers-2.md",
        "stragglers-2.png",
    }
    assert "R=0.5" in capsys.readouterr().out


def test_a_workload_whose_jobs_are_refused_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A job the RM refuses has no time to compare: the study says which and why, instead
    of a KeyError after every simulation."""
    workload = tmp_path / "w.yaml"
    workload.write_text(
        WORKLOAD.replace("    priority: 0\n", "    priority: 0\n    queue: nightly\n")
    )
    assert main(["sim", "reservation", str(workload), "--nodes", "2", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sluice: error: workload: job batch-") and "nightly" in err[-1]
    assert not any("Traceback" in line for line in err)
