"""``jsonpatch.escapeKey``: available to MutatingAdmissionPolicy mutation expressions only."""

from __future__ import annotations

from staticadm.cel.libraries.spec import Function, Overload


def escape_key(key: str) -> str:
    # RFC 6901: "~" first, so the "~" introduced for "/" is not escaped again.
    return key.replace("~", "~0").replace("/", "~1")


FUNCTIONS = (
    Function(
        "jsonpatch.escapeKey",
        (Overload("string_jsonpatch_escapeKey_string", ("string",), "string", escape_key),),
    ),
)
