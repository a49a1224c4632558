"""``staticadm cel eval``: variables from files and mutation expressions."""

from __future__ import annotations

import io
import json
from pathlib import Path

from staticadm.cli import main

POD = ("apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {app: web}}\n"
       "spec:\n  containers: [{name: c, image: x}]\n")


def evaluate(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["cel", "eval", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_variable_from_a_yaml_file(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    code, out, _ = evaluate("--var", f"object=@{tmp_path / 'pod.yaml'}", "object.spec.containers.map(c, c.name)")
    assert (code, json.loads(out)) == (0, ["c"])
    code, _, err = evaluate("--var", f"object=@{tmp_path / 'missing.yaml'}", "object")
    # A bad option value is reported on the command's stderr, naming the subcommand.
    assert code == 2 and "staticadm cel eval: argument --var: " in err
    assert "missing.yaml: No such file or directory" in err


def test_mutation_expressions_show_what_kube_apiserver_would_apply(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    pod = f"object=@{tmp_path / 'pod.yaml'}"
    code, out, _ = evaluate("--mutating", "--var", pod,
                            "Object{metadata: Object.metadata{labels: {'team': object.metadata.name}}}")
    assert (code, json.loads(out)) == (0, {"metadata": {"labels": {"team": "web"}}})
    code, out, _ = evaluate("--mutating", "--var", pod,
                            "[JSONPatch{op: 'replace', path: '/metadata/labels/app', value: 'api'}]")
    assert (code, json.loads(out)) == (0, [{"op": "replace", "path": "/metadata/labels/app", "value": "api"}])
    # Without --mutating, Object{} is not part of the validating environment: a compile error.
    code, _, err = evaluate("--var", pod, "Object{}")
    assert code == 2 and "compile error" in err
