#!/usr/bin/env python3
"""Keep the machine's cores busy for a bounded time, to run tests under load.

    python3 scripts/cpu_hog.py --seconds 1200 &     # one burner per core
    .venv/bin/python -m pytest tests/integration ...
    kill %1                                         # or let --seconds run out

It starts N burner processes (one per core this process may run on, by default) that spin in
plain Python.  Everything ends, burners included, when the first of these happens:

* ``--seconds`` have passed (required, at most a day: the hog never runs unbounded);
* the hog gets SIGTERM, SIGINT or SIGHUP;
* the hog's parent dies (the shell that started it, e.g. a CI step that was cancelled): the hog
  notices within half a second that it was re-parented;
* a burner notices that the hog itself is gone (it checks its own parent likewise), so even a
  SIGKILLed hog leaves no burner behind for more than half a second.

Standard library only; runs with any Python 3.8+.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time

CHECK_EVERY_S = 0.5
MAX_SECONDS = 24 * 3600.0


def _burn(deadline: float, watched_parent: int) -> None:
    """Spin until ``deadline`` (monotonic) or until our parent is no longer ``watched_parent``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the hog, which ends us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    next_check = 0.0
    x = 0
    while True:
        # A few hundred thousand iterations between clock reads: ~all of the time is spent here.
        for _ in range(200_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        now = time.monotonic()
        if now >= next_check:
            if now >= deadline or os.getppid() != watched_parent:
                return
            next_check = now + CHECK_EVERY_S


def _default_processes() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_SECONDS:.0f}]")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=_positive_seconds, required=True, help="stop after this many seconds"
    )
    parser.add_argument(
        "--processes",
        "-n",
        type=_positive_int,
        default=_default_processes(),
        help="burner processes (default: one per core available, %(default)s here)",
    )
    args = parser.parse_args(argv)

    parent = os.getppid()
    me = os.getpid()
    deadline = time.monotonic() + args.seconds
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)

    # Forked, so that each burner's parent is this process (which it watches), not a server.
    context = multiprocessing.get_context("fork")
    burners = [
        context.Process(target=_burn, args=(deadline, me), name=f"cpu-hog-{i}", daemon=True)
        for i in range(args.processes)
    ]
    for burner in burners:
        burner.start()
    print(
        f"cpu_hog: pid {me}, {len(burners)} burner(s) "
        f"({', '.join(str(b.pid) for b in burners)}) for {args.seconds:g} s",
        file=sys.stderr,
        flush=True,
    )
    reason = "time is up"
    try:
        while time.monotonic() < deadline:
            if stopping:
                reason = f"signal {signal.Signals(stopping[0]).name}"
                break
            if os.getppid() != parent:
                reason = "its parent exited"
                break
            if not any(b.is_alive() for b in burners):
                reason = "every burner ended"
                break
            time.sleep(min(CHECK_EVERY_S, max(0.0, deadline - time.monotonic())))
    finally:
        for burner in burners:
            if burner.is_alive():
                burner.terminate()
        for burner in burners:
            burner.join(5)
            if burner.is_alive():
                burner.kill()
                burner.join(5)
    print(f"cpu_hog: stopped ({reason})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
