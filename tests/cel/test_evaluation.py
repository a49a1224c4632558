"""The evaluation core against the engine: variables, cost, loops past the engine's limit, optional values.

Each case states Kubernetes' behaviour (composition.go, lazy.go, runtimecost.go, the k8s cost estimator)
and checks ours with real CEL.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from staticadm.cel import (
    BUDGET_EXHAUSTED_MESSAGE,
    COST_LIMIT_MESSAGE,
    CompiledExpression,
    CompileError,
    EvalError,
    ExpressionKind,
    admission_environment,
    ast,
    cost,
    rewrite,
)
from staticadm.cel.cost import PER_CALL_LIMIT
from staticadm.cel.evaluation import DEADLINE_MESSAGE
from tests.server import forked

ENVIRONMENT = admission_environment(False)


def _variables(*definitions: tuple[str, str]) -> list[tuple[str, CompiledExpression | CompileError]]:
    compiled: list[tuple[str, CompiledExpression | CompileError]] = []
    for index, (name, source) in enumerate(definitions):
        program = ENVIRONMENT.compile(source, ExpressionKind.VARIABLE,
                                      variable_names=[n for n, _ in definitions[:index]],
                                      variable_types=_types(compiled))
        if isinstance(program, CompiledExpression):
            program = ENVIRONMENT.link(program, compiled)
        compiled.append((name, program))
    return compiled


def _types(variables: list[tuple[str, Any]]) -> dict[str, str]:
    return {name: getattr(program, "result_type", "dyn") for name, program in variables}


def _evaluate(source: str, data: dict[str, Any], variables: list[tuple[str, Any]] | None = None,
              kind: ExpressionKind = ExpressionKind.VALIDATION, budget: int | None = 10_000_000) -> Any:
    names = [name for name, _ in variables or []]
    program = ENVIRONMENT.compile(source, kind, variable_names=names if variables is not None else None,
                                  variable_types=_types(variables or []))
    assert isinstance(program, CompiledExpression), program
    if variables:
        program = ENVIRONMENT.link(program, variables)
    return program.evaluate(ENVIRONMENT.new_context(data, budget=budget))


POD = {"metadata": {"name": "web", "labels": {"team": "blue"}},
       "spec": {"containers": [{"name": "app", "image": "nginx"}, {"name": "side", "image": "envoy"}]}}


class TestVariables:
    def test_a_map_of_optional_values_is_read_in_the_engine(self) -> None:
        variables = _variables(("meta", "{'team': object.metadata.?labels.?team, 'owner': object.?owner}"))
        assert _evaluate("variables.meta.team.orValue('') == 'blue'", {"object": POD}, variables) is True
        assert _evaluate("!variables.meta.owner.hasValue()", {"object": POD}, variables) is True

    def test_an_optional_variable(self) -> None:
        variables = _variables(("team", "object.metadata.?labels.?team"))
        assert _evaluate("variables.team.orValue('none') == 'blue'", {"object": POD}, variables) is True

    def test_has_of_a_variable_is_true_once_it_evaluates(self) -> None:
        variables = _variables(("names", "object.spec.containers.map(c, c.name)"), ("missing", "object.nope"))
        assert _evaluate("has(variables.names)", {"object": POD}, variables) is True
        assert _evaluate("object.spec.containers.all(c, has(variables.names))", {"object": POD}, variables) is True
        # The lazy map's Find resolves the value: an error stays an error.
        outcome = _evaluate("has(variables.missing)", {"object": POD}, variables)
        assert isinstance(outcome, EvalError)
        assert outcome.message.startswith('composited variable "missing" fails to evaluate: ')

    def test_errors_name_the_variable_in_kubernetes_words(self) -> None:
        variables = _variables(("a", "object.nope"), ("b", "variables.a + 1"), ("ok", "1"))
        outcome = _evaluate("variables.b > 0", {"object": POD}, variables)
        assert isinstance(outcome, EvalError)
        assert outcome.message.startswith('composited variable "b" fails to evaluate: '
                                          'composited variable "a" fails to evaluate: ')
        assert _evaluate("variables.ok == 1 || variables.a == 1", {"object": POD}, variables) is True
        # An error the expression makes itself is not blamed on a variable.
        own = _evaluate("variables.ok == 1 && object.nope == 1", {"object": POD}, variables)
        assert isinstance(own, EvalError) and "composited variable" not in own.message

    def test_a_variable_that_does_not_compile_fails_when_read(self) -> None:
        variables = _variables(("bad", "object.spec.containers.all(c, 1)"), ("ok", "true"))
        assert isinstance(variables[0][1], CompileError)
        assert _evaluate("variables.ok", {"object": POD}, variables) is True
        outcome = _evaluate("variables.bad == true", {"object": POD}, variables)
        assert isinstance(outcome, EvalError)
        assert outcome.message.startswith('composited variable "bad" fails to compile: ')

    def test_variables_are_typed_as_kubernetes_declares_them(self) -> None:
        variables = _variables(("allowed", "object.metadata.name == 'web'"), ("count", "size(object.spec.containers)"),
                               ("limit", "quantity('1Gi')"))
        # A bool variable is a validation on its own; an int one does not compare with a string.
        assert _evaluate("variables.allowed", {"object": POD}, variables) is True
        wrong = ENVIRONMENT.compile("variables.count == 'x'", ExpressionKind.VALIDATION,
                                    variable_names=["allowed", "count", "limit"], variable_types=_types(variables))
        assert isinstance(wrong, CompileError) and "found no matching overload for '_==_'" in wrong.message
        assert ":1:17:" in wrong.message  # the position in the source as written
        # Kubernetes value types are dyn in the variables object type.
        assert _evaluate("variables.limit.isLessThan(quantity('2Gi'))", {"object": POD}, variables) is True

    def test_a_variable_past_its_cost_limit_fails_when_read(self) -> None:
        # Its loop is stopped at the limit; what it had built by then (an ``all`` still true) is no value.
        variables = _variables(("ok", "object.items.all(x, x >= 0)"), ("small", "1"))
        data = {"object": {"items": list(range(PER_CALL_LIMIT // 4))}}
        outcome = _evaluate("variables.ok == true", data, variables)
        assert isinstance(outcome, EvalError) and not outcome.cost_exceeded
        assert outcome.message == f'composited variable "ok" fails to evaluate: {COST_LIMIT_MESSAGE}'
        # An expression that does not need it still has its value, as with any failing variable.
        assert _evaluate("variables.small == 1 || variables.ok", data, variables) is True
        assert _evaluate("variables.ok || variables.small == 1", data, variables) is True
        assert _evaluate("variables.ok == true", {"object": {"items": [1, 2]}}, variables) is True

    def test_variables_reading_variables(self) -> None:
        variables = _variables(("images", "object.spec.containers.map(c, c.image)"),
                               ("count", "variables.images.size()"),
                               ("first", "variables.images[0]"))
        assert _evaluate("variables.count == 2 && variables.first == 'nginx'", {"object": POD}, variables) is True


class TestDeadline:
    """The request's deadline is a backstop the loops' charges check every ``_DEADLINE_CHECK_INTERVAL`` (1,024)
    charges: a loop that charges that often stops once it has passed; one that charges less runs to its value."""

    def _run(self, source: str, items: int, deadline: float,
             variables: list[tuple[str, Any]] | None = None) -> Any:
        names = [name for name, _ in variables or []]
        program = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION, variable_names=names if variables else None,
                                      variable_types=_types(variables or []))
        assert isinstance(program, CompiledExpression), program
        if variables:
            program = ENVIRONMENT.link(program, variables)
        context = ENVIRONMENT.new_context({"object": {"items": list(range(items)), "name": "x" * 100}},
                                          request_deadline=deadline)
        return program.evaluate(context)

    def test_a_passed_deadline_stops_a_long_loop(self) -> None:
        outcome = self._run("object.items.all(x, x >= 0)", 5000, time.perf_counter() - 1)
        assert outcome == EvalError(DEADLINE_MESSAGE, deadline_exceeded=True)

    def test_a_passed_deadline_stops_a_variable_s_loop(self) -> None:
        variables = _variables(("ok", "object.items.all(x, x >= 0)"))
        outcome = self._run("variables.ok", 5000, time.perf_counter() - 1, variables)
        assert isinstance(outcome, EvalError) and outcome.deadline_exceeded

    def test_size_charges_count_toward_the_check(self) -> None:
        # 600 iterations tick 600 times; the concatenation and the startsWith of 100-character strings are each
        # charged by a call into Python too, which makes it more than 1,024 charges.
        outcome = self._run("object.items.all(x, !object.name.startsWith(object.name + 'y'))", 600,
                            time.perf_counter() - 1)
        assert outcome == EvalError(DEADLINE_MESSAGE, deadline_exceeded=True)

    def test_short_loops_and_future_deadlines_run_to_their_value(self) -> None:
        assert self._run("object.items.all(x, x >= 0)", 600, time.perf_counter() - 1) is True
        assert self._run("object.items.all(x, x >= 0)", 5000, time.perf_counter() + 3600) is True


class TestCost:
    def test_the_per_call_limit_is_deterministic(self) -> None:
        # all(): per iteration @not_strictly_false(@result) 2, @result && p 1 + p; p = `x >= 0`: ident 1 + call 1.
        per_iteration = 5
        fits = PER_CALL_LIMIT // per_iteration - 10
        data = {"object": {"items": list(range(fits))}}
        for _ in range(3):
            assert _evaluate("object.items.all(x, x >= 0)", data) is True
        data = {"object": {"items": list(range(PER_CALL_LIMIT // per_iteration + 10))}}
        for _ in range(3):
            outcome = _evaluate("object.items.all(x, x >= 0)", data)
            assert isinstance(outcome, EvalError) and outcome.cost_exceeded
            assert outcome.message == COST_LIMIT_MESSAGE

    def test_string_functions_are_charged_by_size(self) -> None:
        big = "x" * 2_000_000
        # contains: ceil(size/10) * ceil(size(sub)/10) = 200,000 * 1: fits; five of them do not.
        assert _evaluate("object.s.contains('y') == false", {"object": {"s": big}}) is True
        outcome = _evaluate("[1, 2, 3, 4, 5, 6].all(i, !object.s.contains('y'))", {"object": {"s": big}})
        assert isinstance(outcome, EvalError) and outcome.cost_exceeded

    def test_a_join_is_charged_by_its_result(self) -> None:
        data = {"object": {"items": list(range(400)), "big": "x" * 100_000}}
        outcome = _evaluate("object.items.map(i, object.big).join().size() > 0", data)
        assert isinstance(outcome, EvalError) and outcome.cost_exceeded

    def test_the_scope_budget_runs_out(self) -> None:
        per_iteration = 5
        data = {"object": {"items": list(range(PER_CALL_LIMIT // per_iteration - 10))}}
        program = ENVIRONMENT.compile("object.items.all(x, x >= 0)", ExpressionKind.VALIDATION)
        assert isinstance(program, CompiledExpression)
        context = ENVIRONMENT.new_context(data)
        outcomes = [program.evaluate(context) for _ in range(12)]
        assert outcomes[:10] == [True] * 10
        assert all(isinstance(o, EvalError) and o.budget_exhausted and o.message == BUDGET_EXHAUSTED_MESSAGE
                   for o in outcomes[10:])


#: A loop body far heavier than the heaviest argument-free tick (cost.MAX_FIXED_TICK_WEIGHT).
HEAVY_BODY = "size([" + ", ".join(["x"] * 100) + "]) > 0"


class TestTicksInParts:
    """A heavy iteration is charged through several argument-free tick functions (cel-expr-python keeps the
    argument tuple of a call into Python); it must end a loop at the iteration where one charge of its whole
    weight would, and charge the same."""

    @staticmethod
    def _outcome(parts: bool, monkeypatch: pytest.MonkeyPatch, size: int, in_variable: bool) -> tuple[Any, int]:
        with monkeypatch.context() as patched:
            if not parts:
                patched.setattr(cost, "MAX_TICK_PARTS", 0)  # every heavy iteration through the argument form
            variables = _variables(("ok", f"object.items.all(x, {HEAVY_BODY})")) if in_variable else None
            source = "variables.ok == true" if in_variable else f"object.items.all(x, {HEAVY_BODY})"
            program = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION,
                                          variable_names=["ok"] if in_variable else None,
                                          variable_types=_types(variables or []))
            assert isinstance(program, CompiledExpression)
            if variables:
                program = ENVIRONMENT.link(program, variables)
        context = ENVIRONMENT.new_context({"object": {"items": list(range(size))}}, budget=10_000_000)
        outcome = program.evaluate(context)
        assert context.budget is not None
        return outcome, context.budget.remaining

    # The variable's case bisects the engine's loop at its 1,000,000 limit as the expression's does, a few seconds of
    # CPU: with --slow (CI).
    @pytest.mark.parametrize("in_variable", [False, pytest.param(True, marks=pytest.mark.slow)],
                             ids=["expression", "variable"])
    def test_the_loop_ends_where_one_charge_would_end_it(self, monkeypatch: pytest.MonkeyPatch,
                                                         in_variable: bool) -> None:
        low, high = 1, PER_CALL_LIMIT  # the first size the argument form refuses lies in (low, high]
        while high - low > 1:
            middle = (low + high) // 2
            outcome, _ = self._outcome(False, monkeypatch, middle, in_variable)
            low, high = (middle, high) if outcome is True else (low, middle)
        assert low < PER_CALL_LIMIT // 64, "the body must weigh more than one argument-free tick"
        for size in (low - 1, low, high, high + 1):
            whole = self._outcome(False, monkeypatch, size, in_variable)
            in_parts = self._outcome(True, monkeypatch, size, in_variable)
            assert (_described(in_parts[0]), in_parts[1]) == (_described(whole[0]), whole[1]), size
        assert self._outcome(True, monkeypatch, high, in_variable)[0] is not True


class TestFixedCharges:
    """An expression's own size-driven charges of a few units go through argument-free functions (cel-expr-python
    keeps the argument tuple of a call into Python): they must charge what the argument form charges, and end an
    evaluation at the iteration where it would."""

    SOURCE = "object.items.all(x, !x.startsWith('b'))"

    @classmethod
    def _outcome(cls, fixed: bool, monkeypatch: pytest.MonkeyPatch, length: int, count: int) -> tuple[Any, int]:
        with monkeypatch.context() as patched:
            if not fixed:
                patched.setattr(cost, "MAX_FIXED_CHARGE", 0)  # every charge through the argument form
            program = ENVIRONMENT.compile(cls.SOURCE, ExpressionKind.VALIDATION)
            assert isinstance(program, CompiledExpression)
        context = ENVIRONMENT.new_context({"object": {"items": ["a" * length] * count}}, budget=10_000_000)
        outcome = program.evaluate(context)
        assert context.budget is not None
        return _described(outcome), context.budget.remaining

    def test_the_fixed_form_is_what_the_program_calls(self) -> None:
        program = ENVIRONMENT.compile(self.SOURCE, ExpressionKind.VALIDATION)
        assert isinstance(program, CompiledExpression)
        called = {node.call_expr.function for node in ast.walk(program.prepared.expr)
                  if node.WhichOneof("expr_kind") == "call_expr"}
        assert {cost.fixed_charge_function(units) for units in range(1, cost.MAX_FIXED_CHARGE + 1)} <= called
        assert cost.CHARGE_FUNCTION in called  # beyond them, the argument form

    @pytest.mark.parametrize("length", [0, 40, 41, 50, 51, 95, 120, 121, 1000])
    def test_each_string_length_is_charged_as_with_arguments(self, monkeypatch: pytest.MonkeyPatch,
                                                             length: int) -> None:
        assert self._outcome(True, monkeypatch, length, 3) == self._outcome(False, monkeypatch, length, 3)

    @pytest.mark.slow  # some twenty evaluations at the 1,000,000 limit: several seconds of CPU (CI runs it)
    def test_the_loop_ends_where_the_argument_form_ends_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        length = 120  # the most units (MAX_FIXED_CHARGE) the argument-free form charges
        per_item = (10_000_000 - self._outcome(False, monkeypatch, length, 1000)[1]) / 1000
        estimate = int(PER_CALL_LIMIT / per_item)
        low, high = estimate - 100, estimate + 100  # the first count the argument form refuses lies in (low, high]
        assert self._outcome(False, monkeypatch, length, low)[0] is True
        assert self._outcome(False, monkeypatch, length, high)[0] is not True
        while high - low > 1:
            middle = (low + high) // 2
            outcome, _ = self._outcome(False, monkeypatch, length, middle)
            low, high = (middle, high) if outcome is True else (low, middle)
        for count in (low - 1, low, high, high + 1):
            assert self._outcome(True, monkeypatch, length, count) == self._outcome(False, monkeypatch, length, count)
        assert self._outcome(True, monkeypatch, length, high)[0] is not True


class TestSizeThresholds:
    """A call charged by one size tells its commonest charges from the size alone, before binding anything
    (``rewrite._native_charge``): it must decide, charge and fail exactly as the bound form does, at every size
    around each threshold, and for an operand whose size is an error."""

    CASES = (
        # TRAVERSE_FIRST: ceil(size / 10), free up to 40 characters.
        ("object.items.all(x, !x.startsWith('b'))", lambda n: ["a" * n] * 3),
        # TRAVERSE_FIRST_TWICE: ceil(2 * size / 10), free up to 20.
        ("object.items.all(x, size(x.split(',')) > 0)", lambda n: ["a" * n] * 3),
        # IN_LIST: the list's size, free up to 4 elements (split's own charge beside it).
        ("object.items.all(x, !('b' in x.split(',')))", lambda n: [",".join(["a"] * n)] * 3),
        # BUILD_RESULT: ceil(2 * size(result) / 10), measured on the call's result.
        ("object.items.all(x, [x].join() != 'b')", lambda n: ["a" * n] * 3),
        # A size that is an error: not a string.
        ("object.items.all(x, !x.startsWith('b'))", lambda n: [n] * 3),
    )
    SIZES = (0, 1, 4, 5, 6, 20, 21, 25, 26, 40, 41, 50, 51, 60, 61, 120, 121, 1000)

    @staticmethod
    def _outcome(source: str, items: list[Any], bound_form: bool,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int, bytes]:
        with monkeypatch.context() as patched:
            if bound_form:
                patched.setattr(rewrite, "_largest_size_charging", lambda how, units: None)
            program = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION)
            assert isinstance(program, CompiledExpression)
        context = ENVIRONMENT.new_context({"object": {"items": items}}, budget=10_000_000)
        outcome = program.evaluate(context)
        assert context.budget is not None
        return _described(outcome), context.budget.remaining, ast.encode(program.prepared)

    @pytest.mark.parametrize("case", range(len(CASES)))
    def test_each_size_is_decided_and_charged_as_by_the_bound_form(self, case: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        source, items = self.CASES[case]
        for size in self.SIZES:
            threshold = self._outcome(source, items(size), False, monkeypatch)
            bound = self._outcome(source, items(size), True, monkeypatch)
            assert threshold[2] != bound[2]  # two programs, not one compiled twice
            assert threshold[:2] == bound[:2], (source, size)

    def test_each_threshold_charges_one_more_unit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        source, items = self.CASES[0]
        remaining = {size: self._outcome(source, items(size), False, monkeypatch)[1] for size in (40, 41, 50, 51, 121)}
        # Three strings checked: one unit more each past 40, past 50, and 9 past 120 (ceil(121 / 10) - 4).
        assert remaining[40] - remaining[41] == 3 and remaining[50] - remaining[51] == 3
        assert remaining[40] - remaining[121] == 3 * 9
        source, items = self.CASES[4]
        message, _ = self._outcome(source, items(3), False, monkeypatch)[0]
        assert message.startswith("no such overload")


def _described(outcome: Any) -> Any:
    return (outcome.message, outcome.cost_exceeded) if isinstance(outcome, EvalError) else outcome


LONG_ENV = {"object": {"spec": {"containers": [{"name": "app", "env": [{"name": f"E{i}"} for i in range(12_000)]}]}}}


class TestLongLoops:
    @pytest.mark.parametrize(("source", "expected"), [
        ("object.spec.containers.all(c, c.env.all(e, e.name != 'FORBIDDEN'))", True),
        ("object.spec.containers.exists(c, c.env.exists(e, e.name == 'E11999'))", True),
        ("object.spec.containers[0].env.exists_one(e, e.name == 'E5')", True),
        ("object.spec.containers[0].env.map(e, e.name)[11999]", "E11999"),
        ("object.spec.containers[0].env.filter(e, e.name.endsWith('99')).size()", 120),
        ("object.spec.containers[0].env.transformList(i, e, i)[11000]", 11000),
        ("object.spec.containers[0].env.all(i, e, i < 12000)", True),
        ("object.spec.containers.all(c, c.env.all(e, c.env.size() == 12000))", True),
    ])
    def test_loops_longer_than_the_engine_allows(self, source: str, expected: Any) -> None:
        assert _evaluate(source, LONG_ENV, kind=ExpressionKind.STANDALONE) == expected

    def test_a_long_loop_reading_variables(self) -> None:
        variables = _variables(("forbidden", "'E11999'"), ("env", "object.spec.containers[0].env"))
        outcome = _evaluate("!variables.env.exists(e, e.name == variables.forbidden)", LONG_ENV, variables)
        assert outcome is False


class TestOptionalValuesNeverCrash:
    @pytest.mark.parametrize("expression", [
        "{'a': optional.none()}",
        "[optional.none()]",
        "[{'a': optional.none()}].indexOf({'a': optional.none()})",
        "{'x': 1}.transformMapEntry(k, v, {'a': optional.none()})",
        "[dyn({'a': optional.none()})].map(m, [m].indexOf(m))",
    ])
    def test_in_a_separate_process(self, expression: str) -> None:
        # A crash would end the interpreter with SIGSEGV; an error is exit code 1 with a message.
        result = forked.run([sys.executable, "-m", "staticadm", "cel", "eval", expression], timeout=60)
        assert result.returncode in (0, 1), result
        assert "0x" not in result.stdout + result.stderr  # no heap addresses in error texts


class TestNestingLimits:
    """cel-cpp parses at most 32 levels and protobuf loads at most 100 message levels; cel-go allows 250.
    Past either, the error says which limit and that kube-apiserver would accept the expression."""

    def test_long_chains_name_the_parser_limit(self) -> None:
        assert _evaluate(" + ".join(["1"] * 30) + " == 30", {}, kind=ExpressionKind.VALIDATION) is True
        deep = ENVIRONMENT.compile(" + ".join(["1"] * 40) + " == 40", ExpressionKind.VALIDATION)
        assert isinstance(deep, CompileError)
        assert "32 levels" in deep.message and "250" in deep.message

    def test_deep_comprehensions_name_the_loading_limit(self) -> None:
        source = "true"
        for depth in range(30):
            source = f"[1].all(x{depth}, {source})"
        deep = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION)
        assert isinstance(deep, CompileError)
        assert "100 levels" in deep.message and "DecodeError" not in deep.message
        source = "true"
        for depth in range(20):
            source = f"[1].all(x{depth}, {source})"
        assert _evaluate(source, {}) is True


class TestValuesPythonHandsBack:
    """Values built by functions implemented in Python go back to the engine intact."""

    @pytest.mark.parametrize(("expression", "expected"), [
        ("{'a': 1}.transformMap(k, v, duration('90s'))['a'] == duration('1m30s')", True),
        ("{'a': 1}.transformMap(k, v, timestamp('2020-01-01T00:00:00Z'))['a'].getFullYear()", 2020),
        ("[1].transformMap(i, v, [duration('1s')])[0][0] + duration('1s') == duration('2s')", True),
        ("optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')).hasValue()", False),
        ("optional.ofNonZeroValue(timestamp(0)).hasValue()", True),
        ("'%s and %s'.format([duration('2ns'), {1: 'a', true: 'b'}])", '0.000000002s and {1:"a", true:"b"}'),
    ])
    def test_round_trips(self, expression: str, expected: Any) -> None:
        assert _evaluate(expression, {}, kind=ExpressionKind.STANDALONE) == expected

    def test_errors_never_quote_python_objects(self) -> None:
        outcome = _evaluate("{'a': 1}.transformMap(k, v, dyn(k) + dyn(v))", {}, kind=ExpressionKind.STANDALONE)
        assert isinstance(outcome, EvalError)
        assert "0x" not in outcome.message and "<function" not in outcome.message


class TestAdmissionVariableTypes:
    """request and namespaceObject are typed as kube-apiserver declares them (BuildRequestType,
    BuildNamespaceType): a wrong type or field is a compile error, as it is there."""

    @pytest.mark.parametrize(("source", "error"), [
        ("request.operation == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
        ("request.userInfo.groups.exists(g, g == 1)", "found no matching overload for '_==_'"),
        ("request.dryRun == 'true'", "'(bool, string)'"),
        ("request.kind.name == 'x'", "undefined field 'name'"),
        # Kubernetes declares the namespace's uid as "UID".
        ("namespaceObject.metadata.uid != ''", "undefined field 'uid'"),
        ("namespaceObject.metadata.generation == 'x'", "'(int, string)'"),
    ])
    def test_kubernetes_rejects_these_and_so_do_we(self, source: str, error: str) -> None:
        program = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION)
        assert isinstance(program, CompileError) and error in program.message, program

    def test_typed_fields_evaluate_on_the_request_as_sent(self) -> None:
        data = {"request": {"operation": "CREATE", "userInfo": {"username": "a", "groups": ["devs"],
                                                                 "extra": {"scope": ["x"]}}, "dryRun": False,
                            "options": {"fieldManager": "kubectl"}}}
        assert _evaluate("request.operation == 'CREATE' && 'devs' in request.userInfo.groups "
                         "&& request.userInfo.extra['scope'][0] == 'x' && !request.dryRun "
                         "&& request.options.fieldManager == 'kubectl'", data) is True

    def test_a_variable_of_a_request_field_has_its_type(self) -> None:
        variables = _variables(("op", "request.operation"))
        program = ENVIRONMENT.compile("variables.op == 1", ExpressionKind.VALIDATION, variable_names=["op"],
                                      variable_types=_types(variables))
        assert isinstance(program, CompileError) and "'(string, int)'" in program.message


def test_message_expressions_have_no_authorizer_and_match_conditions_no_variables() -> None:
    # Kubernetes compiles messageExpressions with HasAuthorizer false (admissionregistration validation.go
    # validateMessageExpression) and match conditions without variables; a loop variable of the name is fine.
    for kind, source, name, column in (
            (ExpressionKind.MESSAGE_EXPRESSION, "authorizer.path('/x').check('get').reason()", "authorizer", 1),
            (ExpressionKind.MESSAGE_EXPRESSION, "string(authorizer.requestResource.check('get').allowed())",
             "authorizer", 8),
            (ExpressionKind.MATCH_CONDITION, "variables.x", "variables", 1)):
        compiled = ENVIRONMENT.compile(source, kind)
        assert isinstance(compiled, CompileError)
        assert compiled.message.startswith(f"ERROR: <input>:1:{column}: undeclared reference to '{name}'")
    assert isinstance(ENVIRONMENT.compile("['a'].map(authorizer, authorizer)[0]", ExpressionKind.MESSAGE_EXPRESSION),
                      CompiledExpression)
    assert isinstance(ENVIRONMENT.compile("authorizer.path('/x').check('get').allowed()", ExpressionKind.VALIDATION),
                      CompiledExpression)


def test_null_results_never_take_the_process_down() -> None:
    # cel-expr-python 0.1.3 hands a null over to Python without a reference of its own: on CPython 3.11 each
    # null a result holds took one reference from None, and the process aborted ("deallocating None") after a
    # few thousand of them, i.e. after so many requests whose audit annotation is null or whose message or
    # mutation copies a null field. Twenty times as many nulls as None has references in a fresh interpreter
    # (about 5,000) must leave the process up.
    code = """
