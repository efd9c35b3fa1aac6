"""Follow a recipe through the code: which project files a short run calls into, and how often the path
crosses between the trainer and the telemetry rooms.

    python tools/call_path.py                                   # tiny_llama_lora as it is, 3 steps, one process
    python tools/call_path.py RECIPE [key=value ...] [--edges]  # another recipe; --edges lists the crossings

Runs `python -m trainer`'s entry point in this process (world 1: a gloo group of one, as a plain
`python -m trainer` run makes) under `sys.setprofile`, in the main thread and every thread it starts, and
keeps only calls whose callee is in the project's packages (trainer/, telemetry/, launch/). It prints:

- files called into: project files with at least one function called (a module's import-time body alone
  does not count; those files are listed as imported only);
- crossings: a call whose direct caller is in trainer/ and callee in telemetry/, or the reverse, counted
  as distinct edges (caller file:function -> callee file:function) and as dynamic transitions (every
  call, each step's included; a generator's resumption counts as a call, as the profiler reports it);
- trainer/run.py entered: calls into run.py from another file, as distinct functions and dynamically, and
  how many of run.py's functions ran at all.

A call through a library (torch calling a telemetry hook) has a library frame as its direct caller and is
not a crossing. Timings mean nothing under the profiler; the numbers are counts.
"""
from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("trainer", "telemetry", "launch")
ROOMS = ("trainer", "telemetry")
RUN_PY = "trainer/run.py"
DEFAULT = ["recipes/tiny_llama_lora.yaml", "max_steps=3"]


@dataclass
class CallPath:
    """The profile function: records the calls into project files under `root`."""
    root: Path = REPO
    packages: tuple[str, ...] = PACKAGES
    called: set = field(default_factory=set)  # files with a function called
    functions: set = field(default_factory=set)  # (file, function) called
    imported: set = field(default_factory=set)  # files whose module body ran
    edges: collections.Counter = field(default_factory=collections.Counter)  # cross-file calls

    def __post_init__(self):
        self._prefixes = tuple(os.path.join(str(self.root), p) + os.sep for p in self.packages)
        self._cache: dict[str, str | None] = {}

    def project_file(self, filename: str) -> str | None:
        """The path relative to root ("trainer/run.py"), None outside the packages."""
        rel = self._cache.get(filename, "")
        if rel == "":
            rel = (os.path.relpath(filename, self.root).replace(os.sep, "/")
                   if filename.startswith(self._prefixes) else None)
            self._cache[filename] = rel
        return rel

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        callee = self.project_file(frame.f_code.co_filename)
        if callee is None:
            return
        if frame.f_code.co_name == "<module>":
            self.imported.add(callee)
            return
        self.called.add(callee)
        self.functions.add((callee, frame.f_code.co_name))
        back = frame.f_back
        caller = self.project_file(back.f_code.co_filename) if back is not None else None
        if caller is not None and caller != callee:
            self.edges[(caller, back.f_code.co_name, callee, frame.f_code.co_name)] += 1

    def __enter__(self) -> "CallPath":
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


def room(path: str) -> str:
    return path.split("/", 1)[0]


def is_crossing(caller: str, callee: str) -> bool:
    return {room(caller), room(callee)} == set(ROOMS)


def summary(path: CallPath) -> dict:
    crossings = {e: n for e, n in path.edges.items() if is_crossing(e[0], e[2])}
    into_run = {e: n for e, n in path.edges.items() if e[2] == RUN_PY}
    return {
        "files_called": len(path.called),
        "files_imported_only": len(path.imported - path.called),
        "crossings_distinct": len(crossings),
        "crossings_dynamic": sum(crossings.values()),
        "crossing_file_pairs": len({(e[0], e[2]) for e in crossings}),
        "run_py_entries_distinct": len({e[3] for e in into_run}),
        "run_py_entries_dynamic": sum(into_run.values()),
        "run_py_functions": len({f for file, f in path.functions if file == RUN_PY}),
        "crossings": sorted(crossings.items()),
    }


def measure(argv: list[str]) -> tuple[int, CallPath]:
    """One in-process run of `python -m trainer ARGV` (world 1), under the call path's profile."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        os.environ.pop(key, None)  # a group of one, whatever launched this
    from trainer.cli import main as trainer_main  # imported first: the path counts the run, not the imports

    with CallPath() as path:
        code = trainer_main(argv)
    return code, path


def main(argv: list[str] | None = None) -> int:
    from telemetry.errors import OneLineParser  # a mistaken argument is one error: line, as everywhere

    p = OneLineParser(prog="python tools/call_path.py", description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", nargs="?", default=DEFAULT[0])
    p.add_argument("overrides", nargs="*")
    p.add_argument("--edges", action="store_true", help="list every trainer<->telemetry edge with its count")
    args = p.parse_args(argv)
    overrides = args.overrides if (args.overrides or args.recipe != DEFAULT[0]) else DEFAULT[1:]
    os.chdir(REPO)  # the recipe's relative asset paths
    with tempfile.TemporaryDirectory(prefix="call-path-") as out:
        if not any(o.startswith("output_dir=") for o in overrides):
            overrides = [*overrides, f"output_dir={out}"]
        code, path = measure([args.recipe, *overrides])
    if code != 0:
        return code  # the trainer has said why, in one error line
    s = summary(path)
    print(f"recipe: {args.recipe} {' '.join(o for o in overrides if not o.startswith('output_dir='))} (world 1)")
    print(f"project files called into: {s['files_called']} (and {s['files_imported_only']} imported only)")
    print(f"trainer<->telemetry crossings: {s['crossings_distinct']} distinct caller->callee function edges "
          f"({s['crossing_file_pairs']} file pairs), {s['crossings_dynamic']} dynamic transitions")
    print(f"trainer/run.py entered from other files: {s['run_py_entries_distinct']} distinct functions, "
          f"{s['run_py_entries_dynamic']} calls; {s['run_py_functions']} of its functions ran")
    if args.edges:
        for (caller, fn, callee, gn), n in s["crossings"]:
            print(f"  {caller}:{fn} -> {callee}:{gn}  x{n}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
