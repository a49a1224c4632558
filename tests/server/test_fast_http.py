"""Admission requests taken whole from the connection's read (``server/fast_http.py``, ``app.fast_reviews``): only
the one request shape kube-apiserver sends is taken, every other is left to aiohttp, and both give the same answer
(real daemon, real unix socket)."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import orjson
import pytest

from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.server.app import ServerState, create_app, fast_reviews
from staticadm.server.connections import ConnectionGuard, GuardedAppRunner
from staticadm.server.fast_http import MAX_HEAD_BYTES, WholeRequest, whole_request
from staticadm.server.logging import get_logger
from staticadm.server.metrics import Metrics
from staticadm.source import ManifestSource, ReloadStatus
from tests.server.harness import (
    DaemonFactory,
    body_of,
    content_length,
    metric_value,
    policy_yaml,
    raw_http,
    review,
    status_of,
    written_before_start,
)

DIRECT = "staticadm_admission_requests_answered_directly_total"


def _request(body: bytes, *, target: bytes = b"/validate", version: bytes = b"HTTP/1.1",
             headers: tuple[bytes, ...] = (b"Host: localhost", b"Content-Type: application/json"),
             length: int | None = None) -> bytes:
    lines = [b"POST " + target + b" " + version, *headers,
             b"Content-Length: %d" % (len(body) if length is None else length)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


BODY = orjson.dumps(review({"app": "web"}))


def test_the_request_kube_apiserver_sends_is_taken_whole() -> None:
    assert whole_request(_request(BODY)) == WholeRequest("validate", None, BODY)
    assert whole_request(_request(BODY, target=b"/mutate?timeout=10s")) == WholeRequest("mutate", "10s", BODY)
    go_client = (b"Host: 127.0.0.1:8443", b"User-Agent: kube-apiserver-admission", b"Accept: application/json, */*",
                 b"Accept-Encoding: gzip", b"Content-Type: application/json", b"Audit-Id: 0b9c")
    assert whole_request(_request(BODY, headers=go_client)) == WholeRequest("validate", None, BODY)


@pytest.mark.parametrize("data", [
    _request(BODY, version=b"HTTP/1.0"),
    _request(BODY, target=b"/validatex"),
    _request(BODY, target=b"/healthz"),
    _request(BODY, target=b"/validate?timeout=1s&x=1"),
    _request(BODY, target=b"/validate?timeout=1%73"),
    _request(BODY).replace(b"POST", b"GET", 1),
    _request(BODY).replace(b"POST ", b"POST  ", 1),
    _request(BODY, headers=(b"Content-Type: application/json; charset=utf-8",)),
    _request(BODY, headers=(b"Content-Type: text/plain",)),
    _request(BODY, headers=()),
    _request(BODY, headers=(b"Content-Type: application/json", b"Content-Type: application/json")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Transfer-Encoding: chunked")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Expect: 100-continue")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Connection: close")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Content-Encoding: gzip")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Upgrade: h2c")),
    _request(BODY, headers=(b"Content-Type: application/json", b"Content-Length: 5")),
    _request(BODY, headers=(b"Content-Type : application/json",)),
    _request(BODY, headers=(b"Content-Type: application/json", b" folded")),
    _request(BODY, headers=(b"Content-Type: application/json", b"X-Bad: a\x01b")),
    _request(BODY, headers=(b"Content-Type: application/json", b"X-" + b"a" * MAX_HEAD_BYTES + b": 1")),
    _request(BODY, length=len(BODY) + 1),
    _request(BODY, length=len(BODY) - 1),
    _request(BODY) + _request(BODY),
    _request(BODY)[:40],
    b"\r\n".join(_request(BODY).split(b"\r\n")[:-2]),
])
def test_every_other_shape_is_left_to_aiohttp(data: bytes) -> None:
    assert whole_request(data) is None


def _unix(daemon_socket: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.connect(str(daemon_socket))
    return sock


class _Answers:
    """HTTP responses read one at a time from a connection (a read may hold more than one)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def next(self) -> bytes:
        while b"\r\n\r\n" not in self._buffer or len(body_of(self._buffer)) < _length(self._buffer):
            chunk = self._sock.recv(65536)
            assert chunk, self._buffer
            self._buffer += chunk
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = _length(self._buffer)
        answer, self._buffer = head + b"\r\n\r\n" + rest[:length], rest[length:]
        return answer


def _length(data: bytes) -> int:
    length = content_length(data)
    assert length is not None, data
    return length


def _headers(data: bytes) -> list[bytes]:
    return [line.partition(b":")[0].lower() for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]]


