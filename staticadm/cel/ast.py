"""Decoding, inspecting and rewriting the engine's compiled expressions.

cel-expr-python serializes a compiled expression as a ``google.protobuf.Any`` holding the public
``cel.expr.CheckedExpr`` (or ``ParsedExpr``) message, and accepts such bytes back. No Python package
ships those messages, so their descriptors are built here from the public field numbers of
``cel/expr/syntax.proto`` and ``cel/expr/checked.proto``. With them we run the Kubernetes-only
compile-time validators and rewrite checked ASTs before handing them back to the runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCALARS = {
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32,
    "double": _F.TYPE_DOUBLE,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "enum": _F.TYPE_ENUM,
}

# (field name, number, type, repeated, oneof index or None); message types are written ".cel.expr.X".
_MESSAGES: dict[str, tuple[list[str], list[tuple[str, int, str, bool, int | None]]]] = {
    "ParsedExpr": (
        [],
        [("expr", 2, ".cel.expr.Expr", False, None), ("source_info", 3, ".cel.expr.SourceInfo", False, None)],
    ),
    "Expr": (
        ["expr_kind"],
        [
            ("id", 2, "int64", False, None),
            ("const_expr", 3, ".cel.expr.Constant", False, 0),
            ("ident_expr", 4, ".cel.expr.Expr.Ident", False, 0),
            ("select_expr", 5, ".cel.expr.Expr.Select", False, 0),
            ("call_expr", 6, ".cel.expr.Expr.Call", False, 0),
            ("list_expr", 7, ".cel.expr.Expr.CreateList", False, 0),
            ("struct_expr", 8, ".cel.expr.Expr.CreateStruct", False, 0),
            ("comprehension_expr", 9, ".cel.expr.Expr.Comprehension", False, 0),
        ],
    ),
    "Expr.Ident": ([], [("name", 1, "string", False, None)]),
    "Expr.Select": (
        [],
        [
            ("operand", 1, ".cel.expr.Expr", False, None),
            ("field", 2, "string", False, None),
            ("test_only", 3, "bool", False, None),
        ],
    ),
    "Expr.Call": (
        [],
        [
            ("target", 1, ".cel.expr.Expr", False, None),
            ("function", 2, "string", False, None),
            ("args", 3, ".cel.expr.Expr", True, None),
        ],
    ),
    "Expr.CreateList": (
        [],
        [("elements", 1, ".cel.expr.Expr", True, None), ("optional_indices", 2, "int32", True, None)],
    ),
    "Expr.CreateStruct": (
        [],
        [("message_name", 1, "string", False, None), ("entries", 2, ".cel.expr.Expr.CreateStruct.Entry", True, None)],
    ),
    "Expr.CreateStruct.Entry": (
        ["key_kind"],
        [
            ("id", 1, "int64", False, None),
            ("field_key", 2, "string", False, 0),
            ("map_key", 3, ".cel.expr.Expr", False, 0),
            ("value", 4, ".cel.expr.Expr", False, None),
            ("optional_entry", 5, "bool", False, None),
        ],
    ),
    "Expr.Comprehension": (
        [],
        [
            ("iter_var", 1, "string", False, None),
            ("iter_range", 2, ".cel.expr.Expr", False, None),
            ("accu_var", 3, "string", False, None),
            ("accu_init", 4, ".cel.expr.Expr", False, None),
            ("loop_condition", 5, ".cel.expr.Expr", False, None),
            ("loop_step", 6, ".cel.expr.Expr", False, None),
            ("result", 7, ".cel.expr.Expr", False, None),
            ("iter_var2", 8, "string", False, None),
        ],
    ),
    "Constant": (
        ["constant_kind"],
        [
            ("null_value", 1, "enum", False, 0),
            ("bool_value", 2, "bool", False, 0),
            ("int64_value", 3, "int64", False, 0),
            ("uint64_value", 4, "uint64", False, 0),
            ("double_value", 5, "double", False, 0),
            ("string_value", 6, "string", False, 0),
            ("bytes_value", 7, "bytes", False, 0),
        ],
    ),
    "SourceInfo": (
        [],
        [
            ("syntax_version", 1, "string", False, None),
            ("location", 2, "string", False, None),
            ("line_offsets", 3, "int32", True, None),
            ("positions", 4, ".cel.expr.SourceInfo.PositionsEntry", True, None),
            ("macro_calls", 5, ".cel.expr.SourceInfo.MacroCallsEntry", True, None),
        ],
    ),
    "SourceInfo.PositionsEntry": ([], [("key", 1, "int64", False, None), ("value", 2, "int32", False, None)]),
    "SourceInfo.MacroCallsEntry": ([], [("key", 1, "int64", False, None), ("value", 2, ".cel.expr.Expr", False, None)]),
    "CheckedExpr": (
        [],
        [
            ("reference_map", 2, ".cel.expr.CheckedExpr.ReferenceMapEntry", True, None),
            ("type_map", 3, ".cel.expr.CheckedExpr.TypeMapEntry", True, None),
            ("expr", 4, ".cel.expr.Expr", False, None),
            ("source_info", 5, ".cel.expr.SourceInfo", False, None),
            ("expr_version", 6, "string", False, None),
        ],
    ),
    "CheckedExpr.ReferenceMapEntry": (
        [],
        [("key", 1, "int64", False, None), ("value", 2, ".cel.expr.Reference", False, None)],
    ),
    "CheckedExpr.TypeMapEntry": ([], [("key", 1, "int64", False, None), ("value", 2, ".cel.expr.Type", False, None)]),
    "Reference": (
        [],
        [
            ("name", 1, "string", False, None),
            ("overload_id", 3, "string", True, None),
            ("value", 4, ".cel.expr.Constant", False, None),
        ],
    ),
    "Type": (
        ["type_kind"],
        [
            ("dyn", 1, ".cel.expr.Empty", False, 0),
            ("null", 2, "enum", False, 0),
            ("primitive", 3, "enum", False, 0),
            ("wrapper", 4, "enum", False, 0),
            ("well_known", 5, "enum", False, 0),
            ("list_type", 6, ".cel.expr.Type.ListType", False, 0),
            ("map_type", 7, ".cel.expr.Type.MapType", False, 0),
            ("function", 8, ".cel.expr.Type.FunctionType", False, 0),
            ("message_type", 9, "string", False, 0),
            ("type_param", 10, "string", False, 0),
            ("type", 11, ".cel.expr.Type", False, 0),
            ("error", 12, ".cel.expr.Empty", False, 0),
            ("abstract_type", 14, ".cel.expr.Type.AbstractType", False, 0),
        ],
    ),
    "Type.ListType": ([], [("elem_type", 1, ".cel.expr.Type", False, None)]),
    "Type.MapType": (
        [],
        [("key_type", 1, ".cel.expr.Type", False, None), ("value_type", 2, ".cel.expr.Type", False, None)],
    ),
    "Type.FunctionType": (
        [],
        [("result_type", 1, ".cel.expr.Type", False, None), ("arg_types", 2, ".cel.expr.Type", True, None)],
    ),
    "Type.AbstractType": (
        [],
        [("name", 1, "string", False, None), ("parameter_types", 2, ".cel.expr.Type", True, None)],
    ),
    "Empty": ([], []),
}
_MAP_ENTRIES = {
    "SourceInfo.PositionsEntry",
    "SourceInfo.MacroCallsEntry",
    "CheckedExpr.ReferenceMapEntry",
    "CheckedExpr.TypeMapEntry",
}
#: Type.primitive enum values, and the names cel-go prints for them.
PRIMITIVE_NAMES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
BOOL_PRIMITIVE = 1
WELL_KNOWN_NAMES = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="staticadm/cel_expr.proto", package="cel.expr", syntax="proto3")
    enum = file.enum_type.add(name="Int32Enum")
    for number in range(16):
        enum.value.add(name=f"V{number}", number=number)
    built: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full_name in sorted(_MESSAGES, key=lambda n: n.count(".")):
        oneofs, fields = _MESSAGES[full_name]
        parent, _, short = full_name.rpartition(".")
        message = built[parent].nested_type.add(name=short) if parent else file.message_type.add(name=short)
        built[full_name] = message
        if full_name in _MAP_ENTRIES:
            message.options.map_entry = True
        for oneof in oneofs:
            message.oneof_decl.add(name=oneof)
        for name, number, type_name, repeated, oneof_index in fields:
            field = message.field.add(name=name, number=number, label=_REPEATED if repeated else _OPTIONAL)
            if type_name.startswith("."):
                field.type = _F.TYPE_MESSAGE
                field.type_name = type_name
            elif type_name == "enum":
                field.type = _F.TYPE_ENUM
                field.type_name = ".cel.expr.Int32Enum"
            else:
                field.type = _SCALARS[type_name]
            if oneof_index is not None:
                field.oneof_index = oneof_index
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_build_file())
_CLASSES = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"cel.expr.{name}"))
    for name in ("ParsedExpr", "CheckedExpr", "Expr", "Constant", "Type")
}
CheckedExpr = _CLASSES["CheckedExpr"]
ParsedExpr = _CLASSES["ParsedExpr"]
Expr = _CLASSES["Expr"]
TypeMessage = _CLASSES["Type"]

_CHECKED_URL = "type.googleapis.com/cel.expr.CheckedExpr"
_PARSED_URL = "type.googleapis.com/cel.expr.ParsedExpr"


def decode(serialized: bytes) -> Any:
    """Returns the CheckedExpr or ParsedExpr message held in the engine's serialized expression."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    if wrapper.type_url == _CHECKED_URL:
        message = CheckedExpr()
    elif wrapper.type_url == _PARSED_URL:
        message = ParsedExpr()
    else:
        raise ValueError(f"unexpected serialized expression type {wrapper.type_url!r}")
    message.ParseFromString(wrapper.value)
    return message


