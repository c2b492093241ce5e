"""Slow and vanishing clients on real sockets: header and body deadlines, a disconnect mid-body is a 499.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_slow_clients.py

The gateway runs under the uvicorn config `switchcraft serve` uses
(serving/gateway/server.py) on loopback; the clients are raw sockets that send
a byte at a time, or stop halfway and close.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from data.pool import load_pool
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.gateway.server import uvicorn_config
from tests.routers import REPO
from tests.serving.helpers import AUTH, KEY, use_keys

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
ROUTE = b'{"messages": [{"role": "user", "content": "weather in Paris?"}]}'


@pytest.fixture(scope="module")
def gateway(client):
    """(host, port, url) of a gateway with 0.6 s deadlines for headers and bodies."""
    mp = pytest.MonkeyPatch()
    use_keys(mp)
    cfg = ServingConfig(header_timeout_s=0.6, body_timeout_s=0.6)
    app = create_app(cfg, client=client, pool=POOL)
    server = uvicorn.Server(uvicorn_config(app, cfg, port=0, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    yield host, port, f"http://{host}:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    mp.undo()


def connect(gateway) -> socket.socket:
    s = socket.create_connection(gateway[:2], timeout=5)  # every read below ends well before 5 s, or the test fails
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket.timeout if it never does)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:  # a byte we sent after the server closed: what it sent before is what counts
        pass
    return out


def head(body: bytes, length: int | None = None) -> bytes:
    return (b"POST /v1/route HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + KEY.encode() + b"\r\ncontent-length: " + str(length or len(body)).encode()
            + b"\r\n\r\n")


def metric(url: str, line: str) -> float:
    for x in httpx.get(url + "/metrics", headers=AUTH, timeout=30).text.splitlines():
        if x.startswith(line + " "):
            return float(x.split()[-1])
    return 0.0


def trickle(s: socket.socket, data: bytes, every_s: float = 0.1) -> threading.Event:
    """Send `data` a byte every `every_s` in the background (until sent, the socket fails or the event is set)."""
    stop = threading.Event()

    def run() -> None:
        for byte in data:
            if stop.is_set() or select.select([s], [], [], 0)[0]:  # the server answered: stop writing
                return
            try:
                s.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(every_s)

    threading.Thread(target=run, daemon=True).start()
    return stop


def response(s: socket.socket) -> bytes:
    """One HTTP response (headers and a content-length body) from a connection that stays open."""
    out = b""
    while b"\r\n\r\n" not in out:
        out += s.recv(65536)
    headers, body = out.split(b"\r\n\r\n", 1)
    length = int(next(x.split(b":")[1] for x in headers.lower().split(b"\r\n") if x.startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)
    return headers + b"\r\n\r\n" + body


def test_slow_or_absent_headers_are_cut_off_at_the_deadline(gateway):
    url = gateway[2]
    before = metric(url, 'switchcraft_client_timeouts_total{phase="headers"}')
    silent, t0 = connect(gateway), time.monotonic()  # connects and never sends a byte
    assert read_all(silent).startswith(b"HTTP/1.1 408 ")
    assert 0.5 <= time.monotonic() - t0 < 3
    # One header byte every 0.1 s: closed at the deadline, however steady the trickle (the headers need ~20 s).
    loris, t0 = connect(gateway), time.monotonic()
    stop = trickle(loris, head(ROUTE))
    try:
        assert read_all(loris).startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 3
    finally:
        stop.set()
    # After a request on a keep-alive connection, the next request's headers have the same deadline.
    keep = connect(gateway)
    keep.sendall(head(ROUTE) + ROUTE)
    assert response(keep).startswith(b"HTTP/1.1 200 ")
    t0 = time.monotonic()
    stop = trickle(keep, head(ROUTE))
    try:
        assert read_all(keep).startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 3
    finally:
        stop.set()
    assert metric(url, 'switchcraft_client_timeouts_total{phase="headers"}') == before + 3
    # Meanwhile nothing was held: a normal request is answered.
    assert httpx.post(url + "/v1/route", content=ROUTE, headers=AUTH, timeout=30).status_code == 200


def test_a_slow_body_is_a_408_that_closes_the_connection(gateway):
    url = gateway[2]
    s = connect(gateway)
    s.sendall(head(ROUTE) + ROUTE[:5])
    t0 = time.monotonic()
    stop = trickle(s, ROUTE[5:])  # a byte every 0.1 s: never done within the 0.6 s deadline
    try:
        answer = read_all(s)  # the server answers and then closes
    finally:
        stop.set()
    assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower(), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["param"] == "body"
    assert time.monotonic() - t0 < 3
    assert metric(url, 'switchcraft_requests_total{endpoint="route",status="408"}') >= 1
    assert metric(url, 'switchcraft_client_timeouts_total{phase="body"}') >= 1


def test_a_client_that_disconnects_mid_body_is_a_499_not_a_500(gateway, caplog):
    url = gateway[2]
    before = metric(url, 'switchcraft_requests_total{endpoint="route",status="499"}')
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            s = connect(gateway)
            s.sendall(head(ROUTE, length=10_000) + ROUTE[:20])
            time.sleep(0.05)
            s.close()
        deadline = time.monotonic() + 5
        while metric(url, 'switchcraft_requests_total{endpoint="route",status="499"}') < before + 3:
            assert time.monotonic() < deadline, httpx.get(url + "/metrics", headers=AUTH).text
            time.sleep(0.05)
    assert metric(url, 'switchcraft_requests_total{endpoint="route",status="500"}') == 0
    assert metric(url, 'switchcraft_client_disconnects_total{endpoint="route"}') >= 3
    messages = [r.getMessage() for r in caplog.records]
    assert not any('"unhandled"' in m or "Exception in ASGI" in m for m in messages)
    assert sum('"client_disconnect"' in m for m in messages) == 3
    assert all(r.levelno <= logging.INFO for r in caplog.records if "client_disconnect" in r.getMessage())


def test_every_answer_says_nosniff_errors_included(gateway):
    """A browser must never sniff a JSON answer (an error may quote the caller's text) as HTML."""
    url = gateway[2]
    answers = {
        "401": httpx.post(url + "/v1/chat/completions", json={}, timeout=10),
        "404": httpx.get(url + "/v1/nothing", headers=AUTH, timeout=10),
        "405": httpx.get(url + "/v1/chat/completions", headers=AUTH, timeout=10),
        "400": httpx.post(url + "/v1/route", content=b"{not json", headers=AUTH, timeout=10),
        "413": httpx.post(url + "/v1/route", content=b"x" * 3_000_000, headers=AUTH, timeout=10),
        "200": httpx.get(url + "/healthz", timeout=10),
    }
    for status, r in answers.items():
        assert str(r.status_code) == status, (status, r.text[:200])
        assert r.headers.get("x-content-type-options") == "nosniff", (status, dict(r.headers))
    # the 408 of a slow body is written by CatchAll itself
    s = connect(gateway)
    s.sendall(head(ROUTE) + ROUTE[:5])
    answer = read_all(s).lower()
    assert answer.startswith(b"http/1.1 408 ") and b"x-content-type-options: nosniff" in answer


def test_a_refused_key_is_answered_on_a_connection_that_stays_usable(gateway):
    """A refusal before the body is parsed (401 here; 429 and 503 take the same path) reads and drops a body within
    max_body_bytes first: the connection serves the next request, and no unread byte turns the close into a reset
    that loses the answer. A larger declared body is not read: the refusal closes the connection."""
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 50_000}]}).encode()
    wrong = head(body).replace(KEY.encode(), b"sk-sc-not-a-key-0123456789abcdef")
    s = connect(gateway)
    try:
        for _ in range(3):  # the same connection, three refusals in turn: each body was read past
            s.sendall(wrong + body)
            answer = response(s)
            assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" not in answer.lower(), answer[:300]
        s.sendall(head(ROUTE) + ROUTE)  # and then a request with the right key, still on it
        assert response(s).startswith(b"HTTP/1.1 200 ")
    finally:
        s.close()
    s = connect(gateway)
    try:
        s.sendall(wrong.replace(str(len(body)).encode(), b"3000000") + body)  # past max_body_bytes (2,000,000)
        answer = read_all(s)
        assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" in answer.lower(), answer[:300]
    finally:
        s.close()
