"""Whether a task being started has started, decided from one look (issue 27 item 14): the
process runtime reads, in order, whether the wrapper had ended, whether it recorded the task's
exit status, and whether it marked the task started.  A task that ended quickly is started and
exited, never "did not start"."""

from __future__ import annotations

import pytest

from node_agent.runtime.process_runtime import StartLook, StartVerdict, start_verdict

W = StartVerdict


@pytest.mark.parametrize(
    ("wrapper_ended", "exit_recorded", "marked_started", "verdict"),
    [
        (False, False, False, W.WAITING),  # not yet inside its cgroups
        (False, False, True, W.STARTED),  # runs
        (False, True, True, W.EXITED),  # ended between the reads: its status was recorded
        (True, True, True, W.EXITED),  # a quick task, seen after it ended
        (True, False, True, W.STARTED),  # killed unrecorded after it started: a lost task
        (True, False, False, W.FAILED),  # ended before the task ran (no cgroup joined)
        # The wrapper writes the marker before the status; an unmarked status is still an end.
        (False, True, False, W.EXITED),
        (True, True, False, W.EXITED),
    ],
)
def test_one_look_decides(
    wrapper_ended: bool, exit_recorded: bool, marked_started: bool, verdict: StartVerdict
) -> None:
    assert start_verdict(StartLook(wrapper_ended, exit_recorded, marked_started)) is verdict
