"""Member functions that two libraries declare under one name.

Kubernetes' lists library adds ``indexOf``/``lastIndexOf`` on lists; cel-go merges those overloads with
the strings extension's. cel-expr-python cannot add overloads to an extension's function, so the
checker sees these members under a same-length alias (positions in error messages stay exact) that
carries both the string and the list overloads; error texts are mapped back to the real names.
"""

from __future__ import annotations

import re

from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload

#: real member name -> alias of the same length.
MEMBER_ALIASES = {"indexOf": "_ndexOf", "lastIndexOf": "_astIndexOf"}
_ALIAS_TO_NAME = {alias: name for name, alias in MEMBER_ALIASES.items()}
_MEMBER_CALL = re.compile(r"(\.\s*)(" + "|".join(MEMBER_ALIASES) + r")\b")
_STRING_START = re.compile(r"""[rRbB]{0,2}('''|\"\"\"|'|")""")


def alias_member_calls(source: str) -> str:
    """Renames ``.indexOf``/``.lastIndexOf`` member calls outside string literals and comments."""
    out: list[str] = []
    position = 0
    code_start = 0
    while position < len(source):
        char = source[position]
        if char == "/" and source.startswith("//", position):
            end = source.find("\n", position)
            end = len(source) if end < 0 else end
            out.append(_alias_code(source[code_start:position]))
            out.append(source[position:end])
            position = code_start = end
            continue
        match = _STRING_START.match(source, position) if char in "rRbB'\"" else None
        if match and (position == 0 or not (source[position - 1].isalnum() or source[position - 1] == "_")):
            quote = match.group(1)
            raw = "r" in match.group(0).lower()
            end = match.end()
            while end < len(source) and not source.startswith(quote, end):
                if source[end] == "\\" and not raw:
                    end += 1
                elif len(quote) == 1 and source[end] == "\n":
                    break
                end += 1
            end = min(end + len(quote), len(source))
            out.append(_alias_code(source[code_start:position]))
            out.append(source[position:end])
            position = code_start = end
            continue
        position += 1
    out.append(_alias_code(source[code_start:]))
    return "".join(out)


def _alias_code(code: str) -> str:
    return _MEMBER_CALL.sub(lambda m: m.group(1) + MEMBER_ALIASES[m.group(2)], code)


def restore_names(message: str, aliased_source: str, original_source: str) -> str:
    """Maps an error text about the aliased source back to the source the author wrote."""
    for aliased_line, original_line in zip(aliased_source.split("\n"), original_source.split("\n"), strict=True):
        if aliased_line != original_line:
            message = message.replace(f" | {aliased_line}", f" | {original_line}")
    for alias, name in _ALIAS_TO_NAME.items():
        message = message.replace(f"'{alias}'", f"'{name}'")
    return message


def _string_index_of(text: str, sub: str, offset: int = 0) -> int:
    # cel-go strings extension: offsets count code points; an offset past the end finds nothing and an
    # empty needle matches at the offset, clamped to the length.
    if offset < 0:
        raise CelFunctionError(f"index out of range: {offset}")
    if sub == "":
        return min(offset, len(text))
    if offset >= len(text):
        return -1
    return text.find(sub, offset)


def _string_last_index_of(text: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        if sub == "":
            return len(text)
        offset = len(text) - 1
    if sub == "":
        return offset
    if len(text) < len(sub):
        return -1
    if offset < 0 or offset >= len(text):
        raise CelFunctionError(f"index out of range: {offset}")
    return text.rfind(sub, 0, min(offset, len(text) - len(sub)) + len(sub))


STRING_OVERLOADS = {
    "indexOf": (
        Overload("string_index_of_string", ("string", "string"), "int", _string_index_of, member=True),
        Overload("string_index_of_string_int", ("string", "string", "int"), "int", _string_index_of, member=True),
    ),
    "lastIndexOf": (
        Overload("string_last_index_of_string", ("string", "string"), "int", _string_last_index_of, member=True),
        Overload("string_last_index_of_string_int", ("string", "string", "int"), "int", _string_last_index_of,
                 member=True),
    ),
}


def alias_functions(functions: list[Function]) -> list[Function]:
    """Library functions under their checker names, with the strings extension's overloads merged in."""
    result = []
    for function in functions:
        if function.name in MEMBER_ALIASES:
            overloads = (*STRING_OVERLOADS[function.name], *function.overloads)
            result.append(Function(MEMBER_ALIASES[function.name], overloads))
        else:
            result.append(function)
    return result
