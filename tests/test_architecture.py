"""The layering, machine-checked: import-linter's contracts (pyproject.toml) and no module
reaching into another module's private names."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from tests.support.paths import ROOT

PACKAGES = ("goodhart_prof", "trainer")
SCANNED = ("goodhart_prof", "trainer", "scripts")


def test_import_contracts_hold():
    exe = Path(sys.executable).parent / "lint-imports"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c",
                                          "from importlinter.cli import lint_imports_command as c; c()"]
    done = subprocess.run(cmd + ["--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports() -> list[str]:
    """`from X import _name` where X is another module of this project (its own names and
    dunders are fine): each as `file:line: X._name`."""
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = _module_name(path)
            tree = ast.parse(path.read_text(), str(path))  # scripts import as top-level modules
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _resolve(module, node, path.name == "__init__.py")
                if source.split(".")[0] not in PACKAGES or source == module:
                    continue
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {source}.{name}")
    return found


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def _project_modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its __init__.py)."""
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` is, or lies in (`a.b.c` -> `a.b` where c is a name in it)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports anywhere in its body: at module level, inside
    functions and under `if TYPE_CHECKING:` alike (`from pkg import mod` is mod itself)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(_known(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node, path.name == "__init__.py")
            if source.split(".")[0] in PACKAGES:
                out.update(_known(f"{source}.{alias.name}", modules) for alias in node.names)
    return out - {None, module}


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (any level)."""
    modules = _project_modules()
    return {module: _imported(module, path, modules) for module, path in modules.items()}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A shortest import chain from `start` back to itself, [start, ..., start]; None if none."""
    came_from, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    chain = [module]
                    while came_from[chain[-1]] is not None:
                        chain.append(came_from[chain[-1]])
                    return [*reversed(chain), start]
                if target not in came_from:
                    came_from[target] = module
                    nxt.append(target)
        frontier = nxt
    return None


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph as the chain of modules, or None where there is none."""
    for module in sorted(graph):
        cycle = _cycle_from(module, graph)
        if cycle is not None:
            return cycle
    return None


def test_import_cycle_finder_on_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert import_cycle(graph) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_at_any_level():
    graph = import_graph()
    assert "goodhart_prof.analysis.facade" in graph["goodhart_prof.analysis"]  # `from .facade import analyze`
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
