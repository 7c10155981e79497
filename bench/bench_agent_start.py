"""Benchmark of a node agent's start: from process start until it is registered.

Run: .venv/bin/python bench/bench_agent_start.py [--repeats N] [--runtime process|docker]

Starts one resource manager (``sluice rm --insecure``, its own state directory under a
temporary directory), then starts ``sluice agent`` ``--repeats`` times with the same state
directory and node id, as a restarted agent would be: each run is timed from just before the
process is spawned until its log says ``registered with the resource manager`` (the RM has
answered its RegisterNode), then the agent is stopped (SIGTERM) and the next one started.
Also times ``sluice agent --help`` (the import cost alone: the interpreter, the CLI and the
agent's modules).  Prints the machine's core count and its load average (the figures depend on
both), then the median, minimum and maximum of each, in seconds.

A restarted agent adopts its tasks only if it registers within the RM's node timeout
(``--node-timeout``; a local cluster's is ``plumbing.intervals.node_timeout_for``): the start
time is what that budget must cover (``AGENT_START_BUDGET_S``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REGISTERED = b"registered with the resource manager"


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_agent_start: {what} not seen within {timeout:g} s")
        time.sleep(0.005)


def _registered_or_exited(log_path: Path, agent: subprocess.Popen[bytes]) -> bool:
    return REGISTERED in log_path.read_bytes() or agent.poll() is not None


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runtime", choices=["process", "docker"], default="process")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-agent-start-") as tmp:
        root = Path(tmp)
        rm_addr = root / "rm.addr"
        rm_log = (root / "rm.log").open("wb")
        rm = subprocess.Popen(
            [
                python, "-m", "sluice", "rm", "--insecure", "--listen", "127.0.0.1:0",
                "--state-dir", str(root / "rm"), "--address-file", str(rm_addr),
            ],
            stdout=rm_log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_for(lambda: rm_addr.exists() and rm_addr.read_text().strip(), 60, "the RM")
            address = rm_addr.read_text().strip()
            helps: list[float] = []
            for _ in range(args.repeats):
                began = time.monotonic()
                subprocess.run(
                    [python, "-m", "sluice", "agent", "--help"],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                helps.append(time.monotonic() - began)
            starts: list[float] = []
            for index in range(args.repeats):
                log_path = root / f"agent-{index}.log"
                with log_path.open("wb") as out:
                    began = time.monotonic()
                    agent = subprocess.Popen(
                        [
                            python, "-m", "sluice", "agent", "--insecure", "--rm", address,
                            "--node-id", "bench-1", "--runtime", args.runtime,
                            "--state-dir", str(root / "agent"), "--cpus", "1",
                            "--memory-mb", "512",
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )  # fmt: skip
                try:
                    _wait_for(
                        partial(_registered_or_exited, log_path, agent),
                        60,
                        "the agent's registration",
                    )
                    if agent.poll() is not None:
                        raise SystemExit(
                            f"bench_agent_start: the agent exited:\n{log_path.read_text()}"
                        )
                    starts.append(time.monotonic() - began)
                finally:
                    _stop(agent)
        finally:
            _stop(rm)
            rm_log.close()
    print(
        f"bench_agent_start: {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.repeats} runs; seconds"
    )
    for name, values in (("sluice agent --help", helps), ("start to registered", starts)):
        print(
            f"  {name:22} median {statistics.median(values):.3f}  "
            f"min {min(values):.3f}  max {max(values):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
