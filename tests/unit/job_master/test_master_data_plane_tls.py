"""A job master joins the data plane the RM names over TLS with its own certificate, and a job
master without one leaves a TLS link out with one line instead of joining it in plaintext."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from job_master import master
from job_master.master import JobMaster
from plumbing import tls
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from plumbing.tls import Identity, Role


@pytest.fixture(scope="module")
def job_master_tls(tmp_path_factory: pytest.TempPathFactory) -> BrokerTls:
    root = tmp_path_factory.mktemp("jm-tls")
    tls.issue(tls.init_ca(root / "ca", "lab"), Identity(Role.RM, "rm"), root / "rm")
    chain, key = tls.issue_job_master(tls.load_job_master_ca(root / "rm"), "job-1")
    tls.write_tls_dir(root / "jm", (root / "ca" / tls.CA_CERT).read_bytes(), chain, key)
    return BrokerTls.of_dir(root / "jm")


class Feeds:
    """Stands in for CandidateFeed: records what each was given; never connects."""

    def __init__(self) -> None:
        self.made: list[tuple[str, BrokerTls | None]] = []

    def __call__(self, url: str, prefix: str, resync: object, *, tls: BrokerTls | None) -> Feeds:
        self.made.append((url, tls))
        return self

    def start(self) -> None:
        pass

    def close(self, timeout: float = 0.0) -> None:
        pass


def joined(
    plane: DataPlane, broker_tls: BrokerTls | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[JobMaster, Feeds]:
    feeds = Feeds()
    monkeypatch.setattr(master, "CandidateFeed", feeds)
    jm = JobMaster("127.0.0.1:1", "job-1", broker_tls=broker_tls)  # connects lazily: never
    jm._join_data_plane(plane)
    return jm, feeds


@pytest.fixture
def leave() -> Iterator[list[JobMaster]]:
    made: list[JobMaster] = []
    yield made
    for jm in made:
        jm._leave_data_plane()
        jm._launcher.shutdown(wait=True, cancel_futures=True)
        jm._channel.close()


@pytest.mark.parametrize("url", ["mqtts://m:8883", "mqtt://m:1883"])
def test_the_feed_gets_the_job_masters_certificate(
    monkeypatch: pytest.MonkeyPatch, job_master_tls: BrokerTls, leave: list[JobMaster], url: str
) -> None:
    jm, feeds = joined(DataPlane(mqtt_url=url), job_master_tls, monkeypatch)
    leave.append(jm)
    assert feeds.made == [(url, job_master_tls)]


def test_without_a_certificate_an_mqtts_broker_is_left_out_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, leave: list[JobMaster]
) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.jm"):
        jm, feeds = joined(DataPlane(mqtt_url="mqtts://m:8883"), None, monkeypatch)
    leave.append(jm)
    assert feeds.made == [] and jm.candidates == ()
    assert [r.getMessage() for r in caplog.records if r.name == "sluice.jm"] == [
        "MQTT broker mqtts://m:8883 is TLS but this job master has no certificate: no "
        "candidate list"
    ]


def test_main_gives_the_job_master_its_tls_directorys_files(
    monkeypatch: pytest.MonkeyPatch, job_master_tls: BrokerTls
) -> None:
    given: dict[str, object] = {}

    class StopHereError(Exception):
        pass

    def record(self: JobMaster, *args: object, **kwargs: object) -> None:
        given.update(kwargs)
        raise StopHereError

    monkeypatch.setattr(JobMaster, "__init__", record)
    directory = Path(job_master_tls.ca_file).parent
    with pytest.raises(StopHereError):
        master.main(["--rm", "127.0.0.1:1", "--job", "job-1", "--tls-dir", str(directory)])
    assert given["broker_tls"] == job_master_tls
