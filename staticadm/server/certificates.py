"""The serving certificate over the daemon's lifetime: measured, noted when it nears its end, and, when the
daemon generated it, renewed while it runs.

A daemon that runs a year would otherwise fail every matching write (failurePolicy Fail) the day its
certificate lapses. A generated certificate is reissued by the same CA (the caBundle kube-apiserver holds
stays valid) once fewer than :data:`~staticadm.deploy.certs.RENEW_BEFORE` remain; the new files are picked
up by every serving process's :class:`~staticadm.server.listeners.ServingTls` as any rotation is, into the
live SSL context, so only new handshakes see the new certificate and no request fails. A certificate given
with ``--tls-cert`` belongs to the operator: it is never written, only measured and warned about (and
reloaded when the operator replaces its files).

A renewal that fails (a full disk, a read-only file system, a directory another user could now write or that
was replaced since it was checked, a CA that cannot sign) never takes the serving certificate away: nothing is
renamed into place until every new file is written, the current pair keeps serving, the failure is logged once
per attempt with its cause, counted (``staticadm_tls_certificate_renewal_failures_total{cause}``) and the next
attempt follows a back-off doubling from :data:`RETRY_FIRST` to :data:`RETRY_MAX`.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from staticadm.atomicfile import UnsafeDirectoryError
from staticadm.deploy.certs import RENEW_BEFORE, ensure_self_signed
from staticadm.server.listeners import ServingTls

#: The longest the renewal waits between two looks at the certificate (the issue of a lapsing certificate
#: is days wide; a minute bounds how long a clock jump or a failed renewal goes unnoticed).
CHECK_INTERVAL = 60.0
#: How often a certificate the daemon may not renew is warned about while it nears its end.
WARN_INTERVAL = 24 * 3600.0
#: The wait after a first failed renewal; it doubles with each failure in a row, up to RETRY_MAX (renewal starts
#: 30 days before expiry, so an hour between attempts still leaves hundreds of them).
RETRY_FIRST = 10.0
RETRY_MAX = 3600.0
#: Every cause a failed renewal is counted under.
RENEWAL_FAILURE_CAUSES = ("no_space", "read_only", "unsafe_directory", "io", "ca")


def renewal_failure_cause(error: BaseException) -> str:
    """The metric label of why a renewal failed."""
    if isinstance(error, UnsafeDirectoryError):
        return "unsafe_directory"
    if isinstance(error, OSError):
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return "no_space"
        if error.errno == errno.EROFS:
            return "read_only"
        return "io"
    return "ca"


def expiry_note(tls: ServingTls, now: float | None = None) -> str:
    """For /readyz?verbose: each certificate in use with fewer than RENEW_BEFORE left (or already expired)."""
    now = time.time() if now is None else now
    notes = []
    for name, expires in sorted(tls.expiries.items()):
        left = expires - now
        if left >= RENEW_BEFORE.total_seconds():
            continue
        when = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = tls.cert if name == "serving" else tls.client_ca
        if left <= 0:
            notes.append(f"{name} certificate {path} expired at {when}")
        else:
            notes.append(f"{name} certificate {path} expires at {when} (in {left / 86400:.1f} days)")
    return "; ".join(notes)


class CertificateLifetime:
    """The serving certificate's watch in the process that owns it (the single process, or the workers'
    supervisor): renews a generated one (``state_dir`` given) when it is due, warns about a given one."""

    def __init__(self, tls: ServingTls, logger: Any, *, state_dir: Path | None,
                 clock: Callable[[], float] = time.time, just_issued: bool = False,
                 on_renewal_failure: Callable[[str], None] = lambda _cause: None) -> None:
        self.tls = tls
        self.state_dir = state_dir
        self._log = logger
        self._clock = clock
        self._on_renewal_failure = on_renewal_failure
        #: Failed renewals in a row, and when the next may be attempted.
        self.failures = 0
        self._retry_at = 0.0
        self._warned_at: float | None = None
        #: The serving certificate's expiry a renewal could not move past the renewal window (its CA ends first).
        #: A certificate issued at start-up (``just_issued``) and due already is as far as its CA lets it go.
        self._futile_expiry: float | None = None
        issued = tls.expiries.get("serving")
        if just_issued and issued is not None and issued - RENEW_BEFORE.total_seconds() <= clock():
            self._futile_expiry = issued

    async def run(self) -> None:
        while True:
            # On the event loop, as ServingTls' own watch: the live SSL context is only ever changed from the
            # thread that runs the handshakes. A renewal (an EC key, a signature, two small files) takes ms.
            await asyncio.sleep(self.check())

    def check(self) -> float:
        """One look: renew or warn if due; returns how long to wait before the next (at most CHECK_INTERVAL)."""
        self.tls.reload_if_changed()  # the expiry of what the files hold now, whoever replaced them
        expires = self.tls.expiries.get("serving")
        if expires is None:
            return CHECK_INTERVAL
        now = self._clock()
        due = expires - RENEW_BEFORE.total_seconds()
        if now < due:
            # Wake when it becomes due rather than up to a minute late: a short-lived certificate renews on time.
            return max(0.05, min(CHECK_INTERVAL, due - now))
        if self.state_dir is not None and expires != self._futile_expiry:
            if now < self._retry_at:
                return max(0.05, min(CHECK_INTERVAL, self._retry_at - now))
            if not self._renew(now):
                backoff = min(RETRY_MAX, RETRY_FIRST * 2 ** (self.failures - 1))
                self._retry_at = now + backoff
                return backoff
            renewed = self.tls.expiries.get("serving", expires)
            if renewed - RENEW_BEFORE.total_seconds() > now:
                return CHECK_INTERVAL
            # The CA itself ends within RENEW_BEFORE and a serving certificate never outlives it: reissuing
            # again would change nothing. Said once a day until the files change (a new CA put in place).
            self._futile_expiry = renewed
            expires = renewed
        if self._warned_at is None or now - self._warned_at >= WARN_INTERVAL:
            self._warned_at = now
            if self.state_dir is not None:
                self._log.error("the generated CA expires within 30 days, so its serving certificate cannot be "
                                "renewed past it: replace the CA (docs/deployment.md, \"Certificates\")",
                                note=expiry_note(self.tls, now), cert=str(self.tls.cert))
            else:
                self._log.warning("the serving certificate given with --tls-cert expires soon; renew it (the "
                                  "daemon reloads it within a second of its files changing)",
                                  note=expiry_note(self.tls, now), cert=str(self.tls.cert))
        return CHECK_INTERVAL

    def _renew(self, now: float) -> bool:
        """One attempt; False (logged and counted) when it failed and the current certificate keeps serving."""
        assert self.state_dir is not None
        try:
            # create_ca=False: a CA gone missing is a failure, never a new CA the caBundle does not hold.
            ensure_self_signed(self.state_dir, now=datetime.datetime.fromtimestamp(now, datetime.UTC),
                               create_ca=False)
        except Exception as error:  # whatever it is, the current certificate keeps serving
            self.failures += 1
            cause = renewal_failure_cause(error)
            retry = min(RETRY_MAX, RETRY_FIRST * 2 ** (self.failures - 1))
            self._log.error("cannot renew the generated serving certificate; the current one keeps serving",
                            state_dir=str(self.state_dir), cause=cause, err=f"{type(error).__name__}: {error}",
                            failures_in_a_row=self.failures, retry_in_seconds=retry,
                            note=expiry_note(self.tls, now))
            self._on_renewal_failure(cause)
            return False
        self.failures = 0
        self._retry_at = 0.0
        previous = self.tls.expiries.get("serving")
        self.tls.reload_if_changed()
        self._log.info("renewed the generated serving certificate with the same CA (the caBundle stays valid)",
                       cert=str(self.tls.cert), previous_expiry=previous, expiry=self.tls.expiries.get("serving"))
        return True
