"""Parsers for raw link tests, on real published perftest and iperf3 output (evidence_fixtures/README.md)."""
from __future__ import annotations

import os

import pytest

from telemetry.analysis import link_tests as lt

FIX = os.path.join(os.path.dirname(__file__), "..", "evidence_fixtures")


def read(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def test_bandwidth_table_in_mb_per_second_becomes_gbps():
    r = lt.parse_perftest(read("perftest_write_bw_mb.txt"))
    assert r["test"] == "RDMA_Write BW Test" and r["kind"] == "bandwidth"
    assert r["device"] == "mlx4_0" and r["link_type"] == "IB" and r["bw_unit"] == "MB/sec"
    assert len(r["rows"]) == 23 and r["rows"][0]["bytes"] == 2 and r["rows"][-1]["bytes"] == 8388608
    big = r["rows"][-1]
    assert big["iterations"] == 20000 and big["msg_rate_mpps"] == pytest.approx(0.000458)
    # 3665.25 MiB/s = 30.75 Gb/s: a 40 Gb/s QDR link carries 32 Gb/s of data after 8b/10b
    assert big["bw_avg_gbps"] == pytest.approx(3665.25 * 2**20 * 8 / 1e9)
    assert 30 < big["bw_avg_gbps"] < 32


def test_bandwidth_table_in_gbits_with_tabs_and_no_peak():
    r = lt.parse_perftest(read("perftest_write_bw_gbits_issue273.txt"))
    assert r["test"] == "RDMA_Write Post List BW Test" and r["link_type"] == "Ethernet"
    (row,) = r["rows"]
    assert row == {"bytes": 8, "iterations": 224958464, "bw_peak_gbps": None, "bw_avg_gbps": 0.48,
                   "msg_rate_mpps": 7.498617}


def test_latency_table():
    r = lt.parse_perftest(read("perftest_write_lat.txt"))
    assert r["kind"] == "latency" and r["test"] == "RDMA_Write Latency Test" and len(r["rows"]) == 23
    first = r["rows"][0]
    assert first == {"bytes": 2, "iterations": 20000, "t_min_us": 0.88, "t_max_us": 6.84, "t_typical_us": 0.98,
                     "t_avg_us": 1.03, "t_stdev_us": 0.20, "p99_us": 1.21, "p99_9_us": 5.42}
    assert r["rows"][-1]["p99_9_us"] == 2335.48


def test_latency_columns_that_ran_together_are_split_at_two_decimals():
    (row,) = lt.parse_perftest(read("perftest_send_lat_rxe_glued.txt"))["rows"]
    assert row["t_stdev_us"] == 2465.90 and row["p99_us"] == 1216.65 and row["p99_9_us"] == 37330.73


def test_not_perftest_output_is_refused():
    with pytest.raises(lt.ParseError, match="no perftest result table"):
        lt.parse_perftest("Couldn't connect to 10.0.0.2:18515\n")


def test_out_json_units_come_from_the_command_line():
    bw = lt.parse_perftest_json(read("perftest_out_json_bw_from_source.json"), report_gbits=True)
    assert bw["device"] == "mlx5_0" and bw["rows"][0]["bw_avg_gbps"] == 97.45 and bw["bw_unit"] == "Gb/sec"
    mib = lt.parse_perftest_json(read("perftest_out_json_bw_from_source.json"), report_gbits=False)
    assert mib["rows"][0]["bw_avg_gbps"] == pytest.approx(97.45 * 2**20 * 8 / 1e9)
    lat = lt.parse_perftest_json(read("perftest_out_json_lat_from_source.json"), report_gbits=True)
    assert lat["kind"] == "latency" and lat["rows"][0]["p99_us"] == 1.57 and lat["rows"][0]["p99_9_us"] == 1.93


def test_iperf3_tcp_receiver_rate_and_retransmits():
    r = lt.parse_iperf3(read("iperf3_tcp_cloudpilot.json"))
    assert r["protocol"] == "TCP" and r["version"] == "iperf 3.9" and r["error"] is None
    assert r["received_bps"] == pytest.approx(1863405012.088609) and r["retransmits"] == 1006
    assert lt.percent_of_line(r["received_bps"] / 1e9, 10.0) == pytest.approx(18.634, rel=1e-3)


def test_iperf3_udp_loss_and_bidir_reverse():
    udp = lt.parse_iperf3(read("iperf3_udp_loopback.json"))
    assert udp["protocol"] == "UDP" and udp["lost_packets"] == 0 and udp["packets"] == 77
    assert udp["retransmits"] is None and udp["jitter_ms"] > 0
    bidir = lt.parse_iperf3(read("iperf3_bidir_loopback.json"))
    assert bidir["bidir"] and bidir["received_bps"] > 0 and bidir["reverse_received_bps"] > 0
    assert bidir["reverse_retransmits"] is not None


def test_iperf3_error_report():
    r = lt.parse_iperf3(read("iperf3_error_refused.json"))
    assert r["error"].startswith("unable to connect") and r["received_bps"] is None
    with pytest.raises(lt.ParseError):
        lt.parse_iperf3('{"start": {}}')


def test_line_rates():
    assert lt.ib_rate_gbps("400 Gb/sec (4X NDR)") == 400.0 and lt.ib_rate_gbps(None) is None
    assert lt.percent_of_line(50.0, None) is None and lt.percent_of_line(None, 100.0) is None


# --- outputs from other people's machines (evidence_fixtures/README.md) ---

def test_all_sizes_table_whose_first_row_has_six_decimals():
    r = lt.parse_perftest(read("perftest_write_bw_a_gbits_nvidia_cnc.txt"))
    assert r["device"] == "mlx5_0" and r["mtu"] == 1024 and r["bw_unit"] == "Gb/sec" and len(r["rows"]) == 23
    assert r["rows"][0] == {"bytes": 2, "iterations": 5000, "bw_peak_gbps": 0.101672, "bw_avg_gbps": 0.083211,
                            "msg_rate_mpps": 5.200694}
    assert r["rows"][-1]["bytes"] == 8388608 and r["rows"][-1]["bw_avg_gbps"] == 93.29


def test_cpu_frequency_warnings_and_elisions_between_rows_are_skipped():
    r = lt.parse_perftest(read("perftest_read_bw_20qp_cpufreq_alibaba.txt"))
    assert r["test"] == "RDMA_Read BW Test" and r["device"] == "mlx5_bond_0" and r["link_type"] == "Ethernet"
    assert [row["bytes"] for row in r["rows"]] == [2, 4194304, 8388608]
    assert r["rows"][-1] == {"bytes": 8388608, "iterations": 20000, "bw_peak_gbps": 165.65, "bw_avg_gbps": 165.63,
                             "msg_rate_mpps": 0.002468}
    deepops = lt.parse_perftest(read("perftest_write_bw_rdma_cm_cpufreq_deepops.txt"))
    assert deepops["connection"] == "RC" and deepops["mtu"] == 4096
    assert deepops["rows"] == [{"bytes": 65536, "iterations": 5000, "bw_peak_gbps": 92.42, "bw_avg_gbps": 92.40,
                                "msg_rate_mpps": 0.176230}]


def test_three_queue_pairs_over_rdma_cm_on_bnxt_re():
    r = lt.parse_perftest(read("perftest_write_bw_bnxt_3qp_scc24.txt"))
    assert r["device"] == "bnxt_re0" and r["mtu"] == 1024
    assert r["rows"] == [{"bytes": 65536, "iterations": 4159603, "bw_peak_gbps": None, "bw_avg_gbps": 363.47,
                          "msg_rate_mpps": 0.693268}]


def test_read_latency_with_warnings_before_the_row():
    r = lt.parse_perftest(read("perftest_read_lat_cpufreq_k8s.txt"))
    assert r["kind"] == "latency" and r["test"] == "RDMA_Read Latency Test"
    assert r["rows"] == [{"bytes": 2, "iterations": 1000, "t_min_us": 4.70, "t_max_us": 13.20, "t_typical_us": 4.83,
                          "t_avg_us": 4.82, "t_stdev_us": 0.00, "p99_us": 4.91, "p99_9_us": 13.20}]


def test_failed_runs_carry_perftests_own_words():
    with pytest.raises(lt.ParseError, match=r"perftest said: Couldn't connect to 192\.168\.125\.211:18515 \| "
                                            r"Unable to open file descriptor"):
        lt.parse_perftest(read("perftest_error_connect_pr228.txt"))
    with pytest.raises(lt.ParseError, match=r"Failed to modify QP 122273 to RTR \| Unable to Connect the HCA's"):
        lt.parse_perftest(read("perftest_error_rtr_issue393.txt"))
    with pytest.raises(lt.ParseError, match=r"RDMA_Read Latency Test settings are here but no table.*client"):
        lt.parse_perftest(read("perftest_read_lat_server_no_table_k8s.txt"))


def test_out_json_written_without_report_gbits_is_mib_per_second():
    r = lt.parse_perftest_json(read("perftest_out_json_mb_doca_platform.json"), report_gbits=False)
    assert r["device"] == "mlx5_11" and r["mtu"] == 1024 and r["bw_unit"] == "MiB/sec"
    (row,) = r["rows"]
    assert row["bytes"] == 65536 and row["iterations"] == 5000 and row["msg_rate_mpps"] == 0.035668
    assert row["bw_avg_gbps"] == pytest.approx(2229.27 * 2**20 * 8 / 1e9)  # 18.7 Gb/s, not 2229 Gb/s
    assert row["bw_peak_gbps"] == pytest.approx(5293.52 * 2**20 * 8 / 1e9)


def test_iperf3_report_after_terminal_junk_with_crlf_and_a_zero_receiver():
    with open(os.path.join(FIX, "iperf3_tcp_bytes_escape_prefix_cloudpilot.res"), encoding="utf-8", newline="") as f:
        text = f.read()
    assert text.startswith("^[[F{") and "\r\n" in text
    r = lt.parse_iperf3(text)
    assert r["version"] == "iperf 3.9" and r["sent_bps"] == pytest.approx(12612602.524983905)
    assert r["retransmits"] == 0
    # the server counted 0 of the 56320 bytes TCP delivered: unknown, not a rate of 0
    assert r["received_bps"] is None and "0 bytes received of the 56320" in r["reasons"]["received_bps"]
    assert r["duration_s"] is None and "-n 10240" in r["reasons"]["duration_s"]
    with pytest.raises(lt.ParseError, match="not JSON"):
        lt.parse_iperf3(text[:200])


def test_iperf3_314_udp_reverse_and_a_tcp_sender_without_retransmit_counts():
    udp = lt.parse_iperf3(read("iperf3_udp_reverse_314_macos.json"))
    assert udp["protocol"] == "UDP" and udp["reverse"] and not udp["bidir"] and udp["version"] == "iperf 3.14"
    assert udp["received_bps"] == pytest.approx(32034981.770479407) and udp["lost_packets"] == 1
    assert udp["packets"] == 30421 and udp["lost_percent"] == pytest.approx(0.0032872029190361921)
    assert udp["jitter_ms"] == pytest.approx(0.068292653230841) and udp["reasons"] == {}
    tcp = lt.parse_iperf3(read("iperf3_tcp_314_macos_no_retransmits.json"))
    assert tcp["received_bps"] == pytest.approx(204737447.4407) and tcp["duration_s"] == 10
    assert tcp["retransmits"] is None and "no retransmission count" in tcp["reasons"]["retransmits"]


def test_bidirectional_four_qp_table_from_a_2026_perftest():
    r = lt.parse_perftest(read("perftest_write_bw_bidir_4qp_ionic_amd.txt"))
    assert r["test"] == "RDMA_Write Bidirectional BW Test" and r["bidirectional"] and r["qps"] == 4
    assert r["device"] == "ionic_7" and r["mtu"] == 4096 and r["link_type"] == "Ethernet" and len(r["rows"]) == 23
    assert r["rows"][0]["bw_peak_gbps"] == 0.147331 and r["rows"][-1] == {
        "bytes": 8388608, "iterations": 20000, "bw_peak_gbps": 779.21, "bw_avg_gbps": 779.21, "msg_rate_mpps": 0.011611}
    one_way = lt.parse_perftest(read("perftest_write_bw_bnxt_3qp_scc24.txt"))
    assert one_way["bidirectional"] is False and one_way["qps"] == 3


def test_latency_run_for_a_duration_after_container_noise():
    """-D leaves t_avg and tps only; FreeFlow's and mlx4's lines before the table (one says "failed") are
    not the test failing."""
    r = lt.parse_perftest(read("perftest_send_lat_duration_freeflow.txt"))
    assert r["kind"] == "latency" and r["device"] == "mlx4_0" and r["link_type"] == "IB" and r["mtu"] == 2048
    assert r["rows"] == [{"bytes": 2, "iterations": 1289984, "t_avg_us": 3.88, "tps_average": 128993.46}]


def test_tables_as_people_paste_them_into_issues():
    """Quoted with '> ' in a reply, or with a figure in markdown bold: the numbers are the tool's."""
    quoted = lt.parse_perftest(read("perftest_write_bw_quoted_issue132.txt"))
    assert quoted["test"] == "RDMA_Write BW Test" and quoted["device"] == "mlx5_0" and quoted["mtu"] == 4096
    assert [r["bytes"] for r in quoted["rows"]] == [2, 4, 8] and quoted["rows"][-1]["bw_avg_gbps"] == 0.17
    bold = lt.parse_perftest(read("perftest_send_bw_markdown_bold_issue65.txt"))
    # two runs pasted one after the other: the first table only, not one table of both
    assert bold["rows"] == [{"bytes": 1024, "iterations": 1000, "bw_peak_gbps": None,
                             "bw_avg_gbps": pytest.approx(5544.28 * 2**20 * 8 / 1e9), "msg_rate_mpps": 5.677340}]
    assert bold["device"] is None and bold["test"] is None  # the issue did not include the settings


# --- the eighth collection: values read by hand from each file (evidence_fixtures/README.md) ---

MIB = 2**20 * 8 / 1e9  # one MiB/s (perftest's "MB/sec") in Gb/s


def test_atomic_bandwidth_test_on_a_software_ib_device():
    r = lt.parse_perftest(read("perftest_atomic_cmp_swap_bw_pib_issue4.txt"))
    assert (r["test"], r["kind"], r["device"], r["link_type"], r["mtu"], r["qps"], r["connection"], r["bw_unit"]) == \
        ("Atomic CMP_AND_SWAP BW Test", "bandwidth", "pib_1", "IB", 4096, 1, "RC", "MB/sec")
    assert r["rows"] == [{"bytes": 8, "iterations": 1000, "bw_peak_gbps": pytest.approx(1.70 * MIB),
                          "bw_avg_gbps": pytest.approx(1.67 * MIB), "msg_rate_mpps": 0.219031}]


def test_read_bandwidth_pasted_without_rules_and_an_iterations_column_without_hash():
    r = lt.parse_perftest(read("perftest_read_bw_no_rules_iterations_without_hash_ucx8852.txt"))
    assert (r["test"], r["device"], r["link_type"], r["mtu"], r["connection"]) == \
        ("RDMA_Read BW Test", "mlx5_1", "IB", 4096, "RC")
    assert [row["bytes"] for row in r["rows"]] == [2, 4, 8, 16, 32, 64, 128]
    assert r["rows"][0] == {"bytes": 2, "iterations": 1000, "bw_peak_gbps": pytest.approx(4.86 * MIB),
                            "bw_avg_gbps": pytest.approx(4.67 * MIB), "msg_rate_mpps": 2.450225}
    assert r["rows"][-1]["bw_avg_gbps"] == pytest.approx(310.05 * MIB)


def test_gpudirect_runs_with_cuda_lines_around_the_table():
    h200 = lt.parse_perftest(read("perftest_write_bw_use_cuda_dmabuf_h200_pod_a_gbits.txt"))
    assert (h200["device"], h200["link_type"], h200["mtu"], h200["qps"], h200["bw_unit"], len(h200["rows"])) == \
        ("mlx5_3", "Ethernet", 4096, 1, "Gb/sec", 23)
    assert h200["rows"][0] == {"bytes": 2, "iterations": 5000, "bw_peak_gbps": 0.057240, "bw_avg_gbps": 0.056633,
                               "msg_rate_mpps": 3.539560}
    assert h200["rows"][-1] == {"bytes": 8388608, "iterations": 5000, "bw_peak_gbps": 140.55, "bw_avg_gbps": 140.40,
                                "msg_rate_mpps": 0.002092}
    rtx = lt.parse_perftest(read("perftest_write_bw_use_cuda_mib_cpufreq_inside_table_rtx4080.txt"))
    assert (rtx["device"], rtx["link_type"], rtx["mtu"], rtx["bw_unit"]) == ("mlx5_0", "IB", 4096, "MiB/sec")
    assert rtx["rows"] == [{"bytes": 65536, "iterations": 5000, "bw_peak_gbps": pytest.approx(14954.91 * MIB),
                            "bw_avg_gbps": pytest.approx(14948.67 * MIB), "msg_rate_mpps": 0.239179}]


def test_failures_before_any_table_carry_perftests_words():
    with pytest.raises(lt.ParseError, match=r"perftest said: .*CUDA DMA-BUF cannot be used without CUDA \| "
                                            r"Parser function exited with Error"):
        lt.parse_perftest(read("perftest_error_cuda_dmabuf_option_order_issue336.txt"))
    with pytest.raises(lt.ParseError) as err:
        lt.parse_perftest(read("perftest_error_rdma_cm_server_and_client_issue132.txt"))
    for said in ("ethernet_read_keys: Couldn't read remote address", "Failed to exchange data between server and "
                 "clients", "Failed to modify QP to RTS", "Unable to Connect the HCA's through the link"):
        assert said in str(err.value)


def test_non_finite_figures_are_unknown_and_wrong_kinds_in_json_are_parse_errors():
    """Found by test_link_tests_fuzz.py: a 'nan' count raised ValueError, a JSON figure of the wrong kind raised
    TypeError or AttributeError, and deep nesting RecursionError; none of them a ParseError (exit 2)."""
    head = "  RDMA_Write BW Test\n #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]\n"
    (row,) = lt.parse_perftest(head + " 65536  5000  nan  inf  0.1\n")["rows"]
    assert row == {"bytes": 65536, "iterations": 5000, "bw_peak_gbps": None, "bw_avg_gbps": None,
                   "msg_rate_mpps": 0.1}
    with pytest.raises(lt.ParseError, match="no result rows"):
        lt.parse_perftest(head + " 65536  nan  1.0  1.0  0.1\n")
    with pytest.raises(lt.ParseError, match=r"'end.sum_received': 'bits_per_second' is a string; expected a number"):
        lt.parse_iperf3('{"end": {"sum_received": {"bits_per_second": "9e9"}}}')
    with pytest.raises(lt.ParseError, match=r"'start' is a list; expected an object"):
        lt.parse_iperf3('{"error": "x", "start": []}')
    with pytest.raises(lt.ParseError, match="nests too deeply"):
        lt.parse_iperf3('{"end": ' + "[" * 100_000)
    with pytest.raises(lt.ParseError, match=r"'results' is a list"):
        lt.parse_perftest_json('{"results": [1]}', report_gbits=True)


def test_iperf3_before_3_10_udp_one_sum_is_the_senders_bytes_with_the_receivers_loss():
    """iperf 3.1.3 (0-complexity/selfhealing): -u -k 10000 of 8192 B ends with one 'sum' of 81920000 bytes, the
    10000 blocks sent, and the receiver's 69 of 9996 datagrams lost. It was read as the receiver's rate too."""
    with open(os.path.join(FIX, "iperf3_udp_blocks_3.1.3_one_sum_command_before_json_selfhealing.res"),
              encoding="utf-8") as f:
        r = lt.parse_iperf3(f.read())
    assert (r["version"], r["protocol"], r["streams"], r["reverse"], r["bidir"]) == ("iperf 3.1.3", "UDP", 1, False, False)
    assert r["sent_bps"] == 834711189.017002 and r["received_bps"] is None
    assert "69 of 9996 datagrams lost" in r["reasons"]["received_bps"]
    assert (r["lost_packets"], r["packets"], r["lost_percent"], r["jitter_ms"]) == (69, 9996, 0.690276, 0.092)
    assert r["duration_s"] is None and "-k 10000" in r["reasons"]["duration_s"] and r["seconds"] == 0.785134


# --- the ninth collection: values read by hand from each file before the parser ran ---

def test_send_bandwidth_over_rdma_cm_on_roce_v1_pasted_without_rules():
    r = lt.parse_perftest(read("perftest_send_bw_rdma_cm_roce_v1_no_rules_gbits_ucx9430.txt"))
    assert (r["test"], r["kind"], r["device"], r["link_type"], r["mtu"], r["qps"], r["connection"], r["bw_unit"],
            r["bidirectional"]) == ("Send BW Test", "bandwidth", "rocep68s0", "Ethernet", 1024, 1, "RC", "Gb/sec", False)
    assert r["rows"] == [{"bytes": 65536, "iterations": 1000, "bw_peak_gbps": 36.43, "bw_avg_gbps": 36.07,
                          "msg_rate_mpps": 0.068798}]


def test_a_result_header_whose_row_was_cut_is_no_result():
    with pytest.raises(lt.ParseError, match="a result header but no result rows"):
        lt.parse_perftest(read("perftest_write_bw_server_duration_header_row_cut_issue234.txt"))


def test_a_latency_row_whose_columns_ran_together_with_no_iteration_count_is_no_row():
    """Found by test_link_tests_fuzz.py once the ninth collection's files joined its seeds: a latency row whose
    figures ran together was split at two decimals, but its iteration count was taken on trust, and a cell that is
    no number raised ValueError (a traceback) instead of leaving the line unread."""
    head = "                    RDMA_Read Latency Test\n #bytes #iterations    t_min[usec]    t_max[usec]\n"
    with pytest.raises(lt.ParseError, match="no result rows"):
        lt.parse_perftest(head + " 2      x\u0219       1289984            3.88           128993.46\n")
    (row,) = lt.parse_perftest(head + " 2      1000       3.8812.34\n")["rows"]
    assert (row["bytes"], row["iterations"], row["t_min_us"], row["t_max_us"]) == (2, 1000, 3.88, 12.34)


# --- the tenth collection (evidence_fixtures/README.md) ---

def test_perftest_lines_behind_a_test_harness_log_prefix():
    """avocado-misc-tests logs each line of perftest as '2019-07-16 03:43:24,134 process  L0458 DEBUG| [stdout] ...'
    (avocado-misc-tests#1196): the reader found no '#bytes' header (it looked only at a line's start). Values read
    by hand: one row of 1024 bytes, 1000 iterations, 1476.74 MB/sec average, 1.512181 Mpps; the peak printed 0.00
    (not measured: null); the title is not in the passage."""
    r = lt.parse_perftest(read("perftest_send_bw_multicast_avocado_log_prefix_pr1196.txt"))
    assert (r["test"], r["kind"], r["bw_unit"], r["device"]) == (None, "bandwidth", "MB/sec", None)
    assert r["rows"] == [{"bytes": 1024, "iterations": 1000, "bw_peak_gbps": None,
                          "bw_avg_gbps": pytest.approx(1476.74 * MIB), "msg_rate_mpps": 1.512181}]
    # other prefixes a launcher or shipper puts before every line, timestamps that change from line to line
    table = read("perftest_write_bw_gbits_issue273.txt")
    plain = lt.parse_perftest(table)
    for prefix in ("0: ", "[1,0]<stdout>:", "2024-08-03T10:00:0{}.123Z pod-a ", "worker-1 | "):
        lines = [prefix.format(i % 10) + line for i, line in enumerate(table.splitlines())]
        assert lt.parse_perftest("\n".join(lines)) == plain, prefix


# --- the eleventh collection (evidence_fixtures/README.md): values read by hand before the reader was run ---

def test_bidirectional_sweep_from_rocm_docs_behind_an_rst_indent_with_a_placeholder_device():
    """ROCm/gpu-cluster-networking's D2D example: a 3-blank reStructuredText indent on every line, the command behind
    '$ (...)', the device a placeholder; 23 rows from 2 B to 8 MiB (the first with six decimals)."""
    r = lt.parse_perftest(read("perftest_write_bw_bidir_a_sweep_rocm_docs_rst_indent_placeholder_device.txt"))
    assert (r["test"], r["kind"], r["device"], r["link_type"], r["connection"], r["mtu"], r["qps"], r["bidirectional"],
            r["bw_unit"]) == ("RDMA_Write Bidirectional BW Test", "bandwidth", "<RDMA-NIC-2>", "Ethernet", "RC", 4096, 1,
                              True, "Gb/sec")
    rows = r["rows"]
    assert [row["bytes"] for row in rows] == [2 ** k for k in range(1, 24)]
    assert {row["iterations"] for row in rows} == {5000}
    assert rows[0] == {"bytes": 2, "iterations": 5000, "bw_peak_gbps": 0.142947, "bw_avg_gbps": 0.012281,
                       "msg_rate_mpps": 0.767588}
    assert rows[-1] == {"bytes": 8388608, "iterations": 5000, "bw_peak_gbps": 204.59, "bw_avg_gbps": 204.59,
                        "msg_rate_mpps": 0.003049}
    assert max(row["bw_avg_gbps"] for row in rows) == 204.59


def test_latency_row_of_tabbed_cells_after_two_cpu_frequency_warnings():
    """A ConnectX-7 NDR pair joined by a DAC cable (code index file 58145501009): 2025 perftest's two-setting lines
    ('Lock-free', 'Using Enhanced Reorder'), two CPU-frequency warnings between the header and the row, the row's
    cells joined by tabs; the next run's prompt after the closing rule is not a row."""
    r = lt.parse_perftest(read("perftest_send_lat_ndr_dac_cpufreq_twice_tabbed_row_lock_free_settings.txt"))
    assert (r["test"], r["kind"], r["device"], r["link_type"], r["connection"], r["mtu"], r["qps"]) == (
        "Send Latency Test", "latency", "mlx5_0", "IB", "RC", 4096, 1)
    assert r["rows"] == [{"bytes": 2, "iterations": 1000, "t_min_us": 1.24, "t_max_us": 5.19, "t_typical_us": 1.27,
                          "t_avg_us": 1.27, "t_stdev_us": 0.0, "p99_us": 1.37, "p99_9_us": 5.19}]


@pytest.mark.parametrize("name, said", [
    ("perftest_write_bw_server_root_prompt_cut_before_result_header_issue240.txt",
     "the RDMA_Write BW Test settings are here but no table"),
    ("perftest_send_bw_bond_rdma_cm_exchange_date_and_xtrace_lines_cut_issue82.txt",
     "the Send BW Test settings are here but no table"),
    ("perftest_write_bw_report_min_bw_indented_four_header_only_pr214.txt",
     "the RDMA_Write BW Test settings are here but no table"),
    ("perftest_send_bw_two_qps_server_first_row_cut_byteps371.txt",
     "a result header but no result rows"),
])
def test_outputs_cut_before_their_result_are_no_result(name, said):
    """Pastes the stored copies cut before the result (perftest#240, #82, PR#214) or inside the first row (byteps#371,
    '2  2000  0.00'): no result, and a cut row is not a row; the error says which."""
    with pytest.raises(lt.ParseError, match=said):
        lt.parse_perftest(read(name))


def test_iperf3_text_report_is_refused_with_what_to_run_instead():
    """esnet/iperf#703's client output (iperf3 3.x text, the 'Bandwidth' column of before 3.3, every interval after
    the first at 0.00 bits/sec): not read, and the error now says it is iperf3's text report and to run with -J."""
    with pytest.raises(lt.ParseError, match=r"no JSON object in the text; this is iperf3's text report, which is not "
                                            r"read: run iperf3 with -J \(--json\)"):
        lt.parse_iperf3(read("iperf3_text_not_json_zero_intervals_iperf703.txt"))
    with pytest.raises(lt.ParseError, match=r"no JSON object in the text$"):
        lt.parse_iperf3("hello")


# --- the twelfth collection ---

def test_every_real_perftest_output_reads_the_same_with_a_terminals_colour_codes():
    """perftest's output kept with a terminal's colour codes around each line (a coloured launcher or log shipper):
    all 21 published outputs with a result read as 'a result header but no result rows' before (the rows' first cell
    was '\\x1b[32m2', not a number); they read as they do without the codes."""
    read_any = 0
    for name in sorted(os.listdir(FIX)):
        if not (name.startswith("perftest_") and name.endswith(".txt")):
            continue
        text = read(name)
        try:
            plain = lt.parse_perftest(text)
        except lt.ParseError:
            continue
        coloured = "\n".join(f"\x1b[32m{line}\x1b[0m" for line in text.splitlines())
        assert lt.parse_perftest(coloured) == plain, name
        tput = "\n".join(f"\x1b[32m{line}\x1b(B\x1b[m" for line in text.splitlines())  # `tput sgr0`: ESC ( B ESC [ m
        assert lt.parse_perftest(tput) == plain, name
        read_any += 1
    assert read_any >= 20


def test_send_bidirectional_eight_qps_roce_sweep_ending_at_a_code_fence():
    """Thirteenth collection: `ib_send_bw -b --qp=8 -a --report_gbits -x 3` on RoCE (GID lines per QP), a 72-dash
    line above the title and the table ended by the page's code fence, not perftest's dash line."""
    r = lt.parse_perftest(read("perftest_send_bw_bidir_8qp_roce_gid3_a_gbits_fence_end.txt"))
    assert (r["test"], r["kind"], r["device"], r["link_type"], r["connection"]) == (
        "Send Bidirectional BW Test", "bandwidth", "mlx5_1", "Ethernet", "RC")
    assert r["mtu"] == 4096 and r["qps"] == 8 and r["bidirectional"] is True and r["bw_unit"] == "Gb/sec"
    assert [row["bytes"] for row in r["rows"]] == [2**k for k in range(1, 15)]
    assert r["rows"][0] == {"bytes": 2, "iterations": 8000, "bw_peak_gbps": 0.120775, "bw_avg_gbps": 0.079737,
                            "msg_rate_mpps": 4.983549}
    assert r["rows"][-1] == {"bytes": 16384, "iterations": 8000, "bw_peak_gbps": 194.36, "bw_avg_gbps": 194.33,
                             "msg_rate_mpps": 1.482599}


def test_send_bidirectional_duration_run_server_table_first_in_a_c_comment():
    """Thirteenth collection: server and client tables of `ib_send_bw -D5 -b` kept in a C comment; the first run
    (the server's) is read, its unmeasured peak (0.00 under -D) is unknown, MB/sec becomes Gb/s."""
    r = lt.parse_perftest(read("perftest_send_bw_bidir_duration_mb_server_then_client_in_c_comment.txt"))
    assert r["test"] == "Send Bidirectional BW Test" and r["bidirectional"] is True and r["bw_unit"] == "MB/sec"
    assert (r["device"], r["link_type"], r["qps"], r["mtu"]) == ("mlx5_0", "IB", 1, 4096)
    (row,) = r["rows"]
    assert row["bytes"] == 4096 and row["iterations"] == 8758300 and row["bw_peak_gbps"] is None
    assert row["bw_avg_gbps"] == pytest.approx(11403.46 * 2**20 * 8 / 1e9) and row["msg_rate_mpps"] == 2.919285


def test_a_qp_count_in_superscript_digits_is_unknown_not_a_crash():
    """str.isdigit() is true for '²', which int() refuses: the fuzz run over the thirteenth collection's fixtures
    raised ValueError out of parse_perftest on 'Number of qps   : ²'."""
    text = read("perftest_send_bw_bidir_8qp_roce_gid3_a_gbits_fence_end.txt").replace(
        "Number of qps   : 8", "Number of qps   : \u00b2")
    r = lt.parse_perftest(text)
    assert r["qps"] is None and len(r["rows"]) == 14


def test_raw_ethernet_lat_with_blanks_collapsed_keeps_both_columns_of_settings():
    """Thirteenth collection: `raw_ethernet_lat --server` copied from a web page with runs of blanks collapsed to one, so
    'Dual-port : OFF Device : mlx5_1' is one part; device, QP count and the RawEth connection were null before."""
    r = lt.parse_perftest(read("perftest_raw_ethernet_lat_server_rawEth_blanks_collapsed_double_spaced.txt"))
    assert (r["test"], r["kind"], r["device"], r["connection"], r["qps"]) == (
        "Send Latency Test", "latency", "mlx5_1", "RawEth", 1)
    assert r["link_type"] == "Ethernet" and r["mtu"] == 1518 and r["bidirectional"] is False and r["bw_unit"] is None
    assert r["rows"] == [{"bytes": 64, "iterations": 1000, "t_min_us": 0.81, "t_max_us": 2.58, "t_typical_us": 0.85,
                          "t_avg_us": 0.85, "t_stdev_us": 0.06, "p99_us": 0.89, "p99_9_us": 2.58}]


def test_collapsed_settings_take_no_value_with_a_colon_and_no_second_name():
    """A MAC address or a GID is one word with colons in it, not two settings."""
    text = ("                    Send BW Test\n Device : mlx5_0\n MAC attached : EC:0D:9A:C1:BA:61\n"
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:22:116:220\n Number of qps : 2 Transport type : IB\n"
            " #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]\n 65536 1000 0.00 100.00 0.001600\n")
    r = lt.parse_perftest(text)
    assert r["device"] == "mlx5_0" and r["qps"] == 2 and r["connection"] is None
