"""No import cycle among a package's modules: an import-linter contract type and a script.

import-linter's own `acyclic_siblings` contract squashes every package into one node and compares siblings, so it
misses a cycle through a package's `__init__` (`jgem.envs` imports `jgem.envs.games`, which imports `jgem.envs`).
This one looks at every module: any strongly connected component of more than one module is a cycle, reported as
its shortest loop with line numbers.

In `.importlinter`: `contract_types = acyclic_modules: scripts.check_import_cycles.AcyclicModulesContract`, then a
contract of `type = acyclic_modules` with `packages`. As a script: `python scripts/check_import_cycles.py [pkg ...]`
(default: jgem) prints the cycles and exits 1 if there are any.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import grimp
from importlinter import Contract, ContractCheck, fields, output


def _sccs(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), those of two or more nodes, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _shortest_loop(start: str, component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """The shortest path start -> ... -> start inside the component (breadth first)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v] & component):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is on no loop of its component")


def find_cycles(graph: grimp.ImportGraph, packages: Iterable[str]) -> list[list[tuple[str, str, list[int]]]]:
    """One loop per cycle (strongly connected component) among the modules of `packages`: its imports as
    (importer, imported, line numbers)."""
    packages = tuple(packages)
    nodes = {m for m in graph.modules if any(m == p or m.startswith(p + ".") for p in packages)}
    edges = {m: graph.find_modules_directly_imported_by(m) & nodes for m in nodes}
    loops = []
    for component in _sccs(nodes, edges):
        path = _shortest_loop(component[0], set(component), edges)
        loops.append(
            [
                (a, b, sorted(d["line_number"] for d in graph.get_import_details(importer=a, imported=b)))
                for a, b in zip(path, path[1:])
            ]
        )
    return loops


def _render(loop: list[tuple[str, str, list[int]]]) -> list[str]:
    return [f"{a} -> {b} (l. {', '.join(map(str, lines)) or '?'})" for a, b, lines in loop]


class AcyclicModulesContract(Contract):
    """No module of `packages` imports itself through others (directly or through any chain)."""

    type_name = "acyclic_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        loops = find_cycles(graph, self.packages)  # type: ignore[arg-type]
        return ContractCheck(kept=not loops, metadata={"loops": loops})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for loop in check.metadata["loops"]:
            output.print_error(f"Import cycle through {loop[0][0]}:")
            for line in _render(loop):
                output.print_error(f"-   {line}", bold=False)
            output.new_line()
        output.print_error(
            "Break it by moving what both sides use into the module that owns it (below both), not by a lazy import.",
            bold=False,
        )


def main(packages: list[str]) -> int:
    sys.path.insert(0, str(Path.cwd()))
    loops = find_cycles(grimp.build_graph(*packages, cache_dir=None), packages)
    for loop in loops:
        print(f"import cycle through {loop[0][0]}:\n  " + "\n  ".join(_render(loop)))
    print(f"{len(loops)} import cycle(s) among the modules of {', '.join(packages)}")
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["jgem"]))
