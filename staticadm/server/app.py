"""The aiohttp application: AdmissionReview endpoints, health checks and metrics.

Every answer to a bad request is a 4xx with a JSON ``Status`` naming what is wrong; the request body
is never echoed back (it may hold Secrets). A 500 only ever means a bug in staticadm.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging as stdlib_logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from staticadm import gofmt
from staticadm.admission.endpoints import ENDPOINTS, Evaluator, Review
from staticadm.admission.namespaces import NamespaceInfo, NamespaceSource, WithNamespace
from staticadm.admission.request import AdmissionRequest, RequestError, parse_admission_review, request_uid
from staticadm.admission.vocabulary import EnforcementAction, ErrorType, RequestDecision
from staticadm.build_info import build_info
from staticadm.cluster.authorizer import SubjectAccessReviewer
from staticadm.server.batching import EvaluationBatch
from staticadm.server.connections import request_began, request_ended, tracked
from staticadm.server.fast_http import DirectReply, whole_request
from staticadm.server.logging import request_fields
from staticadm.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from staticadm.server.metrics import Metrics
from staticadm.server.shadow import ShadowEvaluator
from staticadm.source import ManifestSource

#: kube-apiserver's MaxRequestBodyBytes: the largest object it accepts.
MAX_OBJECT_BYTES = 3 * 1024 * 1024
#: Room for the AdmissionReview around the object (request metadata, userInfo, options); an UPDATE
#: carries oldObject too, but both come from etcd, whose 1.5 MiB limit keeps the pair within 3 MiB.
ENVELOPE_BYTES = 256 * 1024
MAX_BODY_BYTES = MAX_OBJECT_BYTES + ENVELOPE_BYTES
DEFAULT_BODY_TIMEOUT = 10.0
#: kube-apiserver's webhook timeout is at most 30 s; without ``?timeout=`` we assume its v1 default.
DEFAULT_REVIEW_TIMEOUT = 10.0
MAX_REVIEW_TIMEOUT = 30.0
#: Admission requests past the header stage at once (reading, parsing, evaluating). Each may hold a
#: 3 MiB body and its parsed form; the rest wait in the kernel's socket buffers, up to their deadline.
MAX_CONCURRENT_REVIEWS = 64
#: Request bodies being received at once, in bytes (each is reserved at its declared length, or the
#: body limit when undeclared): bounds memory now that bodies are read before an evaluation slot.
MAX_BUFFERED_BODY_BYTES = 256 * 1024 * 1024
#: Calls to kube-apiserver for a request (its namespace's live GET, authorizer checks) end this long before
#: the request's deadline (at most half its timeout), whatever they wait for: the evaluation after them and
#: the answer's way back fit in what is left, so a slow kube-apiserver gives the policy's own answer
#: (failurePolicy, ``errored()``), never a timeout that depends on when the request arrived.
CLUSTER_CALL_MARGIN = 0.5



@dataclass
class ServerState:
    source: ManifestSource
    namespaces: NamespaceSource
    metrics: Metrics
    logger: Any
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_body_bytes: int = MAX_BODY_BYTES
    max_concurrent_reviews: int = MAX_CONCURRENT_REVIEWS
    shutting_down: bool = False
    #: Admission requests whose handler is running, so shutdown can wait for them, bodies included.
    in_flight: int = 0
    extra_ready_checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    max_buffered_body_bytes: int = MAX_BUFFERED_BODY_BYTES
    buffered_body_bytes: int = 0
    #: Set once the first load of the manifest directory has finished, whatever its outcome.
    first_load_done: asyncio.Event = field(default_factory=asyncio.Event)
    #: Why the files on disk are not what is served (they are invalid; the last good snapshot serves),
    #: shown by /readyz?verbose without making the daemon unready; None when they are.
    disk_problem: str | None = None
    #: The same for --shadow-manifests.
    shadow_problem: str | None = None
    #: The request's namespace from the cluster view (``--kubeconfig``), read live by a GET when the view lacks
    #: it: (name, deadline on the event loop's clock, waiting=called before it waits on kube-apiserver).
    fetch_namespace: Callable[..., Awaitable[NamespaceInfo]] | None = None
    #: Answers ``authorizer`` checks by SubjectAccessReview (``--kubeconfig``); None: checks fail.
    authorizer: SubjectAccessReviewer | None = None
    #: --shadow-manifests: evaluates each answered request again against the shadow directory.
    shadow: ShadowEvaluator | None = None
    #: Lines /readyz?verbose adds as notes without affecting readiness (the cluster view's state).
    ready_notes: dict[str, Callable[[], str]] = field(default_factory=dict)
    #: A worker of ``serve --workers``: /metrics is every process's sum, from the supervisor.
    scrape: Callable[[], Awaitable[bytes]] | None = None
    #: Where handlers hand their request's parsing and evaluation, to be run with the others ready at once.
    evaluation_batch: EvaluationBatch = field(default_factory=EvaluationBatch)
    _review_slots: asyncio.Semaphore | None = None

    def review_slots(self) -> asyncio.Semaphore:
        if self._review_slots is None:
            self._review_slots = asyncio.Semaphore(self.max_concurrent_reviews)
        return self._review_slots


STATE = web.AppKey("state", ServerState)


async def wait_idle(state: ServerState, timeout: float) -> bool:
    """Wait until no admission request is running, or ``timeout``; True if idle."""
    deadline = time.monotonic() + timeout
    while state.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return not state.in_flight


class BadRequest(Exception):
    def __init__(self, code: int, reason: str, message: str, uid: str = "", *, body_unread: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.uid = uid
        #: The request's body was not read to its end (too large, too slow, cut short): as Go's server does, the
        #: connection is closed after the answer, since what follows on it is no request (and a connection left
        #: waiting for the rest of a body would hold a shutdown for its whole grace period).
        self.body_unread = body_unread


_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- helpers ---------------------------------------------------------------------------------------


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers)


def error_response(error: BadRequest, headers: dict[str, str] | None = None) -> web.Response:
    return json_response(status_body(error.code, error.reason, error.message), error.code, headers)


def _review_timeout(request: web.Request) -> float:
    query = request.query_string
    # kube-apiserver sends exactly one parameter, ``timeout=<duration>`` with nothing to unescape; anything
    # else goes through the full query parser.
    if query.startswith("timeout=") and "&" not in query and "%" not in query and "+" not in query:
        raw: str | None = query[8:]
    else:
        raw = request.query.get("timeout")
    if raw is None:
        return DEFAULT_REVIEW_TIMEOUT
    return _timeout_seconds(raw)


@functools.lru_cache(maxsize=64)
def _timeout_seconds(raw: str) -> float:
    try:
        seconds = gofmt.parse_duration(raw)
    except ValueError:
        raise BadRequest(400, "BadRequest", "timeout query parameter must be a duration such as 10s") from None
    if seconds <= 0:
        raise BadRequest(400, "BadRequest", "timeout query parameter must be greater than zero")
    return min(seconds, MAX_REVIEW_TIMEOUT)


async def _read_body(request: web.Request, limit: int, timeout: float, buffered: _BufferedBytes) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise BadRequest(413, "RequestEntityTooLarge", f"request body is larger than the limit of {limit} bytes",
                         body_unread=True)
    content = request.content
    chunks: list[bytes] = []
    size = 0

    def take(chunk: bytes) -> None:
        nonlocal size
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, "RequestEntityTooLarge", f"request body is larger than the limit of {limit} bytes",
                             body_unread=True)
        buffered.add(len(chunk))
        chunks.append(chunk)

    try:
        if content.is_eof():
            # Received in full already (a body that came with its headers, as kube-apiserver's do): nothing to
            # wait for, so no timer to arm and cancel.
            take(content.read_nowait(-1))
        else:
            async with asyncio.timeout(timeout):
                while chunk := await content.read(65536):
                    take(chunk)
    except TimeoutError:
        raise BadRequest(408, "Timeout", f"request body was not received within {timeout:g} seconds",
                         body_unread=True) from None
    except BadRequest:
        raise
    except Exception:  # aiohttp reports a truncated or mis-encoded body in several exception types
        raise BadRequest(400, "BadRequest", "request body ended before its declared length or was malformed",
                         body_unread=True) from None
    if length is not None and size != length:
        raise BadRequest(400, "BadRequest", "request body ended before its declared length", body_unread=True)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# -- admission endpoints ---------------------------------------------------------------------------


def fast_reviews(state: ServerState) -> Callable[[bytes, DirectReply], bool]:
    """Takes an admission request that arrived whole in one read (``fast_http``) from the connection's data
    callback, and decides it as ``review_handler``'s coroutine would, in the evaluation batch (``batching.py``) with
    the requests ready at the same time: ``reply`` gets its answer there. False leaves the read to aiohttp, whenever
    anything would make the handler wait or take another path: no snapshot yet, shutting down, the cluster view
    (its calls wait on the network), every evaluation slot taken, the body limits, or a request that is not of the
    one shape ``fast_http`` recognises."""
    routes = {endpoint: (evaluate, review_handler_errors(state, endpoint)) for endpoint, evaluate in ENDPOINTS.items()}
    metrics = state.metrics
    direct_answers = metrics.direct_answers
    batch = state.evaluation_batch

    def take(data: bytes, reply: DirectReply) -> bool:
        served = state.source.current
        if (served is None or state.shutting_down or state.fetch_namespace is not None or state.authorizer is not None
                or state.review_slots().locked()):
            return False
        request = whole_request(data)
        if request is None:
            return False
        body = request.body
        if len(body) > state.max_body_bytes:
            return False
        try:
            timeout = DEFAULT_REVIEW_TIMEOUT if request.timeout is None else _timeout_seconds(request.timeout)
            # Held from here to the answer, as the handler's request holds its body.
            buffered = _BufferedBytes(state)
            buffered.add(len(body))
        except BadRequest:
            return False
        endpoint = request.endpoint
        started = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + timeout
        # Counted from here to the answer, as the handler's request is: shutdown waits for it.
        state.in_flight += 1

        def answer() -> None:
            evaluate, errors = routes[endpoint]
            try:
                try:
                    response, decision, _ = _parse_admit_and_report(state, endpoint, evaluate, served, body, timeout,
                                                                    deadline, started)
                except Exception as error:
                    response, decision = errors(error)
                finally:
                    state.in_flight -= 1
                    buffered.release()
                metrics.record_request(endpoint, response.status, decision, time.perf_counter() - started)
                direct_answers.inc()
            except Exception:
                # A bug in what follows the evaluation (its metrics or log line): the request still gets an answer.
                state.logger.exception("internal error handling request", path=f"/{endpoint}")
                response = _internal_error()
            payload = response.body
            assert isinstance(payload, bytes)
            reply(response.status, response.reason, payload)

        batch.call(answer)
        return True

    return take


def review_handler_errors(state: ServerState, endpoint: str
                          ) -> Callable[[Exception], tuple[web.Response, RequestDecision]]:
    """What ``review_handler`` answers and logs when parsing or evaluating a request raised ``error``."""
    metrics = state.metrics

    def answer(error: Exception) -> tuple[web.Response, RequestDecision]:
        if isinstance(error, BadRequest):
            headers = {"Allow": "POST"} if error.code == 405 else None
            response = error_response(error, headers)
            if error.body_unread:
                response.force_close()
            if error.code == 504:
                metrics.evaluation_timeouts.labels(endpoint=endpoint).inc()
            state.logger.info("rejected admission request", endpoint=endpoint, code=error.code,
                              reason=error.reason, err=error.message, uid=error.uid or None)
            return response, RequestDecision.ERROR
        # A bug in evaluation: kube-apiserver applies the webhook's failurePolicy to a 500. Only the type and
        # where it was raised are logged; the message might quote the object.
        state.logger.error("internal error evaluating admission request", endpoint=endpoint,
                           err=type(error).__name__, at=_raised_at(error))
        return _internal_error(), RequestDecision.ERROR

    return answer


def review_handler(state: ServerState, endpoint: str, evaluate: Evaluator) -> _Handler:
    """The route of an admission endpoint, in one coroutine: the connection tracking ``tracked`` wraps the other
    routes in (``request_began``/``request_ended``) and ``_errors``' last resort are done here, since each wrapper's
    frame is paid by every request kube-apiserver sends."""
    metrics = state.metrics
    errors = review_handler_errors(state, endpoint)

    async def handle(request: web.Request) -> web.StreamResponse:
        connection = request_began(request)
        response = None
        started = time.perf_counter()
        state.in_flight += 1
        review = None
        try:
            try:
                response, decision, review = await _review(request, state, endpoint, evaluate, started)
            except Exception as error:
                response, decision = errors(error)
            finally:
                state.in_flight -= 1
            seconds = time.perf_counter() - started
            metrics.record_request(endpoint, response.status, decision, seconds)
            if review is not None:
                _report(state, endpoint, evaluate, review, decision, seconds)
            return response
        except Exception:
            # A bug in what follows the evaluation (its metrics or log line): the request still gets an answer.
            response = _logged_internal_error(request)
            return response
        finally:
            request_ended(connection, response)

    return handle


async def _review(request: web.Request, state: ServerState, endpoint: str, evaluate: Evaluator,
                  started: float) -> tuple[web.Response, RequestDecision, _Evaluated | None]:
    if request.method != "POST":
        raise BadRequest(405, "MethodNotAllowed", f"{request.method} is not allowed; send the AdmissionReview "
                                                  "with POST")
    headers = request.headers
    # What kube-apiserver sends, compared as it is; any other spelling is parsed.
    if headers.get("Content-Type") != "application/json" and request.content_type != "application/json":
        raise BadRequest(415, "UnsupportedMediaType", "Content-Type must be application/json")
    encoding = headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        # kube-apiserver never compresses webhook bodies; inflating one would cost CPU on the event loop
        # (the daemon does not let aiohttp decompress: auto_decompress is off).
        raise BadRequest(415, "UnsupportedMediaType", "Content-Encoding must be identity (bodies are not "
                                                      "accepted compressed)")
    timeout = _review_timeout(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout - (time.perf_counter() - started)
    if state.source.current is None and not state.shutting_down and not state.first_load_done.is_set():
        # Starting (a socket-activated restart queues kube-apiserver's requests meanwhile): wait for the
        # first load within the request's own deadline instead of failing it at once.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await state.first_load_done.wait()
    # The snapshot this request is evaluated against, fixed now: a reload during the request does
    # not change its answer half way.
    served = state.source.current
    if state.shutting_down:
        raise BadRequest(503, "ServiceUnavailable", "shutting down")
    # The body is read (bounded in size and time) before an evaluation slot is taken: slots are for
    # complete requests, so clients that trickle a body cannot keep kube-apiserver's requests waiting.
    buffered = _BufferedBytes(state)
    try:
        body = await _read_body(request, state.max_body_bytes,
                                max(min(state.body_timeout, deadline - loop.time()), 0.001), buffered)
        if served is None:
            # Read first so that the log line (and the answer) carry the request's uid.
            raise BadRequest(503, "ServiceUnavailable", "not yet ready to handle request", _body_uid(body))
        slot = _Slot(state.review_slots(), deadline, timeout, body)
        try:
            await slot.take()
            batch = state.evaluation_batch
            if state.fetch_namespace is None and state.authorizer is None:
                # Nothing to wait for between the body and the answer: parsed and evaluated with the requests that
                # are ready at the same time (``batching.py``).
                return await batch.submit(functools.partial(_parse_admit_and_report, state, endpoint, evaluate,
                                                            served, body, timeout, deadline, started))
            parsed = _parse(body)
            namespaces = state.namespaces
            # Cluster calls end together, at a fixed margin before the request's deadline.
            calls_end = deadline - min(CLUSTER_CALL_MARGIN, timeout / 2)
            if state.fetch_namespace is not None and parsed.namespace and served.snapshot.needs_namespaces:
                # Fixed for the whole request; only a namespace the cluster view lacks waits on the network.
                namespaces = WithNamespace(
                    await state.fetch_namespace(parsed.namespace, calls_end, waiting=slot.release), namespaces)

            if state.authorizer is None:
                if not slot.held:
                    await slot.take()
                return await batch.submit(functools.partial(_admit_and_report, state, endpoint, evaluate, served,
                                                            parsed, namespaces, timeout, deadline, started))

            async def evaluate_once() -> tuple[web.Response, RequestDecision, _Evaluated | None]:
                await slot.take()
                return _admit(state, evaluate, served, parsed, namespaces, timeout, deadline)

            return await state.authorizer.evaluate(parsed.user_info, evaluate_once, calls_end, waiting=slot.release)
        finally:
            slot.release()
    finally:
        buffered.release()


#: What an evaluated request leaves for logging and shadowing: the request, its review, the namespaces it saw.
_Evaluated = tuple[AdmissionRequest, Review, NamespaceSource]


class _Slot:
    """A request's hold on one of the evaluation slots: taken for what uses the CPU (parsing, each evaluation),
    let go while the request waits on kube-apiserver, so requests waiting on a slow cluster call never keep the
    others from being evaluated."""

    def __init__(self, slots: asyncio.Semaphore, deadline: float, timeout: float, body: bytes) -> None:
        self._slots = slots
        self._deadline = deadline
        self._timeout = timeout
        self._body = body
        self._held = False
        self._taken = False

    @property
    def held(self) -> bool:
        return self._held

    async def take(self) -> None:
        if self._held:
            return
        if self._slots.locked():
            try:
                async with asyncio.timeout_at(self._deadline):
                    await self._slots.acquire()
            except TimeoutError:
                what = "evaluated" if self._taken else "started"
                raise BadRequest(504, "Timeout", f"too many concurrent admission requests; not {what} within "
                                                 f"{self._timeout:g} seconds", _body_uid(self._body)) from None
        else:
            # A free slot is taken at once: no timer needed.
            await self._slots.acquire()
        self._held = self._taken = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


class _BufferedBytes:
    """The bytes of one request body held in memory, counted against the daemon-wide budget as they
    arrive (a client trickling a body holds only what it sent)."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self.size = 0

    def add(self, count: int) -> None:
        state = self._state
        if state.buffered_body_bytes + count > state.max_buffered_body_bytes:
            raise BadRequest(503, "ServiceUnavailable", "too many request bodies being received; retry")
        state.buffered_body_bytes += count
        self.size += count

    def release(self) -> None:
        self._state.buffered_body_bytes -= self.size
        self.size = 0


