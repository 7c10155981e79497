"""``sluice model reservation`` and ``sluice model stragglers``: slot-reservation knobs.

``reservation`` turns a required isolation P into the reservation deadline D and the utilisation
bound it costs (Eq. 2-4 of the slot-reservation paper); the Pareto parameters come from flags or
are fitted to a file of past task durations. ``stragglers`` runs the numerical study of Sec. IV-C.
Formats and examples: docs/model/reservation.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from plumbing.errors import UserError
from policies.reservation.deadline import (
    ParetoFit,
    deadline_for_isolation,
    fit_pareto,
    utilization_for_isolation,
)
from policies.reservation.stragglers import straggler_study

MAX_STUDY_SAMPLES = 50_000_000
"""runs × tasks above this would need gigabytes; refuse rather than swap."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``reservation`` and ``stragglers`` subcommands."""
    res = subparsers.add_parser(
        "reservation",
        help="reservation deadline and utilisation bound for an isolation target",
        description="Deadline D = t_m (1 - P^(1/N))^(-1/alpha) for isolation P (Eq. 2) and the "
        "lower bound on slot utilisation it leaves (Eq. 3-4).",
    )
    res.add_argument(
        "--isolation",
        type=float,
        required=True,
        metavar="P",
        help="probability that no reserved slot is lost at the barrier, in [0, 1]",
    )
    res.add_argument(
        "--tasks", type=int, required=True, metavar="N", help="parallel tasks in the phase"
    )
    res.add_argument("--alpha", type=float, metavar="A", help="Pareto shape of task durations")
    res.add_argument(
        "--tmin",
        type=float,
        metavar="T",
        help="Pareto scale: the shortest task duration, in seconds",
    )
    res.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="past task durations (one per line) to fit alpha and t_min instead",
    )
    res.add_argument("--json", action="store_true", help="print JSON")
    res.set_defaults(handler=run_reservation)

    strag = subparsers.add_parser(
        "stragglers",
        help="expected phase-time reduction from copies on reserved slots",
        description="Monte Carlo of T = t_(N) versus T' with copies started after ceil(N/2) "
        "tasks finished (Sec. IV-C), Pareto task durations.",
    )
    strag.add_argument(
        "--alpha", type=float, required=True, metavar="A", help="Pareto shape of task durations"
    )
    strag.add_argument(
        "--tasks", type=int, required=True, metavar="N", help="parallel tasks in the phase"
    )
    strag.add_argument(
        "--runs", type=int, default=1000, metavar="R", help="simulated phases (default 1000)"
    )
    strag.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    strag.add_argument("--json", action="store_true", help="print JSON")
    strag.set_defaults(handler=run_stragglers)


