"""Container preemption in the simulator: the nodes' model of swap and graceful steps, and the
BIG-C experiment on a small cluster (the same core and policies as the live RM)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from policies.preemption.queues import parse_queue_config
from policies.scheduling.jobspec import parse_job_spec
from simulator.bigc import POLICIES, format_bigc, run_bigc
from simulator.engine import SimSettings, Simulation
from simulator.results import JobOutcome
from simulator.workload import SimJob, load_workload

WORKLOAD = Path(__file__).resolve().parents[3] / "bench" / "workloads" / "bigc_google.yaml"


def job(
    name: str, queue: str, tasks: int, cpu: float, memory_mb: int, duration: float, at: float
) -> SimJob:
    spec = parse_job_spec(
        {
            "name": name,
            "queue": queue,
            "phases": [
                {
                    "name": "p",
                    "tasks": tasks,
                    "command": ["true"],
                    "resources": {"cpu": cpu, "memory_mb": memory_mb},
                }
            ],
        }
    )
    return SimJob(name, queue, at, spec, {"p": (duration,) * tasks})


def cluster(mode: str, **changes: object) -> SimSettings:
    queues = parse_queue_config(
        {
            "default": "long",
            "queues": {
                "short": {"share": 0.95},
                "long": {"share": 0.05, "mode": mode, "resume_after_offers": 1},
            },
        }
    )
    settings = SimSettings(
        nodes=2, node_cpu=8.0, node_memory_mb=32768, client_mode=True, queues=queues
    )
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


# Two long tasks fill each node; a short job then needs room on one of them.
LONG = job("long", "long", 4, 4.0, 16384, 600.0, 0.0)
SHORT = job("short", "short", 2, 2.0, 8192, 30.0, 60.0)


def outcomes(mode: str, **changes: object) -> dict[str, JobOutcome]:
    result = Simulation([LONG, SHORT], cluster(mode, **changes), seed=3).run()
    return {o.name: o for o in result.outcomes}


@pytest.mark.parametrize("mode", ["immediate", "graceful"])
def test_suspended_and_shrunk_tasks_lose_nothing_and_the_short_job_does_not_wait_for_them(mode):
    done = outcomes(mode)
    long, short = done["long"], done["short"]
    assert long.state == short.state == "succeeded"
    assert long.lost_work == 0 and long.preemptions > 0
    assert short.finish_time < 600  # it ran while the long tasks were held back


def test_kill_loses_the_killed_tasks_work_and_runs_them_again():
    long = outcomes("kill")["long"]
    assert long.state == "succeeded" and long.lost_work > 0


def test_memory_is_freed_only_once_swapped_out_so_a_slower_swap_delays_the_short_job():
    fast = outcomes("immediate", swap_mb_per_s=10_000.0)["short"]
    slow = outcomes("immediate", swap_mb_per_s=50.0)["short"]
    assert slow.start_time > fast.start_time


def test_without_swap_a_preemption_that_needs_memory_kills():
    done = outcomes("immediate", has_swap=False)
    assert done["long"].lost_work > 0  # memory was needed: killed, not suspended


def test_a_seed_gives_the_same_results():
    first = Simulation([LONG, SHORT], cluster("graceful"), seed=5).run().outcomes
    again = Simulation([LONG, SHORT], cluster("graceful"), seed=5).run().outcomes
    assert first == again


def test_the_bigc_workload_names_both_queues_and_every_policy_runs_on_a_small_cluster():
    workload = load_workload(WORKLOAD)
    jobs = [j for j in workload.generate(workload.seed or 1) if j.submit_time < 1000][:12]
    assert {j.spec.queue for j in jobs} <= {"short", "long"}
    base = SimSettings(nodes=3, node_cpu=32.0, node_memory_mb=131072, client_mode=True)
    rows = run_bigc(jobs, base, 1, tuple(POLICIES))
    assert [row.policy for row in rows] == list(POLICIES)
    graceful = next(row for row in rows if row.policy == "graceful")
    assert graceful.long_failed == 0 and graceful.lost_work_h == 0
    assert "| graceful |" in format_bigc(rows, 3)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        # long over its reserve, a short job arrives (long's containers are never taken)
        (
            job("long", "long", 4, 4.0, 16384, 600.0, 0.0),
            job("short", "short", 2, 2.0, 8192, 30, 60),
        ),
        # short fills the cluster, a long job arrives below its reserve: short must not give way
        (
            job("short", "short", 4, 4.0, 16384, 600.0, 0.0),
            job("long", "long", 2, 2.0, 8192, 30, 60),
        ),
    ],
)
def test_the_reserve_baseline_preempts_nothing(first: SimJob, then: SimJob):
    """BIG-C's "reserve" baseline is static reservation without preemption: neither queue's
    containers are ever preempted (the short queue used to take the default mode, graceful)."""
    assert all(q.mode is None for q in POLICIES["reserve"].queues)  # type: ignore[union-attr]
    base = SimSettings(nodes=2, node_cpu=8.0, node_memory_mb=32768, client_mode=True)
    [row] = run_bigc([first, then], base, 3, ["reserve"])
    assert row.preemptions == 0
    assert all(o.state == "succeeded" and o.lost_work == 0 for o in row.outcomes)
