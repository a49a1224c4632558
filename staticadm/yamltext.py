"""Writing YAML for reports: plain data, keys in the order given. Reading YAML is :mod:`staticadm.yamljson`'s."""

from __future__ import annotations

import re

import yaml


class _PlainDumper(yaml.SafeDumper):
    """Never writes anchors and aliases: a value that appears twice in a report (a mutation's patch in the
    answer's patch) is written twice, so every reader sees plain data."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def dump_yaml(value: object) -> str:
    """One YAML document, keys in the order given, unicode as is, no aliases."""
    return yaml.dump(value, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)


#: Strings written without quotes: they read back as the same string under YAML 1.1 (PyYAML, go-yaml v2) and
#: 1.2. Anything else is double-quoted.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
#: Words YAML 1.1 reads as booleans or null, whatever their case.
_RESERVED = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
#: What a double-quoted scalar must escape: its quote and backslash, C0 and C1 controls, DEL, the byte-order
#: mark, and the characters YAML counts as line breaks (NEL, LINE and PARAGRAPH SEPARATOR), which would
#: otherwise be folded; every other character is written as it is.
_ESCAPED = re.compile("[\"\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
_NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # As PyYAML writes it: YAML 1.1 reads 1e+100 (JSON's way) as a string, and spells infinity .inf.
        return yaml.safe_dump(value).removesuffix("\n...\n").strip()
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return f'"{_ESCAPED.sub(_escape, text)}"'


def _block(value: object, indent: str, out: list[str]) -> None:
    """``value`` (a dict or a non-empty list) in block style, each line starting with ``indent``."""
    if isinstance(value, dict):
        for key, item in value.items():
            _entry(f"{indent}{_scalar(key)}:", item, indent + "  ", out)
    else:
        assert isinstance(value, list)
        for item in value:
            if isinstance(item, dict | list) and item:
                # The first key (or item) on the dash's line, the others under it, as kubectl writes lists of
                # objects.
                lines: list[str] = []
                _block(item, indent + "  ", lines)
                out.append(f"{indent}- {lines[0][len(indent) + 2:]}")
                out.extend(lines[1:])
            else:
                _entry(f"{indent}-", item, indent + "  ", out)


def _entry(head: str, value: object, indent: str, out: list[str]) -> None:
    if isinstance(value, dict | list) and value:
        out.append(head)
        # A list under a key is written at the key's indentation, as PyYAML and kubectl write it.
        _block(value, indent if isinstance(value, dict) else indent[:-2], out)
    elif isinstance(value, dict):
        out.append(f"{head} {{}}")
    elif isinstance(value, list):
        out.append(f"{head} []")
    else:
        out.append(f"{head} {_scalar(value)}")


def dump_json_data_as_yaml(value: dict[str, object]) -> str:
    """One YAML document of JSON data (dicts, lists, strings, numbers, booleans, null), in block style, keys in
    the order given: what :func:`dump_yaml` writes, but some fifty times faster, for the reports that run to
    tens of thousands of results (PyYAML's representer and emitter cost about 1.7 ms per report result)."""
    out: list[str] = []
    _block(value, "", out)
    return "\n".join(out) + "\n"
