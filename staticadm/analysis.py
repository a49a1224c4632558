"""What ``staticadm check`` knows about a directory, for the daemon: its analyses run on what is served.

After each load (never on the request path) the daemon asks :class:`Analyser` for the findings about the
served snapshot: control-plane writes a policy refuses (check's replay), policies without bindings,
type-checking warnings, files skipped for their extension, and, given the
installed webhook registration's directory, the policies it does not send (all) their requests. Each
finding is a plain value, so the daemon can tell which are new since the last analysis.

The work depends on the served content (cached by its hash), the skipped names and the registration's
files (read again each time: two small files); nothing here writes anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from staticadm.deploy.checks import unregistered_message
from staticadm.deploy.control_plane import ControlPlaneRequest, control_plane_requests, refusal_message, replay
from staticadm.deploy.registration import read_registration, unregistered
from staticadm.manifests.check import skipped_file_warnings
from staticadm.manifests.loader import LoadCache, load_manifest_directory
from staticadm.manifests.typecheck import type_warnings
from staticadm.model import (
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    TopLevel,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from staticadm.snapshot import Snapshot, build_snapshot
from staticadm.source import Served


class FindingKind(StrEnum):
    """The ``finding`` label of ``staticadm_findings``."""

    UNREGISTERED = "unregistered"
    CONTROL_PLANE_WRITE_REFUSED = "control_plane_write_refused"
    UNBOUND_POLICY = "unbound_policy"
    TYPE_CHECK_WARNING = "type_check_warning"
    SKIPPED_FILE = "skipped_file"


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    kind: FindingKind
    #: The manifest file at fault (or the directory).
    file: str
    #: "Kind/name" of the policy or binding, "" for a file.
    subject: str
    message: str
    #: What is refused or not sent: the control-plane write, the missing rules; the field for a type warning.
    detail: str = ""


def _origin_path(obj: TopLevel) -> str:
    return obj.origin.path


def _name(obj: TopLevel) -> str:
    return f"{obj.KIND}/{obj.metadata.name}"


#: Kinds found from what the load declares, in milliseconds even at 1,000 policies: reported first.
QUICK_KINDS: frozenset[FindingKind] = frozenset({FindingKind.SKIPPED_FILE, FindingKind.UNBOUND_POLICY,
                                                 FindingKind.UNREGISTERED})
#: Kinds that compile and evaluate (the control-plane replay, type checking): reported when they are done.
SLOW_KINDS: frozenset[FindingKind] = frozenset(kind for kind in FindingKind if kind not in QUICK_KINDS)


class Analyser:
    """The findings about what a daemon serves from ``directory`` (and the registration in ``registration``).
    Not thread-safe: one analysis at a time (the daemon runs them in one thread)."""

    def __init__(self, directory: str, registration: str | None = None) -> None:
        self.directory = directory
        self.registration = registration
        #: (content hash, the slow kinds' findings) of the last content analysed.
        self._slow: tuple[str, tuple[Finding, ...]] | None = None
        #: Type-checking warnings by policy object: an unchanged policy is the same object from one load to the next.
        self._typed: dict[int, tuple[ValidatingAdmissionPolicy, tuple[Finding, ...]]] = {}
        #: The analysis' own load and snapshot of the directory (never the served ones: their memos and compiled
        #: programs belong to the thread serving requests), each reload reusing what did not change.
        self._cache = LoadCache()
        self._snapshot: Snapshot | None = None
        #: The control-plane writes replayed, parsed from the package's data once (most of a replay's time was
        #: parsing that file again after every reload).
        self._writes: tuple[ControlPlaneRequest, ...] | None = None

    def analyse(self, served: Served | None, skipped: Iterable[str]) -> tuple[Finding, ...]:
        """Every finding: the quick kinds' and the slow kinds'."""
        return tuple(sorted({*self.quick(served, skipped), *self.slow(served)}))

    def quick(self, served: Served | None, skipped: Iterable[str]) -> tuple[Finding, ...]:
        """The findings of :data:`QUICK_KINDS`."""
        found: list[Finding] = [Finding(FindingKind.SKIPPED_FILE, warning.path, "", warning.message)
                                for warning in skipped_file_warnings(self.directory, list(skipped))]
        if served is not None:
            found.extend(self._unbound(served.objects))
            if self.registration is not None:
                found.extend(self._registration_findings(served.objects))
        return tuple(sorted(set(found)))

    def slow(self, served: Served | None) -> tuple[Finding, ...]:
        """The findings of :data:`SLOW_KINDS` (computed once per content)."""
        if served is None:
            return ()
        if self._slow is None or self._slow[0] != served.content_hash:
            self._slow = (served.content_hash, self._slow_findings(served))
        return self._slow[1]

    @staticmethod
    def _unbound(objects: Mapping[tuple[str, str], TopLevel]) -> list[Finding]:
        bound = {(obj.KIND.removesuffix("Binding"), obj.spec.policy_name) for obj in objects.values()
                 if isinstance(obj, ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding)}
        return [Finding(FindingKind.UNBOUND_POLICY, _origin_path(obj), _name(obj),
                        "policy has no binding, so it is never evaluated")
                for key, obj in sorted(objects.items())
                if isinstance(obj, ValidatingAdmissionPolicy | MutatingAdmissionPolicy) and key not in bound]

    def _slow_findings(self, served: Served) -> tuple[Finding, ...]:
        policies = {(obj.KIND, obj.metadata.name): obj for obj in served.objects.values()
                    if isinstance(obj, ValidatingAdmissionPolicy | MutatingAdmissionPolicy)}
        by_name: dict[str, TopLevel] = {}
        for (kind, name), policy in policies.items():
            if kind == ValidatingAdmissionPolicy.KIND or name not in by_name:
                by_name[name] = policy
        found: list[Finding] = []
        if self._writes is None:
            self._writes = control_plane_requests()
        for block in replay(self._own_snapshot(served), self._writes):
            refusing = by_name.get(block.policy)
            found.append(Finding(FindingKind.CONTROL_PLANE_WRITE_REFUSED,
                                 _origin_path(refusing) if refusing is not None else self.directory,
                                 _name(refusing) if refusing is not None else "", refusal_message(block),
                                 f"{block.write.subject} ({block.write.description})"))
        found.extend(self._type_findings(policy for policy in policies.values()
                                         if isinstance(policy, ValidatingAdmissionPolicy)))
        return tuple(found)

    def _own_snapshot(self, served: Served) -> Snapshot:
        if served.contents is None:
            return Snapshot.empty()
        loaded = load_manifest_directory(self.directory, contents=served.contents, cache=self._cache)
        if not loaded.ok:
            # The served load was valid with these very bytes: nothing to replay if this one is not.
            return Snapshot.empty()
        self._snapshot = build_snapshot(loaded, self._snapshot)
        self._cache = loaded.cache
        return self._snapshot

    def _type_findings(self, policies: Iterable[ValidatingAdmissionPolicy]) -> list[Finding]:
        typed: dict[int, tuple[ValidatingAdmissionPolicy, tuple[Finding, ...]]] = {}
        found: list[Finding] = []
        for policy in policies:
            known = self._typed.get(id(policy))
            if known is None or known[0] is not policy:
                known = (policy, tuple(Finding(FindingKind.TYPE_CHECK_WARNING, warning.path, _name(policy),
                                               warning.message, warning.field)
                                       for warning in type_warnings(policy)))
            typed[id(policy)] = known
            found.extend(known[1])
        self._typed = typed
        return found

    def _registration_findings(self, objects: Mapping[tuple[str, str], TopLevel]) -> list[Finding]:
        assert self.registration is not None
        installed = read_registration(self.registration)
        values = list(objects.values())
        gaps = [
            *unregistered(installed, "validating",
                          [obj for obj in values if isinstance(obj, ValidatingAdmissionPolicy)],
                          [obj for obj in values if isinstance(obj, ValidatingAdmissionPolicyBinding)]),
            *unregistered(installed, "mutating",
                          [obj for obj in values if isinstance(obj, MutatingAdmissionPolicy)],
                          [obj for obj in values if isinstance(obj, MutatingAdmissionPolicyBinding)]),
        ]
        return [Finding(FindingKind.UNREGISTERED, _origin_path(entry.policy), _name(entry.policy),
                        unregistered_message(entry, self.registration, self.directory), entry.describe())
                for entry in gaps]
