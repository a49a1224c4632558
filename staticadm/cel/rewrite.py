"""Rewrites of a checked AST that give the engine Kubernetes' runtime behaviour.

- every comprehension's loop condition first charges the static cost of one iteration
  (``@staticadm.tick``), and calls whose cost depends on sizes charge it after they return
  (``@staticadm.charge``): see ``cost.py``;
- ``lists.range(n)`` gets its argument bounded, since it allocates natively before any loop runs;
- identifiers of Kubernetes value types and ``type()`` of such values become constants;
- ``Object{...}`` and ``JSONPatch{...}`` creations (calls after ``structs.py``) become the tagged map
  literals their functions return, evaluated natively;
- presence tests and optional selections of values that may not be maps (``dyn``, null, objects, and
  anything selected through an optional) get cel-go's answer where cel-cpp errors (``_qualified``);
  ``diagnostic`` makes the form run only to word an error (``no such key: <key>``).

``variables.<name>`` stays as it is here; ``linking.py`` binds it to the variable's own expression.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm.cel import ast, cost, narrowing, structs
from staticadm.cel.string_format import BOOL_KEY_PREFIX, DURATION_PREFIX
from staticadm.cel.values import TYPE_TAG

RANGE_GUARD_FUNCTION = "@staticadm.rangeGuard"
#: ``@staticadm.direct()``: whether a loop that builds a list longer than ``APPEND_SLICE`` runs natively
#: (see ``stepping.py``).
DIRECT_FUNCTION = "@staticadm.direct"
#: What ``==``/``!=`` compare of an operand the checker typed as a Quantity (``quantity.equality_key``).
QUANTITY_VALUE_FUNCTION = "@staticadm.quantityValue"
#: ``no such overload: <function>(<argument's type>)``, raised for a call cel-go narrowed to another overload.
NO_SUCH_OVERLOAD_FUNCTION = "@staticadm.noSuchOverload"
#: ``@staticadm.listerEnter()`` / ``@staticadm.listerLeave()``: called before the operand of a call cel-go hands
#: an error operand to (``_lister_operand``), and after it evaluated to a value; an evaluation that entered more
#: such operands than it left reached one that failed, where cel-go panics (``evaluation.LISTER_PANIC_MESSAGE``).
LISTER_ENTER_FUNCTION = "@staticadm.listerEnter"
LISTER_LEAVE_FUNCTION = "@staticadm.listerLeave"
#: ``@staticadm.listerMark()`` / ``@staticadm.listerCheck()`` around a variable's expression holding such operands:
#: cel-go evaluates a variable as a program of its own, whose Eval recovers the panic as the variable's error, so
#: the check fails the variable itself (and forgets the operand) when one failed inside it.
LISTER_MARK_FUNCTION = "@staticadm.listerMark"
LISTER_CHECK_FUNCTION = "@staticadm.listerCheck"
#: The checked type name of a Kubernetes Quantity.
_QUANTITY_TYPE = "kubernetes.Quantity"
_QUANTITY_LIST_TYPE = "list(kubernetes.Quantity)"
#: Appends a loop that builds a list may make natively; longer ones run in slices of this (``stepping.py``).
APPEND_SLICE = 256
STEP_MESSAGE = "@staticadm: evaluated in steps"
#: The Go types of cel-go's values (``%T``), which its error for a comprehension over a value it cannot iterate
#: names.
_GO_VALUE_TYPES = (("null_type", "types.Null"), ("string", "types.String"), ("int", "types.Int"),
                   ("uint", "types.Uint"), ("double", "types.Double"), ("bool", "types.Bool"),
                   ("bytes", "types.Bytes"), ("google.protobuf.Duration", "types.Duration"),
                   ("google.protobuf.Timestamp", "types.Timestamp"))
TYPE_CONSTANT_PREFIX = "@type:"
#: The accumulator of the comprehensions the rewrite uses as ``let`` bindings (an empty range: no
#: iteration, so they neither tick nor count toward the engine's iteration limit).
_BIND_ITERATION_VARIABLE = "@unused"
BODY_OWNER = -1


class Ids:
    """Fresh node ids above every id of the expression being rewritten."""

    def __init__(self, start: int) -> None:
        self._next = start

    def __call__(self) -> int:
        self._next += 1
        return self._next

    @property
    def last(self) -> int:
        return self._next


def call(node_id: int, function: str, *args: Any, target: Any = None) -> Any:
    node = ast.Expr(id=node_id)
    node.call_expr.function = function
    if target is not None:
        node.call_expr.target.CopyFrom(target)
    for arg in args:
        node.call_expr.args.add().CopyFrom(arg)
    return node


def ident(node_id: int, name: str) -> Any:
    node = ast.Expr(id=node_id)
    node.ident_expr.name = name
    return node


def int_constant(node_id: int, value: int) -> Any:
    node = ast.Expr(id=node_id)
    node.const_expr.int64_value = value
    return node


def bool_constant(node_id: int, value: bool) -> Any:
    node = ast.Expr(id=node_id)
    node.const_expr.bool_value = value
    return node


def list_of(node_id: int, *elements: Any) -> Any:
    node = ast.Expr(id=node_id)
    node.list_expr.SetInParent()
    for element in elements:
        node.list_expr.elements.add().CopyFrom(element)
    return node


def bind(ids: Ids, name: str, value: Any, body: Any) -> Any:
    """``cel.bind(name, value, body)`` as the engine runs it: a comprehension over an empty list."""
    node = ast.Expr(id=ids())
    comprehension = node.comprehension_expr
    comprehension.iter_var = _BIND_ITERATION_VARIABLE
    comprehension.iter_range.CopyFrom(list_of(ids()))
    comprehension.accu_var = name
    comprehension.accu_init.CopyFrom(value)
    comprehension.loop_condition.CopyFrom(bool_constant(ids(), False))
    comprehension.loop_step.CopyFrom(ident(ids(), name))
    comprehension.result.CopyFrom(body)
    return node


def moved_aside(node: Any, ids: Ids, references: Any) -> Any:
    """A copy of ``node`` under a new id, keeping the checker's reference (its overload) there, so a wrapper can
    take ``node``'s place and id (and the type the checker gave it)."""
    moved = ast.Expr()
    moved.CopyFrom(node)
    moved.id = ids()
    if node.id in references:
        references[moved.id].CopyFrom(references[node.id])
        del references[node.id]
    return moved


def renumbered(expr: Any, ids: Ids, references: Any) -> Any:
    """A copy of ``expr`` with fresh ids (a subtree used twice must not share ids); the copies keep the
    checker's references (resolved names and overloads) of the nodes they copy."""
    copy = ast.Expr()
    copy.CopyFrom(expr)
    for node in ast.walk(copy):
        old_id, node.id = node.id, ids()
        if old_id in references:
            references[node.id].CopyFrom(references[old_id])
    return copy


