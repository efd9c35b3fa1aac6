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


# node 1's rank fails at once; node 0's waits for its agent to go (the lab stops it after the failure), then
# takes a while to record its end, as the trainer does (finish the step, save it, write run.json)
SLOW_TO_RECORD = """
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
if rank == "1":
    sys.exit(1)
agent = os.getppid()
while os.getppid() == agent:
    time.sleep(0.2)
time.sleep(8)  # longer than the 5 s the lab used to give, by way of its output pipe
with open(os.path.join(out, "recorded"), "w") as f:
    f.write("the end, recorded after the agent was stopped")
"""


@pytest.mark.integration
@needs_root
def test_the_lab_returns_after_a_stopped_agents_workers_have_recorded_their_end(tmp_path):
    """The lab stops a node's torchrun agent (SIGKILL) after another node failed, at its --timeout, or on a
    signal; the agent's workers, in sessions of their own, then see it gone and record the run's end.
    The lab returned while they still did: launch.evaluate read run.json's status `running`."""
    script = tmp_path / "prog.py"
    script.write_text(SLOW_TO_RECORD)
    with Lab(2, "none") as lab:
        code = run_in_lab(lab, 1, [], str(tmp_path), 240, 29443, program=[str(script), str(tmp_path)])
    assert code != 0
    assert (tmp_path / "recorded").exists(), (tmp_path / "logs" / "lab-node0.log").read_text()[-2000:]
