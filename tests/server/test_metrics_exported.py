"""What /metrics shows before anything has happened: every family the documentation names (README.md and the
pages under docs/; docs/operations.md lists them), at zero where its label values are known in advance, and the
memory, CPU and descriptors of each process (real daemon, real scrape)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.documentation import pages
from tests.server.harness import DaemonFactory, wait_for

#: Families with a series per policy and binding: they appear with the first check, as kube-apiserver's do.
PER_POLICY = ("staticadm_validating_admission_policy_check_total", "staticadm_mutating_admission_policy_check_total")
#: Families of the cluster view, exported only by a daemon with --kubeconfig.
CLUSTER_VIEW = "staticadm_cluster_"


def _documented_families() -> set[str]:
    return {family for page in pages() for family in re.findall(r"`(staticadm_[a-z_]+)", page.read_text())}


def _samples(text: str) -> dict[str, list[str]]:
    """Sample lines by family (the name a ``# TYPE`` line declares), for every declared family."""
    families: dict[str, list[str]] = {}
    declared: list[str] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.append(line.split()[2])
            families[declared[-1]] = []
        elif line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            family = next((f for f in reversed(declared) if name == f or name.startswith(f + "_")), name)
            families.setdefault(family, []).append(line)
    return families


def test_every_family_the_documentation_names_is_exported_from_start_with_process_metrics_per_process(
        make_daemon: DaemonFactory, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    daemon = make_daemon(args=["--workers", "2", "--shadow-manifests", str(shadow)])
    assert wait_for(lambda: b"staticadm_worker_config_info{" in daemon.get("/metrics").body
                    and daemon.get("/metrics").body.count(b"\nprocess_resident_memory_bytes{") == 3, timeout=20)
    families = _samples(daemon.get("/metrics").body.decode())
    listed = _documented_families()
    assert len(listed) > 10, listed
    missing = sorted(name for name in listed if name not in families)
    assert not missing, f"the documentation names families /metrics does not declare: {missing}"
    empty = sorted(name for name in listed if not families[name] and name not in PER_POLICY
                   and not name.startswith(CLUSTER_VIEW))
    assert not empty, f"families exported without a series before their first event: {empty}"
    # Counters whose label values are known in advance start at 0.
    for line in ('staticadm_admission_evaluation_timeouts_total{endpoint="validate"} 0.0',
                 'staticadm_connections_closed_total{reason="shed"} 0.0',
                 'staticadm_background_task_failures_total{task="manifest-source"} 0.0',
                 'staticadm_shadow_differences_total{difference="allowed_to_denied",endpoint="mutate"} 0.0'):
        assert any(_same_sample(sample, line) for sample in
                   families[line.split("{")[0]]), (line, families[line.split("{")[0]])
    # One series per process (the supervisor and both workers), each labelled with its pid.
    pids = {re.search(r'pid="(\d+)"', line).group(1)  # type: ignore[union-attr]
            for line in families["process_resident_memory_bytes"]}
    assert daemon.process is not None and str(daemon.process.pid) in pids and len(pids) == 3
    assert all(float(line.rsplit(" ", 1)[1]) > 1e6 for line in families["process_resident_memory_bytes"])
    assert len(families["process_open_fds"]) == 3 and len(families["process_cpu_seconds_total"]) == 3


def _same_sample(sample: str, expected: str) -> bool:
    """The same name, label set and value whatever order the labels are written in."""
    def parts(line: str) -> tuple[str, frozenset[str], str]:
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        return name, frozenset(labels.rstrip("}").split(",")), value
    return parts(sample) == parts(expected)
