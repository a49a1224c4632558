"""Patch libraries for MutatingAdmissionPolicy: JSON Patch (evanphx v4), JSON Patch creation, and SMD apply merge.

Pure functions over JSON-like values (dict/list/str/int/float/bool/None) with no dependency on the rest of staticadm.
"""

from __future__ import annotations

from staticadm.patch.apply import (
    ApplyConfigurationError,
    AtomicMutationError,
    GVKMismatchError,
    MergeError,
    PatchSchemaError,
    SchemaCatalog,
    TypeSchema,
    apply_configuration,
    apply_structured_merge_diff,
    deduced_schema,
    schema_for,
    schema_metadata,
)
from staticadm.patch.diff import create_patch
from staticadm.patch.jsonpatch import JSONPatchError, JSONPatchTestFailed, apply_patch

__all__ = [
    "ApplyConfigurationError",
    "AtomicMutationError",
    "GVKMismatchError",
    "JSONPatchError",
    "JSONPatchTestFailed",
    "MergeError",
    "PatchSchemaError",
    "SchemaCatalog",
    "TypeSchema",
    "apply_configuration",
    "apply_patch",
    "apply_structured_merge_diff",
    "create_patch",
    "deduced_schema",
    "schema_for",
    "schema_metadata",
]
