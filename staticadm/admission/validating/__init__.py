"""ValidatingAdmissionPolicy (``plugin/policy/validating``): ``validator``, ``all_clear``, ``dispatcher``."""
