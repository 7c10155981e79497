"""The queue book's claims: held per node and queue, consumed by placements, dropped when the
queue wants nothing or after CLAIM_TTL_S, and undone with a failed unit of work."""

from __future__ import annotations

from collections.abc import Callable

from policies.preemption.queues import single_queue
from policies.scheduling.resources import Resources
from resource_manager.queue_book import CLAIM_TTL_S, QueueBook
from tests.builders import res

Undo = Callable[[], None]


def book() -> tuple[QueueBook, list[Undo]]:
    undo: list[Undo] = []
    return QueueBook(single_queue(), undo.append), undo


def held(queue_book: QueueBook) -> dict[str, dict[str, Resources]]:
    view = queue_book.claims()
    return {node: dict(view[node]) for node in view}


def test_claims_add_up_are_consumed_and_listed():
    claims, _ = book()
    claims.claim("n1", "short", res(2, 1024), now=0.0)
    claims.claim("n1", "short", res(1, 512), now=1.0)
    claims.claim("n2", "long", res(1, 256), now=1.0)
    claims.consume("n1", "short", res(1, 512))
    assert held(claims) == {"n1": {"short": res(2, 1024)}, "n2": {"long": res(1, 256)}}
    assert claims.held_on("n1", except_queue="long") == res(2, 1024)
    claims.consume("n2", "long", res(1, 256))
    assert "n2" not in held(claims)


def test_a_queue_that_wants_nothing_loses_its_claims_and_old_claims_expire():
    claims, _ = book()
    claims.claim("n1", "short", res(1, 256), now=0.0)
    claims.claim("n2", "short", res(1, 256), now=30.0)
    claims.claim("n3", "long", res(1, 256), now=0.0)
    claims.expire(10.0, {"short"})  # long wants nothing
    assert set(held(claims)) == {"n1", "n2"}
    claims.expire(CLAIM_TTL_S + 1.0, {"short"})  # n1's is older than the TTL
    assert set(held(claims)) == {"n2"}
    claims.claim("n2", "short", res(1, 256), now=CLAIM_TTL_S + 20)  # grown: young again
    claims.expire(30.0 + CLAIM_TTL_S + 1.0, {"short"})
    assert set(held(claims)) == {"n2"}
    claims.expire(CLAIM_TTL_S * 2 + 21.0, {"short"})
    assert held(claims) == {}


def test_every_change_can_be_undone():
    claims, undo = book()
    claims.claim("n1", "short", res(1, 256), now=0.0)
    before = held(claims)
    undo.clear()
    claims.claim("n2", "short", res(1, 256), now=1.0)
    claims.expire(CLAIM_TTL_S + 0.5, {"short"})
    assert set(held(claims)) == {"n2"}
    for step in reversed(undo):
        step()
    assert held(claims) == before
    claims.expire(CLAIM_TTL_S + 0.5, {"short"})  # what was undone expires as before
    assert held(claims) == {}
