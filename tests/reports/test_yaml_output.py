"""The reports' YAML writer (``yamltext.dump_json_data_as_yaml``): any JSON data reads back as itself, under
PyYAML (YAML 1.1, as go-yaml v2 and kubectl read it)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from staticadm.yamltext import dump_json_data_as_yaml, dump_yaml
from tests.examples import examples

_SCALARS = (st.none() | st.booleans() | st.integers() | st.text()
            | st.floats(allow_nan=False) | st.sampled_from(["yes", "No", "ON", "null", "~", "1e3", "0x1F", "1_000",
                                                            "2026-05-01", "-", "- a", "a: b", "#x", "&a", "*a", "!t",
                                                            "'q'", '"q"', " lead", "trail ", "\u2028", "\x85", "\ufeff",
                                                            "", ".inf", "<<", "=", "a\nb", "%x", "@x", "`x", "|", ">"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text() | st.sampled_from(["y", "n", "1", "a.b/c"]), inner, max_size=4),
                     max_leaves=30)


@settings(max_examples=examples(400), deadline=None)
@given(st.dictionaries(st.text(), _JSON, min_size=1, max_size=5))
def test_any_json_data_reads_back_as_itself(value: dict[str, Any]) -> None:
    assert yaml.safe_load(dump_json_data_as_yaml(value)) == value


def test_a_report_reads_as_pyyaml_writes_it() -> None:
    report = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"name": "staticadm", "labels": {"app.kubernetes.io/managed-by": "staticadm"}},
              "results": [{"policy": "p", "resources": [{"kind": "Pod", "name": "a"}], "properties": {},
                           "scored": True, "timestamp": {"seconds": 1, "nanos": 0}}],
              "summary": {"pass": 1, "fail": 0}}
    assert yaml.safe_load(dump_json_data_as_yaml(report)) == yaml.safe_load(dump_yaml(report)) == report
    assert dump_json_data_as_yaml(report) == dump_yaml(report)  # the same text, where no string needs quotes
