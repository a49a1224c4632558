"""CEL type names as Kubernetes spells them, mapped onto cel-expr-python types.

Two environments share every declaration: the checker sees Kubernetes' real signatures (abstract
types such as ``kubernetes.Quantity``); the runtime sees the representation it can carry (a map).
"""

from __future__ import annotations

from cel_expr_python import cel

_PRIMITIVES: dict[str, cel.Type] = {
    "int": cel.Type.INT,
    "uint": cel.Type.UINT,
    "double": cel.Type.DOUBLE,
    "bool": cel.Type.BOOL,
    "string": cel.Type.STRING,
    "bytes": cel.Type.BYTES,
    "dyn": cel.Type.DYN,
    "null_type": cel.Type.NULL,
    "duration": cel.Type.DURATION,
    "timestamp": cel.Type.TIMESTAMP,
    "google.protobuf.Duration": cel.Type.DURATION,
    "google.protobuf.Timestamp": cel.Type.TIMESTAMP,
}


def split_type_arguments(inner: str) -> list[str]:
    depth = 0
    parts: list[str] = []
    current: list[str] = []
    for char in inner:
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        depth += char == "("
        depth -= char == ")"
        current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def parse_type(name: str, opaque_names: frozenset[str], *, runtime: bool) -> cel.Type:
    """Builds the engine type for ``name``; with ``runtime`` Kubernetes value types become maps."""
    name = name.strip()
    if name in _PRIMITIVES:
        return _PRIMITIVES[name]
    if name in opaque_names:
        return cel.Type.MAP if runtime else cel.Type.AbstractType(name)
    head, paren, rest = name.partition("(")
    if not paren or not rest.endswith(")"):
        raise ValueError(f"unknown CEL type name {name!r}")
    arguments = [parse_type(arg, opaque_names, runtime=runtime) for arg in split_type_arguments(rest[:-1])]
    if head == "list" and len(arguments) == 1:
        return cel.Type.LIST if runtime else cel.Type.List(arguments[0])
    if head == "map" and len(arguments) == 2:
        return cel.Type.MAP if runtime else cel.Type.Map(arguments[0], arguments[1])
    if head == "optional_type" and len(arguments) == 1:
        # Functions returning optional values are declared as returning map(int, T), read with [?0]
        # (see optional_results.py): the engine cannot receive an optional value from Python.
        return cel.Type.MAP if runtime else cel.Type.Map(cel.Type.INT, arguments[0])
    raise ValueError(f"unknown CEL type name {name!r}")


def runtime_kind(name: str, opaque_names: frozenset[str]) -> str:
    """The coarse kind the runtime dispatches on; overloads equal in kinds share one registration."""
    name = name.strip()
    if name in opaque_names or name.startswith("map("):
        return "map"
    if name.startswith("list("):
        return "list"
    if name.startswith("optional_type("):
        return "map"
    return _PRIMITIVES[name].name() if name in _PRIMITIVES else name
