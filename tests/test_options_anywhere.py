"""Options anywhere on the command line, for every command that takes positionals, as kubectl takes them."""

from __future__ import annotations

import io
import json

import pytest

from staticadm.cli import build_parser, main
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"
POD = EXAMPLES / "tests" / "pod.yaml"

#: (options first, the same with options between and after the positionals) for each command.
SAME_LINES = {
    "review": (["review", "-o", "json", "--group", "g", str(EXAMPLES), str(POD)],
               ["review", str(EXAMPLES), "-o", "json", str(POD), "--group", "g"]),
    "diff": (["diff", "-o", "json", "--operation", "UPDATE", "live", "new", "a.yaml", "b.yaml"],
             ["diff", "live", "-o", "json", "new", "a.yaml", "--operation", "UPDATE", "b.yaml"]),
    "check": (["check", "--strict", "-o", "yaml", "a", "b"], ["check", "a", "--strict", "b", "-o", "yaml"]),
    "test": (["test", "--junit", "r.xml", "a", "b"], ["test", "a", "--junit", "r.xml", "b"]),
    "audit": (["audit", "--kubeconfig", "k", "--page-size", "5", "dir"], ["audit", "dir", "--kubeconfig", "k",
                                                                          "--page-size", "5"]),
    "cel eval": (["cel", "eval", "--var", "x=1", "--mutating", "x + 1"], ["cel", "eval", "x + 1", "--var", "x=1",
                                                                           "--mutating"]),
}


@pytest.mark.parametrize("command", sorted(SAME_LINES))
def test_options_after_or_between_positionals_parse_as_before_them(command: str) -> None:
    first, anywhere = SAME_LINES[command]
    parsed_first, parsed_anywhere = build_parser().parse_args(first), build_parser().parse_args(anywhere)
    assert vars(parsed_first) == vars(parsed_anywhere)


def test_review_with_an_option_between_the_directory_and_the_files_reviews_them() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["review", str(EXAMPLES), "-o", "json", str(POD)], stdout=out, stderr=err)
    assert code in (0, 3), err.getvalue()
    assert json.loads(out.getvalue().splitlines()[0])["input"] == str(POD)


def test_an_unknown_option_anywhere_is_still_a_usage_error() -> None:
    err = io.StringIO()
    assert main(["review", str(EXAMPLES), str(POD), "--no-such-option"], stdout=io.StringIO(), stderr=err) == 2
