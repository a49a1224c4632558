"""CEL micro-benchmark: activation build and per-expression evaluation with a prebuilt activation.

Run: python -m bench.cel_micro
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from bench.fixtures import pod_create_request
from staticadm.cel import CompileError, EvalError, ExpressionKind, admission_environment

TYPICAL_EXPRESSIONS = {
    "field compare": "object.spec.serviceAccountName != 'default'",
    "all containers": "object.spec.containers.all(c, !has(c.securityContext) || "
                      "!has(c.securityContext.privileged) || c.securityContext.privileged == false)",
    "labels has": "has(object.metadata.labels) && 'app' in object.metadata.labels",
    "image tag": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
    "limits exist": "object.spec.containers.all(c, has(c.resources.limits) && 'memory' in c.resources.limits)",
    "quantity": "object.spec.containers.all(c, quantity(c.resources.limits.memory)"
                ".isLessThan(quantity('1Gi')))",
    "request user": "request.userInfo.username.startsWith('system:serviceaccount:')",
    # Issue 14: ~30 s per evaluation on a backtracking matcher; linear (RE2) as in Go.
    "find nested *": "'" + "a" * 31 + "!'.find('^(\\\\w+\\\\s?)*$') == ''",
}


def _median_microseconds(run: Callable[[], object], repeat: int = 2000) -> float:
    for _ in range(200):
        run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        run()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def measure(repeat: int = 2000) -> dict[str, float]:
    """Median microseconds per measurement; ``repeat`` lower for smoke runs."""
    environment = admission_environment()
    request = pod_create_request()["request"]
    data = {"object": request["object"], "oldObject": None, "request": request, "namespaceObject": None}
    figures = {"activation build": _median_microseconds(lambda: environment.new_context(data), repeat)}
    context = environment.new_context(data, budget=None)
    for label, source in TYPICAL_EXPRESSIONS.items():
        compiled = environment.compile(source, ExpressionKind.VALIDATION)
        if isinstance(compiled, CompileError):
            raise SystemExit(f"{label}: {compiled.message}")
        outcome = compiled.evaluate(context)
        if isinstance(outcome, EvalError) or outcome is not True:
            raise SystemExit(f"{label}: unexpected result {outcome!r}")
        figures[label] = _median_microseconds(lambda compiled=compiled: compiled.evaluate(context), repeat)
    return figures


def main() -> None:
    figures = measure()
    print(f"{'measurement':<20} {'median µs':>10}")
    for label, value in figures.items():
        print(f"{label:<20} {value:>10.2f}")
    print(json.dumps({"median_us": figures}))


if __name__ == "__main__":
    main()
