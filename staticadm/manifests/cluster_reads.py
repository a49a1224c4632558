"""Which policies read what only kube-apiserver knows: ``namespaceObject`` and ``authorizer`` checks.

Out of process these need the cluster view (``serve --kubeconfig``; for ``namespaceObject`` a
``--namespaces`` file also serves); without it such expressions fail and the policy's failurePolicy
decides every request it matches. ``check`` warns about them, and the daemon at every load and reload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from staticadm.compiled import mentions_namespace_object, policy_expression_sources
from staticadm.model import Binding, MutatingAdmissionPolicy, TopLevel, ValidatingAdmissionPolicy

_AUTHORIZER = re.compile(r"\bauthorizer\b")
NAMESPACE_OBJECT = "namespaceObject"
AUTHORIZER = "authorizer"


@dataclass(frozen=True, slots=True)
class ClusterReads:
    kind: str
    policy: str
    #: The bindings that make the policy fire (none: it never does).
    bindings: tuple[str, ...]
    #: What it reads of the cluster, in a fixed order: namespaceObject, authorizer.
    reads: tuple[str, ...]

    def describe(self) -> str:
        through = f" (bound by {', '.join(self.bindings)})" if self.bindings else " (no binding)"
        return f"{self.kind} {self.policy}{through} reads {' and '.join(self.reads)}"


#: What each policy of the latest call reads, by the policy object (kept with it, so an id is never reused while it
#: is a key): the daemon asks at every reload, on its event loop, and a reload keeps every unchanged policy's
#: object. Replaced by each call with the policies it saw, so it follows the directory being served.
_known: list[dict[int, tuple[TopLevel, tuple[str, ...]]]] = [{}]


def _reads(policy: ValidatingAdmissionPolicy | MutatingAdmissionPolicy) -> tuple[str, ...]:
    sources = policy_expression_sources(policy)
    reads = []
    if mentions_namespace_object(sources):
        reads.append(NAMESPACE_OBJECT)
    if any(_AUTHORIZER.search(source) for source in sources):
        reads.append(AUTHORIZER)
    return tuple(reads)


def cluster_reads(objects: Iterable[TopLevel]) -> list[ClusterReads]:
    """Every policy among ``objects`` that reads namespaceObject or calls authorizer, with its bindings."""
    objects = list(objects)
    known, seen = _known[0], {}
    bindings: dict[tuple[str, str], list[str]] = {}
    for binding in objects:
        if isinstance(binding, Binding):
            bindings.setdefault((binding.KIND.removesuffix("Binding"), binding.spec.policy_name), []).append(
                binding.name)
    found = []
    for policy in objects:
        if not isinstance(policy, ValidatingAdmissionPolicy | MutatingAdmissionPolicy):
            continue
        entry = known.get(id(policy))
        if entry is None or entry[0] is not policy:
            entry = (policy, _reads(policy))
        seen[id(policy)] = entry
        reads = entry[1]
        if reads:
            found.append(ClusterReads(policy.KIND, policy.name, tuple(sorted(bindings.get((policy.KIND, policy.name),
                                                                                     []))), reads))
    _known[0] = seen
    return found


def unanswerable(found: Iterable[ClusterReads], *, kubeconfig: bool, namespaces_file: bool) -> list[ClusterReads]:
    """The reads a daemon with this configuration cannot answer (each policy with only those reads)."""
    missing = []
    for entry in found:
        reads = tuple(read for read in entry.reads
                      if not kubeconfig and not (read == NAMESPACE_OBJECT and namespaces_file))
        if reads:
            missing.append(ClusterReads(entry.kind, entry.policy, entry.bindings, reads))
    return missing
