"""The simulator against Erlang C on a long run (issue 9's first check, literally).

Run: .venv/bin/python bench/check_erlang_c.py [--jobs 100000] [--load 0.6]

Single-task jobs with Poisson arrivals and exponential durations on c = 4 slots (job masters
outside the cluster, every live interval shrunk to a millisecond): the simulator's mean wait
against Erlang C's.  The unit tests (tests/unit/simulator/test_queueing_check.py) check the same
in two faster steps; this runs the simulator itself long enough for the sample mean to settle.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plumbing.gc_tuning import tune_for_large_heaps
from simulator.engine import SimSettings, Simulation
from simulator.queueing import mmc_mean_wait
from simulator.workload import parse_workload

SLOTS, SERVICE_MEAN, INSTANT = 4, 10.0, 0.001


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--load", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tune_for_large_heaps()
    rate = args.load * SLOTS / SERVICE_MEAN
    workload = {
        "classes": [
            {
                "name": "mmc",
                "priority": 0,
                "arrival": {"process": "poisson", "rate": rate, "count": args.jobs},
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
    jobs = parse_workload(workload).generate(args.seed)
    settings = SimSettings(
        nodes=SLOTS,
        node_cpu=1,
        node_memory_mb=1000,
        client_mode=True,
        master_startup=0.0,
        master_startup_jitter=INSTANT,
        launch_latency=0.0,
        monitor_interval=INSTANT,
        round_interval=INSTANT,
        pass_delay=0.0,
        heartbeat_interval=INSTANT,
    )
    start = time.perf_counter()
    result = Simulation(jobs, settings, seed=args.seed).run()
    simulated = statistics.mean(o.start_time - o.submit_time for o in result.outcomes)
    expected = mmc_mean_wait(SLOTS, rate, 1 / SERVICE_MEAN)
    error = abs(simulated - expected) / expected
    took = time.perf_counter() - start
    print(
        f"M/M/{SLOTS} at load {args.load}, {args.jobs:,} jobs ({took:.0f} s): "
        f"simulated mean wait {simulated:.3f} s, Erlang C {expected:.3f} s, off by {error:.1%} "
        f"({'within' if error <= 0.05 else 'NOT within'} 5 %)"
    )
    return 0 if error <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
