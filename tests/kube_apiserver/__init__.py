"""kube-apiserver's side of the webhook contract, for the tests: the client that calls staticadm.

A model of what kube-apiserver (k8s.io/apiserver, 1.36+) does with the static webhook configurations
``staticadm webhook-config`` writes, written from its sources (semantics ported, no code copied):

- ``configuration``: the AdmissionConfiguration's WebhookAdmissionConfiguration (``kubeConfigFile``,
  ``staticManifestsDir``; ``plugin/webhook/config``), the static manifest loader with the v1 defaults
  (``plugin/webhook/manifest/loader``), and the webhook kubeconfig's user lookup by ``host:port``
  (``util/webhook/authentication.go``);
- ``matching``: ``ShouldCallHook`` (``plugin/webhook/generic/webhook.go``): namespace and object selectors,
  rules, ``matchPolicy: Equivalent`` and matchConditions;
- ``calls``: the AdmissionReview sent (``plugin/webhook/request``), the HTTPS call with the webhook's
  client certificate and ``?timeout=`` (``util/webhook/client.go``), ``VerifyAdmissionResponse``;
- ``admission``: the validating dispatcher (parallel calls, first error wins), the mutating dispatcher
  (in order, JSON patches applied, reinvocation), failurePolicy on call errors and timeouts, audit
  annotations prefixed ``<webhook name>/`` and dropped with a warning unless ``checkKeyFormat`` passes,
  warnings collected (``plugin/webhook/{validating,mutating}/dispatcher.go``, ``admission/attributes.go``);
- ``statuses``: the metav1.Status values those paths return.

What it cannot do as kube-apiserver does, and says so where it matters: convert objects between
versions (an equivalent resource is sent with its apiVersion rewritten, for kinds whose versions have the
same fields), decode a patched object into its Go type (unknown fields are kept, nothing is defaulted),
or answer ``authorizer`` in a matchCondition (such a condition is refused at load).
"""
