"""Namespaces as kube-apiserver's admission plugins see them: an informer, plus a live GET on a miss.

kube-apiserver's namespace matcher reads its informer's lister and, when a namespace is not there yet
(the informer lags a create), asks storage directly (``namespace.Matcher.GetNamespace``). This is the
same for a webhook: a reflector (list, then watch from the list's resourceVersion with bookmarks; a
relist after 410 Gone and after errors, spaced by client-go's reflector backoff; a periodic relist to heal
drift) keeps an in-memory map the request path reads without waiting, and :meth:`NamespaceInformer.fetch`
gives a request its namespace before evaluation: from the map, or by a live GET that ends at the request's
deadline.

What cannot be answered is never guessed: before the first list completes, or when the live GET fails or
has no answer in time, the lookup carries the reason, and a policy that needs the labels or the object
fails under its failurePolicy with a message naming the namespace and the cause.

The map holds each namespace as the compact JSON of what matching and ``namespaceObject`` read, decoded on
lookup: 100,000 namespaces kept as Python objects would be millions of objects for the garbage collector
to walk, holding the event loop each time it does.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Protocol

import orjson

from staticadm.admission.namespaces import NamespaceFileError, NamespaceInfo, namespace_info_from_object
from staticadm.cluster.connection import (
    MAX_OBJECT_BYTES,
    CallProgress,
    ClusterError,
    Deadline,
    KubeConnection,
    StreamBroken,
)
from staticadm.cluster.listing import ContinueTokens, ListDecodeError, list_items

NAMESPACES_PATH = "/api/v1/namespaces"
#: Page size of a list, as client-go's reflector pages.
LIST_PAGE_SIZE = 500
#: A list page larger than this is refused: kube-apiserver pages by ``limit``, so 500 namespaces would each
#: have to be over 100 KiB; a server that ignores ``limit`` may send every namespace in one page (100,000
#: small ones are about 40 MiB).
MAX_LIST_PAGE_BYTES = 64 * 1024 * 1024
#: A cluster with more namespaces than this is not cached (its lookups are live GETs): ten times what
#: Kubernetes' scalability tests run.
MAX_NAMESPACES = 100_000
LIST_PAGE_SECONDS = 60.0
#: Every so often the whole list is read again, in case a missed event left the map wrong.
DEFAULT_RESYNC_SECONDS = 600.0
#: Watches are renewed after a random 5 to 10 minutes (client-go's minWatchTimeout and jitter).
WATCH_SECONDS = (300, 600)
#: client-go's reflector backoff (``reflector.go``): 0.8 s doubling to 30 s, each delay jittered up to twice as
#: long, started again only when 2 minutes have passed since it last was.
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
BACKOFF_RESET = 120.0
#: A watch that ends sooner than this without an event is an error, as in client-go ("very short watch").
SHORT_WATCH_SECONDS = 1.0
#: Bookmarks kube-apiserver sends about once a minute; a watch sending them faster than this (over a burst
#: of ``BOOKMARK_BURST``) is broken and is ended.
BOOKMARKS_PER_SECOND = 10.0
BOOKMARK_BURST = 100
#: Namespace changes come in bursts (a script labelling every namespace, a namespace controller deleting
#: many): a watch may deliver ``EVENT_BURST`` at once, then ``EVENTS_PER_SECOND``; past that it is ended.
EVENTS_PER_SECOND = 1_000.0
EVENT_BURST = 50_000
#: Namespaces fetched by a live GET and not yet seen by the watch; bounded against requests naming
#: many namespaces that the watch never reports.
MAX_FETCHED = 4096
#: How long a failed live GET of a namespace answers for it before one is tried again.
FAILED_FETCH_REUSE = 1.0
#: Namespaces decoded for lookups, kept decoded (a request reads its own namespace; few are hot).
DECODED_CACHE = 1024


class ClusterObserver(Protocol):
    """Where the informer reports what it does (the daemon's metrics)."""

    def api_call(self, operation: str, seconds: float, error: bool) -> None: ...

    def watch_restart(self, resource: str, reason: str) -> None: ...

    def cache_state(self, resource: str, synced: bool, objects: int) -> None: ...

    def authorizer_cache(self, hit: bool) -> None: ...


class NoObserver:
    """Reports nowhere: for callers without metrics (``review --kubeconfig``)."""

    def api_call(self, operation: str, seconds: float, error: bool) -> None:
        pass

    def watch_restart(self, resource: str, reason: str) -> None:
        pass

    def cache_state(self, resource: str, synced: bool, objects: int) -> None:
        pass

    def authorizer_cache(self, hit: bool) -> None:
        pass


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone / Expired): list again."""


class ReflectorBackoff:
    """The delay before each list-and-watch after the first (client-go's ``Backoff.DelayWithReset``). A
    successful list does not reset it: when every watch fails at once, each process relists at a falling
    rate instead of once a second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] = random.random) -> None:
        self._clock = clock
        self._jitter = jitter
        self._started = clock()
        self._next = BACKOFF_INITIAL

    def delay(self) -> float:
        now = self._clock()
        if now - self._started > BACKOFF_RESET:
            self._next = BACKOFF_INITIAL
            self._started = now
        current = self._next
        self._next = min(current * 2, BACKOFF_MAX)
        return current * (1 + self._jitter())