def _largest_size_charging(how: cost.SizedCall, units: int) -> int | None:
    """The largest size of a call charged by one size that charges at most ``units`` past the ``cost.SIZED_CALL_BASE``
    in the expression's static cost; None when even size 0 charges more."""
    def amount(size: int) -> int:
        return cost.charge_amount(how.charge, (size,)) + how.extra

    if amount(0) > cost.SIZED_CALL_BASE + units:
        return None
    largest = 0
    # Every charge grows with the size: at most a few hundred steps for the units of the argument-free charges.
    while amount(largest + 1) <= cost.SIZED_CALL_BASE + units:
        largest += 1
    return largest


def _native_charge(how: cost.SizedCall, measured: list[Any], ids: Ids, owner_args: tuple[int, ...],
                   references: Any) -> Any:
    """The charge of a size-driven call computed by the engine: ``bind(c, amount, c > B ? charge(c - B) :
    true)`` with ``B = cost.SIZED_CALL_BASE`` units already in the expression's static cost, so the common
    case (strings up to 40 characters, lists up to 4 elements) costs no call into Python.

    A call charged by one size reads it in place, and its two commonest cases come first, told from the size alone:
    ``size(x) <= T0 ? true : size(x) <= T1 ? charge1() : bind(c, amount, ...)`` (``Tu``: the largest size charging
    ``u`` units past B). The engine runs each bind as a loop of its own, and these charges sit in the loops over a
    Pod's containers and their env, once per check of a string: at 100 policies the binds were 29% of the engine's
    evaluation of a new Pod. An error of the size is the first conditional's, the same error the bind carried; a
    size is read at most three times."""
    free = _largest_size_charging(how, 0) if len(measured) == 1 else None
    sizes = [] if free is not None else [f"@s{ids()}" for _ in measured]

    def size(index: int) -> Any:
        if free is not None:
            return renumbered(measured[0], ids, references)
        return ident(ids(), sizes[index])

    def plus(left: Any, right: Any) -> Any:
        return call(ids(), "_+_", left, right)

    def times(left: Any, right: Any) -> Any:
        return call(ids(), "_*_", left, right)

    def ceil_div(numerator: Any, denominator: int) -> Any:
        return call(ids(), "_/_", plus(numerator, int_constant(ids(), denominator - 1)),
                    int_constant(ids(), denominator))

    code = how.charge
    if code == cost.Charge.TRAVERSE_FIRST:
        amount = ceil_div(size(0), 10)
    elif code in (cost.Charge.TRAVERSE_FIRST_TWICE, cost.Charge.BUILD_RESULT):
        amount = ceil_div(times(int_constant(ids(), 2), size(0)), 10)
    elif code == cost.Charge.IN_LIST:
        amount = size(0)
    elif code == cost.Charge.CONCATENATE:
        amount = ceil_div(plus(size(0), size(1)), 10)
    elif code == cost.Charge.CONTAINS:
        amount = times(ceil_div(size(0), 10), ceil_div(size(1), 10))
    elif code == cost.Charge.REGEX:
        amount = times(ceil_div(plus(int_constant(ids(), 1), size(0)), 10), ceil_div(size(1), 4))
    else:  # COMPARE: the shorter operand
        shorter = call(ids(), "_?_:_", call(ids(), "_<_", size(0), size(1)), size(0), size(1))
        amount = ceil_div(shorter, 10)
    if how.extra:
        amount = plus(amount, int_constant(ids(), how.extra))
    name = f"@c{ids()}"
    function = cost.CHARGE_OWNER_FUNCTION if owner_args else cost.CHARGE_FUNCTION
    beyond_first = call(ids(), "_-_", ident(ids(), name), int_constant(ids(), cost.SIZED_CALL_BASE))
    pay = call(ids(), function, *(int_constant(ids(), owner) for owner in owner_args), beyond_first)
    if not owner_args and cost.MAX_FIXED_CHARGE:
        # c <= B + N ? (c == B + 1 ? charge1() : c == B + 2 ? charge2() : ... chargeN()) : charge(c - B)
        fixed = call(ids(), cost.fixed_charge_function(cost.MAX_FIXED_CHARGE))
        for units in range(cost.MAX_FIXED_CHARGE - 1, 0, -1):
            fixed = call(ids(), "_?_:_",
                         call(ids(), "_==_", ident(ids(), name), int_constant(ids(), cost.SIZED_CALL_BASE + units)),
                         call(ids(), cost.fixed_charge_function(units)), fixed)
        pay = call(ids(), "_?_:_", call(ids(), "_<=_", ident(ids(), name),
                                        int_constant(ids(), cost.SIZED_CALL_BASE + cost.MAX_FIXED_CHARGE)),
                   fixed, pay)
    expression = bind(ids, name, amount,
                      call(ids(), "_?_:_", call(ids(), "_>_", ident(ids(), name),
                                                int_constant(ids(), cost.SIZED_CALL_BASE)),
                           pay, bool_constant(ids(), True)))
    if free is None:
        for sized_name, value in reversed(list(zip(sizes, measured, strict=True))):
            expression = bind(ids, sized_name, value, expression)
        return expression
    one_unit = _largest_size_charging(how, 1) if not owner_args and cost.MAX_FIXED_CHARGE else None
    if one_unit is not None and one_unit > free:
        expression = call(ids(), "_?_:_", call(ids(), "_<=_", size(0), int_constant(ids(), one_unit)),
                          call(ids(), cost.fixed_charge_function(1)), expression)
    return call(ids(), "_?_:_", call(ids(), "_<=_", size(0), int_constant(ids(), free)), bool_constant(ids(), True),
                expression)


def _literal_size(expr: Any, folded: Mapping[int, Any]) -> int | None:
    """The size of a string or list literal, or of the string a folded call will be, as cel-go measures it
    (code points, elements)."""
    value = folded.get(expr.id)
    if isinstance(value, str):
        return len(value)
    kind = expr.WhichOneof("expr_kind")
    if kind == "const_expr":
        constant = expr.const_expr.WhichOneof("constant_kind")
        if constant == "string_value":
            return len(expr.const_expr.string_value)
        if constant == "bytes_value":
            return len(expr.const_expr.bytes_value)
        return None
    if kind == "list_expr" and not expr.list_expr.optional_indices:
        return len(expr.list_expr.elements)
    return None


