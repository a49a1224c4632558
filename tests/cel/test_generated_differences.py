"""The classes of difference with kube-apiserver that generated policies found (issue 35), one expression each.

Every expected outcome is kube-apiserver's, as its own admission code answers it (``../shared/oracle``):
``tests/differential/test_known_classes.py`` replays this table through the oracle, so an expectation written
here that kube-apiserver does not share fails there. The object is a custom kind's (no typed decoding).
"""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone

OBJECT: dict[str, Any] = {
    "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
    "spec": {"name": "a", "url": "https://h.example:8443/x?q=1", "q": "2Gi", "ip": "10.1.2.3", "cidr": "10.0.0.0/8",
             "count": 3, "maps": [{"a": 1}, {"b": 2}], "nested": [[1], [2]], "mixed": [1, "a"],
             "strings_then_int": ["a", 1], "numbers": [1, 2.5], "map": {"a": 1}},
}


class Value:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Value({self.value!r})"


class Error:
    """A runtime error with this text."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __repr__(self) -> str:
        return f"Error({self.message!r})"


class Refused:
    """A compile error whose text contains this."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __repr__(self) -> str:
        return f"Refused({self.message!r})"


Outcome = Value | Error | Refused

#: kube-apiserver's text for cel-go's recovered panic in sort()/distinct() handed a failing operand.
PANIC = "internal error: interface conversion: *types.Err is not traits.Lister: missing method Add"

