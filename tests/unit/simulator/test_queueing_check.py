"""The simulator checked against queueing theory: single-task jobs with Poisson arrivals and
exponential durations on c slots form an M/M/c queue served first come, first served.

Two steps, so that neither depends on luck:

1. the simulator's waits equal, job by job, those of the exact FCFS recursion over c servers fed
   the very same arrival and service times (up to the live system's millisecond overheads,
   which the test sets to a millisecond each);
2. that recursion, fed a long sample from the workload's own arrival process and distribution,
   gives Erlang C's mean wait within 5 %.

bench/check_erlang_c.py runs the simulator itself on a sample long enough for step 2.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Sequence

import pytest

from simulator.distributions import Exponential
from simulator.engine import SimSettings, Simulation
from simulator.queueing import mmc_mean_wait
from simulator.workload import PoissonArrival, parse_workload

SLOTS, SERVICE_MEAN = 4, 10.0
INSTANT = 0.001  # every interval of the live system, shrunk to a millisecond


def fcfs_waits(arrivals: Sequence[float], services: Sequence[float], servers: int) -> list[float]:
    """Exact waits of a first-come-first-served queue with ``servers`` identical servers."""
    free = [0.0] * servers
    waits = []
    for arrival, service in zip(arrivals, services, strict=True):
        start = max(arrival, heapq.heappop(free))
        waits.append(start - arrival)
        heapq.heappush(free, start + service)
    return waits


def mmc_workload(load: float, count: int) -> dict[str, object]:
    return {
        "classes": [
            {
                "name": "mmc",
                "priority": 0,
                "arrival": {
                    "process": "poisson",
                    "rate": load * SLOTS / SERVICE_MEAN,
                    "count": count,
                },
                "phases": [
                    {
                        "name": "t",
                        "tasks": 1,
                        "cpu": 1,
                        "memory_mb": 100,
                        "duration": {"distribution": "exponential", "mean": SERVICE_MEAN},
                    }
                ],
            }
        ]
    }


@pytest.mark.parametrize("load", [0.5, 0.8])
def test_the_simulator_serves_single_task_jobs_as_an_fcfs_queue(load: float):
    jobs = parse_workload(mmc_workload(load, 1500)).generate(7)
    settings = SimSettings(
        nodes=SLOTS,
        node_cpu=1,
        node_memory_mb=1000,
        client_mode=True,  # no job master containers: the c slots are the servers
        master_startup=0.0,
        master_startup_jitter=INSTANT,
        launch_latency=0.0,
        monitor_interval=INSTANT,
        round_interval=INSTANT,
        pass_delay=0.0,
        heartbeat_interval=INSTANT,
    )
    result = Simulation(jobs, settings, seed=7).run()
    simulated = [o.start_time - o.submit_time for o in result.outcomes]
    exact = fcfs_waits([j.submit_time for j in jobs], [j.durations["t"][0] for j in jobs], SLOTS)
    assert sum(1 for wait in exact if wait > 0) > len(exact) // 10  # the queue really queues
    assert statistics.mean(simulated) == pytest.approx(statistics.mean(exact), rel=0.01)
    assert max(abs(s - e) for s, e in zip(simulated, exact, strict=True)) < 0.1


@pytest.mark.parametrize("load", [0.5, 0.8])
def test_the_fcfs_queue_of_the_workload_s_sampling_has_erlang_c_s_mean_wait(load: float):
    rate, count = load * SLOTS / SERVICE_MEAN, 400_000
    arrivals = PoissonArrival(rate, count).arrival_times(random.Random(11))
    service = Exponential(SERVICE_MEAN)
    rng = random.Random(12)
    waits = fcfs_waits(arrivals, [service.sample(rng) for _ in range(count)], SLOTS)
    expected = mmc_mean_wait(SLOTS, rate, 1 / SERVICE_MEAN)
    assert statistics.mean(waits) == pytest.approx(expected, rel=0.05)
