"""What the pages say about the Kubernetes version staticadm follows and about writing manifests on the node
holds: one version everywhere (the one the bundled schemas were generated from), and advice that works."""

from __future__ import annotations

import gzip
import json
import re

from tests.conftest import REPO_ROOT
from tests.documentation import pages


def _bundled_kubernetes_minor() -> str:
    with gzip.open(REPO_ROOT / "staticadm" / "cel" / "schemas" / "kinds.json.gz") as handle:
        version = json.load(handle)["meta"]["kubernetes"]
    return ".".join(version.split(".")[:2])


def test_the_cel_page_names_the_kubernetes_version_of_the_bundled_schemas() -> None:
    text = (REPO_ROOT / "docs" / "cel.md").read_text(encoding="utf-8")
    named = re.search(r"CEL environment kube-apiserver (\d+\.\d+) uses", text)
    assert named is not None, "docs/cel.md no longer says which kube-apiserver's CEL environment it is"
    assert named.group(1) == _bundled_kubernetes_minor()


def test_no_page_suggests_kubectl_cp_for_writing_manifests_on_the_node() -> None:
    # kubectl cp copies into a container through tar: it neither runs on the node nor renames atomically.
    offending = [str(page.relative_to(REPO_ROOT)) for page in pages() if "kubectl cp" in page.read_text("utf-8")]
    assert not offending, f"pages suggesting kubectl cp: {offending}"
    operations = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "temporary file in the same directory" in operations and "mv " in operations
