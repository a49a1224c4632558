"""Create an RFC 6902 JSON patch that turns one JSON value into another.

The mutating webhook answer carries such a patch; kube-apiserver applies it with evanphx/json-patch v4, so only
operations whose meaning is the same there and in RFC 6902 are emitted: ``add`` of new object keys and array
positions, ``remove`` of existing ones, ``replace`` of existing ones (root replace only for a container root).

Equality is type-strict (``1`` != ``1.0`` != ``True``): a value whose JSON spelling changes must be patched, since
e.g. ``1.0`` does not decode into a Go integer field.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_patch", "escape_pointer_token", "strict_equal"]


def escape_pointer_token(token: str) -> str:
    """RFC 6901 escaping of one reference token."""
    if "~" in token:
        token = token.replace("~", "~0")
    if "/" in token:
        token = token.replace("/", "~1")
    return token


def strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that also requires the same JSON type at every leaf (bool/int/float/str/null distinct)."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is not tb:
        # Subclasses of dict/list/str are still that JSON type.
        if isinstance(a, str) and isinstance(b, str):
            return a == b
        if not ((isinstance(a, dict) and isinstance(b, dict)) or (isinstance(a, list) and isinstance(b, list))):
            return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        return all(k in b and strict_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def create_patch(original: Any, mutated: Any) -> list[dict[str, Any]]:
    """Return a JSON patch (list of operations) that transforms ``original`` into ``mutated``.

    Operation values share structure with ``mutated``; serialize the patch or treat it as immutable.
    """
    ops: list[dict[str, Any]] = []
    _diff(original, mutated, "", ops)
    return ops


_MISSING: Any = object()


def _diff(a: Any, b: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        _diff_dict(a, b, path, ops)
    elif isinstance(a, list) and isinstance(b, list):
        _diff_list(a, b, path, ops)
    elif not strict_equal(a, b):
        ops.append({"op": "replace", "path": path, "value": b})


def _diff_dict(a: dict[str, Any], b: dict[str, Any], path: str, ops: list[dict[str, Any]]) -> None:
    if a is b:
        return
    for k in a:
        if k not in b:
            ops.append({"op": "remove", "path": f"{path}/{escape_pointer_token(k)}"})
    for k, bv in b.items():
        av = a.get(k, _MISSING)
        if av is bv:
            # Shared with the original (a patched object shares what it did not change): nothing to say.
            continue
        p = f"{path}/{escape_pointer_token(k)}"
        if av is not _MISSING:
            _diff_child(av, bv, p, ops)
        else:
            ops.append({"op": "add", "path": p, "value": bv})


def _diff_child(a: Any, b: Any, path: str, ops: list[dict[str, Any]]) -> None:
    """Diff a value that exists on both sides; fall back to one ``replace`` when recursing would say more."""
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        sub: list[dict[str, Any]] = []
        _diff_dict(a, b, path, sub)
        # Recursing pays off while it emits fewer operations than the new value has keys (e.g. one changed image in
        # a container); a wholesale rewrite is clearer as a single replace.
        if len(sub) > 1 and len(sub) >= len(b):
            ops.append({"op": "replace", "path": path, "value": b})
        else:
            ops.extend(sub)
    elif isinstance(a, list) and isinstance(b, list):
        sub = []
        _diff_list(a, b, path, sub)
        if len(sub) > 1 and len(sub) >= len(b):
            ops.append({"op": "replace", "path": path, "value": b})
        else:
            ops.extend(sub)
    elif not strict_equal(a, b):
        ops.append({"op": "replace", "path": path, "value": b})


def _diff_list(a: list[Any], b: list[Any], path: str, ops: list[dict[str, Any]]) -> None:
    if a is b:
        return
    la, lb = len(a), len(b)
    start = 0
    while start < la and start < lb and strict_equal(a[start], b[start]):
        start += 1
    end_a, end_b = la, lb
    while end_a > start and end_b > start and strict_equal(a[end_a - 1], b[end_b - 1]):
        end_a -= 1
        end_b -= 1
    ma, mb = end_a - start, end_b - start
    common = min(ma, mb)
    # Pair up the middle position by position: indices in this range are the same before and after the patch.
    for i in range(common):
        _diff_child(a[start + i], b[start + i], f"{path}/{start + i}", ops)
    # Surplus original elements go from the back so earlier indices stay valid; new ones are inserted in order and
    # the common suffix shifts along.
    for i in range(ma - 1, common - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{start + i}"})
    for i in range(common, mb):
        ops.append({"op": "add", "path": f"{path}/{start + i}", "value": b[start + i]})
