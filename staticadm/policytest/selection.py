"""``staticadm test --run REGEX``: which cases run, chosen by name as ``go test -run`` chooses tests.

A case's full name is ``TEST/CASE``: the test's ``metadata.name``, then the case's name (with ``[place]``
when one case makes several requests; a Kyverno ``Test`` names its cases ``policy/Kind/namespace/name``).
The full name is split on ``/`` into levels and the pattern on each ``/`` outside brackets and
parentheses into elements, as Go's ``splitRegexp`` does; element *i* must match somewhere in level *i*
(an unanchored search). A pattern with fewer elements leaves the deeper levels free; one with more
elements than a name has levels matches on the levels there are (Go runs such a test too).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


class SelectionError(ValueError):
    """A ``--run`` pattern that is not a regular expression: names the element and says why."""


def split_pattern(pattern: str) -> list[str]:
    """The elements of a ``--run`` pattern: split on each ``/`` outside ``[...]`` and ``(...)``, a ``\\``
    escaping the next character (Go's testing.splitRegexp)."""
    elements: list[str] = []
    start, brackets, parentheses, index = 0, 0, 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            brackets += 1
        elif char == "]" and brackets:
            brackets -= 1
        elif char == "(" and not brackets:
            parentheses += 1
        elif char == ")" and not brackets and parentheses:
            parentheses -= 1
        elif char == "/" and not brackets and not parentheses:
            elements.append(pattern[start:index])
            start = index + 1
        index += 1
    elements.append(pattern[start:])
    return elements


@dataclass(frozen=True, slots=True)
class CaseSelector:
    pattern: str
    elements: tuple[re.Pattern[str], ...]

    @classmethod
    def parse(cls, pattern: str) -> CaseSelector:
        compiled = []
        for position, element in enumerate(split_pattern(pattern)):
            try:
                compiled.append(re.compile(element))
            except re.error as error:
                raise SelectionError(f"--run {pattern!r}: element {position + 1} ({element!r}) is not a regular "
                                     f"expression: {error}") from None
        return cls(pattern, tuple(compiled))

    def selects(self, test: str, case: str) -> bool:
        levels: Sequence[str] = f"{test}/{case}".split("/")
        return all(element.search(level) is not None for element, level in zip(self.elements, levels, strict=False))


def full_name(test: str, case: str) -> str:
    return f"{test}/{case}"
