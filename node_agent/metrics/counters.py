"""Hardware performance counters (CPI, MPKI) through ``perf stat``.

Figures, for the whole machine (key ``""``) and per perf_event cgroup (key = the cgroup path
relative to the cgroup mount, as passed to ``perf stat -G``), over one measurement window:

``cpi``
    Cycles per instruction: ``cycles / instructions``; lower is better.  A rise on a loaded
    machine is the classic sign of interference (shared caches, memory bandwidth, SMT).
``mpki``
    Cache misses per thousand instructions: ``cache-misses / instructions * 1000``, with perf's
    generic ``cache-misses`` event, which the kernel maps to last-level cache misses on x86.

Both are ``None`` when no instruction retired.  Absent is never zero: on a machine without a
PMU (most VMs; ``perf`` then prints ``<not supported>``), without ``perf``, or where the kernel
forbids access (``kernel.perf_event_paranoid``), :func:`detect_counters` says
``available=False`` with a one-line ``reason``, and :class:`CounterSampler` measures nothing.
A reading exists only when all three events were counted; an event that was ``<not counted>``
(the PMU never scheduled it) makes that reading absent.  On hybrid CPUs perf reports each core
type separately (``cpu_core/cycles/``, ``cpu_atom/cycles/``): the counts are summed.  Counts are
perf's, i.e. already scaled up when the kernel multiplexed the counters.

The parser is a pure function of perf's ``-x,`` output; the ``perf`` runs are the thin shell.
"""

from __future__ import annotations

import logging
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger("sluice.agent.metrics")

EVENTS = ("cycles", "instructions", "cache-misses")
"""The events measured, in the order given to ``perf stat -e``."""

DETECT_TIMEOUT_S = 5.0
"""How long detection may take: ``perf stat -- true`` normally needs well under a second."""

MEASURE_TIMEOUT_MARGIN_S = 10.0
"""How much longer than the measurement window a ``perf stat`` run may take before it is killed."""

NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"

Run = Callable[..., subprocess.CompletedProcess[str]]

_EVENT_LIST = ",".join(EVENTS)
_ALIASES = {"cpu-cycles": "cycles"}
_PERCENT = re.compile(r"\d+\.\d+")
_PARANOID = re.compile(r"perf_event_paranoid setting is (-?\d+)")


@dataclass(frozen=True)
class CounterSupport:
    """Whether this machine can measure :data:`EVENTS`; ``reason`` says why not ("" if it can)."""

    available: bool
    reason: str = ""


@dataclass(frozen=True)
class CounterReading:
    """Event counts over one window (summed over CPUs, and over core types on hybrid CPUs)."""

    cycles: float
    instructions: float
    cache_misses: float

    @property
    def cpi(self) -> float | None:
        """Cycles per instruction; ``None`` when no instruction retired."""
        return self.cycles / self.instructions if self.instructions > 0 else None

    @property
    def mpki(self) -> float | None:
        """Cache misses per 1000 instructions; ``None`` when no instruction retired."""
        return self.cache_misses / self.instructions * 1000 if self.instructions > 0 else None


@dataclass(frozen=True)
class PerfCount:
    """One counter line of ``perf stat -x,``: ``value`` is ``None`` unless ``status`` is
    ``"counted"`` (else it is ``<not supported>`` or ``<not counted>``)."""

    cgroup: str
    event: str
    value: float | None
    status: str


# --- parsing --------------------------------------------------------------------------------


def event_name(raw: str) -> str:
    """perf's printed event name without PMU and modifiers: ``cpu_core/cycles/`` and
    ``cycles:u`` -> ``cycles``; aliases map to the name asked for."""
    name = raw.strip()
    if "/" in name:
        segments = [segment for segment in name.split("/") if segment]
        name = segments[-1] if segments else name
    name = name.split(":", 1)[0]
    return _ALIASES.get(name, name)


