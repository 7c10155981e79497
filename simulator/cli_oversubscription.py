"""``sluice sim oversubscription``: the ROSE-shaped experiment (docs/oversubscription.md).

sluice sim oversubscription WORKLOAD [--nodes N] [--scale K] [--study placement|colocation]
    [--placement P ...] [--interference weighted|shared] [--max-speculative N] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from plumbing.errors import UserError
from plumbing.gc_tuning import tune_for_large_heaps
from policies.oversubscription.config import OversubscriptionConfig
from simulator.cli_output import quiet_on_broken_pipe
from simulator.engine import SimSettings, Simulation
from simulator.oversubscription import INTERFERENCE, PLACEMENTS, OversubscriptionSettings
from simulator.progress import Progress
from simulator.rose_study import (
    COLOCATION_CONFIGS,
    accumulate,
    format_rows,
    plot_colocation,
    plot_placement,
    run_colocation,
    run_placement,
)
from simulator.workload import SimJob

DEFAULTS = OversubscriptionSettings()  # the study's settings a flag does not change


def scaled(jobs: list[SimJob], copies: int) -> list[SimJob]:
    """Each job ``copies`` times over, at the same instant (a larger cluster, the same load
    per node)."""
    if copies == 1:
        return jobs
    return [
        dataclasses.replace(
            job, name=f"{job.name}-x{copy}", submit_time=job.submit_time + copy * 1e-3
        )
        for job in jobs
        for copy in range(copies)
    ]


def cmd_oversubscription(args: argparse.Namespace) -> int:
    from simulator.cli import _load

    if args.nodes < 1 or args.scale < 1:
        raise UserError("--nodes, --scale: must be positive")
    jobs, seed = _load(args.workload, args.seed)
    jobs = scaled(jobs, args.scale)
    settings = SimSettings(
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory_mb=args.node_memory_mb,
        client_mode=True,
        sample_interval=30.0,
    )
    candidates = args.candidates or max(1, args.nodes // 4)
    try:
        config = OversubscriptionConfig(candidate_limit=candidates)
    except ValueError as error:
        raise UserError(f"--candidates: {error}") from None
    base = OversubscriptionSettings(
        service_fraction=args.service_fraction,
        interference=args.interference,
        max_speculative=args.max_speculative,
        queue_timeout_s=args.queue_timeout,
        hot_fraction=args.hot_fraction,
        hot_load=_hot_load(args.hot_load),
        config=config,
    )
    try:
        settings.check()
        base.check()
    except ValueError as error:
        raise UserError(f"settings: {error}") from None
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"sluice: {line} ({time.monotonic() - started:.0f} s so far)", file=sys.stderr)

    progress: dict[str, Progress] = {}

    def watch(run: str, simulation: Simulation) -> None:
        if run not in progress:
            progress[run] = Progress(f"  {run}", len(jobs), sys.stderr)
        progress[run].update(simulation)

    tune_for_large_heaps()
    out = args.out or Path("sim-results") / f"oversubscription-{args.nodes}"
    out.mkdir(parents=True, exist_ok=True)
    # What a row depends on besides its configuration: rows of runs that agree on all of it
    # make one table, whichever process ran them.
    run_settings = {
        "workload": str(args.workload.resolve()),
        "nodes": args.nodes,
        "node_cpu": args.node_cpu,
        "node_memory_mb": args.node_memory_mb,
        "scale": args.scale,
        "seed": seed,
        "candidates": candidates,
        "interference": args.interference,
        "max_speculative": args.max_speculative,
    }
    # (named only when not the defaults: rows of earlier runs keep their keys)
    for name in ("queue_timeout_s", "hot_fraction", "hot_load"):
        value = getattr(base, name)
        if value != getattr(DEFAULTS, name):
            run_settings[name] = list(value) if isinstance(value, tuple) else value
    written = []
    for study in args.study or ["placement", "colocation"]:
        if study == "placement":
            rows = run_placement(
                jobs,
                settings,
                seed,
                dataclasses.replace(base, service_fraction=0.0),
                args.placement or PLACEMENTS,
                say,
                watch,
            )
            rows = accumulate(out / f"placement-{args.nodes}.jsonl", rows, run_settings, PLACEMENTS)
            table = format_rows(
                rows, f"placement, {args.nodes:,} nodes, {len(jobs)} jobs (UP)", "random"
            )
            plot_placement(rows, args.nodes, out / f"placement-{args.nodes}.png")
        else:
            rows = run_colocation(
                jobs, settings, seed, base, say, watch, args.colocation or COLOCATION_CONFIGS
            )
            rows = accumulate(
                out / f"colocation-{args.nodes}.jsonl",
                rows,
                {**run_settings, "service_fraction": args.service_fraction},
                COLOCATION_CONFIGS,
            )
            table = format_rows(
                rows,
                f"co-location, {args.nodes:,} nodes, services on {base.service_fraction:.0%}",
                "alone",
            )
            plot_colocation(rows, args.nodes, out / f"colocation-{args.nodes}.png")
        (out / f"{study}-{args.nodes}.md").write_text(table + "\n")
        print(table + "\n")
        written += [f"{study}-{args.nodes}.{ext}" for ext in ("md", "png", "jsonl")]
    print(f"results in {out}/ ({', '.join(written)})")
    return 0


def _hot_load(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise UserError(
            f"--hot-load: expected LOW,HIGH fractions of a node's cores, got {text!r}"
        ) from None
    return low, high


def add_parser(actions: Any) -> None:
    p = actions.add_parser(
        "oversubscription",
        help="the ROSE experiment: speculative-task placement policies, and services under "
        "UP and RP (docs/oversubscription.md)",
    )
    p.add_argument("workload", type=Path, help="e.g. bench/workloads/oversubscription_study.yaml")
    p.add_argument("--nodes", type=int, default=1000, help="default 1,000")
    p.add_argument("--node-cpu", type=float, default=8.0)
    p.add_argument("--node-memory-mb", type=int, default=32768)
    p.add_argument(
        "--scale", type=int, default=1, help="each job this many times over (15 for 15,000 nodes)"
    )
    p.add_argument("--seed", type=int, help="default: the workload's")
    p.add_argument("--study", action="append", choices=["placement", "colocation"])
    p.add_argument("--placement", action="append", choices=list(PLACEMENTS))
    p.add_argument(
        "--colocation",
        action="append",
        choices=list(COLOCATION_CONFIGS),
        help="co-location: the configurations to run (default: all three)",
    )
    p.add_argument(
        "--service-fraction",
        type=float,
        default=0.2,
        help="co-location: the share of nodes running a latency-sensitive service (default 0.2)",
    )
    p.add_argument(
        "--candidates",
        type=int,
        help="machines on the aggregator's list, L_max (default: a quarter of the nodes)",
    )
    p.add_argument(
        "--interference",
        choices=list(INTERFERENCE),
        default="weighted",
        help="weighted: speculative tasks have a tenth of the CPU weight (the agent's); shared: "
        "every task on an oversubscribed node slows alike",
    )
    p.add_argument(
        "--max-speculative",
        type=int,
        help="live speculative tasks per job master at most (Alg. 5's 'several'; default: none)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=DEFAULTS.queue_timeout_s,
        help="seconds a speculative task waits in a node's queue before its job master "
        "places it elsewhere (Sec. 6.3; default %(default)s)",
    )
    p.add_argument(
        "--hot-fraction",
        type=float,
        default=DEFAULTS.hot_fraction,
        help="the share of machines carrying load the scheduler does not place (default "
        "%(default)s)",
    )
    p.add_argument(
        "--hot-load",
        default=",".join(f"{bound:g}" for bound in DEFAULTS.hot_load),
        help="that load, LOW,HIGH fractions of a node's cores, drawn per machine (default "
        "%(default)s)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="default: sim-results/oversubscription-NODES; the rows of runs with the same "
        "settings accumulate there (STUDY-NODES.jsonl), so configurations run as separate "
        "processes make one table and plot",
    )
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_oversubscription))
