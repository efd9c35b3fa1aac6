"""The house rules, measured: files over the size limit, functions over 100 lines, import circles, private
names imported across modules, module basenames used twice, trainer/run.py's telemetry imports, and the run
directory's field and file names written as string literals instead of telemetry/rundir.py's constants.

    python tools/house_rules.py          # every number, and each offender by name
    tests/test_house_rules.py             # the fast-tier test that holds the rules

Reads source as text (ast): no project module is imported, so it runs anywhere in a second.
"""
from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("trainer", "telemetry", "launch")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
SHARED_BASENAMES = ("__init__.py", "__main__.py")  # a package's own entry points: every package has them


def source_files(root: Path = REPO) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path, modules: set[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """The project modules `path` imports (anywhere in it), and the `_private` names it imports from others."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found, private = set(), []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                target = full if full in modules else source
                if target in modules and target != me:
                    found.add(target)
                private_name = alias.name.startswith("_") and not alias.name.startswith("__")
                if private_name and source.split(".")[0] in PACKAGES and source != me:
                    private.append((node.lineno, f"{source}.{alias.name}"))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules and a.name != me}
    return found, private


def import_graph(root: Path = REPO) -> tuple[dict[str, set[str]], list[str]]:
    files = source_files(root)
    modules = {module_name(p, root) for p in files}
    graph, private = {}, []
    for path in files:
        graph[module_name(path, root)], names = _imports(path, root, modules)
        private += [f"{path.relative_to(root)}:{line} imports {name}" for line, name in names]
    return graph, private


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack, stack, out = set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def long_files(root: Path = REPO) -> list[str]:
    out = []
    for p in source_files(root):
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            out.append(f"{p.relative_to(root)}: {n} lines (limit {MAX_FILE_LINES})")
    return out


def long_functions(root: Path = REPO) -> list[str]:
    out = []
    for p in source_files(root):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root)}:{node.lineno} {node.name}: {n} lines "
                               f"(limit {MAX_FUNCTION_LINES})")
    return out


def twin_basenames(root: Path = REPO) -> list[str]:
    seen = collections.defaultdict(list)
    for p in source_files(root):
        if p.name not in SHARED_BASENAMES:
            seen[p.name].append(str(p.relative_to(root)))
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(seen.items()) if len(paths) > 1]


def run_py_telemetry(root: Path = REPO) -> list[str]:
    graph, _ = import_graph(root)
    return sorted(m for m in graph.get("trainer.run", ()) if m.split(".")[0] == "telemetry")


RUNDIR = Path("telemetry") / "rundir.py"
RUNDIR_FILE_CONSTANTS = ("RUN_JSON", "METRICS", "RANK_TELEMETRY", "RANK_EVENTS", "RANK_FINAL", "RANK_ERROR")
RUNDIR_DIR_CONSTANTS = ("RANKS", "LOGS", "CHECKPOINTS", "REPORT", "EXPORTS")


def rundir_names(root: Path = REPO) -> tuple[set[str], dict[str, str]]:
    """From telemetry/rundir.py's source: the field names of STEP_FIELDS and RUN_FIELDS, and the layout's
    file and folder constants (name -> value)."""
    fields, constants = set(), {}
    for node in ast.parse((root / RUNDIR).read_text(encoding="utf-8")).body:
        target = (node.target if isinstance(node, ast.AnnAssign) else
                  node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id in ("STEP_FIELDS", "RUN_FIELDS"):
            for call in node.value.elts:
                fields |= {n.value for n in call.args[0].elts}
        elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            constants.update({t.id: v.value for t, v in zip(target.elts, node.value.elts)
                              if isinstance(t, ast.Name) and isinstance(v, ast.Constant)})
        elif isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            constants[target.id] = node.value.value
    return fields, constants


def _strings(tree: ast.AST) -> list[tuple[ast.Constant, ast.AST | None, bool]]:
    """Every string constant that is not a docstring: (node, its parent, inside an f-string)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    parent = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    in_fstring = {id(c) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for c in ast.walk(n)}
    return [(n, parent.get(id(n)), id(n) in in_fstring) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def rundir_literals(root: Path = REPO) -> tuple[list[str], list[str]]:
    """Run-directory names written as literals in package code outside telemetry/rundir.py.

    Fields: a string equal to a field name with an underscore (`step_time_s`, `gpu_power_w`, `start_time`).
    One-word names (`step`, `loss`, `name`, `status`) are also the keys of recipes, checkpoints and other
    tools' records, so a text scan cannot tell them apart; they are converted where a record is built, not
    counted. Files: a string equal to run.json or metrics.jsonl, one ending in a rank file's name
    (".telemetry.jsonl"), or a layout folder ("ranks", "logs", ...) given to a path join."""
    fields, constants = rundir_names(root)
    distinctive = {f for f in fields if "_" in f}
    files = {constants[c] for c in RUNDIR_FILE_CONSTANTS if c in constants}
    folders = {constants[c] for c in RUNDIR_DIR_CONSTANTS if c in constants}
    rank_suffixes = tuple(f".{constants[c]}" for c in RUNDIR_FILE_CONSTANTS if c.startswith("RANK_") and c in constants)
    field_hits, file_hits = [], []
    for p in source_files(root):
        if p.relative_to(root) == RUNDIR:
            continue
        for node, parent, in_fstring in _strings(ast.parse(p.read_text(encoding="utf-8"))):
            where, v = f"{p.relative_to(root)}:{node.lineno}", node.value
            joined = (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute)
                      and parent.func.attr == "join" and node in parent.args)
            if not in_fstring and v in distinctive:
                field_hits.append(f"{where} {v!r}")
            elif (not in_fstring and v in files) or v.endswith(rank_suffixes) or (joined and v in folders):
                file_hits.append(f"{where} {v!r}")
    def in_order(hits: list[str]) -> list[str]:
        return sorted(hits, key=lambda h: (h.split(":")[0], int(h.split(":")[1].split()[0])))
    return in_order(field_hits), in_order(file_hits)


def main(argv: list[str] | None = None) -> int:
    from telemetry.errors import OneLineParser  # it takes no arguments: one given is a mistake, said in one line

    OneLineParser(prog="python -m tools.house_rules", description=__doc__.split("\n")[0]).parse_args(argv)
    graph, private = import_graph()
    rows = [("files over 800 lines", long_files()), ("functions over 100 lines", long_functions()),
            ("import circles", [" <-> ".join(c) for c in circles(graph)]),
            ("private names imported across modules", private), ("module basenames used twice", twin_basenames()),
            ("telemetry modules imported by trainer/run.py", run_py_telemetry())]
    fields, files = rundir_literals()
    rows += [("run-directory field names as literals (outside telemetry/rundir.py)", fields),
             ("run-directory file names as literals (outside telemetry/rundir.py)", files)]
    for title, items in rows:
        print(f"{title}: {len(items)}")
        for item in items:
            print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
