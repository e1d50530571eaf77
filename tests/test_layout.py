"""The package's layout, read from the source with ``ast`` (nothing is imported): how big a module
may grow, which way imports go between the library (``layernorm``) and the reproduction
(``layernorm_paper``), and that the operators (``layernorm.ops``) never reach back up into the
modules (``layernorm.rnn``) that call them. Each rule lists the files that still break it, so the
list can only shrink: a new offender fails, and so does an entry that no longer offends."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LIBRARY, PAPER = SRC / "layernorm", SRC / "layernorm_paper"
MAX_LINES = 500

# modules still over MAX_LINES (path under src -> why it is listed)
OVER_LIMIT: set[str] = set()
# library modules that import the reproduction, or run it by name: ``python -m layernorm`` (what
# docs/distributed.md's torchrun commands and the report's commands use) hands the process over to
# the reproduction's program, ``layernorm_paper.__main__``
LIBRARY_IMPORTS_PAPER = {"layernorm/__main__.py"}
# reproduction modules that import a private module of the library (the benchmark reads the C
# kernels' build through the public ``layernorm.ops.build``)
PAPER_IMPORTS_PRIVATE: set[str] = set()
# operator modules that reach into a module object (its private accessors) at run time
OPS_CLIMBING: set[str] = set()

# modules of the library that are not part of its public surface although their names have no
# leading underscore: the C kernels' loader
PRIVATE_MODULES = {"layernorm.ops.native"}


def _modules(root: Path):
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), path, ast.parse(path.read_text(), str(path))


def _imported(tree: ast.AST, path: Path) -> set[str]:
    """Every module name an import statement of ``tree`` names (relative imports resolved;
    ``from a import b`` gives both ``a`` and ``a.b``), at any depth (imports inside functions
    run too)."""
    package = path.relative_to(SRC).with_suffix("").parts
    package = package[:-1] if package[-1] != "__init__" else package[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package[:len(package) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _private(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "layernorm" and (
        name in PRIVATE_MODULES
        or any(p.startswith("_") and not p.startswith("__") for p in parts[1:]))


def test_no_module_over_the_line_limit():
    over = {name for name, path, _ in _modules(SRC)
            if len(path.read_text().splitlines()) > MAX_LINES}
    assert over == OVER_LIMIT


def _names_a_paper_module(tree: ast.AST) -> bool:
    """A string naming a module of the reproduction (what runpy or importlib load by name)."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and n.value.split(".")[0] == "layernorm_paper" for n in ast.walk(tree))


def test_the_library_never_imports_the_reproduction():
    found = {name for name, path, tree in _modules(LIBRARY)
             if any(n.split(".")[0] == "layernorm_paper" for n in _imported(tree, path))
             or _names_a_paper_module(tree)}
    assert found == LIBRARY_IMPORTS_PAPER


def test_the_reproduction_imports_public_library_names_only():
    found = {name for name, path, tree in _modules(PAPER)
             if any(_private(n) for n in _imported(tree, path))}
    assert found == PAPER_IMPORTS_PRIVATE


def test_the_operators_never_reach_up_into_the_modules():
    """``layernorm.ops`` takes tensors: it imports nothing of ``layernorm.rnn`` and calls no
    private accessor of a module object (``module._get``, ``module._terms``, ``term._update``)."""
    imports, climbing = set(), set()
    for name, path, tree in _modules(LIBRARY / "ops"):
        if any(n.startswith("layernorm.rnn") for n in _imported(tree, path)):
            imports.add(name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in ("_get", "_terms", "_update")
                    or isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "module" and node.attr.startswith("_")):
                climbing.add(name)
    assert imports == set()
    assert climbing == OPS_CLIMBING


def test_the_checks_read_what_they_claim():
    """The rules' own reading of imports: a relative import resolves to the absolute module."""
    path = LIBRARY / "ops" / "lstm.py"
    names = _imported(ast.parse("from .. import kernels\nfrom . import common\n"
                                "from ..recurrence.lengths import encode\n"), path)
    assert {"layernorm.kernels", "layernorm.ops.common",
            "layernorm.recurrence.lengths.encode"} <= names
    assert _private("layernorm._native_build") and _private("layernorm.ops.native")
    assert not _private("layernorm.vocabulary") and not _private("layernorm.__version__")
    assert _names_a_paper_module(ast.parse('runpy.run_module("layernorm_paper")'))


# ---- which path runs, and the files one call walks through

