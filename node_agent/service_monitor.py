"""The node agent's watch over the services it runs (ROSE Sec. 6.2; docs/jobspec.md,
"Services"): the I/O around :class:`node_agent.service_watch.ServiceWatch`.

* **Indicators**, each :data:`SAMPLE_INTERVAL_S` at most, from the agent's monitor pass: the
  CPU pressure of the service's cgroup where the kernel keeps one (cgroup v2), else the
  machine's, as the share of the last interval that runnable work stalled (from the PSI
  ``total`` counter: ``avg10`` is smoothed over 10 s and would lag an episode).  CPI and MPKI
  join where the machine has hardware counters (none on machines without a PMU; the agent
  says so at start).
* **Probes**, each service's ``probe.period_s``, on a thread of their own with one event loop,
  one probe at a time, so a slow service never holds up the agent's monitor pass.

What it knows is read by :meth:`ServiceMonitor.health`, for the agent's task statuses.

**Kept across restarts** (``services.json`` in the agent's state directory, every
:data:`SAVE_EVERY_S` and at shutdown): each service's spec, its indicators' normal samples and
its probe results.  A restarted agent picks up the watch of every service task still running
(:meth:`ServiceMonitor.restore`) and judges at once, instead of learning a new baseline for
:data:`node_agent.service_watch.MIN_SAMPLES` seconds, during which interference would go
unseen, or worse, be learnt as normal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from node_agent.metrics.pressure import PressureStall, read_cgroup_pressure, read_pressure
from node_agent.runtime.task_state import atomic_write
from node_agent.service_probe import probe_once
from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.service_spec import ServiceSpec, parse_service, service_to_document

if TYPE_CHECKING:  # imported where a service is first watched: it needs numpy and scipy,
    # which an agent that runs no service never loads (the agent starts fast, docs/architecture.md)
    from node_agent.service_watch import ServiceWatch
    from policies.oversubscription.anomaly import AnomalyVerdict, IndicatorSample

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 1.0
SAVE_EVERY_S = 10.0
"""How often the watches are written to the state file: a crash loses at most this much."""
STATE_FILE = "services.json"
MACHINE_PRESSURE = Path("/proc/pressure")


@dataclass(frozen=True)
class ServiceHealth:
    """What the agent knows of one service now."""

    latency_p50_s: float
    latency_p95_s: float
    probes: int
    probes_failed: int
    last_problem: str
    verdict: AnomalyVerdict
    judging: bool = False  # an indicator's baseline is fitted: samples are judged
    judged: IndicatorSample | None = None  # the judged indicator's last sample and bound


@dataclass
class _Watched:
    service: ServiceSpec
    watch: ServiceWatch
    next_probe: float = 0.0
    last_total_us: int | None = None  # PSI ``some total`` at the last sample
    last_sampled: float | None = None


class ServiceMonitor:
    """See the module docstring.  ``pressure_dir`` and ``host`` answer, per task key, where its
    cgroup's PSI is (None: use the machine's) and where its probe connects (None: not yet)."""

    def __init__(
        self,
        pressure_dir: Callable[[str], Path | None],
        host: Callable[[str], str | None],
        config: OversubscriptionConfig,
        machine_pressure: Path = MACHINE_PRESSURE,
        state_dir: Path | None = None,
    ) -> None:
        self._pressure_dir = pressure_dir
        self._host = host
        self.config = config
        self._machine_pressure = machine_pressure
        self._lock = threading.Lock()
        self._watched: dict[str, _Watched] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._file = state_dir / STATE_FILE if state_dir is not None else None
        self._saved = _load(self._file)
        self._saved_at: float | None = None
        self._save_lock = threading.Lock()

    # ------------------------------------------------------------------ the agent's calls

    def add(self, key: str, service: ServiceSpec) -> None:
        from node_agent.service_watch import ServiceWatch

        with self._lock:
            self._watched.setdefault(key, _Watched(service, ServiceWatch(key)))
            self._saved_at = None  # a new service: saved at the next pass
        self._wake.set()

    def restore(self, live: Iterable[str]) -> list[str]:
        """Take up the watches an earlier agent kept for the tasks in ``live`` (at start-up);
        the keys taken up.  The others are dropped: their tasks ended meanwhile."""
        restored = []
        with self._lock:
            for key in live:
                saved = self._saved.pop(key, None)
                if saved is None or key in self._watched:
                    continue
                service, watch = saved
                self._watched[key] = _Watched(service, watch)
                restored.append(key)
            self._saved.clear()
        if restored:
            log.info("service watch kept from before the restart: %s", ", ".join(restored))
            self._wake.set()
        return restored

    def keep_only(self, live: Iterable[str]) -> None:
        """Forget the services that no longer run."""
        keep = set(live)
        with self._lock:
            for key in [k for k in self._watched if k not in keep]:
                del self._watched[key]
                self._saved_at = None

    def sample(self, now: float) -> None:
        """One round of indicator samples for every service due one (the monitor pass)."""
        with self._lock:
            due = [
                (key, watched)
                for key, watched in self._watched.items()
                if watched.last_sampled is None or now - watched.last_sampled >= SAMPLE_INTERVAL_S
            ]
        for key, watched in due:
            stall = self._cpu_pressure(key)
            with self._lock:
                previous, since = watched.last_total_us, watched.last_sampled
                watched.last_sampled = now
                if stall is None:
                    continue
                watched.last_total_us = stall.some_total_us
                if previous is None or since is None or now <= since:
                    continue
                share = 100.0 * max(0, stall.some_total_us - previous) / ((now - since) * 1e6)
                verdict = watched.watch.observe({"psi_cpu": share}, self.config)
            if verdict.anomalous and watched.service.latency_sensitive:
                log.info(
                    "service %s: %s %.3g above its bound %.3g (interference)",
                    key,
                    verdict.indicator,
                    verdict.value,
                    verdict.bound,
                )
        # Written when the set of services changed, and every SAVE_EVERY_S while there are any
        # (an agent without services writes its empty file once).
        if self._saved_at is None or (due and now - self._saved_at >= SAVE_EVERY_S):
            self.save()
            self._saved_at = now

    def save(self) -> None:
        """Write every watch to the state file (the monitor pass, shutdown)."""
        if self._file is None:
            return
        with self._lock:
            record = {
                key: {
                    "service": service_to_document(w.service),
                    "watch": w.watch.to_record(),
                }
                for key, w in self._watched.items()
            }
        with self._save_lock:
            try:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self._file, json.dumps(record, sort_keys=True))
            except OSError as error:
                log.warning("service watch not saved to %s: %s", self._file, error)

    def keys(self) -> frozenset[str]:
        """The task keys of the services watched."""
        with self._lock:
            return frozenset(self._watched)

    def health(self, key: str) -> ServiceHealth | None:
        with self._lock:
            watched = self._watched.get(key)
            if watched is None:
                return None
            watch = watched.watch
            return ServiceHealth(
                latency_p50_s=watch.latency_percentile(50),
                latency_p95_s=watch.latency_percentile(95),
                probes=len(watch.latencies),
                probes_failed=watch.probe_failures,
                last_problem=watch.last_problem,
                verdict=watch.verdict,
                judging=watch.judging,
                judged=watch.judged,
            )

    def anomalous(self) -> list[tuple[str, AnomalyVerdict]]:
        """The latency-sensitive services whose last indicators were anomalous."""
        with self._lock:
            return [
                (key, w.watch.verdict)
                for key, w in self._watched.items()
                if w.service.latency_sensitive and w.watch.verdict.anomalous
            ]

    # ------------------------------------------------------------------ probes

    def start(self) -> None:
        self._thread = threading.Thread(target=self._probe_loop, name="service-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.save()

    def _probe_loop(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while not self._stopping:
                self._wake.wait(timeout=self._probe_once(loop))
                self._wake.clear()
        finally:
            loop.close()

    def _probe_once(self, loop: asyncio.AbstractEventLoop) -> float:
        """Probe every service due; how long until the next one is."""
        now = time.monotonic()
        with self._lock:
            due = [
                (key, w)
                for key, w in self._watched.items()
                if w.service.probe is not None and w.next_probe <= now
            ]
        for key, watched in due:
            probe = watched.service.probe
            assert probe is not None
            watched.next_probe = now + probe.period_s
            host = self._host(key)
            if host is None:
                continue
            result = loop.run_until_complete(probe_once(host, probe))
            with self._lock:
                watched.watch.record_probe(result)
        with self._lock:
            waits = [
                w.next_probe - time.monotonic()
                for w in self._watched.values()
                if w.service.probe is not None
            ]
        return max(0.01, min(waits, default=1.0))

    def _cpu_pressure(self, key: str) -> PressureStall | None:
        directory = self._pressure_dir(key)
        try:
            readings = (
                read_cgroup_pressure(directory)
                if directory is not None
                else read_pressure(self._machine_pressure)
            )
        except ValueError as error:
            log.warning("service %s: PSI unreadable: %s", key, error)
            return None
        if "cpu" not in readings and directory is not None:
            readings = read_pressure(self._machine_pressure)  # the group keeps none: the machine
        return readings.get("cpu")


def _load(path: Path | None) -> dict[str, tuple[ServiceSpec, ServiceWatch]]:
    """The watches an earlier agent kept; an unreadable file or entry is logged and skipped."""
    if path is None or not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as error:
        log.warning("service watch in %s unreadable (%s): starting it afresh", path, error)
        return {}
    if not record:
        return {}  # no service ran: the service watch (numpy, scipy) is not even imported
    from node_agent.service_watch import ServiceWatch

    kept: dict[str, tuple[ServiceSpec, ServiceWatch]] = {}
    for key, entry in record.items():
        try:
            service = parse_service(entry["service"], "service")
            kept[str(key)] = (service, ServiceWatch.from_record(str(key), entry["watch"]))
        except (KeyError, TypeError, ValueError) as error:
            log.warning("service watch of %s in %s unreadable (%s): dropped", key, path, error)
    return kept
