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
