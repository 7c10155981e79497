"""The PNG charts (simulator/plots.py): they are written, are PNGs, and are reproducible."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from simulator.plots import plot_cdfs, plot_comparison, plot_utilisation

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAN = math.nan


def _chunks(data: bytes) -> list[bytes]:
    """The chunk types of a PNG file."""
    assert data.startswith(PNG_SIGNATURE)
    types = []
    i = len(PNG_SIGNATURE)
    while i < len(data):
        (length,) = struct.unpack(">I", data[i : i + 4])
        types.append(data[i + 4 : i + 8])
        i += 12 + length
    return types


def _size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _check_png(path: Path) -> bytes:
    data = path.read_bytes()
    chunks = _chunks(data)
    assert chunks[0] == b"IHDR"
    assert chunks[-1] == b"IEND"
    # No text chunk (software version) and no timestamp: the bytes depend on the data only.
    assert not {b"tEXt", b"iTXt", b"zTXt", b"tIME"} & set(chunks)
    return data


@pytest.mark.parametrize(
    "series",
    [
        {"wide": [0.5, 10.0, 1000.0], "unfinished": [NAN, NAN], "empty": []},  # > 100×: log axis
        {},
    ],
    ids=["edge-cases", "no-groups"],
)
def test_plot_cdfs_edge_cases(tmp_path: Path, series: dict[str, list[float]]) -> None:
    plot_cdfs(series, tmp_path / "a" / "cdf.png")
    assert _size(_check_png(tmp_path / "a" / "cdf.png")) == (800, 500)


def test_plot_cdfs_is_reproducible(tmp_path: Path) -> None:
    series: dict[str, list[float]] = {
        "priority 10": [1.0, 2.0, 3.0],
        "priority 1": [5.0, NAN, 8.0],
        "all": [1.0, 2.0, 3.0, 5.0, 8.0],
    }
    plot_cdfs(series, tmp_path / "one.png")
    plot_cdfs(series, tmp_path / "two.png")
    assert _check_png(tmp_path / "one.png") == _check_png(tmp_path / "two.png")
    plot_cdfs({**series, "all": [1.0, 2.0]}, tmp_path / "three.png")
    assert (tmp_path / "three.png").read_bytes() != (tmp_path / "one.png").read_bytes()


def test_plot_utilisation(tmp_path: Path) -> None:
    times, series = [0.0, 10.0, 25.0], {"cpu": [0.5, 1.2, 0.2], "memory": [0.1, 0.3, 0.0]}
    plot_utilisation(times, series, tmp_path / "u1.png")
    plot_utilisation(times, series, tmp_path / "u2.png")
    assert _check_png(tmp_path / "u1.png") == _check_png(tmp_path / "u2.png")
    plot_utilisation([], {"cpu": []}, tmp_path / "empty.png")
    _check_png(tmp_path / "empty.png")


def test_plot_utilisation_rejects_ragged_series(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="values"):
        plot_utilisation([0.0, 1.0], {"cpu": [0.5]}, tmp_path / "u.png")


def test_plot_comparison(tmp_path: Path) -> None:
    percentiles = {
        "all jobs": {"baseline": [10.0, 50.0, 90.0], "preempt": [8.0, 30.0, NAN]},
        "priority 10": {"baseline": [5.0, 9.0, 9.9], "preempt": [4.0, 6.0, 7.0]},
    }
    cdfs = {
        "all jobs": {"baseline": [10.0, 50.0, NAN], "preempt": [8.0, 30.0]},
        "priority 10": {"baseline": [5.0], "preempt": [4.0]},
    }
    with_cdfs, bars_only = tmp_path / "c1.png", tmp_path / "c2.png"
    plot_comparison(percentiles, with_cdfs, cdfs=cdfs)
    plot_comparison(percentiles, bars_only)
    wide, high = _size(_check_png(with_cdfs))
    narrow, _ = _size(_check_png(bars_only))
    assert wide == 2 * narrow  # the CDF column sits beside the bars
    assert high == 2 * 360  # one row of panels per group


def test_plot_comparison_of_nothing(tmp_path: Path) -> None:
    plot_comparison({}, tmp_path / "none.png")
    _check_png(tmp_path / "none.png")


def test_no_pyplot() -> None:
    # The charts use Figure + the Agg canvas directly: no global pyplot state, no GUI backend.
    import simulator.plots as module

    source = Path(module.__file__).read_text()
    assert "import matplotlib.pyplot" not in source
    assert "from matplotlib import pyplot" not in source
