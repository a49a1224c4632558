"""An in-tree stand-in for kube-apiserver: the namespaces API, API discovery, paged lists of any resource,
server-side apply of objects of a resource (custom resources checked against their CRD's schema) and
SubjectAccessReview on its wire protocol.

HTTPS with bearer tokens or client certificates (401 Status otherwise), paged JSON lists carrying a
resourceVersion (``limit``/``continue``, 410 Expired for a continue token older than the history, list
items without apiVersion and kind), discovery documents (``/api``, ``/apis``, APIResourceLists with
subresources), chunked watch streams of ADDED/MODIFIED/DELETED/BOOKMARK/ERROR events, 410 Expired for
a resourceVersion older than its history, 404 Status for a missing namespace. It runs in a thread with
its own event loop so the tests drive it synchronously while daemons talk to it as to kube-apiserver.

It can also be hostile (:class:`Hostility`), as a broken, overloaded or compromised kube-apiserver (or
something in between) would be: calls that never answer, answers of any size, a list that ignores
``limit``, redirect loops, watches that fail at once or flood bookmarks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from tests.pki import make_ca, make_leaf, write_ca


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


#: The calls the stand-in serves, as :class:`Hostility` names them.
Operation = str  # "list" (of namespaces), "watch", "get", "sar", "objects" (lists of other resources)


@dataclass
class Hostility:
    """How the stand-in misbehaves; every field off by default. Tests change it while the stand-in runs."""

    #: Calls accepted and never answered (the connection stays open, no headers are sent).
    hang: set[Operation] = field(default_factory=set)
    #: Calls whose headers are sent at once but whose body never completes.
    hang_body: set[Operation] = field(default_factory=set)
    #: Bytes of padding added to each answer of these calls (an unknown top-level field, as a newer
    #: kube-apiserver could send, which decoders ignore).
    padding: dict[Operation, int] = field(default_factory=dict)
    #: Lists answer every namespace in one page whatever ``limit`` asks (as a proxy or an old server might).
    ignore_limit: bool = False
    #: Lists of these calls answer every page with the same continue token (a list that would never end).
    repeat_continue: set[Operation] = field(default_factory=set)
    #: Calls answered with a redirect to themselves, forever.
    redirect_loop: set[Operation] = field(default_factory=set)
    #: Watches: "fail" ends each at once with a 500 Status; "bookmarks" streams BOOKMARK events as fast as
    #: the connection takes them and never ends.
    watch: str = "normal"


@dataclass
class _Watch:
    queue: asyncio.Queue[dict[str, Any] | None]
    bookmarks: bool


@dataclass
class FakeApiServer:
    directory: Path
    port: int
    token: str = "admin-token"
    #: Client certificates signed by this stand-in's client CA are accepted too.
    accept_client_certificates: bool = True
    #: Answers a SubjectAccessReview's spec with its status; None: 404 for the API.
    authorize: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: Seconds a SubjectAccessReview takes to answer (for timeouts).
    sar_delay: float = 0.0
    requests: list[tuple[str, str]] = field(default_factory=list)
    sar_requests: list[dict[str, Any]] = field(default_factory=list)
    #: Called with each list request's query before it is answered (a test compacts the history there).
    before_list: Callable[[dict[str, str]], None] | None = None
    hostility: Hostility = field(default_factory=Hostility)
    #: Namespace lists answered (pages of a list each count), for relist rates.
    list_pages: int = 0
    #: Each server-side apply: (path, query, Content-Type), in order.
    applies: list[tuple[str, dict[str, str], str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ca = make_ca("fake-kube-apiserver")
        self.ca_file = write_ca(self._ca, self.directory / "apiserver-ca.crt")
        self._cert, self._key = make_leaf(self._ca, server=True, directory=self.directory, stem="apiserver")
        self.client_cert, self.client_key = make_leaf(self._ca, server=False, directory=self.directory,
                                                      stem="staticadm-client")
        self._lock = threading.Lock()
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._version = 100
        #: Watches from an older resourceVersion than this get 410 Expired.
        self._oldest = 100
        self._watches: list[_Watch] = []
        #: (group, version, resource) -> (kind, namespaced), in the order added; objects by (namespace, name).
        self._resources: dict[tuple[str, str, str], tuple[str, bool]] = {}
        #: The openAPIV3Schema (as JSON Schema) of a custom resource, checked on every apply.
        self._schemas: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._objects: dict[tuple[str, str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self._listing: tuple[int, list[dict[str, Any]]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        #: Set when the stand-in stops: hung answers end then (made on its own loop, in _serve).
        self._closing: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- kubeconfigs --------------------------------------------------------------------------------

    def kubeconfig(self, path: Path, *, token: str | None = None, token_file: Path | None = None,
                   client_certificate: bool = False, exec_token: str | None = None, embed: bool = False) -> Path:
        """A kubeconfig for the stand-in; ``embed`` puts the CA and client certificate and key in it as data
        (as kubeadm's do) instead of naming their files."""
        user: dict[str, Any] = {}
        if exec_token is not None:
            # A client-go credential plugin: prints an ExecCredential carrying the token.
            credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                          "status": {"token": exec_token}}
            user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                             "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
                             "interactiveMode": "Never"}}
        elif client_certificate and embed:
            user = {"client-certificate-data": base64.b64encode(Path(self.client_cert).read_bytes()).decode(),
                    "client-key-data": base64.b64encode(Path(self.client_key).read_bytes()).decode()}
        elif client_certificate:
            user = {"client-certificate": str(self.client_cert), "client-key": str(self.client_key)}
        elif token_file is not None:
            user = {"tokenFile": str(token_file)}
        else:
            user = {"token": token if token is not None else self.token}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "staticadm",
            "clusters": [{"name": "kubernetes", "cluster": {"server": self.url, **(
                {"certificate-authority-data": base64.b64encode(Path(self.ca_file).read_bytes()).decode()} if embed
                else {"certificate-authority": str(self.ca_file)})}}],
            "users": [{"name": "staticadm", "user": user}],
            "contexts": [{"name": "staticadm", "context": {"cluster": "kubernetes", "user": "staticadm"}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- the namespaces the tests change ------------------------------------------------------------

    def set_namespace(self, name: str, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None) -> None:
        with self._lock:
            existing = self._namespaces.get(name)
            self._version += 1
            metadata: dict[str, Any] = {
                "name": name, "uid": existing["metadata"]["uid"] if existing else str(uuid.uuid4()),
                "resourceVersion": str(self._version),
                "creationTimestamp": existing["metadata"]["creationTimestamp"] if existing
                else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "labels": {**(labels or {}), "kubernetes.io/metadata.name": name},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1"}],
            }
            if annotations:
                metadata["annotations"] = annotations
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata,
                         "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            self._namespaces[name] = namespace
            self._record("MODIFIED" if existing else "ADDED", namespace)

    def add_namespaces(self, names: list[str], labels: dict[str, str] | None = None) -> None:
        """Many namespaces at once, with one resourceVersion (as a bulk import): no watch events, for lists."""
        with self._lock:
            self._version += 1
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for name in names:
                self._namespaces[name] = {
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": str(self._version),
                                 "creationTimestamp": created,
                                 "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            # Watches from before this cannot be brought up to date: they must list again.
            self._oldest = self._version
            self._history.clear()

    # -- other resources --------------------------------------------------------------------------

    def add_resource(self, group: str, version: str, resource: str, kind: str, *, namespaced: bool = True,
                     schema: dict[str, Any] | None = None) -> None:
        """A resource served (and discovered) in a group version; the first version added is preferred. With
        ``schema`` (a CRD's openAPIV3Schema as JSON Schema) an applied object must fit it, as kube-apiserver
        validates a custom resource (422 Invalid, naming each field, otherwise)."""
        with self._lock:
            self._resources[(group, version, resource)] = (kind, namespaced)
            self._objects.setdefault((group, version, resource), {})
            if schema is not None:
                self._schemas[(group, version, resource)] = schema

    def stored(self, group: str, version: str, resource: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The objects of a resource as stored, by (namespace, name)."""
        with self._lock:
            objects = self._objects[(group, version, resource)]
            return {key: json.loads(json.dumps(value)) for key, value in objects.items()}

    def set_objects(self, group: str, version: str, resource: str, objects: list[dict[str, Any]]) -> None:
        """Stores the objects as kube-apiserver would (uid, resourceVersion, creationTimestamp added)."""
        with self._lock:
            stored = self._objects[(group, version, resource)]
            for obj in objects:
                self._version += 1
                metadata = {**obj["metadata"], "uid": obj["metadata"].get("uid") or str(uuid.uuid4()),
                            "resourceVersion": str(self._version), "creationTimestamp": "2026-05-01T10:00:00Z"}
                item = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind")}
                stored[(metadata.get("namespace", ""), metadata["name"])] = {**item, "metadata": metadata}

    def delete_namespace(self, name: str) -> None:
        with self._lock:
            namespace = self._namespaces.pop(name)
            self._version += 1
            namespace = {**namespace, "metadata": {**namespace["metadata"], "resourceVersion": str(self._version)}}
            self._record("DELETED", namespace)

    def expire_watches(self) -> None:
        """Compacts the history: every open watch gets ERROR 410 Expired, as after an etcd compaction."""
        with self._lock:
            self._oldest = self._version
            self._history.clear()
            watches, self._watches = self._watches, []
        for watch in watches:
            self._send(watch, {"type": "ERROR", "object": status(410, "Expired", "too old resource version")})
            self._send(watch, None)

    def _record(self, kind: str, namespace: dict[str, Any]) -> None:
        self._history.append((self._version, kind, namespace))
        for watch in self._watches:
            self._send(watch, {"type": kind, "object": namespace})

    def _send(self, watch: _Watch, event: dict[str, Any] | None) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(watch.queue.put_nowait, event)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            future.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None
        self._thread = None

    async def _serve(self) -> None:
        self._closing = asyncio.Event()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self._cert, self._key)
        if self.accept_client_certificates:
            context.load_verify_locations(cafile=str(self.ca_file))
            context.verify_mode = ssl.CERT_OPTIONAL
        app = web.Application()
        app.router.add_get("/api/v1/namespaces", self._namespaces_collection)
        app.router.add_get("/api/v1/namespaces/{name}", self._namespace)
        app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", self._subject_access_review)
        app.router.add_get("/api", self._api_versions)
        app.router.add_get("/apis", self._api_groups)
        app.router.add_get("/api/{version}", self._api_resources)
        app.router.add_get("/apis/{group}/{version}", self._api_resources)
        app.router.add_get("/api/{version}/{resource}", self._list)
        app.router.add_get("/apis/{group}/{version}/{resource}", self._list)
        app.router.add_patch("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}", self._apply)
        app.router.add_patch("/apis/{group}/{version}/{resource}/{name}", self._apply)
        app.router.add_delete("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}", self._delete)
        app.router.add_delete("/apis/{group}/{version}/{resource}/{name}", self._delete)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def _shutdown(self) -> None:
        with self._lock:
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.queue.put_nowait(None)
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- hostility ----------------------------------------------------------------------------------

    async def _misbehave(self, request: web.Request, operation: Operation) -> web.StreamResponse | None:
        """The hostile answer to ``operation`` if one is configured, else None (answer normally)."""
        hostility = self.hostility
        assert self._closing is not None
        if operation in hostility.hang:
            # Until the stand-in stops: the client must give up by itself.
            await self._closing.wait()
            return self._json(status(503, "ServiceUnavailable", "stopping"), 503)
        if operation in hostility.redirect_loop:
            # 307: the method and body are sent again, as for every hop of a real loop.
            raise web.HTTPTemporaryRedirect(location=request.path_qs)
        if operation in hostility.hang_body:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.content_length = 1 << 20
            await response.prepare(request)
            await response.write(b'{"kind":')
            await self._closing.wait()
            return response
        return None

    def _answer(self, operation: Operation, body: dict[str, Any], code: int = 200) -> web.Response:
        padding = self.hostility.padding.get(operation, 0)
        if padding:
            body = {**body, "padding": "x" * padding}
        return self._json(body, code)

    # -- handlers -----------------------------------------------------------------------------------

    def _authenticated(self, request: web.Request) -> bool:
        if request.headers.get("Authorization") == f"Bearer {self.token}":
            return True
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        return bool(peer) and self.accept_client_certificates

    def _json(self, body: Any, code: int = 200) -> web.Response:
        return web.Response(body=orjson.dumps(body), status=code, content_type="application/json")

    async def _namespaces_collection(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        if request.query.get("watch") in ("1", "true"):
            return await self._watch(request)
        self.list_pages += 1
        hostile = await self._misbehave(request, "list")
        if hostile is not None:
            return hostile
        with self._lock:
            return self._page(request, "NamespaceList", "v1", self._listed(), operation="list")

    def _listed(self) -> list[dict[str, Any]]:
        """Every namespace as a list item, in name order (kept per resourceVersion: a list of many pages
        reads it once)."""
        if self._listing is None or self._listing[0] != self._version:
            self._listing = (self._version, [self._without_type(ns) for _, ns in sorted(self._namespaces.items())])
        return self._listing[1]

    def _page(self, request: web.Request, kind: str, api_version: str, items: list[dict[str, Any]], *,
              operation: Operation = "objects") -> web.Response:
        """One page of a list as kube-apiserver pages it (``limit``/``continue``; 410 Expired for a continue
        token older than the history), unless ``hostility.ignore_limit``. Called with the lock held."""
        limit = 0 if self.hostility.ignore_limit else int(request.query.get("limit") or 0)
        token = request.query.get("continue")
        if token:
            version, offset = (int(part) for part in token.split(":"))
            if version < self._oldest:
                return self._json(status(410, "Expired", "The provided continue parameter is too old to display a "
                                                         "consistent list result."), 410)
        else:
            version, offset = self._version, 0
        page = items[offset:offset + limit] if limit else items[offset:]
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        if limit and operation in self.hostility.repeat_continue:
            metadata["continue"] = f"{version}:{limit}"
        elif limit and offset + limit < len(items):
            metadata["continue"] = f"{version}:{offset + limit}"
            metadata["remainingItemCount"] = len(items) - offset - limit
        return self._answer(operation, {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page})

    @staticmethod
    def _without_type(namespace: dict[str, Any]) -> dict[str, Any]:
        # kube-apiserver's list items carry neither apiVersion nor kind.
        return {key: value for key, value in namespace.items() if key not in ("apiVersion", "kind")}

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        hostile = await self._misbehave(request, "watch")
        if hostile is not None:
            return hostile
        if self.hostility.watch == "fail":
            return self._json(status(500, "InternalError", "etcd is unavailable"), 500)
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        watch = _Watch(asyncio.Queue(), request.query.get("allowWatchBookmarks") == "true")
        with self._lock:
            expired = since < self._oldest
            if not expired:
                for version, kind, namespace in self._history:
                    if version > since:
                        watch.queue.put_nowait({"type": kind, "object": namespace})
                self._watches.append(watch)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if expired:
            await response.write(orjson.dumps({"type": "ERROR", "object": status(
                410, "Expired", f"too old resource version: {since} ({self._oldest})")}) + b"\n")
            return response
        if self.hostility.watch == "bookmarks":
            return await self._flood_bookmarks(request, response, watch)
        ends = time.monotonic() + timeout
        try:
            while time.monotonic() < ends:
                try:
                    event = await asyncio.wait_for(watch.queue.get(), timeout=min(1.0, ends - time.monotonic()))
                except TimeoutError:
                    if watch.bookmarks:
                        event = {"type": "BOOKMARK", "object": {"kind": "Namespace", "apiVersion": "v1",
                                                                "metadata": {"resourceVersion": str(self._version)}}}
                    else:
                        continue
                if event is None:
                    break
                await response.write(orjson.dumps(event) + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._forget(watch)
        return response

    async def _flood_bookmarks(self, request: web.Request, response: web.StreamResponse,
                               watch: _Watch) -> web.StreamResponse:
        """BOOKMARK events, 64 KiB of them per write, until the client goes away or the stand-in stops."""
        bookmark = orjson.dumps({"type": "BOOKMARK", "object": {"kind": "Namespace", "apiVersion": "v1",
                                                                "metadata": {"resourceVersion": str(self._version)}}})
        block = (bookmark + b"\n") * (65536 // (len(bookmark) + 1))
        try:
            while self._closing is not None and not self._closing.is_set():
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                await response.write(block)
                await asyncio.sleep(0)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._forget(watch)
        return response

    def _forget(self, watch: _Watch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    async def _namespace(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        hostile = await self._misbehave(request, "get")
        if hostile is not None:
            return hostile
        name = request.match_info["name"]
        with self._lock:
            namespace = self._namespaces.get(name)
        if namespace is None:
            return self._json(status(404, "NotFound", f'namespaces "{name}" not found'), 404)
        return self._answer("get", namespace)

    # -- discovery and lists of other resources -------------------------------------------------------

    async def _api_versions(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        return self._json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]})

    async def _api_groups(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        groups: dict[str, list[str]] = {}
        for group, version, _ in self._resources:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        return self._json({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": group, "versions": [{"groupVersion": f"{group}/{version}", "version": version}
                                         for version in versions],
             "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}
            for group, versions in groups.items()]})

    async def _api_resources(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        group, version = request.match_info.get("group", ""), request.match_info["version"]
        entries = [{"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}] \
            if (group, version) == ("", "v1") else []
        for (resource_group, resource_version, resource), (kind, namespaced) in self._resources.items():
            if (resource_group, resource_version) != (group, version):
                continue
            verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            entries.append({"name": resource, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                            "verbs": verbs})
            entries.append({"name": f"{resource}/status", "singularName": "", "namespaced": namespaced,
                            "kind": kind, "verbs": ["get", "patch", "update"]})
        if not entries:
            return self._json(status(404, "NotFound", "the server could not find the requested resource"), 404)
        return self._json({"kind": "APIResourceList", "apiVersion": "v1",
                           "groupVersion": f"{group}/{version}" if group else version, "resources": entries})

    async def _list(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        key = (request.match_info.get("group", ""), request.match_info["version"], request.match_info["resource"])
        if key not in self._resources:
            return self._json(status(404, "NotFound", "the server could not find the requested resource"), 404)
        if self.before_list is not None:
            self.before_list(dict(request.query))
        kind = self._resources[key][0]
        # Equality requirements only (key=value,...): what the clients under test send.
        wanted = dict(part.split("=", 1) for part in request.query.get("labelSelector", "").split(",") if part)
        with self._lock:
            return self._page(request, f"{kind}List", "/".join(part for part in key[:2] if part),
                              [item for _, item in sorted(self._objects[key].items())
                               if all((item["metadata"].get("labels") or {}).get(label) == value
                                      for label, value in wanted.items())])

    async def _subject_access_review(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("POST", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        if self.authorize is None:
            return self._json(status(404, "NotFound", "the server could not find the requested resource"), 404)
        if request.content_type not in ("application/json", "application/yaml"):
            # As kube-apiserver: a body is decoded by its declared media type, and an unknown one is refused.
            return self._json(status(415, "UnsupportedMediaType",
                                     f"the body of the request was in an unknown format - accepted media types "
                                     f"include: application/json, application/yaml (not {request.content_type})"),
                              415)
        review = await request.json()
        self.sar_requests.append(review)
        hostile = await self._misbehave(request, "sar")
        if hostile is not None:
            return hostile
        if self.sar_delay:
            # The delay, or less if the stand-in stops meanwhile: its clean-up waits for every handler, and nobody
            # waits for this answer any more (a test's teardown waited out the rest of a 5 s delay).
            assert self._closing is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.sar_delay)
        return self._answer("sar", {**review, "status": self.authorize(review.get("spec") or {})}, 201)

    # -- server-side apply --------------------------------------------------------------------------

    async def _apply(self, request: web.Request) -> web.StreamResponse:
        """A server-side apply as kube-apiserver answers it: 415 for another patch type, 400 without a field
        manager, 404 for a resource it does not serve (a CRD not installed), 400 for a body whose kind,
        name or namespace is not the URL's, 422 Invalid for an object its CRD's schema refuses; else the object
        is created (201) or replaced (200) with the manager recorded in managedFields. Only one manager ever
        applies here, so a force apply owns every field it sends and the stored object is what it sent."""
        self.requests.append(("PATCH", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        self.applies.append((request.path, dict(request.query), request.content_type))
        if request.content_type != "application/apply-patch+yaml":
            return self._json(status(415, "UnsupportedMediaType",
                                     f"the body of the request was in an unknown format - accepted media types "
                                     f"include: application/apply-patch+yaml (not {request.content_type})"), 415)
        manager = request.query.get("fieldManager", "")
        if not manager:
            return self._json(status(400, "BadRequest", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                                                        "Required value: is required for apply patch"), 400)
        group, version = request.match_info["group"], request.match_info["version"]
        resource, name = request.match_info["resource"], request.match_info["name"]
        namespace = request.match_info.get("namespace", "")
        key = (group, version, resource)
        if key not in self._resources or self._resources[key][1] != bool(namespace):
            return self._json(status(404, "NotFound", "the server could not find the requested resource"), 404)
        kind = self._resources[key][0]
        try:
            body = yaml.safe_load(await request.text())
        except yaml.YAMLError as error:
            return self._json(status(400, "BadRequest", f"error decoding YAML: {error}"), 400)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(metadata, dict):
            return self._json(status(400, "BadRequest", "the body is not an object with metadata"), 400)
        mismatches = [f"{what}: {got!r} is not {want!r}" for what, got, want in (
            ("apiVersion", body.get("apiVersion"), f"{group}/{version}"), ("kind", body.get("kind"), kind),
            ("metadata.name", metadata.get("name"), name), ("metadata.namespace", metadata.get("namespace") or "",
                                                            namespace)) if got != want]
        if mismatches:
            return self._json(status(400, "BadRequest", "; ".join(mismatches)), 400)
        schema = self._schemas.get(key)
        if schema is not None:
            import jsonschema

            errors = ["/".join(map(str, error.absolute_path)) + ": " + error.message
                      for error in jsonschema.Draft7Validator(schema).iter_errors(body)]
            if errors:
                return self._json(status(422, "Invalid", f'{kind}.{group} "{name}" is invalid: ' + ", ".join(errors)),
                                  422)
        with self._lock:
            stored = self._objects[key]
            existing = stored.get((namespace, name))
            self._version += 1
            kept = existing["metadata"] if existing else {"uid": str(uuid.uuid4()),
                                                          "creationTimestamp": "2026-05-01T10:00:00Z"}
            written = {**{k: v for k, v in body.items() if k not in ("apiVersion", "kind")},
                       "metadata": {**metadata, "uid": kept["uid"], "creationTimestamp": kept["creationTimestamp"],
                                    "resourceVersion": str(self._version),
                                    "managedFields": [{"manager": manager, "operation": "Apply",
                                                       "apiVersion": f"{group}/{version}"}]}}
            stored[(namespace, name)] = written
        return self._json({"apiVersion": f"{group}/{version}", "kind": kind, **written}, 200 if existing else 201)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("DELETE", request.path_qs))
        if not self._authenticated(request):
            return self._json(status(401, "Unauthorized", "Unauthorized"), 401)
        key = (request.match_info["group"], request.match_info["version"], request.match_info["resource"])
        name, namespace = request.match_info["name"], request.match_info.get("namespace", "")
        with self._lock:
            removed = self._objects.get(key, {}).pop((namespace, name), None)
            if removed is not None:
                self._version += 1
        if removed is None:
            return self._json(status(404, "NotFound", f'{key[2]}.{key[0]} "{name}" not found'), 404)
        return self._json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                           "details": {"name": name, "group": key[0], "kind": key[2],
                                       "uid": removed["metadata"]["uid"]}})
