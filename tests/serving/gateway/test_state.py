"""The gateway's state store, both backends on the same assertions: SQLite (a file, WAL) and a real Redis server
started on loopback from the binary the test extra installs (never a mock).

    python -m pytest -q tests/serving/gateway/test_state.py
"""

from __future__ import annotations

import asyncio

import pytest

from serving.core.state import StateSettings
from serving.core.state import Charge, OverBudget, SQLiteState, StateUnavailable, StoredKey, open_state, utc_day

NOW = 1_764_600_000.0  # 2025-12-01T14:40:00Z
DAY = utc_day(NOW)


@pytest.fixture(params=["sqlite", "redis"])
def make_store(request, tmp_path, redis_server):
    """make_store() -> a store; calling it again opens a second handle on the same data (a restart, a replica)."""
    opened = []
    prefix = f"t{id(request)}:"

    def make():
        settings = (StateSettings(path=str(tmp_path)) if request.param == "sqlite"
                    else StateSettings(redis_url=redis_server.url, redis_prefix=prefix))
        opened.append(open_state(settings))
        return opened[-1]

    yield make
    for store in opened:
        asyncio.run(store.aclose()) if request.param == "sqlite" else None


def run(coro):
    return asyncio.run(coro)


def test_requests_per_minute_is_a_sliding_window_shared_by_every_handle(make_store):
    a, b = make_store(), make_store()

    async def go():
        seen = [await (a if i % 2 else b).admit("k", rpm=3, usd_per_day=None, now=NOW + i) for i in range(4)]
        assert [s.reason for s in seen] == [None, None, None, "rate_limit"]
        assert seen[3].wait_s == pytest.approx(60 - 3)  # the oldest of the window leaves at NOW + 60
        assert (await a.admit("k", rpm=3, usd_per_day=None, now=NOW + 59.9)).reason == "rate_limit"
        assert (await b.admit("k", rpm=3, usd_per_day=None, now=NOW + 60.0)).reason is None  # NOW's left the window
        assert (await a.admit("other", rpm=3, usd_per_day=None, now=NOW + 3)).reason is None  # per key
    run(go())


def test_reservations_hold_budget_until_settled_and_the_ledger_keeps_every_charge(make_store):
    store = make_store()

    async def go():
        r1 = await store.reserve("k", 0.6, limit=1.0, request_id="r1", now=NOW)
        r2 = await store.reserve("k", 0.6, limit=1.0, request_id="r2", now=NOW)  # 0.6 < 1.0: admitted, now 1.2 held
        with pytest.raises(OverBudget) as over:
            await store.reserve("k", 0.01, limit=1.0, request_id="r3", now=NOW)
        assert over.value.reserved == pytest.approx(1.2) and over.value.spent == 0
        assert (await store.admit("k", rpm=None, usd_per_day=1.0, now=NOW)).reason == "budget"
        await store.settle(r1, [Charge("m1", "answer", 0.1), Charge("m2", "cascade", 0.05)], now=NOW + 1)
        assert await store.day_total("k", DAY) == pytest.approx((0.15, 0.6))
        await store.settle(r2, [Charge("m1", "abandoned", 0.2)], now=NOW + 2)
        assert await store.day_total("k", DAY) == pytest.approx((0.35, 0.0))
        assert (await store.admit("k", rpm=None, usd_per_day=1.0, now=NOW + 3)).reason is None
        rows = await store.ledger(key_id="k", day=DAY)
        assert [(r.model, r.kind, r.usd, r.request_id) for r in rows] == [
            ("m1", "answer", 0.1, "r1"), ("m2", "cascade", 0.05, "r1"), ("m1", "abandoned", 0.2, "r2")]
        assert await store.ledger(key_id="nobody") == [] and await store.ledger(day="1999-01-01") == []
        # A key without a limit still reserves and is recorded.
        r = await store.reserve("free", 5.0, limit=None, request_id="f", now=NOW)
        await store.settle(r, [Charge("m1", "estimated", 0.3)], now=NOW)
        assert [row.kind for row in await store.ledger(key_id="free")] == ["estimated"]
    run(go())


