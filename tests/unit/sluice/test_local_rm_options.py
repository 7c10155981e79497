"""``sluice local up`` hands the RM its dispatch and DiAS settings, and refuses a bad settings
file or count before it starts anything (so nothing is half-created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing.errors import UserError
from sluice import local_cluster
from sluice.local_cluster import LocalClusterSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dias" / "dias.yaml"


def spec(tmp_path: Path, **fields: object) -> LocalClusterSpec:
    return LocalClusterSpec(directory=tmp_path / "cluster", nodes=1, **fields)  # type: ignore[arg-type]


def flag(options: list[str], name: str) -> str | None:
    return options[options.index(name) + 1] if name in options else None


def test_no_dispatch_flags_leave_the_rms_defaults(tmp_path: Path) -> None:
    options = local_cluster._rm_options(spec(tmp_path))
    assert "--dispatch" not in options and "--dias-config" not in options
    assert "--max-running-jobs" not in options


def test_dispatch_and_dias_settings_reach_the_rm(tmp_path: Path) -> None:
    options = local_cluster._rm_options(
        spec(tmp_path, dispatch="dias", max_running_jobs=3, dias_config=EXAMPLE)
    )
    assert flag(options, "--dispatch") == "dias"
    assert flag(options, "--max-running-jobs") == "3"
    assert flag(options, "--dias-config") == str(EXAMPLE)  # absolute: the RM runs elsewhere


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dias_config": "missing.yaml"}, "--dias-config: "),
        ({"dias_config": "bad.yaml"}, "--dias-config: "),
        ({"max_running_jobs": 0}, "--max-running-jobs: must be at least 1"),
    ],
)
def test_bad_rm_settings_are_refused_before_anything_starts(
    tmp_path: Path, fields: dict[str, str | int], message: str
) -> None:
    (tmp_path / "bad.yaml").write_text("priorities: [{priority: 0, drop_ratio: 2}]\n")
    resolved = {
        key: tmp_path / str(value) if key == "dias_config" else value
        for key, value in fields.items()
    }
    with pytest.raises(UserError, match=message) as raised:
        local_cluster.up(spec(tmp_path, **resolved), lambda _: None)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "cluster").exists()  # nothing started, nothing written