# The "which path runs" predicates: the functions and flags whose value chooses which
# implementation of a computation runs (the C kernels, the Triton kernels, the registered operator
# or its body, torch's own op, the reference loop), named as the library spells them: the C
# kernels' (``native.eager`` / ``eager_mode`` / ``native_lib``, the ``USE_NATIVE`` switch, a
# ``lib is None`` / ``lib is not None`` test of a loaded library, ``cell_lib`` / ``lib_for``), the
# Triton kernels' (``applies_rnn``, ``applies_norm``), the inference kernels'
# (``inference_applies``), the BN and plain recurrences' (``bn_applies`` / ``applies``,
# ``plain_applies``), the modules' conditions (``_fused_recurrence``, ``_fused_bn_recurrence``,
# ``_plain_recurrence``, ``_one_step_path``, ``exporting_to_onnx``), torch.func's
# (``under_functorch``) and autocast's (``autocast_on``). A site is a call of one of these names,
# a read of ``USE_NATIVE``, one ``lib`` comparison with None, or, outside ``ops/native.py``, a
# test of a field of the runtime answers (``where.lib`` / ``eager`` / ``transformed`` /
# ``autocast`` / ``onnx`` / ``triton`` in a condition: a choice made from the answers outside
# the one place that makes them), anywhere in a library file, definitions not counted.
#
# ``ops/native.py`` asks the runtime questions (``where``) and writes each operator's choice from
# the answers (``Where``'s methods, which the rule does not count there: that is their place);
# the entries call the path a method names. What is left: ``where``'s questions (``USE_NATIVE``,
# autocast on a device other than the CPU, Triton) and the Triton norms' choice in the
# normalization functions (``functional``).
PATH_PREDICATES = {"eager", "eager_mode", "native_lib", "applies_rnn", "applies_norm",
                   "inference_applies", "applies", "bn_applies", "plain_applies", "lib_for",
                   "cell_lib", "autocast_on", "under_functorch", "exporting_to_onnx",
                   "_fused_recurrence", "_fused_bn_recurrence", "_plain_recurrence",
                   "_one_step_path"}
WHERE_FIELDS = {"lib", "eager", "transformed", "autocast", "onnx", "triton"}
# call sites per library file (path under src -> count)
PREDICATE_SITES = {"layernorm/functional.py": 2, "layernorm/ops/native.py": 3}
# Sites the rule matches that choose no implementation, by (file, enclosing function), with why.
# Not counted; each must still hold a site (a stale entry fails), so a new one is a decision
# written here.
NOT_A_PATH = {
    ("layernorm/checks.py", "check_dtype"):
        "torch's input-dtype check, skipped under autocast as torch skips it",
    ("layernorm/checks.py", "check_state_dtype"): "the same check of a state's dtype",
    ("layernorm/rnn/modules.py", "_autocast_dtype"):
        "the dtype the readable loop returns under autocast",
    ("layernorm/rnn/fused.py", "USE_NATIVE"):
        "the switch's public accessor: reads and sets ``native.USE_NATIVE``",
    ("layernorm/ops/build.py", "describe"): "a report of what the kernels were built for",
    ("layernorm/ops/native.py", "loaded"):
        "a body's look-up of the kernels its entry chose: an error where the process has none",
}
# the operator entries that ask ``native.where`` (once each): file -> the functions that call it
WHERE_CALLERS = {
    "layernorm/ops/bn.py": {"bn_direction"},
    "layernorm/ops/cell.py": {"lstm_cell", "gru_cell", "rnn_cell"},
    "layernorm/ops/gemm.py": {"input_linear"},
    "layernorm/ops/lstm.py": {"plain_runs"},
    "layernorm/ops/sequence.py": {"_enter"},   # (and ``choose_inference``: ``native.inference``)
}
# the library files ``LSTM(32, 64, norm="layer")`` visits, built, run forward and backward on
# CPU float32 tensors with the C kernels loaded
LSTM_PATH = {
    "layernorm/checks.py",
    "layernorm/ops/common.py",
    "layernorm/ops/gemm.py", "layernorm/ops/lstm.py",
    "layernorm/ops/native.py",
    "layernorm/ops/sequence.py", "layernorm/rnn/base.py",
    "layernorm/rnn/modules.py",
}


def _enclosing(tree: ast.AST) -> dict[ast.AST, str | None]:
    """Each node of ``tree`` -> the name of the innermost function holding it (its decorators
    included), None at module level."""
    owner: dict[ast.AST, str | None] = {}

    def visit(node, name):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else name
            owner[child] = inner
            visit(child, inner)
    visit(tree, None)
    return owner


