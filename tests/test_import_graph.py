"""The packages' shape: their modules import each other without cycles (function-level imports included), the merge
layer (finding, reading, aligning, merging, storing sources) imports nothing of the analysis layer (kernels,
attribution, bandwidth) nor of the reporting layer (CLI, report, plots): the merge hands ranks to analysis through a
hook (:class:`trace_merge.partitioned.Analysis`); no module reaches for another's private names, no source file
is over 1,000 lines, the command line imports no engine, partition or store module, and no test module imports
another (shared helpers live in ``tests/helpers``)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trace_merge"
PACKAGES = (ROOT / "trace_merge", ROOT / "timelogger")
NATIVE = {"trace_merge._sweep", "trace_merge._lifeline", "trace_merge.readers._pfwscan",  # compiled, no .py
          "timelogger._capture"}
REPORTING = {"trace_merge.cli", "trace_merge.report", "trace_merge.plots", "trace_merge.perfetto",
             "trace_merge.darshan_view", "trace_merge.noise", "trace_merge.findings", "trace_merge.run",
             "trace_merge.opening"}
ANALYSIS = {"trace_merge.analysis", "trace_merge.kernels", "trace_merge.attribution", "trace_merge.attribution_engine",
            "trace_merge.verdict", "trace_merge.explain", "trace_merge.component_view", "trace_merge.study",
            "trace_merge.bandwidth", "trace_merge.frameworks"}
MERGE_LAYER = {"trace_merge.sources", "trace_merge.threads", "trace_merge.merge", "trace_merge.store",
               "trace_merge.align", "trace_merge.schema", "trace_merge.identity", "trace_merge.dxt_clock",
               "trace_merge.readers", "trace_merge.readers.pfw", "trace_merge.partitioned", "trace_merge.engines",
               "trace_merge.merged", "trace_merge.readers.torch_trace", "trace_merge.rank_windows"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pk in PACKAGES for p in pk.rglob("*.py") if "_boot" not in p.parts}


def _imports(mod: str, path: Path, tree: ast.AST):
    """(node, imported module, names) for each import statement run, relative imports resolved."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            yield node, ".".join(base + ([node.module] if node.module else [])), [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, []


def import_graph() -> dict[str, set[str]]:
    files = _sources()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for _node, target, names in _imports(mod, path, ast.parse(path.read_text())):
            found = [target] + [f"{target}.{n}" for n in names]
            graph[mod] |= {n for n in found if n in files and n not in (mod, "trace_merge", "timelogger")}
    return graph


def private_reaches(paths: list[Path]) -> list[str]:
    """``module._name`` and ``from module import _name`` where the module is another of the project's own
    (its compiled extensions excepted: they are the private half of the module that imports them)."""
    own = set(_sources()) | NATIVE
    found = []
    for path in paths:
        mod = _module_name(path)
        tree = ast.parse(path.read_text())
        modules_named: dict[str, str] = {}
        for node, target, _names in _imports(mod, path, tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in own:
                        modules_named[a.asname or a.name] = a.name
                continue
            for a in node.names:
                if f"{target}.{a.name}" in own:
                    modules_named[a.asname or a.name] = f"{target}.{a.name}"
                elif target in own and target != mod and _private(a.name):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {target} import {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and modules_named.get(node.value.id, mod) != mod
                    and f"{modules_named[node.value.id]}.{node.attr}" not in NATIVE):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {modules_named[node.value.id]}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_merge_layer_imports_no_analysis_or_reporting_module():
    graph = import_graph()
    for mod in MERGE_LAYER:
        assert not reachable(graph, mod) & (REPORTING | ANALYSIS), (mod, reachable(graph, mod) & (REPORTING | ANALYSIS))


def test_the_check_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_command_line_imports_no_data_library_before_it_has_its_arguments():
    """``trace-merge`` starts the local pool's fork server (which imports pandas, pyarrow and the analysis) before
    the command imports them for itself: ``trace_merge.cli`` alone must not import them."""
    import subprocess
    import sys

    code = ("import sys, trace_merge.cli; "
            "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_module_reaches_for_another_modules_private_names():
    paths = list(_sources().values()) + list((ROOT / "benchmarks").rglob("*.py"))
    assert private_reaches(paths) == []


def test_the_private_reach_check_sees_one(tmp_path):
    probe = PACKAGE / "_probe_private_reach.py"
    probe.write_text("from trace_merge import intervals\nfrom trace_merge.schema import _x\nintervals._y()\n")
    try:
        assert [r.split(": ", 1)[1] for r in private_reaches([probe])] == [
            "from trace_merge.schema import _x", "trace_merge.intervals._y"]
    finally:
        probe.unlink()


def test_no_source_file_is_over_1000_lines():
    paths = [p for pk in PACKAGES for p in pk.rglob("*.py")] + list((ROOT / "benchmarks").rglob("*.py"))
    big = {str(p.relative_to(ROOT)): n for p in paths if (n := len(p.read_text().splitlines())) > 1000}
    assert big == {}


def test_the_command_line_imports_no_engine_partition_or_store_module():
    graph = import_graph()
    direct = graph["trace_merge.cli"]
    assert not direct & {"trace_merge.engines", "trace_merge.partitioned", "trace_merge.store"}, direct


def test_no_test_module_imports_another():
    tests = ROOT / "tests"
    modules = {p.stem for p in tests.glob("*.py")}
    found = []
    for path in tests.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if (name.startswith("tests.") and not name.startswith("tests.helpers")) or name in modules:
                    found.append(f"{path.name}:{node.lineno}: {name}")
    assert found == []
