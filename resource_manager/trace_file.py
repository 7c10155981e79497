"""The live RM's decision trace file (``sluice rm --decision-trace PATH``): JSON lines.

The service's driver (:meth:`resource_manager.rm_state.RMState.run`) hands each committed unit's
effects here; :class:`~resource_manager.decision_trace.DecisionTrace` turns them into records
(the simulator's very recorder) and this writes them, one JSON object a line, flushed after
each unit, so that a test or an operator reads a trace that is whole up to the last unit.

Writing never stops the RM: a write that fails (disk full, file removed under a read-only
mount...) logs one line and ends the trace; so does reaching :data:`MAX_BYTES` (a trace left on
for days must not fill the disk).  A unit's few records are a few hundred bytes: a local write
and flush take microseconds, well inside the event loop's budget.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import IO

from resource_manager.core import ResourceManagerCore
from resource_manager.decision_trace import DecisionTrace
from resource_manager.shell import Effects

log = logging.getLogger(__name__)

MAX_BYTES = 256 * 1024 * 1024
"""The most a trace file grows by in one RM run; then the trace ends (logged once)."""


class TraceFile:
    """Appends the decisions of each committed unit to ``path`` (created if need be)."""

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.trace = DecisionTrace()
        self._max_bytes = max_bytes
        self._written = 0
        self._out: IO[str] | None = path.open("a", encoding="utf-8")  # (errors: the caller's)

    @property
    def open(self) -> bool:
        return self._out is not None

    def write(self, effects: Effects, core: ResourceManagerCore, at: float) -> None:
        """Record one committed unit (``at``: its wall time).  Never raises for the file."""
        if self._out is None or not (effects.plans or effects.heard or effects.changed_jobs):
            return
        records = self.trace.record(effects, core, at)
        if not records:
            return
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        if self._written + len(text) > self._max_bytes:
            log.warning(
                "decision trace %s reached %d bytes: no more decisions are written",
                self.path,
                self._max_bytes,
            )
            self.close()
            return
        try:
            self._out.write(text)
            self._out.flush()
        except OSError as error:
            log.warning("decision trace %s: %s: no more decisions are written", self.path, error)
            self.close()
            return
        self._written += len(text)

    def close(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()
