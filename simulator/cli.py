"""``sluice sim``: run a workload on the simulator, compare configurations, import traces.

    sluice sim run WORKLOAD [--seed N] [--nodes N] [--out DIR] [--json]
    sluice sim compare WORKLOAD --config NAME:KEY=VALUE[,KEY=VALUE...] ... [--out DIR]
    sluice sim bigc WORKLOAD [--nodes N] [--policy P ...] [--out DIR]
    sluice sim reservation WORKLOAD [--nodes N] [--study isolation|stragglers] [--out DIR]
    sluice sim oversubscription WORKLOAD [--nodes N] [--scale K] [--study placement|colocation]
    sluice sim import google --job-events F --task-events F --machine-cpu C \
        --machine-memory-mb M -o OUT
    sluice sim import alibaba --batch-task F --machine-memory-mb M -o OUT

``WORKLOAD`` is a workload file (``.yaml``/``.yml``) or a trace (``.csv``, as written by
``sluice sim import``); docs/simulator.md describes both, the settings and the results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plumbing.errors import UserError
from plumbing.gc_tuning import tune_for_large_heaps
from resource_manager.core import CoreSettings
from simulator.bigc import POLICIES, BigcRow, format_bigc, plot_bigc, run_bigc, scale_jobs
from simulator.cli_dias import add_parser as add_dias
from simulator.cli_output import quiet_on_broken_pipe
from simulator.cli_oversubscription import add_parser as add_oversubscription
from simulator.distributions import WorkloadError
from simulator.engine import SimResult, SimSettings, Simulation
from simulator.progress import Progress
from simulator.reservation_study import (
    ALPHAS,
    format_isolation,
    format_stragglers,
    plot_isolation,
    plot_isolation_utilisation,
    plot_stragglers,
    run_isolation,
    run_stragglers,
)
from simulator.results import (
    ComparisonRow,
    format_comparison,
    format_summary,
    outcomes_to_dicts,
    summarize,
    summary_to_dict,
    to_json,
    write_comparison,
    write_json,
    write_results,
)
from simulator.traces import (
    import_alibaba_2018,
    import_google_2011,
    read_trace_csv,
    write_trace_csv,
)
from simulator.workload import SimJob, load_workload

Handler = Callable[[argparse.Namespace], int]

_SIM_KEYS = {f.name for f in dataclasses.fields(SimSettings)} - {"core"}
_CORE_KEYS = {f.name for f in dataclasses.fields(CoreSettings)} - {"cluster_id"}


def _run_announcer(nodes: int, jobs: int) -> Callable[[str], None]:
    """Progress of an experiment of several runs, one line per run on stderr."""
    started = time.monotonic()

    def say(run: str) -> None:
        print(
            f"sluice: {run} on {nodes} nodes ({jobs} jobs), "
            f"{time.monotonic() - started:.0f} s so far",
            file=sys.stderr,
        )

    return say


def cmd_bigc(args: argparse.Namespace) -> int:
    nodes = _positive(args.nodes, "--nodes")
    loaded, seed = _load(args.workload, args.seed)
    jobs = scale_jobs(loaded, nodes)
    base = SimSettings(
        nodes=nodes, node_cpu=args.node_cpu, node_memory_mb=args.node_memory_mb, client_mode=True
    )
    say = _run_announcer(nodes, len(jobs))
    rows = run_bigc(jobs, base, seed, args.policy or list(POLICIES), on_policy=say)
    out = args.out or Path("sim-results") / f"bigc-{nodes}"
    out.mkdir(parents=True, exist_ok=True)
    table = format_bigc(rows, nodes)
    meta = _study_meta(args, seed, base, len(jobs))
    results = {"meta": meta, "rows": [_without(row, "outcomes") for row in rows]}
    write_json(out / f"bigc-{nodes}.json", results)
    write_json(
        out / f"bigc-{nodes}-jobs.json",
        {row.policy: outcomes_to_dicts(row.outcomes) for row in rows},
    )
    (out / f"bigc-{nodes}.md").write_text(table + "\n")
    plot_bigc(rows, nodes, out / f"bigc-{nodes}.png")
    if args.json:
        print(to_json(results), end="")
        return 0
    print(table)
    print(
        f"results in {out}/ (bigc-{nodes}.json, bigc-{nodes}-jobs.json, bigc-{nodes}.md, "
        f"bigc-{nodes}.png)"
    )
    return 0


def _study_meta(
    args: argparse.Namespace, seed: int, base: SimSettings, jobs: int
) -> dict[str, object]:
    """What a study's JSON says it ran: the workload, the seed and the base settings."""
    return {
        "workload": str(args.workload),
        "seed": seed,
        "jobs": jobs,
        "settings": {k: v for k, v in dataclasses.asdict(base).items() if k != "core"},
        "core": dataclasses.asdict(base.core),
    }


