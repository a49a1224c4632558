"""A Kubernetes list answer (``{"kind": ..., "metadata": {...}, "items": [...]}``) decoded item by item.

One ``orjson.loads`` of a large page holds the event loop for the whole decode, and building every item's
objects at once makes the garbage collector walk them again and again while they are built (100,000
namespaces: over a second). A large page is walked with the standard library's C scanner one value at a
time instead, and the caller gets each item as soon as it is decoded, so it can keep what it needs in a
compact form and let the rest go; the walk gives the event loop a turn every few milliseconds. A page of
the usual size (500 items) is decoded at once, which is faster and stalls nothing noticeably.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from staticadm.cluster.connection import ClusterError

#: The walk yields to the event loop after this long without doing so.
SLICE_SECONDS = 0.005
#: Pages up to this size are decoded in one go (a few milliseconds).
WHOLE_PAGE_BYTES = 1024 * 1024

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class ListDecodeError(ValueError):
    """The answer is not a JSON object with an ``items`` array."""


async def _whole(body: bytes, on_field: Callable[[str, Any], None]) -> AsyncIterator[Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise ListDecodeError(str(error)) from None
    if not isinstance(document, dict):
        raise ListDecodeError("the answer is not a JSON object")
    for key, value in document.items():
        if key != "items":
            on_field(key, value)
    items = document.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise ListDecodeError("items is not an array")
    given = time.perf_counter()
    for item in items:
        yield item
        if time.perf_counter() - given > SLICE_SECONDS:
            await asyncio.sleep(0)
            given = time.perf_counter()


def _skip(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)
    return match.end() if match is not None else index


def _expect(text: str, index: int, what: str) -> int:
    index = _skip(text, index)
    if not text.startswith(what, index):
        raise ListDecodeError(f"expected {what!r} at character {index}")
    return index + len(what)


def _value(text: str, index: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, _skip(text, index))
    except json.JSONDecodeError as error:
        raise ListDecodeError(str(error)) from None


async def list_items(body: bytes, on_field: Callable[[str, Any], None]) -> AsyncIterator[Any]:
    """The elements of the answer's ``items`` array, in order; every other top-level field (``metadata``,
    ``kind``...) is given to ``on_field`` as it is met. ListDecodeError when ``body`` is not such an answer."""
    if len(body) <= WHOLE_PAGE_BYTES:
        async for item in _whole(body, on_field):
            yield item
        return
    try:
        text = body.decode()
    except UnicodeDecodeError as error:
        raise ListDecodeError(f"the answer is not UTF-8: {error}") from None
    index = _expect(text, 0, "{")
    if text.startswith("}", _skip(text, index)):
        return
    given = time.perf_counter()
    while True:
        key, index = _value(text, index)
        if not isinstance(key, str):
            raise ListDecodeError(f"a key is not a string at character {index}")
        index = _expect(text, index, ":")
        if key != "items":
            value, index = _value(text, index)
            on_field(key, value)
        else:
            index = _skip(text, index)
            if text.startswith("null", index):
                index += 4
            else:
                index = _expect(text, index, "[")
                if text.startswith("]", _skip(text, index)):
                    index = _skip(text, index) + 1
                else:
                    while True:
                        item, index = _value(text, index)
                        yield item
                        if time.perf_counter() - given > SLICE_SECONDS:
                            await asyncio.sleep(0)
                            given = time.perf_counter()
                        index = _skip(text, index)
                        if text.startswith("]", index):
                            index += 1
                            break
                        index = _expect(text, index, ",")
        index = _skip(text, index)
        if text.startswith("}", index):
            break
        index = _expect(text, index, ",")
    if _skip(text, index + 1) != len(text):
        raise ListDecodeError(f"unexpected data after the answer at character {index + 1}")


class ContinueTokens:
    """The continue tokens of one paged list. kube-apiserver's token encodes where the next page starts, so
    it never gives one twice in a list; one given again would have the list read the same pages for ever (a
    server answering every page alike requested 422 pages in 20 s), so it ends the list with an error naming
    what was listed."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._seen: set[str] = set()

    def next(self, token: str) -> str:
        """``token``, the one to ask the next page with ("" at the end); ClusterError if it was given before."""
        if token in self._seen:
            raise ClusterError(f"listing {self._what}: page {len(self._seen) + 1} came with a continue token an "
                               "earlier page gave, so the list would never end; stopped")
        if token:
            self._seen.add(token)
        return token

