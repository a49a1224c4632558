"""Manifest files as kube-apiserver's loader decodes them (sigs.k8s.io/yaml: go-yaml v2 under strict decoding, then
JSON), found by issue 44's red-team round 4: merge keys under strict decoding, keys that only meet as JSON strings,
go-yaml's alias ratio.

Every expectation is kube-apiserver's, as its own loader answers it (``../shared/oracle``):
``tests/differential/test_known_classes.py`` loads each file with the oracle too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from staticadm.manifests.loader import load_manifest_directory

_HEAD = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: a.static.k8s.io
"""
_RULE = '{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: %s}'


def _rules(anchored: int, aliases: int) -> str:
    resources = "&res [" + ", ".join(f"r{index}" for index in range(anchored)) + "]"
    lines = [f"    - {_RULE % resources}"] + [f"    - {_RULE % '*res'}"] * aliases
    return (_HEAD + "spec:\n  matchConstraints:\n    resourceRules:\n" + "\n".join(lines)
            + '\n  validations:\n  - {expression: "true"}\n')


def _laughs(levels: int, width: int) -> str:
    lines = [f"    a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"    a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]" for level in range(1, levels)]
    return _HEAD + "  annotations:\n" + "\n".join(lines) + "\n"


_SPEC = """spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
"""

#: (name, file text, kube-apiserver's answer: None when it loads, else a text its refusal holds).
CASES: list[tuple[str, str, str | None]] = [
    ("merge over an explicit key", _HEAD + _SPEC + '  validations:\n  - &v {expression: "true", message: m1}\n'
     '  - <<: *v\n    message: m2\n', 'line 11: key "message" already set in map'),
    ("two merged maps sharing a key", _HEAD + _SPEC + '  validations:\n  - &e {expression: "true"}\n'
     '  - <<: [*e, {expression: "false"}]\n', 'line 9: key "expression" already set in map'),
    ("a merge without overlap", _HEAD + _SPEC + '  validations:\n  - &e {expression: "true"}\n'
     "  - <<: *e\n    message: m\n", None),
    ("keys that meet only as JSON strings",
     _HEAD.replace("  name:", '  labels: {y: "1", "true": "1", 1: "1", "1": "1"}\n  name:') + _SPEC
     + '  validations:\n  - {expression: "true"}\n', None),
    ("an explicit key set twice", _HEAD + _SPEC + '  validations:\n  - {expression: "true", expression: "false"}\n',
     'key "expression" already set in map'),
    ("301 resources aliased by 80 rules", _rules(301, 79), None),
    # Decoded as YAML, then refused as an object: annotations are strings.
    ("just under go-yaml's alias ratio", _laughs(3, 17), "cannot unmarshal array into"),
    ("just over go-yaml's alias ratio", _laughs(3, 19), "document contains excessive aliasing"),
    ("a bomb", _laughs(9, 10), "document contains excessive aliasing"),
]


def write_case(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(text)
    return directory


@pytest.mark.parametrize(("name", "text", "expected"), CASES, ids=[case[0] for case in CASES])
def test_loaded_as_kube_apiserver_loads(tmp_path: Path, name: str, text: str, expected: str | None) -> None:
    loaded = load_manifest_directory(str(write_case(tmp_path, text)))
    errors = "; ".join(str(error) for error in loaded.errors)
    if expected is None:
        assert not errors, f"{name}: {errors}"
    else:
        assert expected in errors, f"{name}: expected a refusal holding {expected!r}, got {errors or 'a load'}"
