"""Stage: match, shared by both plugins (kube-apiserver's ``plugin/policy/generic``): ``dispatcher``."""
