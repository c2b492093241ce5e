"""The decision log in PostgreSQL (log.url) on a real server: the same rows as SQLite's for the same records, every
console figure the same, two replicas writing at once, pruning by time, a server that is down or goes away.

    .venv/bin/python -m pytest -q tests/serving/test_decision_log_pg.py

Records come from the console bench's generator (evaluation/bench/console.py: cascades, escalations, failures,
exploration, two router versions, five keys) and are written through both writers (DecisionLog.write and
PostgresDecisionLog.write), as the gateway's background task writes them.
"""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from pydantic import ValidationError

from data.errors import DataError
from data.logged import complete_rows, explored_contracts, log_contracts, read_explored, read_log
from evaluation.synthetic_log import synthetic_records
from evaluation.harness import free_port
from serving.console.logdb import open_log, since_of
from serving.console.queries import trace, traffic
from serving.console.report import gather
from serving.console.search import search_requests
from serving.core.decision_log import DecisionLog
from serving.core.decision_log_pg import PostgresDecisionLog
from serving.gateway.config import ServingConfig

pytestmark = pytest.mark.integration
NOW = 1_796_000_000.0
TOOLS = [{"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def records(pool, n: int = 600, days: float = 3.0, now: float = NOW, explore: float = 0.2, seed: int = 0) -> list:
    """The writer's records for `n` requests, each with its text (what learn reads)."""
    out = []
    for batch in synthetic_records(pool, n, days, now=now, explore=explore, seed=seed, batch=100):
        for kind, request, answers in batch:
            if request is not None:
                text = {"messages": [{"role": "user", "content": f"weather? {request['request_id']}"}],
                        "tools": TOOLS}
                request = {**request, "request": json.dumps(text)}
            out.append((kind, request, answers))
    return out


def write_both(records_: list, folder, url: str, batch: int = 50) -> None:
    sqlite, pg = DecisionLog(folder, max_mb=1e9), PostgresDecisionLog(url, keep_days=None)
    for i in range(0, len(records_), batch):
        sqlite.write(records_[i:i + batch])
        pg.write(records_[i:i + batch])
    sqlite.close()
    pg.close()


def same(a, b, where: str = "") -> None:
    """a == b, floats to 1e-9 (PostgreSQL's numeric sums hold 15 significant digits of each float)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, a.keys(), b)
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def test_learn_reads_the_same_rows_from_postgresql_as_from_the_sqlite_files(default_pool, tmp_path, pg_log):
    written = records(default_pool, 300)
    write_both(written, tmp_path / "log", pg_log)
    from_files, from_pg = read_log(tmp_path / "log"), read_log(pg_log)
    assert from_pg == from_files  # every column, in order, with the same Python types
    assert [type(v) for v in from_pg[0][0].values()] == [type(v) for v in from_files[0][0].values()]
    assert len(from_pg[0]) == 300 and len(from_pg[1]) == sum(len(a) for _, _, a in written)
    examples, outputs = log_contracts(*from_pg, default_pool)
    answered = sum(1 for _, r, _ in written if r is not None and r["status"] == 200)
    assert (examples, outputs) == log_contracts(*from_files, default_pool) and len(examples) == answered
    complete = complete_rows(examples, outputs, default_pool)
    assert complete == complete_rows(*log_contracts(*from_files, default_pool), default_pool) and complete
    # What learn reads (only the explored requests, the rest counted) is the same from both, and the same rows.
    part_pg, part_files = read_explored(pg_log, default_pool.names), read_explored(tmp_path / "log", default_pool.names)
    assert (part_pg.requests, part_pg.answers) == (part_files.requests, part_files.answers)
    assert (part_pg.logged, part_pg.rows) == (part_files.logged, part_files.rows) == (len(examples), 300)
    ids = {e.id for e in complete}
    assert {e.id for e in complete_rows(*explored_contracts(part_pg, default_pool), default_pool)} == ids
    assert len(part_pg.requests) == len(ids) < answered and part_pg.explored == len(ids)
    # The window: the same newest requests from both.
    few_pg, few_files = (read_explored(log, default_pool.names, max_explored=5) for log in (pg_log, tmp_path / "log"))
    assert (few_pg.requests, few_pg.answers) == (few_files.requests, few_files.answers) and len(few_pg.requests) == 5
    assert few_pg.explored == few_files.explored == len(ids)


@pytest.mark.parametrize("range_name", ["all", "24h", "1h"])
def test_every_console_figure_is_the_same_on_postgresql(default_pool, tmp_path_factory, postgres, range_name):
    """Savings (headline), quality, cascades, traffic and router versions, a Requests page and a trace: whole
    hours from each summary, the partial hours at the range's edges from the rows."""
    folder = tmp_path_factory.mktemp("log")
    url = postgres.create_database(f"figures_{range_name}")
    write_both(records(default_pool, 900, days=2.0), folder, url)
    ref = default_pool.names[-1]
    on_files = gather(folder, default_pool, range_name=range_name, now=NOW, reference=ref)
    on_pg = gather(url, default_pool, range_name=range_name, now=NOW, reference=ref)
    assert on_files["traffic"]["requests"] > 0 and on_files["cascades"]["cascades"] > 0
    same(on_files, on_pg)
    since = since_of(range_name, NOW)
    pages = []
    for source in (folder, url):
        with open_log(source, since) as db:
            rid = search_requests(db, since=since)["rows"][3]["request_id"]
            pages.append({"page": search_requests(db, since=since, page=1, size=20),
                          "explored": search_requests(db, since=since, explored=True, status=200),
                          "q": search_requests(db, since=since, q=rid[:6]),
                          "text": search_requests(db, since=since, q=f"weather? {rid}"),
                          "trace": trace(db, rid), "raw": traffic(db, since=since, now=NOW, raw_only=True)})
    same(pages[0], pages[1])
    assert pages[1]["q"]["rows"][0]["request_id"] == rid and pages[1]["text"]["rows"][0]["request_id"] == rid
    same(on_pg["traffic"], pages[1]["raw"])  # the summary's hours agree with the rows


def test_two_replicas_writing_at_once_keep_the_summary_equal_to_the_rows(default_pool, pg_log):
    """Each batch's summary counts exactly its own rows, whatever the other replica commits meanwhile."""
    written = records(default_pool, 800, days=1.0)
    writers = {name: PostgresDecisionLog(pg_log, keep_days=None) for name in ("gw-a:1", "gw-b:2")}
    mine: dict[str, list] = {name: [] for name in writers}
    served_by = {}  # a request's exploration answers are written by the replica that served it, after it
    for n, (kind, request, answers) in enumerate(written):
        name = served_by.setdefault(answers[0]["request_id"], list(writers)[n % 2])
        mine[name].append((kind, request if request is None else {**request, "replica": name}, answers))

    def run(name: str) -> None:
        for j in range(0, len(mine[name]), 7):  # small batches: many interleaved transactions
            writers[name].write(mine[name][j:j + 7])
    threads = [threading.Thread(target=run, args=(name,)) for name in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in writers.values():
        w.close()
    requests, answers = read_log(pg_log)
    assert len(requests) == sum(1 for _, r, _ in written if r is not None)
    assert len(answers) == sum(len(a) for _, _, a in written)
    assert {r["replica"] for r in requests} == {"gw-a:1", "gw-b:2"}
    with open_log(pg_log, 0.0) as db:
        same(traffic(db, since=0.0, now=NOW + 3600), traffic(db, since=0.0, now=NOW + 3600, raw_only=True))


def test_old_rows_are_pruned_by_time_with_their_answers_and_summary_hours(default_pool, pg_log):
    now = time.time()
    written = records(default_pool, 400, days=10.0, now=now, explore=0.3)
    log = PostgresDecisionLog(pg_log, keep_days=3.0)
    log.write(written)  # the first write prunes too (once an hour)
    cutoff = (now - 3 * 86400) // 3600 * 3600
    requests, answers = read_log(pg_log)
    kept = {r["request_id"] for _, r, _ in written if r is not None and r["ts"] >= cutoff}
    assert {r["request_id"] for r in requests} == kept and 0 < len(kept) < 400
    assert {a["request_id"] for a in answers} == kept
    hours = {h for (h,) in log.db.execute("SELECT DISTINCT hour FROM summary")}
    assert min(hours) >= cutoff // 3600
    assert log.prune(now) == 0  # nothing older left
    log.close()
    with open_log(pg_log, 0.0) as db:
        same(traffic(db, since=0.0, now=now), traffic(db, since=0.0, now=now, raw_only=True))


def test_a_server_that_is_down_or_goes_away_is_named_never_a_traceback(default_pool, client, pg_log):
    down = f"postgresql://gw:s3cret-pw@127.0.0.1:{free_port()}/log"
    with pytest.raises(ConnectionError, match="cannot be reached") as e:
        PostgresDecisionLog(down)
    assert "s3cret-pw" not in str(e.value) and "127.0.0.1" in str(e.value)
    with pytest.raises(ConnectionError), open_log(down):
        pass
    with pytest.raises(DataError, match="cannot be read") as e:
        read_log(down)
    assert "s3cret-pw" not in str(e.value)
    with pytest.raises(ValueError, match=r"log\.url"):
        from serving.app import create_app

        create_app(ServingConfig(auth={"mode": "none"}, log={"url": down}), client=client, pool=default_pool)
    with pytest.raises(FileNotFoundError, match="no decision log there yet"), open_log(pg_log):
        pass  # an empty database: no gateway has written it

    log = PostgresDecisionLog(pg_log, keep_days=None)
    written = records(default_pool, 20, days=0.1)
    log.write(written[:10])
    with psycopg.connect(pg_log, autocommit=True) as admin:  # the server drops the writer's connection
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND pid <> pg_backend_pid()")
    with pytest.raises(psycopg.OperationalError):
        log.write(written[10:15])  # this batch is lost (the writer's task counts it dropped)
    log.write(written[15:])  # the next connects again
    log.close()
    assert len(read_log(pg_log)[0]) == sum(1 for _, r, _ in written[:10] + written[15:] if r is not None)


def test_the_log_is_a_folder_or_a_url_never_both():
    with pytest.raises(ValidationError, match="not both"):
        ServingConfig(log={"path": "runs/log", "url": "postgresql://gw@db/log"})
    with pytest.raises(ValidationError, match="postgresql://user@host:port/database") as e:
        ServingConfig(log={"url": "mysql://gw:pw@db/log"})
    assert ":pw" not in e.value.errors()[0]["msg"]  # what the config loader shows (data/yaml_config.py)


def test_once_made_the_log_needs_only_row_rights_to_write_and_read(default_pool, pg_log):
    """PostgreSQL 15 lets no ordinary user create tables in `public`: the tables are made once (here by the
    server's superuser), then a gateway user with SELECT, INSERT, UPDATE and DELETE on them writes, prunes and reads."""
    PostgresDecisionLog(pg_log).close()
    with psycopg.connect(pg_log, autocommit=True) as admin:
        admin.execute("CREATE ROLE gateway LOGIN")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON requests, answers, summary TO gateway")
    url = pg_log.replace("postgres@", "gateway@")
    log = PostgresDecisionLog(url, keep_days=1.0)
    log.write(records(default_pool, 40, days=0.5, now=time.time()))
    log.close()
    with open_log(url, 0.0) as db:
        assert traffic(db, since=0.0, now=time.time())["requests"] == 40
    assert len(read_log(url)[0]) == 40
