"""The request is handed across module boundaries a bounded number of times on its way through validating admission.

``tools/trace_request_path.py`` follows the parsed request from the daemon's validating entry with
``sys.setprofile``; each later stage reads what an earlier one built (the request's original kind and resource
resolved at parse time, the namespace object from the request's one match view) instead of re-deriving it from the
raw request. On main before the stages were regrouped the same trace counted 45 calls cold and 19 warm.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MAX_CALLS = 30

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "trace_request_path.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trace_request_path", _TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_request_crosses_at_most_30_module_boundaries(tmp_path: Path) -> None:
    cold, warm = _tool().trace_validating(tmp_path)
    for trace in (cold, warm):
        # The trace saw the request go through the stages (a trace that counts nothing proves nothing).
        assert "staticadm.admission.validating.dispatcher" in trace.modules, trace.calls
        assert "staticadm.admission.matching.plan" in trace.modules, trace.calls
        assert trace.count <= MAX_CALLS, trace.calls
    # The first request of a snapshot matches each candidate through its plan; later ones of its shape do not.
    assert warm.count < cold.count


def test_a_call_handing_the_request_over_is_counted() -> None:
    tool = _tool()
    from staticadm.admission.request import describe_subject
    from tests.admission.helpers import parsed, review

    request = parsed(review())
    found = tool.trace(lambda given: describe_subject(given), request, request)
    assert found.calls == (f"{__name__} -> staticadm.admission.request.describe_subject",)
    assert found.count == 1