def _is_cheap(expr: Any) -> bool:
    """An operand that costs nothing to evaluate twice: constants, identifiers, field selections and
    constant indexes of those. Anything else is bound once instead of duplicated."""
    kind = expr.WhichOneof("expr_kind")
    if kind in ("const_expr", "ident_expr"):
        return True
    if kind == "select_expr":
        return not expr.select_expr.test_only and _is_cheap(expr.select_expr.operand)
    if kind == "call_expr" and expr.call_expr.function == "_[_]" and len(expr.call_expr.args) == 2:
        return _is_cheap(expr.call_expr.args[0]) and expr.call_expr.args[1].WhichOneof("expr_kind") == "const_expr"
    return False


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked expression rewritten for the runtime, and its cost outside comprehensions."""

    checked: Any
    static_cost: int
    #: Whether one step of it may cost without bound: it calls a function charged by the product of two
    #: sizes (contains, matches, find, findAll).
    multiplies: bool


# -- qualification of values that are not maps ------------------------------------------------------
#
# cel-go qualifies an attribute (interpreter/attributes.go, ``refQualify``): a map by key, a list by index, and any
# other value (null above all: a CREATE's oldObject, ``selector: null``) as having no key, so that a presence test
# is false (``has(oldObject.metadata)``), an optional selection or index is ``optional.none()``, and a plain one
# fails with ``no such key: <key>``. On a list, a field name fails with ``unsupported index type 'string' in
# list``, in a presence test too. Once a chain has passed an optional selection, every later selection and index
# of it is a presence test of that kind (``x.?a.b`` is none when ``x.a`` is null). cel-cpp fails on all of these
# ("Applying SELECT to non-message type", no overload of ``_?._`` for null).

def _may_not_be_map(type_name: str) -> bool:
    """Whether a value of this checked type can be something other than a map or a list at run time: ``dyn``,
    null, and the Kubernetes object types (``namespaceObject`` is null for a cluster-scoped request)."""
    return type_name in ("dyn", "null_type") or (
        "." in type_name and "(" not in type_name and not type_name.startswith("google.protobuf."))


def _is_optional(type_name: str) -> bool:
    return type_name.startswith("optional_type(")


#: One access of a chain: (the operand, whether a field (else an index), the key, whether written optional).
_Link = tuple[Any, bool, Any, bool]


def _link(node: Any, kind: str | None, references: Any) -> _Link | None:
    if kind == "select_expr":
        if node.select_expr.test_only or node.id in references:
            return None
        key = ast.Expr(id=-1)
        key.const_expr.string_value = node.select_expr.field
        return node.select_expr.operand, True, key, False
    if kind == "call_expr" and not node.call_expr.HasField("target") and len(node.call_expr.args) == 2:
        function = node.call_expr.function
        if function in ("_?._", "_[?_]", "_[_]"):
            return node.call_expr.args[0], function == "_?._", node.call_expr.args[1], function != "_[_]"
    return None


def inner_links(checked: Any) -> frozenset[int]:
    """The accesses that are the operand of another access: ``_qualified`` rewrites a chain from its last one."""
    references = checked.reference_map
    inner = set()
    for node in ast.walk(checked.expr):
        link = _link(node, node.WhichOneof("expr_kind"), references)
        if link is not None and _link(link[0], link[0].WhichOneof("expr_kind"), references) is not None:
            inner.add(link[0].id)
    return frozenset(inner)


def _qualified(node: Any, kind: str | None, types: Mapping[int, str], ids: Ids, references: Any,
               inner: frozenset[int]) -> Any:
    """cel-go's form of a presence test or of a chain with an optional access (see above), or None when ``node``
    is neither."""
    if kind == "select_expr" and node.select_expr.test_only:
        select = node.select_expr
        if not _may_not_be_map(types.get(select.operand.id, "dyn")):
            return None
        return _with_value(select.operand, ids, references, lambda value: _by_kind(
            ids, value, _select(ids, value(), select.field, test_only=True),
            call(ids(), "_==_", _list_field_error(ids, select.field), _null(ids)),
            bool_constant(ids(), False)))
    if node.id in inner:
        return None
    links: list[_Link] = []
    root = node
    while (link := _link(root, root.WhichOneof("expr_kind"), references)) is not None:
        links.append(link)
        root = link[0]
    if not links:
        return None
    links.reverse()
    root_optional = _is_optional(types.get(root.id, "dyn"))
    optional_at = [i for i, link in enumerate(links) if link[3]]
    if not root_optional and not optional_at:
        return None
    first = 0 if root_optional else optional_at[0]

    def chain(value: Callable[[], Any]) -> Any:
        prefix = value
        for operand_link in links[:first]:
            prefix = _accessor(prefix, operand_link, ids, references)
        return _with_value(prefix(), ids, references, lambda start: _optional_steps(start, links[first:], ids,
                                                                                   references))

    if not root_optional:
        return _with_value(root, ids, references, chain)
    return _with_value(root, ids, references, lambda optional: call(
        ids(), "_?_:_", call(ids(), "hasValue", target=optional()),
        chain(lambda: call(ids(), "value", target=optional())), _none(ids)))


def _accessor(value: Callable[[], Any], link: _Link, ids: Ids, references: Any) -> Callable[[], Any]:
    """The plain access ``link`` makes of ``value``, as a factory of copies."""
    _, is_field, key, _ = link

    def access() -> Any:
        if is_field:
            return _select(ids, value(), key.const_expr.string_value)
        return call(ids(), "_[_]", value(), renumbered(key, ids, references))
    return access


def _optional_steps(value: Callable[[], Any], links: Sequence[_Link], ids: Ids, references: Any) -> Any:
    """``links`` (the first of them optional) applied to ``value`` as cel-go does after an optional access:
    each one a presence test (a map by key, a list by index, anything else absent), the result an optional."""
    _, is_field, key, _ = links[0]
    if not is_field and key.WhichOneof("expr_kind") not in ("const_expr", "ident_expr"):
        # A computed key is evaluated once.
        name = f"@k{ids()}"
        bound_key = ast.Expr()
        bound_key.CopyFrom(key)
        return bind(ids, name, bound_key, _optional_steps(
            value, [(links[0][0], False, ident(ids(), name), True), *links[1:]], ids, references))
    if is_field:
        present = call(ids(), "_?._", value(), _string(ids(), key.const_expr.string_value))
    else:
        present = call(ids(), "_[?_]", value(), renumbered(key, ids, references))
    if len(links) > 1:
        rest = _with_value(_accessor(value, links[0], ids, references)(), ids, references,
                           lambda following: _optional_steps(following, links[1:], ids, references))
        # On a map (the branch this is in for a field) a presence test is the engine's own, not a call.
        found = (_select(ids, value(), key.const_expr.string_value, test_only=True) if is_field
                 else call(ids(), "hasValue", target=present))
        present = call(ids(), "_?_:_", found, rest, _none(ids))
    if is_field:
        return _by_kind(ids, value, present, _list_field_error(ids, key.const_expr.string_value), _none(ids))
    container = call(ids(), "_||_", _is_kind(ids, value(), "map"), _is_kind(ids, value(), "list"))
    return call(ids(), "_?_:_", container, present, _none(ids))


def _is_chain(expr: Any) -> bool:
    """An access chain cheap to evaluate twice: identifiers, field selections, constant indexes, optionals'
    values; the object pruning (``reads.py``) follows it."""
    kind = expr.WhichOneof("expr_kind")
    if kind in ("const_expr", "ident_expr"):
        return True
    if kind == "select_expr":
        return not expr.select_expr.test_only and _is_chain(expr.select_expr.operand)
    if kind != "call_expr":
        return False
    call_node = expr.call_expr
    if call_node.function == "value" and call_node.HasField("target") and not call_node.args:
        return _is_chain(call_node.target)
    return (call_node.function == "_[_]" and not call_node.HasField("target") and len(call_node.args) == 2
            and call_node.args[1].WhichOneof("expr_kind") == "const_expr" and _is_chain(call_node.args[0]))


def _with_value(operand: Any, ids: Ids, references: Any, body: Callable[[Callable[[], Any]], Any]) -> Any:
    """``body`` over ``operand``, which it may read several times: a chain is copied for each read, anything
    else is bound once."""
    if _is_chain(operand):
        return body(lambda: renumbered(operand, ids, references))
    name = f"@q{ids()}"
    value = ast.Expr()
    value.CopyFrom(operand)
    return bind(ids, name, value, body(lambda: ident(ids(), name)))


def _by_kind(ids: Ids, value: Callable[[], Any], on_map: Any, on_list: Any, on_other: Any) -> Any:
    return call(ids(), "_?_:_", _is_kind(ids, value(), "map"), on_map,
                call(ids(), "_?_:_", _is_kind(ids, value(), "list"), on_list, on_other))


def _list_field_error(ids: Ids, field_name: str) -> Any:
    """cel-go's error for a field of a list, ``unsupported index type 'string' in list``: the engine's for a
    string index of one (``messages.py`` words it), of an empty list so that the object pruning reads nothing."""
    return call(ids(), "_[_]", list_of(ids()), _string(ids(), field_name))


def _is_kind(ids: Ids, value: Any, kind: str) -> Any:
    return call(ids(), "_==_", call(ids(), "type", value), ident(ids(), kind))


def _select(ids: Ids, operand: Any, field_name: str, test_only: bool = False) -> Any:
    node = ast.Expr(id=ids())
    node.select_expr.operand.CopyFrom(operand)
    node.select_expr.field = field_name
    node.select_expr.test_only = test_only
    return node


def _null(ids: Ids) -> Any:
    node = ast.Expr(id=ids())
    node.const_expr.null_value = 0
    return node


def _none(ids: Ids) -> Any:
    return call(ids(), "optional.none")


def diagnostic(checked: Any) -> Any:
    """``checked`` (a runtime form, its variables linked) with every plain selection and index of a value that is
    neither a map nor a list failing with cel-go's words, ``no such key: <key>`` (cel-cpp names no key). Slower
    than the form it is made from and otherwise the same: it is run only to word an error that one gave."""
    result = ast.CheckedExpr()
    result.CopyFrom(checked)
    ids = Ids(ast.max_id(result))
    references = result.reference_map
    for node in reversed(list(ast.walk(result.expr))):
        kind = node.WhichOneof("expr_kind")
        if kind == "select_expr" and not node.select_expr.test_only and node.id not in references:
            def selected(value: Callable[[], Any], field_name: str = node.select_expr.field) -> Any:
                return _by_kind(ids, value, _select(ids, value(), field_name),
                                call(ids(), "_[_]", value(), _string(ids(), field_name)),
                                call(ids(), "@staticadm.fail", _string(ids(), f"no such key: {field_name}")))

            guarded = _with_value(node.select_expr.operand, ids, references, selected)
        elif (kind == "call_expr" and node.call_expr.function == "_[_]" and not node.call_expr.HasField("target")
              and len(node.call_expr.args) == 2):
            key = node.call_expr.args[1]

            def indexed(value: Callable[[], Any], key: Any = key) -> Any:
                container = call(ids(), "_||_", _is_kind(ids, value(), "map"), _is_kind(ids, value(), "list"))
                message = call(ids(), "_+_", _string(ids(), "no such key: "),
                               call(ids(), "string", renumbered(key, ids, references)))
                return call(ids(), "_?_:_", container, call(ids(), "_[_]", value(), renumbered(key, ids, references)),
                            call(ids(), "@staticadm.fail", message))

            guarded = _with_value(node.call_expr.args[0], ids, references, indexed)
        elif (kind == "call_expr" and node.call_expr.function == "size" and node.id not in references
              and len(node.call_expr.args) == 1):
            # A size the cost rewrites measure: on a value that has none the call measured fails with its own
            # words (cel-go charges a call after making it).
            guarded = _with_value(node.call_expr.args[0], ids, references, lambda value: call(
                ids(), "_?_:_", call(ids(), "@in", call(ids(), "type", value()), list_of(
                    ids(), *(ident(ids(), name) for name in ("string", "bytes", "list", "map")))),
                call(ids(), "size", value()), int_constant(ids(), 0)))
        elif kind == "comprehension_expr" and not is_binding(node.comprehension_expr):
            loop = node.comprehension_expr
            go_type: Any = _string(ids(), "types.Unknown")
            for cel_type, go_name in reversed(_GO_VALUE_TYPES):
                go_type = call(ids(), "_?_:_", call(ids(), "_==_", call(ids(), "type", ident(ids(), "@range")),
                                                    ident(ids(), cel_type)), _string(ids(), go_name), go_type)
            message = call(ids(), "_+_", _string(ids(), "got '"),
                           call(ids(), "_+_", go_type, _string(ids(), "', expected iterable type")))
            checked_range = bind(ids, "@range", ast.Expr(), call(
                ids(), "_?_:_", call(ids(), "_||_", _is_kind(ids, ident(ids(), "@range"), "map"),
                                     _is_kind(ids, ident(ids(), "@range"), "list")),
                ident(ids(), "@range"), call(ids(), "@staticadm.fail", message)))
            checked_range.comprehension_expr.accu_init.CopyFrom(loop.iter_range)
            loop.iter_range.CopyFrom(checked_range)
            continue
        else:
            continue
        guarded.id = node.id
        node.CopyFrom(guarded)
    return result


def _make_type_constant(node: Any, type_name: str) -> None:
    # The runtime represents every Kubernetes value as a map, so type(x) cannot tell them apart there;
    # the checker already knows the static type, which is all type(x) can be for these values.
    node_id = node.id
    node.Clear()
    node.id = node_id
    node.const_expr.string_value = TYPE_CONSTANT_PREFIX + type_name


def prepare(checked: Any, *, opaque_types: frozenset[str],
            null_variables: frozenset[str] = frozenset(), owner: int = BODY_OWNER,
            typed_calls: Mapping[str, str] | None = None,
            foldable: Mapping[str, Callable[[str], Any]] | None = None, struct_literals: bool = True,
            guards: Mapping[int, narrowing.Guard] | None = None) -> Prepared:
    """The runtime form of a checked expression.

    ``null_variables`` are always null for this kind of expression (match conditions never see
    ``namespaceObject``), so it can share an activation with the others of its request. ``owner`` is
    who pays for the cost charged inside: the expression itself, or the variable of that index.
    ``typed_calls`` maps overload ids to the runtime function registered with that overload's concrete
    result type (a Python function with a dyn result cannot return a duration or timestamp).
    ``foldable`` maps overload ids of Kubernetes value constructors (``quantity('1Gi')``, ``ip(...)``,
    ``cidr``, ``url``, ``semver``) to their Python implementation: a call of one on a string literal is
    made now and replaced by its value (see ``_folded``). ``struct_literals`` turns ``Object``/``JSONPatch``
    creations into map literals (see ``_struct_literal``). ``guards`` are the calls cel-go runs as one
    overload (``narrowing.analyze``): each is made to fail for an argument of another type (``_guarded``).
    """
    result = ast.CheckedExpr()
    result.CopyFrom(checked)
    ids = Ids(ast.max_id(result))
    types = ast.node_types(result)
    function_of = cost.function_names(result)
    overloads = {node_id: tuple(reference.overload_id) for node_id, reference in result.reference_map.items()}

    #: The value of every foldable call on a literal, by its node: what it is replaced by below.
    folded = {node.id: value for node in ast.walk(result.expr)
              if foldable and (value := _fold_value(node, overloads, foldable)) is not None}
    # Costs are computed on the expression as written, before any node is replaced; a string a folded call
    # will be is measured as the runtime would measure the call's result.
    sized: dict[int, cost.SizedCall] = {}
    fixed: dict[int, int] = {}
    for node in ast.walk(result.expr):
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        call_node = node.call_expr
        operands = ([call_node.target] if call_node.HasField("target") else []) + list(call_node.args)
        how = cost.sized_call(call_node.function, overloads.get(node.id, ()),
                              [types.get(operand.id, "dyn") for operand in operands])
        if how is None:
            continue
        literal_sizes = [_literal_size(operands[position], folded) if position >= 0 else None
                         for position in how.measured]
        if not how.when_types and all(size is not None for size in literal_sizes):
            # Every measured operand is a literal: the charge is known now (``'a' in ['a', 'b']``).
            fixed[node.id] = cost.charge_amount(how.charge, tuple(size or 0 for size in literal_sizes)) + how.extra
        else:
            sized[node.id] = how
    #: ``==``/``!=`` nodes and the positions of their operands that are Quantities, found before any is replaced.
    quantity_equalities = {
        node.id: positions for node in ast.walk(result.expr)
        if node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function in ("_==_", "_!=_", "@in")
        and (positions := tuple((index, types.get(operand.id) == _QUANTITY_TYPE)
                                for index, operand in enumerate(node.call_expr.args)
                                if types.get(operand.id) in (_QUANTITY_TYPE, _QUANTITY_LIST_TYPE)))}
    sized_ids = frozenset(sized)
    weights = {node.id: cost.iteration_cost(node.comprehension_expr, function_of, sized_ids, fixed)
               for node in ast.walk(result.expr) if node.WhichOneof("expr_kind") == "comprehension_expr"}
    static = cost.static_cost(result.expr, function_of, sized_ids, fixed)

    owner_args = () if owner == BODY_OWNER else (owner,)
    # Collect first: rewriting while walking would visit the nodes we insert. Children are rewritten
    # before their parents (reversed pre-order), so a wrapper copies already rewritten operands.
    nodes = list(ast.walk(result.expr))
    inner = inner_links(result)
    listers = False
    for node in reversed(nodes):
        kind = node.WhichOneof("expr_kind")
        reference = result.reference_map.get(node.id) if node.id in result.reference_map else None
        if kind == "ident_expr" and reference is not None and reference.name in null_variables:
            node.const_expr.null_value = 0
            continue
        if reference is not None and reference.name in opaque_types and not reference.overload_id:
            # The identifier of a Kubernetes value type: compare as a constant (see below).
            _make_type_constant(node, reference.name)
            continue
        if kind == "call_expr" and node.call_expr.function == "type" and not node.call_expr.HasField("target"):
            checked_type = types.get(node.id, "")
            if checked_type.startswith("type(") and checked_type[5:-1] in opaque_types:
                _make_type_constant(node, checked_type[5:-1])
                continue
        qualified = _qualified(node, kind, types, ids, result.reference_map, inner)
        if qualified is not None:
            # Keeps the node's id: a parent finds its operand's checked type by it.
            qualified.id = node.id
            node.CopyFrom(qualified)
            continue
        if kind == "comprehension_expr":
            comprehension = node.comprehension_expr
            condition = ast.Expr()
            condition.CopyFrom(comprehension.loop_condition)
            weight = weights[node.id]
            comprehension.loop_condition.CopyFrom(call(ids(), "_&&_", tick(ids, weight, owner_args), condition))
            if builds_collection(comprehension):
                _guard_collection_loop(node, ids)
        elif kind == "call_expr":
            call_node = node.call_expr
            resolved = overloads.get(node.id, ())
            literal = _struct_literal(call_node, types, ids) if struct_literals else None
            if literal is not None:
                node.CopyFrom(literal)
                continue
            if node.id in folded:
                node.CopyFrom(_folded(folded[node.id], ids))
                continue
            if typed_calls and len(resolved) == 1 and resolved[0] in typed_calls:
                # The checker resolved one overload whose result the engine needs declared concretely.
                call_node.function = typed_calls[resolved[0]]
            if (call_node.function == "format" and call_node.HasField("target") and len(call_node.args) == 1
                    and any(word in types.get(call_node.args[0].id, "dyn") for word in _SPELT_FORMAT_TYPES)):
                call_node.args[0].CopyFrom(_bool_keys_spelt(call_node.args[0], ids))
            if call_node.function == "optional.ofNonZeroValue" and len(call_node.args) == 1:
                _timestamp_zero_is_go_zero(node, ids)
            elif (call_node.function == "-_" and len(call_node.args) == 1
                  and types.get(call_node.args[0].id, "dyn") == "dyn"):
                _negated_duration_behind_dyn(node, ids)
            elif call_node.function == "lists.range" and len(call_node.args) == 1:
                call_node.args[0].CopyFrom(call(ids(), RANGE_GUARD_FUNCTION, call_node.args[0]))
            for position, single in quantity_equalities.get(node.id, ()):
                # A Quantity's payload may carry its representation, which Quantity.Equal does not compare: a
                # Quantity, or each of a list of them (list equality and ``in`` compare elements with Equal).
                operand = ast.Expr()
                operand.CopyFrom(call_node.args[position])
                if single:
                    compared = call(ids(), QUANTITY_VALUE_FUNCTION, operand)
                else:
                    element = call(ids(), QUANTITY_VALUE_FUNCTION, ident(ids(), "@qe"))
                    compared = _comprehension(ids, "@qe", operand, "@qv", list_of(ids()),
                                              call(ids(), "_+_", ident(ids(), "@qv"), list_of(ids(), element)))
                call_node.args[position].CopyFrom(compared)
            if guards and node.id in guards:
                _guarded(node, guards[node.id], ids)
            if _hands_errors_over(call_node, types):
                _lister_operand(node, ids)
                listers = True
            if node.id in sized:
                _charge_after(node, sized[node.id], ids, owner_args, result.reference_map,
                              boolean=types.get(node.id) == "bool")
    if listers and owner != BODY_OWNER:
        _lister_panics_confined(result.expr, ids, result.reference_map)
    multiplies = any(how.charge in (cost.Charge.CONTAINS, cost.Charge.REGEX) for how in sized.values())
    return Prepared(result, static, multiplies)


#: Format arguments of these types are spelt before they reach Python (see _bool_keys_spelt).
_SPELT_FORMAT_TYPES = ("map", "dyn", "Duration")


def _comprehension(ids: Ids, iter_var: str, iter_range: Any, accu_var: str, accu_init: Any, step: Any,
                   iter_var2: str = "") -> Any:
    node = ast.Expr(id=ids())
    loop = node.comprehension_expr
    loop.iter_var = iter_var
    if iter_var2:
        loop.iter_var2 = iter_var2
    loop.iter_range.CopyFrom(iter_range)
    loop.accu_var = accu_var
    loop.accu_init.CopyFrom(accu_init)
    loop.loop_condition.CopyFrom(bool_constant(ids(), True))
    loop.loop_step.CopyFrom(step)
    loop.result.CopyFrom(ident(ids(), accu_var))
    return node


def _bool_keys_spelt(arguments: Any, ids: Ids) -> Any:
    """``args.map(a, type(a) == map ? a.transformMapEntry(k, v, {spelt(k): v}) : spelt(a))``: the maps
    among ``format``'s arguments reach Python with their bool keys as prefixed strings (a Python dict cannot
    hold both ``true`` and ``1``), and durations as prefixed ``string(d)`` (``datetime.timedelta`` stops at
    microseconds); ``string_format.decode_arguments`` reads them back."""
    key = call(ids(), "_?_:_",
               call(ids(), "_==_", call(ids(), "type", ident(ids(), "@fk")), ident(ids(), "bool")),
               call(ids(), "_+_", _string(ids(), BOOL_KEY_PREFIX), call(ids(), "string", ident(ids(), "@fk"))),
               ident(ids(), "@fk"))
    respelt = _comprehension(ids, "@fk", ident(ids(), "@fa"), "@fm", _empty_map(ids()),
                             call(ids(), "cel.@mapInsert", ident(ids(), "@fm"), key, ident(ids(), "@fv")),
                             iter_var2="@fv")
    duration = call(ids(), "_+_", _string(ids(), DURATION_PREFIX), call(ids(), "string", ident(ids(), "@fa")))
    element = call(ids(), "_?_:_",
                   call(ids(), "_==_", call(ids(), "type", ident(ids(), "@fa")), ident(ids(), "map")),
                   respelt,
                   call(ids(), "_?_:_", call(ids(), "_==_", call(ids(), "type", ident(ids(), "@fa")),
                                             ident(ids(), "google.protobuf.Duration")),
                        duration, ident(ids(), "@fa")))
    original = ast.Expr()
    original.CopyFrom(arguments)
    return _comprehension(ids, "@fa", original, "@fl", list_of(ids()),
                          call(ids(), "_+_", ident(ids(), "@fl"), list_of(ids(), element)))


def _fold_value(node: Any, overloads: Mapping[int, tuple[str, ...]],
                foldable: Mapping[str, Callable[[str], Any]]) -> Any:
    """The value of a constructor called on a string literal (``quantity('1Gi')``, ``jsonpatch.escapeKey('a/b')``),
    when it is a string or a tagged map of strings (a Kubernetes value: ``values.py``); None to leave the call as
    it is: not such a call, an argument that is not a literal, or one the constructor refuses (the call then fails
    at run time with the constructor's own error)."""
    if node.WhichOneof("expr_kind") != "call_expr":
        return None
    call_node = node.call_expr
    resolved = overloads.get(node.id, ())
    if len(resolved) != 1 or resolved[0] not in foldable or call_node.HasField("target") or len(call_node.args) != 1:
        return None
    argument = call_node.args[0]
    if argument.WhichOneof("expr_kind") != "const_expr" or argument.const_expr.WhichOneof("constant_kind") != \
            "string_value":
        return None
    try:
        value = foldable[resolved[0]](argument.const_expr.string_value)
    except Exception:  # refused: the runtime call reports it
        return None
    if isinstance(value, str) or (isinstance(value, dict) and all(
            isinstance(key, str) and isinstance(item, str) for key, item in value.items())):
        return value
    return None


def _folded(value: str | dict[str, str], ids: Ids) -> Any:
    """The literal the engine would have had back from a folded call (``_fold_value``). Cost is unchanged: it was
    computed on the call."""
    if isinstance(value, str):
        return _string(ids(), value)
    node = ast.Expr(id=ids())
    node.struct_expr.SetInParent()
    for key, item in value.items():
        entry = node.struct_expr.entries.add()
        entry.id = ids()
        entry.map_key.CopyFrom(_string(ids(), key))
        entry.value.CopyFrom(_string(ids(), item))
    return node


def _struct_literal(call_node: Any, types: Mapping[int, str], ids: Ids) -> Any:
    """``Object.<path>{...}`` / ``JSONPatch{...}`` (the calls ``structs.py`` made of them) as the map literal
    their functions return (``objects.make_object``, ``make_jsonpatch``): the engine builds it without calling
    into Python, which costs a round trip per creation and, with cel-expr-python 0.1.3, leaks the call's
    arguments. None leaves the call: a JSONPatch whose op, path or from the checker cannot prove a string,
    since only the function raises Kubernetes' error for those, and a creation that sets a field twice. Cost was
    computed on the call."""
    function = call_node.function
    if function not in structs.RESERVED_NAMES or call_node.HasField("target"):
        return None
    *names, fields = call_node.args
    if fields.WhichOneof("expr_kind") != "struct_expr" or fields.struct_expr.message_name:
        return None
    if any(entry.map_key.const_expr.string_value.startswith(structs.SHADOWED_FIELD_PREFIX)
           for entry in fields.struct_expr.entries if entry.map_key.WhichOneof("expr_kind") == "const_expr"):
        # A field set twice: the function keeps the last.
        return None
    if function == structs.JSONPATCH_FUNCTION:
        for entry in fields.struct_expr.entries:
            key = entry.map_key
            if (key.WhichOneof("expr_kind") == "const_expr" and key.const_expr.string_value in ("op", "path", "from")
                    and (entry.optional_entry or not _is_string(entry.value, types))):
                return None
        payload: list[tuple[str, Any]] = []
        tag = structs.JSONPATCH_TYPE
    else:
        if len(names) != 1 or names[0].WhichOneof("expr_kind") != "const_expr":
            return None
        payload = [("name", names[0])]
        tag = structs.OBJECT_TYPE
    node = ast.Expr(id=ids())
    node.struct_expr.SetInParent()
    for key, value in ((TYPE_TAG, _string(ids(), tag)), *payload, ("fields", fields)):
        entry = node.struct_expr.entries.add()
        entry.id = ids()
        entry.map_key.CopyFrom(_string(ids(), key))
        entry.value.CopyFrom(value)
    return node


def _is_string(node: Any, types: Mapping[int, str]) -> bool:
    """Whether a node is a string: so checked, or a string literal (a folded call has no checked type)."""
    if node.WhichOneof("expr_kind") == "const_expr":
        return node.const_expr.WhichOneof("constant_kind") == "string_value"
    return types.get(node.id) == "string"


def _string(node_id: int, value: str) -> Any:
    node = ast.Expr(id=node_id)
    node.const_expr.string_value = value
    return node


def _empty_map(node_id: int) -> Any:
    node = ast.Expr(id=node_id)
    node.struct_expr.SetInParent()
    return node


#: cel-go's zero timestamp is Go's zero time; cel-cpp's is the Unix epoch.
_GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def _negated_duration_behind_dyn(node: Any, ids: Ids) -> None:
    """``-x`` of a ``dyn`` that holds a duration: cel-go negates it (its Duration is a ``traits.Negater``), cel-cpp's
    ``-_`` knows ints and doubles only. ``bind(n, x, type(n) == google.protobuf.Duration ? duration('0s') - n : -n)``:
    a duration is subtracted from zero natively, anything else negated (or refused) as before."""
    name = f"@neg{node.id}"
    operand = ast.Expr()
    operand.CopyFrom(node.call_expr.args[0])
    zero = ast.Expr(id=ids())
    zero.const_expr.string_value = "0s"
    is_duration = call(ids(), "_==_", call(ids(), "type", ident(ids(), name)),
                       ident(ids(), "google.protobuf.Duration"))
    negated = call(ids(), "_?_:_", is_duration,
                   call(ids(), "_-_", call(ids(), "duration", zero), ident(ids(), name)),
                   call(ids(), "-_", ident(ids(), name)))
    wrapped = bind(ids, name, operand, negated)
    wrapped.id = node.id
    node.CopyFrom(wrapped)


def _guarded(node: Any, guard: narrowing.Guard, ids: Ids) -> None:
    """``f(x)`` that cel-go runs as the one overload taking ``guard.parameter``: its argument becomes
    ``bind(g, x, type(g) == <parameter> ? g : <no such overload: f(type of g)>)``, so ``f`` sees either a value
    its overload takes or the error, which it passes on."""
    name = f"@narrowed{node.id}"
    argument = ast.Expr()
    argument.CopyFrom(node.call_expr.args[0])
    matches = call(ids(), "_==_", call(ids(), "type", ident(ids(), name)), ident(ids(), guard.parameter))
    refused = call(ids(), NO_SUCH_OVERLOAD_FUNCTION, _string(ids(), guard.function), ident(ids(), name))
    node.call_expr.args[0].CopyFrom(bind(ids, name, argument, call(ids(), "_?_:_", matches, ident(ids(), name),
                                                                    refused)))


def _hands_errors_over(call_node: Any, types: Mapping[int, str]) -> bool:
    """cel-go v0.29.2's ext/lists.go ``sort()`` on an operand the checker typed as a list of a concrete element
    type (one of its per-element-type overloads), and ``distinct()`` on any operand (a list or ``dyn``: it has one
    overload), call their implementation even with an error operand, which asserts it is a ``traits.Lister`` and
    panics (kube-apiserver recovers the panic as the expression's error). ``sort()`` on a ``dyn`` or a
    ``list(dyn)`` is dispatched among its overloads at runtime, which passes an error on without calling any
    (checked against kube-apiserver's admission code)."""
    if not call_node.HasField("target") or call_node.args:
        return False
    if call_node.function == "distinct":
        return True
    operand_type = types.get(call_node.target.id, "dyn")
    return call_node.function == "sort" and operand_type.startswith("list(") and operand_type != "list(dyn)"


def _lister_operand(node: Any, ids: Ids) -> None:
    """The operand ``x`` of such a call becomes
    ``enter() ? bind(l, x, (size([l]) == 1 ? leave() : false) ? l : l) : null``: ``leave()`` runs only once ``x``
    is a value (a failing condition skips both branches), so an evaluation that reached ``x`` and saw it fail
    entered once more than it left. ``x``'s value and error are passed on unchanged."""
    name = f"@lister{node.id}"
    operand = ast.Expr()
    operand.CopyFrom(node.call_expr.target)
    is_value = call(ids(), "_==_", call(ids(), "size", list_of(ids(), ident(ids(), name))), int_constant(ids(), 1))
    left = call(ids(), "_?_:_", is_value, call(ids(), LISTER_LEAVE_FUNCTION), bool_constant(ids(), False))
    passed = bind(ids, name, operand, call(ids(), "_?_:_", left, ident(ids(), name), ident(ids(), name)))
    node.call_expr.target.CopyFrom(call(ids(), "_?_:_", call(ids(), LISTER_ENTER_FUNCTION), passed, _null(ids)))


def _lister_panics_confined(root: Any, ids: Ids, references: Any) -> None:
    """A variable's expression ``v`` becomes ``mark() ? bind(r, v, check() ? r : r) : null``: ``check()`` runs
    however ``v`` ended and fails when an operand of sort()/distinct() failed since ``mark()``."""
    original = moved_aside(root, ids, references)
    name = f"@listers{root.id}"
    checked = call(ids(), "_?_:_", call(ids(), LISTER_CHECK_FUNCTION), ident(ids(), name), ident(ids(), name))
    wrapped = call(ids(), "_?_:_", call(ids(), LISTER_MARK_FUNCTION), bind(ids, name, original, checked), _null(ids))
    wrapped.id = root.id
    root.CopyFrom(wrapped)


def _timestamp_zero_is_go_zero(node: Any, ids: Ids) -> None:
    """``optional.ofNonZeroValue(t)`` of a timestamp is none for 0001-01-01T00:00:00Z (Go's zero time, what
    cel-go and so Kubernetes compare with) and has a value for the Unix epoch; cel-cpp has it the other way."""
    name = f"@nz{node.id}"
    argument = ast.Expr()
    argument.CopyFrom(node.call_expr.args[0])
    zero = ast.Expr(id=ids())
    zero.const_expr.string_value = _GO_ZERO_TIME
    is_timestamp = call(ids(), "_==_", call(ids(), "type", ident(ids(), name)),
                        ident(ids(), "google.protobuf.Timestamp"))
    timestamp_case = call(ids(), "_?_:_",
                          call(ids(), "_==_", ident(ids(), name), call(ids(), "timestamp", zero)),
                          call(ids(), "optional.none"), call(ids(), "optional.of", ident(ids(), name)))
    native = call(ids(), "optional.ofNonZeroValue", ident(ids(), name))
    wrapped = bind(ids, name, argument, call(ids(), "_?_:_", is_timestamp, timestamp_case, native))
    wrapped.id = node.id
    node.CopyFrom(wrapped)


def tick(ids: Ids, weight: int, owner_args: tuple[int, ...]) -> Any:
    """What one loop iteration calls to be charged: functions without arguments where it can (cel-expr-python
    keeps the argument tuple of every call into Python: docs/known-gaps.md), joined with ``&&``."""
    owner = owner_args[0] if owner_args else None
    parts = cost.fixed_tick_parts(weight, owner)
    if parts is None:
        return call(ids(), cost.TICK_FUNCTION, *(int_constant(ids(), value) for value in (weight, *owner_args)))
    ahead, rest = parts
    tick = call(ids(), cost.fixed_tick_function(rest, owner))
    for _ in range(ahead):
        # Unchecked additions first (always true), so the last call checks the limit on the whole weight.
        tick = call(ids(), "_&&_", call(ids(), cost.tick_ahead_function(owner)), tick)
    return tick


def tick_weight(node: Any) -> int | None:
    """What the charge ``tick`` made for one iteration of the expression's own loop (no variable's) charges, or
    None when ``node`` is not one."""
    ahead = 0
    while (node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function == "_&&_"
           and len(node.call_expr.args) == 2 and node.call_expr.args[0].WhichOneof("expr_kind") == "call_expr"
           and node.call_expr.args[0].call_expr.function == cost.tick_ahead_function()
           and not node.call_expr.args[0].call_expr.args):
        ahead += 1
        node = node.call_expr.args[1]
    if node.WhichOneof("expr_kind") != "call_expr" or node.call_expr.HasField("target"):
        return None
    function, arguments = node.call_expr.function, node.call_expr.args
    suffix = function[len(cost.TICK_FUNCTION):] if function.startswith(cost.TICK_FUNCTION) else ""
    if not arguments and suffix.isdigit():
        rest = int(suffix)
    elif (function == cost.TICK_FUNCTION and len(arguments) == 1 and not ahead
          and arguments[0].WhichOneof("expr_kind") == "const_expr"
          and arguments[0].const_expr.WhichOneof("constant_kind") == "int64_value"):
        rest = arguments[0].const_expr.int64_value
    else:
        return None
    return ahead * cost.largest_fixed_tick(None) + rest


def builds_collection(comprehension: Any) -> bool:
    """``map``, ``filter``, ``transformList``, ``transformMap``: loops that append to an empty list or map."""
    init = comprehension.accu_init
    kind = init.WhichOneof("expr_kind")
    if kind == "list_expr":
        return not init.list_expr.elements and not is_binding(comprehension)
    return kind == "struct_expr" and not init.struct_expr.entries and not init.struct_expr.message_name


def is_binding(comprehension: Any) -> bool:
    """The rewrites' ``let`` bindings iterate over an empty list literal."""
    iter_range = comprehension.iter_range
    return iter_range.WhichOneof("expr_kind") == "list_expr" and not iter_range.list_expr.elements


def _guard_collection_loop(node: Any, ids: Ids) -> None:
    """The engine copies the accumulated list on every append (a loop of n appends costs n²/2 copies), so
    a long one is evaluated in steps instead:
    ``bind(r, range, (size(r) <= APPEND_SLICE ? true : direct()) ? loop over r : fail)``; the failure is only
    the signal to re-run in steps (``evaluation.py``). A short range never calls into Python (a call with
    arguments would leave its argument tuple behind: docs/known-gaps.md)."""
    loop = ast.Expr()
    loop.CopyFrom(node)
    loop.id = ids()
    name = f"@g{node.id}"
    loop.comprehension_expr.iter_range.CopyFrom(ident(ids(), name))
    message = ast.Expr(id=ids())
    message.const_expr.string_value = STEP_MESSAGE
    short = call(ids(), "_<=_", call(ids(), "size", ident(ids(), name)), int_constant(ids(), APPEND_SLICE))
    true = ast.Expr(id=ids())
    true.const_expr.bool_value = True
    direct = call(ids(), "_?_:_", short, true, call(ids(), DIRECT_FUNCTION))
    guarded = call(ids(), "_?_:_", direct, loop, call(ids(), "@staticadm.fail", message))
    iter_range = ast.Expr()
    iter_range.CopyFrom(node.comprehension_expr.iter_range)
    wrapped = bind(ids, name, iter_range, guarded)
    wrapped.id = node.id
    node.CopyFrom(wrapped)


def _charge_after(node: Any, how: cost.SizedCall, ids: Ids, owner_args: tuple[int, ...],
                  references: Any, boolean: bool) -> None:
    """Charges a size-driven call from its operands' or its result's sizes, computed natively.

    A call returning a bool whose measured operands are cheap to read twice becomes
    ``charge(code, extra, size(a)...) ? f(a, b) : false`` (an error of ``a`` is the same error either way).
    Any other becomes ``bind(r, f(a, b), charge(code, extra, size([r]), sizes...) ? r : r)``: the call
    runs first, as in cel-go, and ``size([r])`` carries its error into the charge before anything is
    measured. Operands that are not cheap to evaluate twice are bound first and the call reads them.
    """
    call_node = node.call_expr
    has_target = call_node.HasField("target")
    operands = ([call_node.target] if has_target else []) + list(call_node.args)
    bindings: list[tuple[str, Any]] = []
    measured: list[Any] = []
    result_name = f"@r{node.id}"
    needs_result = not boolean or how.when_types or any(
        position < 0 or not _is_cheap(operands[position]) for position in how.measured)
    for position in how.measured:
        if position < 0:
            measured.append(call(ids(), "size", ident(ids(), result_name)))
            continue
        operand = operands[position]
        if _is_cheap(operand):
            measured.append(call(ids(), "size", renumbered(operand, ids, references)))
            continue
        name = f"@a{node.id}_{position}"
        moved = ast.Expr()
        moved.CopyFrom(operand)
        bindings.append((name, moved))
        replacement = ident(ids(), name)
        if has_target and position == 0:
            call_node.target.CopyFrom(replacement)
        else:
            call_node.args[position - (1 if has_target else 0)].CopyFrom(replacement)
        measured.append(call(ids(), "size", ident(ids(), name)))
    # The wrapper takes the call's place (and the type the checker gave it); the call moves to a new id.
    original = moved_aside(node, ids, references)
    charge = _native_charge(how, measured, ids, owner_args, references)
    if needs_result:
        # size([r]) carries an error of the call into the charge before anything is measured.
        probe = call(ids(), "_==_", call(ids(), "size", list_of(ids(), ident(ids(), result_name))),
                     int_constant(ids(), 1))
        charge = call(ids(), "_&&_", probe, charge)
    if how.when_types:
        # Charged only when the runtime chose a size-charged overload: type(operand) is string/bytes.
        measured_operand = measured[0].call_expr.args[0]
        tests = [call(ids(), "_==_", call(ids(), "type", renumbered(measured_operand, ids, references)),
                      ident(ids(), type_name)) for type_name in how.when_types]
        applies = tests[0]
        for test in tests[1:]:
            applies = call(ids(), "_||_", applies, test)
        charge = call(ids(), "_?_:_", applies, charge, bool_constant(ids(), True))
    if needs_result:
        guarded = call(ids(), "_?_:_", charge, ident(ids(), result_name), ident(ids(), result_name))
        wrapped = bind(ids, result_name, original, guarded)
    else:
        wrapped = call(ids(), "_?_:_", charge, original, bool_constant(ids(), False))
    for name, value in reversed(bindings):
        wrapped = bind(ids, name, value, wrapped)
    wrapped.id = node.id
    node.CopyFrom(wrapped)


