"""Which kubeconfig files a command reads, and how several become one, as kubectl does.

client-go's loading rules (``tools/clientcmd/loader.go``): an explicit ``--kubeconfig`` is the only file read
and must exist; otherwise the files ``$KUBECONFIG`` lists (``:``-separated, duplicates dropped, missing ones
skipped), otherwise ``~/.kube/config``. Several files merge into one configuration: for clusters, users and
contexts the first file naming an entry wins, and so does the first file that sets ``current-context``.
Relative paths in an entry stay relative to the file that holds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

#: The environment variable kubectl reads, and the file it falls back to.
KUBECONFIG_ENV = "KUBECONFIG"
RECOMMENDED_HOME_FILE = Path(".kube") / "config"
_NAMED_LISTS = ("clusters", "users", "contexts")


class KubeconfigNotFound(ValueError):
    """No kubeconfig to read; the message says where kubectl's rules looked."""


def kubeconfig_paths(explicit: str | None, environ: Mapping[str, str] | None = None,
                     home: Path | None = None) -> tuple[Path, ...]:
    """The files to read, in precedence order (kubectl's loading rules)."""
    environ = os.environ if environ is None else environ
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise KubeconfigNotFound(f"--kubeconfig {explicit}: no such file")
        return (path,)
    listed = environ.get(KUBECONFIG_ENV, "")
    if listed:
        paths = tuple(dict.fromkeys(Path(entry).expanduser() for entry in listed.split(os.pathsep) if entry))
        existing = tuple(path for path in paths if path.is_file())
        if not existing:
            raise KubeconfigNotFound(f"${KUBECONFIG_ENV} names no kubeconfig file that exists "
                                     f"({', '.join(map(str, paths)) or 'none'}); give --kubeconfig FILE")
        return existing
    home_file = (home if home is not None else Path.home()) / RECOMMENDED_HOME_FILE
    if not home_file.is_file():
        raise KubeconfigNotFound(f"no kubeconfig: give --kubeconfig FILE, set ${KUBECONFIG_ENV}, or create "
                                 f"{home_file}")
    return (home_file,)


def describe(paths: Sequence[Path]) -> str:
    """The files as messages name them: one path, or the list ``$KUBECONFIG`` gave."""
    return str(paths[0]) if len(paths) == 1 else os.pathsep.join(map(str, paths))


def merged_configuration(paths: Sequence[Path]) -> Any:
    """The kubeconfig the files make together, as the client library's loader takes it (a ``ConfigNode``
    whose entries each remember their file, for relative paths). ValueError or OSError naming the file
    that cannot be read."""
    from kubernetes_asyncio.config.kube_config import ConfigNode

    merged: dict[str, Any] = {name: [] for name in _NAMED_LISTS}
    seen: dict[str, set[str]] = {name: set() for name in _NAMED_LISTS}
    first_path = str(paths[0])
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            try:
                document = yaml.safe_load(handle) or {}
            except yaml.YAMLError as error:
                raise ValueError(f"{path}: not YAML: {error}") from None
        if not isinstance(document, dict):
            raise ValueError(f"{path}: a kubeconfig must be a mapping")
        for key, value in document.items():
            if key in _NAMED_LISTS:
                for entry in value or []:
                    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                        raise ValueError(f"{path}: {key}: each entry needs a name")
                    if entry["name"] not in seen[key]:
                        seen[key].add(entry["name"])
                        merged[key].append(ConfigNode(f"{path}/{entry['name']}", entry, str(path)))
            elif key == "current-context":
                if value and not merged.get(key):
                    merged[key] = value
            else:
                merged.setdefault(key, value)
    return ConfigNode(first_path, merged, first_path)
