"""An admission request that arrived whole in one read, framed without aiohttp's request machinery.

aiohttp handles every request through its parser's message queue, a request object, a handler coroutine woken
by the event loop and a response object: about 100 µs of CPU a request on a 2-core VM (``python -m
bench.http_floor``), more than a repeated request's whole evaluation. kube-apiserver sends each AdmissionReview
as one ``POST`` with a Content-Length, written at once, so the connection's data callback nearly always holds a
whole request. This module recognises exactly that request, and nothing looser: ``POST /validate`` or ``POST
/mutate`` (an optional ``timeout`` query), HTTP/1.1, header names that are tokens and values without control
characters, one Content-Length that frames the rest of the read exactly, ``Content-Type: application/json``, and
none of the headers that change framing or the handler's path (Transfer-Encoding, Expect, Connection, Upgrade,
Content-Encoding, TE, Trailer). Anything else, or a second request in the same read, is left to aiohttp, which
decides it as before.

Stage: the server's (I/O edge): bytes in, a :class:`WholeRequest` or None; a response's bytes out.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate

from aiohttp.http import SERVER_SOFTWARE

#: The paths answered here, by their request line's target without the query.
REVIEW_PATHS = {b"/validate": "validate", b"/mutate": "mutate"}

_REQUEST_LINE = re.compile(rb"POST (" + b"|".join(map(re.escape, REVIEW_PATHS))
                           + rb")(?:\?(timeout=[0-9A-Za-z.]+))? HTTP/1\.1\Z")
_HEADER = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?[ \t]*\Z")
#: Headers that change how the body is framed or read, or how the connection goes on: aiohttp decides those.
_LEFT_TO_AIOHTTP = frozenset({b"transfer-encoding", b"expect", b"connection", b"upgrade", b"content-encoding", b"te",
                              b"trailer"})
#: No request line and headers beyond this are looked at here (aiohttp's own limit is 8 KiB per line).
MAX_HEAD_BYTES = 8192

#: How a request taken whole gets its answer back to its connection: status, reason, JSON body.
DirectReply = Callable[[int, str, bytes], None]


@dataclass(frozen=True, slots=True)
class WholeRequest:
    endpoint: str
    #: The ``timeout`` query's value, or None without one.
    timeout: str | None
    body: bytes


def whole_request(data: bytes) -> WholeRequest | None:
    """``data`` as one whole admission request, when it is exactly one of the shape above; None otherwise."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    request_line = _REQUEST_LINE.match(lines[0])
    if request_line is None:
        return None
    length: int | None = None
    content_type: bytes | None = None
    for line in lines[1:]:
        header = _HEADER.match(line)
        if header is None:
            return None
        name = header[1].lower()
        value = header[2] or b""
        if name in _LEFT_TO_AIOHTTP:
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > 12:
                return None
            length = int(value)
        elif name == b"content-type":
            if content_type is not None:
                return None
            content_type = value
    body_start = end + 4
    if length is None or content_type != b"application/json" or len(data) - body_start != length:
        return None
    timeout = request_line[2]
    return WholeRequest(REVIEW_PATHS[request_line[1]], timeout[8:].decode() if timeout is not None else None,
                        data[body_start:])


_date_second = -1
_date_header = b""


def _date() -> bytes:
    """The Date header's value, formatted once a second (as aiohttp does)."""
    global _date_second, _date_header
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_header = formatdate(now, usegmt=True).encode()
    return _date_header


_SERVER = SERVER_SOFTWARE.encode()
_CLOSE = b"Connection: close\r\n"


def response_bytes(status: int, reason: str, body: bytes, *, close: bool = False) -> bytes:
    """An HTTP/1.1 response with a JSON body, with the headers aiohttp gives the same response; with ``close``, one
    that ends the connection (``Connection: close``)."""
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nDate: %s\r\nServer: %s\r\n%s"
            b"\r\n" % (status, reason.encode(), len(body), _date(), _SERVER, _CLOSE if close else b"")) + body
