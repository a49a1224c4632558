"""Evaluating compiled expressions: one activation per request, Kubernetes' cost limits, exact errors.

Cost is charged as Kubernetes charges it (``cost.py``): each expression may cost ``PER_CALL_LIMIT``
(each variable too, on its own), and the expressions of one scope (a binding's validations, then its
messageExpressions from what remains; its audit annotations; its match conditions) share a budget.
Every charge is a deterministic function of the policy and the request: no decision depends on time.
The wall clock is only a backstop at the request's own deadline, when kube-apiserver has stopped
waiting for the answer anyway.
"""

from __future__ import annotations

import ctypes
import functools
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cel_expr_python import cel

from staticadm.cel import cost, messages, rewrite, stepping


def _none_outlives_the_engine() -> None:
    """cel-expr-python 0.1.3 hands a null over to Python (``plain_value()``, ``value()``) without taking a
    reference to ``None`` for it, so each null a result holds costs ``None`` one reference; on CPython 3.11,
    where ``None`` is an ordinary object, the process aborts ("deallocating None") once they are used up, after a
    few thousand such nulls. CPython 3.12 made ``None`` immortal (its count is never changed); here it is given
    2**40 references, enough for a trillion nulls, which is the same for a singleton that is never freed."""
    if sys.version_info < (3, 12):
        # ob_refcnt is the first field of every object in CPython's (non-debug) object layout.
        ctypes.c_ssize_t.from_address(id(None)).value += 1 << 40


_none_outlives_the_engine()



@dataclass(frozen=True, slots=True)
class CompileError:
    """An expression that did not compile, with Kubernetes' words for why: a value, as runtime errors are."""

    message: str


class CompiledExpression(Protocol):
    """What evaluating a compiled expression reads of it (``environment.CompiledExpression`` has it all; the
    environment builds programs on this module, never the other way round)."""

    @property
    def program(self) -> Any: ...

    @property
    def result_type(self) -> str: ...

    @property
    def static_cost(self) -> int: ...

    @property
    def declaration_index(self) -> int: ...

    @property
    def linked_variables(self) -> tuple[tuple[str, CompiledExpression | CompileError], ...]: ...

    def with_failed_variables(self, failures: Mapping[str, str]) -> Any: ...

    def diagnostic(self, failures: Mapping[str, str]) -> Any: ...

    def stepped(self) -> stepping.SteppedProgram: ...

COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
#: cel-go v0.29.2's ext/lists.go ``sort()``/``distinct()`` handed a failing operand assert it is a traits.Lister and
#: panic; kube-apiserver recovers the panic, which ends the whole evaluation (``||``, ``&&`` and macros absorb
#: nothing of it), as the expression's error (``rewrite._lister_operand``).
LISTER_PANIC_MESSAGE = "internal error: interface conversion: *types.Err is not traits.Lister: missing method Add"
#: Kubernetes' words when a scope's budget runs out (``admission/plugin/cel/activation.go``).
BUDGET_EXHAUSTED_MESSAGE = ("validation failed due to running out of cost budget, no further validation rules "
                            "will be run")
DEADLINE_MESSAGE = "evaluation stopped: the request's deadline passed"
#: The engine's own limit of comprehension iterations in one evaluation (cel-cpp's default, not
#: configurable through cel-expr-python); evaluations that reach it are re-run in bounded steps.
ENGINE_ITERATION_LIMIT_TEXT = "Iteration budget exceeded"
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z_]+\]$")
_DEADLINE_CHECK_INTERVAL = 1024
#: The engine's texts where cel-go's name what failed: a selection or index of a value that is no map or list
#: (cel-go names the key), a loop over one (its type), a call charged by its operand's size (the call).
_UNKEYED = re.compile(r"no such key|Invalid container type: '[^']*'|no such overload(: size)?")
BODY = -1


class CostLimitExceeded(Exception):
    def __init__(self) -> None:
        super().__init__(COST_LIMIT_MESSAGE)


class DeadlineExceeded(Exception):
    def __init__(self) -> None:
        super().__init__(DEADLINE_MESSAGE)