def _read_history(path: Path) -> list[float]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--history: cannot read {path}: {exc.strerror}") from exc
    durations = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            value = float(line)
        except ValueError:
            raise UserError(f"--history: line {number}: not a number: {line!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"--history: line {number}: durations must be > 0, got {line}")
        durations.append(value)
    if len(durations) < 2:
        raise UserError(f"--history: need at least 2 durations, found {len(durations)}")
    if min(durations) == max(durations):
        raise UserError("--history: all durations are equal, the tail shape cannot be fitted")
    return durations


def _pareto_parameters(args: argparse.Namespace) -> tuple[float, float, ParetoFit | None]:
    if args.history is not None:
        if args.alpha is not None or args.tmin is not None:
            raise UserError("--history: give either --history or --alpha and --tmin, not both")
        fit = fit_pareto(_read_history(args.history))
        return fit.alpha, fit.t_min, fit
    if args.alpha is None or args.tmin is None:
        missing = "--alpha" if args.alpha is None else "--tmin"
        raise UserError(f"{missing}: required unless --history is given")
    if not (args.alpha > 0 and math.isfinite(args.alpha)):
        raise UserError(f"--alpha: must be a positive number, got {args.alpha}")
    if not (args.tmin > 0 and math.isfinite(args.tmin)):
        raise UserError(f"--tmin: must be a positive number of seconds, got {args.tmin}")
    return args.alpha, args.tmin, None


def run_reservation(args: argparse.Namespace) -> int:
    """Print the deadline and utilisation bound for ``args``; 0 on success."""
    if not 0.0 <= args.isolation <= 1.0:
        raise UserError(f"--isolation: must be in [0, 1], got {args.isolation}")
    if args.tasks < 1:
        raise UserError(f"--tasks: must be >= 1, got {args.tasks}")
    alpha, t_min, fit = _pareto_parameters(args)
    deadline = deadline_for_isolation(args.isolation, t_min, alpha, args.tasks)
    # Eq. 3-4 need a finite mean task duration, i.e. alpha > 1.
    utilization = (
        utilization_for_isolation(args.isolation, alpha, args.tasks) if alpha > 1 else None
    )
    result: dict[str, Any] = {
        "isolation": args.isolation,
        "tasks": args.tasks,
        "alpha": alpha,
        "t_min": t_min,
        "fitted_from": None if fit is None else {"file": str(args.history), "samples": fit.samples},
        "deadline": deadline if math.isfinite(deadline) else None,
        "utilization_lower_bound": utilization,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    source = "" if fit is None else f" (fitted to {fit.samples} durations in {args.history})"
    print(f"Pareto task durations: alpha = {alpha:.4g}, t_min = {t_min:.4g} s{source}")
    print(f"isolation P = {args.isolation:.4g} for a phase of N = {args.tasks} tasks")
    if math.isfinite(deadline):
        print(f"reservation deadline D = {deadline:.4g} s after the phase starts (Eq. 2)")
    else:
        print("reservation deadline D = none: P = 1 holds the slots until the barrier (Eq. 2)")
    if utilization is None:
        print("utilisation bound: undefined for alpha <= 1 (infinite mean task duration)")
    else:
        print(f"expected utilisation of reserved slots >= {utilization:.4f} (Eq. 3-4)")
    return 0


def run_stragglers(args: argparse.Namespace) -> int:
    """Print the T versus T' study for ``args``; 0 on success."""
    if not (args.alpha > 0 and math.isfinite(args.alpha)):
        raise UserError(f"--alpha: must be a positive number, got {args.alpha}")
    if args.tasks < 1:
        raise UserError(f"--tasks: must be >= 1, got {args.tasks}")
    if args.runs < 1:
        raise UserError(f"--runs: must be >= 1, got {args.runs}")
    if args.runs * args.tasks > MAX_STUDY_SAMPLES:
        raise UserError(f"--runs: runs × tasks must be <= {MAX_STUDY_SAMPLES:,}")
    if args.seed < 0:
        raise UserError(f"--seed: must be >= 0, got {args.seed}")
    study = straggler_study(args.alpha, args.tasks, args.runs, np.random.default_rng(args.seed))
    if args.json:
        print(
            json.dumps(
                {
                    "alpha": study.alpha,
                    "tasks": study.tasks,
                    "runs": study.runs,
                    "seed": args.seed,
                    "mean_phase_time": study.mean_phase_time,
                    "mean_phase_time_with_copies": study.mean_phase_time_with_copies,
                    "reduction": study.reduction,
                    "mean_run_reduction": study.mean_run_reduction,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"Pareto alpha = {study.alpha:.4g}, N = {study.tasks} tasks, "
        f"{study.runs} runs (seed {args.seed}); times in units of t_min"
    )
    print(f"mean phase time without copies  T  = {study.mean_phase_time:.4g}")
    print(f"mean phase time with copies     T' = {study.mean_phase_time_with_copies:.4g}")
    print(f"reduction of the mean phase time    = {study.reduction:.1%}")
    print(f"mean per-phase reduction 1 - T'/T   = {study.mean_run_reduction:.1%}")
    return 0