def _body_uid(body: bytes) -> str:
    """The request uid of a body that was not (or could not be) evaluated, for the rejection's log line."""
    try:
        return request_uid(orjson.loads(body))
    except orjson.JSONDecodeError:
        return ""


def _parse(body: bytes) -> AdmissionRequest:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        # The position is useful and does not reveal content; the decoder's message never quotes input.
        raise BadRequest(400, "BadRequest", f"request body is not valid JSON: {error}") from None
    parsed = parse_admission_review(document)
    if isinstance(parsed, RequestError):
        raise BadRequest(400, "BadRequest", f"invalid AdmissionReview: {parsed.message}",
                         parsed.uid or request_uid(document))
    return parsed


def _parse_admit_and_report(state: ServerState, endpoint: str, evaluate: Evaluator, served: Any, body: bytes,
                            timeout: float, deadline: float, started: float
                            ) -> tuple[web.Response, RequestDecision, _Evaluated | None]:
    return _admit_and_report(state, endpoint, evaluate, served, _parse(body), state.namespaces, timeout, deadline,
                             started)


def _admit_and_report(state: ServerState, endpoint: str, evaluate: Evaluator, served: Any, parsed: AdmissionRequest,
                      namespaces: NamespaceSource, timeout: float, deadline: float, started: float
                      ) -> tuple[web.Response, RequestDecision, _Evaluated | None]:
    """``_admit`` for a batched request, reported (``_report``) in its batch, latency to its evaluated answer: the
    handler gets only its answer back, so the batch does not hold every request it evaluated (a parsed object is
    about ten times its JSON) until the last one's handler runs, and the next request's parsing reuses the memory
    the last one's left, still in the processor's caches."""
    response, decision, evaluated = _admit(state, evaluate, served, parsed, namespaces, timeout, deadline)
    if evaluated is not None:
        _report(state, endpoint, evaluate, evaluated, decision, time.perf_counter() - started)
    return response, decision, None