def encode(message: Any) -> bytes:
    url = _CHECKED_URL if isinstance(message, CheckedExpr) else _PARSED_URL
    return any_pb2.Any(type_url=url, value=message.SerializeToString()).SerializeToString()


def children(node: Any) -> list[Any]:
    """The direct operands of one node (a list, not a generator: every walk over every compiled expression calls
    this once per node, and loading 1,000 policies walks about 400,000 nodes)."""
    kind = node.WhichOneof("expr_kind")
    if kind == "select_expr":
        return [node.select_expr.operand]
    if kind == "call_expr":
        call = node.call_expr
        return [call.target, *call.args] if call.HasField("target") else [*call.args]
    if kind == "list_expr":
        return [*node.list_expr.elements]
    if kind == "struct_expr":
        operands = []
        for entry in node.struct_expr.entries:
            if entry.HasField("map_key"):
                operands.append(entry.map_key)
            operands.append(entry.value)
        return operands
    if kind == "comprehension_expr":
        comp = node.comprehension_expr
        return [comp.iter_range, comp.accu_init, comp.loop_condition, comp.loop_step, comp.result]
    return []


def walk(expr: Any) -> Iterator[Any]:
    """Every node of the expression tree, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(children(node))


def max_id(checked: Any) -> int:
    return max((node.id for node in walk(checked.expr)), default=0)


def type_name(type_message: Any) -> str:
    """cel-go's spelling of a checked type, as Kubernetes prints it in error messages."""
    kind = type_message.WhichOneof("type_kind")
    if kind == "primitive":
        return PRIMITIVE_NAMES.get(type_message.primitive, "unknown")
    if kind == "wrapper":
        return f"wrapper({PRIMITIVE_NAMES.get(type_message.wrapper, 'unknown')})"
    if kind == "well_known":
        return WELL_KNOWN_NAMES.get(type_message.well_known, "unknown")
    if kind == "list_type":
        return f"list({type_name(type_message.list_type.elem_type)})"
    if kind == "map_type":
        mt = type_message.map_type
        return f"map({type_name(mt.key_type)}, {type_name(mt.value_type)})"
    if kind == "null":
        return "null_type"
    if kind == "message_type":
        return type_message.message_type
    if kind == "type_param":
        return type_message.type_param
    if kind == "type":
        inner = type_message.type
        return "type" if inner.WhichOneof("type_kind") is None else f"type({type_name(inner)})"
    if kind == "abstract_type":
        at = type_message.abstract_type
        if not at.parameter_types:
            return at.name
        return f"{at.name}({', '.join(type_name(p) for p in at.parameter_types)})"
    if kind == "error":
        return "*error*"
    return "dyn"


def node_types(checked: Any) -> dict[int, str]:
    return {entry_id: type_name(t) for entry_id, t in checked.type_map.items()}


def position_of(checked: Any, node_id: int) -> tuple[int, int]:
    """1-based (line, column) of a node, computed from the source info as cel-go reports it."""
    info = checked.source_info
    offset = info.positions.get(node_id, 0)
    line = 1
    line_start = 0
    for line_offset in info.line_offsets:
        if line_offset > offset:
            break
        line += 1
        line_start = line_offset
    return line, offset - line_start + 1
