"""Fail when modules of the portal, or of the agent, import each other in a loop (import-linter's
contracts see layers, not loops inside one app). Run by `make lint`; `import_cycles.py DIR` checks
the packages of that name under DIR instead of the repository's.

An import of `a.b.c` also counts as an import of the packages `a.b` and `a` (Python runs their
`__init__` first) unless the importer sits inside them, so a package `__init__` that re-exports
its submodules is part of any loop through them. Imports inside functions count too.
"""

import sys
from pathlib import Path

import grimp

ROOTS = ("portal", "agents")


def import_graph(root: str) -> dict[str, set[str]]:
    graph = grimp.build_graph(root, cache_dir=None)
    edges: dict[str, set[str]] = {}
    for importer in graph.modules:
        targets = edges.setdefault(importer, set())
        for imported in graph.find_modules_directly_imported_by(importer):
            targets.add(imported)
            parts = imported.split(".")
            for end in range(1, len(parts)):
                package = ".".join(parts[:end])
                if not (importer == package or importer.startswith(package + ".")):
                    targets.add(package)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def main(argv: list[str]) -> int:
    tree = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(tree))
    failed = False
    for root in ROOTS:
        if not (tree / root / "__init__.py").exists():
            continue
        edges = import_graph(root)
        loops = cycles(edges)
        for component in loops:
            members = set(component)
            print("import cycle between:")
            for module in component:
                print(f"  {module} -> {', '.join(sorted(edges[module] & members))}")
        if loops:
            failed = True
        else:
            print(f"No import cycles among {len(edges)} modules of {root}.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
