"""Sec. 6.1 multi-resource threshold control on the node."""

from __future__ import annotations

import pytest

from policies.oversubscription.admission import NodeUsage, admit_launch, admit_to_queue
from policies.oversubscription.config import OversubscriptionMode

from .builders import config

# Defaults: cpu/memory/disk thresholds 0.9/0.9/0.6, quotas 0.4/0.1/0.4, max queue 20.
CALM = NodeUsage(utilisation=(0.5, 0.5, 0.3), oversubscribed=(0.1, 0.0, 0.1), queue_length=3)
SMALL = (0.05, 0.05, 0.05)


@pytest.mark.parametrize(
    ("queue_length", "admitted"), [(0, True), (19, True), (20, False), (25, False)]
)
def test_enqueue_refused_past_max_queue_length(queue_length: int, admitted: bool) -> None:
    assert admit_to_queue(queue_length, config()).admitted is admitted


@pytest.mark.parametrize(
    ("usage", "demand", "admitted", "reason"),
    [
        pytest.param(CALM, SMALL, True, "", id="all within limits"),
        pytest.param(
            NodeUsage((0.95, 0.5, 0.3), (0.1, 0.0, 0.1), 3),
            SMALL,
            False,
            "cpu utilisation",
            id="cpu over threshold",
        ),
        pytest.param(
            NodeUsage((0.5, 0.5, 0.61), (0.1, 0.0, 0.1), 3),
            SMALL,
            False,
            "disk utilisation",
            id="disk over 60 percent",
        ),
        pytest.param(
            NodeUsage((0.5, 0.5, 0.3), (0.1, 0.06, 0.1), 3),
            SMALL,
            False,
            "memory oversub",
            id="memory quota would be exceeded",
        ),
        pytest.param(
            NodeUsage((0.5, 0.5, 0.3), (0.1, 0.05, 0.1), 3),
            SMALL,
            True,
            "",
            id="quota reached exactly",
        ),
        pytest.param(
            NodeUsage((0.5, 0.5, 0.3), (0, 0, 0), 0),
            SMALL,
            False,
            "queue empty",
            id="nothing queued",
        ),
    ],
)
def test_launch_needs_every_threshold_and_quota(
    usage: NodeUsage, demand: tuple[float, ...], admitted: bool, reason: str
) -> None:
    decision = admit_launch(usage, demand, config())
    assert decision.admitted is admitted
    assert decision.reason.startswith(reason)


@pytest.mark.parametrize(
    ("mode", "admitted"),
    [(OversubscriptionMode.RESPONSIVENESS, False), (OversubscriptionMode.UTILIZATION, True)],
)
def test_throttle_blocks_only_in_rp(mode: OversubscriptionMode, admitted: bool) -> None:
    decision = admit_launch(CALM, SMALL, config(mode=mode), throttled=True)
    assert decision.admitted is admitted


@pytest.mark.parametrize(
    ("demand", "message"),
    [((0.1, 0.1), "demand: expected 3 values"), ((0.1, -0.1, 0.0), "demand: values")],
)
def test_bad_demand_is_named(demand: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        admit_launch(CALM, demand, config())
