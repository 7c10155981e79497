"""Benchmark of the aggregator's machine windows (aggregator/windows.py).

Run: .venv/bin/python bench/bench_aggregator_windows.py [--repeats R]

Prints, with the machine's core count:
* ``add`` throughput: one sample per machine per round for 5,000 machines (the aggregator must
  keep up with 5,000 samples per second at the default 1 s agent interval);
* ``snapshot`` time for 2,000 / 5,000 / 15,000 machines with full 60-sample windows (target at
  5,000: well under 50 ms), and the store's memory.
"""

from __future__ import annotations

import os

# One BLAS thread: the single-core figures must not hide work on other cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator.samples import MachineSample
from aggregator.windows import WindowStore
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS

WINDOW = 60


def samples(machines: int, rounds: int, seed: int = 0) -> list[MachineSample]:
    """``rounds`` samples of each machine, round by round, a fifth of the machines without
    counters; values are random so nothing is special-cased."""
    rng = np.random.default_rng(seed)
    loads = rng.uniform(0.0, 1.0, (rounds, machines, len(LOAD_METRICS))).tolist()
    queues = rng.integers(0, 10, (rounds, machines, len(QUEUE_METRICS))).astype(float).tolist()
    capacity = tuple(32.0 if m == "load_avg_1" else 1.0 for m in LOAD_METRICS)
    return [
        MachineSample(
            node_id=f"node-{i:05d}",
            timestamp=1_700_000_000.0 + r,
            load=tuple(loads[r][i]),
            load_capacity=capacity,
            queue=tuple(queues[r][i]),
            cpi=None if i % 5 == 0 else 1.0 + loads[r][i][0],
            mpki=None if i % 5 == 0 else 2.0 * loads[r][i][1],
            interval_s=1.0,
        )
        for r in range(rounds)
        for i in range(machines)
    ]


def bench_add(machines: int, rounds: int) -> None:
    store = WindowStore(WINDOW)
    batch = samples(machines, rounds + 1)
    for sample in batch[:machines]:  # first sight of every machine: rows allocated
        store.add(sample)
    start = time.perf_counter()
    for sample in batch[machines:]:
        store.add(sample)
    elapsed = time.perf_counter() - start
    count = machines * rounds
    print(
        f"add, {machines} machines x {rounds} rounds: {count / elapsed:,.0f} samples/s "
        f"({1e6 * elapsed / count:.1f} us per sample; one core's share at 1 sample/s per "
        f"machine: {100 * machines * elapsed / count:.1f} %)"
    )


def bench_snapshot(machines: int, repeats: int) -> None:
    store = WindowStore(WINDOW)
    # Fill one window and a bit, so every ring has wrapped at a different position.
    for sample in samples(machines, WINDOW + 7):
        store.add(sample)
    now = 1_700_000_000.0 + WINDOW + 7
    store.snapshot(now, 5.0)  # first touch of the output memory
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        store.snapshot(now, 5.0)
        times.append((time.perf_counter() - start) * 1e3)
    held = sum(
        getattr(store, name).nbytes
        for name in ("_load", "_queue", "_cpi", "_mpki", "_times", "_capacity")
    )
    print(
        f"snapshot, {machines} machines x {WINDOW} samples: median {statistics.median(times):.1f}"
        f" ms, best {min(times):.1f} ms, worst {max(times):.1f} ms"
        f"{' (target well under 50 ms)' if machines == 5_000 else ''}; "
        f"store holds {held / 2**20:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"os.cpu_count() = {os.cpu_count()}; numpy {np.__version__}")
    bench_add(5_000, rounds=10)
    for machines in (2_000, 5_000, 15_000):
        bench_snapshot(machines, args.repeats)


if __name__ == "__main__":
    main()
