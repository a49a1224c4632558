"""What the daemon logs about each reload: every manifest error once, then one line per outcome.

A directory that stays invalid is retried (and polled) for as long as it stays so; each retry failing
with the same errors logs one line, not every error again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from staticadm.source import ReloadResult, ReloadStatus


class ReloadReporter:
    def __init__(self, logger: Any, directory: Path) -> None:
        self._log = logger
        self._directory = str(directory)
        #: The errors of the last failed load, so a retry failing identically logs one line.
        self._last_errors: tuple[str, ...] | None = None

    def report(self, result: ReloadResult, *, retry_seconds: float) -> None:
        log = self._log.bind(directory=self._directory, reason=result.reason)
        if result.status is ReloadStatus.FAILURE:
            self._failure(log, result, retry_seconds)
            return
        recovered = self._last_errors is not None
        self._last_errors = None
        if result.status is ReloadStatus.SUCCESS:
            self._success(log, result)
        elif recovered or result.reason == "signal":
            # The directory is valid again as it was (a failed file restored), or SIGHUP found nothing new.
            served = result.served
            log.info("manifest directory unchanged; the served configuration is current",
                     hash=served.content_hash if served else None)

    def _failure(self, log: Any, result: ReloadResult, retry_seconds: float) -> None:
        signature = tuple(str(error) for error in result.errors)
        repeated = signature == self._last_errors
        self._last_errors = signature
        if not repeated:
            for error in result.errors:
                log.error("manifest error", file=error.path, field=error.field, kind=error.kind, name=error.name,
                          err=str(error))
        if result.served is not None and result.failed_transiently:
            # Nothing announces when descriptors or memory are back: the watcher tries again by itself.
            log.error("reloading manifest config failed; keeping the last good configuration and retrying",
                      errors=len(result.errors), repeated=repeated, served_hash=result.served.content_hash,
                      retry_seconds=retry_seconds)
        elif result.served is not None:
            log.error("reloading manifest config failed; keeping the last good configuration",
                      errors=len(result.errors), repeated=repeated, served_hash=result.served.content_hash)
        else:
            log.error("loading manifest config failed; not ready (admission requests get 503) and retrying",
                      errors=len(result.errors), repeated=repeated, retry_seconds=retry_seconds)

    def _success(self, log: Any, result: ReloadResult) -> None:
        for warning in result.warnings:
            log.warning("manifest warning", file=warning.path, field=warning.field, err=str(warning))
        served = result.served
        assert served is not None
        for policy, binding in result.dropped_bindings:
            log.warning("a binding was removed while its policy stays; if its file was being rewritten, "
                        "write manifest files atomically (a temporary file, then a rename)",
                        policy=policy, binding=binding)
        if not served.content_hash:
            log.warning("manifest directory holds no manifests; every request is allowed")
        added, changed, removed = result.changes
        log.info("reloaded manifest config", hash=served.content_hash, policies=served.policies,
                 bindings=served.bindings, added=added, changed=changed, removed=removed)
