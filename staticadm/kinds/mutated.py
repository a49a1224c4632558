"""A built-in object between two mutations, as kube-apiserver's mutating policy dispatcher holds it.

``dispatcher.dispatchOne`` (apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go) takes each patcher's result
back into the typed object of the request's kind before the next mutation sees it, then defaults it
(``o.GetObjectDefaulter().Default``):

- a JSON Patch's result is decoded into a new typed object by the strict JSON serializer (``patch/json_patch.go``):
  :mod:`staticadm.patch.decode` has already refused wrong JSON kinds and unknown fields (an internal error); what is
  left to fail is a value Kubernetes decodes with an ``UnmarshalJSON`` of its own (a Quantity ``'bad'``, a time
  ``'yesterday'``, an IntOrString ``2.5``, a ``[]byte`` that is not base64), and that failure is an internal error
  too (:class:`TypedDecodingError`, ``internal=True``);
- an ApplyConfiguration's result is unstructured (``TypedToObject``) and ``ConvertToVersion`` makes it typed with
  ``runtime.DefaultUnstructuredConverter.FromUnstructured``: a number with a fraction for an integer field fails
  (``cannot convert float64 to int32``), an integer wider than its field wraps (Go's conversion), the own-decoder
  types fail as above; the failure is an ordinary error (``unable to convert unstructured object to apps/v1,
  Kind=Deployment: ...``), which the policy's failurePolicy decides.

The typed object is what admission sees next: encoding/json's view of it drops what ``omitempty`` drops (an empty
``annotations: {}`` or ``initContainers: []`` a mutation added is gone, so a later ``add`` under it fails and a
later ``has()`` is false), writes zero values, canonical quantities and times (:mod:`staticadm.kinds.typed`).

Only the parts a mutation changed are walked: a part of the result that *is* (by identity) the part of the object
before the mutation was typed already (the patchers share what they leave alone), so a mutation costs what it
touched, not the object's size. Fields the kinds' structs do not have are kept: what a mutation wrote was checked
against the kind's schema before (unknown fields refused), so any other is a field of the cluster's newer release.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from staticadm import gofmt
from staticadm.cel.libraries import quantity as quantities
from staticadm.kinds.defaulting import apply_defaults
from staticadm.kinds.go_types import GoField, GoTypes, go_types
from staticadm.kinds.typed import (
    INTEGER_RANGES,
    SPECIAL_ZERO,
    canonical_quantity,
    go_duration_string,
    is_omitted,
    zero_value,
)
from staticadm.yamljson import copy_json

__all__ = ["Decoding", "TypedDecodingError", "inert_apply_configuration", "inert_json_patch", "retyped"]

#: How the patcher's result becomes typed again: ``json`` (JSON Patch: the strict JSON serializer) or
#: ``unstructured`` (ApplyConfiguration: the unstructured converter).
Decoding = Literal["json", "unstructured"]

#: Kinds whose defaulting reads their own labels or name (a Namespace's name label, a Job's or
#: ReplicationController's labels from its template): a change of those is not inert for them.
_READ_THEIR_METADATA = frozenset({"k8s.io/api/core/v1.Namespace", "k8s.io/api/core/v1.ReplicationController",
                                  "k8s.io/api/batch/v1.Job"})
_OBJECT_META = "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta"
#: Fields whose change no defaulting of any other kind reads.
_INERT_FIELDS = frozenset({("", "metadata"), (_OBJECT_META, "labels"), (_OBJECT_META, "annotations")})


#: The same kinds, by (group, kind).
_READ_THEIR_METADATA_KINDS = frozenset({("", "Namespace"), ("", "ReplicationController"), ("batch", "Job")})
_METADATA_STRING_MAPS = ("/metadata/labels/", "/metadata/annotations/")


def inert_json_patch(operations: Sequence[Mapping[str, Any]], group: str, kind: str) -> bool:
    """Whether a JSON Patch that applied leaves an object :func:`retyped` would return as it is: it only tests, or
    writes strings to keys of the object's own labels or annotations (maps of strings, not empty once written, which
    no defaulting of ``kind`` reads). The common mutation, answered without a walk."""
    if (group, kind) in _READ_THEIR_METADATA_KINDS:
        return False
    for operation in operations:
        op = operation.get("op")
        if op == "test":
            continue
        path = operation.get("path")
        if (op != "add" and op != "replace") or operation.get("value").__class__ is not str \
                or not isinstance(path, str) or not path.startswith(_METADATA_STRING_MAPS) or path.count("/") != 3:
            return False
    return True


def inert_apply_configuration(patch: Mapping[str, Any], group: str, kind: str) -> bool:
    """The same for an ApplyConfiguration's patch (plain): it only merges strings into the object's own labels or
    annotations, each map given with at least one."""
    if (group, kind) in _READ_THEIR_METADATA_KINDS or len(patch) != 1:
        return False
    metadata = patch.get("metadata")
    if metadata.__class__ is not dict or not metadata:
        return False
    for name, entries in metadata.items():
        if (name != "labels" and name != "annotations") or entries.__class__ is not dict or not entries:
            return False
        for value in entries.values():
            if value.__class__ is not str:
                return False
    return True


class TypedDecodingError(ValueError):
    """Kubernetes' text for a value its typed object cannot hold; ``internal``: an internal error (JSON Patch)."""

    def __init__(self, message: str, internal: bool) -> None:
        super().__init__(message)
        self.internal = internal