def _report(state: ServerState, endpoint: str, evaluate: Evaluator, evaluated: _Evaluated, decision: RequestDecision,
            seconds: float) -> None:
    """An evaluated request's log lines and check metrics, and its shadow evaluation."""
    _log_review(state, endpoint, evaluated, decision, seconds)
    if state.shadow is not None:
        state.shadow.schedule(endpoint, evaluate, evaluated[2], evaluated[0], evaluated[1], state.authorizer)


def _admit(state: ServerState, evaluate: Evaluator, served: Any, parsed: AdmissionRequest,
           namespaces: NamespaceSource, timeout: float, deadline: float
           ) -> tuple[web.Response, RequestDecision, _Evaluated | None]:
    loop = asyncio.get_running_loop()
    remaining = deadline - loop.time()
    if remaining <= 0:
        # Waiting behind other requests used up this one's time: kube-apiserver has given up on it.
        raise BadRequest(504, "Timeout", f"admission request not evaluated within {timeout:g} seconds", parsed.uid)
    # Evaluated in place. CEL work is bounded by Kubernetes' deterministic cost limits; the request's own
    # deadline is only a backstop: past it kube-apiserver has stopped waiting and applies failurePolicy
    # itself, so the answer is a timeout, never a decision that depends on how long evaluation took.
    cel_deadline = time.perf_counter() + remaining
    review = evaluate(served.snapshot, namespaces, parsed, deadline=cel_deadline)
    if time.perf_counter() > cel_deadline:
        raise BadRequest(504, "Timeout", f"admission request not evaluated within {timeout:g} seconds", parsed.uid)
    answer = review.review.get("response") or {}
    if not answer.get("allowed"):
        decision = RequestDecision.DENY
    elif "patch" in answer:
        decision = RequestDecision.MUTATE
    else:
        decision = RequestDecision.WARN if answer.get("warnings") else RequestDecision.ALLOW
    return json_response(review.review), decision, (parsed, review, namespaces)