@dataclass(frozen=True, slots=True)
class EvalError:
    """A runtime error as a value.

    ``cost_exceeded``: the expression passed the per-expression limit; ``budget_exhausted``: the scope's
    budget ran out (Kubernetes stops evaluating the scope); ``deadline_exceeded``: the backstop fired.
    """

    message: str
    cost_exceeded: bool = False
    budget_exhausted: bool = False
    deadline_exceeded: bool = False


def engine_error_text(raw: str) -> str:
    """Strips the absl status code the engine puts around error texts."""
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))


def runtime_error(raw: str) -> str:
    """An evaluation error in cel-go's words (what kube-apiserver reports)."""
    return messages.runtime_error_text(engine_error_text(raw))


class CostBudget:
    """What remains of one scope's budget, and which variables it has already paid for."""

    def __init__(self, total: int) -> None:
        self.remaining = total
        #: Variables (declaration index) charged in this scope: Kubernetes evaluates each once per scope.
        self.charged_variables: set[int] = set()


class EvaluationState:
    """Thread-local pointer to the evaluation in progress, for the engine's callbacks.

    The engine calls our Python functions without passing any context, so the cost accounting finds the
    current context here; a thread evaluates one request at a time.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def current(self) -> EvaluationContext:
        context: EvaluationContext | None = getattr(self._local, "context", None)
        if context is None:
            raise RuntimeError("CEL callback outside of an evaluation")
        return context

    def enter(self, context: EvaluationContext) -> EvaluationContext | None:
        previous: EvaluationContext | None = getattr(self._local, "context", None)
        self._local.context = context
        return previous

    def leave(self, previous: EvaluationContext | None) -> None:
        self._local.context = previous

    def tick(self, weight: int, owner: int = BODY) -> bool:
        # False ends the loop: once over the limit nothing more of it may run (an error would not stop
        # it: the engine's loops go on past an error condition, and ``all``/``exists`` absorb errors).
        try:
            self._local.context.charge(weight, owner)
        except (CostLimitExceeded, DeadlineExceeded):
            return False
        return True

    def fixed_tick(self, weight: int, owner: int = BODY) -> Callable[[], bool]:
        """``tick(weight, owner)`` as one argument-free call (the engine makes one per loop iteration): the common
        case (within every limit, no deadline check due) charged inline; anything else goes through ``tick``,
        which charges, checks and ends the loop exactly as it always does."""
        local = self._local
        limit = cost.PER_CALL_LIMIT
        interval = _DEADLINE_CHECK_INTERVAL
        tick = self.tick
        none_exceeded = _NONE_EXCEEDED

        if owner == BODY:
            return self._body_charge(weight, functools.partial(tick, weight, owner))

        def owner_tick() -> bool:
            context = local.context
            run = context._run
            variables = run.variables
            total = variables.get(owner, 0) + weight
            if total > limit or run.exceeded is not none_exceeded:
                return tick(weight, owner)
            if context._deadline is not None:
                calls = context._charge_calls + 1
                if not calls % interval or context._deadline_exceeded:
                    return tick(weight, owner)
                context._charge_calls = calls
            variables[owner] = total
            return True

        return owner_tick

    def tick_ahead(self, weight: int, owner: int = BODY) -> bool:
        """Adds part of an iteration's weight; the tick that follows it checks the limit on the whole."""
        self._local.context.add(weight, owner)
        return True

    def loop(self, loop_id: int, values: Any, initial: Any, captured: list[Any]) -> Any:
        return self.current.run_loop(loop_id, values, initial, captured)

    def variable(self, name: str) -> Any:
        return self.current.read_variable(name)

    def direct(self) -> bool:
        return self.current.long_loop_runs_directly()

    def lister_enter(self) -> bool:
        self._local.context._run.open_listers += 1
        return True

    def lister_leave(self) -> bool:
        self._local.context._run.open_listers -= 1
        return True

    def lister_mark(self) -> bool:
        run = self._local.context._run
        run.lister_marks.append(run.open_listers)
        return True

    def lister_check(self) -> bool:
        run = self._local.context._run
        marked = run.lister_marks.pop()
        if run.open_listers != marked:
            # cel-go's program Eval recovered the panic: the variable fails, the evaluation reading it goes on.
            run.open_listers = marked
            raise ValueError(LISTER_PANIC_MESSAGE)
        return True

    def charge(self, amount: int) -> bool:
        # The common case inline, as ``fixed_tick`` does; anything else charges and checks through the context.
        context = self._local.context
        run = context._run
        total = run.body + amount
        if total <= cost.PER_CALL_LIMIT and run.exceeded is _NONE_EXCEEDED:
            if context._deadline is None:
                run.body = total
                return True
            calls = context._charge_calls + 1
            if calls % _DEADLINE_CHECK_INTERVAL and not context._deadline_exceeded:
                context._charge_calls = calls
                run.body = total
                return True
        context.charge(amount, BODY)
        return True

    def fixed_charge(self, amount: int) -> Callable[[], bool]:
        """``charge(amount)`` as one argument-free call (``cost.fixed_charge_function``), its common case inline as
        the loop ticks' is: an image name longer than 40 characters makes every check of it such a call, several per
        container, so a second Python frame each time showed in the CPU of a request for a new Pod."""
        return self._body_charge(amount, functools.partial(self.charge, amount))

    def _body_charge(self, amount: int, otherwise: Callable[[], bool]) -> Callable[[], bool]:
        """An argument-free call adding ``amount`` to the expression's own cost in the common case (within every
        limit, no deadline check due) inline, and calling ``otherwise`` (which charges and checks in full) in any
        other."""
        local = self._local
        limit = cost.PER_CALL_LIMIT
        interval = _DEADLINE_CHECK_INTERVAL
        none_exceeded = _NONE_EXCEEDED

        def body_charge() -> bool:
            context = local.context
            run = context._run
            total = run.body + amount
            if total > limit or run.exceeded is not none_exceeded:
                return otherwise()
            if context._deadline is not None:
                calls = context._charge_calls + 1
                if not calls % interval or context._deadline_exceeded:
                    return otherwise()
                context._charge_calls = calls
            run.body = total
            return True

        return body_charge

    def charge_for(self, owner: int, amount: int) -> bool:
        self._local.context.charge(amount, owner)
        return True


