"""tools/call_path.py's counting, on a tiny synthetic trainer/telemetry pair (in-process, fast tier). The real
measurement (a training run under the profiler) is `python tools/call_path.py`, numbers in docs/architecture.md."""
from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("call_path", REPO / "tools" / "call_path.py")
call_path = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("call_path", call_path)  # its dataclass looks its module up by name
_spec.loader.exec_module(call_path)

FILES = {
    "telemetry/b.py": "def hook(cb):\n    return cb() + 1\n",  # telemetry calls back into the trainer
    "trainer/run.py": ("def step(hook, cb):\n    return hook(cb)\n\n"
                       "def run(hook, cb, n):\n    out = []\n    for _ in range(n):\n"
                       "        out.append(step(hook, cb))\n    return out\n"),
    "trainer/a.py": "def cb():\n    return 1\n\ndef main(run, hook, n):\n    return run(hook, cb, n)\n",
    "launch/c.py": "def unused():\n    return 0\n",
}


def _load(root, rel):
    spec = importlib.util.spec_from_file_location(f"synthetic_{rel.replace('/', '_')[:-3]}", root / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crossings_entries_and_files_are_counted(tmp_path):
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    b, run, a = (_load(tmp_path, rel) for rel in ("telemetry/b.py", "trainer/run.py", "trainer/a.py"))
    with call_path.CallPath(root=tmp_path) as path:
        assert a.main(run.run, b.hook, 3) == [2, 2, 2]
    s = call_path.summary(path)
    # a.main -> run.run (an entry into run.py, not a crossing); run.step -> b.hook and b.hook -> a.cb: two
    # distinct crossing edges, three times each
    assert s["crossings_distinct"] == 2 and s["crossings_dynamic"] == 6 and s["crossing_file_pairs"] == 2
    assert [edge for edge, _ in s["crossings"]] == [("telemetry/b.py", "hook", "trainer/a.py", "cb"),
                                                    ("trainer/run.py", "step", "telemetry/b.py", "hook")]
    assert s["run_py_entries_distinct"] == 1 and s["run_py_entries_dynamic"] == 1 and s["run_py_functions"] == 2
    assert s["files_called"] == 3 and path.called == {"telemetry/b.py", "trainer/run.py", "trainer/a.py"}


def test_rooms():
    assert call_path.is_crossing("trainer/loop.py", "telemetry/rundir.py")
    assert call_path.is_crossing("telemetry/rundir.py", "trainer/run_writer.py")
    assert not call_path.is_crossing("launch/lab.py", "telemetry/rundir.py")
    assert not call_path.is_crossing("trainer/a.py", "trainer/b.py")
