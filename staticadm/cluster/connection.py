"""kube-apiserver as a kubeconfig reaches it: base URL, TLS and credentials, kept current.

The kubeconfig is read by kubernetes_asyncio's loader, as kubectl reads it (current or named context,
CA and client certificate as files or data, token, tokenFile, exec credential plugins). What it yields
is re-read on a timer and after a 401, because credentials rotate underneath a long-running daemon:
projected service-account tokens are rewritten by the kubelet, exec credentials expire, client
certificates are renewed. Requests go through our own aiohttp session (the library's generated client
would build a model object per namespace).

Certificate and key data held in the kubeconfig (``client-key-data``: kubeadm's kubeconfigs) never touch
a disk: they become memory-only files (``memfd_create``), which the TLS library opens by their
``/proc/self/fd`` path and which vanish with the process, however it ends. Nothing here needs a writable
``/tmp`` (the shipped static pod has none), and a killed worker leaves no copy of the key behind.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import os
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from staticadm.cluster.kubeconfig import describe, merged_configuration

#: How often credentials and TLS files are re-read even without a 401.
CREDENTIAL_REFRESH_SECONDS = 30.0


class ClusterError(Exception):
    """kube-apiserver could not be asked, or answered with an error; ``message`` says which."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "",
                 connection_refused: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        #: Nothing listened: a watch is tried again rather than relisting (client-go's isWatchErrorRetriable).
        self.connection_refused = connection_refused


class StreamBroken(ClusterError):
    """A watch stream ended in the middle (the connection broke or timed out), not by an answer."""


class KubeconfigError(ClusterError):
    """The kubeconfig cannot be used (missing, malformed, no such context, a credential plugin failed)."""


@dataclass(frozen=True, slots=True)
class Credentials:
    host: str
    ssl_context: ssl.SSLContext | bool
    #: The Authorization header value ("Bearer ...", "Basic ..."), or None with client certificates.
    authorization: str | None


def _status_message(status: int, body: bytes) -> tuple[str, str]:
    """A Kubernetes Status body's (reason, message), or the HTTP status when the body is not one."""
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
        document = orjson.loads(body)
        if isinstance(document, dict) and document.get("kind") == "Status":
            return str(document.get("reason") or ""), str(document.get("message") or "")
    return "", f"HTTP {status}"


#: Where a kubeconfig may carry certificate and key data inline: (list, entry field, name of the file field).
_DATA_FIELDS = (("clusters", "cluster", "certificate-authority"), ("users", "user", "client-certificate"),
                ("users", "user", "client-key"))


class MemoryFiles:
    """Contents as memory-only files (``memfd_create``), one per distinct content, named by a path any library
    can open while this process lives; nothing is written to a file system."""

    def __init__(self) -> None:
        self._files: dict[bytes, int] = {}

    def path(self, content: bytes) -> tuple[str, bytes]:
        """(a path that reads ``content``, its digest for :meth:`keep_only`)."""
        digest = hashlib.sha256(content).digest()
        descriptor = self._files.get(digest)
        if descriptor is None:
            descriptor = os.memfd_create("staticadm-kubeconfig", os.MFD_CLOEXEC)
            view = memoryview(content)
            while view:
                view = view[os.write(descriptor, view):]
            self._files[digest] = descriptor
        return f"/proc/self/fd/{descriptor}", digest

    def keep_only(self, digests: set[bytes]) -> None:
        """Closes the files of contents no longer used (a renewed key's predecessor)."""
        for digest in [digest for digest in self._files if digest not in digests]:
            os.close(self._files.pop(digest))

    def close(self) -> None:
        self.keep_only(set())


def _file_signature(path: str | None) -> tuple[str, int, int] | None:
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (path, stat.st_mtime_ns, stat.st_size)


