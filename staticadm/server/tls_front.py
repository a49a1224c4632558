"""What the HTTPS listener does before and after a TLS handshake, as Go's net/http server does it.

asyncio starts OpenSSL on whatever a client sends and, once OpenSSL refuses it, waits for the client's next
bytes or the handshake timeout before it closes: a client that does not speak TLS held its connection for
the whole header timeout. Here, as in Go (``crypto/tls`` reading the first record, ``net/http``'s
``conn.serve``):

- the first five bytes are read as a TLS record header; a first record that is neither a handshake nor an
  alert, or claims a version from 0x1000 on, is no TLS client. If those bytes start an HTTP request
  (``GET /``, ``HEAD``, ``POST``, ``PUT /``, ``OPTIO``) the answer is Go's ``400 Client sent an HTTP request
  to an HTTPS server``; either way the connection is closed at once;
- a handshake OpenSSL refuses gets the alert OpenSSL queued for it (the client learns why: "certificate
  required", "unknown ca"), then the end of the stream, and is closed when the client closes or after
  ``REFUSED_GRACE``, whichever comes first;
- a client that sends nothing is closed at the handshake timeout, as before.

A connection counts against the connection cap from its accept, handshake included: the app protocol (the
guarded aiohttp handler) is told when the handshake begins and, if it never completes, when the connection is
lost (:class:`HandshakeWatcher`); the guard may refuse it at once. Until the handshake completes, the SSL
protocol reads into a buffer of :data:`HANDSHAKE_READ_BUFFER` bytes rather than asyncio's 256 KiB, so a
client that stalls mid-handshake holds a few tens of KiB, not a quarter of a MiB.

The same on either event loop (``staticadm.server.event_loop``): the SSL protocol swapped in is the running loop's
own, asyncio's in Python or uvloop's in C (asyncio's would serve on uvloop's transports too, at Python's cost per
record: uvloop's is what ``loop.create_server(ssl=...)`` would use there). What the front needs of it beyond
what ``loop.create_server(ssl=...)`` does is hooked where both call out: its ``connection_lost`` (a subclass of
each), and the SSL object both make through the context's ``wrap_bio`` (``_HookedContext``: the refusal and the
first answer to the client).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, Protocol, cast

from staticadm.server.event_loop import running_uvloop

#: What Go's net/http writes to a TLS connection whose first bytes are an HTTP request, and nothing more.
HTTP_TO_HTTPS_ANSWER = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
#: ``tlsRecordHeaderLooksLikeHTTP``: the only first five bytes Go answers instead of closing.
_HTTP_STARTS = frozenset({b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"})
_RECORD_HEADER = 5
_ALERT, _HANDSHAKE = 0x15, 0x16
#: How long a refused handshake's connection stays open after its alert, for the client to read it before the
#: close (a close with the client's bytes unread would reset the connection and could lose the alert).
REFUSED_GRACE = 0.05

#: The SSL protocol's read buffer until the handshake is done: one full TLS record (16 KiB of plaintext plus its
#: largest overhead), so a ClientHello is read in one piece whatever its size; then asyncio's own 256 KiB.
HANDSHAKE_READ_BUFFER = 16 * 1024 + 2048

#: (reason, detail) of a client refused before OpenSSL saw it.
Refusal = Callable[[str, str], None]


class HandshakeWatcher(Protocol):
    """What an app protocol may implement to hear of its connection before the handshake completes."""

    def handshake_began(self, transport: asyncio.Transport) -> bool:
        """The connection was accepted; False closes it at once (over the connection cap)."""

    def handshake_abandoned(self) -> None:
        """The connection was lost; a no-op once the handshake completed (``connection_made`` came first)."""

    def handshake_answered(self) -> None:
        """OpenSSL answered the client's first flight (its whole ClientHello arrived): a client that stalls
        before that never gets here."""


class _BoundedSSLProtocol(sslproto.SSLProtocol):
    """asyncio's SSL protocol with a small read buffer until its handshake is done, telling ``watcher`` when its
    connection is lost (asyncio tells the app protocol only once the handshake has completed)."""

    max_size = HANDSHAKE_READ_BUFFER
    watcher: HandshakeWatcher | None = None

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is None:
            # The class attribute, not 256 KiB allocated at once: get_buffer grows the buffer on the next read.
            self.max_size = sslproto.SSLProtocol.max_size  # type: ignore[misc]
        super()._on_handshake_complete(handshake_exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        watcher, self.watcher = self.watcher, None
        super().connection_lost(exc)
        if watcher is not None:
            watcher.handshake_abandoned()


@functools.cache
def _uvloop_ssl_protocol() -> type:
    """uvloop's SSL protocol (C), telling ``watcher`` when its connection is lost, as :class:`_BoundedSSLProtocol`;
    uvloop's streams read into it directly (no Python call per read), as they do for its own. Its read buffer is
    256 KiB from the start, but malloc maps it and the kernel gives it pages only as bytes arrive: a
    client that stalls after a few bytes holds a page or two of it, not the whole buffer."""
    from uvloop.loop import SSLProtocol  # type: ignore[attr-defined]  # not in its stubs

    class _UvSSLProtocol(SSLProtocol):
        watcher: HandshakeWatcher | None = None

        def connection_lost(self, exc: BaseException | None) -> None:
            watcher, self.watcher = self.watcher, None
            super().connection_lost(exc)
            if watcher is not None:
                watcher.handshake_abandoned()

    return _UvSSLProtocol


class _HookedContext:
    """The listener's SSLContext as an SSL protocol uses it, telling each connection's SSL object whom to tell
    when it refuses the handshake and when it first answers the client (``listeners.ReportingSSLObject``)."""

    def __init__(self, context: ssl.SSLContext, on_refused: Callable[[], None],
                 on_answered: Callable[[], None] | None) -> None:
        self._context = context
        self._on_refused = on_refused
        self._on_answered = on_answered

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, **options: Any) -> ssl.SSLObject:
        wrapped = self._context.wrap_bio(incoming, outgoing, **options)
        wrapped.on_refused = self._on_refused  # type: ignore[attr-defined]
        wrapped.on_answered = self._on_answered  # type: ignore[attr-defined]
        wrapped.outgoing = outgoing  # type: ignore[attr-defined]
        return wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class TlsFront(asyncio.Protocol):
    """One HTTPS connection until its first record is known to be TLS; then asyncio's SSL protocol, over the
    same transport, carries ``app_protocol`` (aiohttp's handler) as ``loop.create_server(ssl=...)`` would."""

    def __init__(self, app_protocol: asyncio.BaseProtocol, context: ssl.SSLContext, handshake_timeout: float,
                 refused: Refusal) -> None:
        self._app_protocol = app_protocol
        self._context = context
        self._handshake_timeout = handshake_timeout
        self._refused = refused
        self._head = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        began = getattr(app_protocol, "handshake_began", None)
        self._watcher: HandshakeWatcher | None = app_protocol if callable(began) else None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not checked with isinstance: uvloop's transports are no subclasses of asyncio's.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        if self._watcher is not None and not self._watcher.handshake_began(transport):
            self._watcher = None
            transport.abort()  # over the cap: nothing to flush, and no wait for a close to finish
            return
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._handshake_timeout
        self._timer = loop.call_at(self._deadline, transport.close)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_timer()
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.handshake_abandoned()

    def eof_received(self) -> bool:
        return False  # closed before it said anything: the transport closes itself

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._head += data
        if len(self._head) < _RECORD_HEADER:
            return
        header = bytes(self._head[:_RECORD_HEADER])
        if header[0] not in (_ALERT, _HANDSHAKE) or int.from_bytes(header[1:3], "big") >= 0x1000:
            self._not_tls(header)
        else:
            self._start_tls()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _not_tls(self, header: bytes) -> None:
        assert self._transport is not None
        self._stop_timer()
        if header in _HTTP_STARTS:
            self._refused("HTTP_REQUEST", "client sent an HTTP request to an HTTPS server")
            self._transport.write(HTTP_TO_HTTPS_ANSWER)
        else:
            self._refused("NOT_TLS", f"first record does not look like a TLS handshake ({header.hex()})")
        self._transport.close()

    def _start_tls(self) -> None:
        transport = self._transport
        assert transport is not None
        self._stop_timer()
        loop = asyncio.get_running_loop()
        remaining = max(self._deadline - loop.time(), 0.001)
        # What loop.create_server(ssl=...) builds for each connection (base_events._accept_connection2), with
        # the bytes read so far handed to it as if it had read them.
        # Untyped on purpose: typeshed wants an SSLContext (any object with wrap_bio serves), a waiter future
        # (None is "nobody waits") and whole seconds (asyncio takes any positive number).
        make_protocol: Any = _uvloop_ssl_protocol() if running_uvloop() else _BoundedSSLProtocol
        watcher = self._watcher
        context = _HookedContext(self._context, self._after_refusal,
                                 watcher.handshake_answered if watcher is not None else None)
        protocol = make_protocol(loop, self._app_protocol, context, None, server_side=True,
                                 ssl_handshake_timeout=remaining)
        # From now on the SSL protocol hears of the connection's end, and tells the watcher.
        protocol.watcher, self._watcher = self._watcher, None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        data = memoryview(bytes(self._head))
        self._head = bytearray()
        while data and not transport.is_closing():
            buffer = protocol.get_buffer(len(data))
            size = min(len(buffer), len(data))
            buffer[:size] = data[:size]
            protocol.buffer_updated(size)
            data = data[size:]

    def _after_refusal(self) -> None:
        # Called as OpenSSL refuses; the SSL protocol writes the queued alert right after, so the end of the
        # stream follows it on the next turn of the loop.
        transport = self._transport
        if transport is None:
            return
        loop = asyncio.get_running_loop()

        def end() -> None:
            if not transport.is_closing():
                if transport.can_write_eof():
                    transport.write_eof()
                loop.call_later(REFUSED_GRACE, transport.close)

        loop.call_soon(end)


def tls_front_factory(app_factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext,
                      handshake_timeout: float, refused: Refusal) -> Callable[[], TlsFront]:
    """The protocol factory of an HTTPS listener for ``loop.create_server`` (without its ``ssl``)."""
    return lambda: TlsFront(app_factory(), context, handshake_timeout, refused)