def test_an_answer_read_whole_is_the_answer_aiohttp_gives(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(https=False)
    assert daemon.socket_path is not None
    requests = [
        BODY,  # allowed
        orjson.dumps(review({"deny": "true"})),  # denied by the policy
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',  # not a request: 400
        b'{"apiVersion": ',  # not JSON: 400
    ]
    for target in (b"/validate", b"/validate?timeout=5s", b"/mutate"):
        for body in requests:
            whole = _request(body, target=target)
            before = daemon.metric(DIRECT)
            direct = raw_http(daemon.socket_path, [whole])
            assert daemon.metric(DIRECT) == before + 1, (target, body)
            head, _, rest = whole.partition(b"\r\n\r\n")
            # The same request in two reads: its body is not there when its headers are, so aiohttp takes it.
            through_aiohttp = raw_http(daemon.socket_path, [head + b"\r\n\r\n", rest], pause=0.05)
            assert daemon.metric(DIRECT) == before + 1, (target, body)
            assert status_of(direct) == status_of(through_aiohttp), (target, body, direct, through_aiohttp)
            assert orjson.loads(body_of(direct)) == orjson.loads(body_of(through_aiohttp))
            assert _headers(direct) == _headers(through_aiohttp)
    assert daemon.metric("staticadm_admission_requests_total", {"code": "500"}) == 0


def test_requests_left_to_aiohttp_are_answered_in_order(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(https=False)
    assert daemon.socket_path is not None
    before = daemon.metric(DIRECT)
    allowed, denied = BODY, orjson.dumps(review({"deny": "true"}))
    with _unix(daemon.socket_path) as sock:
        read = _Answers(sock)
        # Two requests in one write (pipelined), then one whole request: once a read went to aiohttp, every later
        # read of that connection does too, since its parser may hold part of a request.
        sock.sendall(_request(allowed) + _request(denied))
        answers = [read.next(), read.next()]
        sock.sendall(_request(allowed))
        answers.append(read.next())
    verdicts = [orjson.loads(body_of(answer))["response"]["allowed"] for answer in answers]
    assert verdicts == [True, False, True]
    assert daemon.metric(DIRECT) == before
    # A chunked body is aiohttp's to read.
    chunked = (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(allowed), allowed))
    assert orjson.loads(body_of(raw_http(daemon.socket_path, [chunked])))["response"]["allowed"] is True
    assert daemon.metric(DIRECT) == before


def test_reads_that_arrive_while_an_answer_is_pending_wait_for_it(tmp_path: Path) -> None:
    """A request taken whole is answered in the evaluation batch, a loop callback later. The daemon's transports
    deliver no read of the same connection before that callback; a read handed on meanwhile (as the connection
    does itself with the reads it held) must still be answered after it, in order. Driven in process, on the
    daemon's own app, connection handler and a real unix socket pair."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    written_before_start(manifests / "deny.yaml", policy_yaml("v1: pods labelled deny=true are not allowed"))
    source = ManifestSource(manifests)
    assert source.reload("startup").status is ReloadStatus.SUCCESS
    allowed, denied = BODY, orjson.dumps(review({"deny": "true"}))
    reads = [_request(allowed), _request(denied), _request(allowed), _request(denied)]

    async def main() -> tuple[list[bytes], float]:
        state = ServerState(source, RequestOnlyNamespaces(), Metrics(), get_logger())
        guard = ConnectionGuard()
        guard.fast_answer = fast_reviews(state)
        runner = GuardedAppRunner(create_app(state), guard=guard, access_log=None)
        await runner.setup()
        assert runner.server is not None
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            _, handler = await loop.connect_accepted_socket(runner.server, ours)
            for data in reads:
                handler.data_received(data)
            received = b""
            async with asyncio.timeout(15):
                while received.count(b"HTTP/1.1 ") < len(reads) or not received.endswith(b"}"):
                    received += await loop.sock_recv(theirs, 65536)
        finally:
            theirs.close()
            await runner.cleanup()
        answers = [b"HTTP/1.1 " + part for part in received.split(b"HTTP/1.1 ")[1:]]
        return answers, metric_value(state.metrics.exposition().decode(), DIRECT, {})

    answers, direct = asyncio.run(main())
    assert [status_of(answer) for answer in answers] == [200] * 4
    verdicts = [orjson.loads(body_of(answer))["response"]["allowed"] for answer in answers]
    assert verdicts == [True, False, True, False]
    # Each was taken whole in its turn: none went to aiohttp.
    assert direct == 4


def test_a_connection_answered_directly_is_kept_alive_past_the_header_timeout(make_daemon: DaemonFactory,
                                                                              tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("header-timeout: 1\nidle-timeout: 30\n")
    daemon = make_daemon(https=False, args=["--config", str(config)])
    assert daemon.socket_path is not None
    with _unix(daemon.socket_path) as sock:
        read = _Answers(sock)
        sock.sendall(_request(BODY))
        assert status_of(read.next()) == 200
        # Idle after an answer: the idle timeout applies, not the header timeout of a connection's first request.
        time.sleep(2.5)
        sock.sendall(_request(BODY))
        assert status_of(read.next()) == 200
    assert daemon.metric(DIRECT) >= 2
