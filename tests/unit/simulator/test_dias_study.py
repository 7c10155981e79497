"""The DiAS study in the simulator: the product's dispatch, dropping and sprinting on two
priorities, and the model it is compared with."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from simulator.dias_study import (
    CONFIGS,
    DiasRow,
    DiasSimulation,
    limited_timeout,
    model_comparison,
    run_study,
)
from simulator.engine import SimSettings
from simulator.workload import Workload, parse_workload
from sluice.cli import main

# Low-priority jobs arrive first and keep the 4-slot cluster busy; high-priority ones arrive
# while they run, so the preemptive baseline evicts.
WORKLOAD = """\
seed: 5
classes:
  - name: high
    priority: 1
    arrival: {process: poisson, rate: 0.01, count: 6, start: 20}
    phases:
      - {name: map, tasks: 10, cpu: 1, memory_mb: 256, droppable: true,
         duration: {distribution: exponential, mean: 5}}
      - {name: reduce, after: [map], tasks: 2, cpu: 1, memory_mb: 256,
         duration: {distribution: exponential, mean: 2}}
  - name: low
    priority: 0
    arrival: {process: poisson, rate: 0.02, count: 10}
    phases:
      - {name: map, tasks: 10, cpu: 1, memory_mb: 256, droppable: true,
         duration: {distribution: exponential, mean: 5}}
      - {name: reduce, after: [map], tasks: 2, cpu: 1, memory_mb: 256,
         duration: {distribution: exponential, mean: 2}}
"""
SETTINGS = SimSettings(nodes=2, node_cpu=2.0, node_memory_mb=4096, sample_interval=5.0)


@dataclass(frozen=True)
class Study:
    workload: Workload
    rows: list[DiasRow]
    simulations: dict[str, DiasSimulation]

    @property
    def by_name(self) -> dict[str, DiasRow]:
        return {r.name: r for r in self.rows}


@pytest.fixture(scope="module")
def study() -> Study:
    workload = parse_workload(yaml.safe_load(WORKLOAD))
    rows, simulations = run_study(workload.generate(5), SETTINGS, 5, factor=2.5)
    return Study(workload, rows, simulations)


def test_every_configuration_finishes_every_job(study: Study) -> None:
    rows = study.by_name
    assert set(rows) == {c.name for c in CONFIGS}
    assert all(r.unfinished == 0 and r.high.jobs == 6 and r.low.jobs == 10 for r in rows.values())


def test_only_the_preemptive_baseline_wastes_work(study: Study) -> None:
    rows = study.by_name
    assert rows["P"].waste > 0
    assert all(r.waste == 0 for name, r in rows.items() if name != "P")


@pytest.mark.parametrize(
    ("config", "low_error"), [("NP", 0.0), ("DA(0,10)", 0.085), ("DA(0,20)", 0.15)]
)
def test_low_priority_results_carry_the_expected_error_of_their_drop_ratio(
    study: Study, config: str, low_error: float
) -> None:
    rows = study.by_name
    assert rows[config].low.expected_error == pytest.approx(low_error)
    assert rows[config].high.expected_error == 0.0


def test_sprinting_shortens_high_priority_executions(
    study: Study,
) -> None:
    rows = study.by_name
    unlimited, limited, plain = (
        rows[n] for n in ("DiAS(0,20) unlimited", "DiAS(0,20) limited", "DA(0,20)")
    )
    # Unlimited: each job sprints from its first task to its end, spending only while tasks
    # run (not while its job master starts, nor between its phases).
    assert 0.5 < unlimited.sprinted_share < 1.0
    core = study.simulations["DiAS(0,20) unlimited"].core
    for record in core.sprints.history:
        assert record.started_at > core.job(record.job_id).execution.dispatched_at  # (T = 0)
        assert record.why == "the job left execution"
        assert 0 < record.sprinted_s < record.ended_at - record.started_at + 1e-9
    assert 0 < limited.sprinted_share < unlimited.sprinted_share
    assert (
        unlimited.high.mean_execution_s
        < limited.high.mean_execution_s
        < plain.high.mean_execution_s
    )
    assert plain.sprinted_share == 0.0


def test_energy_while_executing_falls_with_waste_dropping_and_sprinting(study: Study) -> None:
    rows = study.by_name
    assert all(0 < r.execution_energy_mj <= r.energy_mj for r in rows.values())
    executing = {name: r.execution_energy_mj for name, r in rows.items()}
    assert executing["NP"] < executing["P"]  # no evicted work done again
    assert executing["DA(0,20)"] < executing["NP"]  # fewer tasks
    # A sprint runs f = 2 times faster at 1.5 times the power: less energy per execution.
    assert executing["DiAS(0,20) unlimited"] < executing["DA(0,20)"]


def test_the_model_is_set_from_the_same_workload(study: Study) -> None:
    comparisons = model_comparison(study.rows, study.simulations, study.workload.classes, slots=4)
    assert [c.name for c in comparisons] == ["NP", "DA(0,10)", "DA(0,20)"]
    assert all(math.isfinite(c.predicted_high) and c.predicted_high > 0 for c in comparisons)
    # Dropping shortens the low-priority jobs: the model says so too.
    assert comparisons[2].predicted_low < comparisons[0].predicted_low


def test_the_command_writes_the_table_and_the_plot(tmp_path: Path) -> None:
    workload = tmp_path / "dias.yaml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "out"
    code = main(
        [
            "sim",
            "dias",
            str(workload),
            "--nodes",
            "2",
            "--config",
            "P",
            "--config",
            "NP",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    table = (out / "dias.md").read_text()
    assert table.splitlines()[1].startswith("CONFIG") and "\nP " in table and "\nNP " in table
    assert "sluice model dias" in table
    assert (out / "dias.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("configs", "compared"),
    [
        (["P"], []),  # the model covers none of them: said in the table, not a KeyError
        (["DA(0,20)"], ["DA(0,20)"]),  # the stages measured from the DA run instead of NP's
        (["P", "DA(0,10)", "DiAS(0,20) unlimited"], ["DA(0,10)"]),
    ],
)
def test_a_selection_without_np_writes_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], configs: list[str], compared: list[str]
) -> None:
    workload = tmp_path / "dias.yaml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "out"
    selection = [argument for name in configs for argument in ("--config", name)]
    code = main(["sim", "dias", str(workload), "--nodes", "2", *selection, "--out", str(out)])
    assert code == 0
    results = json.loads((out / "dias.json").read_text())
    assert [row["name"] for row in results["rows"]] == configs
    assert all(row["unfinished"] == 0 for row in results["rows"])
    assert [c["name"] for c in results["model"]] == compared
    assert (out / "dias.md").exists() and (out / "dias.png").exists()
    if not compared:
        assert "no model comparison: the model covers NP" in (out / "dias.md").read_text()
    assert "results in" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("execution", "factor", "share"), [(60.0, 2.5, 0.35), (100.0, 3.0, 0.35), (40.0, 2.0, 0.5)]
)
def test_the_limited_timeout_makes_a_mean_job_run_sprinted_for_its_share(
    execution: float, factor: float, share: float
) -> None:
    timeout = limited_timeout(execution, factor, share)
    sprinted = (execution - timeout) / factor
    assert 0 < timeout < execution
    assert sprinted / (timeout + sprinted) == pytest.approx(share)
