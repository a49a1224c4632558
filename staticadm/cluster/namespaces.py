"""Namespaces as kube-apiserver's admission plugins see them: an informer, plus a live GET on a miss.

kube-apiserver's namespace matcher reads its informer's lister and, when a namespace is not there yet
(the informer lags a create), asks storage directly (``namespace.Matcher.GetNamespace``). This is the
same for a webhook: a reflector (list, then watch from the list's resourceVersion with bookmarks;
relist on 410 Gone and after errors, with jittered backoff; a periodic relist to heal drift) keeps an
in-memory map the request path reads without waiting, and :meth:`NamespaceInformer.fetch` is the live
GET, awaited before evaluation only for a namespace the map lacks, bounded by the request's deadline.

What cannot be answered is never guessed: before the first list completes, or when the live GET fails,
the lookup carries the reason, and a policy that needs the labels or the object fails under its
failurePolicy with a message naming the namespace and the cause.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse
from collections import OrderedDict
from typing import Any, Protocol

from staticadm.admission.namespaces import NamespaceFileError, NamespaceInfo, namespace_info_from_object
from staticadm.cluster.connection import ClusterError, KubeConnection

NAMESPACES_PATH = "/api/v1/namespaces"
#: Page size of a list, as client-go's reflector pages.
LIST_PAGE_SIZE = 500
#: Every so often the whole list is read again, in case a missed event left the map wrong.
DEFAULT_RESYNC_SECONDS = 600.0
#: Watches are renewed after a random 5 to 10 minutes (client-go's minWatchTimeout and jitter).
WATCH_SECONDS = (300, 600)
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
#: Namespaces fetched by a live GET and not yet seen by the watch; bounded against requests naming
#: many namespaces that the watch never reports.
MAX_FETCHED = 4096
#: How long a failed live GET of a namespace answers for it before one is tried again.
FAILED_FETCH_REUSE = 1.0


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


def _info(item: Any) -> NamespaceInfo:
    if not isinstance(item, dict):
        raise NamespaceFileError("a namespace in kube-apiserver's answer is not an object")
    # List items come without apiVersion and kind; watch events and GETs carry them.
    return namespace_info_from_object({**item, "apiVersion": "v1", "kind": "Namespace"})


def _resource_version(document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else ""


class NamespaceInformer:
    """A NamespaceSource over kube-apiserver's namespaces (see the module docstring)."""

    def __init__(self, connection: KubeConnection, *, observer: ClusterObserver | None = None,
                 resync_seconds: float = DEFAULT_RESYNC_SECONDS, logger: Any = None) -> None:
        self._connection = connection
        self._observer = observer or NoObserver()
        self._resync_seconds = resync_seconds
        self._log = logger
        self._items: dict[str, NamespaceInfo] = {}
        self._fetched: OrderedDict[str, NamespaceInfo] = OrderedDict()
        self._fetch_errors: dict[str, str] = {}
        self._fetch_failed_at: dict[str, float] = {}
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        self.synced = False
        #: Why the last list or watch failed, until one succeeds again.
        self.last_error: str | None = None
        self.synced_at: float | None = None
        self._resource_version = ""

    # -- what the request path reads -------------------------------------------------------------------

    def lookup(self, name: str) -> NamespaceInfo:
        found = self._items.get(name)
        if found is None:
            found = self._fetched.get(name)
        if found is not None:
            return found
        return NamespaceInfo(name, unavailable=self._why_unknown(name))

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

    async def fetch(self, name: str, timeout: float) -> None:
        """Make ``lookup(name)`` answer from kube-apiserver if the map lacks it (coalesced per name). A GET
        of the same namespace that failed less than FAILED_FETCH_REUSE seconds ago is not repeated: while
        kube-apiserver is unreachable, requests fail fast with its error instead of each waiting."""
        if self.knows(name) or timeout <= 0:
            return
        failed_at = self._fetch_failed_at.get(name)
        if failed_at is not None and time.monotonic() - failed_at < FAILED_FETCH_REUSE:
            return
        pending = self._in_flight.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._get(name, timeout))
            self._in_flight[name] = pending
            pending.add_done_callback(lambda _: self._in_flight.pop(name, None))
        await asyncio.wait([pending], timeout=timeout)

    async def _get(self, name: str, timeout: float) -> None:
        started = time.perf_counter()
        path = f"{NAMESPACES_PATH}/{urllib.parse.quote(name, safe='')}"
        try:
            document = await self._connection.request("GET", path, timeout=timeout)
            info = _info(document)
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
            self._fetched[name] = info
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
        """List and watch until cancelled; never raises for kube-apiserver's errors."""
        backoff = BACKOFF_INITIAL
        while True:
            try:
                await self._list()
                backoff = BACKOFF_INITIAL
                listed_at = time.monotonic()
                while time.monotonic() - listed_at < self._resync_seconds:
                    await self._watch(min(self._resync_seconds - (time.monotonic() - listed_at),
                                          random.uniform(*WATCH_SECONDS)))
            except _Expired:
                self._observer.watch_restart("namespaces", "expired")
                continue
            except (ClusterError, ValueError, TypeError, KeyError) as error:
                # ValueError and the rest: an answer of a shape no kube-apiserver sends; retried the same way.
                self.last_error = (error.message if isinstance(error, ClusterError)
                                   else f"{type(error).__name__}: {error}")
                self._observer.watch_restart("namespaces", "error")
                if self._log is not None:
                    self._log.warning("namespace watch failed; retrying", err=self.last_error,
                                      retry_seconds=round(backoff, 2))
                await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def list_once(self) -> None:
        """One complete list (the map as kube-apiserver has it now); ClusterError if it cannot be read."""
        try:
            await self._list()
        except _Expired:
            await self._list()

    async def _list(self) -> None:
        items: dict[str, NamespaceInfo] = {}
        token = ""
        while True:
            query = {"limit": str(LIST_PAGE_SIZE)}
            if token:
                query["continue"] = token
            started = time.perf_counter()
            try:
                page = await self._connection.request("GET", f"{NAMESPACES_PATH}?{urllib.parse.urlencode(query)}",
                                                      timeout=60.0)
            except ClusterError as error:
                self._observer.api_call("list", time.perf_counter() - started, True)
                if error.status == 410:
                    # The continue token expired: start the list again.
                    raise _Expired() from None
                raise
            self._observer.api_call("list", time.perf_counter() - started, False)
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise ClusterError(f"GET {NAMESPACES_PATH}: the answer is not a NamespaceList")
            for item in page["items"]:
                try:
                    info = _info(item)
                except NamespaceFileError as error:
                    raise ClusterError(f"GET {NAMESPACES_PATH}: {error}") from None
                items[info.name] = info
            metadata = page.get("metadata") or {}
            token = (metadata.get("continue") or "") if isinstance(metadata, dict) else ""
            if not token:
                self._resource_version = _resource_version(page)
                break
        self._items = items
        self._fetched.clear()
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
        try:
            async with self._connection.stream(f"{NAMESPACES_PATH}?{query}", timeout=seconds + 30) as events:
                async for event in events:
                    self._apply(event)
        except ClusterError as error:
            self._observer.api_call("watch", time.perf_counter() - started, True)
            if error.status == 410:
                raise _Expired() from None
            raise
        self._observer.api_call("watch", time.perf_counter() - started, False)
        self.last_error = None

    def _apply(self, event: Any) -> None:
        if not isinstance(event, dict):
            raise ClusterError("a namespace watch event is not an object")
        kind, document = event.get("type"), event.get("object")
        if kind == "ERROR":
            code = document.get("code") if isinstance(document, dict) else None
            if code == 410:
                raise _Expired()
            message = document.get("message") if isinstance(document, dict) else None
            raise ClusterError(f"namespace watch: {message or 'error event'}", status=code)
        version = _resource_version(document)
        if kind == "BOOKMARK":
            if version:
                self._resource_version = version
            return
        try:
            info = _info(document)
        except NamespaceFileError as error:
            raise ClusterError(f"namespace watch: {error}") from None
        if kind in ("ADDED", "MODIFIED"):
            self._items[info.name] = info
        elif kind == "DELETED":
            self._items.pop(info.name, None)
        else:
            raise ClusterError(f"namespace watch: unknown event type {kind!r}")
        self._fetched.pop(info.name, None)
        self._fetch_errors.pop(info.name, None)
        self._fetch_failed_at.pop(info.name, None)
        if version:
            self._resource_version = version
        self._observer.cache_state("namespaces", True, len(self._items))