class _Rate:
    """A token bucket: ``take`` is False once more than ``burst`` were taken faster than ``per_second``."""

    def __init__(self, per_second: float, burst: int) -> None:
        self._per_second = per_second
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


def _compact(item: Any) -> tuple[str, bytes]:
    """(name, what lookups decode) of a Namespace; NamespaceFileError if it is not one."""
    if not isinstance(item, dict):
        raise NamespaceFileError("a namespace in kube-apiserver's answer is not an object")
    # List items come without apiVersion and kind; watch events and GETs carry them.
    info = namespace_info_from_object({**item, "apiVersion": "v1", "kind": "Namespace"})
    assert info.object is not None
    # A copy of orjson's result: that one keeps the whole buffer orjson wrote into (4 KiB at least).
    return info.name, memoryview(orjson.dumps(dict(info.object))).tobytes()


def _expand(name: str, data: bytes) -> NamespaceInfo:
    shown = orjson.loads(data)
    return NamespaceInfo(name, MappingProxyType(shown["metadata"]["labels"]), MappingProxyType(shown))


def _resource_version(document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else ""


class _Get:
    """A live GET of one namespace that requests share: it runs until the latest of their deadlines."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.progress = CallProgress()
        self.task: asyncio.Task[None] | None = None


class NamespaceInformer:
    """A NamespaceSource over kube-apiserver's namespaces (see the module docstring)."""

    def __init__(self, connection: KubeConnection, *, observer: ClusterObserver | None = None,
                 resync_seconds: float = DEFAULT_RESYNC_SECONDS, logger: Any = None) -> None:
        self._connection = connection
        self._observer = observer or NoObserver()
        self._resync_seconds = resync_seconds
        self._log = logger
        self._items: dict[str, bytes] = {}
        self._fetched: OrderedDict[str, bytes] = OrderedDict()
        self._decoded: OrderedDict[str, tuple[bytes, NamespaceInfo]] = OrderedDict()
        self._fetch_errors: dict[str, str] = {}
        self._fetch_failed_at: dict[str, float] = {}
        self._in_flight: dict[str, _Get] = {}
        self.synced = False
        #: Why the last list or watch failed, until one succeeds again.
        self.last_error: str | None = None
        self.synced_at: float | None = None
        self._resource_version = ""

    # -- what the request path reads -------------------------------------------------------------------

    def lookup(self, name: str) -> NamespaceInfo:
        data = self._items.get(name)
        if data is None:
            data = self._fetched.get(name)
        if data is None:
            return NamespaceInfo(name, unavailable=self._why_unknown(name))
        decoded = self._decoded.get(name)
        if decoded is not None and decoded[0] is data:
            return decoded[1]
        info = _expand(name, data)
        self._decoded[name] = (data, info)
        self._decoded.move_to_end(name)
        if len(self._decoded) > DECODED_CACHE:
            self._decoded.popitem(last=False)
        return info

    def knows(self, name: str) -> bool:
        return name in self._items or name in self._fetched

    def _why_unknown(self, name: str) -> str:
        error = self._fetch_errors.get(name)
        if error is not None:
            return f'namespace "{name}" could not be read from kube-apiserver: {error}'
        if not self.synced:
            cause = self.last_error or "the first list has not completed"
            return f'namespace "{name}" is not known yet: the namespace cache has not synced ({cause})'
        return f'namespaces "{name}" not found'

    def describe(self) -> str:
        """One line for /readyz?verbose."""
        if self.synced:
            state = f"namespaces synced ({len(self._items)} cached, resourceVersion {self._resource_version})"
        else:
            state = "namespaces not synced yet"
        if self.last_error:
            state += f"; last error: {self.last_error}"
        return state

    # -- live GET on a miss ----------------------------------------------------------------------------

    async def fetch(self, name: str, deadline: float, *, waiting: Callable[[], None] = lambda: None) -> NamespaceInfo:
        """What a request knows of namespace ``name`` for its whole evaluation: the map's entry, or else the
        answer of a live GET (shared by the requests asking at once, and running until the latest of their
        deadlines) awaited until ``deadline`` (the event loop's clock), or why there is none. A GET of the same
        namespace that failed less than FAILED_FETCH_REUSE seconds ago is not repeated: while kube-apiserver is
        unreachable, requests fail fast with its error instead of each waiting. ``waiting()`` is called before the
        request waits on kube-apiserver, so it can let go of what it holds meanwhile."""
        if self.knows(name):
            return self.lookup(name)
        failed_at = self._fetch_failed_at.get(name)
        if failed_at is not None and time.monotonic() - failed_at < FAILED_FETCH_REUSE:
            return self.lookup(name)
        loop = asyncio.get_running_loop()
        budget = deadline - loop.time()
        if budget <= 0:
            return NamespaceInfo(name, unavailable=f'namespace "{name}" could not be read from kube-apiserver: '
                                                   "the admission request's deadline left no time to ask")
        get = self._in_flight.get(name)
        if get is None:
            get = self._in_flight[name] = _Get(Deadline(deadline))
            get.task = asyncio.ensure_future(self._get(name, get))
            get.task.add_done_callback(lambda _: self._in_flight.pop(name, None))
        else:
            get.deadline.extend(deadline)
        assert get.task is not None
        waiting()
        done, _ = await asyncio.wait([get.task], timeout=budget)
        if not done:
            return NamespaceInfo(name, unavailable=(
                f'namespace "{name}" could not be read from kube-apiserver: GET {self._path(name)}: '
                f"{get.progress.timed_out(self._connection.server or 'kube-apiserver', budget)}"))
        return self.lookup(name)

    @staticmethod
    def _path(name: str) -> str:
        return f"{NAMESPACES_PATH}/{urllib.parse.quote(name, safe='')}"

    async def _get(self, name: str, get: _Get) -> None:
        started = time.perf_counter()
        try:
            document = await self._connection.request("GET", self._path(name), deadline=get.deadline,
                                                      limit=MAX_OBJECT_BYTES, progress=get.progress)
            found, data = _compact(document)
            if found != name:
                raise NamespaceFileError(f"kube-apiserver answered namespace {found!r} for {name!r}")
        except ClusterError as error:
            self._observer.api_call("get", time.perf_counter() - started, error.status != 404)
            if error.status == 404:
                self._fetch_errors.pop(name, None)
            else:
                self._remember_fetch_error(name, error.message)
            return
        except NamespaceFileError as error:
            self._observer.api_call("get", time.perf_counter() - started, True)
            self._remember_fetch_error(name, str(error))
            return
        self._observer.api_call("get", time.perf_counter() - started, False)
        self._fetch_errors.pop(name, None)
        self._fetch_failed_at.pop(name, None)
        if name not in self._items:
            self._fetched[name] = data
            while len(self._fetched) > MAX_FETCHED:
                self._fetched.popitem(last=False)

    def _remember_fetch_error(self, name: str, message: str) -> None:
        self._fetch_errors[name] = message
        self._fetch_failed_at[name] = time.monotonic()
        while len(self._fetch_failed_at) > MAX_FETCHED:
            self._fetch_failed_at.pop(next(iter(self._fetch_failed_at)))
        while len(self._fetch_errors) > MAX_FETCHED:
            self._fetch_errors.pop(next(iter(self._fetch_errors)))

    # -- the reflector ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled; never raises for kube-apiserver's errors. As client-go's reflector,
        each list-and-watch that ends in an error waits for the backoff's next delay before the next one."""
        backoff = ReflectorBackoff()
        while True:
            try:
                await self._list_and_watch(backoff)
                continue  # the periodic relist
            except _Expired:
                self._observer.watch_restart("namespaces", "expired")
                delay = backoff.delay()
            except (ClusterError, ValueError, TypeError, KeyError) as error:
                # ValueError and the rest: an answer of a shape no kube-apiserver sends; retried the same way.
                self._observer.watch_restart("namespaces", "error")
                delay = backoff.delay()
                self._report(error.message if isinstance(error, ClusterError) else f"{type(error).__name__}: {error}",
                             delay, "namespace list or watch failed; relisting")
            await asyncio.sleep(delay)

    async def _list_and_watch(self, backoff: ReflectorBackoff) -> None:
        """A list, then watches from its resourceVersion until the periodic relist is due."""
        await self._list()
        listed_at = time.monotonic()
        while (left := self._resync_seconds - (time.monotonic() - listed_at)) > 0:
            try:
                await self._watch(min(left, random.uniform(*WATCH_SECONDS)))
            except ClusterError as error:
                if not (error.connection_refused or error.status == 429):
                    raise
                # Nothing listening, or told to slow down: watch again later from where it was (client-go's
                # isWatchErrorRetriable), no relist.
                delay = backoff.delay()
                self._report(error.message, delay, "namespace watch could not start; retrying")
                await asyncio.sleep(delay)

    def _report(self, message: str, retry_in: float, what: str) -> None:
        self.last_error = message
        if self._log is not None:
            self._log.warning(what, err=message, retry_seconds=round(retry_in, 2))

    async def list_once(self) -> None:
        """One complete list (the map as kube-apiserver has it now); ClusterError if it cannot be read."""
        try:
            await self._list()
        except _Expired:
            await self._list()

    async def _list(self) -> None:
        items: dict[str, bytes] = {}
        token = ""
        tokens = ContinueTokens("namespaces")
        loop = asyncio.get_running_loop()
        while True:
            query = {"limit": str(LIST_PAGE_SIZE)}
            if token:
                query["continue"] = token
            path = f"{NAMESPACES_PATH}?{urllib.parse.urlencode(query)}"
            started = time.perf_counter()
            try:
                page = await self._connection.request_bytes("GET", path, deadline=loop.time() + LIST_PAGE_SECONDS,
                                                            limit=MAX_LIST_PAGE_BYTES)
                fields: dict[str, Any] = {}
                async for item in list_items(page, fields.__setitem__):
                    name, data = _compact(item)
                    items[name] = data
                    if len(items) > MAX_NAMESPACES:
                        raise ClusterError(f"GET {NAMESPACES_PATH}: more than {MAX_NAMESPACES} namespaces; the "
                                           "cache holds at most that many (lookups are live GETs meanwhile)")
                del page
            except ClusterError as error:
                self._observer.api_call("list", time.perf_counter() - started, True)
                if error.status == 410:
                    # The continue token expired: start the list again.
                    raise _Expired() from None
                raise
            except (ListDecodeError, NamespaceFileError) as error:
                self._observer.api_call("list", time.perf_counter() - started, True)
                raise ClusterError(f"GET {NAMESPACES_PATH}: the answer is not a NamespaceList: {error}") from None
            self._observer.api_call("list", time.perf_counter() - started, False)
            metadata = fields.get("metadata") or {}
            token = tokens.next(str(metadata.get("continue") or "") if isinstance(metadata, dict) else "")
            if not token:
                self._resource_version = _resource_version(fields)
                break
        self._items = items
        self._fetched.clear()
        self._decoded.clear()
        self._fetch_errors.clear()
        self._fetch_failed_at.clear()
        first = not self.synced
        self.synced = True
        self.synced_at = time.time()
        self.last_error = None
        self._observer.cache_state("namespaces", True, len(items))
        if first and self._log is not None:
            self._log.info("namespace cache synced", namespaces=len(items), resource_version=self._resource_version)

    async def _watch(self, seconds: float) -> None:
        query = urllib.parse.urlencode({"watch": "1", "allowWatchBookmarks": "true",
                                        "resourceVersion": self._resource_version,
                                        "timeoutSeconds": str(max(int(seconds), 1))})
        started = time.perf_counter()
        events = 0
        bookmarks, changes = _Rate(BOOKMARKS_PER_SECOND, BOOKMARK_BURST), _Rate(EVENTS_PER_SECOND, EVENT_BURST)
        try:
            async with self._connection.stream(f"{NAMESPACES_PATH}?{query}", timeout=seconds + 30) as stream:
                async for event in stream:
                    events += 1
                    if not self._apply(event, bookmarks, changes):
                        raise ClusterError(f"namespace watch: kube-apiserver sent events faster than a namespace "
                                           f"watch carries them ({events} in {time.perf_counter() - started:.3g} s)")
        except StreamBroken:
            self._observer.api_call("watch", time.perf_counter() - started, True)
            if time.perf_counter() - started < SHORT_WATCH_SECONDS:
                raise
            # The stream broke after it had worked: watch again from the last resourceVersion seen, as client-go
            # does when a watch closes; a resourceVersion gone by then is a 410 and a relist.
            return
        except ClusterError as error:
            self._observer.api_call("watch", time.perf_counter() - started, True)
            if error.status == 410:
                raise _Expired() from None
            raise
        self._observer.api_call("watch", time.perf_counter() - started, False)
        if time.perf_counter() - started < SHORT_WATCH_SECONDS:
            # Watched again at once, a server that ends every watch at once would be asked without pause.
            raise ClusterError(f"namespace watch: very short watch (closed within a second, {events} events)")
        self.last_error = None

    def _apply(self, event: Any, bookmarks: _Rate, changes: _Rate) -> bool:
        """Applies one watch event; False when it comes faster than its rate allows (the watch then ends)."""
        if not isinstance(event, dict):
            raise ClusterError("a namespace watch event is not an object")
        kind, document = event.get("type"), event.get("object")
        if kind == "ERROR":
            code = document.get("code") if isinstance(document, dict) else None
            if code == 410:
                raise _Expired()
            message = document.get("message") if isinstance(document, dict) else None
            raise ClusterError(f"namespace watch: {message or 'error event'}", status=code if isinstance(code, int)
                               else 500)
        version = _resource_version(document)
        if kind == "BOOKMARK":
            if version:
                self._resource_version = version
            return bookmarks.take()
        try:
            name, data = _compact(document)
        except NamespaceFileError as error:
            raise ClusterError(f"namespace watch: {error}") from None
        if kind in ("ADDED", "MODIFIED"):
            if name not in self._items and len(self._items) >= MAX_NAMESPACES:
                raise ClusterError(f"namespace watch: more than {MAX_NAMESPACES} namespaces")
            self._items[name] = data
        elif kind == "DELETED":
            self._items.pop(name, None)
        else:
            raise ClusterError(f"namespace watch: unknown event type {kind!r}")
        self._fetched.pop(name, None)
        self._fetch_errors.pop(name, None)
        self._fetch_failed_at.pop(name, None)
        if version:
            self._resource_version = version
        self._observer.cache_state("namespaces", True, len(self._items))
        return changes.take()
