"""A user frame's function in its source (analysis/host/source_lines.py): the body `find_body`
finds by name and line (or none where the source does not match the trace), its call sites with
the event classes each can make and whether it runs once per pass, `with` annotations as
segments and `prof.step()` loops."""
from __future__ import annotations

import ast

import pytest

from goodhart_prof.analysis.host.source_lines import STEP_SEGMENT, find_body, steps_profiler


@pytest.mark.parametrize("body, segment", [
    ("for i in x:\n    y = t.item()\n    prof.step()\n", True),
    ("while go:\n    profiler.step()\n    y = t.item()\n", True),
    ("for i in x:\n    y = t.item()\n    prof.step()\n    z = t.item()\n", False),  # a rotated pass
    ("for i in x:\n    y = t.item()\n    opt.step()\n", False),  # the optimizer's step
    ("for i in x:\n    y = t.item()\n    prof.step(1)\n", False),
])
def test_which_loops_are_profiler_step_segments(body, segment):
    loop = ast.parse(body).body[0]
    assert steps_profiler(loop.body) is segment
    assert STEP_SEGMENT == "ProfilerStep"


def _body(code: str, fn: str, line: int):
    return find_body(ast.parse(code), fn, line, running=False)


def test_sites_in_loops_branches_and_nested_functions_are_not_single():
    code = ("def f(x, xs):\n"            # 1
            "    a = x.item()\n"          # 2
            "    for y in xs:\n"          # 3
            "        y.item()\n"          # 4
            "    if a:\n"                 # 5
            "        x.item()\n"          # 6
            "    def g():\n"              # 7
            "        return x.item()\n"   # 8
            "    return [z.item() for z in xs]\n")  # 9
    body = _body(code, "f", 1)
    items = body.candidates("item", -1)
    assert [(s.line, s.single[0]) for s in items] == [(2, True), (4, False), (6, False), (9, False)]
    assert [s.line for s in body.candidates("truth", -1)] == [5]  # `if a:`
    assert _body(code, "f", 2) is None  # no `def f` on line 2: the source does not match
    assert find_body(ast.parse(code), "f", 4, running=True).running  # running inside f at line 4
    assert find_body(ast.parse(code), "f", 8, running=True) is None  # line 8 is g's code


def test_phase_withs_are_segments():
    code = ("def train(hooks, t):\n"
            "    with hooks.iteration(0):\n"
            "        with hooks.phase('rollout'):\n"
            "            t.item()\n"
            "        with hooks.phase('logging'):\n"
            "            print(t)\n")
    body = _body(code, "train", 1)
    assert set(body.phases) == {"ProfilerStep", "rollout", "logging"}
    (rollout,) = body.phases["rollout"]
    (logging,) = body.phases["logging"]
    assert [s.line for s in body.candidates("item", rollout)] == [4]
    assert [s.line for s in body.candidates("item", logging)] == [6]  # print(t) can read
    assert [s.line for s in body.candidates("item", -1)] == [4, 6]
    assert _body("def f(t):\n    print('constant')\n", "f", 1).candidates("item", -1) == []


def test_subscripts_and_comprehension_conditions_are_candidates():
    code = ("def f(x, xs, i, mask):\n"                 # 1
            "    a = x[0] + x[:4] + x[..., -1]\n"       # 2: constant indexes: neither index nor item
            "    b = x[mask]\n"                         # 3: a tensor index (or a list's __index__)
            "    c = [y for y in xs if y.any()]\n"      # 4: `if t` inside a comprehension
            "    return x.item()\n")                    # 5
    body = _body(code, "f", 1)
    assert [s.line for s in body.candidates("index", -1)] == [3]
    assert [s.line for s in body.candidates("item", -1)] == [3, 5]
    assert [(s.line, s.single[0]) for s in body.candidates("truth", -1)] == [(4, False)]
