"""Running one compiled expression, or a policy's match conditions, over a request's activation: the
validating and mutating dispatchers' shared step between the activation and their decisions.

Stage: evaluate (kube-apiserver's ``plugin/cel/filter.go``). Receives compiled programs and an activation; hands on
values or :mod:`outcomes` failures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, cast

from staticadm.admission.outcomes import ExpressionFailure, expression_failure
from staticadm.admission.vocabulary import ErrorType
from staticadm.bounded import keep_bounded
from staticadm.cel import CompiledExpression, CompileError, EvalError
from staticadm.cel.evaluation import EvaluationContext, RememberedOutcomes
from staticadm.cel.reads import read_paths
from staticadm.cel.stepping import free_variables
from staticadm.compiled import Program
from staticadm.model import MatchCondition


def run_program(program: Program, source: str, context: EvaluationContext,
                remembered: RememberedOutcomes | None = None,
                ) -> tuple[Any, ExpressionFailure | None]:
    """(value, None) or (None, why this expression gave no value); with ``remembered``, an outcome the
    request already had for this program over the same activation is reused (``run_remembered``)."""
    if program.__class__ is CompileError:
        return None, ExpressionFailure(f"compilation error: {cast(CompileError, program).message}",
                                       ErrorType.COMPILE_ERROR)
    if remembered is None:
        outcome = context.run(cast(CompiledExpression, program))
    else:
        outcome = context.run_remembered(cast(CompiledExpression, program), remembered)
    if outcome.__class__ is EvalError:
        return None, expression_failure(source, outcome)
    return outcome, None


_Thing = TypeVar("_Thing")
_Fact = TypeVar("_Fact")
class IdentityFacts(Generic[_Thing, _Fact]):
    """Facts about objects that outlive requests (compiled programs, a policy's match conditions: a snapshot holds
    them), found once per object: each is kept with its object, so that its id names it for as long as the fact is
    kept."""

    __slots__ = ("_entries", "_find")

    #: How many objects' facts are kept; past this they are found again (a reload changed most of them).
    LIMIT = 4096

    def __init__(self, find: Callable[[_Thing], _Fact]) -> None:
        self._find = find
        self._entries: dict[int, tuple[_Thing, _Fact]] = {}

    def __call__(self, thing: _Thing) -> _Fact:
        entry = self._entries.get(id(thing))
        if entry is not None and entry[0] is thing:
            return entry[1]
        fact = self._find(thing)
        keep_bounded(self._entries, id(thing), (thing, fact), self.LIMIT)
        return fact


def reads_object(program: Program) -> bool:
    """Whether evaluating ``program`` can read anything of ``object``, through the variables it links too: one that
    cannot has the same value, error and cost for every version of the object (a mutation's result)."""
    if program.__class__ is CompileError:
        return False
    compiled = cast(CompiledExpression, program)
    if compiled.prepared is None:
        # Built without the checked expression: nothing is known of what it reads.
        return True
    if compiled.object_reads()["object"]:
        return True
    return any(reads_object(variable) for _, variable in compiled.linked_variables)


def is_constant(program: Program) -> bool:
    """Whether ``program`` reads nothing of its activation (no request, object, authorizer...): its value and cost
    are the same in every request."""
    if program.__class__ is CompileError:
        return False
    compiled = cast(CompiledExpression, program)
    return (compiled.prepared is not None and not compiled.linked_variables and not compiled.variables_used
            and not free_variables(compiled.prepared.expr))


def request_paths(program: Program) -> tuple[tuple[str, ...], ...] | None:
    """The paths of ``request`` ``program`` reads (``reads.read_paths``), when that is all it reads of its activation
    and each is a chain of field names; None when it reads more, or a value whole. Such a program's value and cost
    follow from what ``request`` holds at those paths."""
    if program.__class__ is CompileError:
        return None
    compiled = cast(CompiledExpression, program)
    if (compiled.prepared is None or compiled.linked_variables or compiled.variables_used
            or not free_variables(compiled.prepared.expr) <= {"request"}):
        return None
    paths = read_paths(compiled.prepared.expr, frozenset({"request"}))["request"]
    if any(not path or any(key.__class__ is not str for key in path) for path in paths):
        return None
    return tuple(sorted(cast(set[tuple[str, ...]], paths)))


class ConstantValues:
    """The values of constant programs (``is_constant``) that evaluated without an error, kept across requests.

    Evaluating one again would give the same value at the same cost, charged to a budget of its own (a mutation's
    scope), so it is not evaluated again. The values are shared: callers only read them.
    """

    __slots__ = ("_constant", "_entries")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Program, Any]] = {}
        self._constant = IdentityFacts(is_constant)

    def get(self, program: Program) -> Any:
        """The value of ``program``, or ``UNKNOWN``."""
        entry = self._entries.get(id(program))
        return entry[1] if entry is not None and entry[0] is program else UNKNOWN

    def remember(self, program: Program, value: Any) -> bool:
        """Keeps ``value``, what ``program`` evaluated to without an error, when ``program`` is constant; whether it
        was kept."""
        if not self._constant(program):
            return False
        keep_bounded(self._entries, id(program), (program, value), IdentityFacts.LIMIT)
        return True


#: What ``ConstantValues.get`` returns for a program whose value is not known.
UNKNOWN: Any = object()


def evaluate_match_conditions(conditions: Sequence[tuple[MatchCondition, Program]], context: EvaluationContext,
                              remembered: RememberedOutcomes | None = None,
                              ) -> tuple[str | None, list[ExpressionFailure]]:
    """(name of the first condition that is false, or None; the failures of those that failed).

    As kube-apiserver's matcher (matchconditions/matcher.go over cel/condition.go ``ForInput``): every condition
    runs against the scope's one budget before any result is read, so a false condition skips the policy only
    when the whole list ran; a budget running out on any of them (after a false one too) is the one failure.
    A false condition wins over errors: the policy simply does not apply. Policies often share their
    conditions (``request.namespace != 'kube-system'``): with ``remembered`` (the request's
    ``RequestActivations.remembered``) a condition another policy of the request already evaluated over
    the same activation is not evaluated again.
    """
    failures: list[ExpressionFailure] = []
    false_condition: str | None = None
    for condition, program in conditions:
        value, failure = run_program(program, condition.expression, context, remembered)
        if failure is not None and failure.ends_scope:
            # The matcher's filter itself failed: no condition after it is looked at, nor any result.
            return None, [failure]
        if failure is not None:
            failures.append(failure)
        elif value is False and false_condition is None:
            false_condition = condition.name
    return false_condition, failures
