"""The source of a user frame: which lines of its function can make an event of a given class.

A profiler trace names Python functions (`file.py(N): fn`: N is the function's `def` line, or for
a frame already running when tracing began, and for `<module>`, the line it was at then), never
the line of a call. This module reads the file (absolute, or relative to the trace's folder, its
parent or the current directory; cached per file), finds the function by name and line with `ast`
(the body of a `def fn` whose first line, decorators included, is N; else the innermost `def fn`
whose body holds N, which then was running when tracing began; `<module>`: the module body, N
outside every `def`/`class`), and lists its **call sites**: each call or implicit read in that
body (nested `def`/`class`/`lambda` bodies excluded) with the event classes it can make
(ATTR_CLASSES, NAME_CLASSES: `item` for `.item()`, `float(t)`, `int(t)`, `math.f(t)`,
`torch.tensor([t, ...])`; `truth` for `if t:`, `bool(t)`, `not t`, `and`/`or`, `assert`, a
comprehension's `if`; `nonzero`, `masked_select`; `copy` for `.to()`, `.cpu()`, `.cuda()`,
`.numpy()`, `.tolist()`, `torch.as_tensor`, tensor creation, dtype casts; `index` and `item` for a
subscript not made of constants (a tensor index, or `Tensor.__index__`);
`any` for `print`/`str`/`repr`/`format`/f-strings of something not constant, which can make any
of them; `call:NAME` for every call by its name, matched to a library frame it opens).

Each site says whether it is `single`: it runs at most once per pass through its segment, in
source order (not inside a loop, a branch, a handled `try`, a comprehension, the right of
`and`/`or`, an assignment target) and makes at most one event (MULTI_ATTRS and MULTI_NAMES may
make several, e.g. `model.to(dev)`, `max(a, b)` or `print(t)`), and whether it is `certain` to
make exactly one (`torch.nonzero(x)`, `torch.where(cond)`: CERTAIN_CALLS). Segments are the bodies of `with` statements that record an
annotation by a literal name (`hooks.phase("rollout")`, `record_function("x")`; `.iteration(...)`
for `ProfilerStep#N`): analysis/host/line_sites.py places an event among the sites of the segment whose
annotation holds it. Unreadable, unparsable or changed-looking source gives no body: the caller
then claims no line (source_files.py finds and reads the files).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

STEP_SEGMENT = "ProfilerStep"  # the segment key of `with hooks.iteration(it):` and of a `prof.step()` loop

# Calls by name -> the event classes they can make. Attribute calls (`x.item()`) and plain-name
# calls (`float(x)`) differ: `.float()` is a copy (aten::to), `float(t)` a read (aten::item).
ATTR_CLASSES = {
    "item": ("item",), "nonzero": ("nonzero",), "argwhere": ("nonzero",), "where": ("nonzero",),
    "nonzero_static": ("nonzero",), "masked_select": ("masked_select",),
    "to": ("copy",), "cpu": ("copy",), "cuda": ("copy",), "numpy": ("copy",), "tolist": ("copy",),
    "as_tensor": ("copy",), "tensor": ("copy",), "from_numpy": ("copy",), "asarray": ("copy",),
    "copy_": ("copy",), "pin_memory": ("copy",), "type": ("copy",), "float": ("copy",),
    "double": ("copy",), "half": ("copy",), "bfloat16": ("copy",), "long": ("copy",),
    "int": ("copy",), "bool": ("copy",), "Tensor": ("copy",), "synchronize": ("sync",),
}
NAME_CLASSES = {
    "float": ("item",), "int": ("item",), "complex": ("item",), "round": ("item",),
    "bool": ("truth",), "any": ("truth",), "all": ("truth",), "min": ("truth",), "max": ("truth",),
    "sorted": ("truth",), "range": ("item",), "nonzero": ("nonzero",), "where": ("nonzero",),
    "masked_select": ("masked_select",), "as_tensor": ("copy",), "tensor": ("copy",),
    "from_numpy": ("copy",), "Tensor": ("copy",), "synchronize": ("sync",),
}
# Calls that format their arguments: with anything but constants they can make any event.
FORMAT_CALLS = frozenset({"print", "str", "repr", "format"})
# `torch.NAME(...)` calls that make exactly one event of their class each time they run (any
# argument is a tensor or an error): `torch.where` only with the condition alone.
CERTAIN_CALLS = frozenset({"nonzero", "argwhere", "masked_select"})
# Calls that can make several events of their class in one run (a module's `.to()` moves every
# parameter; `any`/`min`/... compare element by element).
MULTI_ATTRS = frozenset({"to", "cpu", "cuda", "float", "double", "half", "bfloat16", "long", "int",
                         "bool", "type", "synchronize"})
MULTI_NAMES = frozenset({"any", "all", "min", "max", "sorted", "range"})


@dataclass(frozen=True)
class CallSite:
    line: int
    order: tuple[int, int, int]  # execution order: (statement number, end line, end column)
    classes: frozenset[str]
    single: tuple[bool, ...]  # per segment in `segments`: runs at most once per pass, in order
    segments: tuple[int, ...]  # the body (-1), then each enclosing annotation `with`, outermost first
    multi: bool = False  # may make several events of its class in one run
    certain: bool = False  # makes exactly one event of its class each run (CERTAIN_CALLS)


@dataclass
class Body:
    """A frame's function in its source: where it is and its call sites."""

    function: str
    def_line: int | None  # the `def` line; None for module code
    running: bool  # the frame's line is where it ran when tracing began, not its def
    sites: list[CallSite] = field(default_factory=list)
    phases: dict[str, list[int]] = field(default_factory=dict)  # annotation -> `with` segments
    _found: dict = field(default_factory=dict, repr=False)  # candidates() answers

    def candidates(self, cls: str, segment: int) -> list[CallSite]:
        """Sites of `segment` (-1: the whole body) that can make an event of class `cls`, in
        execution order (found once per class and segment)."""
        key = (cls, segment)
        if key not in self._found:
            out = [s for s in self.sites if segment in s.segments
                   and (cls in s.classes or (not cls.startswith("call:") and "any" in s.classes))]
            self._found[key] = sorted(out, key=lambda s: s.order)
        return self._found[key]


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _first_line(node: ast.AST) -> int:
    decos = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decos])


