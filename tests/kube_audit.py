"""What kube-apiserver does with the audit annotations a webhook answers, ported for the tests.

The webhook dispatchers record each returned key as ``<webhook name>/<key>`` through
``Attributes.AddAnnotation``, whose ``checkKeyFormat`` refuses (kube-apiserver only logs a warning and
drops the annotation) any key that is not exactly one "/" between a DNS-1123 subdomain and a qualified
name part (``validation.IsQualifiedName``). Written from those rules, independently of staticadm's
manifest validation, so that a test of the daemon's keys does not check them with the code under test.
"""

from __future__ import annotations

import re

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_SUBDOMAIN_MAX = 253
_QUALIFIED_NAME = re.compile("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_QUALIFIED_NAME_MAX = 63


def check_key_format(key: str) -> list[str]:
    """Why kube-apiserver would drop ``key`` (the prefixed key), or nothing when it keeps it."""
    parts = key.split("/")
    if len(parts) != 2:
        return ["annotation key has invalid format, the right format is a DNS subdomain prefix and '/' and key name"]
    prefix, name = parts
    problems = []
    if not prefix:
        problems.append("prefix part must be non-empty")
    elif len(prefix) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        problems.append(f"prefix part {prefix!r} is not a DNS-1123 subdomain")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX:
        problems.append(f"name part {name!r} is longer than {_QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME.fullmatch(name):
        problems.append(f"name part {name!r} is not a qualified name")
    return problems


def recorded_key_problems(webhook_name: str, key: str) -> list[str]:
    """Why the key a webhook answered would not reach the audit log (the dispatcher's prefixing applied)."""
    return check_key_format(f"{webhook_name}/{key}")
