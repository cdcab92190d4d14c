"""The layout docs/layout.md describes, machine-checked: tests mirror the package (every module has a
test file at its own path), no two module names one letter apart, every module says what it holds."""
from __future__ import annotations

import ast
import itertools

from tests.support.paths import ROOT

PACKAGES = ("goodhart_prof", "trainer")


def modules() -> list:
    """Every Python module of the two packages (package __init__ files and C sources aside)."""
    found = []
    for package in PACKAGES:
        found += [p for p in sorted((ROOT / package).rglob("*.py"))
                  if p.name != "__init__.py" and "__pycache__" not in p.parts]
    return found


def test_file_of(module) -> str:
    """goodhart_prof/analysis/gpu/idle.py -> tests/analysis/gpu/test_idle.py;
    trainer/env.py -> tests/trainer/test_env.py; trainer/__main__.py -> tests/trainer/test_main.py."""
    rel = module.relative_to(ROOT)
    parts = rel.parts[1:] if rel.parts[0] == "goodhart_prof" else rel.parts
    stem = module.stem.strip("_")
    return "/".join(("tests", *parts[:-1], f"test_{stem}.py"))


test_file_of.__test__ = False  # a helper, not a test


def test_every_module_has_a_test_file_at_its_own_path():
    missing = [f"{m.relative_to(ROOT)} -> {test_file_of(m)}" for m in modules()
               if not (ROOT / test_file_of(m)).is_file()]
    assert missing == []


def test_the_mapping_of_a_module_to_its_test_file():
    assert test_file_of(ROOT / "goodhart_prof" / "analysis" / "gpu" / "idle.py") == "tests/analysis/gpu/test_idle.py"
    assert test_file_of(ROOT / "goodhart_prof" / "cli.py") == "tests/test_cli.py"
    assert test_file_of(ROOT / "trainer" / "__main__.py") == "tests/trainer/test_main.py"


def _one_letter_apart(a: str, b: str) -> bool:
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def test_no_two_names_one_letter_apart():
    names = {p.stem for p in modules()}
    names |= {p.name for package in PACKAGES for p in (ROOT / package).rglob("*")
              if p.is_dir() and p.name != "__pycache__"}
    close = [(a, b) for a, b in itertools.combinations(sorted(names), 2) if _one_letter_apart(a, b)]
    assert close == []


def test_one_letter_apart_means_what_it_says():
    assert _one_letter_apart("hostops", "hotops") and _one_letter_apart("run", "runs")
    assert not _one_letter_apart("run", "run") and not _one_letter_apart("kernels", "kernel_rules")


def test_every_module_says_what_it_holds():
    silent = [str(p.relative_to(ROOT)) for p in modules() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert silent == []
