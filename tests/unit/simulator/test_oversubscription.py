"""Speculative oversubscription in the simulator (ROSE): the same job masters and node-queue
decisions as the live system, on a small cluster whose jobs ask for more than it has."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from policies.oversubscription.config import OversubscriptionConfig
from simulator.engine import SimSettings
from simulator.oversubscription import OversubscribedSimulation, OversubscriptionSettings
from simulator.rose_study import format_rows, run_colocation, run_placement
from simulator.workload import SimJob, parse_workload
from sluice.cli import main

# Jobs of 1-cpu tasks that use a third of what they hold, on 4 nodes of 4 cpu: the asks wait,
# and the idle cores are there for speculative tasks.
WORKLOAD = """\
seed: 3
classes:
  - name: batch
    priority: 0
    arrival: {process: fixed, times: [0, 0, 1, 1, 2, 2, 3, 3]}
    phases:
      - {name: map, tasks: 8, cpu: 1, memory_mb: 256, duration: 30}
"""
SETTINGS = SimSettings(nodes=4, node_cpu=4.0, node_memory_mb=8192, client_mode=True)
BASE = OversubscriptionSettings(usage_low=0.3, usage_high=0.3, hot_fraction=0.0)


def jobs() -> list[SimJob]:
    return parse_workload(yaml.safe_load(WORKLOAD)).generate(3)


def run(**changes: object) -> OversubscribedSimulation:
    simulation = OversubscribedSimulation(jobs(), SETTINGS, 1, replace(BASE, **changes))  # type: ignore[arg-type]
    result = simulation.run()
    assert all(outcome.state == "succeeded" for outcome in result.outcomes)
    return simulation


def test_without_oversubscription_nothing_speculative_happens() -> None:
    assert run(placement="none").counts.placed == 0


@pytest.mark.parametrize("placement", ["random", "least-loaded", "shortest-queue", "rose"])
def test_speculative_tasks_use_idle_cores_and_shorten_the_makespan(placement: str) -> None:
    rows = run_placement(jobs(), SETTINGS, 1, BASE, ["none", placement])
    none, placed = rows
    assert placed.launched > 0
    assert placed.makespan < none.makespan
    assert placed.utilisation > none.utilisation


def test_a_run_is_deterministic() -> None:
    first, second = run(placement="rose"), run(placement="rose")
    assert first.counts == second.counts and first.used_samples == second.used_samples


def test_rp_evicts_beside_services_and_up_does_not() -> None:
    busy = replace(BASE, usage_low=1.0, usage_high=1.0, service_fraction=1.0)
    rows = {r.name: r for r in run_colocation(jobs(), SETTINGS, 1, busy)}
    assert rows["rose-UP"].evicted == 0
    assert rows["rose-RP"].evicted > 0
    assert rows["rose-RP"].latency_p95 < rows["rose-UP"].latency_p95
    assert rows["alone"].launched == 0
    table = format_rows(list(rows.values()), "co-location", "alone")
    assert "rose-RP" in table and "P95 LAT" in table


def test_the_command_writes_tables_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    code = main(
        [
            "sim",
            "oversubscription",
            str(workload),
            "--nodes",
            "4",
            "--node-cpu",
            "4",
            "--placement",
            "none",
            "--placement",
            "rose",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    for name in ("placement-4.md", "placement-4.png", "colocation-4.md", "colocation-4.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "VS RANDOM" in capsys.readouterr().out


def placement_argv(tmp_path: Path, placement: str, out: Path, *more: str) -> list[str]:
    """``sluice sim oversubscription`` of the small workload, one placement, into ``out``."""
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    argv = ["sim", "oversubscription", str(workload), "--nodes", "4", "--node-cpu", "4"]
    return [*argv, "--study", "placement", "--placement", placement, "--out", str(out), *more]


def test_configurations_run_as_separate_commands_make_one_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"

    def placement(name: str, *more: str) -> str:
        assert main(placement_argv(tmp_path, name, out, *more)) == 0
        return (out / "placement-4.md").read_text()

    placement("rose")
    table = placement("none")
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["none", "rose"]  # in order
    # A run under other settings starts its own table: rows never mix settings.
    table = placement("random", "--max-speculative", "2")
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["random"]
    assert len((out / "placement-4.jsonl").read_text().splitlines()) == 3
    capsys.readouterr()


def test_queue_timeout_and_unplaced_load_flags_are_part_of_a_runs_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(placement_argv(tmp_path, "none", out)) == 0
    more = ["--queue-timeout", "60", "--hot-fraction", "0.5", "--hot-load", "0.85,1.0"]
    assert main(placement_argv(tmp_path, "none", out, *more)) == 0
    lines = [json.loads(line) for line in (out / "placement-4.jsonl").read_text().splitlines()]
    assert "queue_timeout_s" not in lines[0]["settings"]  # defaults are not named
    assert {
        k: lines[1]["settings"][k] for k in ("queue_timeout_s", "hot_fraction", "hot_load")
    } == {
        "queue_timeout_s": 60.0,
        "hot_fraction": 0.5,
        "hot_load": [0.85, 1.0],
    }
    capsys.readouterr()


@pytest.mark.parametrize(
    ("interference", "regular", "speculative", "expected"),
    [
        # Everything fits: full speed.
        ("weighted", 4.0, 3.0, (1.0, 1.0)),
        ("shared", 4.0, 3.0, (1.0, 1.0)),
        # Oversubscribed, regular work fits: it keeps full speed, speculative work shares
        # the 2 cores it leaves.
        ("weighted", 6.0, 4.0, (1.0, 0.5)),
        ("shared", 6.0, 4.0, (0.8, 0.8)),
        # Regular work alone exceeds the node: speculative tasks keep their weight's share.
        ("weighted", 10.0, 2.0, (0.8, 0.1 * 8.0 / (10.0 + 0.1 * 2.0))),
        ("shared", 10.0, 2.0, (8.0 / 12.0, 8.0 / 12.0)),
        # No speculative task: regular work past capacity slows alike in both.
        ("weighted", 10.0, 0.0, (0.8, 1.0)),
    ],
)
def test_interference_models(
    interference: str, regular: float, speculative: float, expected: tuple[float, float]
) -> None:
    from simulator.oversubscription import _NodeState, _Speculative

    state = _NodeState(0, 8.0, regular_usage=regular)
    if speculative:
        state.running["x"] = _Speculative(None, "t-0", 0, None, speculative, 1.0, 0.0)  # type: ignore[arg-type]
    assert state.factors(interference) == pytest.approx(expected)


def test_a_bounded_job_master_places_fewer_speculative_tasks() -> None:
    free = run(placement="random")
    bounded = run(placement="random", max_speculative=1)
    assert 0 < bounded.counts.placed < free.counts.placed
    with pytest.raises(ValueError, match="max_speculative"):
        replace(BASE, max_speculative=0).check()
    with pytest.raises(ValueError, match="interference"):
        replace(BASE, interference="magic").check()


@pytest.mark.parametrize(
    ("demand", "expected"),
    [
        (0.0, 0.0),  # nothing runs: nothing waits
        (1.0, math.nan),  # one core of two: Erlang C (c=2, a=1), computed below
        (2.0, 100.0),  # every core busy: work always waits
        (3.5, 100.0),
    ],
)
def test_cpu_pressure_is_the_chance_work_waits_for_a_core(demand: float, expected: float) -> None:
    from simulator.oversubscription import cpu_pressure
    from simulator.queueing import erlang_c

    if 0 < demand < 2:
        expected = 100 * erlang_c(2, demand)
    assert cpu_pressure(2.0, demand) == pytest.approx(expected)


def test_rp_throttles_what_raises_a_services_pressure_over_its_history() -> None:
    from simulator.oversubscription import _NodeState, _Speculative

    state = _NodeState(0, 8.0, service=True, regular_usage=3.0)
    assert state.pressure_over_history() == 0.0
    state.running["x"] = _Speculative(None, "t-0", 0, None, 0.2, 1.0, 0.0)  # type: ignore[arg-type]
    small = state.pressure_over_history()
    state.running["y"] = _Speculative(None, "t-1", 0, None, 3.0, 1.0, 0.0)  # type: ignore[arg-type]
    assert 0 < small < 3.0 < state.pressure_over_history()


def test_services_machines_carry_no_unplaced_load() -> None:
    simulation = OversubscribedSimulation(
        jobs(), SETTINGS, 1, replace(BASE, service_fraction=0.5, hot_fraction=1.0)
    )
    states = list(simulation._state.values())
    assert any(s.service for s in states) and any(not s.service for s in states)
    for state in states:
        if state.service:
            assert state.regular_usage == pytest.approx(BASE.service_cpu * BASE.service_usage)
        else:
            assert state.regular_usage >= SETTINGS.node_cpu * BASE.hot_load[0]


def test_each_run_reports_its_progress_under_its_name() -> None:
    seen: dict[str, int] = {}

    def watch(run: str, simulation: object) -> None:
        seen[run] = seen.get(run, 0) + 1

    run_placement(jobs(), SETTINGS, 1, BASE, ["none", "rose"], watch=watch)
    assert set(seen) == {"none", "rose"}


def test_a_colocation_run_may_be_one_configuration() -> None:
    rows = run_colocation(jobs(), SETTINGS, 1, BASE, names=("rose-RP",))
    assert [r.name for r in rows] == ["rose-RP"]


# Jobs whose tasks' memory, not their CPU, fills the nodes, then larger tasks of another class.
MEMORY_BOUND = """\
seed: 3
classes:
  - name: batch
    priority: 0
    arrival: {process: fixed, times: [0, 0, 1, 1, 2, 2, 3, 3, 20, 25, 30, 35]}
    phases:
      - {name: map, tasks: 8, cpu: 0.5, memory_mb: 1800, duration: 20}
  - name: big
    priority: 1
    arrival: {process: fixed, times: [25, 25]}
    phases:
      - {name: map, tasks: 4, cpu: 0.5, memory_mb: 4000, duration: 10}
"""


def test_regular_tasks_memory_reclaims_what_speculative_ones_borrowed_as_on_the_agent() -> None:
    """The agent's own pass decides (node_pass): a launch must fit the node's memory with the
    live limits, and a regular task granted later evicts speculative tasks until they fit,
    without any throttle (UP)."""
    memory_jobs = parse_workload(yaml.safe_load(MEMORY_BOUND)).generate(3)
    quota = OversubscriptionConfig(oversubscription_quota=(0.4, 0.5, 0.4))
    simulation = OversubscribedSimulation(memory_jobs, SETTINGS, 1, replace(BASE, config=quota))
    simulation.run()
    assert simulation.counts.launched > 0
    assert simulation.counts.evicted > 0  # (the old simulated nodes never reclaimed memory)
    # The default memory quota (0.1 of 8 GiB) admits no 1,800 MiB task at all.
    strict = OversubscribedSimulation(memory_jobs, SETTINGS, 1, BASE)
    strict.run()
    assert strict.counts.placed > 0 and strict.counts.launched == 0
