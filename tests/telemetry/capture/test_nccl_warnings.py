"""NCCL's WARN lines grouped by message and kind, on the real logs of tests/telemetry/nccl_logs/ (README.md there
names each source) and on lines filled in from NCCL's format strings where no corpus log has that WARN."""
from __future__ import annotations

from pathlib import Path

from telemetry.capture.nccl_log import parse_files, parse_lines
from telemetry.capture.nccl_warnings import kind

CORPUS = Path(__file__).parent.parent / "nccl_logs"


def warnings(stem: str) -> dict | None:
    return parse_files([str(CORPUS / f"{stem}.log")])["warnings"]


def test_kinds_on_real_logs():
    w = warnings("nccl_tests_24_ib_completion_error_only")
    assert w["messages"] == [{"kind": "completion_error", "count": 1,
                              "message": "NET/IB : Got completion with error 4, opcode 1, len 0, vendor err 81"}]
    assert warnings("horovod_288_nccl2.2.12_no_nccl_word_socket_over_ib0")["by_kind"] == {"no_device": 5}
    assert warnings("nccl_1050_nvls_channels_collnet_refused")["by_kind"] == {"collnet": 2}
    assert warnings("aws_ofi_nccl_889_plugin_init_failed_socket_fallback_timestamps")["by_kind"] == {"plugin": 3}
    assert warnings("nccl_tests_217_nccl2.21.5_redacted_host_one_rank_lo_socket")["by_kind"] == {"socket": 1}
    assert warnings("gpudirecttcpx_1_warn_only_rx_ctrl_timeout")["by_kind"] == {"timeout": 2}
    assert warnings("nccl_1016_nccl2.18.1_ibext_roce_sriov_vf") is None  # no WARN line: None, not an empty list


def test_repeats_are_counted_once_per_message():
    line = "h:1:2 [0] misc/ibvwrap.cc:40 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out"
    w = parse_lines([line, line.replace("[0]", "[1]"), "h:1:2 [0] NCCL INFO Using network IB"])["warnings"]
    assert w == {"total": 2, "by_kind": {"verbs_call": 2}, "messages": [
        {"kind": "verbs_call", "count": 2, "message": "Call to ibv_modify_qp failed with error Connection timed out"}]}
    assert kind("Call to ibv_poll_cq() returned -1") == "verbs_call"
    assert kind("Failed to initialize any NET plugin") == "plugin"
    assert kind("Proxy append out of bounds") == "other"
