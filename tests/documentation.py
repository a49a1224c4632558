"""The documentation as tests read it: README.md and the pages under docs/, their headings (as GitHub anchors
them), sections and ``sh`` blocks, and the references other files make to a page's section."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

#: A page's section as files name it: ``README, "Quickstart"`` or ``docs/deployment.md, "Cluster view"`` (the
#: comma optional). The quoted text is the start of one of that page's headings.
SECTION_REFERENCE = re.compile(r'(README(?:\.md)?|docs/[\w-]+\.md),? "([^"]+)"')
#: A page named with a section left unquoted (``README, Known gaps``), which nothing could check.
UNQUOTED_SECTION = re.compile(r"(README(?:\.md)?|docs/[\w-]+\.md), (?=[A-Z])")
#: A page under docs/ named anywhere, with its anchor if it has one.
PAGE_MENTION = re.compile(r"(?<![\w/.-])(docs/[\w-]+\.md)(?:#([\w-]+))?")
_FENCE = re.compile(r"^ *```")
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`[^`]*`")


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def page_path(name: str) -> Path:
    """The file a reference's page names: ``README``/``README.md`` or ``docs/<page>.md``."""
    return REPO_ROOT / ("README.md" if name.startswith("README") else name)


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a ``# comment`` in a shell block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def headings(page: Path) -> list[str]:
    """The text of every heading of ``page``, in order."""
    return [line.lstrip("#").strip() for line in _prose_lines(page.read_text()) if re.match(r"#{1,6} ", line)]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, every character but letters, digits,
    ``-``, ``_`` and spaces removed, each space a ``-``."""
    rendered = _LINK.sub(r"\1", heading).replace("`", "")
    kept = "".join(character for character in rendered.lower() if character.isalnum() or character in "-_ ")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``'s headings; a repeated one gets ``-1``, ``-2``... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in headings(page):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def links(page: Path) -> list[tuple[str, str]]:
    """Every inline Markdown link of ``page`` outside code: (text, target)."""
    return [(match.group(1), match.group(2)) for line in _prose_lines(page.read_text())
            for match in _LINK.finditer(_INLINE_CODE.sub("", line))]


def section(page: Path, heading: str) -> str:
    """The text of the section whose heading starts with ``heading``, up to the next heading of its level or
    above."""
    lines = page.read_text().splitlines(keepends=True)
    fenced, start, level = False, None, 0
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        marks = re.match(r"(#{1,6}) ", line)
        if fenced or not marks:
            continue
        if start is not None and len(marks.group(1)) <= level:
            return "".join(lines[start:index])
        if start is None and line[marks.end():].startswith(heading):
            start, level = index, len(marks.group(1))
    if start is None:
        raise AssertionError(f"{page.relative_to(REPO_ROOT)} has no section {heading!r}")
    return "".join(lines[start:])


def sh_block(page: str, first_line: str) -> str:
    """The ``sh`` block of ``page`` (relative to the checkout) whose first line starts with ``first_line``
    (indentation removed)."""
    text = (REPO_ROOT / page).read_text()
    for indent, body in re.findall(r"^( *)```sh\n(.*?)^\1```", text, flags=re.S | re.M):
        lines = [line[len(indent):] for line in body.splitlines()]
        if lines and lines[0].startswith(first_line):
            return "\n".join(lines) + "\n"
    raise AssertionError(f"{page} has no sh block starting with {first_line!r}")