def _raised_at(error: BaseException) -> str:
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    if frame is None:
        return ""
    return f"{frame.tb_frame.f_code.co_filename}:{frame.tb_lineno} in {frame.tb_frame.f_code.co_name}"


#: The enumeration members the per-request log reads, as module constants: a member read through its class
#: costs a metaclass attribute lookup, several per check of every logged request.
_ALLOW, _MUTATE = EnforcementAction.ALLOW, EnforcementAction.MUTATE
_NO_ERROR = ErrorType.NO_ERROR
_DENY = RequestDecision.DENY


def _log_review(state: ServerState, endpoint: str, item: _Evaluated, decision: RequestDecision,
                seconds: float) -> None:
    parsed, review, _ = item
    checks = review.checks
    denied = decision is _DENY
    logger = state.logger
    # One pass: each check's metrics, and what the log says of it. A mutation is logged like a denial (an
    # operator needs to know which policies changed which object): successful ones as one line for the request
    # (a Pod can pass through many mutating policies), every other notable check (denials, warnings, audits,
    # errors) as a line of its own with its message.
    mutations: list[dict[str, str]] = []
    others: list[Any] = []
    if checks:
        metrics = state.metrics
        mutating = endpoint == "mutate"
        for check in checks:
            action, error_type = check.action, check.error_type
            if mutating:
                metrics.record_mutation_check(check.policy, check.binding, error_type, check.seconds)
            else:
                metrics.record_policy_check(check.policy, check.binding, error_type, action, check.seconds)
            if error_type is _NO_ERROR:
                if action is _ALLOW:
                    continue
                if action is _MUTATE:
                    mutations.append({"policy": check.policy, "binding": check.binding})
                    continue
            others.append(check)
    if not mutations and not others and not denied:
        # Most requests: allowed with nothing to report, logged only at debug.
        if logger.is_enabled_for(stdlib_logging.DEBUG):
            logger.debug("admission allowed", allowed=True, **request_fields(endpoint, parsed),
                         latency_ms=round(seconds * 1000, 3))
        return
    fields = request_fields(endpoint, parsed)
    fields["latency_ms"] = round(seconds * 1000, 3)
    if not mutations and not others:
        status = (review.review.get("response") or {}).get("status") or {}
        logger.info("admission denied", allowed=False, message=status.get("message", ""), **fields)
        return
    if mutations:
        logger.info("admission mutated", allowed=not denied, action=_MUTATE, mutations=mutations, **fields)
    for check in others:
        logger.info("admission decision", allowed=not denied, policy=check.policy, binding=check.binding,
                    action=check.action, error_type=check.error_type, message=check.message, **fields)