@dataclass(slots=True, eq=False)  # not frozen: one or more per request
class SharedActivation:
    """An engine activation and the Python data it was made from (stepped evaluation needs the data)."""

    engine: Any
    data: Mapping[str, Any]


_NONE_EXCEEDED: set[int] = set()
#: Outcomes of earlier runs of a request, by (program, engine activation) identity: (outcome, cost charged).
RememberedOutcomes = dict[tuple[int, int], tuple[Any, int]]
#: The class of what the engine's ``eval`` returns (anything else is an exception it raised).
_ENGINE_VALUE = cel.Value


class _RunCost:
    """The cost of one evaluation in progress: the expression's own and each variable's."""

    __slots__ = ("body", "exceeded", "lister_marks", "needs_steps", "open_listers", "variables")

    def __init__(self) -> None:
        self.body = 0
        #: Operands of sort()/distinct() entered and not left with a value (``rewrite._lister_operand``): any
        #: means one failed, where cel-go panics.
        self.open_listers = 0
        #: ``open_listers`` when each variable holding such operands began (``rewrite._lister_panics_confined``).
        self.lister_marks: list[int] = []
        #: A long loop asked for the evaluation to be re-run in steps.
        self.needs_steps = False
        self.variables: dict[int, int] = {}
        #: Owners (BODY or a variable index) that passed their per-call limit; empty until one does.
        self.exceeded: set[int] = _NONE_EXCEEDED