def test_spend_and_counts_survive_a_new_handle_as_after_a_restart(make_store):
    first = make_store()

    async def before():
        await first.admit("k", rpm=2, usd_per_day=1.0, now=NOW)
        res = await first.reserve("k", 0.5, limit=1.0, request_id="a", now=NOW)
        await first.settle(res, [Charge("m", "answer", 1.25)], now=NOW)
    run(before())
    again = make_store()

    async def after():
        assert await again.day_total("k", DAY) == pytest.approx((1.25, 0.0))
        assert (await again.admit("k", rpm=2, usd_per_day=1.0, now=NOW + 1)).reason == "budget"
        assert (await again.admit("k", rpm=2, usd_per_day=None, now=NOW + 1)).reason is None  # 2nd in the minute
        assert (await again.admit("k", rpm=2, usd_per_day=None, now=NOW + 2)).reason == "rate_limit"
    run(after())


def test_a_reservation_its_process_never_settled_is_charged_as_expired(make_store):
    store = make_store()
    store.reservation_ttl_s = 60.0

    async def go():
        await store.reserve("k", 0.25, limit=1.0, request_id="lost", now=NOW)
        assert await store.day_total("k", DAY) == pytest.approx((0.0, 0.25))
        await store.admit("k", rpm=None, usd_per_day=1.0, now=NOW + 30)  # not yet expired
        assert await store.day_total("k", DAY) == pytest.approx((0.0, 0.25))
        store.last_sweep = 0.0
        await store.admit("k", rpm=None, usd_per_day=1.0, now=NOW + 61)
        assert await store.day_total("k", DAY) == pytest.approx((0.25, 0.0))
        assert [(r.kind, r.usd, r.request_id) for r in await store.ledger("k")] == [("expired", 0.25, "lost")]
    run(go())


def test_concurrent_reservations_stop_at_the_first_that_reaches_the_limit(make_store):
    stores = [make_store(), make_store()]

    async def go():
        async def one(i):
            try:
                return await stores[i % 2].reserve("k", 0.3, limit=1.0, request_id=str(i), now=NOW)
            except OverBudget:
                return None
        got = await asyncio.gather(*(one(i) for i in range(20)))
        assert sum(r is not None for r in got) == 4  # 0, 0.3, 0.6, 0.9 < 1.0 admitted; 1.2 is not
    run(go())


def test_the_days_are_utc_days():
    assert utc_day(1_764_547_199.0) == "2025-11-30" and utc_day(1_764_547_200.0) == "2025-12-01"


def test_an_unreachable_store_raises_state_unavailable(tmp_path):
    from evaluation.harness import free_port

    dead = open_state(StateSettings(redis_url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5))
    with pytest.raises(StateUnavailable, match=r"redis://127\.0\.0\.1"):
        run(dead.admit("k", rpm=1, usd_per_day=None, now=NOW))
    (tmp_path / "blocked").write_text("a file where the folder should be")
    with pytest.raises(StateUnavailable, match="state store"):
        SQLiteState(tmp_path / "blocked" / "state.sqlite")


def test_a_ledger_longer_than_a_page_is_read_whole_and_in_order(make_store):
    """Redis reads the ledger stream in pages (state_redis.LEDGER_PAGE) so that no read outlasts state.timeout_s."""
    from serving.core.state_redis import LEDGER_PAGE

    store = make_store()
    n = 2 * LEDGER_PAGE + 7

    async def go():
        r = await store.reserve("k", 1.0, limit=None, request_id="r", now=NOW)
        await store.settle(r, [Charge(f"m{i}", "answer", 0.001) for i in range(n)], now=NOW)
        rows = await store.ledger(key_id="k")
        assert [row.model for row in rows] == [f"m{i}" for i in range(n)]
        assert len(await store.ledger(key_id="k", day=DAY)) == n and await store.ledger(key_id="other") == []
    run(go())


