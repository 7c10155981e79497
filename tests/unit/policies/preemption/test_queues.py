"""The queue file's model: the paper's defaults, and one-line refusals naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from policies.preemption.queues import (
    DEFAULT_QUEUE,
    QueueError,
    parse_queue_config,
    single_queue,
)
from policies.preemption.settings import PAPER_FOOTPRINT, PAPER_GRACEFUL_STEP, Mode
from policies.scheduling.resources import Resources


def doc(**long: Any) -> dict[str, Any]:
    return {"queues": {"short": {"share": 0.95}, "long": {"share": 0.05, **long}}}


def test_fields_left_out_take_the_papers_values():
    config = parse_queue_config(doc())
    long = config.get("long")
    assert long is not None
    assert (long.mode, long.graceful_step, long.minimal_footprint) == (
        Mode.GRACEFUL,
        PAPER_GRACEFUL_STEP,
        PAPER_FOOTPRINT,
    )
    assert (long.resume_after_offers, long.max_suspended_s, long.max_share) == (3, None, 1.0)
    assert config.default == "short"  # the first queue, when none is named
    assert config.preempts and not config.caps


def test_every_field_is_read():
    config = parse_queue_config(
        {
            "default": "long",
            "queues": {
                "short": {"share": 0.6},
                "long": {
                    "share": 0.4,
                    "max_share": 0.4,
                    "mode": "none",
                    "graceful_step": {"cpu": 1, "memory_mb": 512},
                    "minimal_footprint": {"cpu": 0.05, "memory_mb": 32},
                    "resume_after_offers": 0,
                    "max_suspended_s": 600,
                },
            },
        }
    )
    long = config.get("long")
    assert long is not None and long.mode is None and long.mode_name == "none"
    assert long.graceful_step == Resources(1.0, 512)
    assert long.minimal_footprint == Resources(0.05, 32)
    assert (long.resume_after_offers, long.max_suspended_s, long.max_share) == (0, 600.0, 0.4)
    assert config.default == "long" and config.caps


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "queue file: must be a mapping, got list"),
        ({}, "queues: is required"),
        ({"queues": {}}, "queues: must name at least one queue"),
        ({"queues": {"a": {"share": 1}}, "colour": 1}, "colour: unknown field"),
        (doc(share=1.5), "queues.long.share: must be a number in [0, 1], got 1.5"),
        (doc(share="half"), "queues.long.share: must be a number, got 'half'"),
        ({"queues": {"a": {}}}, "queues.a.share: is required"),
        (doc(mode="pause"), "queues.long.mode: must be kill, immediate, graceful or none"),
        (doc(max_share=0.01), "queues.long.max_share: is 0.01, below its share 0.05"),
        (doc(resume_after_offers=-1), "queues.long.resume_after_offers: must be a whole number"),
        (doc(max_suspended_s=0), "queues.long.max_suspended_s: must be > 0 seconds"),
        (doc(graceful_step={"cpu": 0, "memory_mb": 0}), "queues.long.graceful_step: must take"),
        (doc(graceful_step={"gpu": 1}), "queues.long.graceful_step.gpu: unknown field"),
        (
            doc(minimal_footprint={"memory_mb": 1.5}),
            "queues.long.minimal_footprint.memory_mb: must be a whole number of MiB",
        ),
        (doc(colour="red"), "queues.long.colour: unknown field"),
        ({"queues": {"a b": {"share": 1}}}, "queues.a b: a queue name is 1 to 64"),
        (
            {"queues": {"a": {"share": 0.7}, "b": {"share": 0.7}}},
            "queues: shares add up to 1.4; at most 1",
        ),
        ({"queues": {"a": {"share": 1}}, "default": "b"}, "default: must name one of the queues"),
    ],
)
def test_a_bad_file_is_refused_with_one_line_naming_the_field(document, message):
    with pytest.raises(QueueError) as caught:
        parse_queue_config(document)
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text


def test_shares_written_as_decimals_may_sum_to_one():
    parse_queue_config({"queues": {"a": {"share": 0.95}, "b": {"share": 0.05}}})
    parse_queue_config({"queues": {"a": {"share": 0.7}, "b": {"share": 0.2}, "c": {"share": 0.1}}})


def test_a_job_naming_an_unknown_queue_is_told_which_exist():
    config = parse_queue_config(doc())
    assert config.queue_of("") == "short" and config.queue_of("long") == "long"
    with pytest.raises(QueueError, match=r"^queue: unknown queue 'x' \(queues: short, long\)$"):
        config.queue_of("x")


def test_without_a_file_there_is_one_queue_and_no_preemption():
    config = single_queue()
    assert [q.name for q in config.queues] == [DEFAULT_QUEUE]
    assert not config.preempts and not config.caps
