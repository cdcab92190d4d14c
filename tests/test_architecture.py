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
