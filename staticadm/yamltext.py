"""YAML parse errors as one line that names the place in the file, never PyYAML's ``<unicode string>``."""

from __future__ import annotations

import yaml


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """``line L, column C: problem`` (and where the construct it belongs to started), 1-based like Go's
    YAML errors and every editor."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        text = f"line {mark.line + 1}, column {mark.column + 1}: {error.problem or 'invalid YAML'}"
        if error.context and error.context_mark is not None:
            context = error.context_mark
            text += f" ({error.context} at line {context.line + 1}, column {context.column + 1})"
        elif error.context:
            text += f" ({error.context})"
        return text
    if isinstance(error, yaml.reader.ReaderError):
        return f"character {error.position + 1}: {error.reason}"
    return str(error).replace('in "<unicode string>", ', "").replace("\n", " ")


class _PlainDumper(yaml.SafeDumper):
    """Never writes anchors and aliases: a value that appears twice in a report (a mutation's patch in the
    answer's patch) is written twice, so every reader sees plain data."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def dump_yaml(value: object) -> str:
    """One YAML document, keys in the order given, unicode as is, no aliases."""
    return yaml.dump(value, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)
