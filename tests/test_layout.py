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
OVER_LIMIT = {"layernorm_paper/bench/rnn.py", "layernorm_paper/verdicts.py"}
# library modules that import the reproduction, or run it by name: ``python -m layernorm`` (what
# docs/distributed.md's torchrun commands and the report's commands use) hands the process over to
# the reproduction's program, ``layernorm_paper.__main__``
LIBRARY_IMPORTS_PAPER = {"layernorm/__main__.py"}
# reproduction modules that import a private module of the library: the benchmark reads the C
# kernels' build (``ops.native``: load, simd_name, compiler, _build)
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
