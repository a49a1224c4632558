"""The contract between the CEL environment and the Kubernetes function libraries.

A library is a module exposing ``FUNCTIONS: tuple[Function, ...]`` and, when it defines value types,
``TYPES: tuple[OpaqueType, ...]``. The environment declares every overload to the type checker with
its real Kubernetes signature and binds ``impl`` for evaluation.

Type names use CEL's notation: ``int``, ``uint``, ``double``, ``bool``, ``string``, ``bytes``,
``null_type``, ``dyn``, ``list(T)``, ``map(K, V)``, ``optional_type(T)`` and the Kubernetes value types
declared in ``TYPES`` (``kubernetes.Quantity``, ``net.IP``, ``net.CIDR``, ...).

Runtime representation of Kubernetes value types: the engine cannot carry opaque Python objects, so a
value of such a type is a plain dict ``{"@k8s": "<type name>", ...payload}`` (see ``values.py``). The
type checker still sees the abstract type, so user expressions cannot index into it. Because CEL ``==``
on these values compares the dicts, the payload must be canonical: two values Kubernetes considers
equal must have equal payloads.

``impl`` receives Python values (int, float, str, bytes, bool, None, list, dict, datetime, timedelta,
and the dicts above) and returns one. For an ``optional_type(T)`` result it returns ``None`` for
``optional.none()``. It reports a CEL runtime error by raising ``CelFunctionError`` with Kubernetes'
message text.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


class CelFunctionError(Exception):
    """A CEL runtime error raised by a library function; the message is shown to the policy author."""


def element_kind(value: Any) -> str | None:
    """The CEL primitive type of a runtime list element (a uint arrives as an int: both names); None for
    lists, maps, null and the Kubernetes value types."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    for python_type, name in ((float, "double"), (str, "string"), (bytes, "bytes"), (timedelta, "duration"),
                              (datetime, "timestamp")):
        if isinstance(value, python_type):
            return name
    return None


def require_element_type(function: str, values: Sequence[Any], element_types: Collection[str],
                         *others: str) -> None:
    """cel-go's runtime choice among a function's ``list(T)`` overloads, for a list the checker saw as ``dyn``:
    the first element decides (``Type.IsAssignableRuntimeType`` looks at it alone), and a list whose first element
    is of none of ``element_types`` has no overload: ``no such overload: join(list, string)``, ``others`` the
    types of the arguments after the list."""
    if not values:
        return
    kind = element_kind(values[0])
    if kind is None or (kind not in element_types and not (kind == "int" and "uint" in element_types)):
        raise CelFunctionError(f"no such overload: {function}({', '.join(('list', *others))})")


@dataclass(frozen=True, slots=True)
class Overload:
    overload_id: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    member: bool = False


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    overloads: tuple[Overload, ...]


@dataclass(frozen=True, slots=True)
class OpaqueType:
    """A Kubernetes CEL value type with no literal syntax (Quantity, IP, CIDR, ...)."""

    name: str
    #: Renders a runtime value of this type as the canonical string used in JSON output.
    to_string: Callable[[dict[str, Any]], str]
