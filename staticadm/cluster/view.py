"""The cluster view as one object: the connection, the namespace informer and the authorizer over it.

The daemon runs it on its event loop (:class:`ClusterView`); ``staticadm review --kubeconfig`` drives
the same pieces from synchronous code (:class:`BlockingClusterView`): one list of the namespaces, and
every request's authorizer checks reviewed exactly as the daemon reviews them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from staticadm.admission.request import UserInfo
from staticadm.cluster.authorizer import SubjectAccessReviewer
from staticadm.cluster.connection import KubeConnection
from staticadm.cluster.namespaces import ClusterObserver, NamespaceInformer
from staticadm.defaults import DEFAULT_AUTHORIZED_TTL, DEFAULT_UNAUTHORIZED_TTL

T = TypeVar("T")
#: ``review`` has no caller's deadline; each request's checks get this long.
OFFLINE_CHECK_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ClusterView:
    connection: KubeConnection
    namespaces: NamespaceInformer
    authorizer: SubjectAccessReviewer

    @classmethod
    def connect(cls, kubeconfig: Path | Sequence[Path], *, observer: ClusterObserver | None = None, logger: Any = None,
                authorized_ttl: float = DEFAULT_AUTHORIZED_TTL,
                unauthorized_ttl: float = DEFAULT_UNAUTHORIZED_TTL) -> ClusterView:
        """Nothing is sent yet: the informer starts when run, so the daemon serves before kube-apiserver
        is reachable."""
        connection = KubeConnection(kubeconfig)
        return cls(connection, NamespaceInformer(connection, observer=observer, logger=logger),
                   SubjectAccessReviewer(connection, observer=observer, authorized_ttl=authorized_ttl,
                                         unauthorized_ttl=unauthorized_ttl))

    async def close(self) -> None:
        await self.connection.close()


class BlockingClusterView:
    """For synchronous callers: the namespaces listed once at :meth:`open`; ClusterError if they cannot be."""

    def __init__(self, kubeconfig: Path | Sequence[Path]) -> None:
        self._loop = asyncio.new_event_loop()
        self.view = ClusterView.connect(kubeconfig)

    def open(self) -> None:
        self._loop.run_until_complete(self.view.namespaces.list_once())

    def run(self, awaitable: Awaitable[T]) -> T:
        """Runs one call of the connection (a list page, ...) on the view's own event loop."""
        return self._loop.run_until_complete(awaitable)

    def evaluate(self, user: UserInfo, evaluate: Callable[[], T]) -> T:
        async def once() -> T:
            return evaluate()

        return self._loop.run_until_complete(
            self.view.authorizer.evaluate(user, once, self._loop.time() + OFFLINE_CHECK_SECONDS))

    def close(self) -> None:
        self._loop.run_until_complete(self.view.close())
        self._loop.close()