def _conditions(tree: ast.AST):
    """The expressions of ``tree`` whose value is tested: if / while / conditional-expression
    tests, the operands of ``and`` / ``or`` / ``not`` and of comparisons."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            yield node.test
        elif isinstance(node, ast.BoolOp):
            yield from node.values
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node.operand
        elif isinstance(node, ast.Compare):
            yield node.left
            yield from node.comparators


def _predicate_sites(tree: ast.AST, name: str = "") -> list[ast.AST]:
    """The "which path" sites of one module (``name``: its path under src), as nodes."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if called in PATH_PREDICATES:
                found.append(node)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            if (node.id if isinstance(node, ast.Name) else node.attr) == "USE_NATIVE":
                found.append(node)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and node.left.id == "lib":
            if any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
                found.append(node)
    if name != "layernorm/ops/native.py":
        fields = {id(n): n for e in _conditions(tree) for n in ast.walk(e)
                  if isinstance(n, ast.Attribute) and n.attr in WHERE_FIELDS
                  and isinstance(n.value, ast.Name) and n.value.id == "where"}
        found.extend(fields.values())
    return found


def _path_sites() -> tuple[dict[str, int], set]:
    """-> (path sites per library file, the ``NOT_A_PATH`` entries that excused a site)."""
    counted: dict[str, int] = {}
    excused = set()
    for name, _, tree in _modules(LIBRARY):
        owner = _enclosing(tree)
        for node in _predicate_sites(tree, name):
            key = (name, owner.get(node))
            if key in NOT_A_PATH:
                excused.add(key)
            else:
                counted[name] = counted.get(name, 0) + 1
    return counted, excused


def test_which_path_predicates_sit_where_listed():
    counted, excused = _path_sites()
    assert counted == PREDICATE_SITES, (sum(counted.values()), counted)
    assert excused == set(NOT_A_PATH), set(NOT_A_PATH) - excused


def test_the_rule_counts_a_choice_made_from_the_answers():
    """The rule sees a path chosen outside ``ops/native.py`` from ``where``'s fields, and a
    ``lib`` test, and not a path named by ``where``'s methods."""
    outside = ast.parse("def entry(x):\n    where = native.where(x)\n"
                        "    if where.lib is None or not where.eager:\n        return None\n"
                        "    lib = where.c(x)\n    return f(lib) if lib is not None else g(x)\n")
    assert len(_predicate_sites(outside, "layernorm/ops/other.py")) == 3
    assert len(_predicate_sites(outside, "layernorm/ops/native.py")) == 1
    named = ast.parse("def entry(x):\n    where = native.where(x)\n"
                      "    return PATHS[where.linear(x)](x, where.autocast)\n")
    assert _predicate_sites(named, "layernorm/ops/other.py") == []


def test_only_operator_entries_ask_where_a_call_runs():
    """``native.where`` is called once by each operator entry and by nothing else (no module,
    cell or helper asks the runtime questions)."""
    found: dict[str, set[str]] = {}
    for name, _, tree in _modules(LIBRARY):
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Attribute) and n.func.attr == "where"
                     and isinstance(n.func.value, ast.Name) and n.func.value.id == "native"]
            if calls:
                assert len(calls) == 1, (name, fn.name, len(calls))
                found.setdefault(name, set()).add(fn.name)
    assert found == WHERE_CALLERS


def _trace_files(fn):
    """Run ``fn`` under ``sys.settrace`` -> (every library file a call entered, the calls that
    entered a file still running further down the stack below another library file: a call
    that bounced back up). Torch's own frames between two library frames are transparent."""
    import sys

    def lib_file(code):
        path = Path(code.co_filename).resolve()
        return path.relative_to(SRC).as_posix() if path.is_relative_to(LIBRARY) else None

    visited, bounced = set(), []

    def tracer(frame, event, arg):
        me = lib_file(frame.f_code) if event == "call" else None
        if me is None:
            return None
        below, up = frame.f_back, None
        while below is not None and (up := lib_file(below.f_code)) is None:
            below = below.f_back
        if up != me:
            visited.add(me)
            while below is not None:
                if lib_file(below.f_code) == me:
                    bounced.append((up, me))
                    break
                below = below.f_back
        return None

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return visited, bounced


def test_the_lstm_call_walks_its_files_once_downward():
    """``LSTM(32, 64, norm="layer")`` built, run forward and backward (CPU float32): the library
    files it enters are ``LSTM_PATH``, and no call enters a file that is still running further
    down the stack (the module -> operator -> frame -> backend -> helpers order, no callback
    climbing back). The C kernels are loaded first: their one-time load is not part of a call."""
    import pytest
    import torch

    import layernorm
    from layernorm.ops import native

    if native.load() is None:
        pytest.skip("the C kernels are not available here")
    x = torch.randn(20, 8, 32)

    def run():
        module = layernorm.LSTM(32, 64, norm="layer")
        out, (h, c) = module(x)
        (out.sum() + h.sum() + c.sum()).backward()
    visited, bounced = _trace_files(run)
    assert bounced == []
    assert visited == LSTM_PATH
