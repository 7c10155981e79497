"""The agent's service monitor: CPU pressure sampled from PSI totals into the watch, probes on
their own thread against a real listening socket."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from node_agent.service_monitor import ServiceMonitor
from node_agent.service_watch import MIN_SAMPLES
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.scheduling.service_spec import ProbeSpec, ServiceSpec

RP = OversubscriptionConfig(mode=OversubscriptionMode.RESPONSIVENESS)


def write_cpu_pressure(directory: Path, total_us: int) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "cpu").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={total_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )


def test_the_stall_share_of_each_interval_feeds_the_detector(tmp_path: Path):
    machine = tmp_path / "pressure"
    monitor = ServiceMonitor(lambda key: None, lambda key: None, RP, machine_pressure=machine)
    monitor.add("j.server-0.1", ServiceSpec(latency_sensitive=True))
    total = 0
    for second in range(MIN_SAMPLES + 5):  # quiet: 1-3 % of each second stalled
        total += 10_000 + (second % 3) * 10_000
        write_cpu_pressure(machine, total)
        monitor.sample(float(second))
    health = monitor.health("j.server-0.1")
    assert health is not None and not health.verdict.anomalous
    total += 800_000  # 80 % of the next second stalled: interference
    write_cpu_pressure(machine, total)
    monitor.sample(float(MIN_SAMPLES + 5))
    ((key, verdict),) = monitor.anomalous()
    assert key == "j.server-0.1" and verdict.indicator == "psi_cpu"
    assert abs(verdict.value - 80.0) < 1e-6
    monitor.keep_only([])
    assert monitor.health("j.server-0.1") is None and monitor.anomalous() == []


def test_probes_run_on_their_own_thread_every_period(tmp_path: Path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        port = server.getsockname()[1]
        monitor = ServiceMonitor(lambda key: None, lambda key: "127.0.0.1", RP)
        monitor.add("svc", ServiceSpec(probe=ProbeSpec(port=port, period_s=0.05, timeout_s=0.05)))
        monitor.start()
        try:
            deadline = time.monotonic() + 10
            while (h := monitor.health("svc")) is None or h.probes < 3:
                assert time.monotonic() < deadline, "three probes not within 10 s"
                time.sleep(0.01)
        finally:
            monitor.stop()
    health = monitor.health("svc")
    assert health is not None and health.latency_p95_s > 0 and health.probes_failed == 0


def quiet_history(monitor: ServiceMonitor, machine: Path, seconds: int) -> int:
    """``seconds`` of 1-3 % stall sampled into ``monitor``; the PSI total reached."""
    total = 0
    for second in range(seconds):
        total += 10_000 + (second % 3) * 10_000
        write_cpu_pressure(machine, total)
        monitor.sample(float(second))
    return total


def test_a_restarted_agent_judges_at_once_with_the_watch_it_kept(tmp_path: Path):
    machine, state = tmp_path / "pressure", tmp_path / "state"
    service = ServiceSpec(latency_sensitive=True, probe=ProbeSpec(port=8080, http="/health"))
    before = ServiceMonitor(
        lambda key: None, lambda key: None, RP, machine_pressure=machine, state_dir=state
    )
    before.add("j.server-0.1", service)
    before.add("j.gone-0.1", ServiceSpec(latency_sensitive=True))
    total = quiet_history(before, machine, MIN_SAMPLES + 5)
    kept = before.health("j.server-0.1")
    assert kept is not None and kept.judging
    before.stop()  # the agent stops: its watches are written

    after = ServiceMonitor(
        lambda key: None, lambda key: None, RP, machine_pressure=machine, state_dir=state
    )
    assert after.keys() == frozenset()  # nothing watched before the live tasks are known
    assert after.restore(["j.server-0.1", "j.batch-0.1"]) == ["j.server-0.1"]
    assert after.keys() == {"j.server-0.1"}  # the ended service's watch is dropped
    health = after.health("j.server-0.1")
    assert health is not None and health.judging  # no new learning period
    assert health.judged is None or health.judged.baseline == kept.judged.baseline  # type: ignore[union-attr]
    # Two samples: the first sets the PSI total, the second is judged: 80 % is interference.
    write_cpu_pressure(machine, total)
    after.sample(1000.0)
    write_cpu_pressure(machine, total + 800_000)
    after.sample(1001.0)
    ((key, verdict),) = after.anomalous()
    assert key == "j.server-0.1" and abs(verdict.value - 80.0) < 1e-6
    assert after.restore(["j.server-0.1"]) == []  # only at start-up


def test_an_unreadable_state_file_starts_the_watch_afresh(tmp_path: Path, caplog):
    (tmp_path / "services.json").write_text('{"j.s-0.1": {"service": {"probe": 3}}, "x": 1')
    monitor = ServiceMonitor(lambda key: None, lambda key: None, RP, state_dir=tmp_path)
    assert monitor.restore(["j.s-0.1"]) == []
    assert "unreadable" in caplog.text
    (tmp_path / "services.json").write_text('{"j.s-0.1": {"service": {"probe": 3}, "watch": {}}}')
    monitor = ServiceMonitor(lambda key: None, lambda key: None, RP, state_dir=tmp_path)
    assert monitor.restore(["j.s-0.1"]) == []
    assert "service watch of j.s-0.1" in caplog.text
