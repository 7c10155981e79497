"""``sluice sim dias``: the DiAS-shaped experiment (docs/approximation.md).

sluice sim dias WORKLOAD [--nodes N] [--node-cpu C] [--config NAME ...] [--factor F] [--out DIR]
    [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from plumbing.errors import UserError
from simulator.cli_output import quiet_on_broken_pipe
from simulator.dias_study import (
    CONFIGS,
    ModelComparison,
    format_comparison,
    format_rows,
    model_comparison,
    plot_rows,
    run_study,
)
from simulator.engine import SimSettings
from simulator.results import to_json, write_json
from simulator.workload import WorkloadError, load_workload


def cmd_dias(args: argparse.Namespace) -> int:
    if args.nodes < 1 or not args.node_cpu > 0:
        raise UserError("--nodes, --node-cpu: must be positive")
    if not 1 <= args.factor <= 64:
        raise UserError("--factor: must be between 1 and 64")
    try:
        workload = load_workload(args.workload)
        seed: int = args.seed if args.seed is not None else (workload.seed or 1)
        jobs = workload.generate(seed)
    except WorkloadError as error:
        raise UserError(f"{args.workload}: {error}") from None
    priorities = sorted({c.spec.priority for c in workload.classes})
    if priorities != [0, 1]:
        raise UserError(
            f"{args.workload}: the study needs two classes, of priorities 1 (high) and 0 (low); "
            f"got priorities {priorities}"
        )
    names = args.config or [c.name for c in CONFIGS]
    configs = [c for c in CONFIGS if c.name in names]
    if any(c.sprint == "limited" for c in configs) and "NP" not in names:
        configs.append(next(c for c in CONFIGS if c.name == "NP"))  # (its timeout comes from NP)
    settings = SimSettings(
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory_mb=args.node_memory_mb,
        sample_interval=5.0,
    )
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"sluice: {line} ({time.monotonic() - started:.0f} s so far)", file=sys.stderr)

    rows, simulations = run_study(
        jobs, settings, seed, factor=args.factor, configs=configs, say=say
    )
    out = args.out or Path("sim-results") / "dias"
    out.mkdir(parents=True, exist_ok=True)
    slots = int(args.nodes * args.node_cpu)
    load = sum(c.arrival.rate for c in workload.classes if hasattr(c.arrival, "rate"))  # jobs/s
    table = format_rows(
        rows,
        f"DiAS study: {len(jobs)} jobs on {args.nodes} nodes x {args.node_cpu:g} cores "
        f"({slots} slots), {load:.4g} jobs/s, one job in execution at a time, seed {seed}",
    )
    text = table
    comparisons: list[ModelComparison] = []
    try:
        comparisons = model_comparison(rows, simulations, workload.classes, slots)
        text += "\n\n" + format_comparison(comparisons)
    except ValueError as error:
        text += f"\n\n(no model comparison: {error})"
    results = {
        "meta": {
            "workload": str(args.workload),
            "seed": seed,
            "nodes": args.nodes,
            "node_cpu": args.node_cpu,
            "node_memory_mb": args.node_memory_mb,
            "factor": args.factor,
            "jobs": len(jobs),
        },
        "rows": rows,
        "model": [
            {**dataclasses.asdict(c), "errors": dict(zip(("high", "low"), c.errors(), strict=True))}
            for c in comparisons
        ],
    }
    write_json(out / "dias.json", results)
    (out / "dias.md").write_text(text + "\n")
    plot_rows(rows, out / "dias.png")
    if args.json:
        print(to_json(results), end="")
    else:
        print(text + "\n")
        print(f"results in {out}/ (dias.json, dias.md, dias.png)")
    return 0


def add_parser(actions: Any) -> None:
    p = actions.add_parser(
        "dias",
        help="the DiAS experiment: P, NP, DA and DiAS on two priorities (docs/approximation.md)",
    )
    p.add_argument("workload", type=Path, help="e.g. bench/workloads/dias_study.yaml")
    p.add_argument("--nodes", type=int, default=10, help="default 10 (the paper's)")
    p.add_argument("--node-cpu", type=float, default=2.0, help="default 2 (the paper's)")
    p.add_argument("--node-memory-mb", type=int, default=4096)
    p.add_argument("--seed", type=int, help="default: the workload's")
    p.add_argument(
        "--config", action="append", choices=[c.name for c in CONFIGS], help="default: all six"
    )
    p.add_argument(
        "--factor",
        type=float,
        default=2.5,
        help="a sprinting task runs this many times faster (default 2.5: the paper's DVFS "
        "sprint cut execution time by up to 60 %%)",
    )
    p.add_argument("--out", type=Path, help="default: sim-results/dias")
    p.add_argument("--json", action="store_true", help="print the results as JSON (dias.json)")
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_dias))
