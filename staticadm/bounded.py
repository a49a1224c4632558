"""What evaluation keeps across requests (memos of matching, programs, answers) stays bounded whatever the
requests hold: each memo is a dict of at most a fixed number of entries."""

from __future__ import annotations

from typing import TypeVar

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def keep_bounded(entries: dict[_Key, _Value], key: _Key, value: _Value, limit: int) -> None:
    """``entries[key] = value``, ``entries`` emptied first when it holds ``limit``. Emptied rather than trimmed: a
    dict finds its first entry only past every one deleted before it, and what was kept refills from the requests
    that still need it."""
    if len(entries) >= limit:
        entries.clear()
    entries[key] = value
