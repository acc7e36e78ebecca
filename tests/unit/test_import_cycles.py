"""The package's import graph has no cycle: not at module level, not through imports deferred into
functions, not through ``TYPE_CHECKING`` imports (grimp reads them all, as import-linter does).

A cycle means two modules cannot be understood, tested or moved apart; the layers contract
(pyproject.toml) cannot see one inside a layer. This test names each cycle it finds, with the
import lines that make it, so the fix can start from them.
"""

from __future__ import annotations

import grimp


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]


def test_forensics_has_no_import_cycle() -> None:
    imports = grimp.build_graph("forensics", cache_dir=None)
    graph = {m: set(imports.find_modules_directly_imported_by(m)) for m in imports.modules}
    cycles = _strongly_connected(graph)
    report = []
    for component in cycles:
        members = set(component)
        for importer in component:
            for imported in sorted(graph[importer] & members):
                for detail in imports.get_import_details(importer=importer, imported=imported):
                    report.append(f"{importer}:{detail['line_number']}: {detail['line_contents']}")
    assert not cycles, "import cycles:\n" + "\n".join(report)
