"""Placement quality at 15,000 nodes: the framework's bounded search against exhaustive
least-allocated placement (issue 9).

Run: .venv/bin/python bench/bench_placement.py [--nodes 15000] [--seed 1]

One seeded stream of containers of mixed shapes (0.5 to 8 cpu, 0.5 to 32 GiB, in proportions
that make both resources run out) is offered, in order, until its total demand is 110 % of the
cluster's cpu.  Each is placed with the scheduling pass (``policies.scheduling.framework``) at
several ``nodes_to_score``, and with an exhaustive least-allocated choice (every node scored,
vectorised with numpy so it finishes).  Reported per choice: cpu and memory utilisation at the
end, containers refused, of which *fragmented* (the cluster had the room in total, but no node
had it), the utilisation when the first container was refused, and the time per placement.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policies.scheduling.capacity_index import CapacityIndex
from policies.scheduling.framework import (
    PassContext,
    PendingAsk,
    Profile,
    baseline_profile,
    schedule_pass,
)
from policies.scheduling.resources import Resources

NODE = Resources(16.0, 64 * 1024)
SHAPES = [  # (cpu, memory MiB, weight): cpu-heavy, balanced and memory-heavy containers
    (0.5, 512, 3),
    (1.0, 2048, 4),
    (1.0, 8192, 2),
    (2.0, 4096, 3),
    (4.0, 4096, 2),
    (2.0, 16384, 1),
    (8.0, 16384, 1),
    (4.0, 32768, 1),
]


@dataclass
class Outcome:
    name: str
    placed: int
    refused: int
    fragmented: int
    cpu: float
    memory: float
    cpu_at_first_refusal: float
    seconds_per_placement: float


def stream(nodes: int, seed: int) -> list[Resources]:
    rng = random.Random(seed)
    population = [Resources(c, m) for c, m, _ in SHAPES]
    weights = [w for _, _, w in SHAPES]
    asks: list[Resources] = []
    demand = 0.0
    while demand < 1.1 * nodes * NODE.cpu:
        ask = rng.choices(population, weights)[0]
        asks.append(ask)
        demand += ask.cpu
    return asks


def with_framework(name: str, nodes: int, asks: list[Resources], profile: Profile) -> Outcome:
    index = CapacityIndex()
    for n in range(nodes):
        index.set(f"n{n:05d}", NODE, Resources())
    free = [nodes * NODE.cpu, float(nodes * NODE.memory_mb)]
    placed = refused = fragmented = 0
    first = -1.0
    nowhere: dict[Resources, int] = {}  # kept from pass to pass, as the resource manager does
    start = time.perf_counter()
    for i, ask in enumerate(asks):
        pending = PendingAsk(f"j{i}", 0, i, "p", 1, ask)
        plan = schedule_pass([pending], PassContext(now=0.0, cluster=index), profile, (), nowhere)
        if plan.placements:  # the shell applies it
            node = plan.placements[0].node_id
            current = index.get(node)
            assert current is not None
            index.set(node, NODE, current.allocated + ask)
            placed += 1
            free[0] -= ask.cpu
            free[1] -= ask.memory_mb
        else:
            refused += 1
            fragmented += ask.cpu <= free[0] and ask.memory_mb <= free[1]
            if first < 0:
                first = 1 - free[0] / (nodes * NODE.cpu)
    elapsed = time.perf_counter() - start
    return Outcome(
        name,
        placed,
        refused,
        fragmented,
        1 - free[0] / (nodes * NODE.cpu),
        1 - free[1] / (nodes * NODE.memory_mb),
        first,
        elapsed / len(asks),
    )


def exhaustive(nodes: int, asks: list[Resources]) -> Outcome:
    """Least allocated over every node: the lowest dominant share after the placement, ties to
    the lowest node id (``priority_fifo.place``'s rule), with numpy."""
    cpu = np.zeros(nodes)
    memory = np.zeros(nodes)
    placed = refused = fragmented = 0
    first = -1.0
    start = time.perf_counter()
    for ask in asks:
        after_cpu = cpu + ask.cpu
        after_memory = memory + ask.memory_mb
        fits = (after_cpu <= NODE.cpu + 1e-9) & (after_memory <= NODE.memory_mb)
        if fits.any():
            share = np.maximum(after_cpu / NODE.cpu, after_memory / NODE.memory_mb)
            share[~fits] = np.inf
            best = int(np.argmin(share))  # the first minimum: the lowest node id
            cpu[best] += ask.cpu
            memory[best] += ask.memory_mb
            placed += 1
        else:
            refused += 1
            total_cpu = nodes * NODE.cpu - cpu.sum()
            total_memory = nodes * NODE.memory_mb - memory.sum()
            fragmented += ask.cpu <= total_cpu and ask.memory_mb <= total_memory
            if first < 0:
                first = cpu.sum() / (nodes * NODE.cpu)
    elapsed = time.perf_counter() - start
    return Outcome(
        "exhaustive",
        placed,
        refused,
        fragmented,
        cpu.sum() / (nodes * NODE.cpu),
        memory.sum() / (nodes * NODE.memory_mb),
        first,
        elapsed / len(asks),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asks = stream(args.nodes, args.seed)
    print(
        f"os.cpu_count() = {os.cpu_count()}; {args.nodes:,} nodes of 16 cpu / 64 GiB; "
        f"{len(asks):,} containers offered (110 % of the cpu)"
    )
    outcomes = [
        with_framework(f"nodes_to_score={k}", args.nodes, asks, baseline_profile(nodes_to_score=k))
        for k in (1, 8, 64)
    ]
    outcomes.append(exhaustive(args.nodes, asks))
    print(
        f"{'choice':<20} {'placed':>8} {'refused':>8} {'fragmented':>11} {'cpu':>7} "
        f"{'memory':>7} {'cpu at 1st refusal':>19} {'us/placement':>13}"
    )
    for o in outcomes:
        print(
            f"{o.name:<20} {o.placed:>8,} {o.refused:>8,} {o.fragmented:>11,} {o.cpu:>7.1%} "
            f"{o.memory:>7.1%} {o.cpu_at_first_refusal:>19.1%} "
            f"{o.seconds_per_placement * 1e6:>13.0f}"
        )
    print("fragmented: refused although the cluster had the room in total (no single node had it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
