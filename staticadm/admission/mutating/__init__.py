"""MutatingAdmissionPolicy (``plugin/policy/mutating``): ``dispatcher``."""
