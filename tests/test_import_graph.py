"""The package's modules import each other without cycles (function-level imports included), and the merge
layer (finding, reading, aligning, merging, storing sources) imports nothing of the analysis layer (kernels,
attribution, bandwidth) nor of the reporting layer (CLI, report, plots): the merge hands ranks to analysis through a
hook (:class:`trace_merge.partitioned.Analysis`)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trace_merge"
REPORTING = {"trace_merge.cli", "trace_merge.report", "trace_merge.plots", "trace_merge.perfetto",
             "trace_merge.darshan_view", "trace_merge.noise", "trace_merge.findings", "trace_merge.run"}
ANALYSIS = {"trace_merge.analysis", "trace_merge.kernels", "trace_merge.attribution", "trace_merge.bandwidth"}
MERGE_LAYER = {"trace_merge.sources", "trace_merge.threads", "trace_merge.merge", "trace_merge.store", "trace_merge.align",
               "trace_merge.schema", "trace_merge.identity", "trace_merge.dxt_clock", "trace_merge.readers",
               "trace_merge.partitioned", "trace_merge.engines"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
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


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[mod] |= {n for n in names if n in files and n not in (mod, "trace_merge")}
    return graph


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
