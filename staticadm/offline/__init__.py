"""The offline tools: commands and reports built on the request path, above it.

``review`` (requests against a manifest directory), ``request_builder`` (the AdmissionReview for a plain object),
``audit_log`` (requests recorded in kube-apiserver's audit log), ``object_lists`` (Lists expanded), ``diff`` (two
manifest directories' answers compared), ``cluster_audit`` (``audit``: a live cluster's objects as requests),
``decision_report`` (the whole decision as data) and ``policy_reports`` (decisions as PolicyReports and OpenReports).
They import the request path (:mod:`staticadm.admission`); nothing in it, nor anything below it, imports them.
"""
