"""What the daemon says about :mod:`staticadm.analysis`'s findings: each once when it appears (a log line
naming file, policy or binding and what is refused or not sent), again when it is gone, the number of each
kind in ``staticadm_findings{finding}``, and a ``/readyz?verbose`` note per kind while there are some.

An analysis finding what the last one found logs nothing, so polls and reloads that change nothing stay
quiet; a finding whose text changes (another write refused, another rule missing) is a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from staticadm.analysis import Finding, FindingKind

#: Each kind's log message; type-checking keeps the message it always had.
_MESSAGES = {
    FindingKind.UNREGISTERED: "policy not sent its requests by the installed webhook registration",
    FindingKind.CONTROL_PLANE_WRITE_REFUSED: "policy refuses a control-plane write",
    FindingKind.UNBOUND_POLICY: "policy has no binding",
    FindingKind.TYPE_CHECK_WARNING: "policy type checking",
    FindingKind.SKIPPED_FILE: "file skipped for its extension",
}
#: How many findings of a kind a readiness note names (the count says how many more).
NOTE_SHOWN = 3


def note_name(kind: FindingKind) -> str:
    return kind.value.replace("_", "-")


def notes(findings: Iterable[Finding]) -> dict[str, str]:
    """One line per kind of finding, for ``/readyz?verbose`` (``note: <kind>: ...``)."""
    by_kind: dict[FindingKind, list[Finding]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    lines = {}
    for kind, found in by_kind.items():
        shown = [f"{finding.subject or finding.file}: {finding.detail or finding.message}" for finding in
                 found[:NOTE_SHOWN]]
        more = f" (and {len(found) - NOTE_SHOWN} more, see the log)" if len(found) > NOTE_SHOWN else ""
        lines[note_name(kind)] = f"{len(found)}: " + "; ".join(shown) + more
    return lines


class FindingsReporter:
    def __init__(self, logger: Any, set_count: Callable[[str, int], None]) -> None:
        self._log = logger
        self._set_count = set_count
        self._current: frozenset[Finding] = frozenset()
        self.notes: dict[str, str] = {}
        for kind in FindingKind:
            set_count(kind.value, 0)

    def report(self, findings: Iterable[Finding], kinds: Iterable[FindingKind] = tuple(FindingKind)) -> None:
        """``findings`` are now all there is of ``kinds``; the other kinds' stay as they were."""
        covered = frozenset(kinds)
        found = frozenset(finding for finding in findings if finding.kind in covered) | frozenset(
            finding for finding in self._current if finding.kind not in covered)
        for finding in sorted(found - self._current):
            fields = {"finding": finding.kind.value, "file": finding.file, "err": finding.message}
            if finding.subject:
                kind, _, name = finding.subject.partition("/")
                fields.update(kind=kind, name=name)
                fields["policy" if "Binding" not in kind else "binding"] = name
            if finding.kind is FindingKind.CONTROL_PLANE_WRITE_REFUSED:
                fields["write"] = finding.detail
            elif finding.kind is FindingKind.UNREGISTERED:
                fields["missing"] = finding.detail
            elif finding.kind is FindingKind.TYPE_CHECK_WARNING:
                fields.update(field=finding.detail, warning=finding.message)
            self._log.warning(_MESSAGES[finding.kind], **fields)
        for finding in sorted(self._current - found):
            self._log.info("finding resolved", finding=finding.kind.value, file=finding.file,
                           subject=finding.subject, detail=finding.detail or finding.message)
        self._current = found
        for kind in FindingKind:
            self._set_count(kind.value, sum(1 for finding in found if finding.kind is kind))
        self.notes = notes(sorted(found))
