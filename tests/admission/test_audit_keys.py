"""Audit annotation keys reach kube-apiserver's audit log through the webhook.

kube-apiserver records a webhook's key ``k`` as ``<webhook name>/k`` and drops it unless that passes
``checkKeyFormat`` (``tests/kube_audit.py``); the in-process keys (``<policy>/<key>``,
``validation.policy.admission.k8s.io/validation_failure``) have a "/" of their own and never would.
"""

from __future__ import annotations

import io
import random
import string
from pathlib import Path

import yaml

from staticadm.admission.endpoints import validate
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.response import VALIDATION_FAILURE_ANNOTATION, webhook_audit_key
from staticadm.deploy.webhooks import VALIDATING_WEBHOOK
from staticadm.offline.review import run_review
from tests.admission.helpers import binding, evaluate, parsed, policy, review, snapshot
from tests.kube_audit import recorded_key_problems

LONGEST_STEM = "x" * 59 + "." + "y" * 63 + "." + "z" * 63 + "." + "w" * 52  # 239: 253 with the suffix


def _in_process_keys() -> list[str]:
    """Policy names and keys as the loader lets them through, chosen to meet if a mapping can meet."""
    stems = ["a", "a.b", "a-b", "ab", "a.b.c", "deny", "deny-privileged", "validation", "x" * 46, "x" * 47,
             "x" * 61, LONGEST_STEM, LONGEST_STEM[:-1] + "v", "0", "9-9"]
    names = ["k", "K", "k_x", "k__x", "b_c", "c", "b.c", "failure", "validation_failure", "Z" * 63, "Z" * 62 + "Y",
             "z" * 16, "k" * 44 + "_0123456789abcdef", "a__" + "k" * 40, "k" * 61 + "_0", "x" * 45]
    keys = [f"{stem}.static.k8s.io/{name}" for stem in stems for name in names]
    generator = random.Random(29)
    middle, edge = string.ascii_lowercase + string.digits + "-", string.ascii_lowercase + string.digits
    key_middle = string.ascii_letters + string.digits + "-_."
    for _ in range(3000):
        labels = []
        for _label in range(generator.randint(1, 3)):
            size = generator.choice([1, 2, 5, 30, 63])
            labels.append(generator.choice(edge) + "".join(generator.choice(middle) for _ in range(size - 2))
                          + (generator.choice(edge) if size > 1 else ""))
        size = generator.choice([1, 2, 10, 40, 63])
        name = generator.choice(string.ascii_letters) + "".join(generator.choice(key_middle) for _ in range(size - 2))
        name += generator.choice(string.ascii_letters) if size > 1 else ""
        keys.append(".".join(labels)[:239].rstrip(".-") + ".static.k8s.io/" + name)
    return [VALIDATION_FAILURE_ANNOTATION, *dict.fromkeys(keys)]


def test_in_process_keys_are_dropped_by_kube_apiserver() -> None:
    # Why the daemon cannot answer the keys kube-apiserver uses in-process.
    assert recorded_key_problems(VALIDATING_WEBHOOK, "p.static.k8s.io/k")
    assert recorded_key_problems(VALIDATING_WEBHOOK, VALIDATION_FAILURE_ANNOTATION)


def test_every_mapped_key_survives_the_webhook_prefix_and_none_meet() -> None:
    keys = _in_process_keys()
    mapped = {key: webhook_audit_key(key) for key in keys}
    for key, answered in mapped.items():
        assert recorded_key_problems(VALIDATING_WEBHOOK, answered) == [], key
    assert len(set(mapped.values())) == len(keys)


def test_the_mapping_reads_back() -> None:
    assert webhook_audit_key(VALIDATION_FAILURE_ANNOTATION) == "validation-failure"
    assert webhook_audit_key("deny-privileged.static.k8s.io/image") == "deny-privileged_image"
    assert webhook_audit_key("a.b.static.k8s.io/Team_Name") == "a.b_Team_Name"
    # A short key splits back at its first "_" (policy names have none).
    for key in _in_process_keys()[1:]:
        stem, _, name = webhook_audit_key(key).partition("_")
        if not name.startswith("_"):
            assert f"{stem}.static.k8s.io/{name}" == key
    # Too long: what fits of both, "__", and a digest of the whole key; 63 characters exactly.
    long_key = f"{LONGEST_STEM}.static.k8s.io/{'Z' * 63}"
    answered = webhook_audit_key(long_key)
    assert len(answered) == 63
    assert answered.startswith("x" * 16 + "__" + "Z" * 28 + "_")
    assert webhook_audit_key(f"deny.static.k8s.io/{'k' * 58}") == "deny_" + "k" * 58
    assert webhook_audit_key(f"deny.static.k8s.io/{'k' * 59}").startswith("deny__" + "k" * 40 + "_")


def _annotated(tmp_path: Path) -> tuple[object, dict[str, object]]:
    long_name = "long-" + "n" * 50 + ".static.k8s.io"
    snap = snapshot(
        tmp_path,
        policy(validations=[{"expression": "false", "message": "audited"}],
               auditAnnotations=[{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]),
        binding(actions=("Audit",)),
        policy(long_name, validations=[{"expression": "true"}],
               auditAnnotations=[{"key": "K" * 63, "valueExpression": "'x'"}]),
        binding("lb.static.k8s.io", long_name),
    )
    return snap, review()


def test_the_daemon_answers_webhook_keys_and_review_keeps_kube_apiservers(tmp_path: Path) -> None:
    snap, raw = _annotated(tmp_path)
    in_process = evaluate(snap, raw).response["response"]["auditAnnotations"]
    assert set(in_process) == {VALIDATION_FAILURE_ANNOTATION, "p.static.k8s.io/replicas",
                               f"long-{'n' * 50}.static.k8s.io/{'K' * 63}"}
    answered = validate(snap, RequestOnlyNamespaces(), parsed(raw)).review["response"]["auditAnnotations"]
    assert answered == {webhook_audit_key(key): value for key, value in in_process.items()}
    assert answered["p_replicas"] == "10"
    for key in answered:
        assert recorded_key_problems(VALIDATING_WEBHOOK, key) == [], key

    # `staticadm review` describes kube-apiserver loading the directory itself: its keys, and the webhook's
    # beside them in the text view.
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    out = io.StringIO()
    run_review(str(tmp_path / "manifests"), None, "text", [str(tmp_path / "r.yaml")], io.StringIO(), out,
               io.StringIO())
    assert "audit annotation: p.static.k8s.io/replicas=10 (webhook key: p_replicas)" in out.getvalue()
