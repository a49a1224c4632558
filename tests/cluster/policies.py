"""The policies the cluster-view tests (and ``bench.cluster_hostile``) load: one ValidatingAdmissionPolicy on
CREATE of one core resource, and its binding."""

from __future__ import annotations

from tests.policy_text import validating_policy_yaml


def policy(name: str, resource: str, validations: str, binding_match: str = "", variables: str = "") -> str:
    """``validations``, ``binding_match`` and ``variables`` are YAML as it stands under ``spec`` (two-space
    indent)."""
    return validating_policy_yaml(name, resource=resource, validations=validations, binding_match=binding_match,
                                  variables=variables)


#: Pods: an authorizer check whose failure is the policy's own answer (``errored()``; a messageExpression has no
#: authorizer of its own, so the decision is a variable).
ERRORED_CHECK_POLICY = policy("authz", "pods", """\
  - expression: "!variables.healthz.errored()"
    messageExpression: "'authorizer: ' + variables.healthz.error()"
""", variables="""\
  variables:
  - name: healthz
    expression: "authorizer.path('/healthz').check('get')"
""")
#: ConfigMaps: a namespace selector on a label, so a namespace the cache lacks is read by a live GET.
SELECTOR_POLICY = policy("selector", "configmaps", """\
  - expression: "false"
    message: no configmaps in test namespaces
""", """\
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
""")
#: Services: nothing from the cluster.
PLAIN_POLICY = policy("plain", "services", """\
  - expression: "object.metadata.name != 'forbidden'"
    message: forbidden
""")
