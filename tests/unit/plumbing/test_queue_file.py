"""Reading the RM's configuration files (the queue file, the default reservation): every problem is
one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing.queue_file import (
    QueueFileError,
    load_dias_config,
    load_queue_file,
    load_reservation_file,
)
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


def test_the_example_dias_settings_are_the_papers_two_priorities() -> None:
    config = load_dias_config(EXAMPLE.parents[1] / "dias" / "dias.yaml")
    assert (config.policy_of(0).drop_ratio, config.policy_of(0).max_drop_ratio) == (0.2, 0.4)
    assert config.policy_of(1).sprint_timeout_s == 65.0
    assert config.expected_error(0.2) == pytest.approx(0.15)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (None, "drop_ratios_from: "),  # missing
        ("{", "is not JSON"),
        ('{"slots": 1}', "is not the output of `sluice model dias --json`"),
    ],
)
def test_dias_settings_take_drop_ratios_from_the_models_output(
    tmp_path: Path, model: str | None, message: str
) -> None:
    settings = tmp_path / "dias.yaml"
    settings.write_text("priorities: [{priority: 0, name: low}]\ndrop_ratios_from: model.json\n")
    if model is not None:
        (tmp_path / "model.json").write_text(model)
    with pytest.raises(QueueFileError) as caught:
        load_dias_config(settings)
    assert str(caught.value).startswith(f"{settings}: ") and message in str(caught.value)
    (tmp_path / "model.json").write_text('{"priorities": [{"name": "low", "drop_ratio": 0.1}]}')
    assert load_dias_config(settings).policy_of(0).drop_ratio == 0.1
