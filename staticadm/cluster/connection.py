"""kube-apiserver as a kubeconfig reaches it: base URL, TLS and credentials, kept current.

The kubeconfig is read by kubernetes_asyncio's loader, as kubectl reads it (current or named context,
CA and client certificate as files or data, token, tokenFile, exec credential plugins). What it yields
is re-read on a timer and after a 401, because credentials rotate underneath a long-running daemon:
projected service-account tokens are rewritten by the kubelet, exec credentials expire, client
certificates are renewed. Requests go through our own aiohttp session (the library's generated client
would build a model object per namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

#: How often credentials and TLS files are re-read even without a 401.
CREDENTIAL_REFRESH_SECONDS = 30.0


class ClusterError(Exception):
    """kube-apiserver could not be asked, or answered with an error; ``message`` says which."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


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

    def __init__(self, kubeconfig: Path, *, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._loader: Any = None
        self._credentials: Credentials | None = None
        self._signature: tuple[Any, ...] | None = None
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        # Certificate and key data in the kubeconfig become files here (private to this process).
        self._temp_dir = tempfile.TemporaryDirectory(prefix="staticadm-kubeconfig-")

    @property
    def server(self) -> str:
        return self._credentials.host if self._credentials is not None else ""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._temp_dir.cleanup()

    # -- credentials ---------------------------------------------------------------------------------

    def _files_signature(self, configuration: Any) -> tuple[Any, ...]:
        user = getattr(self._loader, "_user", None)
        token_file = None
        if user is not None and "tokenFile" in user:
            token_file = str(user["tokenFile"])
        return (_file_signature(str(self.kubeconfig)), _file_signature(token_file),
                _file_signature(configuration.ssl_ca_cert), _file_signature(configuration.cert_file),
                _file_signature(configuration.key_file))

    async def _load(self, *, fresh: bool) -> Credentials:
        # Imported here: the library brings ~35 MB of generated models, paid only with --kubeconfig.
        from kubernetes_asyncio.client import Configuration
        from kubernetes_asyncio.config import ConfigException, kube_config

        configuration = Configuration()
        try:
            if fresh or self._loader is None:
                if not self.kubeconfig.is_file():
                    raise KubeconfigError(f"kubeconfig {self.kubeconfig}: no such file")
                self._loader = kube_config._get_kube_config_loader_for_yaml_file(
                    str(self.kubeconfig), active_context=self.context, persist_config=False,
                    temp_file_path=self._temp_dir.name)
            await self._loader.load_and_set(configuration)
        except KubeconfigError:
            raise
        except (ConfigException, OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            self._loader = None
            raise KubeconfigError(f"kubeconfig {self.kubeconfig}: {error}") from error
        if not configuration.host:
            raise KubeconfigError(f"kubeconfig {self.kubeconfig}: the context's cluster has no server")
        context: ssl.SSLContext | bool
        if configuration.host.startswith("https"):
            try:
                context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
                if configuration.cert_file:
                    context.load_cert_chain(configuration.cert_file, configuration.key_file)
            except (OSError, ssl.SSLError) as error:
                raise KubeconfigError(f"kubeconfig {self.kubeconfig}: TLS files: {error}") from error
            if not configuration.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        else:
            context = False
        token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        self._signature = self._files_signature(configuration)
        self._loaded_at = time.monotonic()
        return Credentials(configuration.host, context, token)

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
            fresh = current is None or self._signature is None or \
                self._signature[0] != _file_signature(str(self.kubeconfig))
            self._credentials = await self._load(fresh=fresh)
            return self._credentials

    # -- requests ------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No session-wide timeout: each call brings its own (a watch lasts minutes, a GET a request's
            # remaining deadline).
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                                  json_serialize=lambda value: orjson.dumps(value).decode())
        return self._session

    def _headers(self, credentials: Credentials) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "staticadm"}
        if credentials.authorization:
            headers["Authorization"] = credentials.authorization
        return headers

    async def request(self, method: str, path: str, *, timeout: float, body: Any = None) -> Any:
        """One API call; the decoded JSON answer, or ClusterError naming the status and Status message."""
        for attempt in (0, 1):
            credentials = await self.credentials(force=attempt == 1)
            try:
                async with self._http().request(
                        method, credentials.host + path, ssl=credentials.ssl_context,
                        headers=self._headers(credentials),
                        data=orjson.dumps(body) if body is not None else None,
                        timeout=aiohttp.ClientTimeout(total=max(timeout, 0.001))) as response:
                    data = await response.read()
                    if response.status == 401 and attempt == 0:
                        continue
                    if response.status >= 400:
                        reason, message = _status_message(response.status, data)
                        raise ClusterError(f"{method} {path}: {message}", status=response.status, reason=reason)
                    return orjson.loads(data)
            except TimeoutError:
                raise ClusterError(f"{method} {path}: no answer from {credentials.host} within "
                                   f"{timeout:.3g} s") from None
            except (aiohttp.ClientError, OSError) as error:
                raise ClusterError(f"{method} {path}: {credentials.host} unreachable: {error}") from None
            except orjson.JSONDecodeError:
                raise ClusterError(f"{method} {path}: the answer is not JSON") from None
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, timeout: float) -> AsyncIterator[AsyncIterator[Any]]:
        """A watch: yields an iterator over the decoded events (one JSON object per line)."""
        for attempt in (0, 1):
            credentials = await self.credentials(force=attempt == 1)
            try:
                response = await self._http().get(
                    credentials.host + path, ssl=credentials.ssl_context, headers=self._headers(credentials),
                    timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10.0))
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                raise ClusterError(f"GET {path}: {credentials.host} unreachable: {error or 'timed out'}") from None
            try:
                if response.status == 401 and attempt == 0:
                    continue
                if response.status >= 400:
                    data = await response.read()
                    reason, message = _status_message(response.status, data)
                    raise ClusterError(f"GET {path}: {message}", status=response.status, reason=reason)
                yield _events(response, path)
                return
            finally:
                response.release()


#: A watch event (one object as JSON) larger than this ends the watch with an error: etcd stores objects of
#: at most 1.5 MiB, so nothing kube-apiserver sends comes near it.
MAX_EVENT_BYTES = 16 * 1024 * 1024


async def _events(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[Any]:
    """The watch stream's events, one JSON object per line; split here rather than with readline, whose
    line limit (128 KiB) a Namespace with large annotations exceeds."""
    pending = bytearray()
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
            if len(pending) > MAX_EVENT_BYTES:
                raise ClusterError(f"GET {path}: a watch event is larger than {MAX_EVENT_BYTES} bytes")
        if pending.strip():
            yield orjson.loads(bytes(pending))
    except orjson.JSONDecodeError:
        raise ClusterError(f"GET {path}: a watch event is not JSON") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise ClusterError(f"GET {path}: the watch broke: {error or 'timed out'}") from None
