"""What ``sluice nodes`` and ``sluice candidates`` show of the aggregator's replies, on built
protobufs: load summaries, indicators (absent is "-", never 0), candidacy, the columns and the
candidates text."""

from __future__ import annotations

import pytest

from policies.oversubscription.config import LOAD_METRICS
from sluice.machines import (
    MACHINE_HEADERS,
    candidacy,
    candidates_text,
    energy,
    indicators,
    load_summary,
    machine_columns,
    node_columns,
)
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import metrics_pb2 as mpb

NOW = 1_700_000_100.0


def loads(cpu: float = 0.123, mem: float = 0.456, la: float = 0.84) -> list[float]:
    """Approximated loads in ``LOAD_METRICS`` order; the other dimensions get a marker value."""
    by_name = {"cpu_ut": cpu, "mem_ut": mem, "load_avg_1": la}
    return [by_name.get(name, 0.999) for name in LOAD_METRICS]


def sample(
    *, psi: float | None = None, cpi: float | None = None, mpki: float | None = None
) -> mpb.NodeMetrics:
    message = mpb.NodeMetrics(node_id="n", dropped_samples=4)
    if psi is not None:
        message.pressure.cpu.some_avg10 = psi
    if cpi is not None:
        message.cpi = cpi
    if mpki is not None:
        message.mpki = mpki
    return message


def status(
    node_id: str,
    *,
    rank: int = 0,
    excluded_by: str = "",
    approximated: list[float] | None = None,
    latest: mpb.NodeMetrics | None = None,
    last_seen: float = NOW - 1,
) -> apb.MachineStatus:
    return apb.MachineStatus(
        node_id=node_id,
        candidate=rank > 0,
        rank=rank,
        excluded_by=excluded_by,
        approximated_load=loads() if approximated is None else approximated,
        last_seen=last_seen,
        latest=latest if latest is not None else sample(),
    )


def listing(*machines: apb.MachineStatus) -> apb.ListMachinesReply:
    return apb.ListMachinesReply(load_metrics=LOAD_METRICS, machines=machines)


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (sample(), "- -/-"),
        (sample(psi=12.345), "12.3 -/-"),
        (sample(psi=0.0), "0.0 -/-"),  # measured zero pressure is not "absent"
        (sample(cpi=1.234), "- 1.23/-"),
        (sample(cpi=1.234, mpki=0.5), "- 1.23/0.50"),
        (sample(cpi=0.0, mpki=0.0), "- 0.00/0.00"),
        (sample(psi=3.0, cpi=2.0, mpki=7.125), "3.0 2.00/7.12"),
    ],
)
def test_indicators_show_psi_and_counters_with_dashes_for_absent(
    message: mpb.NodeMetrics, shown: str
) -> None:
    assert indicators(message) == shown


@pytest.mark.parametrize(
    ("metrics", "values", "shown"),
    [
        (list(LOAD_METRICS), loads(), "12% 46% 0.8"),
        (list(LOAD_METRICS), loads(cpu=0.0, mem=1.0, la=12.25), "0% 100% 12.2"),
        (["load_avg_1", "mem_ut", "cpu_ut"], [2.0, 0.5, 0.25], "25% 50% 2.0"),  # by name
        (["cpu_ut"], [0.3], "30% - -"),  # dimensions the configuration lacks
        (list(LOAD_METRICS), [], "-"),
        ([], loads(), "-"),
    ],
)
def test_load_summary_picks_cpu_memory_and_load_average_by_name(
    metrics: list[str], values: list[float], shown: str
) -> None:
    assert load_summary(status("n", approximated=values), metrics) == shown


@pytest.mark.parametrize(
    ("rank", "excluded_by", "shown"),
    [(1, "", "#1"), (12, "", "#12"), (0, "overloaded: cpu_ut", "overloaded: cpu_ut"), (0, "", "-")],
)
def test_candidacy_is_the_rank_or_the_reason(rank: int, excluded_by: str, shown: str) -> None:
    assert candidacy(status("n", rank=rank, excluded_by=excluded_by)) == shown