#: (class, expression, kube-apiserver's outcome).
CASES: list[tuple[str, str, Outcome]] = [
    # The value orValue() takes out of an optional holds no optional: Python-implemented functions take it.
    ("optional through Python", "string(object.?spec.?name.orValue('')) == 'a'", Value(True)),
    ("optional through Python", "quantity(object.?spec.?q.orValue('0')).isGreaterThan(quantity('1Gi'))", Value(True)),
    ("optional through Python", "ip(object.spec.?ip.orValue('::1')).family()", Value(4)),
    ("optional through Python", "cidr(object.?spec.?cidr.orValue('::/0')).containsIP(object.spec.ip)", Value(True)),
    ("optional through Python", "'%s-%d'.format([object.?spec.?name.orValue(''), object.spec.count])",
     Value("a-3")),
    ("optional through Python", "isURL(object.?spec.?url.value())", Value(True)),
    ("optional through Python", "url(object.?spec.?missing.orValue('https://d.example')).getHost()",
     Value("d.example")),
    # The placeholder of a refused call is no value: url(...) of it was folded into a URL with an empty host.
    ("silent wrong value", "url(object.?spec.?url.orValue('')).getHost()", Value("h.example:8443")),
    ("silent wrong value", "url(object.?spec.?url.orValue('')).getScheme()", Value("https")),
    # cel-go declares flatten() for list(list(T)) only; list literals are homogeneous, dyn included.
    ("check time", "['a'].flatten() == ['a']", Refused("found no matching overload for 'flatten' applied to "
                                                        "'list(string).()'")),
    ("check time", "[1].map(x, x).flatten() == [1]", Refused("applied to 'list(int).()'")),
    ("check time", "['a'].flatten(1) == ['a']", Value(True)),
    ("check time", "object.spec.nested.flatten() == [1, 2]", Value(True)),
    ("check time", "[1, object.spec.count] == [1, 3]", Refused("expected type 'int' but found 'dyn'")),
    ("check time", "[object.spec.count, 1] == [3, 1]", Refused("expected type 'dyn' but found 'int'")),
    ("check time", "{'a': 1, 'b': object.spec.count}.a == 1", Refused("expected type 'int' but found 'dyn'")),
    ("check time", "[?optional.of(1), 2] == [1, 2]", Value(True)),
    # cel.OptOptimize: a failing conversion of a constant refuses the program.
    ("constant folding", "int(18446744073709551615u) > 0", Refused("program instantiation failed: integer overflow")),
    ("constant folding", "object.spec.count == 3 || int('x') == 1",
     Refused("program instantiation failed: type conversion error from 'string' to 'int'")),
    # cel-go picks a list(T) overload by the first element at run time.
    ("overloads", "object.spec.maps.isSorted()", Error("no such overload: isSorted(list)")),
    ("overloads", "object.spec.nested.isSorted()", Error("no such overload: isSorted(list)")),
    ("overloads", "object.spec.mixed.isSorted()", Value(True)),
    ("overloads", "object.spec.maps.join() == ''", Error("no such overload: join(list)")),
    ("overloads", "object.spec.mixed.join() == ''", Error("no such overload: join(list)")),
    ("overloads", "object.spec.strings_then_int.join() == ''", Error("join: invalid input: 1")),
    ("overloads", "object.spec.mixed.join(',') == ''", Error("no such overload: join(list, string)")),
    # containsIP passes the CIDR, not the IP's parse error, to MaybeNoSuchOverloadErr (library/cidr.go).
    ("overloads", "cidr(object.spec.cidr).containsIP('300.1.1.1')", Error("no such overload")),
    ("overloads", "cidr(object.spec.cidr).containsCIDR('10.0.0.0/99')",
     Error("network address parse error during conversion from string: network address parse error during "
           "conversion from string: netip.ParsePrefix(\"10.0.0.0/99\"): prefix length out of range")),
    ("conversion text", "timestamp(object.spec.name) == timestamp('2020-01-01T00:00:00Z')",
     Error("type conversion error from 'string' to 'google.protobuf.Timestamp'")),
    ("conversion text", "duration(object.spec.name) > duration('1s')",
     Error("type conversion error from 'string' to 'google.protobuf.Duration'")),
    ("overloads", "string(object.spec.map) == ''", Error("no such overload: string(map)")),
    ("overloads", "string(object.?spec.orValue({})) == ''", Error("no such overload: string(map)")),
    ("overloads", "object.spec.maps.max() == 0", Error("no such overload: max(list)")),
    ("overloads", "object.spec.strings_then_int.sum() == 0", Error("no such overload: sum(list)")),
    ("overloads", "object.spec.mixed.sum() == 0", Error("no such overload")),
    ("overloads", "object.spec.numbers.sum() == 0", Error("no such overload")),
    # A string, duration or timestamp is asked itself for an operator it lacks, and answers the bare text.
    ("overloads", "object.spec.name / 2 > 0", Error("no such overload")),
    ("overloads", "-object.spec.name > 0", Error("no such overload")),
    ("overloads", "size(dyn(duration('1s'))) > 0", Error("no such overload")),
    ("overloads", "dyn(timestamp('2020-01-01T00:00:00Z')) * 2 > 0", Error("no such overload")),
    ("overloads", "object.spec.maps / 2 > 0", Error("no such overload: _/_")),
    # The regex library checks its operands itself: the bare text, where the other libraries name the types.
    ("overloads", "object.spec.map.find('a') == ''", Error("no such overload")),
    ("overloads", "object.spec.count.findAll('a').size() > 0", Error("no such overload")),
    ("overloads", "object.spec.count.split('a').size() == 1", Error("no such overload: split(int, string)")),
    ("overloads", "object.spec.count.startsWith('a')", Error("no such overload")),
    ("overloads", "object.spec.map.contains('a')", Error("no such overload")),
    ("overloads", "object.spec.name.endsWith(object.spec.count)", Error("no such overload")),
    ("overloads", "object.spec.count.matches('a')", Error("no such overload")),
    ("overloads", "quantity(object.spec.count).isInteger()", Error("no such overload: quantity(int)")),
    # An argument that fails before reaching a function the engine cannot hand an optional value to reports its
    # own error, as in cel-go (issue 44).
    ("texts", "ip(dyn(null).spec.?ip.orValue('')).family() == 4", Error("no such key: spec")),
    ("texts", "ip(object.spec.name.nope.?ip.orValue('')).family() == 4", Error("no such key: nope")),
    ("texts", "isIP(object.spec.count.x.?ip.orValue(''))", Error("no such key: x")),
    # The form that words an error keeps the calls the expression made (long differential run, issue 44).
    ("texts", "string(object.?spec.?name.orValue('')) != 'bad' ? !object.spec.mixed.all(t, size(t) > 0) : false",
     Error("no such overload: size")),
    # Overload errors name Kubernetes' types and cel-go's call styles.
    ("texts", "cidr(object.spec.cidr).containsIP(object.spec.?nothing.orValue(null))",
     Error("no such overload: containsIP(net.CIDR, null_type)")),
    ("texts", "quantity('1').isLessThan(dyn(1))", Error("no such overload: isLessThan(kubernetes.Quantity, int)")),
    ("texts", "format.dns1123Label().validate(object.spec.count).hasValue()",
     Error("no such overload: validate(kubernetes.NamedFormat, int)")),
    ("texts", "object.spec.?nothing.orValue(null).flatten() == []", Error("no such overload: null_type.flatten()")),
    ("texts", "object.spec.map.flatten() == []", Error("no such overload: map(dyn, dyn).flatten()")),
    ("texts", "object.spec.name.flatten(1) == []", Error("no such overload: string.flatten(int)")),
    ("texts", "object.spec.nested.flatten(dyn(1.5)) == []",
     Error("internal error: interface conversion: ref.Val is types.Double, not types.Int")),
    ("texts", "object.spec.count.sort() == []", Error("no such overload: sort")),
    ("texts", "object.spec.count.distinct() == []",
     Error("internal error: interface conversion: types.Int is not traits.Lister: missing method Contains")),
    ("texts", "object.spec.map.distinct() == []",
     Error("internal error: interface conversion: *types.baseMap is not traits.Lister: missing method Add")),
    # cel-go's checker binds the free element type of a generic list function's result on a dyn to the first
    # overload it is passed to, and runs a call narrowed to one overload as that overload (issue 44).
    ("narrowed calls", "object.spec.nested.flatten().exists(x, string(x).startsWith('a'))",
     Error("no such overload: string(int)")),
    ("narrowed calls", "object.spec.nested.flatten().map(x, string(x)).size() == 2",
     Error("no such overload: string(int)")),
    ("narrowed calls", "object.spec.mixed.reverse().exists(x, double(x) == 1.0)",
     Error("no such overload: double(string)")),
    ("narrowed calls", "object.spec.mixed.slice(0, 1).exists(x, string(x) == '1')",
     Error("no such overload: string(int)")),
    ("narrowed calls", "string(object.spec.mixed.first().value()) == '1'", Error("no such overload: string(int)")),
    # optional_type(T).orValue(T) binds T to the default's type (found by the long differential run).
    ("narrowed calls", "string(object.spec.mixed.first().orValue('')) == '1'", Error("no such overload: string(int)")),
    ("narrowed calls", "string(object.spec.mixed.first().orValue(0)) == '1'", Value(True)),
    ("narrowed calls", "object.spec.nested.flatten().exists(x, timestamp(x) > timestamp('2020-01-01T00:00:00Z'))",
     Error("no such overload: timestamp(int)")),
    ("narrowed calls", "object.spec.maps.flatten().exists(x, size(x) > 0 && string(x) == '')",
     Error("no such overload: string(map)")),
    ("narrowed calls", "object.spec.nested.flatten().exists(x, int(x) == 1 || string(x) == '1')", Value(True)),
    ("narrowed calls", "object.spec.mixed.distinct().exists(x, int(x) == 1)", Value(True)),
    ("narrowed calls", "([1] + object.spec.mixed).exists(x, string(x) == 'a')",
     Error("no such overload: string(string)")),
    ("narrowed calls", "(object.spec.mixed + [1]).exists(x, string(x) == 'a')",
     Error("no such overload: string(string)")),
    ("narrowed calls", "([] + object.spec.mixed).exists(x, string(x) == 'a')", Value(True)),
    # A relation or an equality binds the variable first.
    ("narrowed calls", "object.spec.nested.flatten().exists(x, x > 1 && string(x) == '2')", Value(True)),
    ("narrowed calls", "object.spec.nested.flatten().exists(x, x == 'a' || string(x) == '1')",
     Error("no such overload: string(int)")),
    ("narrowed calls", "object.spec.mixed.reverse().exists(x, x == 1 || string(x) == 'a')", Value(True)),
    ("narrowed calls", "object.spec.nested.flatten().exists(x, string(x) == '1' && x > 0)",
     Refused("found no matching overload for '_>_' applied to '(string, int)'")),
    # resource.Quantity holds a fraction of a binary suffix as an inf.Dec, and "1000m" as int64Amount{1000, -3}:
    # AsInt64 fails for both (issue 44).
    ("quantity representation", "quantity('0.5Ki').isInteger()", Value(False)),
    ("quantity representation", "quantity('1.5Ki').isInteger()", Value(False)),
    ("quantity representation", "quantity('0.5Mi').isInteger()", Value(False)),
    ("quantity representation", "quantity(object.spec.q == '2Gi' ? '1.5Gi' : '1').isInteger()", Value(False)),
    ("quantity representation", "quantity('0.5Ki').asInteger() == 512", Error("cannot convert value to integer")),
    ("quantity representation", "quantity('1000m').isInteger()", Value(False)),
    ("quantity representation", "quantity('1000m').add(1).isInteger()", Value(False)),
    ("quantity representation", "quantity('1.5Ki').sub(quantity('1.5Ki')).isInteger()", Value(False)),
    ("quantity representation", "quantity('-2.000m').add(3).asApproximateFloat() < 2.998", Value(True)),
    ("quantity representation", "quantity('1.5Ki') == quantity('1536') && quantity('1000m') == quantity('1')",
     Value(True)),
    ("quantity representation", "quantity('-.Pi').isInteger()", Error("unable to parse numeric part of quantity")),
    # cel-go negates a duration behind dyn (a traits.Negater); cel-cpp's -_ knows ints and doubles only.
    ("negation", "-dyn(duration(object.spec.name == 'a' ? '90m' : '1s')) == duration('-90m')", Value(True)),
    ("negation", "-(-dyn(duration('3s'))) == duration('3s') && -dyn(object.spec.count) == -3", Value(True)),
    ("negation", "-dyn(object.spec.numbers[1]) == -2.5", Value(True)),
    ("negation", "-dyn(object.spec.name) == 0", Error("no such overload")),
    ("negation", "-dyn(uint(object.spec.count)) == 0", Error("no such overload: -_")),
    # cel-go v0.29.2's ext/lists.go sort() (operand checked as a list) and distinct() (any operand) are called
    # with a failing operand and panic asserting traits.Lister; kube-apiserver recovers the panic, which has ended
    # the whole evaluation: || and && absorb nothing of it, nor do macros (issue 44).
    ("lister panic", "['b','a'].slice(1, 0).sort() == []", Error(PANIC)),
    ("lister panic", "(1/0 > 0 ? ['a'] : ['b']).sort() == []", Error(PANIC)),
    ("lister panic", "object.spec.items.distinct() == []", Error(PANIC)),
    ("lister panic", "['b','a'].slice(1, 0).distinct() == []", Error(PANIC)),
    ("lister panic", "['b','a'].slice(1, 0).sort() == [] || true", Error(PANIC)),
    ("lister panic", "['b','a'].slice(1, 0).sort() == [] && false", Error(PANIC)),
    ("lister panic", "1/0 > 0 || ['b','a'].slice(1, 0).sort() == []", Error(PANIC)),
    ("lister panic", "[1,2].exists(x, x == 2 || [x].slice(1,0).sort() == [])", Error(PANIC)),
    ("lister panic", "[1,2].all(x, [x].slice(1,0).sort() == [] || true)", Error(PANIC)),
    ("lister panic", "[1,2].exists(x, 1/0 > 0) || ['b','a'].slice(1, 0).sort() == []", Error(PANIC)),
    ("lister panic", "['b','a'].slice(1, 0).sort().size() == 0 || 1/0 == 0", Error(PANIC)),
    ("lister panic", "[[1].slice(1,0).sort()].size() == 1 || true", Error(PANIC)),
    ("lister panic", "object.spec.nope.distinct().size() == 0 || true", Error(PANIC)),
    # A list built by more appends than the engine makes at once: evaluated in steps, same outcome.
    ("lister panic", "lists.range(20000).map(i, i).size() == 0 || ['b','a'].slice(1,0).sort() == []", Error(PANIC)),
    ("lister panic", "lists.range(300).map(i, i).exists(i, i == 299 && [i].slice(1,0).sort() == []) || true",
     Error(PANIC)),
    # Not reached, or dispatched among sort()'s overloads at runtime (a dyn operand): the usual outcome.
    ("lister panic", "true || ['b','a'].slice(1, 0).sort() == []", Value(True)),
    ("lister panic", "lists.range(20000).map(i, i).size() > 0 || ['b','a'].slice(1,0).sort() == []", Value(True)),
    ("lister panic", "[1,2].exists(x, x == 1 || [x].slice(1,0).sort() == [])", Value(True)),
    ("lister panic", "object.spec.nope.sort() == [] || true", Value(True)),
    ("lister panic", "object.spec.nope.sort() == []", Error("no such key: nope")),
    ("lister panic", "object.spec.nope.map(x, x).sort() == []", Error("no such key: nope")),
    ("lister panic", "object.spec.nope.map(x, x).sort() == [] || true", Value(True)),
    ("lister panic", "object.spec.nope.map(x, string(x)).sort() == [] || true", Error(PANIC)),
]


def outcome_of(expression: str) -> Outcome:
    result = evaluate_standalone(expression, {"object": OBJECT})
    if isinstance(result, CompileError):
        return Refused(result.message)
    if isinstance(result, EvalError):
        return Error(result.message)
    return Value(result)


def agrees(expected: Outcome, found: Outcome) -> bool:
    if isinstance(expected, Refused):
        return isinstance(found, Refused) and expected.message in found.message
    if isinstance(expected, Error):
        return isinstance(found, Error) and found.message == expected.message
    return isinstance(found, Value) and type(found.value) is type(expected.value) and found.value == expected.value


@pytest.mark.parametrize(("difference", "expression", "expected"), CASES,
                         ids=[f"{difference}: {expression}" for difference, expression, _ in CASES])
def test_kube_apiserver_outcome(difference: str, expression: str, expected: Outcome) -> None:
    found = outcome_of(expression)
    assert agrees(expected, found), f"{difference}: expected {expected}, got {found}"
