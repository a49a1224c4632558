"""py-spy profiles of the daemon under load, summarised as top functions and time per category.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... count``); we summarise them
ourselves so the report can say where a request's time goes (event loop, TLS, JSON, thread handoff,
CEL, logging, metrics) without opening a flame graph.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Whole-stack categories, checked first: threads whose every sample is one activity.
STACK_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("watchdog threads (file watcher)", re.compile(r"watchdog/")),
)
#: Leaf frames that mean the thread is not running Python: waiting for the GIL, or parked. py-spy's
#: --native mode samples parked threads too, so without this they would be charged to their callers.
LEAF_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("GIL wait", re.compile(r"take_gil|pthread_cond_timedwait|drop_gil")),
    ("parked (queue/lock/poll wait)", re.compile(r"PyThread_acquire_lock|_queue_SimpleQueue_get|\bpoll \(|epoll_wait"
                                                 r"|select_poll_poll|Condition\.wait")),
)
#: Then the first match from the leaf upwards wins, so a CEL call made from admission code counts as CEL.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("idle (epoll wait)", re.compile(r"\b(select|epoll_wait)\b|selectors\.py")),
    ("logging", re.compile(r"structlog|/logging/|staticadm/server/logging\.py")),
    ("metrics", re.compile(r"prometheus_client|staticadm/server/metrics\.py")),
    ("JSON", re.compile(r"orjson|json/|\b(loads|dumps)\b")),
    ("CEL evaluation", re.compile(r"staticadm/cel/|cel_expr|cel_python|libcel|\bcel::|google::api::expr")),
    ("admission (matching/response)", re.compile(r"staticadm/admission/|staticadm/snapshot\.py|\((validating|"
                                                 r"matching|activation|endpoints|request|response)\.py")),
    ("thread-pool handoff", re.compile(r"concurrent/futures|threading\.py|run_in_executor|call_soon_threadsafe"
                                       r"|_write_to_self|futures\.py|_chain_future|pthread_cond_signal|futex")),
    ("TLS", re.compile(r"ssl|SSL|sslproto\.py|libssl|libcrypto")),
    ("HTTP (aiohttp)", re.compile(r"aiohttp|_http_parser|multidict|yarl|web_protocol|streams\.py")),
    ("event loop (asyncio)", re.compile(r"asyncio/|uvloop")),
)


@dataclass
class ProfileSummary:
    samples: int = 0
    self_top: list[tuple[str, float]] = field(default_factory=list)
    inclusive_top: list[tuple[str, float]] = field(default_factory=list)
    categories: list[tuple[str, float]] = field(default_factory=list)
    threads: list[tuple[str, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "self_top": self.self_top, "inclusive_top": self.inclusive_top,
                "categories": self.categories, "threads": self.threads}


def py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    # The benchmark usually runs from a virtualenv whose bin/ is not on PATH.
    import sys

    candidate = Path(sys.executable).with_name("py-spy")
    return str(candidate) if candidate.exists() else None


def start_record(pid: int, output: Path, duration: float, *, native: bool = False,
                 rate: int = 200) -> subprocess.Popen[bytes]:
    executable = py_spy()
    if executable is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    command = [executable, "record", "--pid", str(pid), "--duration", str(max(1, round(duration))),
               "--rate", str(rate), "--format", "raw", "--threads", "--output", str(output)]
    if native:
        command.append("--native")
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


_UNRESOLVED = re.compile(r"0x[0-9a-f]+ \(")
_LINE = re.compile(r"\s*\(([^)]*?)(?::\d+)?\)$")


def _function(frame: str) -> str:
    """``handle (staticadm/server/app.py:150)`` -> ``handle (staticadm/server/app.py)``: lines merged."""
    match = _LINE.search(frame)
    if match is None:
        return frame.strip()
    location = match.group(1)
    for marker in ("site-packages/", "lib/python3", "/work/main/"):
        if marker in location:
            location = location.split(marker, 1)[1]
    return f"{frame[:match.start()].strip()} ({location})"


def categorise(stack: list[str]) -> str:
    for name, pattern in STACK_CATEGORIES:
        if any(pattern.search(frame) for frame in stack):
            return name
    # Unresolved libc addresses (futex and syscall stubs) say nothing; their caller says what waits.
    resolved = [frame for frame in stack if not _UNRESOLVED.match(frame)]
    for name, pattern in LEAF_CATEGORIES:
        if resolved and pattern.search(resolved[-1]):
            return name
    for frame in reversed(stack):
        for name, pattern in CATEGORIES:
            if pattern.search(frame):
                return name
    return "other"


def summarise(raw: Path, top: int = 25) -> ProfileSummary:
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack_text.split(";")
        thread = frames[0] if frames[0].startswith(("thread", "process")) else "?"
        stack = [f for f in frames if not f.startswith(("thread (", "process "))]
        if not stack:
            continue
        total += count
        threads[thread] += count
        self_counts[_function(stack[-1])] += count
        for name in {_function(f) for f in stack}:
            inclusive[name] += count
        categories[categorise(stack)] += count

    def share(counter: Counter[str], limit: int) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(limit)] if total else []

    return ProfileSummary(total, share(self_counts, top), share(inclusive, top), share(categories, 20),
                          share(threads, 10))


def format_summary(title: str, summary: ProfileSummary, top: int = 15) -> str:
    lines = [f"{title}: {summary.samples} samples"]
    lines.append("  by category (leaf-most match): " + ", ".join(f"{n} {p}%" for n, p in summary.categories))
    lines.append("  by thread: " + ", ".join(f"{n} {p}%" for n, p in summary.threads))
    lines.append("  top self time:")
    lines += [f"    {p:5.1f}%  {n}" for n, p in summary.self_top[:top]]
    lines.append("  top inclusive time:")
    lines += [f"    {p:5.1f}%  {n}" for n, p in summary.inclusive_top[:top]]
    return "\n".join(lines)