def parse_perf_counts(text: str) -> list[PerfCount]:
    """Every counter line of ``perf stat -x,`` output (without ``-I``, ``-A``, ``--per-*``).

    Columns, per tools/perf/util/stat-display.c: value, unit, event, [cgroup], run time (ns,
    an integer), percentage running (``%.2f``), [variance], metric value, metric unit.  The
    cgroup column exists only when cgroups were given; it is recognised by the integer run time
    and the percentage that follow it.  Comment (``#``) and empty lines, and metric-only
    continuation lines (empty value and event), are skipped.  Raises ``ValueError`` for a line
    that is none of these.
    """
    counts: list[PerfCount] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            raise ValueError(f"perf stat: line {number}: {line!r} is not a counter line")
        value_text, event = fields[0].strip(), fields[2].strip()
        if not value_text and not event:
            continue
        if not event:
            raise ValueError(f"perf stat: line {number}: no event name in {line!r}")
        has_cgroup = (
            len(fields) >= 6 and fields[4].isdigit() and _PERCENT.fullmatch(fields[5]) is not None
        )
        cgroup = fields[3] if has_cgroup else ""
        if value_text in (NOT_SUPPORTED, NOT_COUNTED):
            counts.append(PerfCount(cgroup, event_name(event), None, value_text))
            continue
        try:
            value = float(value_text)
        except ValueError:
            raise ValueError(
                f"perf stat: line {number}: value {value_text!r} of {event} is not a count"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"perf stat: line {number}: value {value_text!r} of {event} is not a count"
            )
        counts.append(PerfCount(cgroup, event_name(event), value, "counted"))
    return counts


def readings_from_counts(counts: Sequence[PerfCount]) -> dict[str, CounterReading]:
    """One reading per cgroup that has all of :data:`EVENTS` counted (summing duplicates such
    as the per-core-type lines of a hybrid CPU)."""
    sums: dict[str, dict[str, float]] = {}
    for count in counts:
        if count.value is None or count.event not in EVENTS:
            continue
        per_event = sums.setdefault(count.cgroup, {})
        per_event[count.event] = per_event.get(count.event, 0.0) + count.value
    return {
        cgroup: CounterReading(
            cycles=per_event["cycles"],
            instructions=per_event["instructions"],
            cache_misses=per_event["cache-misses"],
        )
        for cgroup, per_event in sums.items()
        if all(event in per_event for event in EVENTS)
    }


def parse_perf_stat(text: str) -> dict[str, CounterReading]:
    """``perf stat -x,`` output -> readings keyed by cgroup (``""`` for machine-wide).  A cgroup
    with an event ``<not supported>``/``<not counted>`` or missing has no reading.  Raises
    ``ValueError`` on lines that are not perf counter lines."""
    return readings_from_counts(parse_perf_counts(text))


# --- detection ------------------------------------------------------------------------------


def judge_detection(returncode: int, stdout: str, stderr: str) -> CounterSupport:
    """Decide from one ``perf stat -a -e cycles,instructions,cache-misses -- true`` run (its
    counter output on ``stdout``, perf's own messages on ``stderr``)."""
    if returncode != 0:
        return CounterSupport(False, _failure_reason(returncode, stderr))
    try:
        counts = [count for count in parse_perf_counts(stdout) if count.cgroup == ""]
    except ValueError as error:
        return CounterSupport(False, f"perf stat output not understood ({error})")
    statuses: dict[str, str] = {}
    values: dict[str, float] = {}
    for count in counts:
        if count.event not in EVENTS:
            continue
        if count.value is not None:
            statuses[count.event] = "counted"
            values[count.event] = values.get(count.event, 0.0) + count.value
        else:
            statuses.setdefault(count.event, count.status)
    problems = []
    for status, what in (
        (NOT_SUPPORTED, "no hardware performance counters"),
        (NOT_COUNTED, "hardware counters were not counted"),
    ):
        events = [event for event in EVENTS if statuses.get(event) == status]
        if events:
            problems.append(f"{what} (perf stat: {', '.join(events)} {status})")
    missing = [event for event in EVENTS if event not in statuses]
    if missing:
        problems.append(f"perf stat did not report {', '.join(missing)}")
    if problems:
        return CounterSupport(False, "; ".join(problems))
    if values["cycles"] <= 0 or values["instructions"] <= 0:
        # Some hypervisors accept the events but never count: CPI would be 0/0 forever.
        return CounterSupport(
            False, "hardware counters read zero (perf stat: cycles, instructions)"
        )
    return CounterSupport(True, "")


