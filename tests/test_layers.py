"""The packages' shape: their import graph (read with ``ast``, nothing imported) has no cycles, the
library never imports the reproduction, the runner knows nothing above it, and the names of the
norms live in one table."""
from __future__ import annotations

import ast
from pathlib import Path

import layernorm
import layernorm_paper

PACKAGES = {"layernorm": Path(layernorm.__file__).parent,
            "layernorm_paper": Path(layernorm_paper.__file__).parent}

# Cycles allowed: none (every import, those inside functions included, points one way).
ALLOWED_CYCLES: list[set[str]] = []


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES.values():
        for path in pkg.rglob("*.py"):
            rel = path.relative_to(pkg.parent).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            mods[".".join(parts)] = path
    return mods


def _targets(module: str, is_package: bool, node: ast.AST, mods: dict) -> list[str]:
    """The package modules an import statement loads (``from .x import y``: ``x.y`` where y is a
    module, else ``x``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] in PACKAGES]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
        if target.split(".")[0] not in PACKAGES:
            return []
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]


def _named_modules(tree: ast.AST, mods: dict) -> set[str]:
    """The package modules a file names in a string (``"layernorm_paper.models.paper"``), not in
    a docstring: what ``importlib.import_module`` or a list of module names handed to a loader
    would import by name. Dotted names only (the bare ``"layernorm"`` is the project's name in
    messages and metadata)."""
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value
            and n.value in mods and id(n) not in docstrings}


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, at the top or inside a function (a lazy import is
    still a dependency), or by name (a module's dotted name in a string, as importlib takes it);
    imports under ``if TYPE_CHECKING:`` are for type checkers only."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(module, path.name == "__init__.py", node, mods):
                    while t not in mods:                 # an attribute of a module: the module
                        t = t.rsplit(".", 1)[0]
                    if t != module:
                        graph[module].add(t)
        graph[module] |= _named_modules(tree, mods) - {module}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import cycles: components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_an_import_by_name_is_an_import():
    tree = ast.parse('"""layernorm_paper.cli in a docstring is no import."""\n'
                     'import importlib\nimportlib.import_module("layernorm_paper.cli")\n'
                     'NAMES = ("layernorm_paper.demo", "layernorm")')
    assert _named_modules(tree, _modules()) == {"layernorm_paper.cli", "layernorm_paper.demo"}


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(g) == [{"a", "b", "c"}]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycles():
    graph = import_graph()
    assert "layernorm.functional" in graph["layernorm.norms"]          # the reader reads
    assert "layernorm_paper.experiments.registry" in graph["layernorm_paper.experiments.config"]
    cycles = [c for c in strongly_connected(graph) if c not in ALLOWED_CYCLES]
    assert cycles == [], f"import cycles: {[sorted(c) for c in cycles]}"


def test_the_library_never_imports_the_reproduction():
    """``layernorm`` (torch only) imports nothing of ``layernorm_paper``, at the top or inside a
    function. ``layernorm.__main__`` is the one exception: it is the ``python -m layernorm``
    program, never imported by ``import layernorm``."""
    graph = import_graph()
    library = [m for m in graph if m.split(".")[0] == "layernorm"]
    assert "layernorm.rnn.modules" in library and "layernorm_paper.cli" in graph
    for module in library:
        if module == "layernorm.__main__":
            continue
        above = {t for t in graph[module] if t.split(".")[0] == "layernorm_paper"}
        assert not above, f"{module} imports the reproduction: {sorted(above)}"


def test_the_runner_imports_nothing_above_it():
    """experiments/ knows its own floor and the layers below (data, norms, I/O), never the
    commands, the reproduction, the report or the analysis that plug into it."""
    below = {f"layernorm.{m}" for m in ("norms", "functional", "sync_bn", "files", "checks",
                                        "vocabulary")} | {"layernorm_paper._io", "layernorm_paper._args",
                                           "layernorm_paper.models.mlp"}
    graph = import_graph()
    runner = [m for m in graph if m == "layernorm_paper.experiments" or
              m.startswith("layernorm_paper.experiments.")]
    assert "layernorm_paper.experiments.training" in runner
    for module in runner:
        for target in graph[module]:
            if target == "layernorm":        # rundir's `from .. import __version__`, nothing else
                assert "__version__" in _modules()[module].read_text(), module
                continue
            ok = target in below or target.startswith(("layernorm_paper.experiments", "layernorm_paper.data"))
            assert ok, f"{module} imports {target}, which is above the runner"


def test_the_vocabulary_imports_nothing_of_the_package():
    assert import_graph()["layernorm.vocabulary"] == set()


def test_one_table_of_norms_read_by_every_layer():
    from layernorm import vocabulary as V
    from layernorm import norms, rnn
    from layernorm_paper.analysis import layer
    from layernorm_paper.report import scoring

    assert V.RNN_NORMS == rnn.RNN_NORMS == rnn.cells.RNN_NORMS     # the cells accept the RNN column
    from layernorm.rnn._norm_kinds import NORM_KINDS
    assert set(NORM_KINDS) == set(V.RNN_NORMS)                    # each of them has its kind
    assert norms.NORMS == layernorm.NORMS == V.NORMS
    assert set(layer.METHODS) == set(V.NORMS) and layer.METHOD_NAMES == V.LABELS
    assert {k: v for k, v in scoring.NORM_LABEL.items() if k in V.NORMS} == V.LABELS
    assert set(scoring.RNN_NORMS) == set(V.RNN_NORMS)
    assert set(scoring.RNN_LABEL) == set(V.RNN_NORMS)
    for name in V.NORMS:                                 # the conv column is what make_norm does
        if V.BY_NAME[name].conv:
            norms.make_norm(name, 4, conv=True)
        else:
            try:
                norms.make_norm(name, 4, conv=True)
            except ValueError:
                pass
            else:
                raise AssertionError(f"make_norm({name!r}, conv=True) should refuse")
        assert V.BY_NAME[name].feedforward
        norms.make_norm(name, 4)


def _reachable(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


def test_every_module_that_registers_is_imported_by_its_package():
    """Registration is explicit and in one place: each module that registers an experiment or a
    model builder is reached by the imports of ``layernorm_paper.reproduce`` (the reproduction's
    list) or of ``layernorm_paper.experiments`` (the runner's own), never loaded by name."""
    graph, mods = import_graph(), _modules()
    registering = {m for m, path in mods.items() if m.startswith("layernorm_paper.")
                   and ("@register_experiment(" in path.read_text()
                        or "@register_model(" in path.read_text())}
    assert {"layernorm_paper.experiments.builtin", "layernorm_paper.models.paper"} <= registering
    reached = _reachable(graph, {"layernorm_paper.reproduce", "layernorm_paper.experiments"})
    assert registering - reached == set()


def test_the_command_imports_every_module_with_commands():
    """Each module that defines ``add_commands`` is one of ``cli.COMMANDS``: a command module
    cannot be written and forgotten."""
    from layernorm_paper import cli
    mods = _modules()
    with_commands = {m for m, path in mods.items() if m.startswith("layernorm_paper.")
                     and any(isinstance(n, ast.FunctionDef) and n.name == "add_commands"
                             for n in ast.parse(path.read_text()).body)}
    assert with_commands == {m.__name__ for m in cli.COMMANDS}
