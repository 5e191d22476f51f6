"""The package layout is the architecture, and these rules keep it so (issue "A codebase in
rooms"): every module lives in a package with one job, imports point one way, the pure parts
never load llama.cpp, functions fit a screen. Read from the source with `ast`, so a violation
names its file and line."""
import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "cpuspec"
PACKAGES = {
    "core": "the loop, policies, sampling, drafters, the window, the cost rule, commands",
    "llama": "llama-cpp-python (engine, DraftModel) and llama.cpp's programs",
    "machine": "cores, affinity, bandwidth, signals and child processes",
    "inputs": "the model registry, model files, task suites",
    "results": "the schema, typed records, the saved-run store",
    "harness": "everything that runs models and times them",
    "analysis": "statistics, summaries, predictions, the replay (computed on read)",
    "report": "every printer and figure",
    "tune": "the search for where SD pays",
    "cli": "Click commands: parse, call one function, print",
}
# What each package may import of ours. The pure rooms (core, results, analysis, report)
# never reach llama.cpp; nothing imports the CLI; report and analysis read results and never
# run a model.
MAY_IMPORT = {
    "core": {"core", "results"},
    "results": {"results", "core", "inputs", "machine"},   # machine: the matrix engine record
    "machine": {"machine"},
    "inputs": {"inputs", "machine", "llama"},
    "llama": {"llama", "core", "machine", "inputs"},
    "analysis": {"analysis", "core", "results", "inputs"},
    "report": {"report", "analysis", "core", "results", "inputs"},
    "harness": {"harness", "core", "llama", "machine", "inputs", "results", "analysis",
                "report"},
    "tune": {"tune", "harness", "core", "llama", "machine", "inputs", "results", "analysis",
             "report"},
    "cli": set(PACKAGES),
}
PURE = {"core", "results", "analysis", "report"}   # never llama_cpp, directly or through us
MAX_FUNCTION_LINES = 60
# Functions once longer than the limit, each split into named steps (issue 40): none left. The
# test fails if any function passes the limit.
DEBT: dict[str, int] = {}


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, ast.Module]:
    """'package/module' -> its syntax tree, for every module under cpuspec/."""
    return {str(p.relative_to(PKG).with_suffix("")): ast.parse(p.read_text(encoding="utf-8"))
            for p in PKG.rglob("*.py")}


def our_imports(tree: ast.Module):
    """(line, 'package/module' or 'package', nested) of each import of ours."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("cpuspec."):
            parts = node.module.split(".")[1:]
            if len(parts) == 1:   # from cpuspec.pkg import module
                for a in node.names:
                    yield node.lineno, f"{parts[0]}/{a.name}", id(node) not in top
            else:
                yield node.lineno, "/".join(parts[:2]), id(node) not in top
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield node.lineno, "relative", id(node) not in top


def imports_llama_cpp(tree: ast.Module) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if
            (isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("llama_cpp"))
            or (isinstance(n, ast.Import) and any(a.name.startswith("llama_cpp")
                                                  for a in n.names))]


def test_every_module_lives_in_a_package_with_one_job():
    loose = [name for name in modules() if "/" not in name and name not in ("__init__",
                                                                             "__main__")]
    assert loose == []
    assert {name.split("/")[0] for name in modules() if "/" in name} == set(PACKAGES)


def test_imports_are_absolute_and_point_one_way():
    found = []
    for name, tree in modules().items():
        pkg = name.split("/")[0]
        for line, target, _ in our_imports(tree):
            if target == "relative":
                found.append(f"{name}.py:{line} uses a relative import")
            elif "/" in name and target.split("/")[0] not in MAY_IMPORT[pkg]:
                found.append(f"{name}.py:{line} ({pkg}) imports {target}")
    assert found == []


def test_nothing_imports_the_cli():
    found = [f"{name}.py:{line}" for name, tree in modules().items()
             if not name.startswith("cli/") and name != "__main__"
             for line, target, _ in our_imports(tree) if target.startswith("cli/")]
    assert found == []


def test_the_pure_rooms_never_load_llama_cpp():
    """core, results, analysis and report: no llama_cpp import, and none of ours that has one
    (they run with nothing but numpy: the tests of the loop and printers need no model)."""
    trees = modules()
    loads = {name for name, tree in trees.items() if imports_llama_cpp(tree)}
    assert all(name.split("/")[0] in ("llama", "harness", "tune", "cli") for name in loads), \
        loads
    found = [f"{name}.py:{line} imports {target}"
             for name, tree in trees.items() if name.split("/")[0] in PURE
             for line, target, _ in our_imports(tree) if target in loads]
    assert found == []


def test_the_import_graph_has_no_cycle():
    names = set(modules())
    graph = {name: {t for _, t, _ in our_imports(tree) if t in names}
             for name, tree in modules().items()}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(path + [nxt])
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_functions_fit_a_screen():
    long, grown = [], []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                key = f"{name}.py:{node.name}"
                if key in DEBT:
                    if size > DEBT[key]:
                        grown.append(f"{key} grew to {size} lines")
                elif size > MAX_FUNCTION_LINES:
                    long.append(f"{key} has {size} lines")
    assert long == [] and grown == []


def test_no_private_name_is_imported_across_modules():
    found = [f"{name}.py:{node.lineno} imports {a.name} from {node.module}"
             for name, tree in modules().items() for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module
             and node.module.startswith("cpuspec")
             for a in node.names if a.name.startswith("_") and a.name != "__version__"]
    assert found == []


def test_only_report_prints_tables_and_figures():
    """tabulate and matplotlib are called in report/ only: the other rooms hand records over."""
    found = [f"{name}.py:{node.lineno} imports {mod}"
             for name, tree in modules().items() if not name.startswith("report/")
             for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
             for mod in ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""])
             if mod.split(".")[0] in ("tabulate", "matplotlib")]
    assert found == []


def test_one_csv_writer():
    writers = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if "csv.writer(" in p.read_text(encoding="utf-8")]
    assert writers == ["report/tables.py"]


def test_the_readmes_layout_names_every_package_in_15_lines():
    readme = (PKG.parent / "README.md").read_text()
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0].strip("\n")
    assert len(section.splitlines()) <= 15
    for pkg in PACKAGES:
        assert f"{pkg}/" in section


def test_the_console_script_names_the_click_group():
    """pyproject's `cpuspec` entry point resolves to the group itself, not to a module that
    has the group's name (a package move once left it pointing at cpuspec/cli/main.py)."""
    import importlib
    import re

    import click
    text = (PKG.parent / "pyproject.toml").read_text()
    target = re.search(r'^cpuspec = "([\w.]+):(\w+)"', text, re.M)
    assert target
    obj = getattr(importlib.import_module(target.group(1)), target.group(2))
    assert isinstance(obj, click.Group)


# The size past which a module holds more than one job (issue 79.16: refs.py was 803 lines
# doing six, cli/measure.py 873): split where the jobs split, not squeezed.
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_size_of_one_job():
    big = [f"{p.relative_to(PKG)}: {n} lines" for p in PKG.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert big == []