def _failure_reason(returncode: int, stderr: str) -> str:
    paranoid = _PARANOID.search(stderr)
    if paranoid or "Access to performance monitoring" in stderr:
        level = f" (kernel.perf_event_paranoid is {paranoid.group(1)})" if paranoid else ""
        return (
            f"no permission to read hardware counters{level}: run the agent as root or with "
            "CAP_PERFMON"
        )
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "")
    return f"perf stat failed (exit {returncode})" + (f": {first}" if first else "")


def detect_counters(run: Run = subprocess.run) -> CounterSupport:
    """Run ``perf stat`` once, machine-wide as :class:`CounterSampler` will, and decide whether
    CPI and MPKI can be measured here.  Never raises for a missing or failing ``perf``."""
    argv = ["perf", "stat", "-x,", "-o", "/dev/stdout", "-a", "-e", _EVENT_LIST, "--", "true"]
    try:
        result = run(argv, capture_output=True, text=True, timeout=DETECT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return CounterSupport(False, "perf is not installed")
    except subprocess.TimeoutExpired:
        return CounterSupport(False, f"perf stat did not finish within {DETECT_TIMEOUT_S:g} s")
    except OSError as error:
        return CounterSupport(False, f"perf cannot be run: {error}")
    return judge_detection(result.returncode, result.stdout or "", result.stderr or "")


# --- measuring ------------------------------------------------------------------------------


def perf_stat_command(cgroups: Sequence[str], duration: float) -> list[str]:
    """The ``perf stat`` argv measuring the machine and each of ``cgroups`` for ``duration`` s.

    ``-G`` attaches its i-th cgroup to the i-th event defined before it, so the events are
    repeated once per cgroup with each name listed once per event; the machine-wide events come
    after ``-G`` and so stay unrestricted (perf-stat(1), ``--cgroup``).  Counter lines go to
    stdout (``-o /dev/stdout``) so that perf's own messages on stderr never mix with them.
    """
    argv = ["perf", "stat", "-x,", "-o", "/dev/stdout", "-a"]
    if cgroups:
        argv += ["-e", ",".join([_EVENT_LIST] * len(cgroups))]
        argv += ["-G", ",".join(name for name in cgroups for _ in EVENTS)]
    argv += ["-e", _EVENT_LIST, "--", "sleep", f"{duration:.3f}"]
    return argv


class CounterSampler:
    """Measures CPI/MPKI of the machine and of cgroups with one ``perf stat`` run per call."""

    def __init__(self, support: CounterSupport, run: Run = subprocess.run) -> None:
        self.support = support
        self._run = run
        # Why the last measure() returned nothing although counters are available ("" if not).
        self.last_failure = ""

    def measure(self, cgroups: Sequence[str], duration: float) -> dict[str, CounterReading]:
        """Count for ``duration`` seconds (blocking that long) and return the readings keyed
        ``""`` (machine) and by cgroup name; a cgroup whose events were not counted is absent.

        ``cgroups`` are perf_event cgroup paths relative to the cgroup mount (``-G`` names).
        Returns ``{}`` without running anything when counters are unavailable, and ``{}`` with
        :attr:`last_failure` set (and a log line) when ``perf`` fails - e.g. a task's cgroup
        removed between listing and measuring fails the whole run (perf exits 129).
        """
        if duration <= 0:
            raise ValueError(f"duration must be positive, not {duration}")
        names = list(dict.fromkeys(cgroups))  # perf would report a repeated cgroup twice
        for name in names:
            if not name or "," in name:
                raise ValueError(f"cgroup {name!r}: must be non-empty without commas (perf -G)")
        if not self.support.available:
            return {}
        argv = perf_stat_command(names, duration)
        try:
            result = self._run(
                argv,
                capture_output=True,
                text=True,
                timeout=duration + MEASURE_TIMEOUT_MARGIN_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return self._failed(f"perf stat did not finish within {duration:g} s + margin")
        except OSError as error:
            return self._failed(f"perf cannot be run: {error}")
        if result.returncode != 0:
            return self._failed(_failure_reason(result.returncode, result.stderr or ""))
        try:
            readings = parse_perf_stat(result.stdout or "")
        except ValueError as error:
            return self._failed(f"perf stat output not understood ({error})")
        self.last_failure = ""
        return readings

    def _failed(self, reason: str) -> dict[str, CounterReading]:
        if reason != self.last_failure:  # once per distinct failure, not every interval
            log.warning("hardware counters not measured: %s", reason)
        self.last_failure = reason
        return {}
