"""Benchmark of the aggregator's hot paths end to end (aggregator/state.py, rounds.py).

Run: .venv/bin/python bench/bench_aggregator_round.py [--machines N]

Prints, with the machine's core count:
* ingest: serialized ``NodeMetrics`` messages decoded, checked and appended to the windows per
  second (at the default 1 s interval the aggregator must take ``N`` per second);
* one ranking round over full 60-sample windows (snapshot, ranking, versions, encoding), for
  the ``rose`` (ROSE Alg. 1 + 4) and ``least-loaded`` rankings;
* the sizes of the messages a round publishes.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator.kafka_reader import Record
from aggregator.state import AggregatorState, Settings
from policies.oversubscription.candidates import compute_candidates
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.least_loaded import least_loaded_candidates
from sluice_pb import metrics_pb2 as mpb

WINDOW = 60
TOPIC = "sluice.metrics"


def messages(machines: int, rounds: int, start: float) -> list[list[Record]]:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.05, 0.9, machines)
    batches = []
    for r in range(rounds):
        noise = rng.normal(0, 0.02, machines)
        batch = []
        for i in range(machines):
            cpu = float(np.clip(base[i] + noise[i], 0, 1))
            value = mpb.NodeMetrics(
                schema_version=1,
                node_id=f"node-{i:05d}",
                timestamp=start + r,
                sequence=r + 1,
                interval_s=1.0,
                cpu_capacity=32,
                memory_capacity_bytes=128 << 30,
                cpu_utilization=cpu,
                memory_utilization=cpu / 2,
                load_average_1m=cpu * 32,
                regular_running=int(cpu * 10),
            ).SerializeToString()
            batch.append(Record(TOPIC, f"node-{i:05d}".encode(), value))
        batches.append(batch)
    return batches


def state(ranking_name: str) -> AggregatorState:
    ranking = compute_candidates if ranking_name == "rose" else least_loaded_candidates
    settings = Settings(
        metrics_topic=TOPIC,
        outcomes_topic="sluice.task-outcomes",
        window=WINDOW,
        stale_after=5.0,
        forget_after=600.0,
        config=OversubscriptionConfig(),
        ranking=ranking,
        ranking_name=ranking_name,
    )
    return AggregatorState(settings, start_time=0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--machines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}; machines: {args.machines}; window: {WINDOW} samples")
    start = 1_700_000_000.0
    batches = messages(args.machines, WINDOW, start)
    for name in ("rose", "least-loaded"):
        aggregator = state(name)
        began = time.perf_counter()
        for batch in batches:
            aggregator.ingest(batch, now=start + WINDOW)
        ingest = time.perf_counter() - began
        total = args.machines * WINDOW
        timings = []
        latest = None
        for _ in range(args.repeats):
            began = time.perf_counter()
            latest = aggregator.run_round(start + WINDOW)
            timings.append(time.perf_counter() - began)
        assert latest is not None
        print(
            f"{name:>12}: ingest {total / ingest:,.0f} messages/s "
            f"({ingest / total * 1e6:.1f} us each); round median "
            f"{statistics.median(timings) * 1000:.1f} ms (best {min(timings) * 1000:.1f} ms); "
            f"{len(latest.ranked)} candidates; list {len(latest.machine_list_message):,} B, "
            f"bit vector {len(latest.bit_vector_message)} B, "
            f"steady-state message {len(latest.candidate_message)} B"
        )


if __name__ == "__main__":
    main()
