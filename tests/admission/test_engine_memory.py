"""What the CEL engine keeps of a request once it is answered.

cel-expr-python 0.1.3 never frees the argument tuple of a call into Python (docs/known-gaps.md), so
staticadm's own calls into Python on the evaluation path take no arguments: loop ticks (of the
expression and of each variable) and the guard of loops that build lists. A daemon evaluating a policy
set like the benchmark's then stays the same size however many requests it answers.
"""

from __future__ import annotations

import copy
import gc
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.validating.dispatcher import evaluate_validating
from tests.admission.helpers import DEPLOYMENT, binding, parsed, policy, review, snapshot

#: Loops in a variable (ticks naming the variable) and in the expression, lists built by ``map`` and
#: ``filter`` (the guard that sends long ones to stepped evaluation), nested loops.
LOOPING_VALIDATIONS = (
    {"expression": "variables.images.all(image, image.startsWith('registry.example.com/'))"},
    {"expression": "object.spec.containers.map(c, c.name).all(name, name != '')"},
    {"expression": "variables.ports.filter(p, p > 0).size() == size(variables.ports)"},
    {"expression": "object.spec.containers.all(c, c.env.all(e, e.name != 'SECRET'))"},
)


def _retained_bytes_per_request(validations: list[dict[str, Any]]) -> float:
    """Bytes still allocated per request answered, from the growth between 500 and 2000 requests (what a
    process keeps once, caches and allocator pools, does not count)."""
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["containers"] = [
        {"name": f"app-{index}", "image": f"registry.example.com/app-{index}:v1", "ports": [{"containerPort": 80}],
         "env": [{"name": f"VAR_{item}", "value": "x"} for item in range(4)]} for index in range(3)]
    spec = {
        "variables": [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                      {"name": "ports", "expression": "object.spec.containers.map(c, c.ports.map(p, p.containerPort))"
                                                      ".map(ports, ports[0])"}],
        "validations": validations,
    }
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), policy("p.static.k8s.io", **spec),
                        binding("b.static.k8s.io", "p.static.k8s.io", ("Deny",)))
    namespaces = RequestOnlyNamespaces()
    body = review(obj=obj)

    def answer(count: int) -> int:
        for _ in range(count):
            outcome = evaluate_validating(snap, namespaces, parsed(body))
            assert outcome.allowed, outcome.status
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        after_first = answer(500)
        return (answer(1500) - after_first) / 1500
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("validation", LOOPING_VALIDATIONS, ids=lambda v: v["expression"][:40])
def test_loops_in_expressions_and_variables_leave_nothing_in_the_engine(validation: dict[str, Any]) -> None:
    # Before the ticks of a variable's loops, heavy iterations and the list-building guard took no arguments,
    # these kept 48-56 bytes per call: 50-800 bytes per request here. One such call per request is 48 bytes;
    # what the engine's own pools hold fluctuates by a few bytes per request.
    assert _retained_bytes_per_request([validation]) < 24
