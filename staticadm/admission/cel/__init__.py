"""Stage: prepare inputs and evaluate (kube-apiserver's ``plugin/cel``): ``activation``, ``filter``."""
