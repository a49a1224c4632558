"""Kubernetes' admission CEL environment on cel-expr-python.

``compile_expression`` is what the manifest validator and the snapshot use; evaluation goes through a
per-request ``EvaluationContext`` from ``CelEnvironment.new_context``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from staticadm.cel.environment import (
    ADMISSION_VARIABLES,
    CelEnvironment,
    CompiledExpression,
    CompileError,
    ExpressionKind,
    build_environment,
)
from staticadm.cel.evaluation import BUDGET_EXHAUSTED_MESSAGE, COST_LIMIT_MESSAGE, EvalError, EvaluationContext
from staticadm.cel.libraries.authz import make_authorizer, make_request_resource


def admission_environment(mutating: bool = False) -> CelEnvironment:
    """The shared, immutable environment; building one registers every library with the engine.

    Programs only run in a context of the environment that compiled them, so every caller must get the
    same instance: the cache is keyed on the normalised flag, not on how the caller spelled it.
    """
    return _environment(bool(mutating))


@cache
def _environment(mutating: bool) -> CelEnvironment:
    return build_environment(mutating=mutating)


def compile_expression(
    source: str, kind: ExpressionKind, *, variable_names: Sequence[str] | None = (),
    variable_types: Mapping[str, str] | None = None, mutating: bool = False
) -> CompiledExpression | CompileError:
    """Compiles as Kubernetes would. Not remembered here: the loader keeps the programs of the documents
    that did not change from one load to the next (and only those), so memory follows the directory
    being served, not every expression ever seen."""
    names = None if variable_names is None else tuple(variable_names)
    return admission_environment(bool(mutating)).compile(source, kind, variable_names=names,
                                                         variable_types=dict(variable_types or {}))


__all__ = [
    "ADMISSION_VARIABLES",
    "BUDGET_EXHAUSTED_MESSAGE",
    "COST_LIMIT_MESSAGE",
    "CelEnvironment",
    "CompileError",
    "CompiledExpression",
    "EvalError",
    "EvaluationContext",
    "ExpressionKind",
    "admission_environment",
    "compile_expression",
    "evaluate_standalone",
]


def evaluate_standalone(source: str, variables: Mapping[str, Any] | None = None, *, mutating: bool = False) -> Any:
    """Compiles and evaluates one expression with the given variable values (the playground and the
    conformance runner). Returns the Python value, a ``CompileError`` or an ``EvalError``."""
    environment = admission_environment(mutating)
    compiled = environment.compile(source, ExpressionKind.STANDALONE, variable_names=None)
    if isinstance(compiled, CompileError):
        return compiled
    data = dict(variables or {})
    # Authorization checks compile and fail at evaluation, as with no authorizer configured.
    data.setdefault("authorizer", make_authorizer())
    data.setdefault("authorizer.requestResource", make_request_resource("", "", "", "", ""))
    return compiled.evaluate(environment.new_context(data))
