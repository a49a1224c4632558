"""The metav1.Status values kube-apiserver's admission path returns (k8s.io/apimachinery/pkg/api/errors and
plugin/webhook/errors/statuserror.go), as the JSON a client of kube-apiserver would read."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from staticadm.gofmt import quote as _go_quote


@dataclass(frozen=True)
class StatusError(Exception):
    """An admission failure as kube-apiserver returns it to the client that made the request."""

    status: dict[str, Any]

    @property
    def code(self) -> int:
        return int(self.status["code"])

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    def __str__(self) -> str:
        return self.message


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> StatusError:
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "code": code}
    if details is not None:
        status["details"] = details
    return StatusError(status)


def internal_error(error: str) -> StatusError:
    """``apierrors.NewInternalError``."""
    return _status(500, "InternalError", f"Internal error occurred: {error}", {"causes": [{"message": error}]})


def forbidden(group: str, resource: str, name: str, error: str) -> StatusError:
    """``apierrors.NewForbidden`` for a group/resource and an object name."""
    qualified = f"{resource}.{group}" if group else resource
    message = f"{qualified} {_go_quote(name)} is forbidden: {error}" if qualified else f"forbidden: {error}"
    return _status(403, "Forbidden", message, {"name": name, "group": group, "kind": resource})


def not_found(group: str, resource: str, name: str) -> StatusError:
    """``apierrors.NewNotFound``."""
    qualified = f"{resource}.{group}" if group else resource
    return _status(404, "NotFound", f"{qualified} {_go_quote(name)} not found",
                   {"name": name, "group": group, "kind": resource})


def timeout(message: str) -> StatusError:
    """``apierrors.NewTimeoutError`` (no retry-after)."""
    return _status(504, "Timeout", f"Timeout: {message}", {})


def bad_request(reason: str) -> StatusError:
    """``apierrors.NewBadRequest``."""
    return _status(400, "BadRequest", reason)


def service_unavailable(reason: str) -> StatusError:
    """``apierrors.NewServiceUnavailable``."""
    return _status(503, "ServiceUnavailable", reason)


def webhook_denied(webhook: str, result: dict[str, Any] | None) -> StatusError:
    """``webhookerrors.ToStatusErr``: the webhook's status, sanitized, its message prefixed with who denied."""
    denied_by = f"admission webhook {_go_quote(webhook)} denied the request"
    status = copy.deepcopy(result) if result else {"status": "Failure"}
    # A rejection never carries a status code below 400, nor a Success status.
    if int(status.get("code") or 0) < 400:
        status["code"] = 400
    if status.get("status") in (None, "", "Success"):
        status["status"] = "Failure"
    if status.get("message"):
        status["message"] = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        status["message"] = f"{denied_by}: {status['reason']}"
    else:
        status["message"] = f"{denied_by} without explanation"
    return StatusError({"kind": "Status", "apiVersion": "v1", "metadata": {}, **status})


def dry_run_unsupported(webhook: str) -> StatusError:
    return bad_request(f"admission webhook {_go_quote(webhook)} does not support dry run")

