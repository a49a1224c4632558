"""One webhook call as kube-apiserver makes it: the AdmissionReview it sends (plugin/webhook/request), the
HTTPS request (util/webhook/client.go, client-go's REST client) and ``VerifyAdmissionResponse``.

The transport is kube-apiserver's: TLS 1.2+, ALPN ``http/1.1`` only, the server verified against the
webhook's caBundle (the system roots without one) and the URL's host, the kubeconfig user's client
certificate or bearer token, ``POST <url>?timeout=<n>s`` with the remaining time rounded up to a whole
second, JSON both ways, user agent ``kube-apiserver-admission``. Error texts follow the Go ones where a
test reads them (``failed to call webhook: Post "<url>": ...``); the lower-level reasons are Python's.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import ssl
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.kube_apiserver.configuration import ClientCredentials, Webhook
from tests.kube_apiserver.matching import Attributes, Invocation, versioned


class CallError(Exception):
    """``webhookutil.ErrCallingWebhook``: kube-apiserver could not get a usable answer (failurePolicy applies)."""

    def __init__(self, webhook: str, reason: str, status_code: int = 503) -> None:
        super().__init__(f"failed calling webhook \"{webhook}\": {reason}")
        self.webhook = webhook
        self.reason = reason
        self.status_code = status_code


@dataclass(frozen=True)
class VerifiedResponse:
    """``AdmissionResponse``: what kube-apiserver takes from a webhook's answer."""

    allowed: bool
    result: Mapping[str, Any] | None
    patch: bytes
    patch_type: str
    audit_annotations: Mapping[str, str]
    warnings: tuple[str, ...]