class EvaluationContext:
    """Everything one scope's expressions share: the activation, the cost budget, the deadline."""

    def __init__(
        self,
        engine_env: cel.Env,
        state: EvaluationState,
        data: Mapping[str, Any],
        activation: Any = None,
        request_deadline: float | None = None,
        budget: CostBudget | int | None = cost.RUNTIME_CEL_COST_BUDGET,
        *,
        native_nests: bool = True,
    ) -> None:
        self._engine_env = engine_env
        self._state = state
        self._local = state._local
        # The engine converts a variable's Python value on its first use in an activation (~100 µs for a
        # 5 KB Pod, then ~0.1 µs), so contexts of one request share one activation when they can.
        if isinstance(activation, SharedActivation):
            self._data: Mapping[str, Any] = activation.data
            self.activation = activation.engine
        else:
            self._data = dict(data)
            self.activation = activation if activation is not None else engine_env.Activation(data=self._data)
        #: What stepped evaluations are running (innermost last), to find loop plans and variables.
        self._stepping: list[tuple[CompiledExpression, stepping.SteppedProgram]] = []
        self._stepped_variables: dict[str, Any] | None = None
        self._deadline = request_deadline
        self.budget = CostBudget(budget) if isinstance(budget, int) else budget
        self._run = _RunCost()
        self._charge_calls = 0
        self._deadline_exceeded = False
        #: Variable name -> Kubernetes' error text for it, once a failed evaluation had to find out.
        self._variable_failures: dict[str, str | None] | None = None
        #: Whether a stepped evaluation first runs each short loop with its inner loops in the engine
        #: (``run_loop``); False delegates every loop, the plain reading (for the tests that compare them).
        self.native_nests = native_nests
        #: Per loop (its id in the stepped program), the shortest range whose native run passed the engine's limit.
        self._native_too_long: dict[int, int] = {}

    def rescope(self, activation: SharedActivation, budget: CostBudget | int | None) -> EvaluationContext:
        """This context starts another cost scope of the same request (a binding's match conditions,
        validations, messages, audit annotations) over ``activation``: what one scope charged, and what it
        learnt about its policy's variables, never leaks into the next. Cheaper than a new context, and
        the request's deadline and its backstop state carry over."""
        self._data = activation.data
        self.activation = activation.engine
        self.budget = CostBudget(budget) if isinstance(budget, int) else budget
        self._stepped_variables = None
        self._variable_failures = None
        return self

    # -- the engine's callbacks -------------------------------------------------------------------

    def add(self, amount: int, owner: int) -> None:
        """Charges ``amount`` without checking any limit (``charge`` checks next). ``charge`` adds the same way
        inline rather than calling this: it runs once per loop iteration."""
        run = self._run
        if owner == BODY:
            run.body += amount
        else:
            run.variables[owner] = run.variables.get(owner, 0) + amount

    def charge(self, amount: int, owner: int) -> None:
        run = self._run
        if owner == BODY:
            run.body += amount
            total = run.body
        else:
            total = run.variables.get(owner, 0) + amount
            run.variables[owner] = total
        if total > cost.PER_CALL_LIMIT or owner in run.exceeded:
            if run.exceeded is _NONE_EXCEEDED:
                run.exceeded = set()
            run.exceeded.add(owner)
            raise CostLimitExceeded()
        if self._deadline is not None:
            self._charge_calls += 1
            if self._charge_calls % _DEADLINE_CHECK_INTERVAL == 0 and time.perf_counter() > self._deadline:
                self._deadline_exceeded = True
            if self._deadline_exceeded:
                raise DeadlineExceeded()

    # -- evaluation -------------------------------------------------------------------------------

    def _engine_eval(self, program: Any) -> tuple[Any, _RunCost]:
        """One engine evaluation with this context receiving its callbacks: (the engine's value, or the exception
        it raised for an internal failure; what the evaluation charged)."""
        run = _RunCost()
        saved = self._run
        self._run = run
        local = self._local
        previous = getattr(local, "context", None)
        local.context = self
        try:
            result: Any = program.eval(self.activation)
        except Exception as error:  # the engine raises for some internal failures; the caller sorts them out
            result = error
        finally:
            local.context = previous
            self._run = saved
        return result, run

    def run(self, compiled: CompiledExpression) -> Any:
        """Evaluates one expression; returns its Python value or an EvalError, never raises."""
        budget = self.budget
        if budget is not None and budget.remaining < 0:
            return EvalError(BUDGET_EXHAUSTED_MESSAGE, budget_exhausted=True)
        # The common case inline (one engine call, a bool, nothing special): it runs for every
        # expression of every request, so each step here is paid ~35 times per request.
        result, run = self._engine_eval(compiled.program)
        if (result.__class__ is not _ENGINE_VALUE or run.exceeded or run.needs_steps or run.open_listers
                or self._deadline_exceeded):
            outcome, run = self._evaluate(compiled, first=(result, run))
            return self._settle(compiled, budget, outcome, run)
        if compiled.result_type != "bool":
            return self._settle(compiled, budget, to_python(result, compiled.result_type), run)
        # Validations and match conditions: a bool is the value; anything else (an error's text) goes the
        # general way. One native call instead of three (each costs ~0.3 µs).
        outcome = result.plain_value()
        if outcome.__class__ is not bool or run.variables:
            return self._settle(compiled, budget, to_python(result, compiled.result_type), run)
        if budget is not None:
            spent = compiled.static_cost + run.body
            if spent > budget.remaining:
                budget.remaining = -1
                return EvalError(BUDGET_EXHAUSTED_MESSAGE, budget_exhausted=True)
            budget.remaining -= spent
        return outcome

    def run_conjunction(self, program: Any, static_cost: int) -> bool:
        """True when ``program`` (``CelEnvironment.conjunction`` of expressions whose static costs add up to
        ``static_cost``) was true within this scope's budget, which is then charged what running each of them
        would have charged. False says nothing about any one of them and charges nothing: they are run one by
        one, which reports each value, error and cost exactly (an error, a false, a per-expression or budget
        limit, a loop evaluated in steps, the deadline)."""
        budget = self.budget
        if budget is not None and budget.remaining < 0:
            return False
        # An engine failure (its exception is the result) is not simply true: the expressions one by one say which.
        result, run = self._engine_eval(program)
        if (result.__class__ is not _ENGINE_VALUE or run.exceeded or run.needs_steps or run.variables
                or run.open_listers or self._deadline_exceeded or result.plain_value() is not True):
            return False
        if budget is not None:
            spent = static_cost + run.body
            if spent > budget.remaining:
                return False
            budget.remaining -= spent
        return True

    def run_within(self, program: Any, static_cost: int, limit: int) -> Any:
        """The plain value of ``program`` (``CelEnvironment.fuse``, whose parts' static costs add up to
        ``static_cost``) when it ran to a value that charged at most ``limit`` in all, no expression or variable
        past its own limit, nothing stepped, before the deadline; None otherwise. Charges no budget: the caller
        reads the value as standing for every scope of its parts, which the limit guarantees."""
        result, run = self._engine_eval(program)
        if (result.__class__ is not _ENGINE_VALUE or run.exceeded or run.needs_steps or run.open_listers
                or self._deadline_exceeded):
            return None
        spent = static_cost + run.body
        if run.variables:
            spent += sum(run.variables.values())
        if spent > limit:
            return None
        return result.plain_value()

    def run_remembered(self, compiled: CompiledExpression, remembered: RememberedOutcomes) -> Any:
        """``run(compiled)``, or the outcome an earlier run of the same program over the same activation had
        (in another scope of the request), charged to this scope's budget as that run charged its own.

        An evaluation is a function of the program and the activation (authorizer answers are fixed per
        request), and so is its cost; what depends on the scope (running out of its budget, the deadline,
        variables charged once per scope) is never remembered.
        """
        budget = self.budget
        key = (id(compiled), id(self.activation))
        earlier = remembered.get(key)
        if earlier is None or budget is None:
            before = budget.remaining if budget is not None else -1
            outcome = self.run(compiled)
            scoped = outcome.__class__ is EvalError and (outcome.budget_exhausted or outcome.deadline_exceeded)
            if budget is not None and before >= 0 and budget.remaining >= 0 and not compiled.linked_variables \
                    and not scoped:
                remembered[key] = (outcome, before - budget.remaining)
            return outcome
        outcome, spent = earlier
        if budget.remaining < 0 or spent > budget.remaining:
            budget.remaining = -1
            return EvalError(BUDGET_EXHAUSTED_MESSAGE, budget_exhausted=True)
        budget.remaining -= spent
        return outcome

    def _settle(self, compiled: CompiledExpression, budget: CostBudget | None, outcome: Any, run: _RunCost) -> Any:
        """The outcome of an evaluation with its errors worded and its cost charged to the scope."""
        if self._deadline_exceeded:
            return EvalError(DEADLINE_MESSAGE, deadline_exceeded=True)
        if outcome.__class__ is EvalError and not outcome.cost_exceeded and compiled.linked_variables:
            outcome = self._explain_variable_error(compiled, outcome)
        elif run.exceeded and BODY not in run.exceeded and compiled.linked_variables:
            # A variable went past its own per-call limit: its loop was cut short there, so what the expression
            # made of it is no value. In Kubernetes that variable fails with the cost error when read.
            outcome = self._explain_variable_error(compiled, outcome, cut_short=True)
        else:
            outcome = self._keyed(compiled, None, outcome)
        if budget is not None:
            spent = compiled.static_cost + run.body
            if run.variables:
                for owner, amount in run.variables.items():
                    if owner not in budget.charged_variables:
                        budget.charged_variables.add(owner)
                        spent += amount
            if spent > budget.remaining:
                budget.remaining = -1
                return EvalError(BUDGET_EXHAUSTED_MESSAGE, budget_exhausted=True)
            budget.remaining -= spent
        return outcome

    def _evaluate(self, compiled: CompiledExpression, failures: Mapping[str, str] | None = None, *,
                  run: _RunCost | None = None, first: tuple[Any, _RunCost] | None = None) -> tuple[Any, _RunCost]:
        """One evaluation of ``compiled`` (with ``failures``: its variables of those names linked as those errors)
        with everything that can go wrong handled; ``first`` is the outcome of an evaluation already made
        (``run``'s fast path), to finish instead of evaluating again."""
        program = compiled.with_failed_variables(failures) if failures else compiled.program
        own_run = run is None
        if first is not None:
            result, run = first
        else:
            run = _RunCost() if run is None else run
        # A variable a stepped evaluation reads shares its run, maybe inside an operand entered and not yet left.
        opened = 0 if own_run else run.open_listers
        saved, self._run = self._run, run
        previous = self._state.enter(self)
        try:
            if first is None:
                try:
                    result = program.eval(self.activation)
                except Exception as raised:  # the engine raises for some internal failures
                    result = raised
            if isinstance(result, Exception):
                if run.exceeded and BODY in run.exceeded:
                    return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True), run
                if ENGINE_ITERATION_LIMIT_TEXT not in str(result):
                    if run.open_listers != opened:
                        return EvalError(LISTER_PANIC_MESSAGE), run
                    return EvalError(runtime_error(str(result))), run
                if own_run:
                    # Charged again from the start: the stepped evaluation runs every tick once more.
                    run = _RunCost()
                    self._run = run
                run.open_listers = opened
                return self._evaluate_stepped(compiled, run), run
            if run.exceeded and BODY in run.exceeded:
                return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True), run
            if run.needs_steps:
                if own_run:
                    run = _RunCost()
                    self._run = run
                else:
                    run.needs_steps = False
                run.open_listers = opened
                return self._evaluate_stepped(compiled, run), run
            if run.open_listers != opened:
                return EvalError(LISTER_PANIC_MESSAGE), run
            return self._keyed(compiled, failures, to_python(result, compiled.result_type)), run
        finally:
            self._state.leave(previous)
            self._run = saved

    def _keyed(self, compiled: CompiledExpression, failures: Mapping[str, str] | None, outcome: Any) -> Any:
        """``outcome``, or when it is an error the engine worded without what cel-go's words name (``_UNKEYED``),
        that error in cel-go's words: the expression's diagnostic form (``rewrite.diagnostic``) is run for them,
        its cost counted nowhere (the evaluation that failed was charged)."""
        if outcome.__class__ is not EvalError or not _UNKEYED.fullmatch(outcome.message):
            return outcome
        result, _ = self._engine_eval(compiled.diagnostic(failures or {}))
        if result.__class__ is _ENGINE_VALUE:
            worded = to_python(result, compiled.result_type)
            if worded.__class__ is EvalError and rewrite.STEP_MESSAGE not in worded.message:
                return worded
        return outcome

    def _evaluate_stepped(self, compiled: CompiledExpression, run: _RunCost) -> Any:
        try:
            stepped = compiled.stepped()
        except stepping.NotSteppable as error:
            return EvalError(f"the expression needs more than 10000 loop iterations in one evaluation, which "
                             f"staticadm evaluates in steps, and it cannot be stepped: {error}")
        except Exception as error:  # a bug of ours must cost this expression, never the request
            return EvalError(f"internal error preparing the stepped evaluation: {type(error).__name__}")
        self._stepping.append((compiled, stepped))
        try:
            result = stepped.program.eval(self.activation)
        except Exception as error:
            result = None
            failure = EvalError(runtime_error(str(error)))
        finally:
            self._stepping.pop()
        if BODY in run.exceeded:
            return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True)
        if run.open_listers:
            return EvalError(LISTER_PANIC_MESSAGE)
        if result is None:
            return failure
        return to_python(result, compiled.result_type)

    def long_loop_runs_directly(self) -> bool:
        """``@staticadm.direct``: a loop building a list longer than ``stepping.APPEND_SLICE`` runs natively
        only in a stepped evaluation (otherwise the whole evaluation is re-run in steps, where it runs in
        short slices)."""
        if self._stepping:
            return True
        self._run.needs_steps = True
        return False

    def run_loop(self, loop_id: int, values: Any, initial: Any, captured: list[Any]) -> Any:
        """``@staticadm.loop``: one comprehension of a stepped evaluation, slice by slice.

        A loop whose range fits one slice is first run with the loops inside it left to the engine (a nest of
        loops over short lists is then one evaluation, not one per inner loop: thousands fewer); only when that
        passes the engine's iteration limit is it run again with them delegated, after taking back what the
        attempt charged. Both charge the same ticks in the same order, so either way the outcome and its cost
        are the same.
        """
        plan = self._stepping[-1][1].loops[loop_id]
        base = {**self._data, **dict(zip(plan.captures, captured, strict=True))}
        # A range longer than a slice, or as long as one that passed the limit on this loop, goes delegated.
        if plan.native is not None and self.native_nests and len(values) < self._native_too_long.get(
                loop_id, stepping.SLICE + 1):
            run = self._run
            charged = (run.body, dict(run.variables), set(run.exceeded), self._charge_calls, run.open_listers)
            variables_read = set(self._stepped_variables or ())
            try:
                return self._run_slices(plan, plan.native, base, values, initial)
            except Exception as error:  # the engine raises its iteration limit; anything else is the loop's own
                if ENGINE_ITERATION_LIMIT_TEXT not in str(error):
                    raise
            # A range as long (over the same loop of this request) would pass the limit again, most likely:
            # those go delegated at once. Only how fast, never what, depends on this guess.
            self._native_too_long[loop_id] = len(values)
            run.body, run.variables, self._charge_calls = charged[0], charged[1], charged[3]
            run.open_listers = charged[4]
            run.exceeded = charged[2] or _NONE_EXCEEDED
            if self._stepped_variables is not None:
                # Variables first read by the attempt are read (and charged) again by the delegated run.
                for name in set(self._stepped_variables) - variables_read:
                    del self._stepped_variables[name]
        return self._run_slices(plan, plan, base, values, initial)

    def _run_slices(self, plan: stepping.LoopPlan, steps: stepping.LoopPlan | stepping.NativeSteps,
                    base: Mapping[str, Any], values: Any, initial: Any) -> Any:
        accumulator, accumulator_error = initial, None
        indexed = steps.indexed_step is not None and not isinstance(values, dict)
        size = stepping.APPEND_SLICE if plan.appends else stepping.SLICE
        for offset, part in stepping.slices(values, size):
            data = {**base, stepping.RANGE: part, stepping.OFFSET: offset}
            if accumulator_error is None:
                data[stepping.ACCUMULATOR] = accumulator
                program = steps.indexed_step if indexed else steps.step
            else:
                data[stepping.ACCUMULATOR_ERROR] = accumulator_error
                program = steps.indexed_step_from_error if indexed else steps.step_from_error
            outcome = self._eval_plain(program, data)
            if isinstance(outcome, EvalError):
                accumulator, accumulator_error = None, outcome.message
                continue
            if plan.appends:
                accumulator = _joined(accumulator, outcome)
                continue
            accumulator = outcome
            if self._eval_plain(plan.condition, {**base, stepping.ACCUMULATOR: accumulator}) is not True:
                break
        if accumulator_error is None:
            outcome = self._eval_plain(plan.result, {**base, stepping.ACCUMULATOR: accumulator})
        else:
            outcome = self._eval_plain(plan.result_from_error, {**base, stepping.ACCUMULATOR_ERROR: accumulator_error})
        if isinstance(outcome, EvalError):
            raise ValueError(outcome.message)
        return outcome

    def _eval_plain(self, program: Any, data: Mapping[str, Any]) -> Any:
        result = program.eval(self._engine_env.Activation(data=dict(data)))
        if BODY in self._run.exceeded or self._deadline_exceeded:
            raise CostLimitExceeded()
        return to_python(result)

    def read_variable(self, name: str) -> Any:
        """``@staticadm.variable``: a variable read by a stepped evaluation, evaluated once per scope."""
        if self._stepped_variables is None:
            self._stepped_variables = {}
        if name not in self._stepped_variables:
            compiled = self._stepping[-1][0]
            variable = dict(compiled.linked_variables).get(name)
            if variable is None or isinstance(variable, CompileError):
                message = variable.message if variable is not None else "not defined"
                value: Any = EvalError(f'composited variable "{name}" fails to compile: {message}')
            else:
                value, _ = self._evaluate(variable, run=self._run)
                if variable.declaration_index in self._run.exceeded:
                    value = EvalError(f'composited variable "{name}" fails to evaluate: {COST_LIMIT_MESSAGE}')
                elif isinstance(value, EvalError):
                    value = EvalError(f'composited variable "{name}" fails to evaluate: {value.message}')
            self._stepped_variables[name] = value
        value = self._stepped_variables[name]
        if isinstance(value, EvalError):
            raise ValueError(value.message)
        return value

    def _explain_variable_error(self, compiled: CompiledExpression, outcome: Any, cut_short: bool = False) -> Any:
        """Kubernetes reports an error coming from a variable as ``composited variable "x" fails to ...``.

        Inside the engine a variable's error is just the error; when an expression fails, each variable
        it reads is evaluated on its own (deterministic, so it fails the same way) and the expression is
        run once more with the failing ones linked as errors worded like Kubernetes'. With ``cut_short`` (a
        variable passed its cost limit, so ``outcome`` is no value) that run's outcome is the answer even when
        it is a value: the expression may not need the failing variable (``variables.x || true``).
        """
        failures: dict[str, str] = {}
        for name, variable in compiled.linked_variables:
            failure = self._variable_failure(name, variable, failures)
            if failure is not None:
                failures[name] = failure
        if not failures:
            if cut_short:
                return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True)
            return self._keyed(compiled, None, outcome)
        budget, self.budget = self.budget, None
        try:
            explained, _ = self._evaluate(compiled, failures)
        finally:
            self.budget = budget
        return explained if cut_short or isinstance(explained, EvalError) else outcome

    def _variable_failure(self, name: str, variable: Any, earlier: Mapping[str, str]) -> str | None:
        if self._variable_failures is None:
            self._variable_failures = {}
        if name in self._variable_failures:
            return self._variable_failures[name]
        if isinstance(variable, CompileError):
            failure: str | None = f'composited variable "{name}" fails to compile: {variable.message}'
        else:
            outcome, run = self._evaluate(variable, earlier)
            if variable.declaration_index in run.exceeded:
                failure = f'composited variable "{name}" fails to evaluate: {COST_LIMIT_MESSAGE}'
            elif isinstance(outcome, EvalError):
                failure = f'composited variable "{name}" fails to evaluate: {outcome.message}'
            else:
                failure = None
        self._variable_failures[name] = failure
        return failure


