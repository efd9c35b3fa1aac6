"""run_in_lab with a program of one's own (bench/exposed_estimate.py --lab-rate runs its worker so): every
node's rank runs it over the lab's link, with the lab's environment. Needs root and iproute2."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from launch.lab import IFACE, Lab, leftover_namespaces, run_in_lab

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="the fabric lab needs root and iproute2")

PROGRAM = """
import json, os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"sum": t.item(), "node": os.environ["FABRIC_HARNESS_NODE"], "ifname": os.environ["GLOO_SOCKET_IFNAME"]}, f)
dist.destroy_process_group()
"""


@pytest.mark.integration
@needs_root
def test_a_program_of_ones_own_runs_on_every_node(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    with Lab(2, "100mbit") as lab:
        code = run_in_lab(lab, 1, [], str(tmp_path), 120, 29441, program=[str(script), str(tmp_path)])
        namespaces = lab.namespaces
    assert not [ns for ns in leftover_namespaces() if ns in namespaces]
    assert code == 0, (tmp_path / "logs" / "lab-node0.log").read_text()[-2000:]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["sum"] for s in seen] == [3.0, 3.0]
    assert sorted(s["node"] for s in seen) == ["lab-node0", "lab-node1"] and {s["ifname"] for s in seen} == {IFACE}
    assert not (tmp_path / "run.json").exists()  # the trainer did not run
