"""The existing objects of a cluster, read-only: API discovery and paged lists, as kubectl reads them.

Discovery (``/api``, ``/apis`` and each group version's APIResourceList) says which resources exist, in
which versions, namespaced or not, and whether they can be listed. A list is read in pages
(``limit``/``continue``) so a cluster's 100,000 objects never travel in one answer; when kube-apiserver
has compacted the history a continue token points into (410 Expired), the list starts again without
pages, as client-go's pager falls back to a full list, and the objects already read are not read twice.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from staticadm.cluster.connection import MAX_ANSWER_BYTES_IN_FLIGHT, MAX_OBJECT_BYTES, ClusterError, KubeConnection
from staticadm.cluster.listing import ContinueTokens

#: Objects per list page: kubectl's default chunk size.
PAGE_SIZE = 500
REQUEST_SECONDS = 60.0
#: A discovery document is far smaller than one object may be.
MAX_DISCOVERY_BYTES = MAX_OBJECT_BYTES
#: A page of 500 objects (or a whole list after an expired continue token) may be large; past this it is an
#: error naming the bound rather than memory without end.
MAX_PAGE_BYTES = MAX_ANSWER_BYTES_IN_FLIGHT


async def _get(connection: KubeConnection, path: str, limit: int) -> Any:
    return await connection.request("GET", path, deadline=asyncio.get_running_loop().time() + REQUEST_SECONDS,
                                    limit=limit)


@dataclass(frozen=True, slots=True)
class ApiResource:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    #: Whether this version is its group's preferred one.
    preferred: bool

    @property
    def path(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/{self.resource}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def describe(self) -> str:
        return f"{self.resource}.{self.group}/{self.version}" if self.group else f"{self.resource}/{self.version}"


def _items(document: Any, key: str, path: str) -> list[Any]:
    if not isinstance(document, dict) or not isinstance(document.get(key), list):
        raise ClusterError(f"GET {path}: the answer has no {key} list")
    return list(document[key])


async def discover(connection: KubeConnection) -> list[ApiResource]:
    """Every listable resource (subresources left out) of every served group version."""
    group_versions: list[tuple[str, str, bool]] = []
    for version in _items(await _get(connection, "/api", MAX_DISCOVERY_BYTES), "versions", "/api"):
        group_versions.append(("", str(version), True))
    for group in _items(await _get(connection, "/apis", MAX_DISCOVERY_BYTES), "groups", "/apis"):
        if not isinstance(group, dict):
            continue
        preferred = (group.get("preferredVersion") or {}).get("version")
        for version in group.get("versions") or []:
            if isinstance(version, dict) and version.get("version"):
                group_versions.append((str(group.get("name") or ""), str(version["version"]),
                                       version["version"] == preferred))
    found = []
    for group, version, preferred in group_versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = await _get(connection, path, MAX_DISCOVERY_BYTES)
        except ClusterError as error:
            if error.status == 503:
                # An aggregated API whose server is down: kubectl skips it too, with a warning.
                continue
            raise
        for resource in _items(listing, "resources", path):
            if not isinstance(resource, dict) or "/" in str(resource.get("name", "")):
                continue
            if "list" not in (resource.get("verbs") or []):
                continue
            found.append(ApiResource(group, version, str(resource["name"]), str(resource.get("kind") or ""),
                                     bool(resource.get("namespaced")), preferred))
    return found


async def list_objects(connection: KubeConnection, resource: ApiResource, *,
                       page_size: int = PAGE_SIZE, label_selector: str = "") -> AsyncIterator[list[dict[str, Any]]]:
    """The resource's objects in pages (those ``label_selector`` selects, when given), each object with its
    apiVersion and kind (list answers leave them out of the items)."""
    seen: set[str] = set()
    token = ""
    tokens = ContinueTokens(resource.describe())
    paged = True
    while True:
        query = {"limit": str(page_size)} if paged else {}
        if label_selector:
            query["labelSelector"] = label_selector
        if token:
            query["continue"] = token
        path = resource.path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            page = await _get(connection, path, MAX_PAGE_BYTES)
        except ClusterError as error:
            if error.status == 410 and token:
                # The continue token expired (compaction): read the rest in one list.
                token, paged = "", False
                continue
            raise
        items = []
        for item in _items(page, "items", path):
            if not isinstance(item, dict):
                continue
            uid = str((item.get("metadata") or {}).get("uid") or "")
            if uid and uid in seen:
                continue
            if uid:
                seen.add(uid)
            items.append({"apiVersion": resource.api_version, "kind": resource.kind, **item})
        yield items
        metadata = page.get("metadata") if isinstance(page, dict) else None
        token = tokens.next(str(metadata.get("continue") or "") if isinstance(metadata, dict) else "")
        if not token or not paged:
            return