def _without(row: BigcRow, *names: str) -> dict[str, object]:
    """A study's row as data, less its bulky fields (written elsewhere)."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name not in names}


def cmd_reservation(args: argparse.Namespace) -> int:
    nodes = _positive(args.nodes, "--nodes")
    jobs, seed = _load(args.workload, args.seed)
    if not args.locality_wait >= 0:
        raise UserError(f"--locality-wait: must not be negative, got {args.locality_wait:g}")
    try:
        base = SimSettings(
            nodes=nodes,
            node_cpu=args.node_cpu,
            node_memory_mb=args.node_memory_mb,
            client_mode=True,
            locality=True,
            locality_factor=args.locality_factor,
            core=CoreSettings(locality_wait=args.locality_wait),
        )
        base.check()
    except ValueError as error:
        raise UserError(f"settings: {error}") from None
    for alpha in args.alpha or ():
        if not alpha > 1:
            raise UserError(f"--alpha: must be above 1 (a finite mean), got {alpha:g}")
    if not any(job.spec.priority > 0 for job in jobs):
        raise UserError(f"{args.workload}: no job above priority 0, so no foreground to study")
    say = _run_announcer(nodes, len(jobs))
    out = args.out or Path("sim-results") / f"reservation-{nodes}"
    out.mkdir(parents=True, exist_ok=True)
    studies = args.study or ["isolation", "stragglers"]
    written = [f"reservation-{nodes}.json"]
    tables = []
    results: dict[str, object] = {"meta": _study_meta(args, seed, base, len(jobs))}
    if "isolation" in studies:
        rows = run_isolation(jobs, base, seed, on_run=say)
        results["isolation"] = rows
        table = format_isolation(rows, nodes, args.node_cpu)
        (out / f"isolation-{nodes}.md").write_text(table + "\n")
        plot_isolation(rows, nodes, out / f"isolation-{nodes}.png")
        plot_isolation_utilisation(out / "isolation-utilisation.png")
        tables.append(table)
        written += [f"isolation-{nodes}.md", f"isolation-{nodes}.png", "isolation-utilisation.png"]
    if "stragglers" in studies:
        straggler_rows = run_stragglers(jobs, base, seed, args.alpha or ALPHAS, on_run=say)
        results["stragglers"] = straggler_rows
        table = format_stragglers(straggler_rows)
        (out / f"stragglers-{nodes}.md").write_text(table + "\n")
        plot_stragglers(straggler_rows, out / f"stragglers-{nodes}.png")
        tables.append(table)
        written += [f"stragglers-{nodes}.md", f"stragglers-{nodes}.png"]
    write_json(out / f"reservation-{nodes}.json", results)
    if args.json:
        print(to_json(results), end="")
        return 0
    for table in tables:
        print(table + "\n")
    print(f"results in {out}/ ({', '.join(written)})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``sim`` and its actions to the ``sluice`` command."""
    sim = subparsers.add_parser("sim", help="simulate a workload on the scheduler's own code")
    actions = sim.add_subparsers(dest="sim_command", required=True, metavar="ACTION")

    p = actions.add_parser("run", help="simulate one workload; write its results")
    _add_run_options(p)
    p.add_argument("--out", type=Path, help="results directory (default: sim-results/NAME)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_run))

    p = actions.add_parser("compare", help="simulate one workload under several configurations")
    _add_run_options(p)
    p.add_argument(
        "--config",
        action="append",
        required=True,
        metavar="NAME:KEY=VALUE,...",
        help="a configuration: a name and the settings it changes (repeat; e.g. "
        "'exhaustive:nodes_to_score=100000')",
    )
    p.add_argument("--out", type=Path, help="results directory (default: sim-results/NAME)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_compare))

    p = actions.add_parser(
        "bigc",
        help="the BIG-C experiment: FIFO, reserve, kill, immediate and graceful on one workload",
    )
    p.add_argument("workload", type=Path, help="a workload whose jobs name queues short and long")
    p.add_argument("--nodes", type=int, default=26, help="nodes (default: the paper's 26)")
    p.add_argument("--node-cpu", type=float, default=32.0)
    p.add_argument("--node-memory-mb", type=int, default=131072)
    p.add_argument("--seed", type=int, help="default: the workload's")
    p.add_argument("--policy", action="append", choices=list(POLICIES), help="default: all five")
    p.add_argument("--out", type=Path, help="where the results go (default: sim-results)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_bigc))

    _add_reservation(actions)
    add_oversubscription(actions)
    add_dias(actions)

    p = actions.add_parser("import", help="turn a public cluster trace into a Sluice trace CSV")
    sources = p.add_subparsers(dest="trace", required=True, metavar="TRACE")
    g = sources.add_parser("google", help="Google cluster-usage trace 2011 (job and task events)")
    g.add_argument("--job-events", type=Path, nargs="+", required=True)
    g.add_argument("--task-events", type=Path, nargs="+", required=True)
    g.add_argument("--machine-cpu", type=float, required=True, help="cores of the largest machine")
    g.add_argument("--machine-memory-mb", type=int, required=True)
    g.add_argument("--limit", type=int, help="keep the first N jobs")
    g.add_argument("-o", "--output", type=Path, required=True)
    g.set_defaults(handler=quiet_on_broken_pipe(cmd_import))
    a = sources.add_parser("alibaba", help="Alibaba cluster-trace-v2018 batch_task table")
    a.add_argument("--batch-task", type=Path, nargs="+", required=True)
    a.add_argument("--machine-memory-mb", type=int, required=True)
    a.add_argument("--limit", type=int, help="keep the first N jobs")
    a.add_argument("-o", "--output", type=Path, required=True)
    a.set_defaults(handler=quiet_on_broken_pipe(cmd_import))


def _add_reservation(actions: Any) -> None:
    p = actions.add_parser(
        "reservation",
        help="the slot-reservation experiments: isolation of high-priority DAG jobs, and "
        "straggler copies (docs/reservation.md)",
    )
    p.add_argument(
        "workload",
        type=Path,
        help="a workload whose jobs above priority 0 are the "
        "foreground (e.g. bench/workloads/reservation_study.yaml)",
    )
    p.add_argument("--nodes", type=int, default=1000, help="nodes (default: the paper's 1,000)")
    p.add_argument("--node-cpu", type=float, default=4.0, help="default 4: 4,000 one-cpu slots")
    p.add_argument("--node-memory-mb", type=int, default=16384)
    p.add_argument("--seed", type=int, help="default: the workload's")
    p.add_argument(
        "--study", action="append", choices=["isolation", "stragglers"], help="default: both"
    )
    p.add_argument(
        "--alpha",
        action="append",
        type=float,
        help="Pareto shapes of the straggler study "
        f"(repeat; default {', '.join(f'{a:g}' for a in ALPHAS)})",
    )
    p.add_argument(
        "--locality-factor",
        type=float,
        default=5.0,
        help="a task without local input runs this many times longer (default 5)",
    )
    p.add_argument(
        "--locality-wait",
        type=float,
        default=3.0,
        help="seconds such a task waits first (default 3, Spark's)",
    )
    p.add_argument("--out", type=Path, help="default: sim-results/reservation-NODES")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=quiet_on_broken_pipe(cmd_reservation))


def _add_run_options(p: argparse.ArgumentParser) -> None:
    defaults = SimSettings()
    p.add_argument("workload", type=Path, help="a workload file (.yaml) or a trace (.csv)")
    p.add_argument("--seed", type=int, help="random seed (default: the workload's, else 1)")
    p.add_argument("--nodes", type=int, default=defaults.nodes)
    p.add_argument("--node-cpu", type=float, default=defaults.node_cpu)
    p.add_argument("--node-memory-mb", type=int, default=defaults.node_memory_mb)
    p.add_argument(
        "--until", type=float, help="stop at this simulated time (s); unfinished jobs say so"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any simulator or core setting (docs/simulator.md), e.g. heartbeats=all",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")


# ------------------------------------------------------------------------------ handlers


def cmd_run(args: argparse.Namespace) -> int:
    jobs, seed = _load(args.workload, args.seed)
    settings = _settings(args, args.set)
    result = _simulate(jobs, settings, seed, label=args.workload.name, quiet=args.no_progress)
    summary = summarize(result.outcomes, result.samples)
    out = args.out or Path("sim-results") / f"{args.workload.stem}-seed{seed}"
    write_results(
        out, result.outcomes, result.samples, summary, _meta(args, seed, settings, result)
    )
    if args.json:
        print(json.dumps(summary_to_dict(summary), sort_keys=True))
    else:
        print(format_summary(summary))
        print(f"results in {out}/ (jobs.csv, summary.txt, completion_cdf.png, utilisation.png)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    jobs, seed = _load(args.workload, args.seed)
    configurations = [_configuration(text) for text in args.config]
    names = [name for name, _ in configurations]
    if len(set(names)) != len(names):
        raise UserError("--config: configuration names must differ")
    rows = []
    for name, changes in configurations:
        settings = _settings(args, [*args.set, *changes])
        result = _simulate(jobs, settings, seed, label=name, quiet=args.no_progress)
        summary = summarize(result.outcomes, result.samples)
        rows.append(ComparisonRow(name, summary, tuple(result.outcomes)))
    out = args.out or Path("sim-results") / f"{args.workload.stem}-compare-seed{seed}"
    write_comparison(
        out, rows, {"seed": seed, "workload": str(args.workload), "configs": args.config}
    )
    if args.json:
        summaries = {row.configuration: summary_to_dict(row.summary) for row in rows}
        print(json.dumps(summaries, sort_keys=True))
    else:
        print(format_comparison(rows))
        print(f"results in {out}/ (comparison.txt, comparison.json, comparison.png)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit: must be at least 1")
    try:
        if args.trace == "google":
            if not args.machine_cpu > 0:
                raise UserError("--machine-cpu: must be positive")
            jobs = import_google_2011(
                args.job_events,
                args.task_events,
                machine_cpu=args.machine_cpu,
                machine_memory_mb=_positive(args.machine_memory_mb, "--machine-memory-mb"),
                limit=args.limit,
            )
        else:
            jobs = import_alibaba_2018(
                args.batch_task,
                machine_memory_mb=_positive(args.machine_memory_mb, "--machine-memory-mb"),
                limit=args.limit,
            )
    except WorkloadError as error:
        raise UserError(str(error)) from None
    except OSError as error:
        raise UserError(f"{error.filename}: {error.strerror}") from None
    write_trace_csv(jobs, args.output)
    tasks = sum(job.spec.total_tasks() for job in jobs)
    print(f"wrote {len(jobs)} jobs ({tasks} tasks) to {args.output}")
    return 0


# ------------------------------------------------------------------------------ helpers


def _load(path: Path, seed: int | None) -> tuple[list[SimJob], int]:
    try:
        if path.suffix.lower() == ".csv":
            return read_trace_csv(path), 1 if seed is None else seed
        workload = load_workload(path)
    except WorkloadError as error:
        raise UserError(f"{path}: {error}") from None
    except OSError as error:
        raise UserError(f"{path}: {error.strerror}") from None
    chosen = seed if seed is not None else workload.seed if workload.seed is not None else 1
    return workload.generate(chosen), chosen


def _settings(args: argparse.Namespace, changes: Sequence[str]) -> SimSettings:
    values: dict[str, object] = {
        "nodes": args.nodes,
        "node_cpu": args.node_cpu,
        "node_memory_mb": args.node_memory_mb,
    }
    if args.until is not None:
        values["until"] = args.until
    core: dict[str, object] = {}
    for change in changes:
        key, value = _assignment(change)
        if key in _SIM_KEYS:
            values[key] = _typed(SimSettings, key, value)
        elif key in _CORE_KEYS:
            core[key] = _typed(CoreSettings, key, value)
        else:
            known = ", ".join(sorted(_SIM_KEYS | _CORE_KEYS))
            raise UserError(f"--set {key}: unknown setting (known: {known})")
    try:
        settings = SimSettings(core=CoreSettings(**core), **values)  # type: ignore[arg-type]
        settings.check()
    except ValueError as error:
        raise UserError(f"settings: {error}") from None
    return settings


def _assignment(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise UserError(f"--set {text!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def _typed(cls: type, key: str, value: str) -> object:
    """``value`` as the setting ``key`` of ``cls`` takes it; a one-line UserError if it cannot."""
    structured = _STRUCTURED.get(key)
    if structured is not None:
        return structured(key, value)
    kind = {f.name: f.type for f in dataclasses.fields(cls)}[key]
    if kind in ("bool", bool):
        if value.lower() in ("true", "yes", "1", "on"):
            return True
        if value.lower() in ("false", "no", "0", "off"):
            return False
        raise UserError(f"--set {key}: expected true or false, got {value!r}")
    try:
        if kind in ("int", int):
            return int(value)
        if kind in ("float", float):
            number = float(value)
            if math.isnan(number):
                raise ValueError
            return number
    except ValueError:
        raise UserError(f"--set {key}: expected a number, got {value!r}") from None
    if kind in ("str", str) or str(kind).startswith("Literal["):
        return value
    raise UserError(f"--set {key}: cannot be set from the command line")  # (a new field's type)


def _from_file(loader: Callable[[Path], object], *, none: bool) -> Callable[[str, str], object]:
    """A structured setting given as a file path (``none``: ``none`` unsets it)."""

    def parse(key: str, value: str) -> object:
        if none and value.lower() == "none":
            return None
        if not value:
            raise UserError(f"--set {key}: expected a file path")
        try:
            return loader(Path(value))
        except ValueError as error:  # QueueFileError: "FILE: field: problem"
            raise UserError(f"--set {key}: {error}") from None

    return parse


def _dispatch(key: str, value: str) -> object:
    from policies.approximation.dispatch import DispatchMode

    try:
        return DispatchMode(value)
    except ValueError:
        choices = ", ".join(mode.value for mode in DispatchMode)
        raise UserError(f"--set {key}: expected one of {choices}, got {value!r}") from None


def _globs(key: str, value: str) -> object:
    return tuple(glob for glob in value.split() if glob)


def _load_queues(path: Path) -> object:
    from plumbing.queue_file import load_queue_file

    return load_queue_file(path)


def _load_reservation(path: Path) -> object:
    from plumbing.queue_file import load_reservation_file

    return load_reservation_file(path)


def _load_dias(path: Path) -> object:
    from plumbing.queue_file import load_dias_config

    return load_dias_config(path)


_STRUCTURED: dict[str, Callable[[str, str], object]] = {
    "queues": _from_file(_load_queues, none=True),  # the RM's queue file (sluice rm --queues)
    "default_reservation": _from_file(_load_reservation, none=True),  # sluice rm --reservation
    "dias": _from_file(_load_dias, none=False),  # sluice rm --dias-config
    "dispatch": _dispatch,  # sluice rm --dispatch
    "nodes_allowed": _globs,  # globs separated by spaces
}
"""Settings that are not a number, a flag or a word, read from the text ``--set`` gives."""


def _configuration(text: str) -> tuple[str, list[str]]:
    name, colon, changes = text.partition(":")
    if not name.strip():
        raise UserError(f"--config {text!r}: expected NAME:KEY=VALUE,... (NAME alone is the base)")
    return name.strip(), [c for c in changes.split(",") if c.strip()] if colon else []


def _positive(value: int, option: str) -> int:
    if value < 1:
        raise UserError(f"{option}: must be positive")
    return value


def _simulate(
    jobs: Sequence[SimJob], settings: SimSettings, seed: int, *, label: str, quiet: bool
) -> SimResult:
    simulation = Simulation(jobs, settings, seed)
    tune_for_large_heaps()
    progress = None if quiet else Progress(label, len(jobs), sys.stderr)
    if progress is not None:
        simulation.on_progress = progress.update
    try:
        result = simulation.run(progress_every=2_000)
    finally:
        if progress is not None:
            progress.done(simulation)
    for name, why in simulation.refused[:5]:
        print(f"sluice: warning: job {name} refused: {why}", file=sys.stderr)
    if len(simulation.refused) > 5:
        print(f"sluice: warning: {len(simulation.refused)} jobs refused in all", file=sys.stderr)
    return result


def _meta(
    args: argparse.Namespace, seed: int, settings: SimSettings, result: SimResult
) -> Mapping[str, object]:
    return {
        "workload": str(args.workload),
        "seed": seed,
        "settings": {k: v for k, v in dataclasses.asdict(settings).items() if k != "core"},
        "core": dataclasses.asdict(settings.core),
        "events": result.events,
        "end_time": result.end_time,
    }