def _joined(before: Any, part: Any) -> Any:
    if isinstance(before, dict) and isinstance(part, dict):
        return {**before, **part}
    return [*before, *part]


_OPTIONAL_MESSAGE = "expression returned an optional value, which has no JSON form"


class _OptionalValue(Exception):
    pass


def to_python(result: Any, result_type: str = "dyn") -> Any:
    """The Python value of an engine result, or an EvalError.

    ``plain_value()`` crashes the process on a map holding an optional value, so results whose type
    could hold one are taken apart one level at a time; the others convert in one native call.
    """
    kind = result.type()
    if kind == cel.Type.ERROR:
        try:
            text = result.value()
        except TypeError:
            # Optional values report the ERROR kind, and their value() refuses to convert.
            return EvalError(_OPTIONAL_MESSAGE)
        return EvalError(runtime_error(str(text)))
    if "optional" not in result_type and "dyn" not in result_type:
        return result.plain_value()
    try:
        return _walk(result)
    except _OptionalValue:
        return EvalError(_OPTIONAL_MESSAGE)


def _walk(value: Any) -> Any:
    kind = value.type()
    if kind == cel.Type.ERROR:
        raise _OptionalValue()
    name = kind.name()
    if name.startswith("LIST"):
        return [_walk(item) for item in value.value()]
    if name.startswith("MAP"):
        return {key: _walk(item) for key, item in value.value().items()}
    return value.plain_value()
