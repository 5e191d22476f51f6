"""The code's map stays changeable (issue 18's done-when, checked on every run): modules of one
size, an import graph without cycles, nothing private imported across modules, one CSV
writer. Read from the source with `ast`, so a violation names its file and line."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "cpuspec"
MAX_LINES = 450
MAX_CLI_LINES = 600
# Modules that load llama.cpp when imported (llama_cpp at their top); everything else imports
# at the top of the module, so a function-level import never hides a cycle.
LAZY = {"engine", "llama_draft"}


def modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8")) for p in PKG.glob("*.py")}


def relative_imports(tree: ast.Module, nested: bool):
    """(line, module, names) of each `from .x import …` at the top (nested=False) or inside a
    function (nested=True)."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and (id(node) in top) != nested:
            mods = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            for m in mods:
                yield node.lineno, m, [a.name for a in node.names]


def test_no_module_is_too_long():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PKG.glob("*.py")}
    assert sizes["cli.py"] < MAX_CLI_LINES
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_function_level_imports_only_defer_llama_cpp():
    found = [f"{name}.py:{line} imports .{mod} inside a function"
             for name, tree in modules().items()
             for line, mod, _ in relative_imports(tree, nested=True) if mod not in LAZY]
    assert found == []


def test_the_import_graph_has_no_cycle():
    graph = {name: {m for _, m, _ in relative_imports(tree, False)}
             | {m for _, m, _ in relative_imports(tree, True)}
             for name, tree in modules().items()}
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(path + [nxt])
            if nxt in graph and nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_no_private_name_is_imported_across_modules():
    found = [f"{name}.py:{line} imports {n} from .{mod}"
             for name, tree in modules().items()
             for nested in (False, True)
             for line, mod, names in relative_imports(tree, nested)
             for n in names if n.startswith("_") and n != "__version__"]
    assert found == []


def test_one_csv_writer():
    writers = [p.name for p in PKG.glob("*.py") if "csv.writer(" in p.read_text(encoding="utf-8")]
    assert writers == ["report.py"]
