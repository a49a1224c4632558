"""The Kubernetes CEL function libraries, in the order kube-apiserver registers them."""

from __future__ import annotations

from types import ModuleType

from staticadm.cel.libraries import (
    authz,
    cidr,
    format,
    ip,
    jsonpatch,
    lists,
    objects,
    quantity,
    regex,
    semver,
    strings,
    urls,
)

#: Libraries every admission expression sees.
BASE_LIBRARIES: tuple[ModuleType, ...] = (strings, lists, regex, urls, quantity, ip, cidr, format, semver, authz)
#: Libraries only MutatingAdmissionPolicy mutation expressions see.
MUTATION_LIBRARIES: tuple[ModuleType, ...] = (jsonpatch, objects)
