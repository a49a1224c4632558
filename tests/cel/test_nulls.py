"""Values that are not maps or lists, null above all (a CREATE's ``oldObject``, ``selector: null`` as typed clients
send it), behave as in cel-go v0.26, which kube-apiserver runs.

Each expected outcome is read from cel-go v0.26.1's source: interpreter/attributes.go (``refQualify``: a presence
test of a value that is no map, list or object is false, an optional access ``optional.none()``, a plain one
``no such key: <key>`` (``%v`` of the key); a field of a list ``unsupported index type 'string' in list``; after an
optional access every access of the chain is a presence test), interpreter/interpretable.go (``evalUnary`` /
``evalBinary``: ``no such overload: <function>`` when the operand lacks the trait a function declared once for all
types needs; ``evalFold``: ``got '<Go type>', expected iterable type``), common/decls/decls.go
(``MaybeNoSuchOverload``: ``no such overload: f(t1, t2)`` for the other functions) and common/stdlib/standard.go
(which functions are declared once, ``inAggregate``); cel-go v0.29.2, which kube-apiserver's admission code in
``../shared/oracle`` runs, answers ``contains``, ``startsWith``, ``endsWith`` and ``matches`` of another type with the
bare ``no such overload`` (their implementations check the operands). Kubernetes does not enable
``EnableErrorOnBadPresenceTest`` (apiserver/pkg/cel/environment/base.go). The rows marked from cel-go's own tests
repeat cel/cel_test.go TestOptionalValuesEval.
"""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import EvalError, ExpressionKind, admission_environment, evaluate_standalone
from staticadm.cel.reads import EACH, NOTHING
from tests.cel.test_evaluation import _evaluate, _variables

DATA = {"oldObject": None,
        "object": {"metadata": {"name": "web"}, "list": [1], "m": {"a": 1}, "spec": {"selector": None}}}


class Error(str):
    """An expected evaluation error, by its whole text."""


ROWS: list[tuple[str, Any]] = [
    # presence tests
    ("has(oldObject.metadata)", False),
    ("has(object.spec.selector.matchLabels)", False),
    ("has(object.metadata.name.x)", False),
    ("has(object.m.a)", True),
    ("has(object.m.b)", False),
    ("has(object.list.x)", Error("unsupported index type 'string' in list")),
    ("has(oldObject.metadata.name)", Error("no such key: metadata")),
    # optional selections and indexes
    ("oldObject.?metadata.hasValue()", False),
    ("oldObject.?metadata.?name.hasValue()", False),
    ("object.?spec.?selector.?matchLabels.orValue({}).size()", 0),
    ("object.metadata.?name.?x.hasValue()", False),
    ("object.list.?x", Error("unsupported index type 'string' in list")),
    ("oldObject[?'a'].hasValue()", False),
    ("object.m[?'a'].value()", 1),
    ("object.list[?0].value()", 1),
    ("object.list[?9].hasValue()", False),
    # after an optional access, every access of the chain is a presence test
    ("object.?spec.selector.matchLabels.hasValue()", False),
    ("object.?m.b.hasValue()", False),
    ("object.?m.a.value()", 1),
    ("object.?list[5].hasValue()", False),
    ("object.?list[0].value()", 1),
    ("optional.of(object.m).a.value()", 1),
    ("optional.none().a.hasValue()", False),
    # cel-go's own rows
    ("{'null_field': dyn(null)}.?null_field.?nested.hasValue()", False),
    ("{'zero_field': dyn(0)}.?zero_field.?invalid.hasValue()", False),
    ("{0: dyn(0)}[?0].?invalid.hasValue()", False),
    # plain selections and indexes
    ("oldObject.metadata.name", Error("no such key: metadata")),
    ("object.spec.selector.matchLabels", Error("no such key: matchLabels")),
    ("object.metadata.name.x", Error("no such key: x")),
    ("object.list.x", Error("unsupported index type 'string' in list")),
    ("oldObject['a']", Error("no such key: a")),
    ("oldObject[0]", Error("no such key: 0")),
    ("oldObject[true]", Error("no such key: true")),
    ("object.metadata.name[1]", Error("no such key: 1")),
    ("[1, 2].all(x, oldObject.a == x)", Error("no such key: a")),
    ("string(oldObject.metadata.name)", Error("no such key: metadata")),
    # other operations
    ("size(oldObject)", Error("no such overload: size")),
    ("oldObject.size()", Error("no such overload: size")),
    ("'a' in oldObject", Error("no such overload")),
    ("oldObject < 1", Error("no such overload: _<_")),
    ("1 < oldObject", Error("no such overload")),
    ("oldObject == null", True),
    ("oldObject != 1", True),
    ("oldObject + 1", Error("no such overload: _+_")),
    ("-oldObject", Error("no such overload: -_")),
    ("int(oldObject)", Error("no such overload: int(null_type)")),
    ("oldObject.startsWith('a')", Error("no such overload")),
    ("object.metadata.name.startsWith(oldObject)", Error("no such overload")),
    ("oldObject.matches('a')", Error("no such overload")),
    ("oldObject.lowerAscii()", Error("no such overload: lowerAscii(null_type)")),
    ("oldObject.all(x, true)", Error("got 'types.Null', expected iterable type")),
    ("oldObject.map(x, x)", Error("got 'types.Null', expected iterable type")),
    ("object.metadata.name.exists(x, true)", Error("got 'types.String', expected iterable type")),
]


@pytest.mark.parametrize(("expression", "expected"), ROWS, ids=[row[0] for row in ROWS])
def test_as_cel_go(expression: str, expected: Any) -> None:
    outcome = evaluate_standalone(expression, DATA)
    if isinstance(expected, Error):
        assert isinstance(outcome, EvalError) and outcome.message == expected, outcome
    else:
        assert outcome == expected


def test_a_variable_failing_on_null_names_the_key() -> None:
    variables = _variables(("name", "oldObject.metadata.name"))
    outcome = _evaluate("variables.name == ''", DATA, variables)
    assert isinstance(outcome, EvalError)
    assert outcome.message == 'composited variable "name" fails to evaluate: no such key: metadata'
    assert _evaluate("object.metadata.name == '' || oldObject.metadata.name == ''", DATA, variables) == \
        EvalError("no such key: metadata")


def test_the_rewritten_forms_read_no_more_of_the_object() -> None:
    # The object handed to the engine is pruned to what expressions read; a presence test reads a key, a kind
    # test a value's shape, neither the value below.
    environment = admission_environment(False)

    def reads(source: str) -> set[Any]:
        compiled = environment.compile(source, ExpressionKind.VALIDATION)
        assert not isinstance(compiled, Exception) and hasattr(compiled, "object_reads")
        return compiled.object_reads()["object"]

    assert reads("has(object.metadata.labels)") == {("metadata", NOTHING), ("metadata", "labels", NOTHING)}
    assert reads("object.?spec.?replicas.orValue(1) > 0") == {(NOTHING,), ("spec", NOTHING), ("spec", "replicas")}
    assert reads("object.spec.containers.all(c, c.?securityContext.?privileged.orValue(false))") == {
        ("spec", "containers", EACH, NOTHING), ("spec", "containers", EACH, "securityContext", NOTHING),
        ("spec", "containers", EACH, "securityContext", "privileged")}
