"""Member functions that two libraries declare under one name.

Kubernetes' lists library adds ``indexOf``/``lastIndexOf`` on lists; cel-go merges those overloads with
the strings extension's. cel-expr-python cannot add overloads to an extension's function, so the
checker sees these members under a same-length alias (positions in error messages stay exact) that
carries both the string and the list overloads; error texts are mapped back to the real names.
"""

from __future__ import annotations

from staticadm.cel import lexer
from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload

#: real member name -> alias of the same length.
MEMBER_ALIASES = {"indexOf": "_ndexOf", "lastIndexOf": "_astIndexOf"}
_ALIAS_TO_NAME = {alias: name for name, alias in MEMBER_ALIASES.items()}


def member_alias_edits(source: str) -> list[lexer.Edit]:
    """Edits renaming ``.indexOf``/``.lastIndexOf`` member calls to their aliases (same length, so
    positions stay exact)."""
    found = lexer.tokens(source)
    return [lexer.Edit(token.start, token.end, MEMBER_ALIASES[token.text])
            for index, token in enumerate(found)
            if token.kind == "ident" and token.text in MEMBER_ALIASES and index > 0
            and found[index - 1].kind == "punct" and found[index - 1].text == "."
            and index + 1 < len(found) and found[index + 1].text == "("]


def alias_member_calls(source: str) -> str:
    """Renames ``.indexOf``/``.lastIndexOf`` member calls outside string literals and comments."""
    return lexer.apply(source, member_alias_edits(source)).text


def restore_alias_names(message: str) -> str:
    """Error texts name the functions the author wrote, not their aliases."""
    for alias, name in _ALIAS_TO_NAME.items():
        message = message.replace(f"'{alias}'", f"'{name}'").replace(f"{alias}(", f"{name}(")
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
