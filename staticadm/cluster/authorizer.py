"""``authorizer`` checks answered by kube-apiserver: SubjectAccessReview, with a decision cache.

In kube-apiserver a policy's ``authorizer.check()`` calls the server's own authorizer chain in the
middle of evaluation. A webhook asks the same chain through SubjectAccessReview, but the engine calls
``check()`` synchronously and the request path must not block on the network inside it. So a request is
evaluated in rounds: a check whose answer is neither cached nor already fetched for this request is
recorded and fails for now; after the round the recorded checks are all reviewed at once, and the request
is evaluated again as soon as the first of them (the one kube-apiserver's evaluation would have waited for)
is answered, until a round needs nothing new. Only the last round's result is used: it is an evaluation
with every check it made answered, exactly what kube-apiserver's single evaluation gives, whatever the
timing. The other reviews are made ahead of need (at most what the cost limit lets an evaluation reach);
a request never waits for one its evaluation does not reach, and those still running when it is decided
are dropped. Every round reads the same engine activations (:class:`EvaluationRounds`), so maps are
iterated in the same order each round, as in kube-apiserver's one evaluation. A request whose policies
make no authorizer checks is evaluated once, as before.

The cache follows kube-apiserver's webhook authorizer: allowed answers are kept 5 minutes, others 30
seconds by default; errors are never cached. A failed review (no answer by the request's deadline, an
answer Go's decoder would refuse) is the Decision's ``errored()``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from staticadm import gofmt
from staticadm.admission.cel.activation import EVALUATION_ROUNDS, EvaluationRounds
from staticadm.admission.request import UserInfo
from staticadm.cel.libraries.authz import ACTIVE_AUTHORIZER, AuthorizationPending, CheckAttributes, CheckDecision
from staticadm.cluster.connection import ClusterError, KubeConnection
from staticadm.cluster.namespaces import ClusterObserver, NoObserver
from staticadm.defaults import DEFAULT_AUTHORIZED_TTL, DEFAULT_UNAUTHORIZED_TTL

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#: Rounds of a request's evaluation at most; a chain of checks each depending on the previous one's
#: answer deeper than this is answered as an error rather than holding the request.
MAX_ROUNDS = 8
#: A SubjectAccessReview's answer echoes the spec sent; past this much more it is not one.
MAX_ANSWER_GROWTH = 1024 * 1024
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


#: SubjectAccessReviewStatus's fields (``k8s.io/api/authorization/v1``) and their Go types.
_STATUS_FIELDS = {"allowed": (bool, "bool"), "denied": (bool, "bool"), "reason": (str, "string"),
                  "evaluationError": (str, "string")}


def decision_from_answer(answer: Any) -> CheckDecision:
    """``webhook.Authorize``'s reading of a SubjectAccessReview answer (Allow, else NoOpinion or Deny), after
    client-go's decoding: a field of the wrong type fails the review (raises ClusterError), it is never read
    as false; unknown fields and nulls are ignored; no status at all is a zero status (not allowed)."""
    if not isinstance(answer, dict):
        raise ClusterError(f"json: cannot unmarshal {gofmt.json_type(answer)} into Go value of type "
                           "v1.SubjectAccessReview")
    status = answer.get("status")
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise ClusterError(f"json: cannot unmarshal {gofmt.json_type(status)} into Go struct field "
                           "SubjectAccessReview.status of type v1.SubjectAccessReviewStatus")
    for name, (kind, go_type) in _STATUS_FIELDS.items():
        value = status.get(name)
        if value is not None and not isinstance(value, kind):
            raise ClusterError(f"json: cannot unmarshal {gofmt.json_type(value)} into Go struct field "
                               f"SubjectAccessReviewStatus.status.{name} of type {go_type}")
    allowed, denied = status.get("allowed") is True, status.get("denied") is True
    reason = status.get("reason") or ""
    if allowed and denied:
        return CheckDecision(False, reason, "webhook subject access review returned both allow and deny response")
    return CheckDecision(allowed, reason, status.get("evaluationError") or "")


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

    async def evaluate(self, user: UserInfo, evaluate: Callable[[], Awaitable[T]], deadline: float, *,
                       waiting: Callable[[], None] = lambda: None) -> T:
        """``evaluate()`` in rounds until its checks are all answered (see the module docstring). Reviews end by
        ``deadline`` (the event loop's clock); ``waiting()`` is called before each wait for one, so the caller can
        let go of what it holds meanwhile (``evaluate`` takes it again)."""
        session = AuthorizationSession(user, self)
        reviews: dict[bytes, asyncio.Task[None]] = {}
        rounds = EVALUATION_ROUNDS.set(EvaluationRounds())
        try:
            for round_number in range(MAX_ROUNDS):
                session.final = round_number == MAX_ROUNDS - 1
                token = ACTIVE_AUTHORIZER.set(session)
                try:
                    result = await evaluate()
                finally:
                    ACTIVE_AUTHORIZER.reset(token)
                if not session.missing:
                    break
                missing, session.missing = session.missing, {}
                for key, spec in missing.items():
                    if key not in reviews:
                        reviews[key] = asyncio.ensure_future(self._answer(session, key, spec, deadline))
                # The first check this round could not make is the one kube-apiserver's evaluation would wait for.
                first = reviews[next(iter(missing))]
                if not first.done():
                    waiting()
                    await asyncio.wait([first])
            return result
        finally:
            EVALUATION_ROUNDS.reset(rounds)
            for review in reviews.values():
                review.cancel()

    async def _answer(self, session: AuthorizationSession, key: bytes, spec: dict[str, Any], deadline: float) -> None:
        decision, cacheable = await self._review(spec, deadline)
        session.answers[key] = decision
        if cacheable:
            ttl = self._authorized_ttl if decision.allowed else self._unauthorized_ttl
            self._cache[key] = (time.monotonic() + ttl, decision)
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)

    async def _review(self, spec: dict[str, Any], deadline: float) -> tuple[CheckDecision, bool]:
        started = time.perf_counter()
        body = orjson.dumps({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        try:
            if deadline <= asyncio.get_running_loop().time():
                raise ClusterError("the admission request's deadline passed before the check could be made")
            answer = await self._connection.request("POST", SUBJECT_ACCESS_REVIEWS, deadline=deadline, body=body,
                                                    limit=len(body) + MAX_ANSWER_GROWTH)
            decision = decision_from_answer(answer)
        except ClusterError as error:
            self._observer.api_call("sar", time.perf_counter() - started, True)
            return CheckDecision(False, "", f"SubjectAccessReview failed: {error.message}"), False
        self._observer.api_call("sar", time.perf_counter() - started, False)
        return decision, not decision.error
