"""Which parts of ``object``, ``oldObject`` and ``request`` a set of expressions can read, so the engine is handed only
those.

The engine converts a variable's whole Python value the first time an expression reads it (~16 us per KB of a
Pod), and real requests carry much that no policy reads (``metadata.managedFields``, ``status``). Every read of a
variable starts at its identifier; following it through field selections, ``has()``, and indexes and optional
selections by a constant string gives a static path. Wherever that chain stops (a call, a comparison, an index
that is not a constant string) the value there is used as a whole, so its whole subtree is kept. A map is only
ever iterated, sized or compared where a chain stops, so removing keys no path names is invisible to every
expression: the pruned object gives every expression the same value, error and cost as the whole one.

A comprehension (``all``, ``exists``, ``map``, ``filter``...) over a static path reads that value's elements
through its iteration variable, so the paths read of that variable continue the range's path through
:data:`EACH`. Only a list is pruned element by element (same length, same order, each element pruned alike); a
map that is iterated is kept whole, as its keys are what the variable sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from staticadm.cel import ast
from staticadm.cel.rewrite import is_binding

#: Calls that continue a chain when their second argument is a constant string: index, optional select, optional
#: index.
_CHAIN_CALLS = frozenset({"_[_]", "_?._", "_[?_]"})

#: The variables pruned: the objects, and ``request``, whose userInfo, kinds, resources and options the engine would
#: otherwise convert for every activation although most policies read a field or two of it.
PRUNED_ROOTS = frozenset({"object", "oldObject", "request"})

#: A trie of keys (:data:`EACH` among them); ``None`` for a subtree kept whole.
Trie = dict[Any, Any] | None


def _chain(node: Any) -> tuple[str, tuple[str, ...]] | None:
    """(identifier, keys) when ``node`` is a static access chain from an identifier, else None."""
    keys: list[str] = []
    while True:
        kind = node.WhichOneof("expr_kind")
        if kind == "ident_expr":
            return node.ident_expr.name, tuple(reversed(keys))
        if kind == "select_expr":
            keys.append(node.select_expr.field)
            node = node.select_expr.operand
            continue
        if kind == "call_expr":
            call = node.call_expr
            if call.function == "value" and call.HasField("target") and not call.args:
                # An optional's value is the value its chain selected.
                node = call.target
                continue
            if (call.function in _CHAIN_CALLS and not call.HasField("target") and len(call.args) == 2
                    and call.args[1].WhichOneof("expr_kind") == "const_expr"
                    and call.args[1].const_expr.WhichOneof("constant_kind") == "string_value"):
                keys.append(call.args[1].const_expr.string_value)
                node = call.args[0]
                continue
        return None


class _Each:
    """The key of a path step into every element of an iterated list (:data:`EACH`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EACH"

    def __reduce__(self) -> str:
        return "EACH"  # unpickled as this module's one instance


EACH = _Each()


class _Nothing:
    """The last step of a path that reads nothing of the value there but its shape (:data:`NOTHING`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"


#: Ends a path that needs the value there kept, but none of its content: ``size(list)`` reads the length
#: only, so ``(..., EACH, NOTHING)`` keeps every element, each pruned to nothing.
NOTHING = _Nothing()

#: A path into an object: map keys, :data:`EACH` for every element of a list, and :data:`NOTHING` last for a
#: value only sized.
ReadPath = tuple[str | _Each | _Nothing, ...]
#: What a name in scope stands for: (root, the path of the root it is), or None when it is not one.
_Bound = tuple[str, ReadPath] | None


def read_paths(expr: Any, roots: frozenset[str]) -> dict[str, set[ReadPath]]:
    """The paths of ``roots`` (identifiers) that ``expr`` reads; an empty path is the whole value."""
    found: dict[str, set[ReadPath]] = {root: set() for root in roots}
    _collect(expr, {root: (root, ()) for root in roots}, found)
    return found


def _collect(expr: Any, scope: Mapping[str, _Bound], found: dict[str, set[ReadPath]]) -> None:
    stack = [expr]
    while stack:
        node = stack.pop()
        if node.WhichOneof("expr_kind") == "select_expr" and node.select_expr.test_only:
            # has(x.f) needs the key there, none of its value.
            read = _resolved(_chain(node.select_expr.operand), scope)
            if read is not None:
                found[read[0]].add(read[1] + (node.select_expr.field, NOTHING))
                continue
        chain = _chain(node)
        if chain is not None:
            # The longest chain from the top: its inner nodes are parts of it, not reads of their own.
            read = _resolved(chain, scope)
            if read is not None:
                found[read[0]].add(read[1])
            continue
        kind = node.WhichOneof("expr_kind")
        if kind == "comprehension_expr":
            _comprehension(node.comprehension_expr, scope, found)
            continue
        if kind == "call_expr":
            shape = _shape_read(node.call_expr)
            if shape is not None:
                read = _resolved(shape[0], scope)
                if read is not None:
                    found[read[0]].add(read[1] + shape[1])
                continue
        stack.extend(ast.children(node))


def _resolved(chain: tuple[str, tuple[str, ...]] | None, scope: Mapping[str, _Bound]) -> _Bound:
    """What a chain reads: (root, path) when it starts from a name in scope that stands for a root's path."""
    if chain is None:
        return None
    bound = scope.get(chain[0])
    return (bound[0], bound[1] + chain[1]) if bound is not None else None


def _shape_read(call: Any) -> tuple[tuple[str, tuple[str, ...]], ReadPath] | None:
    """A call that reads no more of a chain than its shape, and what it reads below it: ``size(x)`` or
    ``x.size()`` a list's elements but none of their content (a map's or string's size needs the whole value: see
    ``_prune``); ``type(x)``, an optional's ``hasValue()`` and a comparison with ``null`` nothing (pruning keeps a
    map a map, a list a list, and the keys on every path read)."""
    member = call.HasField("target")
    below: ReadPath
    if call.function == "size" and (not call.args if member else len(call.args) == 1):
        operand, below = (call.target if member else call.args[0]), (EACH, NOTHING)
    elif call.function == "type" and not member and len(call.args) == 1:
        operand, below = call.args[0], (NOTHING,)
    elif call.function == "hasValue" and member and not call.args:
        operand, below = call.target, (NOTHING,)
    elif call.function in ("_==_", "_!=_") and not member and len(call.args) == 2 and any(
            _is_null(argument) for argument in call.args):
        # Only null equals null, and pruning turns no value into null nor null into a value; equality is charged
        # 1 whatever its operands' sizes (cost.py). ``oldObject == null`` no longer hands the engine the old object.
        operand, below = call.args[1] if _is_null(call.args[0]) else call.args[0], (NOTHING,)
    else:
        return None
    chain = _chain(operand)
    return (chain, below) if chain is not None else None


def _is_null(node: Any) -> bool:
    return node.WhichOneof("expr_kind") == "const_expr" and node.const_expr.WhichOneof("constant_kind") == "null_value"


def _comprehension(loop: Any, scope: Mapping[str, _Bound], found: dict[str, set[ReadPath]]) -> None:
    """A comprehension: its range and initial value are read in ``scope``; its body sees the iteration and
    accumulator variables, which shadow outer names (a root included)."""
    if is_binding(loop):
        _binding(loop, scope, found)
        return
    # Two-variable comprehensions (index or key, then value) are left as reads of the whole range.
    ranged = None if loop.iter_var2 else _resolved(_chain(loop.iter_range), scope)
    element: _Bound = (ranged[0], ranged[1] + (EACH,)) if ranged is not None else None
    if ranged is None:
        _collect(loop.iter_range, scope, found)
    _collect(loop.accu_init, scope, found)
    body_scope = {**scope, loop.accu_var: None, loop.iter_var: element}
    if loop.iter_var2:
        body_scope[loop.iter_var2] = None
    # Iterated, but nothing of an element read: the range is kept whole (nothing to narrow it to).
    _collect_through(element, ranged, (loop.loop_condition, loop.loop_step, loop.result), body_scope, found)


def _binding(loop: Any, scope: Mapping[str, _Bound], found: dict[str, set[ReadPath]]) -> None:
    """A ``let`` binding (``cel.bind``, or one of the rewrites'): an empty range, so the accumulator is its
    initial value throughout, and reads through it are reads of that value's path."""
    value = _resolved(_chain(loop.accu_init), scope)
    if value is None:
        _collect(loop.accu_init, scope, found)
    # With an empty range the loop condition and step never run: the result is all that is evaluated. A value
    # bound but never read is still evaluated, so its path is kept as it is.
    _collect_through(value, value, (loop.result,), {**scope, loop.iter_var: None, loop.accu_var: value}, found)


def _collect_through(bound: _Bound, unread: _Bound, parts: tuple[Any, ...], scope: Mapping[str, _Bound],
                     found: dict[str, set[ReadPath]]) -> None:
    """Collects ``parts`` in ``scope``, where a name stands for ``bound``; when nothing below ``bound`` is
    read, ``unread`` is read instead (what evaluating the loop or binding still needs)."""
    body: dict[str, set[ReadPath]] = {root: set() for root in found}
    for part in parts:
        _collect(part, scope, body)
    for root, paths in body.items():
        found[root] |= paths
    if bound is not None and unread is not None:
        root, path = bound
        if not any(read[:len(path)] == path for read in body[root]):
            found[unread[0]].add(unread[1])


class Reads:
    """What a snapshot's expressions read of ``object``, ``oldObject`` and ``request``, and the pruning that follows."""

    __slots__ = ("_keys", "_pruners", "_tries")

    def __init__(self, tries: Mapping[str, Trie]) -> None:
        self._tries = dict(tries)
        #: Each root's trie as straight-line Python (``_pruner``), made on first use.
        self._pruners: dict[str, Callable[[Any], Any]] = {}
        #: ``keys_read`` of each root, worked out on first use.
        self._keys: dict[str, frozenset[str] | None] = {}

    @classmethod
    def of(cls, read: Iterable[Mapping[str, Iterable[ReadPath]]]) -> Reads:
        """From what each expression reads (``read_paths`` of the pruned roots; a compiled expression
        keeps its own: ``CompiledExpression.object_reads``)."""
        tries: dict[str, Trie] = {root: {} for root in PRUNED_ROOTS}
        for paths_by_root in read:
            for root, paths in paths_by_root.items():
                for path in paths:
                    tries[root] = _insert(tries[root], path)
        return cls(tries)

    @classmethod
    def everything(cls) -> Reads:
        return cls({})

    def keys_read(self, root: str) -> frozenset[str] | None:
        """The keys of a map ``root`` that ``prune`` keeps (a value made for the engine needs no others); None when
        it keeps every key (the map may be read whole or iterated)."""
        if root in self._keys:
            return self._keys[root]
        trie = self._tries.get(root) if root in self._tries else None
        keys = None if trie is None or EACH in trie else frozenset(key for key in trie if isinstance(key, str))
        self._keys[root] = keys
        return keys

    def prune(self, root: str, value: Any) -> Any:
        """``value`` (of variable ``root``) without the keys no expression can read."""
        pruner = self._pruners.get(root)
        if pruner is None:
            if root not in self._tries:
                return value
            pruner = self._pruners[root] = _pruner(self._tries[root])
        return pruner(value)


def _insert(trie: Trie, path: ReadPath) -> Trie:
    whole = not path or path[-1] is not NOTHING
    keys = path if whole else path[:-1]
    if trie is None or not keys:
        return None if whole else trie
    node = trie
    for key in keys[:-1]:
        child = node.get(key, {})
        if child is None:
            return trie
        node[key] = child
        node = child
    if whole:
        node[keys[-1]] = None
    else:
        node.setdefault(keys[-1], {})
    return trie


#: How deep (in indentation levels) a pruner's nested maps are written inline.
_INLINE_DEPTH = 40


def _pruner(trie: Trie) -> Callable[[Any], Any]:
    """``_prune`` with ``trie`` fixed, as one Python function whose nested maps are tested key by key inline (each
    request's object is pruned once, by a trie that stays the same for the snapshot): two to three times faster
    than walking the trie. Keys are passed as constants, never written into the code."""
    constants: list[Any] = []
    lines: list[str] = []
    functions: list[str] = []

    def constant(value: Any) -> str:
        constants.append(value)
        return f"_k{len(constants) - 1}"

    def function(node: Trie) -> str:
        name = f"_p{len(functions)}"
        functions.append(name)
        body: list[str] = []
        first = len(constants)
        emit(node, "v", body, 1)
        # Each key a default argument: read as a local (one instruction), not an item of a global list.
        keys = "".join(f", _k{number}=_k[{number}]" for number in range(first, len(constants)))
        lines.extend([f"def {name}(v{keys}):", *body, "    return v"])
        return name

    def emit(node: Trie, var: str, out: list[str], depth: int) -> None:
        """Lines (at ``depth``) that replace ``var`` by its pruned value."""
        pad = "    " * depth
        if node is None:
            return
        if depth > _INLINE_DEPTH:
            # Python's indentation has a limit: deeper maps get a function of their own.
            out.append(f"{pad}{var} = {function(node)}({var})")
            return
        if EACH in node:
            element = node[EACH]
            if element is not None:
                # A loop written out rather than a call per element (a Pod's env lists are pruned item by item).
                item, pruned = f"e{depth}", f"l{depth}"
                out.append(f"{pad}if isinstance({var}, list):")
                out.append(f"{pad}    {pruned} = []")
                out.append(f"{pad}    for {item} in {var}:")
                emit(element, item, out, depth + 2)
                out.append(f"{pad}        {pruned}.append({item})")
                out.append(f"{pad}    {var} = {pruned}")
            return
        result = f"r{depth}"
        out.append(f"{pad}if isinstance({var}, dict):")
        out.append(f"{pad}    {result} = {{}}")
        for key, below in node.items():
            item = f"v{depth + 1}"
            out.append(f"{pad}    if {constant(key)} in {var}:")
            out.append(f"{pad}        {item} = {var}[{constant(key)}]")
            emit(below, item, out, depth + 2)
            out.append(f"{pad}        {result}[{constant(key)}] = {item}")
        out.append(f"{pad}    {var} = {result}")

    root = function(trie)
    namespace: dict[str, Any] = {"_k": constants}
    # Our own code, written from the trie's shape; the keys (from the policies' expressions) are only constants.
    exec("\n".join(lines), namespace)
    return cast(Callable[[Any], Any], namespace[root])


def _prune(value: Any, trie: Trie) -> Any:
    if trie is None:
        return value
    if isinstance(value, dict):
        if EACH in trie:
            # A map that is iterated: its keys are what the iteration variable sees.
            return value
        # Built in the trie's key order: a map pruned by key is only ever read by key, never iterated.
        pruned = {}
        for key, below in trie.items():
            if key in value:
                item = value[key]
                pruned[key] = item if below is None else _prune(item, below)
        return pruned
    if isinstance(value, list) and EACH in trie:
        element = trie[EACH]
        return [_prune(item, element) for item in value]
    # Not a map, nor a list whose elements are read: a deeper path fails on it exactly as on the whole value.
    return value
