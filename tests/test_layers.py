"""The package's floors, top to bottom, and no import running up from a lower one to a higher one.

Each module sits on one floor (the longest prefix listed below names it; a module no prefix names fails the test):
a module may import modules of its own floor or of any floor below, never above. The imports are read from the
source (:mod:`tests.test_import_cycles`): ``from staticadm.x import y`` counts as an import of ``staticadm.x.y`` when
that is a module, and imports made only for type checking count too. Cycles inside a floor are the other test's.

The order (``FLOORS``) follows the data (files -> snapshot -> request evaluation -> response) and kube-apiserver's
``plugin/policy``: the tools built on the plugin above it, ``matching`` and ``plugin/cel`` under the dispatchers.
"""

from __future__ import annotations

from tests.test_import_cycles import _imports, _modules

#: Top to bottom: (floor, the modules and packages on it).
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry points", ("staticadm.__main__", "staticadm.launch", "staticadm.cli", "staticadm.completion")),
    ("`staticadm test`", ("staticadm.policytest",)),
    # cluster.reports writes the offline tools' PolicyReports to a cluster (`audit --apply`).
    ("offline tools", ("staticadm.offline", "staticadm.cluster.reports")),
    ("daemon", ("staticadm.server",)),
    ("check's analyses", ("staticadm.analysis",)),
    ("deployment", ("staticadm.deploy",)),
    ("live cluster view", ("staticadm.cluster",)),
    ("reload", ("staticadm.source", "staticadm.watch", "staticadm.writes")),
    # The request path, by stage: answer; evaluate and decide; the dispatch both plugins share; the request
    # as CEL sees it (plugin/cel); decision records and wording.
    ("request path: answer", ("staticadm.admission", "staticadm.admission.endpoints",
                              "staticadm.admission.comparison")),
    ("request path: validating and mutating", ("staticadm.admission.validating", "staticadm.admission.mutating")),
    ("request path: dispatch", ("staticadm.admission.generic",)),
    ("request path: CEL inputs", ("staticadm.admission.cel",)),
    ("request path: decisions", ("staticadm.admission.outcomes", "staticadm.admission.response",
                                 "staticadm.admission.vocabulary")),
    ("snapshot", ("staticadm.snapshot",)),
    ("manifests", ("staticadm.manifests",)),
    ("compiled policies", ("staticadm.compiled",)),
    # Below the compiled policies because each carries its match plan (kube-apiserver's matching package is
    # shared the same way): the parsed request, the namespaces it is matched against, the matcher.
    ("matching", ("staticadm.admission.matching", "staticadm.admission.request", "staticadm.admission.namespaces")),
    ("kinds, patches, policy types", ("staticadm.kinds", "staticadm.patch", "staticadm.model")),
    ("CEL", ("staticadm.cel",)),
    ("support", ("staticadm", "staticadm.build_info", "staticadm.gofmt", "staticadm.json_types", "staticadm.yamljson",
                 "staticadm.yamlresolve", "staticadm.yamltext", "staticadm.bounded", "staticadm.atomicfile",
                 "staticadm.colour", "staticadm.tables", "staticadm.progress", "staticadm.schemas",
                 "staticadm.defaults")),
)


def floor_of(module: str, floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for level, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), level)
    return None if best is None else best[1]


def upward_imports(edges: dict[str, set[str]],
                   floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> list[str]:
    found = []
    for module, targets in sorted(edges.items()):
        level = floor_of(module, floors)
        for target in sorted(targets):
            target_level = floor_of(target, floors)
            if level is not None and target_level is not None and target_level < level:
                found.append(f"{module} ({floors[level][0]}) imports {target} ({floors[target_level][0]})")
    return found


def test_every_module_has_a_floor() -> None:
    assert [name for name in sorted(_modules()) if floor_of(name) is None] == []


def test_no_import_runs_up_a_floor() -> None:
    assert upward_imports(_imports(_modules())) == []


def test_nothing_below_the_offline_tools_imports_them() -> None:
    edges = _imports(_modules())
    offline = floor_of("staticadm.offline")
    assert offline is not None
    assert [f"{module} imports {target}" for module, targets in sorted(edges.items())
            for target in sorted(targets) if target.startswith("staticadm.offline")
            and (floor_of(module) or 0) > offline] == []


def test_an_upward_import_is_found_when_there_is_one() -> None:
    floors = (("top", ("p.top",)), ("bottom", ("p.bottom",)))
    assert upward_imports({"p.top": {"p.bottom"}, "p.bottom.x": {"p.top.y"}}, floors) == [
        "p.bottom.x (bottom) imports p.top.y (top)"]