def retyped(after: Any, before: Any, group: str, version: str, kind: str, decoding: Decoding) -> Any:
    """``after`` (a patcher's result from ``before``) as the next mutation sees it: ``after`` itself for a kind that
    is not built in (kube-apiserver keeps those unstructured), else typed again and defaulted. Raises
    :class:`TypedDecodingError`. Neither argument is modified; the result shares what is unchanged with them."""
    if after is before or after.__class__ is not dict:
        return after
    types = go_types()
    type_id = types.kind_type(f"{group}/{version}" if group else version, kind)
    if type_id is None:
        return after
    encoder = _Encoder(types, decoding)
    try:
        value = encoder.struct(after, before, type_id, root=True)
    except _Failure as failure:
        if decoding == "json":
            raise TypedDecodingError(str(failure), internal=True) from None
        raise TypedDecodingError(f"unable to convert unstructured object to {group}/{version}, Kind={kind}: {failure}",
                                 internal=False) from None
    if encoder.touched <= _INERT_FIELDS and type_id not in _READ_THEIR_METADATA:
        return value
    # Defaulting writes in place, and the value shares parts with ``before``: it works on a copy.
    defaulted = copy_json(value)
    apply_defaults(defaulted, type_id, types)
    return defaulted


class _Failure(Exception):
    """Go's error text for a value that does not decode."""


_ABSENT: Any = object()
_NO_ENTRIES: dict[str, Any] = {}
_BY_NAME: dict[str, dict[str, GoField]] = {}


def _fields_by_name(types: GoTypes, type_id: str) -> dict[str, GoField]:
    found = _BY_NAME.get(type_id)
    if found is None:
        found = _BY_NAME[type_id] = {go_field.name: go_field for go_field in types.structs[type_id]}
    return found


