"""Reading a queue file: every problem is one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing.queue_file import QueueFileError, load_queue_file

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
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_field(tmp_path: Path, text, message):
    path = tmp_path / "queues.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(QueueFileError) as caught:
        load_queue_file(path)
    shown = str(caught.value)
    assert shown.startswith(f"{path}: ") and message in shown and "\n" not in shown


def test_a_missing_file_and_a_directory_are_named(tmp_path: Path):
    with pytest.raises(QueueFileError, match="no such file"):
        load_queue_file(tmp_path / "nope.yaml")
    with pytest.raises(QueueFileError, match="is a directory"):
        load_queue_file(tmp_path)
