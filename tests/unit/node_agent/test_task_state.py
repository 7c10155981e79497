"""The per-task state directory: key encoding, launch records, exit records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_agent.runtime.base import RuntimeError_
from node_agent.runtime.task_state import (
    StateStore,
    decode_name,
    encode_name,
    launch_from_json,
    launch_to_json,
)
from tests.unit.node_agent.conftest import make_launch


@given(st.text(min_size=1))
def test_encoded_key_is_one_safe_path_component_that_decodes_back(key: str) -> None:
    name = encode_name(key)
    assert re.fullmatch(r"[A-Za-z0-9_%-]+", name)
    assert decode_name(name) == key


@pytest.mark.parametrize("key", [".", "..", "a/b", "../x", ".hidden", "job 1/task:0"])
def test_dangerous_keys_stay_inside_the_store(tmp_path: Path, key: str) -> None:
    store = StateStore.under(tmp_path)
    assert store.task(key).path.parent == store.root


def test_empty_key_is_refused() -> None:
    with pytest.raises(RuntimeError_, match="task key: must not be empty"):
        encode_name("")


@pytest.mark.parametrize(
    "launch",
    [
        make_launch(),
        make_launch(key="k/ü", argv=("sh", "-c", "echo 'a b'"), cpuset=(0, 3), image="img:1"),
        make_launch(env={"A": "1", "B": "x=y"}, cpu=0.01, memory_mb=1),
    ],
)
def test_launch_json_round_trip(launch) -> None:
    assert launch_from_json(launch_to_json(launch, 12.5)) == (launch, 12.5)


def test_exit_record_and_finish_time(tmp_path: Path) -> None:
    task = StateStore.under(tmp_path).task("t")
    task.create()
    assert task.read_exit() is None
    task.write_exit(143, finished_at=1_000_000.0)
    assert task.read_exit() == (143, 1_000_000.0)
    assert not task.exit_file.with_name("exit_code.tmp").exists()


def test_create_refuses_an_existing_key(tmp_path: Path) -> None:
    store = StateStore.under(tmp_path)
    store.task("t").create()
    with pytest.raises(FileExistsError):
        store.task("t").create()


def test_update_limits_keeps_everything_else(tmp_path: Path) -> None:
    launch = make_launch(cpuset=(1,))
    task = StateStore.under(tmp_path).task(launch.task_key)
    task.create()
    task.write_launch(launch, 5.0)
    new = make_launch(cpu=2, memory_mb=7).limits
    task.update_limits(new)
    stored, started_at = task.read_launch()
    assert (stored.limits, started_at, stored.argv) == (new, 5.0, launch.argv)


def test_existing_lists_task_dirs_in_name_order(tmp_path: Path) -> None:
    store = StateStore.under(tmp_path)
    for key in ("b", "a", "c"):
        store.task(key).create()
    (store.root / "stray-file").write_text("")
    assert [decode_name(t.path.name) for t in store.existing()] == ["a", "b", "c"]
    assert list(StateStore.under(tmp_path / "nothing").existing()) == []
