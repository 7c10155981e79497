"""What every ``sluice sim`` command shares about its output on stdout."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], int]

EXIT_BROKEN_PIPE = 141
"""A shell's status for a command ended by SIGPIPE (128 + 13), as ``yes | head`` leaves."""


def quiet_on_broken_pipe(handler: Handler) -> Handler:
    """``handler``, ending quietly when whoever reads stdout left (``sluice sim ... | head``):
    no traceback, and no "Exception ignored" at exit either (stdout is flushed here, then
    pointed at /dev/null so the interpreter's last flush has nowhere to fail).  Results
    files are written before anything is printed, so they are complete."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            code = handler(args)
            sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, sys.stdout.fileno())
            finally:
                os.close(devnull)
            return EXIT_BROKEN_PIPE
        return code

    return run