def _scopes(tree: ast.Module) -> list[ast.AST]:
    """The file's `def`s and `class`es, found once per parsed file."""
    found = tree.__dict__.get("_goodhart_scopes")
    if found is None:
        found = tree.__dict__["_goodhart_scopes"] = [
            n for n in ast.walk(tree) if isinstance(n, (*_DEFS, ast.ClassDef))]
    return found


def find_body(tree: ast.Module, function: str, line: int, running: bool = True) -> Body | None:
    if function == "<module>":
        if not running and line != 1:
            return None  # module code entered while tracing (an import) starts at line 1
        if line < 1 or any(_first_line(n) < line <= n.end_lineno for n in _scopes(tree)):
            return None  # the module frame's line must lie in module code
        if running and not _calls_at(tree.body, line):
            return None  # it was running a call on that line: the source changed
        return _collect(Body(function, None, True), tree.body)
    defs = [n for n in _scopes(tree) if isinstance(n, _DEFS) and n.name == function]
    exact = [n for n in defs if _first_line(n) == line]
    if len(exact) == 1:
        return _collect(Body(function, _first_line(exact[0]), False), exact[0].body)
    if exact or not running:
        return None  # two defs of one name on one line; or no def there: the source changed
    holding = [n for n in defs if n.body[0].lineno <= line <= n.end_lineno]
    if not holding:
        return None  # the source does not match the trace (changed since, or another file)
    inner = max(holding, key=lambda n: n.lineno)
    if not _calls_at(inner.body, line):
        return None  # a running frame is at a statement making a call: the source changed
    if any(n is not inner and inner.lineno < n.lineno and _first_line(n) <= line <= n.end_lineno
           for n in ast.walk(inner) if isinstance(n, _SCOPES)):
        return None  # the line lies in a nested scope, not in this function's own code
    return _collect(Body(function, _first_line(inner), True), inner.body)