@dataclass
class Exchange:
    """A call as it happened, for the tests to look at (kube-apiserver keeps nothing of it)."""

    webhook: str
    url: str
    request: dict[str, Any]
    status: int | None = None
    response: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def admission_review(attributes: Attributes, invocation: Invocation, version: str) -> tuple[str, dict[str, Any]]:
    """``CreateV1AdmissionReview`` / ``CreateV1beta1AdmissionReview``: a fresh uid and the request."""
    sent = versioned(attributes, invocation)
    uid = str(uuid.uuid4())
    user = sent.user
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": invocation.kind.group, "version": invocation.kind.version, "kind": invocation.kind.kind},
        "resource": {"group": invocation.resource.group, "version": invocation.resource.version,
                     "resource": invocation.resource.resource},
        "requestKind": {"group": attributes.kind.group, "version": attributes.kind.version,
                        "kind": attributes.kind.kind},
        "requestResource": {"group": attributes.resource.group, "version": attributes.resource.version,
                            "resource": attributes.resource.resource},
        "name": attributes.name,
        "namespace": attributes.namespace,
        "operation": attributes.operation,
        # Go's UserInfo: extra always present (possibly empty); empty strings and lists omitted.
        "userInfo": {key: value for key, value in {
            "username": user.get("username", ""), "uid": user.get("uid", ""), "groups": list(user.get("groups") or []),
            "extra": {key: list(values) for key, values in (user.get("extra") or {}).items()},
        }.items() if value or key == "extra"},
        "object": sent.object,
        "oldObject": sent.old_object,
        "dryRun": sent.dry_run,
        "options": sent.options,
    }
    if invocation.subresource:
        request["subResource"] = invocation.subresource
    if attributes.subresource:
        request["requestSubResource"] = attributes.subresource
    if not request["name"]:
        del request["name"]
    if not request["namespace"]:
        del request["namespace"]
    return uid, {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview", "request": request}


def review_version(webhook: Webhook) -> str | None:
    """``CreateAdmissionObjects``: the first of the webhook's versions kube-apiserver knows."""
    for version in webhook.spec.get("admissionReviewVersions") or []:
        if version in ("v1", "v1beta1"):
            return str(version)
    return None


def call(webhook: Webhook, credentials: ClientCredentials, review: dict[str, Any], deadline: float,
         exchanges: list[Exchange]) -> dict[str, Any]:
    """POST the review; the decoded AdmissionReview, or CallError. ``deadline`` is a time.monotonic() value."""
    url = webhook.url
    parsed = urlsplit(url)
    remaining = deadline - time.monotonic()
    # The backend is told how long it has: the remaining time rounded up to a whole second.
    query = f"timeout={math.ceil(remaining)}s" if remaining > 0 else ""
    target = (parsed.path or "/") + (f"?{query}" if query else "")
    shown_url = f"{parsed.scheme}://{parsed.netloc}{target}"
    exchange = Exchange(webhook.name, shown_url, review)
    exchanges.append(exchange)
    body = json.dumps(review).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, */*",
               "User-Agent": "kube-apiserver-admission", "Content-Length": str(len(body))}
    if credentials.bearer_token:
        headers["Authorization"] = f"Bearer {credentials.bearer_token}"
    started = time.monotonic()
    try:
        if remaining <= 0:
            raise TimeoutError("context deadline exceeded")
        context = _tls_context(webhook, credentials)
        connection = http.client.HTTPSConnection(parsed.hostname or "", parsed.port or 443, context=context,
                                                 timeout=remaining)
        try:
            connection.request("POST", target, body=body, headers=headers)
            _limit(connection, deadline)
            response = connection.getresponse()
            _limit(connection, deadline)
            payload = response.read()
        finally:
            connection.close()
    except TimeoutError as error:
        exchange.error = f"context deadline exceeded ({error})"
        raise CallError(webhook.name, f"failed to call webhook: Post \"{shown_url}\": context deadline exceeded") \
            from error
    except (OSError, ssl.SSLError, http.client.HTTPException) as error:
        exchange.error = str(error)
        raise CallError(webhook.name, f"failed to call webhook: Post \"{shown_url}\": {_describe(error)}") from error
    finally:
        exchange.seconds = time.monotonic() - started
    exchange.status = response.status
    exchange.headers = dict(response.getheaders())
    if not 200 <= response.status < 300:
        # client-go turns a non-2xx answer into a StatusError (from a Status body, else a generic one).
        raise CallError(webhook.name, f"failed to call webhook: an error on the server "
                                      f"({payload[:200].decode(errors='replace')!r}) has prevented the request "
                                      f"from succeeding (post {parsed.path})", response.status)
    try:
        decoded = json.loads(payload)
    except ValueError as error:
        raise CallError(webhook.name, f"failed to call webhook: {error}") from error
    if not isinstance(decoded, dict):
        raise CallError(webhook.name, "failed to call webhook: the response is not a JSON object")
    exchange.response = decoded
    return decoded


def _tls_context(webhook: Webhook, credentials: ClientCredentials) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if webhook.ca_bundle:
        context.load_verify_locations(cadata=webhook.ca_bundle.decode())
    else:
        context.load_default_certs()
    if credentials.certificate is not None:
        # ssl takes key material from files only; these live for the call.
        with tempfile.TemporaryDirectory() as directory:
            cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
            with open(cert_path, "wb") as cert_file:
                cert_file.write(credentials.certificate)
            with open(os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as key_file:
                key_file.write(credentials.key or b"")
            context.load_cert_chain(cert_path, key_path if credentials.key else None)
    return context


def _limit(connection: http.client.HTTPSConnection, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("context deadline exceeded")
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


def _describe(error: BaseException) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: {error.verify_message}"
    if isinstance(error, ssl.SSLError) and error.reason and "ALERT_" in error.reason:
        # An alert from the server, named as Go names it: "remote error: tls: certificate required".
        return "remote error: tls: " + error.reason.split("ALERT_", 1)[1].replace("_", " ").lower()
    if isinstance(error, ssl.SSLEOFError):
        return "EOF"
    if isinstance(error, ConnectionRefusedError):
        return "dial tcp: connect: connection refused"
    if isinstance(error, ConnectionResetError):
        return "read: connection reset by peer"
    return str(error) or type(error).__name__


def verify(uid: str, mutating: bool, review: Mapping[str, Any], sent_version: str) -> VerifiedResponse:
    """``VerifyAdmissionResponse``; ValueError with kube-apiserver's message when the answer is unusable."""
    response = review.get("response")
    if sent_version == "v1":
        if response is None:
            raise ValueError("webhook response was absent")
        if response.get("uid") != uid:
            raise ValueError(f"expected response.uid=\"{uid}\", got \"{response.get('uid', '')}\"")
        got = (review.get("apiVersion"), review.get("kind"))
        if got != ("admission.k8s.io/v1", "AdmissionReview"):
            raise ValueError(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, "
                             f"got {got[0]}, Kind={got[1]}")
    elif response is None:
        raise ValueError("webhook response was absent")
    patch = base64.b64decode(response["patch"]) if response.get("patch") else b""
    patch_type = response.get("patchType")
    if sent_version == "v1":
        if mutating:
            if patch and patch_type is None:
                raise ValueError("webhook returned response.patch but not response.patchType")
            if not patch and patch_type is not None:
                raise ValueError("webhook returned response.patchType but not response.patch")
            if patch_type is not None and not patch_type:
                raise ValueError(f"webhook returned invalid response.patchType of \"{patch_type}\"")
        else:
            if patch:
                raise ValueError("validating webhook may not return response.patch")
            if patch_type is not None:
                raise ValueError("validating webhook may not return response.patchType")
    elif mutating and patch:
        patch_type = "JSONPatch"  # v1beta1 never checked the patch type: pinned to the only one supported
    if not mutating:
        patch, patch_type = b"", None
    return VerifiedResponse(
        allowed=bool(response.get("allowed")),
        result=response.get("status"),
        patch=patch,
        patch_type=patch_type or "",
        audit_annotations=dict(response.get("auditAnnotations") or {}),
        warnings=tuple(response.get("warnings") or ()),
    )
