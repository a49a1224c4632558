"""``authorizer`` checks answered by kube-apiserver: SubjectAccessReview, with a decision cache.

In kube-apiserver a policy's ``authorizer.check()`` calls the server's own authorizer chain in the
middle of evaluation. A webhook asks the same chain through SubjectAccessReview, but the engine calls
``check()`` synchronously and the request path must not block on the network inside it. So a request is
evaluated in rounds: a check whose answer is neither cached nor already fetched for this request is
recorded and fails for now; between rounds the recorded checks are reviewed concurrently (bounded by the
request's deadline), and the request is evaluated again, until a round needs nothing new. Only the last
round's result is used, and every round of one request sees the same answers, so the decision is the
one kube-apiserver's chain gives, whatever the timing. A request whose policies make no authorizer
checks is evaluated once, as before.

The cache follows kube-apiserver's webhook authorizer: allowed answers are kept 5 minutes, others 30
seconds by default; errors are never cached. A failed review is the Decision's ``errored()``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from staticadm.admission.request import UserInfo
from staticadm.cel.libraries.authz import ACTIVE_AUTHORIZER, AuthorizationPending, CheckAttributes, CheckDecision
from staticadm.cluster.connection import ClusterError, KubeConnection
from staticadm.cluster.namespaces import ClusterObserver, NoObserver

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_AUTHORIZED_TTL = 300.0
DEFAULT_UNAUTHORIZED_TTL = 30.0
#: Rounds of a request's evaluation at most; a chain of checks each depending on the previous one's
#: answer deeper than this is answered as an error rather than holding the request.
MAX_ROUNDS = 6
MAX_CACHED = 10_000
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"

T = TypeVar("T")


def subject_access_review_spec(attributes: CheckAttributes, user: UserInfo) -> dict[str, Any]:
    """The SubjectAccessReview spec for one check, as kube-apiserver's webhook authorizer builds it from
    ``authorizer.Attributes`` (the request's user, or the service account ``serviceAccount()`` named)."""
    spec: dict[str, Any]
    if attributes.user:
        # serviceaccount.UserInfo: the account's user name and its two groups, no uid or extra.
        namespace = attributes.user[len(SERVICE_ACCOUNT_PREFIX):].split(":", 1)[0]
        spec = {"user": attributes.user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]}
    else:
        # The request's UserInfo, omitempty as in the AdmissionReview; the SAR spec names username "user".
        spec = user.to_json()
        if "username" in spec:
            spec["user"] = spec.pop("username")
    if attributes.path is not None:
        spec["nonResourceAttributes"] = {"path": attributes.path, "verb": attributes.verb}
        return spec
    resource: dict[str, Any] = {"verb": attributes.verb, "version": "*"}
    for key, value in (("namespace", attributes.namespace), ("group", attributes.group),
                       ("resource", attributes.resource), ("subresource", attributes.subresource),
                       ("name", attributes.name)):
        if value:
            resource[key] = value
    if attributes.field_selector:
        resource["fieldSelector"] = {"rawSelector": attributes.field_selector}
    if attributes.label_selector:
        resource["labelSelector"] = {"rawSelector": attributes.label_selector}
    spec["resourceAttributes"] = resource
    return spec


def decision_from_status(status: Any) -> CheckDecision:
    """``webhook.Authorize``'s reading of a SubjectAccessReview status (Allow, else NoOpinion/Deny)."""
    if not isinstance(status, Mapping):
        return CheckDecision(False, "", "the SubjectAccessReview answer has no status")
    reason = status.get("reason") if isinstance(status.get("reason"), str) else ""
    evaluation_error = status.get("evaluationError") if isinstance(status.get("evaluationError"), str) else ""
    return CheckDecision(status.get("allowed") is True, reason or "", evaluation_error or "")


@dataclass(slots=True)
class AuthorizationSession:
    """One request's checks: answers fixed for every round of its evaluation, and those still missing."""

    user: UserInfo
    reviewer: SubjectAccessReviewer
    answers: dict[bytes, CheckDecision] = field(default_factory=dict)
    missing: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    #: The last round: a check still unknown is an error instead of another round.
    final: bool = False

    def authorize(self, attributes: CheckAttributes) -> CheckDecision:
        spec = subject_access_review_spec(attributes, self.user)
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        answer = self.answers.get(key)
        if answer is None:
            answer = self.reviewer.cached(key)
            if answer is None and self.final:
                answer = CheckDecision(False, "", f"authorization checks depend on each other more than "
                                                  f"{MAX_ROUNDS - 1} deep; this one was not made")
            if answer is None:
                self.missing[key] = spec
                raise AuthorizationPending()
            self.answers[key] = answer
        return answer


class SubjectAccessReviewer:
    def __init__(self, connection: KubeConnection, *, observer: ClusterObserver | None = None,
                 authorized_ttl: float = DEFAULT_AUTHORIZED_TTL,
                 unauthorized_ttl: float = DEFAULT_UNAUTHORIZED_TTL) -> None:
        self._connection = connection
        self._observer = observer or NoObserver()
        self._authorized_ttl = authorized_ttl
        self._unauthorized_ttl = unauthorized_ttl
        self._cache: OrderedDict[bytes, tuple[float, CheckDecision]] = OrderedDict()

    def cached(self, key: bytes) -> CheckDecision | None:
        entry = self._cache.get(key)
        if entry is not None and entry[0] > time.monotonic():
            self._observer.authorizer_cache(True)
            return entry[1]
        if entry is not None:
            del self._cache[key]
        self._observer.authorizer_cache(False)
        return None

    async def evaluate(self, user: UserInfo, evaluate: Callable[[], T], remaining: Callable[[], float]) -> T:
        """``evaluate()`` in rounds until its checks are all answered (see the module docstring);
        ``remaining()`` is the request's time left, which bounds each round's reviews."""
        session = AuthorizationSession(user, self)
        for round_number in range(MAX_ROUNDS):
            session.final = round_number == MAX_ROUNDS - 1
            token = ACTIVE_AUTHORIZER.set(session)
            try:
                result = evaluate()
            finally:
                ACTIVE_AUTHORIZER.reset(token)
            if not session.missing:
                break
            await self.resolve(session, remaining())
        return result

    async def resolve(self, session: AuthorizationSession, timeout: float) -> None:
        """Answers every check the last round recorded (concurrently, within ``timeout``)."""
        missing, session.missing = session.missing, {}
        keys = list(missing)
        results = await asyncio.gather(*(self._review(missing[key], timeout) for key in keys))
        for key, (decision, cacheable) in zip(keys, results, strict=True):
            session.answers[key] = decision
            if cacheable:
                ttl = self._authorized_ttl if decision.allowed else self._unauthorized_ttl
                self._cache[key] = (time.monotonic() + ttl, decision)
                self._cache.move_to_end(key)
                while len(self._cache) > MAX_CACHED:
                    self._cache.popitem(last=False)

    async def _review(self, spec: dict[str, Any], timeout: float) -> tuple[CheckDecision, bool]:
        started = time.perf_counter()
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            if timeout <= 0:
                raise ClusterError("the admission request's deadline passed before the check could be made")
            answer = await self._connection.request("POST", SUBJECT_ACCESS_REVIEWS, timeout=timeout, body=body)
        except ClusterError as error:
            self._observer.api_call("sar", time.perf_counter() - started, True)
            return CheckDecision(False, "", f"SubjectAccessReview failed: {error.message}"), False
        self._observer.api_call("sar", time.perf_counter() - started, False)
        decision = decision_from_status(answer.get("status") if isinstance(answer, Mapping) else None)
        return decision, not decision.error
