"""Every relative link of the README and the pages under docs/ reaches a file, and a heading of it when it names
an anchor; every page is linked from the README; every file naming a page or a page's section names one that
exists."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.conftest import REPO_ROOT
from tests.documentation import (
    PAGE_MENTION,
    SECTION_REFERENCE,
    UNQUOTED_SECTION,
    anchors,
    github_anchor,
    headings,
    links,
    page_path,
    pages,
)


def broken_links(page: Path, root: Path = REPO_ROOT) -> list[str]:
    """What is wrong with each relative link of ``page``: a target that is no file or directory under ``root``,
    or an anchor that is no heading of the Markdown page it names."""
    problems = []
    root = root.resolve()
    for text, target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not linked.is_relative_to(root):
            problems.append(f"[{text}]({target}): {path_part} is outside the checkout")
        elif not linked.exists():
            problems.append(f"[{text}]({target}): {path_part} does not exist")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            problems.append(f"[{text}]({target}): {linked.relative_to(root)} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    assert not broken_links(page), "\n".join(broken_links(page))


def test_every_page_under_docs_is_linked_from_the_readme() -> None:
    readme = REPO_ROOT / "README.md"
    linked = {(readme.parent / target.partition("#")[0]).resolve() for _, target in links(readme)}
    unlinked = [str(page.relative_to(REPO_ROOT)) for page in pages()[1:] if page.resolve() not in linked]
    assert not unlinked, f"pages the README does not link to: {unlinked}"


def test_anchors_are_the_ones_github_gives() -> None:
    assert github_anchor("Cluster view: namespaces and authorizer from kube-apiserver (`--kubeconfig`)") == (
        "cluster-view-namespaces-and-authorizer-from-kube-apiserver---kubeconfig")
    assert github_anchor("Set-up (fresh machine: Python 3.11+ and pip)") == "set-up-fresh-machine-python-311-and-pip"
    assert github_anchor("Policy tests (`staticadm test`, for CI)") == "policy-tests-staticadm-test-for-ci"
    assert github_anchor("snake_case [linked](x.md) **bold**") == "snake_case-linked-bold"


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    """The check is no formality: a missing file, a file outside the tree and a missing heading are refused."""
    checkout = tmp_path / "checkout"
    (checkout / "docs").mkdir(parents=True)
    (checkout / "docs/deployment.md").write_text("# Deployment\n\n## Certificates\n")
    (checkout / "Containerfile").write_text("FROM scratch\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    page = checkout / "docs/page.md"
    page.write_text("# Page\n\n[ok](deployment.md#certificates) [self](#page) [gone](no-such.md)\n"
                    "[heading](deployment.md#no-such-heading) [not markdown](../Containerfile#x)\n"
                    "[outside](../../outside.md) `[in code](no-such.md)`\n"
                    "```sh\n[in a block](no-such-either.md)\n```\n")
    assert broken_links(page, root=checkout) == [
        "[gone](no-such.md): no-such.md does not exist",
        "[heading](deployment.md#no-such-heading): docs/deployment.md has no heading #no-such-heading",
        "[not markdown](../Containerfile#x): Containerfile has no heading #x",
        "[outside](../../outside.md): ../../outside.md is outside the checkout"]


_TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".service", ".socket", ".json", ".toml", ".txt"}


def _referring_files() -> list[Path]:
    """Every file that may name a page of the documentation or its sections, but this one and
    tests/documentation.py, which hold examples of references the check refuses."""
    examples = {Path(__file__).resolve(), REPO_ROOT / "tests/documentation.py"}
    listed = [REPO_ROOT / name for name in ("Containerfile", ".ci/run", "pyproject.toml", "README.md")]
    for directory in ("staticadm", "systemd", "manifests", "bench", "tools", "tests", "docs"):
        listed += sorted(path for path in (REPO_ROOT / directory).rglob("*")
                         if path.is_file() and path.suffix in _TEXT_SUFFIXES and "__pycache__" not in path.parts)
    return [path for path in listed if path not in examples]


def reference_problems(text: str) -> list[str]:
    """What is wrong with the references ``text`` makes: ``docs/<page>.md, "Section"`` (or ``README, "Section"``)
    must name the start of a heading of that page, a page named under docs/ must exist (and so must its anchor),
    and no page may be named with its section unquoted, where nothing could check it."""
    problems = []
    for page, heading in SECTION_REFERENCE.findall(text):
        if not page_path(page).is_file():
            problems.append(f"{page} does not exist")
        elif not any(found.startswith(heading) for found in headings(page_path(page))):
            problems.append(f"{page} has no section {heading!r}")
    for page, anchor in PAGE_MENTION.findall(text):
        if not page_path(page).is_file():
            problems.append(f"{page} does not exist")
        elif anchor and anchor not in anchors(page_path(page)):
            problems.append(f"{page} has no heading #{anchor}")
    problems += [f"{match.group(0)!r} names a section without quotes" for match in UNQUOTED_SECTION.finditer(text)]
    return problems


def test_files_name_only_pages_and_sections_that_exist() -> None:
    files = _referring_files()
    assert REPO_ROOT / "systemd/staticadm.service" in files and REPO_ROOT / "staticadm/cli.py" in files
    problems = [f"{path.relative_to(REPO_ROOT)}: {problem}" for path in files
                for problem in reference_problems(path.read_text())]
    assert not problems, "\n".join(problems)


def test_a_reference_to_a_missing_page_or_section_is_reported() -> None:
    text = ('README, "Quickstart"; docs/deployment.md, "Cluster view"; docs/known-gaps.md; docs/cel.md#type-checking;\n'
            'docs/deployment.md, "No such section"; docs/gone.md, "Cluster view"; docs/no-such-page.md;\n'
            'docs/deployment.md#no-such-heading; README "No such section"; (README, Known gaps)')
    assert reference_problems(text) == [
        "docs/deployment.md has no section 'No such section'",
        "docs/gone.md does not exist",
        "README has no section 'No such section'",
        "docs/gone.md does not exist",
        "docs/no-such-page.md does not exist",
        "docs/deployment.md has no heading #no-such-heading",
        "'README, ' names a section without quotes"]
