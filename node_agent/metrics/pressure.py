"""Linux pressure stall information (PSI) for the machine and for cgroup v2 task groups.

PSI says how much of the wall-clock time runnable work was *stalled* waiting for a resource:

* ``some`` — the share of time in which **at least one** task was stalled on the resource;
* ``full`` — the share of time in which **all** non-idle tasks were stalled at once (the
  resource is then wasting the whole machine/cgroup).

Each line carries three running averages over 10 s, 60 s and 300 s, as **percentages**
(0.0-100.0), and ``total``, the accumulated stall time in **microseconds** since boot (machine)
or since the cgroup was created; the integrator differences ``total`` between samples when it
wants an exact figure for one interval.

Sources: ``/proc/pressure/{cpu,memory,io}`` for the machine (kernel >= 4.20 with ``psi=1``) and
``<cgroup>/{cpu,memory,io}.pressure`` in a cgroup v2 directory.  Absent means "the kernel does
not tell": a missing or unreadable file (no PSI, PSI disabled -> ``EOPNOTSUPP``, cgroup v1, the
cgroup just removed) leaves that resource out of the returned mapping, and a file without a
``full`` line (the machine's ``cpu`` before Linux 5.13) gives ``None`` for the ``full`` figures.
A file that exists but does not parse raises :class:`ValueError` naming the file: that is a
kernel format this module does not understand, which should be loud rather than read as zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

RESOURCES = ("cpu", "memory", "io")
"""The PSI resources, in the order the protobuf ``Pressure`` message lists them."""

_AVERAGES = ("avg10", "avg60", "avg300")
_LINE_KINDS = ("some", "full")


@dataclass(frozen=True)
class PressureStall:
    """One PSI file.  ``*_avg*`` are percentages of wall-clock time (0-100) over 10/60/300 s;
    ``*_total_us`` is accumulated stall time in microseconds.  ``full_*`` are ``None`` when the
    file has no ``full`` line."""

    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_us: int
    full_avg10: float | None = None
    full_avg60: float | None = None
    full_avg300: float | None = None
    full_total_us: int | None = None


def parse_pressure(text: str, *, source: str = "PSI") -> PressureStall:
    """Parse the text of one PSI file.

    Each line is ``some|full avg10=F avg60=F avg300=F total=N``.  Keys may come in any order;
    unknown keys and lines of an unknown kind are ignored (the kernel may add figures).  A
    ``some`` line is required.  Raises ``ValueError("<source>: <problem>")`` on anything else.
    """
    lines: dict[str, tuple[float, float, float, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split()
        if not words:
            continue
        kind, pairs = words[0], words[1:]
        fields: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"{source}: line {number}: {pair!r} is not key=value")
            fields[key] = value
        if not pairs:
            raise ValueError(f"{source}: line {number}: {raw.strip()!r} has no figures")
        if kind not in _LINE_KINDS:
            continue
        if kind in lines:
            raise ValueError(f"{source}: line {number}: a second {kind!r} line")
        lines[kind] = _figures(fields, source, f"line {number} ({kind})")
    if "some" not in lines:
        raise ValueError(f"{source}: no 'some' line")
    some = lines["some"]
    full = lines.get("full")
    return PressureStall(
        some_avg10=some[0],
        some_avg60=some[1],
        some_avg300=some[2],
        some_total_us=some[3],
        full_avg10=full[0] if full else None,
        full_avg60=full[1] if full else None,
        full_avg300=full[2] if full else None,
        full_total_us=full[3] if full else None,
    )


def _figures(fields: dict[str, str], source: str, where: str) -> tuple[float, float, float, int]:
    averages: list[float] = []
    for key in _AVERAGES:
        if key not in fields:
            raise ValueError(f"{source}: {where}: {key} missing")
        try:
            value = float(fields[key])
        except ValueError:
            raise ValueError(f"{source}: {where}: {key}={fields[key]!r} is not a number") from None
        # float() accepts "nan"/"inf"; the kernel never writes them, so they mean garbage.
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{source}: {where}: {key}={fields[key]!r} is not a percentage")
        averages.append(value)
    if "total" not in fields:
        raise ValueError(f"{source}: {where}: total missing")
    total_text = fields["total"]
    if not total_text.isdigit():
        raise ValueError(f"{source}: {where}: total={total_text!r} is not a count of us")
    return averages[0], averages[1], averages[2], int(total_text)


def _read_files(files: dict[str, Path]) -> dict[str, PressureStall]:
    readings: dict[str, PressureStall] = {}
    for resource, path in files.items():
        try:
            text = path.read_text()
        except OSError:
            # Missing (old kernel, cgroup gone) or EOPNOTSUPP (psi=0): the kernel does not tell.
            continue
        readings[resource] = parse_pressure(text, source=str(path))
    return readings


def read_pressure(directory: Path = Path("/proc/pressure")) -> dict[str, PressureStall]:
    """The machine's PSI keyed ``"cpu"``/``"memory"``/``"io"``; unreadable files are omitted.
    Raises ``ValueError`` if a readable file does not parse."""
    return _read_files({resource: directory / resource for resource in RESOURCES})


def read_cgroup_pressure(cgroup_dir: Path) -> dict[str, PressureStall]:
    """A cgroup v2 group's PSI (``<resource>.pressure``) keyed like :func:`read_pressure`;
    unreadable files (cgroup v1, the group removed, PSI off) are omitted."""
    return _read_files({resource: cgroup_dir / f"{resource}.pressure" for resource in RESOURCES})
