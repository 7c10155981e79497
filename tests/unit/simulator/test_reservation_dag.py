"""Slot reservation on chains and fork/join DAGs in the simulator (issue 28): at a point of the
paper's kind (40 nodes of 4 cpu, about two thirds busy with background work), foreground chains
and diamonds with reservation run within 10 % of their time alone, and no container they keep
is lost before its phase could use it.  Before, a diamond's fork kept containers for one of its
two downstream phases only, and a chain's kept containers lapsed (their deadline counted from
the barrier) while its first phase's late-started tasks still ran."""

from __future__ import annotations

import pytest

from resource_manager.core import CoreSettings
from simulator.engine import SimSettings
from simulator.reservation_study import format_isolation, run_isolation
from simulator.workload import parse_workload


def phase(name: str, tasks: int, *after: str) -> dict[str, object]:
    duration = {"distribution": "lognormal", "median": 15, "sigma": 0.2}
    return {
        "name": name,
        "tasks": tasks,
        "cpu": 1,
        "memory_mb": 1024,
        "duration": duration,
        "after": list(after),
    }


WORKLOAD = {
    "classes": [
        {
            "name": "background",  # 0.72 jobs/s of 3 tasks of mean 49 s: ~107 of 160 cpu
            "priority": 0,
            "arrival": {"process": "poisson", "rate": 0.72, "count": 270},
            "phases": [
                {
                    "name": "tasks",
                    "tasks": 3,
                    "cpu": 1,
                    "memory_mb": 1024,
                    "duration": {"distribution": "lognormal", "median": 30, "sigma": 1.0},
                }
            ],
        },
        {
            "name": "chain",
            "priority": 10,
            "arrival": {"process": "poisson", "rate": 0.02, "count": 4, "start": 60},
            "phases": [
                phase("p1", 8),
                phase("p2", 8, "p1"),
                phase("p3", 8, "p2"),
                phase("p4", 8, "p3"),
            ],
        },
        {
            "name": "diamond",
            "priority": 10,
            "arrival": {"process": "poisson", "rate": 0.02, "count": 4, "start": 60},
            "phases": [
                phase("split", 16),
                phase("left", 8, "split"),
                phase("right", 8, "split"),
                phase("join", 16, "left", "right"),
            ],
        },
    ]
}


@pytest.mark.parametrize("config", ["R=1.0", "R=0.8"])
def test_chains_and_diamonds_with_reservation_run_within_ten_percent_of_alone(config: str):
    jobs = parse_workload(WORKLOAD).generate(3)
    base = SimSettings(
        nodes=40,
        node_cpu=4.0,
        node_memory_mb=65536,
        client_mode=True,
        locality=True,
        core=CoreSettings(locality_wait=3.0),
    )
    (row,) = run_isolation(jobs, base, 3, configs=(config,))
    table = format_isolation([row], 40, 4.0)
    assert set(row.slowdown) == {"chain", "diamond"}, table
    for job_class in ("chain", "diamond"):
        assert row.slowdown[job_class] < 1.1, table
        assert row.kept_lost[job_class] == 0, table  # no kept container lost before its use
    assert row.unfinished == 0, table