class KubeConnection:
    """One kube-apiserver reached through ``kubeconfig`` (``context`` or the current one)."""

    def __init__(self, kubeconfig: Path | Sequence[Path], *, context: str | None = None) -> None:
        #: The files read together, in precedence order (``kubeconfig.kubeconfig_paths``); the first names them.
        self.kubeconfigs = (kubeconfig,) if isinstance(kubeconfig, Path) else tuple(kubeconfig)
        self.kubeconfig = self.kubeconfigs[0]
        self._described = describe(self.kubeconfigs)
        self.context = context
        self._loader: Any = None
        self._credentials: Credentials | None = None
        self._signature: tuple[Any, ...] | None = None
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        #: Bytes of answers being read right now (see MAX_ANSWER_BYTES_IN_FLIGHT).
        self._reading = 0
        self._memory_files = MemoryFiles()

    @property
    def server(self) -> str:
        return self._credentials.host if self._credentials is not None else ""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._memory_files.close()

    # -- credentials ---------------------------------------------------------------------------------

    def _files_signature(self, configuration: Any) -> tuple[Any, ...]:
        user = getattr(self._loader, "_user", None)
        token_file = None
        if user is not None and "tokenFile" in user:
            token_file = str(user["tokenFile"])
        return (self._kubeconfig_signature(), _file_signature(token_file),
                _file_signature(configuration.ssl_ca_cert), _file_signature(configuration.cert_file),
                _file_signature(configuration.key_file))

    def _kubeconfig_signature(self) -> tuple[Any, ...]:
        return tuple(_file_signature(str(path)) for path in self.kubeconfigs)

    async def _load(self, *, fresh: bool) -> Credentials:
        # Imported here: the library brings ~35 MB of generated models, paid only with --kubeconfig.
        from kubernetes_asyncio.client import Configuration
        from kubernetes_asyncio.config import ConfigException

        configuration = Configuration()
        try:
            if fresh or self._loader is None:
                if not any(path.is_file() for path in self.kubeconfigs):
                    raise KubeconfigError(f"kubeconfig {self._described}: no such file")
                self._loader = self._read_kubeconfig()
            await self._loader.load_and_set(configuration)
        except KubeconfigError:
            raise
        except (ConfigException, OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as error:
            self._loader = None
            raise KubeconfigError(f"kubeconfig {self._described}: {error}") from error
        if not configuration.host:
            raise KubeconfigError(f"kubeconfig {self._described}: the context's cluster has no server")
        context: ssl.SSLContext | bool
        if configuration.host.startswith("https"):
            try:
                context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
                if configuration.cert_file:
                    context.load_cert_chain(configuration.cert_file, configuration.key_file)
            except (OSError, ssl.SSLError) as error:
                raise KubeconfigError(f"kubeconfig {self._described}: TLS files: {error}") from error
            if not configuration.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        else:
            context = False
        token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        self._signature = self._files_signature(configuration)
        self._loaded_at = time.monotonic()
        return Credentials(configuration.host, context, token)

    def _read_kubeconfig(self) -> Any:
        """The library's loader over the kubeconfig, its certificate and key data made memory-only files."""
        from kubernetes_asyncio.config import kube_config

        existing = [path for path in self.kubeconfigs if path.is_file()]
        if not existing:
            raise KubeconfigError(f"kubeconfig {self._described}: no such file")
        merged = merged_configuration(existing)
        used: set[bytes] = set()
        for section, inner, key in _DATA_FIELDS:
            for entry in merged.value.get(section) or []:
                entry = getattr(entry, "value", entry)
                body = entry.get(inner) if isinstance(entry, dict) else None
                if not isinstance(body, dict) or not isinstance(data := body.get(f"{key}-data"), str) or not data:
                    continue
                try:
                    content = base64.standard_b64decode(data.encode())
                except (binascii.Error, ValueError) as error:
                    raise KubeconfigError(f"kubeconfig {self._described}: {section} {entry.get('name')!r}: "
                                          f"{key}-data is not base64: {error}") from None
                # The library reads data before a file name: the data is given as a file name instead.
                del body[f"{key}-data"]
                body[key], digest = self._memory_files.path(content)
                used.add(digest)
        self._memory_files.keep_only(used)
        return kube_config.KubeConfigLoader(config_dict=merged, active_context=self.context, config_base_path=None)

    async def credentials(self, *, force: bool = False) -> Credentials:
        """Current credentials; re-read when files changed, on the refresh timer, or when ``force``d
        (after a 401: the token may have rotated before its file's timestamp says so)."""
        async with self._lock:
            current = self._credentials
            stale = current is None or force or time.monotonic() - self._loaded_at > CREDENTIAL_REFRESH_SECONDS
            if not stale and self._signature is not None:
                return current  # type: ignore[return-value]
            if force and self._loader is not None:
                # An exec plugin's credential is cached until its expiry; a 401 says it is no good now.
                with contextlib.suppress(AttributeError):
                    del self._loader.exec_plugin_expiry
            fresh = current is None or self._signature is None or self._signature[0] != self._kubeconfig_signature()
            self._credentials = await self._load(fresh=fresh)
            return self._credentials

    # -- requests ------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No session-wide timeout: each call brings its own deadline (a watch lasts minutes, a GET ends
            # at its request's deadline). Progress tracing tells a call that could not connect from one that
            # got no answer.
            tracing = aiohttp.TraceConfig()
            tracing.on_connection_create_end.append(_connected)
            tracing.on_connection_reuseconn.append(_connected)
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                                  trace_configs=[tracing],
                                                  json_serialize=lambda value: orjson.dumps(value).decode())
        return self._session

    def _headers(self, credentials: Credentials, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "staticadm"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if credentials.authorization:
            headers["Authorization"] = credentials.authorization
        return headers

    async def request(self, method: str, path: str, *, deadline: float | Deadline, limit: int,
                      body: bytes | None = None, progress: CallProgress | None = None,
                      content_type: str = "application/json") -> Any:
        """One API call ending by ``deadline`` (the event loop's clock); its decoded JSON answer, or ClusterError
        naming what happened (no connection, no answer, an answer cut short or over ``limit`` bytes, a status).
        ``progress`` shows how far it got to a caller that stops waiting for it."""
        data = await self.request_bytes(method, path, deadline=deadline, limit=limit, body=body, progress=progress,
                                        content_type=content_type)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ClusterError(f"{method} {path}: the answer is not JSON") from None

    async def request_bytes(self, method: str, path: str, *, deadline: float | Deadline, limit: int,
                            body: bytes | None = None, progress: CallProgress | None = None,
                            content_type: str = "application/json") -> bytes:
        """:meth:`request` without decoding: the answer's bytes (``body`` is sent as it is, as ``content_type``:
        JSON, or a server-side apply patch)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
        progress = progress or CallProgress()
        host = self.server or "kube-apiserver"
        try:
            async with deadline.applied():
                for attempt in (0, 1):
                    progress.stage = "credentials"
                    credentials = await self.credentials(force=attempt == 1)
                    host = credentials.host
                    progress.stage = "connect"
                    async with self._http().request(
                            method, credentials.host + path, ssl=credentials.ssl_context,
                            headers=self._headers(credentials, content_type if body is not None else None),
                            data=body,
                            max_redirects=MAX_REDIRECTS, trace_request_ctx=progress) as response:
                        progress.stage = "body"
                        if response.status == 401 and attempt == 0:
                            continue
                        if response.status >= 400:
                            reason, message = _status_message(response.status, await self._read(
                                response, min(limit, MAX_STATUS_BYTES), progress, method, path))
                            raise ClusterError(f"{method} {path}: {message}", status=response.status, reason=reason)
                        return await self._read(response, limit, progress, method, path)
        except TimeoutError:
            raise ClusterError(f"{method} {path}: {progress.timed_out(host, deadline.when - started)}") from None
        except aiohttp.TooManyRedirects as error:
            location = error.history[-1].headers.get("Location", "") if error.history else ""
            raise ClusterError(f"{method} {path}: {host} redirected more than {MAX_REDIRECTS} times (the last "
                               f"time to {location or 'an unnamed location'})") from None
        except aiohttp.ClientConnectorError as error:
            raise ClusterError(f"{method} {path}: {host} unreachable: {_describe(error)}") from None
        except (aiohttp.ClientError, OSError) as error:
            raise ClusterError(f"{method} {path}: the connection to {host} failed "
                               f"{progress.during()}: {_describe(error)}") from None
        raise AssertionError("unreachable")

    async def _read(self, response: aiohttp.ClientResponse, limit: int, progress: CallProgress, method: str,
                    path: str) -> bytes:
        """The answer's body, refused past ``limit`` bytes (and past what all answers being read at once may hold)
        before more of it is read."""
        declared = response.content_length
        if declared is not None and declared > limit:
            raise ClusterError(f"{method} {path}: the answer ({declared} bytes) is larger than the {limit} bytes "
                               "allowed for it")
        chunks: list[bytes] = []
        try:
            async for chunk in response.content.iter_chunked(65536):
                progress.received += len(chunk)
                if progress.received > limit:
                    raise ClusterError(f"{method} {path}: the answer is larger than the {limit} bytes allowed for it")
                if self._reading + len(chunk) > MAX_ANSWER_BYTES_IN_FLIGHT:
                    raise ClusterError(f"{method} {path}: answers from kube-apiserver being read at once would hold "
                                       f"more than {MAX_ANSWER_BYTES_IN_FLIGHT} bytes")
                self._reading += len(chunk)
                progress.held += len(chunk)
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            self._reading -= progress.held
            progress.held = 0

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, timeout: float) -> AsyncIterator[AsyncIterator[Any]]:
        """A watch: yields an iterator over the decoded events (one JSON object per line)."""
        for attempt in (0, 1):
            credentials = await self.credentials(force=attempt == 1)
            try:
                response = await self._http().get(
                    credentials.host + path, ssl=credentials.ssl_context, headers=self._headers(credentials),
                    max_redirects=MAX_REDIRECTS, timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10.0))
            except aiohttp.TooManyRedirects:
                raise ClusterError(f"GET {path}: {credentials.host} redirected more than {MAX_REDIRECTS} "
                                   "times") from None
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                raise ClusterError(f"GET {path}: {credentials.host} unreachable: {_describe(error)}",
                                   connection_refused=isinstance(error, ConnectionRefusedError) or isinstance(
                                       getattr(error, "os_error", None), ConnectionRefusedError)) from None
            try:
                if response.status == 401 and attempt == 0:
                    continue
                if response.status >= 400:
                    data = await response.content.read(MAX_STATUS_BYTES)
                    reason, message = _status_message(response.status, data)
                    raise ClusterError(f"GET {path}: {message}", status=response.status, reason=reason)
                yield _events(response, path)
                return
            finally:
                response.release()


#: How many redirects a call follows, as Go's http.Client.
MAX_REDIRECTS = 10
#: An error answer is a Status: what a Status can say fits here.
MAX_STATUS_BYTES = 64 * 1024
#: Every answer being read at once, together (a watch's current event not included): kube-apiserver answers
#: objects of at most a few MiB; this is what a misbehaving one can make each process hold.
MAX_ANSWER_BYTES_IN_FLIGHT = 128 * 1024 * 1024


class Deadline:
    """When a call must end (the event loop's clock). Calls that requests share end at the latest of their
    deadlines: each request that joins one :meth:`extend`s it."""

    __slots__ = ("_timeout", "when")

    def __init__(self, when: float) -> None:
        self.when = when
        self._timeout: asyncio.Timeout | None = None

    def extend(self, when: float) -> None:
        if when > self.when:
            self.when = when
            if self._timeout is not None:
                self._timeout.reschedule(when)

    @contextlib.asynccontextmanager
    async def applied(self) -> AsyncIterator[None]:
        """TimeoutError out of the block when the deadline passes (to the exact tick: aiohttp's own timeouts round
        anything over 5 s up to a whole second)."""
        async with asyncio.timeout_at(self.when) as timeout:
            self._timeout = timeout
            try:
                yield
            finally:
                self._timeout = None


class CallProgress:
    """How far one call got, for naming what happened when it did not end well."""

    __slots__ = ("held", "received", "stage")

    def __init__(self) -> None:
        self.stage = "credentials"
        self.received = 0
        self.held = 0

    def during(self) -> str:
        return {"credentials": "before connecting", "connect": "while connecting",
                "answer": "before it answered", "body": f"after {self.received} bytes of its answer"}[self.stage]

    def timed_out(self, host: str, budget: float) -> str:
        within = f"within {max(budget, 0):.3g} s"
        if self.stage == "credentials":
            return f"the kubeconfig's credentials were not ready {within}"
        if self.stage == "connect":
            return f"could not connect to {host} {within}"
        if self.stage == "answer":
            return f"no answer from {host} {within}"
        return f"the answer from {host} did not arrive in full {within} ({self.received} bytes received)"


async def _connected(_session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
    progress = context.trace_request_ctx
    if isinstance(progress, CallProgress) and progress.stage == "connect":
        progress.stage = "answer"


def _describe(error: BaseException) -> str:
    """What went wrong, in words: aiohttp's own text for a failed connection prints its SSL context object
    (``ssl:<ssl.SSLContext object at 0x...>``), which says nothing to anyone."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        cause: BaseException = error.certificate_error
        detail = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or cause
        return f"cannot connect to {error.host}:{error.port}: the server's certificate is not trusted: {detail}"
    if isinstance(error, aiohttp.ClientConnectorError):
        os_error = error.os_error
        # "Connect call failed ('127.0.0.1', 6443)" is asyncio's text for ECONNREFUSED: name the errno instead.
        reason = (os.strerror(os_error.errno) if os_error.errno else os_error.strerror) or str(os_error) \
            or type(os_error).__name__
        return f"cannot connect to {error.host}:{error.port}: {reason}"
    return str(error) or type(error).__name__


#: One object as JSON (a watch event, a GET's answer) larger than this is an error: etcd stores objects of at
#: most 1.5 MiB, so nothing kube-apiserver sends comes near it.
MAX_OBJECT_BYTES = 16 * 1024 * 1024
#: A watch stream being read gives the event loop a turn after this long without one (a stream with data
#: always waiting would otherwise never let it go).
WATCH_SLICE_SECONDS = 0.005


async def _events(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[Any]:
    """The watch stream's events, one JSON object per line; split here rather than with readline, whose
    line limit (128 KiB) a Namespace with large annotations exceeds."""
    pending = bytearray()
    given = time.perf_counter()
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                line = bytes(pending[start:end])
                start = end + 1
                if line.strip():
                    yield orjson.loads(line)
            del pending[:start]
            if len(pending) > MAX_OBJECT_BYTES:
                raise ClusterError(f"GET {path}: a watch event is larger than {MAX_OBJECT_BYTES} bytes")
            if time.perf_counter() - given > WATCH_SLICE_SECONDS:
                await asyncio.sleep(0)
                given = time.perf_counter()
        if pending.strip():
            yield orjson.loads(bytes(pending))
    except orjson.JSONDecodeError:
        raise ClusterError(f"GET {path}: a watch event is not JSON") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise StreamBroken(f"GET {path}: the watch broke: {_describe(error)}") from None