def test_node_columns_by_node_id() -> None:
    assert node_columns(None) is None
    reply = listing(
        status("a", rank=1, latest=sample(psi=1.5, cpi=1.0, mpki=2.0)),
        status("b", excluded_by="disconnected", last_seen=0.0),  # never sampled
    )
    columns = node_columns(reply)
    assert columns is not None
    headers, cells = columns
    assert headers == MACHINE_HEADERS
    assert cells == {
        "a": ["12% 46% 0.8", "1.5 1.00/2.00", "#1", "4", "-"],
        "b": ["12% 46% 0.8", "-", "disconnected", "4", "-"],
    }
    assert machine_columns(None, list(LOAD_METRICS)) == ["-", "-", "-", "-", "-"]


@pytest.mark.parametrize(
    ("joules", "watts", "source", "shown"),
    [
        (0.0, 0.0, "", "-"),  # an agent that reports no energy (older agents)
        (12_345.0, 41.53, "model", "41.5 W 12.3 kJ (model)"),
        (0.0, 0.0, "rapl", "0.0 W 0.0 kJ (rapl)"),  # measured zero is not "absent"
    ],
)
def test_energy_shows_power_energy_and_its_source(
    joules: float, watts: float, source: str, shown: str
) -> None:
    message = mpb.NodeMetrics(energy_j=joules, power_w=watts, energy_source=source)
    assert energy(message) == shown


def test_candidates_text_before_the_first_round() -> None:
    text = candidates_text(apb.CandidatesReply(ranking="rose"), listing(), now=NOW)
    assert text == "no candidate list yet (the aggregator has not ranked any machine)"


def test_candidates_text_lists_candidates_best_first_then_the_others_by_name() -> None:
    reply = apb.CandidatesReply(
        machine_version=3,
        candidate_version=17,
        candidates=["n2", "n1", "gone"],
        computed_at=NOW - 4.6,
        ranking="rose",
    )
    machines = listing(
        status("n1", rank=2, approximated=loads(cpu=0.5, mem=0.25, la=1.0)),
        status("n3", excluded_by="overloaded: cpu_ut"),
        status("n2", rank=1, latest=sample(psi=2.0, cpi=1.5, mpki=3.0)),
        status("n0", excluded_by="", last_seen=0.0),
    )
    assert candidates_text(reply, machines, now=NOW).splitlines() == [
        "candidates v17 over machine list v3 (rose, 5 s ago): 3 of 4 machines",
        "RANK  NODE  LOAD CPU MEM LA1  PSI CPI/MPKI",
        "1     n2    12% 46% 0.8       2.0 1.50/3.00",
        "2     n1    50% 25% 1.0       - -/-",
        "3     gone  -                 -",  # a candidate the listing no longer knows
        "NOT A CANDIDATE  WHY",
        "n0               -",
        "n3               overloaded: cpu_ut",
    ]


@pytest.mark.parametrize(
    ("candidates", "machines", "tables"),
    [
        ([], [status("n1", excluded_by="low rating")], ["NOT A CANDIDATE"]),
        (["n1"], [status("n1", rank=1)], ["RANK"]),
    ],
)
def test_candidates_text_leaves_out_empty_tables(
    candidates: list[str], machines: list[apb.MachineStatus], tables: list[str]
) -> None:
    reply = apb.CandidatesReply(
        machine_version=1, candidate_version=2, candidates=candidates, computed_at=NOW + 30
    )
    lines = candidates_text(reply, listing(*machines), now=NOW).splitlines()
    assert "(, 0 s ago)" in lines[0]  # a clock behind the aggregator's is not a negative age
    headers = [line for line in lines if line.startswith(("RANK", "NOT A CANDIDATE"))]
    assert [header.split("  ")[0] for header in headers] == tables


@pytest.mark.parametrize(
    ("summary", "machines", "said"),
    [
        ("2 nodes overloaded (cpu_ut)", 2, "no candidates: 2 nodes overloaded (cpu_ut)"),
        ("", 0, "no candidates: the aggregator knows no machine yet"),
        ("", 1, "no candidates: the aggregator did not say why"),
    ],
)
def test_an_empty_candidate_list_says_why(summary: str, machines: int, said: str) -> None:
    reply = apb.CandidatesReply(
        machine_version=3,
        candidate_version=17,
        computed_at=NOW,
        ranking="rose",
        excluded_summary=summary,
    )
    nodes = [status(f"n{i}", excluded_by="overloaded: cpu_ut") for i in range(machines)]
    lines = candidates_text(reply, listing(*nodes), now=NOW).splitlines()
    assert lines[1].startswith(said)
