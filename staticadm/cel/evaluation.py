"""Evaluating compiled expressions: one activation per request, lazy variables, a runaway budget."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cel_expr_python import cel

from staticadm.cel import messages

if TYPE_CHECKING:
    from staticadm.cel.environment import CompiledExpression

#: Kubernetes' per-expression cost limit is 1,000,000; every loop iteration costs at least 1.
PER_EXPRESSION_ITERATION_LIMIT = 1_000_000
#: Wall-clock bound for all CEL work of one request, so no manifest can hold a request for long.
DEFAULT_REQUEST_CPU_BUDGET_SECONDS = 0.1
_DEADLINE_CHECK_INTERVAL = 256
COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z_]+\]$")


class CostLimitExceeded(Exception):
    def __init__(self) -> None:
        super().__init__(COST_LIMIT_MESSAGE)


@dataclass(frozen=True, slots=True)
class EvalError:
    """A runtime error as a value; ``cost_exceeded`` marks the budget case Kubernetes reports apart."""

    message: str
    cost_exceeded: bool = False


def engine_error_text(raw: str) -> str:
    """Strips the absl status code the engine puts around error texts."""
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))


def _runtime_error(raw: str) -> str:
    """An evaluation error in cel-go's words (what kube-apiserver reports)."""
    return messages.runtime_error_text(engine_error_text(raw))


class EvaluationState:
    """Thread-local pointer to the request being evaluated, for the engine's callbacks.

    The engine calls our Python functions without passing any context, so the budget and the lazy
    variables find the current request here; a thread evaluates one request at a time.
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

    def tick(self) -> bool:
        return self.current.tick()

    def variable(self, name: str) -> Any:
        return self.current.variable_value(name)


class EvaluationContext:
    """Everything one request's expressions share: the activation, variable values and the budget."""

    def __init__(
        self,
        engine_env: cel.Env,
        state: EvaluationState,
        data: Mapping[str, Any],
        variables: Mapping[str, CompiledExpression] | None = None,
        budget_seconds: float | None = DEFAULT_REQUEST_CPU_BUDGET_SECONDS,
        activation: Any = None,
        request_deadline: float | None = None,
    ) -> None:
        self._state = state
        # The engine converts a variable's Python value on its first use in an activation (~100 µs for a
        # 5 KB Pod, then ~0.1 µs), so contexts of one request share one activation when they can.
        self.activation = activation if activation is not None else engine_env.Activation(data=dict(data))
        self._variables = variables or {}
        self._variable_values: dict[str, Any] = {}
        self._deadline = None if budget_seconds is None else time.perf_counter() + budget_seconds
        if request_deadline is not None:
            # Every context of a request also stops at the request's own deadline (``time.perf_counter``).
            self._deadline = request_deadline if self._deadline is None else min(self._deadline, request_deadline)
        self._iterations = 0
        self.cost_exceeded = False

    def tick(self) -> bool:
        self._iterations += 1
        if self.cost_exceeded or self._iterations > PER_EXPRESSION_ITERATION_LIMIT:
            self.cost_exceeded = True
            raise CostLimitExceeded()
        if (
            self._deadline is not None
            and self._iterations % _DEADLINE_CHECK_INTERVAL == 0
            and time.perf_counter() > self._deadline
        ):
            self.cost_exceeded = True
            raise CostLimitExceeded()
        return True

    def variable_value(self, name: str) -> Any:
        if name not in self._variable_values:
            compiled = self._variables.get(name)
            if compiled is None:
                self._variable_values[name] = EvalError(f'composited variable "{name}" is not defined')
            else:
                # A variable's iterations count against the expression that first forces it, as in Kubernetes.
                outcome = compiled.evaluate(self, nested=True)
                if isinstance(outcome, EvalError):
                    outcome = EvalError(
                        f'composited variable "{name}" fails to evaluate: {outcome.message}', outcome.cost_exceeded
                    )
                self._variable_values[name] = outcome
        value = self._variable_values[name]
        if isinstance(value, EvalError):
            if value.cost_exceeded:
                raise CostLimitExceeded()
            raise ValueError(value.message)
        return value

    def run(self, program: Any, *, nested: bool = False) -> Any:
        """Evaluates one program; returns its Python value or an EvalError, never raises."""
        previous = self._state.enter(self)
        saved_iterations = self._iterations
        if not nested:
            self._iterations = 0
        try:
            if self.cost_exceeded and not nested:
                return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True)
            result = program.eval(self.activation)
            if self.cost_exceeded:
                return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True)
            return _python_value(result)
        except Exception as error:  # the engine raises for some internal failures; never let them escape
            if self.cost_exceeded:
                return EvalError(COST_LIMIT_MESSAGE, cost_exceeded=True)
            return EvalError(_runtime_error(str(error)))
        finally:
            if nested:
                self._iterations = max(self._iterations, saved_iterations)
            self._state.leave(previous)


def _python_value(result: Any) -> Any:
    kind = result.type().name()
    if kind == "ERROR":
        try:
            text = result.value()
        except Exception:
            # Optional values report the ERROR kind and cannot cross into Python.
            return EvalError("expression returned an optional value, which has no JSON form")
        return EvalError(_runtime_error(str(text)))
    return result.plain_value()