from staticadm.cel import ExpressionKind, admission_environment
environment = admission_environment(False)
programs = [environment.compile(source, kind) for source, kind in (
    ("null", ExpressionKind.AUDIT_ANNOTATION), ("object.x", ExpressionKind.STANDALONE),
    ("[object.x, object.x]", ExpressionKind.STANDALONE), ("{'a': object.x}", ExpressionKind.STANDALONE))]
context = environment.new_context({"object": {"x": None}}, budget=None)
for _ in range(25_000):
    for program in programs:
        assert context.run(program) in (None, [None, None], {"a": None})
print("up")
"""
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "up"


class TestNativeNests:
    """A stepped evaluation first runs each short loop with the loops inside it in the engine, and runs it again
    delegated only when that passes the engine's iteration limit (``EvaluationContext.run_loop``): the outcome and
    what it charged must be those of delegating every loop, whichever way each nest went."""

    NESTS = (
        # Four deep over one list: 10**4 inner iterations fit one evaluation, 11**4 do not.
        "variables.items.all(a, variables.items.all(b, variables.items.all(c, variables.items.all(d, d >= 0))))",
        # Two-variable loops, whose slices keep the original indexes.
        "object.items.all(i, x, object.items.all(j, y, i + j >= 0 && x + y == i + j))",
        # Short-circuits: found late, found never.
        "object.items.exists(x, object.items.exists(y, x * y == (size(object.items) - 1) * (size(object.items) - 1)))",
        "object.items.exists(x, object.items.exists(y, x + y < 0))",
        # An error inside the nest (absorbed by all() when another element is false, kept otherwise).
        "object.items.all(x, object.items.all(y, 10 / (y - 7) != 99))",
        "object.items.all(x, object.items.all(y, y < 9 && 10 / (y - 7) != 99))",
        # A map as the outer range.
        "object.keyed.all(k, object.items.all(y, y >= 0 && k.size() > 0))",
        # Three deep: past the per-call cost limit for the longest lists.
        "object.items.all(x, object.items.all(y, object.items.all(z, z >= 0)))",
    )

    @staticmethod
    def _outcome(source: str, size: int, native: bool) -> tuple[Any, int]:
        variables = _variables(("items", "object.items"))
        program = ENVIRONMENT.compile(source, ExpressionKind.VALIDATION, variable_names=["items"],
                                      variable_types=_types(variables))
        assert isinstance(program, CompiledExpression), program
        program = ENVIRONMENT.link(program, variables)
        data = {"object": {"items": list(range(size)), "keyed": {f"k{i}": i for i in range(size + 20)}}}
        context = ENVIRONMENT.new_context(data, budget=10_000_000, native_nests=native)
        outcome = program.evaluate(context)
        assert context.budget is not None
        return _described(outcome), context.budget.remaining

    @pytest.mark.parametrize("source", NESTS)
    @pytest.mark.parametrize("size", [8, 10, 11, 101, 230])
    def test_native_nests_decide_and_charge_as_delegated_loops(self, source: str, size: int) -> None:
        assert self._outcome(source, size, True) == self._outcome(source, size, False)
