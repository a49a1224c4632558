"""RFC 6902 JSON Patch with the semantics of ``gopkg.in/evanphx/json-patch.v4``.

kube-apiserver applies a MutatingAdmissionPolicy ``patchType: JSONPatch`` mutation with evanphx v4
(``apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch.go``), and its quirks differ from RFC 6902 and
from the ``jsonpatch`` PyPI library. Reproduced here (checked against kubernetes/kubernetes
``vendor/gopkg.in/evanphx/json-patch.v4/patch.go``):

* ``replace`` of a missing *object* key succeeds and adds the key (v4 ``partialDoc.get`` never fails); ``replace`` of
  an out-of-range array index fails.
* ``copy`` from a missing object key copies ``null``; ``test`` of a missing object key passes iff the expected value is
  ``null`` or absent.
* negative array indices count from the end (``SupportNegativeIndices`` defaults to true); for ``add`` the end is one
  past the last element, so ``-1`` appends.
* an intermediate path segment that is missing, ``null``, a scalar or a bad index makes the whole path "missing".
* array indices are parsed like Go ``strconv.Atoi`` (optional sign, leading zeros allowed, nothing else).
* the path's first segment is dropped without being checked (``strings.Split(path, "/")[1:]``), so ``"a/b"`` acts on
  ``/b``; a path without ``/`` is missing. ``replace`` and ``test`` accept the root path ``""``; ``add``/``remove``
  don't.
* ``test`` compares JSON values structurally. Numbers compare by value (1 == 1.0): the document side is Go-encoded and
  the operation value comes from a CEL value through ``structpb`` (always a double), and both encode integral values
  without a fraction, so this is what the byte comparison in ``lazyNode.equal`` amounts to. A string never equals a
  number (``"1"`` != ``1``) and booleans are not numbers.

A failed ``test`` raises :class:`JSONPatchTestFailed` (a :class:`JSONPatchError`): MAP treats ``errors.Is(err,
ErrTestFailed)`` as "leave the object unchanged", while every other error fails the mutation (the Go caller wraps those
as ``"JSONPath: <message>"``).

Inputs are never modified. The result shares unchanged sub-trees with the input document and with operation values,
so callers must treat it as immutable too (copy before mutating).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from staticadm.json_types import json_type_name

__all__ = ["JSONPatchError", "JSONPatchTestFailed", "apply_patch", "json_equal", "path_keys"]

_MISSING = "missing value"
_INVALID_INDEX = "invalid index referenced"
_TEST_FAILED = "test failed"

# Go's int is 64-bit on every platform kube-apiserver ships for.
_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 63) - 1
_ATOI = re.compile(r"[+-]?[0-9]+\Z")


class JSONPatchError(ValueError):
    """A JSON patch could not be applied; ``str(err)`` is the evanphx/json-patch v4 error text."""


class JSONPatchTestFailed(JSONPatchError):
    """A ``test`` operation did not match (evanphx ``ErrTestFailed``)."""


class _AtoiError(Exception):
    pass


def _atoi(s: str) -> int:
    if not _ATOI.match(s):
        raise _AtoiError(f'strconv.Atoi: parsing "{s}": invalid syntax')
    n = int(s)
    if n < _INT_MIN or n > _INT_MAX:
        raise _AtoiError(f'strconv.Atoi: parsing "{s}": value out of range')
    return n


def _decode_key(k: str) -> str:
    # strings.NewReplacer("~1", "/", "~0", "~") does a single left-to-right pass, so "~01" decodes to "~1".
    if "~" not in k:
        return k
    # Equal to the single pass: "~1" first makes no "~", and "~0" then makes no "~1" that is read again.
    return k.replace("~1", "/").replace("~0", "~")


def path_keys(path: str) -> tuple[str, ...]:
    """The keys ``apply_patch`` reads ``path`` as: its segments unescaped, the first one dropped unread."""
    return tuple(_decode_key(part) for part in path.split("/")[1:])


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality as evanphx v4 ``test`` sees it (numbers by value, bool/number/string distinct)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping) or len(a) != len(b):
            return False
        return all(k in b and json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, Sequence):
        if not isinstance(b, Sequence) or isinstance(b, Mapping) or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return False


class _Doc:
    """Copy-on-write view of the document: containers are copied once per apply, the first time a path touches them."""

    __slots__ = ("owned", "root")

    def __init__(self, root: Any) -> None:
        self.root = root
        # Keyed by id(); holding the object keeps the id from being reused while we look at it.
        self.owned: dict[int, Any] = {}

    def _own(self, c: Any) -> Any:
        if id(c) in self.owned:
            return c
        c2: Any = dict(c) if isinstance(c, dict) else list(c)
        self.owned[id(c2)] = c2
        return c2

    def find(self, path: str, *, for_write: bool) -> tuple[dict[str, Any] | list[Any], str] | None:
        """evanphx ``findObject``: the container holding the last segment, and that segment decoded."""
        split = path.split("/")
        if len(split) < 2:
            return None
        if for_write and id(self.root) not in self.owned:
            self.root = self._own(self.root)
        doc: Any = self.root
        for part in split[1:-1]:
            key = _decode_key(part)
            try:
                nxt = doc.get(key) if doc.__class__ is dict else _get(doc, key)
            except (JSONPatchError, _AtoiError):
                return None
            if nxt.__class__ is not dict and not isinstance(nxt, (dict, list)):
                # missing (None from a partialDoc), JSON null, or a scalar that cannot be unmarshalled into a container
                return None
            if for_write and id(nxt) not in self.owned:
                owned = self._own(nxt)
                if doc.__class__ is dict:
                    doc[key] = owned
                else:
                    _set_existing(doc, key, owned)
                nxt = owned
            doc = nxt
        return doc, _decode_key(split[-1])


def _array_index(arr: list[Any], key: str, *, for_add: bool) -> int:
    idx = _atoi(key)
    size = len(arr) + 1 if for_add else len(arr)
    if idx >= size:
        raise JSONPatchError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
    if idx < 0:
        if idx < -size:
            raise JSONPatchError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
        idx += size
    return idx


def _get(con: dict[str, Any] | list[Any], key: str) -> Any:
    """``container.get``: a missing object key is ``None`` (not an error); a bad array index is an error."""
    if isinstance(con, dict):
        return con.get(key)
    return con[_array_index(con, key, for_add=False)]


def _set_existing(con: dict[str, Any] | list[Any], key: str, val: Any) -> None:
    if isinstance(con, dict):
        con[key] = val
    else:
        con[_array_index(con, key, for_add=False)] = val


def _add(con: dict[str, Any] | list[Any], key: str, val: Any) -> None:
    if isinstance(con, dict):
        con[key] = val
        return
    if key == "-":
        con.append(val)
        return
    try:
        idx = _atoi(key)
    except _AtoiError as e:
        raise JSONPatchError(f"value was not a proper array index: '{key}': {e}") from None
    size = len(con) + 1
    if idx >= size or idx < -size:
        raise JSONPatchError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
    if idx < 0:
        idx += size
    con.insert(idx, val)


def _remove(con: dict[str, Any] | list[Any], key: str) -> None:
    if isinstance(con, dict):
        if key not in con:
            raise JSONPatchError(f"Unable to remove nonexistent key: {key}: {_MISSING}")
        del con[key]
        return
    idx = _atoi(key)
    if idx >= len(con) or idx < -len(con):
        raise JSONPatchError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
    del con[idx]


def _str_field(op: Mapping[str, Any], name: str) -> str | None:
    v = op.get(name)
    return v if isinstance(v, str) else None


def _path_error(op: Mapping[str, Any], name: str) -> str:
    """What ``Operation.Path()``/``From()`` return when the field is unusable."""
    if name not in op or op[name] is None:
        if name == "path":
            return f"operation missing path field: {_MISSING}"
        return f"operation, missing from field: {_MISSING}"
    return f"json: cannot unmarshal {json_type_name(op[name])} into Go value of type string"


def _apply_one(doc: _Doc, op: Mapping[str, Any]) -> None:
    kind = op.get("op")
    if not isinstance(kind, str):
        kind = "unknown"
    if kind == "add":
        _op_add(doc, op)
    elif kind == "remove":
        _op_remove(doc, op)
    elif kind == "replace":
        _op_replace(doc, op)
    elif kind == "move":
        _op_move(doc, op)
    elif kind == "test":
        _op_test(doc, op)
    elif kind == "copy":
        _op_copy(doc, op)
    else:
        raise JSONPatchError(f"Unexpected kind: {kind}")


def _op_add(doc: _Doc, op: Mapping[str, Any]) -> None:
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"add operation failed to decode path: {_MISSING}")
    found = doc.find(path, for_write=True)
    if found is None:
        raise JSONPatchError(f'add operation does not apply: doc is missing path: "{path}": {_MISSING}')
    con, key = found
    if isinstance(con, dict):
        # An absent "value" is a nil node, which marshals as null.
        con[key] = op.get("value")
        return
    try:
        _add(con, key, op.get("value"))
    except JSONPatchError as e:
        raise JSONPatchError(f"error in add for path: '{path}': {e}") from None


def _op_remove(doc: _Doc, op: Mapping[str, Any]) -> None:
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"remove operation failed to decode path: {_MISSING}")
    found = doc.find(path, for_write=True)
    if found is None:
        raise JSONPatchError(f'remove operation does not apply: doc is missing path: "{path}": {_MISSING}')
    con, key = found
    try:
        _remove(con, key)
    except (JSONPatchError, _AtoiError) as e:
        raise JSONPatchError(f"error in remove for path: '{path}': {e}") from None


def _op_replace(doc: _Doc, op: Mapping[str, Any]) -> None:
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"replace operation failed to decode path: {_path_error(op, 'path')}")
    if path == "":
        val = op.get("value")
        if not isinstance(val, (dict, list)):
            # Go formats the nil error it wraps here as "%!w(<nil>)"; a missing value would panic in Go.
            raise JSONPatchError("replace operation value must be object or array: %!w(<nil>)")
        doc.root = val
        return
    found = doc.find(path, for_write=True)
    if found is None:
        raise JSONPatchError(f"replace operation does not apply: doc is missing path: {path}: {_MISSING}")
    con, key = found
    try:
        _get(con, key)
    except (JSONPatchError, _AtoiError):
        raise JSONPatchError(f"replace operation does not apply: doc is missing key: {path}: {_MISSING}") from None
    _set_existing(con, key, op.get("value"))


def _op_move(doc: _Doc, op: Mapping[str, Any]) -> None:
    from_ = _str_field(op, "from")
    if from_ is None:
        raise JSONPatchError(f"move operation failed to decode from: {_path_error(op, 'from')}")
    found = doc.find(from_, for_write=True)
    if found is None:
        raise JSONPatchError(f"move operation does not apply: doc is missing from path: {from_}: {_MISSING}")
    con, key = found
    try:
        val = _get(con, key)
        _remove(con, key)
    except (JSONPatchError, _AtoiError) as e:
        # evanphx reports the decoded key here, not the path.
        raise JSONPatchError(f"error in move for path: '{key}': {e}") from None
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"move operation failed to decode path: {_path_error(op, 'path')}")
    found = doc.find(path, for_write=True)
    if found is None:
        raise JSONPatchError(f"move operation does not apply: doc is missing destination path: {path}: {_MISSING}")
    con, key = found
    try:
        _add(con, key, val)
    except JSONPatchError as e:
        raise JSONPatchError(f"error in move for path: '{path}': {e}") from None


def _op_copy(doc: _Doc, op: Mapping[str, Any]) -> None:
    from_ = _str_field(op, "from")
    if from_ is None:
        raise JSONPatchError(f"copy operation failed to decode from: {_path_error(op, 'from')}")
    found = doc.find(from_, for_write=False)
    if found is None:
        raise JSONPatchError(f"copy operation does not apply: doc is missing from path: {from_}: {_MISSING}")
    con, key = found
    try:
        val = _get(con, key)
    except (JSONPatchError, _AtoiError) as e:
        raise JSONPatchError(f"error in copy for from: '{from_}': {e}") from None
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"copy operation failed to decode path: {_MISSING}")
    found = doc.find(path, for_write=True)
    if found is None:
        raise JSONPatchError(f"copy operation does not apply: doc is missing destination path: {path}: {_MISSING}")
    con, key = found
    try:
        # Sharing instead of deep-copying is safe: nothing we did not copy ourselves is ever written to.
        _add(con, key, val)
    except JSONPatchError as e:
        raise JSONPatchError(f"error while adding value during copy: {e}") from None


def _op_test(doc: _Doc, op: Mapping[str, Any]) -> None:
    path = _str_field(op, "path")
    if path is None:
        raise JSONPatchError(f"test operation failed to decode path: {_path_error(op, 'path')}")
    has_value = "value" in op
    expected = op.get("value")
    if path == "":
        if has_value and json_equal(doc.root, expected):
            return
        raise JSONPatchTestFailed(f"testing value {path} failed: {_TEST_FAILED}")
    found = doc.find(path, for_write=False)
    if found is None:
        raise JSONPatchError(f"test operation does not apply: is missing path: {path}: {_MISSING}")
    con, key = found
    try:
        actual = _get(con, key)
    except (JSONPatchError, _AtoiError) as e:
        raise JSONPatchError(f"error in test for path: '{path}': {e}") from None
    if actual is None:
        # A missing key and an explicit null are both a nil node in evanphx.
        if expected is None:
            return
        raise JSONPatchTestFailed(f"testing value {path} failed: {_TEST_FAILED}")
    if has_value and json_equal(actual, expected):
        return
    raise JSONPatchTestFailed(f"testing value {path} failed: {_TEST_FAILED}")


def apply_patch(document: Any, patch: Sequence[Mapping[str, Any]]) -> Any:
    """Apply ``patch`` (a list of operation objects) to ``document`` and return the new document.

    Raises :class:`JSONPatchTestFailed` when a ``test`` operation fails and :class:`JSONPatchError` for any other
    failure; in both cases nothing is returned and the input is untouched.
    """
    if not isinstance(document, (dict, list)):
        raise JSONPatchError("document must be a JSON object or array")
    doc = _Doc(document)
    for op in patch:
        if op.__class__ is not dict and not isinstance(op, Mapping):
            raise JSONPatchError("json: cannot unmarshal non-object into Go value of type jsonpatch.Operation")
        _apply_one(doc, op)
    return doc.root
