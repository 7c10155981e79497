"""The live system's timing defaults, in one place: the daemons use them, and the simulator
models the same intervals (docs/simulator.md), so a change here changes both."""

from __future__ import annotations

HEARTBEAT_INTERVAL_S = 1.0
"""A node agent's heartbeat to the resource manager (``sluice agent --heartbeat-interval``)."""

MONITOR_INTERVAL_S = 0.2
"""How often a node agent observes its tasks and reports their changes at once
(``--monitor-interval``)."""

JOB_MASTER_ROUND_S = 0.2
"""The pause between a job master's rounds: decide, launch, Allocate, absorb."""

SCHEDULING_PASS_DELAY_S = 0.02
"""The resource manager's pass runs this long after the first change that could let something
be placed: the requests in between are one batch."""