def test_a_hold_extends_while_the_day_has_room_settles_once_and_expires_whole(make_store):
    store = make_store()
    store.reservation_ttl_s = 60.0

    async def go():
        r = await store.reserve("k", 0.3, limit=1.0, request_id="r", now=NOW)
        assert r.created == NOW
        r = await store.extend(r, 0.5, limit=1.0, now=NOW + 1)  # 0.3 < 1.0: room, now 0.8 held
        assert r.usd == pytest.approx(0.8) and await store.day_total("k", DAY) == pytest.approx((0.0, 0.8))
        r = await store.extend(r, 0.5, limit=1.0, now=NOW + 2)  # 0.8 < 1.0: the last extension may pass the limit
        with pytest.raises(OverBudget) as over:
            await store.extend(r, 0.01, limit=1.0, now=NOW + 3)
        assert over.value.reserved == pytest.approx(1.3) and r.usd == pytest.approx(1.3)
        other = await store.reserve("k2", 0.1, limit=None, request_id="o", now=NOW + 4)
        assert await store.holds("k", DAY, NOW + 5) == [(pytest.approx(NOW), pytest.approx(1.3), r.id)]
        assert await store.holds("k", "1999-01-01", NOW) == []
        await store.settle(r, [Charge("m", "answer", 0.02)], now=NOW + 5)
        assert await store.day_total("k", DAY) == pytest.approx((0.02, 0.0)) and await store.holds("k", DAY, NOW) == []
        # A hold its process never settled is charged as expired at everything it held, extensions included.
        lost = await store.extend(await store.reserve("k", 0.1, limit=1.0, request_id="lost", now=NOW + 6), 0.2,
                                  limit=1.0, now=NOW + 7)
        store.last_sweep = 0.0
        await store.admit("k", rpm=None, usd_per_day=1.0, now=NOW + 67)
        assert await store.day_total("k", DAY) == pytest.approx((0.32, 0.0))
        assert [(x.kind, x.usd) for x in await store.ledger("k")][-1] == ("expired", pytest.approx(0.3))
        assert await store.extend(lost, 0.5, limit=1.0, now=NOW + 68) == lost  # nothing left to extend
        assert await store.day_total("k", DAY) == pytest.approx((0.32, 0.0))
        await store.settle(other, [], now=NOW)
    run(go())


def test_api_keys_are_stored_by_id_with_a_version_every_write_changes(make_store):
    a, b = make_store(), make_store()  # two handles on one store: two gateway replicas
    entry = '{"id": "acme", "sha256": "' + "ab" * 32 + '"}'

    async def go():
        assert await a.keys_read() == (0, []) and await b.keys_version() == 0
        assert await a.key_create(StoredKey("acme", entry, NOW, NOW, source="seed"))
        assert await b.keys_version() == 1
        assert not await b.key_create(StoredKey("acme", '{"id": "acme", "other": 1}', NOW + 1, NOW + 1))  # ids unique
        assert await a.keys_version() == 1  # a refused write changes nothing
        assert await b.key_create(StoredKey("zed", entry.replace("acme", "zed"), NOW + 2, NOW + 2))
        version, keys = await a.keys_read()
        assert version == 2 and [(k.id, k.entry, k.created, k.updated, k.revoked, k.source) for k in keys] == [
            ("acme", entry, NOW, NOW, False, "seed"), ("zed", entry.replace("acme", "zed"), NOW + 2, NOW + 2, False,
                                                       "managed")]
        assert await b.key_change("acme", now=NOW + 3, entry='{"id": "acme", "limits": 1}')
        assert await a.key_change("acme", now=NOW + 4, revoked=True)
        assert not await a.key_change("nobody", now=NOW + 5, revoked=True)
        version, keys = await b.keys_read()
        assert version == 4 and (keys[0].entry, keys[0].revoked, keys[0].created, keys[0].updated) == (
            '{"id": "acme", "limits": 1}', True, NOW, NOW + 4)
        assert keys[1].revoked is False
    run(go())
    again = make_store()  # a restart keeps every key, its revocation and the version
    version, keys = run(again.keys_read())
    assert version == 4 and [(k.id, k.revoked) for k in keys] == [("acme", True), ("zed", False)]


def test_concurrent_creates_of_one_id_leave_exactly_one_key(make_store):
    stores = [make_store(), make_store()]

    async def go():
        made = await asyncio.gather(*(stores[i % 2].key_create(StoredKey("same", f'{{"n": {i}}}', NOW + i, NOW + i))
                                      for i in range(12)))
        assert sum(made) == 1
        version, keys = await stores[0].keys_read()
        assert version == 1 and len(keys) == 1 and keys[0].entry == f'{{"n": {made.index(True)}}}'
    run(go())
