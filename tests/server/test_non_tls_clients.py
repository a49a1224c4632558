"""A client that does not speak TLS to ``--listen`` is answered and closed at once, as Go's net/http server
does, instead of holding its connection until the header timeout; real TLS clients, refused ones included, are
served as before. On both event loops (``--event-loop``): the front hands the connection to each loop's own SSL
protocol."""

from __future__ import annotations

import http.client
import socket
import ssl

import pytest

from tests.server.harness import Daemon, DaemonFactory, read_to_close

#: Long enough that a connection closed by the header timeout could not pass for one closed at once.
HEADER_TIMEOUT = "60"
#: How long a client waits for the daemon to close: far below the header timeout.
WAIT = 10.0


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_args(request: pytest.FixtureRequest) -> list[str]:
    """The daemon's arguments for each event loop, with a header timeout no test here reaches."""
    return ["--header-timeout", HEADER_TIMEOUT, "--event-loop", request.param]


def _send_and_read_to_close(daemon: Daemon, payload: bytes) -> bytes:
    """What the daemon answers ``payload`` with, up to its close; TimeoutError if it keeps the connection."""
    assert daemon.port is not None
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=WAIT) as client:
        received, closed = read_to_close(client, payload)
    if not closed:
        raise TimeoutError(f"the daemon kept the connection open for {WAIT:g} s after answering {received[:200]!r}")
    return received


def test_plain_http_gets_gos_400_and_the_connection_is_closed(make_daemon: DaemonFactory, loop_args: list[str]) -> None:
    daemon = make_daemon(args=loop_args)
    answer = _send_and_read_to_close(daemon, b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert answer == b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    assert daemon.metric("staticadm_tls_handshake_failures_total", {"reason": "HTTP_REQUEST"}) == 1
    assert "client sent an HTTP request to an HTTPS server" in daemon.log()
    assert f'"event_loop":"{loop_args[-1]}"' in daemon.log()


def test_random_bytes_and_a_garbage_record_are_closed_at_once(make_daemon: DaemonFactory, loop_args: list[str]) -> None:
    daemon = make_daemon(args=loop_args)
    assert _send_and_read_to_close(daemon, bytes(range(7, 64))) == b""
    assert daemon.metric("staticadm_tls_handshake_failures_total", {"reason": "NOT_TLS"}) == 1
    # A TLS handshake record whose body is no ClientHello: OpenSSL refuses it, the client gets its alert.
    answer = _send_and_read_to_close(daemon, b"\x16\x03\x01\x00\x08" + b"\xff" * 8)
    assert answer[:1] == b"\x15", answer  # an alert record
    # Bytes that could begin a record, then nothing: the client is waited for, for the header timeout.
    assert daemon.port is not None
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=1.0) as silent:
        silent.sendall(b"\x16\x03")
        try:
            silent.recv(1)
            raise AssertionError("closed before the header timeout")
        except TimeoutError:
            pass


def test_tls_clients_are_served_and_refused_ones_still_learn_why(make_daemon: DaemonFactory,
                                                                loop_args: list[str]) -> None:
    daemon = make_daemon(args=loop_args)
    assert daemon.status("/readyz", via="https") == 200
    # A client that does not trust the daemon's CA: refused by the client, the daemon closes at once.
    assert daemon.port is not None
    untrusting = ssl.create_default_context()
    connection = http.client.HTTPSConnection("127.0.0.1", daemon.port, context=untrusting, timeout=WAIT)
    try:
        connection.request("GET", "/readyz")
        raise AssertionError("an untrusted certificate was accepted")
    except ssl.SSLCertVerificationError:
        pass
    finally:
        connection.close()
    assert daemon.status("/readyz", via="https") == 200
