"""Directory rules, documents, strict decoding, Lists, hashing and limits, with real files."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import yaml

from staticadm.cel import CompiledExpression
from staticadm.cli import main
from staticadm.manifests.check import run_check
from tests.manifests.conftest import (
    MAP,
    MAPB,
    V1,
    VAP,
    VAPB,
    find,
    load,
    obj,
    structural_errors,
    write_json,
    write_yaml,
)


def test_files_selected_and_hashed_in_name_order(tmp_path: Path) -> None:
    write_yaml(tmp_path, "b.YML", VAPB)
    write_yaml(tmp_path, "a.yaml", VAP)
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not: [yaml")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.yaml").write_text("garbage: [")
    result = load(tmp_path)
    assert structural_errors(result) == []
    expected = hashlib.sha256(
        (tmp_path / "a.yaml").read_bytes() + b"\0" + (tmp_path / "b.YML").read_bytes() + b"\0"
    ).hexdigest()
    assert result.content_hash == f"sha256:{expected}"
    assert [p.name for p in result.validating_policies] == ["p.static.k8s.io"]
    assert result.validating_policies[0].origin.path == str(tmp_path / "a.yaml")


def test_empty_directory_has_empty_hash(tmp_path: Path) -> None:
    result = load(tmp_path)
    assert result.ok and result.content_hash == ""


def test_configmap_symlink_layout(tmp_path: Path) -> None:
    data = tmp_path / "..2024_01_01_00_00_00.1"
    data.mkdir()
    write_yaml(data, "policy.yaml", VAP, VAPB)
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "policy.yaml").symlink_to("..data/policy.yaml")
    result = load(tmp_path)
    assert structural_errors(result) == []
    assert [b.name for b in result.validating_bindings] == ["b.static.k8s.io"]


def test_missing_directory_is_an_error_not_an_exception(tmp_path: Path) -> None:
    result = load(tmp_path / "nope")
    assert not result.ok and "failed to read manifest directory" in result.errors[0].message


def test_size_limit(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "a.yaml", VAP)
    result = load(tmp_path, max_file_bytes=10)
    assert result.errors[0].path == str(path)
    assert "larger than the limit of 10 bytes" in result.errors[0].message


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        refs = ",".join([f"*{chr(96 + i)}"] * 10)
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [{refs}]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    result = load(tmp_path)
    assert len(result.errors) == 1
    assert result.errors[0].document == 0
    assert "alias" in result.errors[0].message


def test_duplicate_keys_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: List\nkind: List\n")
    (tmp_path / "b.json").write_text('{"apiVersion": "v1", "apiVersion": "v1"}')
    result = load(tmp_path)
    messages = [e.message for e in result.errors]
    assert any('line 3: key "kind" already set in map' in m for m in messages)
    assert any('duplicate field "apiVersion"' in m for m in messages)


def test_unknown_and_mistyped_fields_have_paths(tmp_path: Path) -> None:
    doc = obj(VAP, spec__validation=[], metadata__labels={"a": True}, spec__failurePolicy=3)
    path = write_yaml(tmp_path, "a.yaml", doc)
    result = load(tmp_path)
    unknown = find(result, "spec.validation", 'unknown field "spec.validation"')
    assert unknown.path == str(path) and unknown.name == "p.static.k8s.io"
    find(result, "metadata.labels[a]", "cannot unmarshal bool")
    find(result, "spec.failurePolicy", "cannot unmarshal number")


def test_field_names_are_case_sensitive(tmp_path: Path) -> None:
    write_yaml(tmp_path, "a.yaml", obj(VAP, spec__FailurePolicy="Fail"))
    find(load(tmp_path), "spec.FailurePolicy", "unknown field")


def test_v1_list_and_typed_lists(tmp_path: Path) -> None:
    write_json(
        tmp_path,
        "a.json",
        {"apiVersion": "v1", "kind": "List", "items": [VAP, {"apiVersion": "v1", "kind": "List", "items": [VAPB]}]},
    )
    write_yaml(
        tmp_path,
        "b.yaml",
        {"apiVersion": V1, "kind": "MutatingAdmissionPolicyList", "items": [MAP]},
        {"apiVersion": V1, "kind": "MutatingAdmissionPolicyBindingList", "metadata": {}, "items": [MAPB]},
    )
    result = load(tmp_path)
    assert structural_errors(result) == []
    assert result.validating_bindings[0].origin.items == (1, 0)
    assert result.mutating_bindings[0].origin.document == 1
    assert result.mutating_bindings[0].origin.items == (0,)


def test_list_item_errors_name_the_item(tmp_path: Path) -> None:
    bad = obj(VAP, spec__failurePolicy="Nope")
    write_json(tmp_path, "a.json", {"apiVersion": "v1", "kind": "List", "items": [VAPB, bad]})
    error = find(load(tmp_path), "spec.failurePolicy")
    assert error.items == (1,)
    assert "item 1" in str(error)


def test_unsupported_types(tmp_path: Path) -> None:
    write_yaml(
        tmp_path,
        "a.yaml",
        obj(VAP, apiVersion="admissionregistration.k8s.io/v1beta1"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        {"kind": "ValidatingAdmissionPolicy"},
    )
    (tmp_path / "b.yaml").write_text("# only a comment\n")
    result = load(tmp_path)
    messages = [str(e) for e in result.errors]
    assert any("unsupported resource type admissionregistration.k8s.io/v1beta1" in m for m in messages)
    assert any("unsupported resource type v1, Kind=ConfigMap" in m for m in messages)
    assert any("Object 'apiVersion' is missing" in m for m in messages)
    assert any("b.yaml" in m and "Object 'Kind' is missing" in m for m in messages)


def test_bad_separator(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("a: 1\n--- b: 2\n")
    assert "invalid Yaml document separator: b: 2" in load(tmp_path).errors[0].message


def test_defaults_applied(tmp_path: Path) -> None:
    write_yaml(tmp_path, "a.yaml", VAP, obj(VAPB, spec__matchResources={}), MAP, MAPB)
    result = load(tmp_path)
    policy = result.validating_policies[0]
    assert policy.spec.failure_policy == "Fail"
    constraints = policy.spec.match_constraints
    assert constraints is not None and constraints.match_policy == "Equivalent"
    assert constraints.namespace_selector is not None and constraints.namespace_selector.is_empty
    assert constraints.resource_rules[0].scope == "*"
    assert result.validating_bindings[0].spec.match_resources is not None
    assert result.mutating_bindings[0].spec.match_resources is None


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    write_yaml(tmp_path, "a.yaml", obj(VAP, spec__failurePolicy="X", metadata__namespace="ns"))
    write_yaml(tmp_path, "b.yaml", obj(VAPB, spec__validationActions=[]), obj(VAPB, metadata__name="b.static.k8s.io"))
    (tmp_path / "c.yaml").write_text("key: [unclosed\n")
    result = load(tmp_path)
    find(result, "spec.failurePolicy")
    find(result, "metadata.namespace")
    find(result, "spec.validationActions")
    find(result, "metadata.name", 'duplicate name "b.static.k8s.io"')
    assert any(e.path.endswith("c.yaml") and "invalid YAML" in e.message for e in result.errors)


def test_duplicate_names_are_per_kind(tmp_path: Path) -> None:
    write_yaml(tmp_path, "a.yaml", VAP, obj(VAPB, metadata__name="p.static.k8s.io"))
    write_yaml(tmp_path, "b.yaml", VAP)
    error = find(load(tmp_path), "metadata.name", "duplicate name")
    assert error.path.endswith("b.yaml") and f'previously seen in "{tmp_path / "a.yaml"}"' in error.message


def test_valid_directory_compiles_everything(tmp_path: Path) -> None:
    policy = obj(
        VAP,
        spec__variables=[{"name": "r", "expression": "object.spec.replicas"}],
        spec__validations=[
            {"expression": "variables.r <= 5", "messageExpression": "'replicas: ' + string(variables.r)"}
        ],
        spec__auditAnnotations=[{"key": "high", "valueExpression": "variables.r > 3 ? 'yes' : 'no'"}],
    )
    write_yaml(tmp_path, "a.yaml", policy, VAPB)
    result = load(tmp_path)
    assert result.errors == ()
    (compiled,) = result.compiled_validating
    assert compiled.policy is result.validating_policies[0] and compiled.bindings == ()
    assert isinstance(compiled.variables["r"], CompiledExpression)
    (validation,) = compiled.validations
    assert isinstance(validation.expression, CompiledExpression)
    assert isinstance(validation.message_expression, CompiledExpression)
    assert isinstance(compiled.audit_annotations[0][1], CompiledExpression)
    assert result.compiled_mutating == ()


def test_cel_errors_reported_with_paths(tmp_path: Path) -> None:
    policy = obj(
        VAP,
        spec__variables=[{"name": "a", "expression": "variables.b"}, {"name": "b", "expression": "1"}],
        spec__validations=[{"expression": "'not a bool'"}],
        spec__matchConditions=[{"name": "c", "expression": "variables.b == 1"}],
    )
    write_yaml(tmp_path, "a.yaml", policy, VAPB)
    result = load(tmp_path)
    find(result, "spec.variables[0].expression")
    find(result, "spec.validations[0].expression")
    find(result, "spec.matchConditions[0].expression")


def test_check_exit_codes_and_json(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    write_yaml(good, "a.yaml", VAP, obj(VAP, metadata__name="lonely.static.k8s.io"), VAPB)
    bad = tmp_path / "bad"
    bad.mkdir()
    write_yaml(bad, "a.yaml", obj(VAPB, spec__validationActions=[]))
    out, err = io.StringIO(), io.StringIO()
    code = run_check([str(bad)], "json", out, err)
    assert code == 1
    report = json.loads(out.getvalue())
    assert report["valid"] is False
    fields = [e["field"] for e in report["directories"][0]["errors"]]
    assert "spec.validationActions" in fields

    out = io.StringIO()
    code = run_check([str(good)], "json", out, err)
    report = json.loads(out.getvalue())
    warnings = [w["message"] for w in report["directories"][0]["warnings"]]
    assert any("has no binding" in w for w in warnings)
    if code == 0:
        assert report["valid"] is True
    text = io.StringIO()
    run_check([str(good), str(bad)], "text", text, err)
    assert "INVALID" in text.getvalue() and "no binding" in text.getvalue()


def test_check_warnings(tmp_path: Path) -> None:
    binding = obj(
        VAPB,
        spec__matchResources={
            "namespaceSelector": {"matchLabels": {"team": "a"}},
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
            ],
        },
    )
    path = write_yaml(tmp_path, "a.yaml", VAP, binding)
    os.chmod(path, 0o666)
    out = io.StringIO()
    # As a daemon that loads world-writable manifests would: one that does not refuses them (test_check_refusals).
    run_check([str(tmp_path)], "json", out, io.StringIO(), allow_world_writable=True)
    warnings = json.loads(out.getvalue())["directories"][0]["warnings"]
    messages = " | ".join(w["message"] for w in warnings)
    assert "cannot intersect" in messages
    assert "team" in messages
    assert "world-writable" in messages


def test_check_warns_about_policies_that_need_cluster_data(tmp_path: Path) -> None:
    reads_cluster = obj(VAP, spec__validations=[
        {"expression": "namespaceObject.metadata.labels['tier'] == 'prod'"},
        {"expression": "authorizer.group('').resource('secrets').check('get').allowed()"}])
    path = write_yaml(tmp_path, "a.yaml", reads_cluster, VAPB)
    out = io.StringIO()
    run_check([str(tmp_path)], "json", out, io.StringIO())
    warnings = json.loads(out.getvalue())["directories"][0]["warnings"]
    cluster = [w for w in warnings if "namespaceObject" in w["message"]]
    assert len(cluster) == 1
    warning = cluster[0]
    assert warning["file"] == str(path) and warning["kind"] == "ValidatingAdmissionPolicy"
    assert f"bound by {VAPB['metadata']['name']}" in warning["message"]
    assert "authorizer checks (SubjectAccessReview, with serve --kubeconfig)" in warning["message"]
    assert "--kubeconfig" in warning["message"] and "failurePolicy decides" in warning["message"]


def test_a_yaml_error_names_the_file_and_place_without_follow_on_errors(tmp_path: Path) -> None:
    broken = tmp_path / "policy.yaml"
    broken.write_text("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
                      "metadata:\n  name: p.static.k8s.io\n  labels: [a\nspec: {}\n---\n"
                      "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n"
                      "metadata: {name: b.static.k8s.io}\n"
                      "spec: {policyName: p.static.k8s.io, validationActions: [Deny]}\n")
    out = io.StringIO()
    assert run_check([str(tmp_path)], "json", out, io.StringIO()) == 1
    errors = json.loads(out.getvalue())["directories"][0]["errors"]
    assert len(errors) == 1, errors  # not also "binding references policy ... which does not exist"
    message = errors[0]["message"]
    assert str(broken) in message and "<unicode string>" not in message
    assert "line 6, column 5: did not find expected ',' or ']' (while parsing a flow sequence at line 5" in message


def test_check_takes_files_the_manifests_flag_and_prints_yaml(tmp_path: Path) -> None:
    policy = write_yaml(tmp_path, "policy.yaml", VAP)
    binding = write_yaml(tmp_path, "binding.yaml", VAPB)
    out = io.StringIO()
    assert main(["check", "-f", str(policy), "-f", str(binding), "-o", "yaml"], stdout=out,
                stderr=io.StringIO()) == 0
    report = yaml.safe_load(out.getvalue())
    assert report["valid"] is True and report["directories"][0]["warnings"] == []
    out = io.StringIO()
    # A policy alone: its binding is missing, which is a warning, not an error.
    assert main(["check", "-f", str(policy)], stdout=out, stderr=io.StringIO()) == 0
    assert "policy has no binding" in out.getvalue()
    assert main(["check", "--manifests", str(tmp_path)], stdout=io.StringIO(), stderr=io.StringIO()) == 0
    err = io.StringIO()
    assert main(["check"], stdout=io.StringIO(), stderr=err) == 2 and "give a manifest directory" in err.getvalue()


def test_manifests_resolve_scalars_as_kube_apiserver_reads_them(tmp_path: Path) -> None:
    # go-yaml v2 (sigs.k8s.io/yaml): "1:30" is text, not 90; a label key written y is the key "true".
    (tmp_path / "a.yaml").write_text(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
        "metadata: {name: p.static.k8s.io}\nspec:\n  matchConstraints:\n    resourceRules:\n"
        "    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}\n"
        "  validations:\n  - {expression: 'false', message: 1:30}\n---\n"
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n"
        "metadata: {name: b.static.k8s.io}\nspec:\n  policyName: p.static.k8s.io\n  validationActions: [Deny]\n"
        "  matchResources:\n    objectSelector:\n      matchLabels: {y: '1'}\n")
    result = load(tmp_path)
    assert not result.errors
    assert result.validating_policies[0].spec.validations[0].message == "1:30"
    selector = result.validating_bindings[0].spec.match_resources.object_selector  # type: ignore[union-attr]
    assert selector is not None and dict(selector.match_labels) == {"true": "1"}
