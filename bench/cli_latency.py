"""Benchmark of the CLI's latency: how long ``sluice --help`` and ``sluice jobs`` take.

Run: .venv/bin/python bench/cli_latency.py [--repeats N] [--nodes N] [--jobs N]

Starts a local cluster (``sluice.local_cluster``, process runtime, TLS as ``sluice local up``
sets it up, in a temporary directory), submits ``--jobs`` small jobs so that the list has rows,
then runs each command ``--repeats`` times (after one untimed run, which writes the bytecode
caches, as ``pip install`` does) as a user does (the installed ``sluice`` script, a
fresh interpreter each time), timed from spawn to exit; the cluster is stopped afterwards.  Also
times what every command pays before it does anything: a bare interpreter (``python -c pass``)
and ``import sluice.cli``.  Prints the machine's core count and load average (the figures depend
on both), then per command the median, minimum and maximum in milliseconds, and for the two
commands with a target (issue 28: ``sluice --help`` <= 100 ms, ``sluice jobs`` <= 150 ms on a
quiet machine; kubectl and squeue answer in tens of milliseconds) the median's ratio to it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sluice import local_cluster
from sluice.client import RMClient, cluster_client_tls

TARGETS_MS = {"sluice --help": 100.0, "sluice jobs": 150.0}

JOB = """\
name: bench-{index}
phases:
  - name: only
    tasks: 1
    command: ["true"]
    resources: {{cpu: 0.1, memory_mb: 16}}
"""


def _sluice() -> list[str]:
    """The installed console script next to this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("sluice")
    found = str(script) if script.exists() else shutil.which("sluice")
    return [found] if found else [sys.executable, "-m", "sluice"]


def _timed(argv: Sequence[str], repeats: int, env: dict[str, str]) -> list[float]:
    """Milliseconds from spawn to exit of each run, after one run untimed (it writes the
    bytecode caches an installation has); a failing run ends the benchmark."""
    times: list[float] = []
    for run in range(repeats + 1):
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        if run > 0:
            times.append((time.perf_counter() - began) * 1000)
        if done.returncode != 0:
            raise SystemExit(
                f"cli_latency: {' '.join(argv)} exited {done.returncode}:\n"
                f"{done.stderr.decode(errors='replace')}"
            )
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=5, help="jobs submitted, so the list has rows")
    args = parser.parse_args()
    sluice = _sluice()
    python = sys.executable
    directory = Path(tempfile.mkdtemp(prefix="bench-cli-latency-"))
    env = os.environ | {"SLUICE_DIR": str(directory)}
    env.pop("SLUICE_RM", None)
    env.pop("SLUICE_TLS_DIR", None)
    # pip compiles an installation's modules; a checkout's are compiled at their first import,
    # unless this forbids it (then every run would compile every edited module again).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    results: dict[str, list[float]] = {}
    # Without a cluster: what every command pays first.
    results["python -c pass"] = _timed([python, "-c", "pass"], args.repeats, env)
    results["import sluice.cli"] = _timed([python, "-c", "import sluice.cli"], args.repeats, env)
    results["sluice --help"] = _timed([*sluice, "--help"], args.repeats, env)
    results["sluice --version"] = _timed([*sluice, "--version"], args.repeats, env)
    info = local_cluster.up(
        local_cluster.LocalClusterSpec(directory=directory, nodes=args.nodes), lambda _: None
    )
    try:
        client = RMClient.connect(str(info["rm"]), cluster_client_tls(info))
        try:
            for index in range(args.jobs):
                client.submit(JOB.format(index=index))
        finally:
            client.close()
        results["sluice jobs"] = _timed([*sluice, "jobs"], args.repeats, env)
    finally:
        local_cluster.down(directory, lambda _: None)
        shutil.rmtree(directory, ignore_errors=True)
    print(
        f"cli_latency: {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.repeats} runs each; "
        f"milliseconds, spawn to exit; `sluice jobs` against a local cluster of {args.nodes} "
        f"node(s) and {args.jobs} jobs, over TLS"
    )
    for name, values in results.items():
        median = statistics.median(values)
        line = f"  {name:18} median {median:7.1f}  min {min(values):7.1f}  max {max(values):7.1f}"
        if name in TARGETS_MS:
            target = TARGETS_MS[name]
            verdict = "met" if median <= target else "missed"
            line += f"  target <= {target:.0f}: {median / target:.2f}x ({verdict})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