# -- health and metrics ----------------------------------------------------------------------------


def _checks_text(name: str, checks: list[tuple[str, bool]]) -> str:
    lines = [f"[+]{check} ok" if ok else f"[-]{check} failed: reason withheld" for check, ok in checks]
    verdict = "passed" if all(ok for _, ok in checks) else "failed"
    return "\n".join([*lines, f"{name} check {verdict}", ""])


def _health(name: str, checks: Callable[[ServerState], list[tuple[str, bool]]]) -> Callable[
        [web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise BadRequest(405, "MethodNotAllowed", f"{request.method} is not allowed; use GET")
        results = checks(request.app[STATE])
        healthy = all(ok for _, ok in results)
        status = 200 if healthy else 503
        # Like kube-apiserver: a bare "ok" for machines, the per-check list with ?verbose for humans.
        if "verbose" in request.query:
            text = _checks_text(name, results)
            if name == "readyz":
                state = request.app[STATE]
                for problem in (state.disk_problem, state.shadow_problem):
                    if problem is not None:
                        text += f"note: {problem}\n"
                for note_name, note in state.ready_notes.items():
                    if line := note():
                        text += f"note: {note_name}: {line}\n"
        else:
            failed = [check for check, ok in results if not ok]
            text = "ok" if healthy else f"{name} check failed: {', '.join(failed)}\n"
        return web.Response(text=text, status=status, content_type="text/plain")

    return handle


def _liveness(_state: ServerState) -> list[tuple[str, bool]]:
    return [("ping", True)]


def _health_checks(state: ServerState) -> list[tuple[str, bool]]:
    return [("ping", True), ("manifests-loaded", state.source.current is not None)]


def _readiness(state: ServerState) -> list[tuple[str, bool]]:
    checks = _health_checks(state)
    checks.extend((name, check()) for name, check in state.extra_ready_checks.items())
    checks.append(("shutdown", not state.shutting_down))
    return checks


async def _metrics(request: web.Request) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        raise BadRequest(405, "MethodNotAllowed", f"{request.method} is not allowed; use GET")
    state = request.app[STATE]
    if state.scrape is None:
        body = state.metrics.exposition()
    else:
        try:
            body = await state.scrape()
        except (TimeoutError, ConnectionError) as error:
            raise BadRequest(503, "ServiceUnavailable", "the supervisor did not answer with every worker's "
                             "metrics in time") from error
    response = web.Response(body=body, status=200)
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response


def _version(info: dict[str, str | None]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise BadRequest(405, "MethodNotAllowed", f"{request.method} is not allowed; use GET")
        return json_response(info, 200)

    return handle


def _errors(handler: _Handler) -> _Handler:
    """``handler``, answering what it raises as a JSON Status (a wrapper of each route, not a middleware: see
    ``connections.tracked``)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as error:
            return error_response(error, {"Allow": "GET, HEAD"} if error.code == 405 else None)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            return json_response(status_body(error.status, error.reason.replace(" ", ""), error.reason),
                                 error.status)
        except Exception:
            return _logged_internal_error(request)

    return handle


def _internal_error() -> web.Response:
    """A 500 for a bug of staticadm's: kube-apiserver applies the webhook's failurePolicy to it."""
    return json_response(status_body(500, "InternalError", "internal error; see the staticadm log"), 500)


def _logged_internal_error(request: web.Request) -> web.Response:
    """``_internal_error`` for what a handler raised, logged with its traceback."""
    request.app[STATE].logger.exception("internal error handling request", path=request.path)
    return _internal_error()


async def _not_found(_request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


def create_app(state: ServerState) -> web.Application:
    # client_max_size guards aiohttp's own body helpers; our handlers read the body themselves with
    # the same limit and a deadline.
    app = web.Application(client_max_size=state.max_body_bytes)
    app[STATE] = state

    def add(path: str, handler: _Handler) -> None:
        app.router.add_route("*", path, tracked(_errors(handler)))

    for endpoint, evaluate in ENDPOINTS.items():
        app.router.add_route("*", f"/{endpoint}", review_handler(state, endpoint, evaluate))
    add("/livez", _health("livez", _liveness))
    add("/readyz", _health("readyz", _readiness))
    add("/healthz", _health("healthz", _health_checks))
    add("/metrics", _metrics)
    # Read once, at start: what is running does not change while it runs.
    add("/version", _version(build_info()))
    # Every other path, last: a JSON 404, tracked like any request (aiohttp's own 404 would be plain text).
    add("/{path:.*}", _not_found)
    return app