def _constant_index(node: ast.expr) -> bool:
    """An index made of constants (`x[0]`, `x[:4]`, `x[..., -1]`): never a tensor, so neither
    aten::index nor Tensor.__index__."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _constant_index(node.operand)
    if isinstance(node, ast.Slice):
        return all(p is None or _constant_index(p) for p in (node.lower, node.upper, node.step))
    if isinstance(node, ast.Tuple):
        return all(_constant_index(e) for e in node.elts)
    return False


def _calls_at(stmts: list[ast.stmt], line: int) -> bool:
    """Whether a statement of this code (nested scopes aside) starts on `line` and calls
    something there (a call, or a `with` entering a context)."""
    for node in _own_nodes(stmts):
        if isinstance(node, ast.stmt) and node.lineno == line:
            if isinstance(node, (ast.With, ast.AsyncWith)) or any(
                    isinstance(n, ast.Call) and n.lineno == line for n in ast.walk(node)):
                return True
    return False


def _own_nodes(stmts: list[ast.stmt]):
    todo = list(stmts)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _collect(body: Body, stmts: list[ast.stmt]) -> Body:
    _Walker(body).block(stmts, (-1,), (True,))
    return body


def _phase_key(item: ast.withitem) -> str | None:
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return None
    if isinstance(call.func, ast.Attribute) and call.func.attr == "iteration":
        return STEP_SEGMENT
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


_PROFILER_NAME = re.compile(r"prof", re.I)  # prof, profiler, torch_profiler, p_prof...


def steps_profiler(body: list[ast.stmt]) -> bool:
    """Whether the first or last statement of a loop body is `<profiler>.step()` (no arguments,
    called on a name that says profiler): every ProfilerStep#N interval then holds one pass of the
    body in source order. A step() in the middle would rotate the pass: not a segment."""
    for stmt in (body[0], body[-1]) if body else ():
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (isinstance(call, ast.Call) and not call.args and not call.keywords
                and isinstance(call.func, ast.Attribute) and call.func.attr == "step"
                and isinstance(call.func.value, ast.Name) and _PROFILER_NAME.search(call.func.value.id)):
            return True
    return False


class _Walker:
    """Collects a body's call sites with their segments and whether each is single."""

    def __init__(self, body: Body):
        self.out = body
        self.stmt = 0
        self.next_segment = 0

    def block(self, stmts, segs, single):
        for s in stmts:
            self.statement(s, segs, single)

    def statement(self, s, segs, single):
        self.stmt += 1
        nope = tuple(False for _ in single)
        if isinstance(s, _SCOPES):
            for d in getattr(s, "decorator_list", []):
                self.expr(d, segs, single)
            if isinstance(s, _DEFS):
                for d in s.args.defaults + [d for d in s.args.kw_defaults if d is not None]:
                    self.expr(d, segs, single)
            else:
                for b in s.bases + [k.value for k in s.keywords]:
                    self.expr(b, segs, single)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter, segs, single)
            self.expr(s.target, segs, nope)
            self.loop_body(s, segs, nope)
        elif isinstance(s, ast.While):
            self.truth(s.test, segs, nope)
            self.loop_body(s, segs, nope)
        elif isinstance(s, ast.If):
            self.truth(s.test, segs, single)
            self.block(s.body + s.orelse, segs, nope)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            keys = []
            for item in s.items:
                self.expr(item.context_expr, segs, single)
                if item.optional_vars is not None:
                    self.expr(item.optional_vars, segs, single)
                keys.append(_phase_key(item))
            inner_segs, inner_single = segs, single
            for key in keys:
                if key is not None:
                    seg = self.next_segment
                    self.next_segment += 1
                    self.out.phases.setdefault(key, []).append(seg)
                    inner_segs, inner_single = inner_segs + (seg,), inner_single + (True,)
            self.block(s.body, inner_segs, inner_single)
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            handled = bool(s.handlers)
            self.block(s.body, segs, nope if handled else single)
            for h in s.handlers:
                if h.type is not None:
                    self.expr(h.type, segs, nope)
                self.block(h.body, segs, nope)
            self.block(s.orelse, segs, nope if handled else single)
            self.block(s.finalbody, segs, single)
        elif isinstance(s, ast.Assert):
            self.truth(s.test, segs, single)
            if s.msg is not None:
                self.expr(s.msg, segs, nope)
        elif isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            if s.value is not None:
                self.expr(s.value, segs, single)
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                self.expr(t, segs, nope)  # targets run after the value: order not claimed
        elif type(s).__name__ == "Match":
            self.expr(s.subject, segs, single)
            for case in s.cases:
                if case.guard is not None:
                    self.truth(case.guard, segs, nope)
                self.block(case.body, segs, nope)
        else:
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self.expr(child, segs, single)

    def loop_body(self, s, segs, single):
        """A loop's body; one that starts or ends with the profiler's `prof.step()` runs one
        pass per ProfilerStep#N (torch.profiler's schedule style, no `with` per iteration): its
        body is then that step's segment, as `with hooks.iteration(it):` makes it."""
        if steps_profiler(s.body):
            seg = self.next_segment
            self.next_segment += 1
            self.out.phases.setdefault(STEP_SEGMENT, []).append(seg)
            self.block(s.body, segs + (seg,), single + (True,))
            self.block(s.orelse, segs, single)
        else:
            self.block(s.body + s.orelse, segs, single)

    def site(self, node, classes, segs, single, multi=False, certain=False):
        if not classes:
            return
        order = (self.stmt, node.end_lineno or node.lineno, node.end_col_offset or 0)
        self.out.sites.append(CallSite(node.lineno, order, frozenset(classes), tuple(single),
                                       tuple(segs), multi, certain))

    def truth(self, node, segs, single):
        """An expression whose truth value is taken (`if`, `while`, `assert`, `not`, and/or)."""
        self.expr(node, segs, single)
        if not isinstance(node, (ast.BoolOp, ast.UnaryOp)) or (
                isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not)):
            if not (isinstance(node, ast.Constant)):
                self.site(node, ("truth",), segs, single)

    def expr(self, node, segs, single):
        nope = tuple(False for _ in single)
        if isinstance(node, ast.Lambda):
            for d in node.args.defaults:
                self.expr(d, segs, single)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            gens = node.generators
            self.expr(gens[0].iter, segs, single)
            for g in gens:
                if g is not gens[0]:
                    self.expr(g.iter, segs, nope)
                self.expr(g.target, segs, nope)
                for cond in g.ifs:  # `[x for x in xs if t]` takes the truth of t
                    self.truth(cond, segs, nope)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                self.expr(part, segs, nope)
            return
        if isinstance(node, ast.IfExp):
            self.truth(node.test, segs, single)
            self.expr(node.body, segs, nope)
            self.expr(node.orelse, segs, nope)
            return
        if isinstance(node, ast.BoolOp):
            for i, v in enumerate(node.values):
                self.truth(v, segs, single if i == 0 else nope)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.truth(node.operand, segs, single)
            return
        if isinstance(node, ast.Compare):
            self.expr(node.left, segs, single)
            for c in node.comparators:
                self.expr(c, segs, single if len(node.comparators) == 1 else nope)
            if len(node.comparators) > 1 or any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                self.site(node, ("truth", "item"), segs, nope, multi=True)
            return
        for child in ast.iter_child_nodes(node):
            self._children(child, segs, single)
        if isinstance(node, ast.Call):
            self.call(node, segs, single)
        elif isinstance(node, ast.Subscript) and not _constant_index(node.slice):
            # a tensor index: aten::index (a mask: nonzero); on a list, Tensor.__index__: item
            one = isinstance(node.ctx, ast.Load) and not isinstance(node.slice, ast.Tuple)
            self.site(node, ("index", "item"), segs, single if one else nope)
        elif isinstance(node, ast.FormattedValue) and not isinstance(node.value, ast.Constant):
            self.site(node, ("any",), segs, nope, multi=True)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and (
                isinstance(node.left, (ast.Constant, ast.JoinedStr))
                and isinstance(getattr(node.left, "value", ""), str)):
            self.site(node, ("any",), segs, nope, multi=True)

    def _children(self, child, segs, single):
        if isinstance(child, ast.expr):
            self.expr(child, segs, single)
        elif isinstance(child, ast.keyword):
            self.expr(child.value, segs, single)

    def call(self, node: ast.Call, segs, single):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name is None:
            return
        classes = {f"call:{name}"}
        classes.update((ATTR_CLASSES if isinstance(f, ast.Attribute) else NAME_CLASSES).get(name, ()))
        multi = name in (MULTI_ATTRS if isinstance(f, ast.Attribute) else MULTI_NAMES)
        args = list(node.args) + [k.value for k in node.keywords]
        if name in FORMAT_CALLS and any(not isinstance(a, ast.Constant) for a in args):
            classes.add("any")
            multi = True
        module = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
        displays = (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)
        if module == "math" or (name in ("tensor", "as_tensor") and node.args
                                and isinstance(node.args[0], displays)):
            classes.add("item")  # math.f(t) takes float(t); torch.tensor([t, ...]) reads each
            multi = True
        on_torch = module == "torch"
        certain = on_torch and (name in CERTAIN_CALLS or (
            name == "where" and len(node.args) == 1 and not node.keywords))
        self.site(node, classes, segs, single, multi, certain)
