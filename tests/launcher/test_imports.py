"""The launcher package's import graph has no cycle (docs/launcher.md, "Module layout").

Every import statement counts: at module level, inside functions, and under ``TYPE_CHECKING``.
A circle hidden in a function-local import is still a circle: the modules cannot be read,
tested or replaced one at a time. Run as a script, this file prints the measures (import
graph, cycles, function-local imports, the largest functions and classes).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "rackemu"
NAME = "rackemu"


def _module_name(path: Path) -> str:
    return NAME if path.stem == "__init__" else f"{NAME}.{path.stem}"


def _imported(node: ast.Import | ast.ImportFrom, module: str, modules: set[str]) -> set[str]:
    """The package's modules one import statement names."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = NAME if node.level == 1 else ""   # the package is flat
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        names = [target] + [f"{target}.{alias.name}" for alias in node.names]
    found = {n for n in names if n in modules}
    found.discard(module)
    if NAME in found and module != NAME and len(found) > 1:
        found.discard(NAME)    # `from . import cluster` names the module, not the package
    return found


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(module -> modules of the package it imports, [(module, line, import) inside functions])."""
    files = {_module_name(p): p for p in sorted(PACKAGE.glob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    local: list[tuple[str, int, str]] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        in_function = {id(sub) for f in functions for sub in ast.walk(f)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = _imported(node, module, modules)
            graph[module] |= targets
            if id(node) in in_function and targets:
                local.append((module, node.lineno, ast.unparse(node)))
    return graph, local


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    result: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def sizes() -> list[tuple[int, str]]:
    """(lines, 'module:Name') of every class and function, largest first."""
    out = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                kind = "class " if isinstance(node, ast.ClassDef) else ""
                out.append((node.end_lineno - node.lineno + 1, f"{path.stem}:{kind}{node.name}"))
    return sorted(out, reverse=True)


def test_launcher_has_no_import_cycle() -> None:
    graph, _ = import_graph()
    found = cycles(graph)
    assert not found, f"import cycles in platform/rackemu: {found}"


def test_protocol_clients_import_nothing_of_the_orchestrator() -> None:
    graph, _ = import_graph()
    for client in ("rackemu.qmp", "rackemu.agent"):
        assert graph[client] <= {"rackemu.base"}, f"{client} imports {sorted(graph[client])}"


def test_snapshot_code_does_not_import_the_orchestrator() -> None:
    graph, _ = import_graph()
    for module in ("rackemu.snapshot", "rackemu.snapcache"):
        assert "rackemu.cluster" not in graph[module], f"{module} imports rackemu.cluster"


def test_no_module_of_the_package_is_imported_inside_a_function() -> None:
    _, local = import_graph()
    assert not local, f"function-local imports of the package: {local}"


def test_no_private_name_is_imported_across_modules() -> None:
    private = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(NAME)):
                private += [f"{path.name}:{node.lineno}: {a.name}" for a in node.names
                            if a.name.startswith("_") and a.name != "__version__"]
    assert not private, f"private names imported across modules: {private}"


if __name__ == "__main__":
    g, fl = import_graph()
    for m in sorted(g):
        print(f"{m:22} -> {', '.join(sorted(g[m])) or '-'}")
    print("cycles:", cycles(g) or "none")
    print(f"function-local imports of the package: {len(fl)}")
    for m, line, text in fl:
        print(f"  {m}:{line}: {text}")
    print("largest classes and functions:")
    for n, name in sizes()[:int(sys.argv[1]) if len(sys.argv) > 1 else 15]:
        print(f"  {n:5}  {name}")
