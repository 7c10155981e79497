"""``bench/bench_task_ops.py`` runs end to end on the process runtime and reports its figures.

Only the presence and shape of the figures are checked, never their values: timings depend on
the machine and on whatever else runs on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.runtime.task_state import encode_name
from tests.integration.node_agent.conftest import CGROUP_ROOT, unavailable

pytestmark = pytest.mark.integration
BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_task_ops.py"
REPEATS = 3
OPERATIONS = {
    "suspend": REPEATS,
    "resume": REPEATS,
    "resize": REPEATS,
    "launch_start": REPEATS,
    "launch_running": REPEATS,
    "launch_output": REPEATS,
    "stop": REPEATS,
    "cleanup": REPEATS,
    # Launch through the node agent's gRPC service, as a job master does.
    "launch_agent_start": REPEATS,
    "launch_agent_running": REPEATS,
}


def test_process_runtime_figures_as_json() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--runtime", "process", "--repeats", str(REPEATS), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if result.returncode == 2 and "cannot create a cgroup" in result.stderr:
        unavailable(result.stderr.strip())  # not root, or no cgroup filesystem
    assert result.returncode == 0, result.stderr

    report = json.loads(result.stdout)
    assert report["cpu_count"] == os.cpu_count()
    assert report["leftovers"] == []
    process = report["runtimes"]["process"]
    assert "cgroup" in process["description"]
    operations = process["operations"]
    assert set(operations) == set(OPERATIONS)
    for name, samples in OPERATIONS.items():
        figure = operations[name]
        # A failed attempt (the runtime raised) is counted apart and not sampled.
        assert 1 <= figure["samples"] <= samples, name
        assert isinstance(figure["failures"], int), name
        assert isinstance(figure["p50_ms"], float) and isinstance(figure["p99_ms"], float), name
    for name in ("suspend", "resume"):
        assert operations[name]["target_ms"] == 5.0
        assert isinstance(operations[name]["target_met"], bool)
    assert process["observe_disagreed"] == {"suspend": 0, "resume": 0}
    # Through the agent: each launch was sampled (a failed StartTask would have ended the run),
    # the RUNNING event came only after the call returned, and ListTasks showed it RUNNING.
    for name in ("launch_agent_start", "launch_agent_running"):
        figure = operations[name]
        assert figure["samples"] == REPEATS and figure["failures"] == 0, name
        assert 0 < figure["p50_ms"] <= figure["p99_ms"], name
    assert (
        operations["launch_agent_start"]["p50_ms"] <= operations["launch_agent_running"]["p50_ms"]
    )
    assert 0 <= process["agent_running_at_first_poll"] <= REPEATS
    assert process["agent_list_tasks_disagreed"] == 0

    # Nothing of the run is left, the agent's tasks included (they run in the same scope): no
    # cgroup of its scope, no state directory.
    node = encode_name(report["scope"])
    assert not list(CGROUP_ROOT.glob(f"*/sluice/{node}")) + list(CGROUP_ROOT.glob(f"sluice/{node}"))
    assert not Path(report["state_dir"]).exists()
