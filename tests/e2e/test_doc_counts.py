"""Counts the docs state about the rules and the zoo equal what the code registers (issue 39):
README and docs/*.md are scanned for "<number> rules" and "<number> ... patterns", and each number
must be one the registries give (or be listed below as a count of something else, with why)."""
from __future__ import annotations

import re

from goodhart_prof.analysis.rules import RULES, ZOO_RULES
from trainer.zoo import CPU_DETECTABLE, ZOO
from tests.support.paths import ROOT

WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty "
                                    "twenty-one twenty-two".split())}
COUNT = r"(\d+|" + "|".join(sorted(WORDS, key=len, reverse=True)) + r")"
RULE_COUNTS = {len(RULES): "rules registered", len(ZOO_RULES): "rules the zoo plants",
               len(ZOO) - len(CPU_DETECTABLE): "zoo rules a CPU trace cannot show"}
PATTERN_COUNTS = {len(ZOO): "zoo patterns", len(CPU_DETECTABLE): "patterns a CPU trace can show",
                  len(ZOO) - len(CPU_DETECTABLE): "patterns only a GPU trace shows"}
# Numbers of patterns that count something other than the registry (a measurement's progress)
OTHER = {("docs/zoo.md", "eleven patterns"): "not measured on a GPU yet: 12 less the one measured",
         ("docs/zoo.md", "seven patterns"): "the CPU bench run before graph_break joined the zoo",
         ("docs/gpu.md", "eleven zoo patterns"): "the zoo of that GPU session (2026-11-26): graph_break came later",
         ("docs/gpu.md", "5 patterns"): "the plan: how many patterns a 480 s budget reaches"}


def _number(text: str) -> int:
    return int(text) if text.isdigit() else WORDS[text.lower()]


def _stated(pattern: str):
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in path.read_text().splitlines():
            for m in re.finditer(pattern, line, flags=re.IGNORECASE):
                yield str(path.relative_to(ROOT)), m.group(0), _number(m.group(1))


def test_rule_counts_in_the_docs_are_the_registrys():
    found = list(_stated(rf"\b{COUNT} (?:zoo )?rules\b"))
    assert found  # the README states the count
    wrong = [(f, text) for f, text, n in found if n not in RULE_COUNTS and (f, text) not in OTHER]
    assert wrong == []
    assert ("README.md", f"{len(RULES)} rules", len(RULES)) in found


def test_pattern_counts_in_the_docs_are_the_zoos():
    found = list(_stated(rf"\b{COUNT} (?:zoo |planted )?patterns\b"))
    wrong = [(f, text) for f, text, n in found if n not in PATTERN_COUNTS and (f, text) not in OTHER]
    assert wrong == []


def test_the_registries_hold_what_the_docs_name():
    assert len(RULES) == 22 and len(ZOO) == len(ZOO_RULES) == 12 and len(CPU_DETECTABLE) == 8
    assert {p.name for p in ZOO} == set(ZOO_RULES)
