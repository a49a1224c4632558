"""How many examples a property test draws: its whole budget in CI (``--slow``), a third of it in the quick run.

The quick run (the README's first test command) is the check before each commit and should stay within a few
minutes on two cores; the equivalence properties (one engine call against the straightforward evaluation, kept
answers against evaluating again, the YAML and patch round trips) spent about a quarter of its CPU drawing and
compiling hundreds of policy sets. CI, which every change passes before it lands, draws each test's whole
budget; ``STATICADM_FULL_EXAMPLES=1`` does so in the quick run too.
"""

from __future__ import annotations

import os

#: Set by tests/conftest.py's pytest_configure, before any test module is imported.
FULL_BUDGET = True

#: The fewest examples a property draws in the quick run.
QUICK_FLOOR = 20


def examples(budget: int) -> int:
    if FULL_BUDGET or os.environ.get("STATICADM_FULL_EXAMPLES", "") not in ("", "0"):
        return budget
    return min(budget, max(QUICK_FLOOR, budget // 3))
