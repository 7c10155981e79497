"""Reading the RM's configuration files (the queue file, the default reservation): every problem is
one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing.queue_file import QueueFileError, load_queue_file, load_reservation_file
from policies.scheduling.jobspec import ReservationSpec, TaskTimePrior

EXAMPLE = Path(__file__).parents[3] / "examples" / "queues" / "bigc.yaml"


def test_the_example_queue_file_is_bigcs_two_queues():
    config = load_queue_file(EXAMPLE)
    assert [(q.name, q.share, q.mode_name) for q in config.queues] == [
        ("short", 0.95, "graceful"),
        ("long", 0.05, "graceful"),
    ]
    assert config.default == "long"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("queues:\n  a: {share: 2}\n", "queues.a.share: must be a number in [0, 1], got 2"),
        ("queues:\n  a: {share: 1}\n  a: {share: 1}\n", "duplicate key"),
        ("queues: [\n", "queue file:"),
        (b"\xff\xfe", "queue file: is not valid UTF-8"),
        ("isolation: 1\n", "reservation.isolation: must be below 1, got 1"),
        ("straggler_copies: maybe\n", "reservation.straggler_copies: must be true, false or"),
        ("[]\n", "reservation: must be a mapping, not a list"),
        ("isolation: [\n", "reservation file:"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_field(tmp_path: Path, text, message):
    path = tmp_path / "config.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    load = load_reservation_file if "reservation" in message else load_queue_file
    with pytest.raises(QueueFileError) as caught:
        load(path)
    shown = str(caught.value)
    assert shown.startswith(f"{path}: ") and message in shown and "\n" not in shown


def test_a_missing_file_and_a_directory_are_named(tmp_path: Path):
    with pytest.raises(QueueFileError, match="no such file"):
        load_queue_file(tmp_path / "nope.yaml")
    with pytest.raises(QueueFileError, match="is a directory"):
        load_queue_file(tmp_path)


def test_a_reservation_file_is_a_job_specs_reservation_block(tmp_path: Path):
    path = tmp_path / "reservation.yaml"
    path.write_text("isolation: 0.5\nstraggler_copies: 2\nprior: {alpha: 1.6, t_min: 3}\n")
    assert load_reservation_file(path) == ReservationSpec(
        isolation=0.5, max_copies=2, prior=TaskTimePrior(1.6, 3.0)
    )