class _Encoder:
    def __init__(self, types: GoTypes, decoding: Decoding) -> None:
        self._types = types
        self._json = decoding == "json"
        #: (struct type id, or "" for the kind's own, field name) of every field whose value changed.
        self.touched: set[tuple[str, str]] = set()

    def struct(self, value: Any, before: Any, type_id: str, root: bool = False) -> dict[str, Any]:
        if value is None:
            value = {}
        elif value.__class__ is not dict:
            raise _Failure(f"cannot restore struct from: {_go_kind(value)}")
        by_name = _fields_by_name(self._types, type_id)
        previous = before if before.__class__ is dict else None
        owner = "" if root else type_id
        out: dict[str, Any] = {}
        for name, child in value.items():
            go_field = by_name.get(name)
            if go_field is None:
                out[name] = child
                continue
            earlier = _ABSENT if previous is None else previous.get(name, _ABSENT)
            if child is earlier:
                # Unchanged: written as the typed object before the mutation had it.
                out[name] = child
                continue
            self.touched.add((owner, name))
            encoded = self.value(child, earlier, go_field.ref)
            if not is_omitted(go_field, encoded, self._types):
                out[name] = encoded
        if previous is not None:
            # A field the mutation removed holds its zero value. One absent before and after stays absent: a typed
            # object writes every field it does not omit, and an object that is not typed (a test's) keeps its form.
            absent = [name for name in previous if name not in value and name in by_name]
        else:
            # A struct the mutation made: every field it does not have holds its zero value.
            absent = [name for name in by_name if name not in value]
        for name in absent:
            go_field = by_name[name]
            if previous is not None:
                self.touched.add((owner, name))
            encoded = zero_value(go_field.ref, self._types)
            if not is_omitted(go_field, encoded, self._types):
                out[name] = encoded
        return out

    def value(self, value: Any, before: Any, ref: str) -> Any:
        if value is before:
            return value
        if ref[0] == "@":
            return self.struct(value, before, ref[1:])
        if ref[0] == "*":
            return None if value is None else self.value(value, before, ref[1:])
        if ref.startswith("[]"):
            if value is None:
                return None
            if value.__class__ is not list:
                raise _Failure(f"cannot restore slice from {_go_kind(value)}")
            item_ref = ref[2:]
            earlier = before if before.__class__ is list else ()
            return [item if index < len(earlier) and item is earlier[index] else
                    self.value(item, earlier[index] if index < len(earlier) else _ABSENT, item_ref)
                    for index, item in enumerate(value)]
        if ref.startswith("map:"):
            if value is None:
                return None
            if value.__class__ is not dict:
                raise _Failure(f"cannot restore map from {_go_kind(value)}")
            item_ref = ref[4:]
            if item_ref == "string" and None not in value.values():
                # Strings (labels, annotations), checked by the decoding before: typed, they are themselves.
                return value
            previous = before if before.__class__ is dict else _NO_ENTRIES
            out = {}
            for key, item in value.items():
                earlier = previous.get(key, _ABSENT)
                out[key] = item if item is earlier else self.value(item, earlier, item_ref)
            return out
        if ref in INTEGER_RANGES:
            return self._integer(value, ref)
        if ref == "bytes":
            return self._bytes(value)
        return _SCALARS[ref](value)

    def _integer(self, value: Any, ref: str) -> Any:
        if value is None:
            return 0
        if value.__class__ is float:
            if not value.is_integer():
                if self._json:
                    raise _Failure(f"json: cannot unmarshal number {_go_number(value)} into Go value of type {ref}")
                raise _Failure(f"cannot convert float64 to {ref}")
            value = int(value)
        elif value.__class__ is not int:
            raise _Failure(f"unrecognized type: {ref}")
        low, high = INTEGER_RANGES[ref]
        if low <= value <= high or self._json:
            # Out of range, the strict decoder has refused it already (``patch/decode.py``).
            return value
        # The unstructured converter's reflect Convert keeps the low bits, as Go's conversion does.
        width = high.bit_length() + (1 if low < 0 else 0)
        wrapped = value & ((1 << width) - 1)
        return wrapped - (1 << width) if low < 0 and wrapped > high else wrapped

    @staticmethod
    def _float(value: Any) -> Any:
        if value is None:
            return 0
        if value.__class__ is float and value.is_integer() and abs(value) < 1e21:
            return int(value)
        return value

    def _bytes(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise _Failure(f"json: cannot unmarshal {_json_kind(value)} into Go value of type []uint8")
        problem = _base64_problem(value)
        if problem is not None:
            raise _Failure(problem if self._json else f"error decoding from json: {problem}")
        return base64.b64encode(base64.b64decode(value.replace("\r", "").replace("\n", ""))).decode()

    @staticmethod
    def _time(value: Any) -> Any:
        moment = _unmarshal_time(value, _RFC3339, micro=False)
        return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    @staticmethod
    def _microtime(value: Any) -> Any:
        moment = _unmarshal_time(value, _RFC3339_MICRO, micro=True)
        return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    @staticmethod
    def _duration(value: Any) -> Any:
        if value is None:
            return SPECIAL_ZERO["duration"]
        if not isinstance(value, str):
            raise _Failure(f"json: cannot unmarshal {_json_kind(value)} into Go value of type string")
        try:
            seconds = gofmt.parse_duration(value)
        except ValueError as error:
            raise _Failure(str(error)) from None
        return go_duration_string(round(seconds * 1e9))

    @staticmethod
    def _quantity(value: Any) -> Any:
        if value is None:
            return SPECIAL_ZERO["quantity"]
        # Quantity.UnmarshalJSON parses the JSON text itself, less the quotes of a string.
        text = value if isinstance(value, str) else _json_text(value)
        text = text.strip()
        try:
            return canonical_quantity(quantities.parse_nanos(text), quantities.quantity_format(text))
        except quantities.QuantityError as error:
            raise _Failure(str(error)) from None

    @staticmethod
    def _int_or_string(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return 0 if value is None else value
        # IntOrString.UnmarshalJSON: anything but a string is json.Unmarshal'ed into its int32.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Failure(f"json: cannot unmarshal {_json_kind(value)} into Go value of type int32")
        if isinstance(value, float) and not value.is_integer():
            raise _Failure(f"json: cannot unmarshal number {_go_number(value)} into Go value of type int32")
        whole = int(value)
        if not INTEGER_RANGES["int32"][0] <= whole <= INTEGER_RANGES["int32"][1]:
            raise _Failure(f"json: cannot unmarshal number {_go_number(value)} into Go value of type int32")
        return whole


def _keep(value: Any) -> Any:
    return value


#: Each scalar type's encoder, but ``bytes`` (whose error text depends on the decoding).
_SCALARS: dict[str, Callable[[Any], Any]] = {
    "string": lambda value: "" if value is None else value,
    "bool": lambda value: False if value is None else value,
    "float64": _Encoder._float, "any": _keep, "raw": _keep, "time": _Encoder._time,
    "microtime": _Encoder._microtime, "duration": _Encoder._duration, "quantity": _Encoder._quantity,
    "intorstring": _Encoder._int_or_string,
}


def _go_kind(value: Any) -> str:
    """The reflect kind of a value of an unstructured object."""
    return {bool: "bool", str: "string", int: "int64", float: "float64", list: "slice", dict: "map"}.get(
        value.__class__, "interface")


def _json_kind(value: Any) -> str:
    """encoding/json's name of a JSON value's kind in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def _go_number(value: int | float) -> str:
    """A number as encoding/json writes a float64 (the CEL value's) or an int."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            sign = "-" if exponent.startswith("-") else "+"
            digits = exponent.lstrip("+-").rjust(2, "0")
            text = f"{mantissa}e{sign}{digits}"
        return text
    return str(value)


def _json_text(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _go_number(value)
    return json.dumps(value, separators=(",", ":"))


_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _base64_problem(text: str) -> str | None:
    """Go's ``base64.StdEncoding.Decode`` error for ``text`` (``illegal base64 data at input byte N``), or None.
    Line breaks, which Go skips, are left out first (so offsets after one are off by its length)."""
    data = text.replace("\r", "").replace("\n", "")
    for start in range(0, len(data), 4):
        quantum = data[start:start + 4]
        for place, char in enumerate(quantum):
            position = start + place
            if char == "=":
                if place < 2:
                    return f"illegal base64 data at input byte {position}"
                if place == 2:
                    if position + 1 == len(data):
                        return f"illegal base64 data at input byte {len(data)}"
                    if data[position + 1] != "=":
                        return f"illegal base64 data at input byte {position}"
                    position += 1
                if position + 1 < len(data):
                    return f"illegal base64 data at input byte {position + 1}"
                return None
            if char not in _BASE64:
                return f"illegal base64 data at input byte {position}"
        if len(quantum) < 4:
            return f"illegal base64 data at input byte {start}"
    return None


_RFC3339 = "2006-01-02T15:04:05Z07:00"
_RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"


def _unmarshal_time(value: Any, layout: str, micro: bool) -> dt.datetime | None:
    """``metav1.Time.UnmarshalJSON`` (``MicroTime``'s): null is the zero time, a string is ``time.Parse``d."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Failure(f"json: cannot unmarshal {_json_kind(value)} into Go value of type string")
    return _parse_time(value, layout, micro)


def _digits(text: str, count: int) -> int | None:
    part = text[:count]
    return int(part) if len(part) == count and part.isascii() and part.isdigit() else None


def _parse_time(value: str, layout: str, micro: bool) -> dt.datetime:
    """Go's ``time.Parse(layout, value)`` for the RFC 3339 layouts, with its ``ParseError`` texts."""

    def cannot(rest: str, element: str) -> _Failure:
        return _Failure(f"parsing time {gofmt.quote(value)} as {gofmt.quote(layout)}: cannot parse "
                        f"{gofmt.quote(rest)} as {gofmt.quote(element)}")

    def out_of_range(what: str) -> _Failure:
        return _Failure(f"parsing time {gofmt.quote(value)}: {what} out of range")

    rest = value
    year = _digits(rest, 4)
    if year is None:
        raise cannot(rest, "2006")
    rest = rest[4:]
    fields = []
    for separator, element, fixed, limit, name in (("-", "01", True, (1, 12), "month"), ("-", "02", True, None, ""),
                                                   ("T", "15", False, (0, 23), "hour"),
                                                   (":", "04", True, (0, 59), "minute"),
                                                   (":", "05", True, (0, 59), "second")):
        if not rest.startswith(separator):
            raise cannot(rest, separator)
        rest = rest[len(separator):]
        number = _digits(rest, 2)
        width = 2
        if number is None and not fixed:
            number, width = _digits(rest, 1), 1
        if number is None:
            raise cannot(rest, element)
        rest = rest[width:]
        if limit is not None and not limit[0] <= number <= limit[1]:
            raise out_of_range(name)
        fields.append(number)
    month, day, hour, minute, second = fields
    fraction = ""
    if micro:
        if not rest.startswith("."):
            raise cannot(rest, ".000000")
        if _digits(rest[1:], 6) is None:
            raise cannot(rest, ".000000")
        fraction, rest = rest[1:7], rest[7:]
    elif len(rest) >= 2 and rest[0] in ".," and rest[1].isascii() and rest[1].isdigit():
        end = 2
        while end < len(rest) and rest[end].isascii() and rest[end].isdigit():
            end += 1
        fraction, rest = rest[1:end], rest[end:]
    zone_element = "Z07:00"
    if rest.startswith("Z"):
        offset, rest = dt.timedelta(0), rest[1:]
    else:
        if len(rest) < 6 or rest[3] != ":" or rest[0] not in "+-":
            raise cannot(rest, zone_element)
        hours, minutes = _digits(rest[1:3], 2), _digits(rest[4:6], 2)
        if hours is None or minutes is None:
            raise cannot(rest, zone_element)
        if hours > 24:
            raise out_of_range("time zone offset hour")
        if minutes > 60:
            raise out_of_range("time zone offset minute")
        offset = (1 if rest[0] == "+" else -1) * dt.timedelta(hours=hours, minutes=minutes)
        rest = rest[6:]
    if rest:
        raise _Failure(f"parsing time {gofmt.quote(value)}: extra text: {gofmt.quote(rest)}")
    try:
        moment = dt.datetime(year, month, day, hour, minute, second, int((fraction + "000000")[:6] or 0),
                             tzinfo=dt.timezone(offset))
    except ValueError:
        raise out_of_range("day") from None
    return moment.astimezone(dt.UTC)
