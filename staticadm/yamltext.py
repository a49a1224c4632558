"""Writing YAML for reports: plain data, keys in the order given. Reading YAML is :mod:`staticadm.yamljson`'s."""

from __future__ import annotations

import yaml


class _PlainDumper(yaml.SafeDumper):
    """Never writes anchors and aliases: a value that appears twice in a report (a mutation's patch in the
    answer's patch) is written twice, so every reader sees plain data."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def dump_yaml(value: object) -> str:
    """One YAML document, keys in the order given, unicode as is, no aliases."""
    return yaml.dump(value, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)
