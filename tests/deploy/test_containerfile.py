"""The Containerfile, read for the properties the image must have (no container engine runs in CI)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from tests.deploy.conftest import REPO_ROOT

#: Anything that compiles: none of it may reach the final image.
BUILD_TOOLS = ("gcc", "g++", "clang", "make", "build-essential", "cmake", "python3-dev", "libc6-dev", "rustc",
               "cargo")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [argument for key, argument in self.instructions if key == keyword]


def _stages() -> list[Stage]:
    text = (REPO_ROOT / "Containerfile").read_text()
    # Join continuation lines, drop comments, as the builder does.
    logical = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    stages: list[Stage] = []
    #: ARGs declared before the first FROM, with their defaults: what FROM lines may name.
    arguments: dict[str, str] = {}
    for line in logical.splitlines():
        if not line.strip():
            continue
        keyword, _, argument = line.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = argument.strip().partition("=")
            arguments[name] = default
            continue
        if keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: arguments[m.group(1) or m.group(2)], argument).split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append((keyword, argument.strip()))
    return stages


def test_multi_stage_with_a_slim_glibc_base() -> None:
    stages = _stages()
    assert len(stages) >= 2
    for stage in stages:
        # manylinux wheels need glibc: no Alpine (musl), and a slim variant.
        assert "alpine" not in stage.base and "slim" in stage.base, stage.base
    final = stages[-1]
    assert any(f"--from={stages[0].name}" in copy for copy in final.all("COPY"))


def test_the_base_is_a_build_argument_defaulting_to_python_slim() -> None:
    # Where docker.io cannot be reached the image is built from another base (docs/deployment.md,
    # "Container image and kubeadm static pod").
    text = (REPO_ROOT / "Containerfile").read_text()
    assert "ARG BASE=docker.io/library/python:3.12-slim-bookworm" in text
    assert [stage.base for stage in _stages()] == ["docker.io/library/python:3.12-slim-bookworm"] * 2
    assert text.count("FROM ${BASE} AS ") == 2


def test_final_stage_runs_as_non_root() -> None:
    users = _stages()[-1].all("USER")
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    if user.isdigit():
        assert int(user) > 0


def test_final_stage_installs_no_build_tools() -> None:
    final = _stages()[-1]
    commands = " ".join(final.all("RUN")).lower()
    for tool in BUILD_TOOLS:
        assert not re.search(rf"(^|[\s=]){re.escape(tool)}($|[\s:])", commands), tool
    # Packages arrive as the build stage's virtualenv, never installed (and possibly compiled) here.
    assert "pip install" not in commands and "apt-get install" not in commands


def test_dependencies_are_installed_from_wheels_only() -> None:
    build = " ".join(_stages()[0].all("RUN"))
    assert "--only-binary=:all:" in build


def test_entrypoint_healthcheck_and_volumes() -> None:
    final = _stages()[-1]
    [entrypoint] = final.all("ENTRYPOINT")
    assert json.loads(entrypoint)[-2:] == ["staticadm", "serve"]
    [healthcheck] = final.all("HEALTHCHECK")
    options, _, command = healthcheck.partition("CMD")
    assert "/livez" in command
    assert "--interval=" in options and "--timeout=" in options
    volumes = [v for argument in final.all("VOLUME") for v in json.loads(argument)]
    [cmd] = final.all("CMD")
    manifests_dir = json.loads(cmd)[json.loads(cmd).index("--manifests") + 1]
    assert manifests_dir in volumes
    assert "/var/lib/staticadm" in volumes
    assert any(shlex.split(expose) == ["8443"] for expose in final.all("EXPOSE"))
