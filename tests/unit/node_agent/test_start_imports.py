"""A node agent starts fast: ``sluice agent`` imports only what the agent's path uses.

A restarted agent keeps its tasks only if it registers within the RM's node timeout
(docs/architecture.md, "Node timeout and lease"); numpy, scipy, matplotlib and pandas cost it
seconds on a loaded machine, and nothing on its path needs them (the services' anomaly fits load
them when a service is first watched).  Checked in a fresh interpreter, as the command runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "scipy", "matplotlib", "pandas")

# The command line's path (its parser, the daemon's module) and what run() imports on the way
# to registering: the process runtime, the agent, its servicer, the metrics reporter.
PROBE = """
import json, sys
from sluice.cli import main
try:
    main(["agent", "--help"])
except SystemExit:
    pass
import node_agent.daemon, node_agent.service, node_agent.agent
import node_agent.runtime.process_runtime, node_agent.metrics.reporter
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)))
""".replace("HEAVY", repr(HEAVY))


@pytest.mark.parametrize("heavy", HEAVY)
def test_the_agents_start_path_imports_no_numeric_or_plotting_library(heavy: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.split(".")[0] == heavy] == []
