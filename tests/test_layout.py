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
# (``under_functorch``) and autocast's (``autocast_on``, also where it relaxes a dtype check). A
# call site is a call of one of these names (or a read of ``USE_NATIVE``, or one ``lib``
# comparison with None) anywhere in a library file, definitions not counted. (Most of these names
# are gone: the runtime questions are asked in ``ops.native.where``, once per operator entry,
# ``WHERE_CALLERS``. What is left: ``where`` itself (autocast, Triton, ``USE_NATIVE``) and the
# kernels' look-up that raises where none are loaded (``native``); the operator entries' choices
# from its answers (a ``lib`` test in ``cell`` and ``gemm``; the entries that test the answers'
# fields, ``where.lib is None`` or ``where.c(...) is None``, are not counted by this rule); the
# Triton norms' choice (``functional``); the kernels' description (``build``); the ``USE_NATIVE``
# switch's property
# (``rnn.fused``); autocast in the dtype checks (``checks``) and in the readable loop's output
# dtype (``rnn.modules``).)
PATH_PREDICATES = {"eager", "eager_mode", "native_lib", "applies_rnn", "applies_norm",
                   "inference_applies", "applies", "bn_applies", "plain_applies", "lib_for",
                   "cell_lib", "autocast_on", "under_functorch", "exporting_to_onnx",
                   "_fused_recurrence", "_fused_bn_recurrence", "_plain_recurrence",
                   "_one_step_path"}
# call sites per library file (path under src -> count)
PREDICATE_SITES = {
    "layernorm/checks.py": 2, "layernorm/functional.py": 2, "layernorm/ops/build.py": 1,
    "layernorm/ops/cell.py": 2, "layernorm/ops/native.py": 5,
    "layernorm/ops/gemm.py": 1, "layernorm/rnn/fused.py": 2, "layernorm/rnn/modules.py": 1,
}
# the operator entries that ask ``native.where`` (once each): file -> the functions that call it
WHERE_CALLERS = {
    "layernorm/ops/bn.py": {"bn_direction"},
    "layernorm/ops/cell.py": {"lstm_cell", "gru_cell", "rnn_cell"},
    "layernorm/ops/gemm.py": {"input_linear"},
    "layernorm/ops/lstm.py": {"plain_runs"},
    "layernorm/ops/sequence.py": {"choose_inference", "_enter"},
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


def _predicate_sites(tree: ast.AST) -> int:
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            found += name in PATH_PREDICATES
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            found += (node.id if isinstance(node, ast.Name) else node.attr) == "USE_NATIVE"
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and node.left.id == "lib":
            found += any(isinstance(c, ast.Constant) and c.value is None
                         for c in node.comparators)
    return found


def test_which_path_predicates_sit_where_listed():
    found = {name: n for name, _, tree in _modules(LIBRARY) if (n := _predicate_sites(tree))}
    assert found == PREDICATE_SITES, (sum(found.values()), found)


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
