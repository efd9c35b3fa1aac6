"""The fabric rows of a comparison: a lab run's link says what its shaped queues dropped."""
from __future__ import annotations

import json

from telemetry.analysis.fabric_summary import facts
from telemetry.analysis.runs import Run


def lab_run(path, lab_json=None) -> Run:
    if lab_json is not None:
        (path / "lab.json").write_text(json.dumps(lab_json))
    return Run(path=str(path), info={"fabric": {"lab": {"rate": "5mbit", "rate_bps": 5e6}, "backend": "gloo"}},
               metrics=[])


def test_lab_link_names_its_queue_drops(tmp_path):
    for name, lab_json, said in [("none", None, "queue drops not recorded"),
                                 ("old", {"nodes": 2}, "queue drops not recorded"),  # a lab.json from before
                                 ("clean", {"tbf_drops": 0}, "no queue drops"),
                                 ("dropped", {"tbf_drops": 1234}, "queues dropped 1,234 packets"),
                                 # a 3-node lab at 10mbit: node 0 sends the model to both peers at once
                                 ("start-up", {"tbf_drops": 503, "tbf_drops_after_first_step": 0},
                                  "queues dropped 503 packets at start-up, none during the steps"),
                                 ("steps", {"tbf_drops": 503, "tbf_drops_after_first_step": 40},
                                  "queues dropped 40 packets during the steps (503 in all): TCP retransmitted")]:
        (tmp_path / name).mkdir()
        text = facts(lab_run(tmp_path / name, lab_json))["link rate"]
        assert text.startswith("5mbit (emulated: tc tbf; ") and said in text, (name, text)


def test_unshaped_lab_and_unreadable_lab_json(tmp_path):
    run = Run(path=str(tmp_path), info={"fabric": {"lab": {"rate": "none", "rate_bps": None}}}, metrics=[])
    assert facts(run)["link rate"] == "unshaped (emulated lab)"
    (tmp_path / "lab.json").write_text("{not json")
    assert "queue drops not recorded" in facts(lab_run(tmp_path))["link rate"]


def test_transport_row_names_nccls_warn_lines_by_kind(tmp_path):
    nccl = {"gpudirect_rdma": True, "warnings": {"total": 4, "by_kind": {"verbs_call": 1, "completion_error": 3},
                                                 "messages": []}}
    run = Run(path=str(tmp_path), info={"fabric": {"transport": "roce", "nccl": nccl}}, metrics=[])
    assert facts(run)["transport; GPUDirect RDMA"] == "roce; GDR on; NCCL WARN lines: 3 completion_error, 1 verbs_call"
    del nccl["warnings"]  # a run.json from before the field, or a log without WARN lines
    assert facts(run)["transport; GPUDirect RDMA"] == "roce; GDR on"
    # torch's watchdog timeout and NCCL error lines in the run's log (the twelfth collection): said after the WARN kinds
    nccl["torch_errors"] = {"lines": 3, "timeouts": [{"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "ranks": [0, 1]}],
                            "watchdog_failures": [], "nccl_errors": [{"error": "unhandled system error", "count": 1}]}
    assert facts(run)["transport; GPUDirect RDMA"] == ("roce; GDR on; torch watchdog timeouts: ALLREDUCE SeqNum 808; "
                                                       "torch NCCL errors: unhandled system error")


def test_a_lab_rate_in_tc_bytes_units_is_named_in_bits_too():
    """Round 5 of the lab: variants `rate: 1mbps` and `rate: 8mbit` are one link (8 Mbit/s) and measured alike
    (+0.6%), but the comparison's link row read `1mbps` beside `8mbit`, as if 8 times slower."""
    from launch.evaluate.summary import lab_setting_text
    from telemetry.analysis.fabric_summary import lab_links
    assert lab_links({"rate": "1mbps", "rate_bps": 8e6}) == "1mbps (8 Mbit/s)"
    assert lab_links({"rate": "8mbit", "rate_bps": 8e6}) == "8mbit"
    assert lab_links({"rate": "100mbit", "rate_bps": 1e8, "slow_node": 1, "slow_rate": "250kbps",
                      "slow_rate_bps": 2e6}) == "100mbit, node 1's egress 250kbps (2 Mbit/s)"
    assert lab_links({"rate": "none", "rate_bps": None}) == "unshaped"
    assert lab_setting_text("rate", "1mbps") == "1mbps (8 Mbit/s)" and lab_setting_text("rate", "8mbit") == "8mbit"
    assert lab_setting_text("mtu", 9000) == "9000" and lab_setting_text("slow_rate", "1gbps") == "1gbps (8 Gbit/s)"
