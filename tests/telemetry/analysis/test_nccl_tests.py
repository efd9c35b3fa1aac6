"""telemetry.analysis.nccl_tests on real nccl-tests outputs (tests/telemetry/nccl_tests_tables/, sources in its README):
every row of every file is read, into the collective sweep's JSON, and `telemetry compare` takes the files."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from telemetry.analysis.compare import CompareError, compare
from telemetry.analysis.nccl_tests import CSV_COLUMNS, NcclTestsError, parse, read, to_csv
from telemetry.analysis.nccl_tests_json import DTYPES

TABLES = Path(__file__).parent.parent / "nccl_tests_tables"
# the twelfth collection's table whose source the code index names by file id only (no .json: its README row says why)
INC_TABLE = "all_reduce_perf_code_index_inc_two_ranks_wrong_counts_e_notation_oob_108_failed.txt"
INC_TABLE_3 = "all_reduce_perf_code_index_inc_three_ranks_connect_qp_line_inside_table_oob_162_failed.txt"
# rows per file, counted by hand from the published text
ROWS = {
    "all_gather_perf_mpi_2.18_three_runs.txt": 24,
    "all_gather_perf_old_no_redop.txt": 34,
    "all_gather_perf_unchecked_na.txt": 10,
    "all_reduce_perf_2.20_unalign_excerpt.txt": 4,
    "all_reduce_perf_efa_old_tagged.txt": 30,
    "all_reduce_perf_h100_16ranks.txt": 31,
    "all_reduce_perf_issue78_old_error_col.txt": 2,
    "all_reduce_perf_mpi_tagged_2.18.txt": 8,
    "all_reduce_perf_srun_labels_nofooter.txt": 32,
    "alltoall_perf_issue78_old_blank_redop.txt": 2,
    "alltoall_perf_old_blank_redop.txt": 34,
    "reduce_scatter_perf_old.txt": 34,
    "sendrecv_perf_issue214_excerpt.txt": 5,
    "all_reduce_perf_issue311_info_lines_inside_table.txt": 15,
    "all_reduce_perf_issue287_one_5090_wide_cells.txt": 25,
    "all_reduce_perf_issue287_failed_before_first_row.txt": 0,
    "alltoall_perf_issue355_2.17.6_failure_in_first_row.txt": 0,
    "gather_perf_issue350_trace_lines_no_footer.txt": 11,
    "broadcast_perf_mpi_2.18_condensed_two_runs.txt": 19,
    "all_reduce_perf_issue182_two_runs_rows_interleaved.txt": 10,
    "all_reduce_perf_issue167_max_min_redops_excerpt.txt": 11,
    # the third collection (each with a .json of values read by hand, see test_hand_read_truth_of_each_new_table)
    "all_reduce_perf_issue347_host_names_with_spaces_cut_before_average.txt": 1,
    "all_reduce_perf_issue1244_nvlstree_error_col_title_without_hash.txt": 8,
    "all_gather_perf_issue1435_bfloat16_linear_steps_excerpt.txt": 7,
    "all_reduce_perf_aws_k8s_tester_503_tagged_padded_header_excerpt.txt": 3,
    "all_reduce_perf_dstack_3961_rows_only_wide_wrong_cells.txt": 11,
    "all_reduce_perf_issue1706_destroy_lines_before_footer.txt": 1,
    "all_reduce_perf_pytorch_84803_rank_pid_layout_with_wrong_excerpt.txt": 3,
    "all_gather_test_issue120_nccl1_bytes_N_res_excerpt.txt": 10,
    "reduce_scatter_perf_issue128_zero_size_rows_excerpt.txt": 7,
    "all_reduce_perf_issue252_title_line_cut_to_in_place.txt": 5,
    "all_reduce_perf_issue249_hashless_blocking_line_no_rows.txt": 0,
    "all_reduce_perf_issue107_two_processes_each_rank_0.txt": 0,
    # the fourth collection (rccl-tests and RCCL pull requests, GB200 NVL72, FP8 rows, GCP A3 Mega)
    "all_reduce_perf_hpc_ai_envs_30_rccl_tests_version_line_mi300x_excerpt.txt": 1,
    "broadcast_perf_rccl_2075_gfx1151_concluded_footer_excerpt.txt": 10,
    "all_reduce_perf_rccl_2078_ainic_17GB_rows_footer_excerpt.txt": 4,
    "all_reduce_perf_coreweave_43_gb200_nvl72_last_rank_line_only.txt": 5,
    "all_reduce_perf_mscclpp_646_f8e5m2_rows_excerpt.txt": 11,
    "all_reduce_perf_ai_infra_376_a3mega_tcpxo_na_wrong_excerpt.txt": 10,
    "broadcast_perf_issue82_root_without_redop_error_na_warn_lines.txt": 1,
    "all_reduce_perf_aks_rdma_30_rows_after_info_lines_no_header_na.txt": 5,
    "all_reduce_perf_issue219_failure_before_header_mpi_abort.txt": 0,
    "all_reduce_perf_rocm_systems_3272_rccl_version_banner_before_header_excerpt.txt": 5,
    # the fifth collection (nccl-tests 2.17 crash after the header, 2020 hashless table, Nix, indented MPI tags)
    "alltoall_perf_nccl_2112_2.17.8_segfault_signal_after_header.txt": 0,
    "all_gather_perf_issue37_hashless_2020_error_col_out_of_bounds_failed.txt": 1,
    "all_gather_perf_nixpkgs_251856_one_gpu_nix_store_path_wide_algbw.txt": 1,
    "indented_mpi_tagged_bottlerocket_304_rows_redop_none_excerpt.txt": 9,
    "all_reduce_perf_nccl_241_2019_header_then_mpirun_nonzero_exit.txt": 0,
    "all_reduce_perf_issue27_footers_only_two_runs_in_backticks.txt": 0,
    "all_reduce_perf_issue176_prose_title_sharp_off_error_col_excerpt.txt": 6,
    "all_reduce_perf_rccl_1352_two_runs_side_by_side_excerpt.txt": 4,  # 2 lines, each two runs' rows
    # the sixth collection (code fence and backtick glued to the '#', a markdown pipe table, a modified build)
    "all_reduce_perf_issue150_code_fence_glued_to_first_hash_line_excerpt.txt": 4,
    "all_reduce_perf_nccl_1184_tree_row_then_host_prefixed_failure_excerpt.txt": 1,
    "all_reduce_perf_mscclpp_736_markdown_pipe_table_half_excerpt.txt": 9,
    "all_reduce_perf_nccl_583_hashless_fork_params_header_only.txt": 0,
    "all_reduce_perf_nccl_258_backtick_glued_2019_error_col_excerpt.txt": 4,
    # the seventh collection (mscclpp-test's in-place-first tables, a 2022 sendrecv table, rccl-tests on MI250X)
    "sendrecv_perf_issue104_2022_no_redop_uint8_error_col_excerpt.txt": 1,
    "all_reduce_mscclpp_83_in_place_title_first_row_without_out_of_place.txt": 1,
    "alltoall_mscclpp_87_in_place_blank_two_runs_one_mpi_tagged.txt": 2,
    "reduce_scatter_mscclpp_117_in_place_only_three_rows.txt": 3,
    "all_reduce_perf_uccl_396_na_both_blocks_excerpt.txt": 6,
    "alltoall_perf_msccl_48_eight_nodes_in_place_na_excerpt.txt": 3,
    "all_gather_perf_rccl_1490_srun_label_padded_mi250x_excerpt.txt": 5,
    "all_reduce_perf_rccl_929_mpich_mi250x_2023_error_col_excerpt.txt": 8,
    "alltoall_perf_oci_gb300_128_ranks_elided_list_truncated_comment_excerpt.txt": 2,
    "sendrecv_perf_li_plus_playground_command_line_eight_gpus_one_process.txt": 4,
    # the eighth collection (a launcher tag inside rows, prompts and env lines before the header, library 23004)
    "all_reduce_perf_nccl_1453_bracket_rank_tag_inside_rows_excerpt.txt": 10,
    "all_reduce_perf_issue232_shell_prompt_command_tree_two_nodes_excerpt.txt": 5,
    "all_reduce_perf_nccl_1411_env_lines_before_header_excerpt.txt": 7,
    "all_reduce_perf_issue119_linear_step_sizes_footer_excerpt.txt": 6,
    "alltoall_perf_nccl_2169_2.17.8_library_23004_header_cut_before_first_row.txt": 0,
    "all_reduce_perf_issue44_2019_no_redop_error_col_footer_cut_excerpt.txt": 13,
    "all_reduce_perf_nccl_428_2020_root_prompt_command_two_t4_one_row.txt": 1,
    "all_reduce_perf_mooncake_3484_rows_only_excerpt.txt": 11,
    "all_gather_perf_dranet_gke_b200_gib_kubectl_exec_script_16_ranks.txt": 24,
    # the ninth collection (-g 8 in one process, NCCL 1's device lines and test name, an unnamed redop-none table)
    "all_reduce_perf_nccl_1530_g8_one_process_rtx4090_tree_header_cut_before_first_row.txt": 0,
    "all_reduce_perf_gardenlinux_4556_txt_fence_2026_rows_excerpt.txt": 8,
    "rows_redop_none_deepep_303_h20_zero_size_rows_collective_unnamed_excerpt.txt": 10,
    "all_reduce_test_nccl_23_2016_nccl1_uses_device_lines_k10_denormal_res.txt": 3,
    "rows_footer_then_next_tests_command_nccl_340_2020_no_redop_error_col_excerpt.txt": 12,
    "all_reduce_perf_nccl_1184_proto_simple_wrong_counts_elided_rows_excerpt.txt": 3,
    # the tenth collection (six runs behind shell prompts in one blog post, a one-GPU run's re-spaced header)
    "all_reduce_perf_autodl_2080ti_six_runs_prompts_one_gpu_reduce_wide_cells.txt": 168,
    "all_reduce_perf_nccl_1403_root_prompt_mpirun_line_hosts_alternating_list_cut_at_rank_7.txt": 0,
    # the eleventh collection (rows only with #wrong 0, preambles only: srun with an MPI build's binary name, old
    # rccl-tests' 'nThreads: 1 nGpus: 2 nRanks: 1' behind a glued fence, three commands before one preamble)
    "all_reduce_perf_mscclpp_507_nvls_fallback_rows_only_trailing_blank_titles_excerpt.txt": 6,
    "all_reduce_perf_soperator_428_srun_pmix_command_in_backticks_mpi_binary_list_cut_at_rank_11.txt": 0,
    "all_reduce_perf_rccl_957_prose_command_fence_glued_colon_params_two_gpus_info_lines_no_header.txt": 0,
    "all_reduce_perf_mscclpp_477_script_three_commands_then_one_preamble_version_nvls_marker.txt": 0,
    # the twelfth collection (a 2019 -g 8 run under its bare command, alltoall behind sudo's prompt, two unnamed
    # tables of the layouts before 2022)
    "all_reduce_perf_nccl_318_p3dn_g8_one_process_2019_layout_command_blank_line_one_row_excerpt.txt": 1,
    "alltoall_perf_nccl_tests_287_sudo_password_prompt_one_5090_in_place_na_footer.txt": 1,
    "rows_2020_error_col_npkit_19_four_ranks_one_host_collective_unnamed_excerpt.txt": 3,
    "rows_no_header_nccl_644_2021_no_redop_error_col_collective_unnamed_excerpt.txt": 13,
    INC_TABLE: 27,
    INC_TABLE_3: 27,
}
TRUTHS = sorted(TABLES.glob("*.json"))
# a line that starts like a row (after a launcher prefix, or nccl#1453's per-write tag '[0]'): size, count, a type
# (mscclpp-test's rows have no type: a time follows the count)
ROW_LIKE = re.compile(r"^\s*(\[\d+,\d+\]<stdout>:|\d+: |\[\d+\])?\s*\d+\s+\d+\s+[a-z0-9.]+\s")


def test_the_fixtures_are_all_listed_with_a_source():
    files = sorted(p.name for p in TABLES.glob("*.txt"))
    assert files == sorted(ROWS)
    assert len(TRUTHS) >= 12 and all(p.with_suffix(".txt").exists() for p in TRUTHS)
    readme = (TABLES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in files)
    ops = {next(iter(read(str(TABLES / name))["ops"])) for name in files}
    assert {"all_reduce", "all_gather", "reduce_scatter", "sendrecv", "all_to_all", "gather", "broadcast"} <= ops


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_row_of_every_fixture_is_read(name):
    text = (TABLES / name).read_text()
    result = read(str(TABLES / name))
    # a row cut short by a test failure is not a row
    # (two outputs pasted side by side hold two rows on a line, joined by '  |  '; a markdown table's row has
    # ' | ' between its cells)
    assert sum(1 for line in text.splitlines() for part in line.split("  |  ")
               if ROW_LIKE.match(part.replace(" | ", " ")) and "failure" not in part) == ROWS[name]
    assert (result["rows_read"], result["rows_skipped"]) == (ROWS[name], 0)
    for op in result["ops"].values():
        for row in op["rows"]:
            # mscclpp-test's tables (mscclpp#83) have no type column: no type, not a wrong one
            assert row["size"] >= 0 and row["count"] >= 0 and (row["type"] in DTYPES or row["type"] is None)
            assert row["out_of_place"] or row["in_place"]
            for block in (row["out_of_place"], row["in_place"]):
                if block:
                    assert block["time_us"] > 0 and block["busbw_GBps"] >= 0 and block["algbw_GBps"] >= 0


def test_current_layout_with_preamble_and_footer():
    r = read(str(TABLES / "all_reduce_perf_h100_16ranks.txt"))
    op = r["ops"]["all_reduce"]
    assert op["test"] == "all_reduce_perf"  # named by the mpirun command above the output
    assert r["world_size"] == op["world_size"] == 16 and len({d["host"] for d in op["devices"]}) == 2
    assert op["devices"][8] == {"rank": 8, "group": 0, "pid": 6733, "host": "ztan-mig-gq73", "device": 0,
                                "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3"}
    assert op["params"] == {"nThread": 1, "nGpus": 1, "minBytes": 8, "maxBytes": 8589934592, "warmup_iters": 5,
                            "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0, "step": 2, "step_kind": "factor"}
    last = op["rows"][-1]
    assert (last["size"], last["count"], last["redop"], last["root"]) == (8589934592, 2147483648, "sum", -1)
    assert last["out_of_place"] == {"time_us": 47535.0, "algbw_GBps": 180.71, "busbw_GBps": 338.82, "wrong": 0}
    assert op["avg_busbw_GBps"] == 70.742 and op["avg_busbw_source"] == "footer" and op["wrong"] == 0
    assert (r["dtype"], r["redop"], r["iters"], r["warmup"], r["time_reduction"]) == ("float32", "sum", 20, 5, None)


def test_mpi_tagged_output_of_a_recent_version():
    r = read(str(TABLES / "all_reduce_perf_mpi_tagged_2.18.txt"))
    assert list(r["ops"]) == ["all_reduce"]
    op = r["ops"]["all_reduce"]
    assert op["test"] == "all_reduce_perf_mpi" and op["version"].startswith("2.18.0 ")
    assert [d["bus_id"] for d in op["devices"]] == ["0000:02:00", "0000:02:00"]
    assert op["rows"][0]["in_place"]["time_us"] == 4365.21 and op["avg_busbw_GBps"] == 1.57614
    # 2.20 adds 'unalign' and a commit to the version line
    r = read(str(TABLES / "all_reduce_perf_2.20_unalign_excerpt.txt"))
    op = r["ops"]["all_reduce"]
    assert op["params"]["unalign"] == 0 and op["version"].startswith("2.20.0 (b4d5bee)")
    assert op["avg_busbw_source"] == "mean of the rows' busbw (no footer)"


def test_old_layouts_error_column_and_blank_redop():
    r = read(str(TABLES / "all_reduce_perf_efa_old_tagged.txt"))
    op = r["ops"]["all_reduce"]
    assert op["world_size"] == 16 and op["devices"][0]["group"] is None and op["devices"][0]["bus_id"] == "0x10"
    row = op["rows"][-1]
    assert row["root"] is None and row["redop"] == "sum"  # no root column before 2022
    # 'error' is the largest error, not a count: wrong is unknown, the error is kept
    assert row["in_place"] == {"time_us": 184216.0, "algbw_GBps": 23.31, "busbw_GBps": 43.72, "wrong": None,
                               "error": 5e-07}
    assert any("largest error" in n for n in op["notes"]) and op["wrong"] == 0  # the footer's count
    r = read(str(TABLES / "alltoall_perf_issue78_old_blank_redop.txt"))
    row = r["ops"]["all_to_all"]["rows"][0]
    assert (row["count"], row["redop"]) == (1048576, None)
    assert row["out_of_place"]["time_us"] == 520935.0 and row["in_place"]["error"] == 1.0
    r = read(str(TABLES / "all_gather_perf_old_no_redop.txt"))  # no redop column at all
    row = r["ops"]["all_gather"]["rows"][5]
    assert (row["size"], row["count"], row["redop"], row["out_of_place"]["time_us"]) == (32, 1, None, 35.03)
    assert row["out_of_place"]["error"] is None  # validation 0 prints N/A


def test_launcher_prefixes_footerless_tables_and_unchecked_rows():
    r = read(str(TABLES / "all_reduce_perf_srun_labels_nofooter.txt"))
    op = r["ops"]["all_reduce"]
    busbw = [b["busbw_GBps"] for row in op["rows"] for b in (row["out_of_place"], row["in_place"])]
    assert op["avg_busbw_GBps"] == pytest.approx(sum(busbw) / len(busbw)) and op["wrong"] == 0
    assert op["rows"][-1]["size"] == 17179869184
    r = read(str(TABLES / "all_gather_perf_unchecked_na.txt"))
    op = r["ops"]["all_gather"]
    assert all(b["wrong"] is None for row in op["rows"] for b in (row["out_of_place"], row["in_place"]))
    assert op["world_size"] is None and any("N/A" in n for n in op["notes"])
    r = read(str(TABLES / "sendrecv_perf_issue214_excerpt.txt"))
    row = r["ops"]["sendrecv"]["rows"][0]
    assert row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] is None
    r = read(str(TABLES / "all_gather_perf_mpi_2.18_three_runs.txt"))
    assert list(r["ops"]) == ["all_gather", "all_gather_2", "all_gather_3"]
    assert [op["avg_busbw_GBps"] for op in r["ops"].values()] == [1.27827, 0.669677, 1.54607]


def test_layouts_nccl_tests_prints_without_a_published_sample():
    # Built from nccl-tests' format strings (src/util.cu): per-iteration columns and a timestamp (-I 1 -T 1),
    # an out-of-place block left blank (trace replay), and ranks printing at once under mpirun.
    header = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    "
              "i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% "
              "          timestamp")
    row = ("        1024           256     float     sum      -1    10.50    0.10    0.18       0     9.00"
           "    12.00    12.00     5.00    10.40    0.10    0.18       0     9.10    11.00    11.00     4.00"
           "  2026-11-23 10:00:00")
    blank = "        2048           512     float     sum      -1" + " " * 32 + "    11.00    0.19    0.35       0"
    text = "\n".join(["# Collective test starting: all_reduce_perf", header, row,
                      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time"
                      "   algbw   busbw  #wrong", blank])
    r = parse(text)
    first, second = r["ops"]["all_reduce"]["rows"][0], r["ops"]["unknown"]["rows"][0]  # a table with no name
    assert first["timestamp"] == "2026-11-23 10:00:00" and first["in_place"]["extra"]["i_p99"] == 11.0
    assert second["out_of_place"] is None and second["in_place"]["time_us"] == 11.0
    simple = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
              "   busbw  #wrong")
    line = ("           8             2     float     sum      -1     5.00    0.00    0.00       0     5.00    0.00"
            "    0.00       0")
    # two ranks of a build without MPI, each printing its own table, their lines interleaved
    text = "\n".join(f"[1,{rank}]<stdout>:{part}" for part in (simple, line) for rank in (0, 1))
    r = parse(text)
    assert r["rows_read"] == 2 and len(r["ops"]) == 2  # each rank's stream read on its own


def test_csv_and_errors(tmp_path):
    r = read(str(TABLES / "sendrecv_perf_issue214_excerpt.txt"))
    lines = to_csv(r).splitlines()
    assert lines[0].split(",") == CSV_COLUMNS and len(lines) == 6
    assert lines[1] == "sendrecv,sendrecv_perf,2,256,64,float,sum,-1,34.24,0.01,0.01,0,33.65,0.01,0.01,"
    empty = tmp_path / "empty.txt"
    empty.write_text("no table here\n")
    with pytest.raises(Exception, match="no nccl-tests table found"):
        read(str(empty))


def test_compare_a_vendor_table_with_an_own_nccl_tests_run(tmp_path):
    vendor, own = str(TABLES / "all_reduce_perf_h100_16ranks.txt"), str(TABLES / "all_reduce_perf_efa_old_tagged.txt")
    result = compare([vendor, own], str(tmp_path / "cmp"))
    assert result["kind"] == "sweep" and result["labels"] == [
        "nccl-tests: all_reduce_perf_h100_16ranks.txt", "nccl-tests: all_reduce_perf_efa_old_tagged.txt"]
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| 8 GB |" not in md  # the other run stops at 4 GB: the rows and the average stop there too
    assert "averages use the common range 8 B - 4 GB (30 sizes) only" in md
    assert "| 8 B | 124 us | 176 us (+42.8%, 1.43x) |" in md  # best block: 123.5 us vs 176.3 us
    with pytest.raises(CompareError, match="no collective in common"):
        compare([vendor, str(TABLES / "alltoall_perf_old_blank_redop.txt")], str(tmp_path / "none"))
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"] == [vendor, own]


def test_failed_runs_say_where_they_failed():
    r = read(str(TABLES / "all_reduce_perf_issue287_failed_before_first_row.txt"))
    op = r["ops"]["all_reduce"]
    assert r["failed"] and op["rows"] == [] and op["world_size"] == 2 and op["avg_busbw_GBps"] is None
    assert op["failures"][0].startswith("GENOA-06: Test NCCL failure common.cu:392") and len(op["failures"]) == 6
    assert any(n.startswith("the test failed before the first row") for n in op["notes"])
    # the failure cuts the first row short: not a row, not a skipped row, a failure
    r = read(str(TABLES / "alltoall_perf_issue355_2.17.6_failure_in_first_row.txt"))
    op = r["ops"]["all_to_all"]
    assert r["failed"] and op["rows"] == [] and op["skipped_lines"] == [] and op["world_size"] == 16
    assert "Test CUDA failure" in op["failures"][0] and len({d["host"] for d in op["devices"]}) == 2
    assert op["version"].startswith("2.17.6") and r["nccl_version"] == op["nccl_version"] == "2.28.7"


def test_nccl_lines_inside_the_table_and_tables_without_footer():
    r = read(str(TABLES / "all_reduce_perf_issue311_info_lines_inside_table.txt"))
    op = r["ops"]["all_reduce"]
    assert (r["world_size"], r["nccl_version"], op["avg_busbw_GBps"], op["wrong"]) == (8, "2.23.4", 8.69534, 0)
    assert len({d["host"] for d in op["devices"]}) == 4 and op["rows"][-1]["size"] == 4294967296
    assert op["rows"][-1]["in_place"] == {"time_us": 347314.0, "algbw_GBps": 12.37, "busbw_GBps": 21.64, "wrong": 0}
    r = read(str(TABLES / "gather_perf_issue350_trace_lines_no_footer.txt"))
    op = r["ops"]["gather"]
    assert op["rows"][-1]["size"] == 11408506880 and {row["root"] for row in op["rows"]} == {0}
    assert {row["redop"] for row in op["rows"]} == {"none"} and r["redop"] is None and r["nccl_version"] == "2.16.5"
    assert op["avg_busbw_source"] == "mean of the rows' busbw (no footer)"
    assert any("cut short" in n for n in op["notes"]) and not r["failed"]
    r = read(str(TABLES / "all_reduce_perf_issue287_one_5090_wide_cells.txt"))
    op = r["ops"]["all_reduce"]
    assert op["rows"][-1]["in_place"]["algbw_GBps"] == 1777718.25 and op["avg_busbw_GBps"] == 0.0
    assert r["world_size"] == 1 and op["avg_busbw_source"] == "footer"


def test_broadcast_runs_in_a_condensed_layout():
    r = read(str(TABLES / "broadcast_perf_mpi_2.18_condensed_two_runs.txt"))
    assert list(r["ops"]) == ["broadcast", "broadcast_2"]
    first, second = r["ops"]["broadcast"], r["ops"]["broadcast_2"]
    assert (first["avg_busbw_GBps"], second["avg_busbw_GBps"]) == (1.85032, 0.276277)  # "1.85032 GB/s"
    assert first["params"] == {"nThread": 1, "nGpus": 1, "minBytes": 32768, "maxBytes": 134217728,
                               "warmup_iters": 5, "iters": 20, "step": 2, "step_kind": "factor"}
    assert first["rows"][0] == {"size": 32768, "count": 8192, "type": "float", "redop": "none", "root": 0,
                                "out_of_place": {"time_us": 37.46, "algbw_GBps": 0.87, "busbw_GBps": 0.87, "wrong": 0},
                                "in_place": {"time_us": 133.79, "algbw_GBps": 0.24, "busbw_GBps": 0.24, "wrong": 0}}
    assert r["nccl_version"] == "2.29.7" and r["world_size"] == 2


@pytest.mark.parametrize("name", ["all_reduce_perf_issue311_info_lines_inside_table.txt",
                                  "all_reduce_perf_mpi_tagged_2.18.txt"])
def test_windows_line_endings_read_the_same(name, tmp_path):
    text = (TABLES / name).read_text()
    crlf = tmp_path / name
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    a, b = read(str(TABLES / name)), read(str(crlf))
    assert a["ops"] == b["ops"] and a["rows_read"] == b["rows_read"] > 0


def test_rows_without_their_header_and_mixed_runs():
    r = read(str(TABLES / "all_reduce_perf_issue182_two_runs_rows_interleaved.txt"))
    op = r["ops"]["all_reduce"]
    assert [row["size"] for row in op["rows"]][5:8] == [256, 8, 512]
    assert any(n.startswith("no column header") for n in op["notes"])
    assert any(n.startswith("sizes go back (256 B, then 8 B)") for n in op["notes"])
    # -o all: each reduction restarts the sizes, which is not a mixed run; no single redop for the file
    r = read(str(TABLES / "all_reduce_perf_issue167_max_min_redops_excerpt.txt"))
    op = r["ops"]["all_reduce"]
    assert [row["redop"] for row in op["rows"]].count("min") == 5 and r["redop"] is None and r["dtype"] == "float32"
    assert not any(n.startswith("sizes go back") for n in op["notes"])


def test_comment_lines_that_lost_their_hash():
    # NVIDIA/nccl#583, comment of 2021-10-19, as the issue shows it (GitHub turned "# ..." lines into
    # headings, so the pasted output has no '#'); the stored copy ends after the column header
    text = """mpirun -np 8 all_reduce_perf -b 32 -f 2 -e 8G
 nThread 1 nGpus 1 minBytes 32 maxBytes 8589934592 step: 2(factor) warmup iters: 5       iters: 20 validation: 1 single_test: 0 test_buffer_kind: 2

 Using devices
   Rank  0 Pid 1821213 on AI-A100-Beethoven01 device  0 [0x00] NVIDIA A100-SXM4-40GB
   Rank  1 Pid 1821214 on AI-A100-Beethoven01 device  1 [0x00] NVIDIA A100-SXM4-40GB
   Rank  2 Pid 1821215 on AI-A100-Beethoven01 device  2 [0x00] NVIDIA A100-SXM4-40GB
   Rank  3 Pid 1821216 on AI-A100-Beethoven01 device  3 [0x00] NVIDIA A100-SXM4-40GB
   Rank  4 Pid 1821217 on AI-A100-Beethoven01 device  4 [0x00] NVIDIA A100-SXM4-40GB
   Rank  5 Pid 1821218 on AI-A100-Beethoven01 device  5 [0x00] NVIDIA A100-SXM4-40GB
   Rank  6 Pid 1821219 on AI-A100-Beethoven01 device  6 [0x00] NVIDIA A100-SXM4-40GB
   Rank  7 Pid 1821223 on AI-A100-Beethoven01 device  7 [0x00] NVIDIA A100-SXM4-40GB

                                                     out-of-place                       in-place
       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
"""
    r = parse(text)
    op = r["ops"]["all_reduce"]
    assert r["world_size"] == 8 and op["devices"][7]["pid"] == 1821223 and op["test"] == "all_reduce_perf"
    assert op["params"]["maxBytes"] == 8589934592 and op["params"]["validation"] == 1 and op["rows"] == []


def test_a_pipe_is_read_like_a_file(tmp_path):
    """`telemetry nccl-tests /dev/stdin` or `<(kubectl logs POD)`: a FIFO is read; a directory is refused."""
    import os
    import threading

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    text = (TABLES / "all_reduce_perf_mpi_tagged_2.18.txt").read_bytes()
    writer = threading.Thread(target=lambda: fifo.write_bytes(text))
    writer.start()
    r = read(str(fifo))
    writer.join(timeout=10)
    assert r["ops"]["all_reduce"]["avg_busbw_GBps"] == 1.57614
    from telemetry.analysis.nccl_tests import NcclTestsError
    with pytest.raises(NcclTestsError, match="is a directory"):
        read(str(tmp_path))


def _same(got, want) -> bool:
    """Equal, floats to 1e-9 relative (times in ms are scaled to us), nested dicts and lists alike."""
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, float) and isinstance(got, (int, float)):
        return got == pytest.approx(want, rel=1e-9, abs=1e-12)
    return got == want


@pytest.mark.parametrize("truth_file", TRUTHS, ids=lambda p: p.stem)
def test_hand_read_truth_of_each_new_table(truth_file):
    """Tables collected with a .json beside them (source, what was taken, the values read by hand): every value
    the reader gives for the table matches, and a value the table does not give is null with the reason noted."""
    spec = json.loads(truth_file.read_text())
    # one run's values, or (a passage holding several runs) a list of them in the order of the text
    truths = spec["truth"] if isinstance(spec["truth"], list) else [spec["truth"]]
    assert spec["source"].startswith("https://github.com/") and f"`{truth_file.stem}.txt`" in \
        (TABLES / "README.md").read_text()
    r = read(str(truth_file.with_suffix(".txt")))
    assert list(r["ops"]) == [t["op"] for t in truths] and r["rows_skipped"] == 0
    for truth, op in zip(truths, r["ops"].values()):
        got = {"op": truth["op"], "test": op["test"], "rows": len(op["rows"]), "world_size": op["world_size"],
               "hosts": sorted({d["host"] for d in op["devices"]} - {None}), "avg_busbw_GBps": op["avg_busbw_GBps"],
               "avg_busbw_source": op["avg_busbw_source"], "wrong": op["wrong"], "failed": r["failed"],
               "nccl_version": r["nccl_version"], "dtype": r["dtype"],
               "first_row": op["rows"][0] if op["rows"] else None}
        assert _same(got, truth), {k: (got[k], truth[k]) for k in truth if not _same(got[k], truth[k])}
        for field, value in truth.items():
            if value is None:
                assert spec["null_because"].get(field), f"{field} is null without a reason"


def test_block_titles_that_do_not_match_the_header_and_a_header_without_rows():
    """A title line cut to '# in-place' (nccl-tests#252's table with its pasted title given back its '#') once
    made the out-of-place block read as in-place and dropped the in-place one; titles that do not match the
    header's blocks now fall back to nccl-tests' order. A header with no row and no failure says so."""
    text = (TABLES / "all_reduce_perf_issue252_title_line_cut_to_in_place.txt").read_text()
    row = parse(text.replace("     in-place", "#     in-place"))["ops"]["unknown"]["rows"][0]
    assert row["out_of_place"]["time_us"] == 10052.0 and row["in_place"]["time_us"] == 9676.9
    op = read(str(TABLES / "all_reduce_perf_issue249_hashless_blocking_line_no_rows.txt"))["ops"]["all_reduce"]
    assert op["params"]["blocking"] == 1 and op["params"]["iters"] == 5
    assert any(n.startswith("no row after the column header") for n in op["notes"])


def test_a_row_with_one_blocks_cells_is_read_by_their_columns():
    """mscclpp-test (mscclpp#83, #117) titles in-place first and ends a row after the in-place block when it skips
    out-of-place; nccl-tests leaves the out-of-place block blank at the start instead (mscclpp#87 too). The row's
    cells were always read as the last block; now their columns, against the header's, say which block."""
    op = read(str(TABLES / "all_reduce_mscclpp_83_in_place_title_first_row_without_out_of_place.txt"))["ops"]
    row = op["all_reduce"]["rows"][0]
    assert row["out_of_place"] is None and row["in_place"]["time_us"] == 17018.0
    assert op["all_reduce"]["missing"] == {"out_of_place": "not in this table"}
    blank_first = read(str(TABLES / "alltoall_mscclpp_87_in_place_blank_two_runs_one_mpi_tagged.txt"))["ops"]
    assert [o["rows"][0]["in_place"] for o in blank_first.values()] == [None, None]
    # nccl-tests' own order: a row with its out-of-place block blank is in-place, with or without a shipper prefix
    header = ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
              "busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
              "   (us)  (GB/s)  (GB/s)"]
    rows = ["        1024           256     float     sum      -1                                    94.33    0.01    "
            "0.02      0", "        2048           512     float     sum      -1    99.47    0.02    0.04      0"]
    for prefix in ("", "2025-06-01T10:00:00Z "):
        got = parse("\n".join(prefix + line for line in header + rows))["ops"]["unknown"]["rows"]
        assert got[0]["out_of_place"] is None and got[0]["in_place"]["time_us"] == 94.33
        assert got[1]["in_place"] is None and got[1]["out_of_place"]["time_us"] == 99.47
    # blanks collapsed (a table copied out of a web page): the columns say nothing, nccl-tests' order stands
    collapsed = parse("\n".join(" ".join(line.split()) for line in header + rows[:1]))["ops"]["unknown"]["rows"]
    assert collapsed[0]["out_of_place"] is None and collapsed[0]["in_place"]["time_us"] == 94.33


# What log shippers and launchers of other clusters put before every line (kubectl logs --timestamps, kubectl
# logs --prefix, Ray's actor tag, pdsh, journald, torchrun, the CloudWatch console's copy): the prefix is learnt
# from the lines that hold one of nccl-tests' comment lines or rows, so every real table reads as it does bare
# (Open MPI tags still split streams)
SHIPPER_PREFIXES = ["2025-06-01T10:00:00.123456789Z ", "[pod/nccl-test-launcher/mpi] ", "(RayWorker pid=3) ",
                    "worker-0: ", "Jun 01 10:00:00 node1 nccl[123]: ", "[rank0]:", "  | 2024-12-04T07:19:43.480Z | "]


@pytest.mark.parametrize("prefix", SHIPPER_PREFIXES)
def test_every_real_table_reads_the_same_behind_a_log_shippers_prefix(prefix):
    for name in sorted(ROWS):
        text = (TABLES / name).read_text()
        bare = parse(text, name_hint=name)
        shipped = parse("\n".join(prefix + line for line in text.splitlines()), name_hint=name)
        assert shipped["ops"] == bare["ops"] and shipped["world_size"] == bare["world_size"], name
    # timestamps that change from line to line, before Open MPI's tags
    text = (TABLES / "all_reduce_perf_mpi_tagged_2.18.txt").read_text().splitlines()
    stamped = [f"2025-06-01T10:00:{i % 60:02d}.{i * 7919 % 10 ** 6:06d}Z {line}" for i, line in enumerate(text)]
    assert parse("\n".join(stamped))["ops"] == parse("\n".join(text))["ops"]


def test_out_of_bounds_and_a_failed_bandwidth_check_are_said():
    """nccl-tests' footer lines as its source prints them ("# %-20s : %d %s" with OK/FAILED, and the average
    followed by OK/FAILED when a minimum was given); the rows are nccl-tests#252's."""
    text = (TABLES / "all_reduce_perf_issue252_title_line_cut_to_in_place.txt").read_text()
    bad = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 248 FAILED").replace(
        "# Avg bus bandwidth    : 95.3009", "# Avg bus bandwidth    : 95.3009 FAILED")
    op = parse(bad)["ops"]["unknown"]
    assert op["wrong"] == 248 and op["avg_busbw_GBps"] == 95.3009 and op["avg_busbw_check"] == "FAILED"
    assert any(n.startswith("248 values out of bounds") for n in op["notes"])
    assert any("below the minimum" in n for n in op["notes"])
    ok = parse(text)["ops"]["unknown"]
    assert ok["avg_busbw_check"] is None and not any("out of bounds" in n for n in ok["notes"])


def test_rccl_tests_output_names_rccl_and_the_nccl_release_it_follows():
    """rccl-tests prints RCCL's banner ('RCCL version : 2.28.3-...', rocm-systems#3272 in the corpus) and
    '# rccl-tests version ... rccl-library=22803': the version is read, and a note says the library is RCCL."""
    op = read(str(TABLES / "all_reduce_perf_rocm_systems_3272_rccl_version_banner_before_header_excerpt.txt"))
    assert op["nccl_version"] == "2.28.3"
    assert "the library is AMD's RCCL 2.28.3: nccl_version is the NCCL release it follows" in \
        op["ops"]["all_reduce"]["notes"]
    text = (TABLES / "all_reduce_perf_rocm_systems_3272_rccl_version_banner_before_header_excerpt.txt").read_text()
    tests_line = "# rccl-tests version 2.17.9-x:f220897c9b rccl-headers=22803 rccl-library=22803\n"
    banner_free = "\n".join(line for line in text.splitlines() if "version" not in line)
    run = parse(tests_line + banner_free)["ops"]["unknown"]
    assert run["nccl_version"] == "2.28.3" and any("AMD's RCCL" in n for n in run["notes"])
    nccl = read(str(TABLES / "all_reduce_perf_issue1244_nvlstree_error_col_title_without_hash.txt"))
    assert not any("RCCL" in n for op in nccl["ops"].values() for n in op["notes"])


def test_a_crash_by_signal_is_a_failure_and_indented_mpi_tags_are_tags():
    """A run killed by a signal says so only through its runtime (nccl#2112: UCX's '[host:pid:0:tid] Caught signal
    11 (Segmentation fault' after the header): the run failed before its first row. A log pasted as an indented
    block keeps its indent before Open MPI's tag (bottlerocket-kernel-kit#304): the tag is still read."""
    r = read(str(TABLES / "alltoall_perf_nccl_2112_2.17.8_segfault_signal_after_header.txt"))
    op = r["ops"]["all_to_all"]
    assert r["failed"] and op["failures"][0].startswith("[h20-01:3765588:0:3767672] Caught signal 11")
    assert "the test failed before the first row: [h20-01" in " ".join(op["notes"])
    text = (TABLES / "alltoall_perf_nccl_2112_2.17.8_segfault_signal_after_header.txt").read_text()
    for crash in ("[h20-01:3765588] *** Process received signal ***", "Segmentation fault (core dumped)",
                  "mpirun noticed that process rank 3 with PID 0 on node h20-02 exited on signal 11 (Segmentation "
                  "fault).", "mpirun detected that one or more processes exited with non-zero status, thus causing"):
        assert parse(text.splitlines()[0] + "\n" + "\n".join(text.splitlines()[1:-1] + [crash]))["failed"]
    assert not parse("\n".join(text.splitlines()[:-1]))["failed"]  # the header alone: cut, not failed
    rows = (TABLES / "indented_mpi_tagged_bottlerocket_304_rows_redop_none_excerpt.txt").read_text()
    assert parse(rows)["rows_read"] == 9
    assert parse(rows.replace("<stdout>", "<stderr>"))["rows_read"] == 0  # stderr lines are still dropped


def test_footer_lines_alone_are_runs_of_their_own():
    """A grep of nccl-tests' footers (nccl-tests#27 quotes two processes' footers and nothing else): each
    'Out of bounds' / 'Avg bus bandwidth' pair is a run with its average and no row; after a table, a second
    footer is a second run, not a new average for the first."""
    r = read(str(TABLES / "all_reduce_perf_issue27_footers_only_two_runs_in_backticks.txt"))
    assert [op["avg_busbw_GBps"] for op in r["ops"].values()] == [3.94145, 3.94156]
    assert all(not op["rows"] and any(n.startswith("only nccl-tests' footer lines") for n in op["notes"])
               for op in r["ops"].values())
    table = (TABLES / "all_reduce_perf_issue252_title_line_cut_to_in_place.txt").read_text()
    both = parse(table + "\n# Avg bus bandwidth    : 1.5\n")["ops"]
    assert [op["avg_busbw_GBps"] for op in both.values()] == [95.3009, 1.5] and list(both)[1] == "unknown_2"


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_real_table_reads_the_same_with_tabs_for_blanks(name):
    """A table passed through an editor that turns runs of four blanks into tabs (srun's '0:' label then followed by
    a tab), or kept with a terminal's colour codes around each line (the twelfth collection: 75 of the 87 tables read
    as no table or lost their rows), reads as it does unchanged: the same runs, rows, averages and world size."""
    text = (TABLES / name).read_text()
    plain = parse(text, name_hint=name)
    coloured = "\n".join(f"\x1b[32m{line}\x1b[0m" for line in text.splitlines())
    # review65: `tput sgr0` resets with ESC ( B ESC [ m (xterm): its ESC ( B left behind cost every row
    tput = "\n".join(f"\x1b[32m{line}\x1b(B\x1b[m" for line in text.splitlines())
    for changed in (text.replace("    ", "\t"), coloured, tput):
        got = parse(changed, name_hint=name)
        assert [(k, op["rows"], op["avg_busbw_GBps"], op["world_size"], op["failed"]) for k, op in got["ops"].items()] \
            == [(k, op["rows"], op["avg_busbw_GBps"], op["world_size"], op["failed"]) for k, op in plain["ops"].items()]


def test_two_outputs_pasted_side_by_side_are_two_runs():
    """A before/after comparison pasted side by side (rccl#1352: '... #wrong  |  #  size ...'): each half of a line
    is its own output; a '|' in other text (the label 'original | fix', CloudWatch's copy) splits nothing."""
    r = read(str(TABLES / "all_reduce_perf_rccl_1352_two_runs_side_by_side_excerpt.txt"))
    assert [(k, len(op["rows"]), op["avg_busbw_GBps"]) for k, op in r["ops"].items()] == \
        [("all_reduce", 2, 37.455), ("all_reduce_2", 2, 37.72)]
    one = parse("\n".join(line.split("  |  ")[0] for line in
                          (TABLES / "all_reduce_perf_rccl_1352_two_runs_side_by_side_excerpt.txt").read_text().splitlines()))
    assert [len(op["rows"]) for op in one["ops"].values()] == [2]


def test_a_markdown_pipe_table_reads_as_its_rows():
    """GitHub's editor turns pasted rows into a markdown table ('1024 | 512 | half | sum | ...', a '-- | --' rule
    line, header lines escaped as '\\#', mscclpp#736): it once read as 'a table header and nothing else', its 9
    rows skipped; now each row reads as the same row printed plainly, and a markdown table of prose is no row."""
    text = (TABLES / "all_reduce_perf_mscclpp_736_markdown_pipe_table_half_excerpt.txt").read_text()
    plain = "\n".join(line.replace("\\#", "#").replace(" | ", "   ") for line in text.splitlines()
                      if not line.startswith("--"))
    assert parse(text)["ops"] == parse(plain)["ops"]
    assert parse(text)["rows_read"] == 9
    prose = "| size | what it means |\n| -- | -- |\n| 1024 | one KiB per rank |\n"
    assert parse(text + "\n" + prose)["ops"] == parse(text)["ops"]


# ---- found by mutation fuzzing (inputs minimised): no exception, and no time quadratic in a long line

def test_header_cut_inside_its_last_block():
    for cut in ("busb", "", "busbw #wrong time"):
        out = parse("#  size count type redop root time algbw busbw #wrong time algbw " + cut + "\n"
                    "           8             2     float     sum      -1     9.1    0.00    0.00      0     9.0    0.00"
                    "    0.00      0\n")
        assert out["rows_read"] + out["rows_skipped"] == 1  # read, or kept as a line not read; no IndexError


def test_device_line_with_a_long_run_of_blanks_before_device():
    out = parse("#  Rank  0 Group  0 Pid 1 on node-a" + " " * 100_000 + "device  0 [0x1b] NVIDIA H100\n"
                "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                "           8             2     float     sum      -1     9.1    0.00    0.00      0     9.0    0.00"
                "    0.00      0\n")
    assert [d["host"] for op in out["ops"].values() for d in op["devices"]] == ["node-a"]


def test_a_number_python_will_not_convert_leaves_its_line_unread():
    big = "9" * 5000  # int() refuses strings of over 4,300 digits (ValueError)
    out = parse(f"# nThread 1 nGpus {big} minBytes 8\n# Out of bounds values : {big} OK\n"
                "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                "           8             2     float     sum      -1     9.1    0.00    0.00      0     9.0    0.00"
                "    0.00      0\n", name_hint="all_reduce_perf.txt")
    assert out["rows_read"] == 1


def test_rows_tagged_at_every_write_rows_of_the_older_layouts_without_header_and_a_command_behind_a_prompt():
    """Three faults found on the eighth collection of real tables. nccl#1453: a launcher tagged each write with
    '[0]', so the tag recurs glued inside every row ('-1[0]'), and every row was skipped. nccl-tests#44: rows of
    the pre-2019 layout (no redop, no root, an error cell per block) pasted without their header were no table
    at all. nccl#428: the command behind a root shell's '# ' prompt was taken for a comment, so the test had no
    name."""
    tagged = ("[0]      1048576        262144     float     sum      -1[0]    1626.5    0.64    1.24      0[0]    "
              "2302.3    0.46    0.87      0\n"
              "[1]      1048576        262144     float     sum      -1[1]    1700.0    0.62    1.20      0[1]    "
              "1800.0    0.58    1.10      0\n")
    ops = parse(tagged)["ops"]
    assert [op["rows"][0]["out_of_place"]["time_us"] for op in ops.values()] == [1626.5, 1700.0]  # a stream each
    assert ops["unknown"]["rows"][0]["in_place"] == {"time_us": 2302.3, "algbw_GBps": 0.46, "busbw_GBps": 0.87,
                                                     "wrong": 0}
    old = "       32768          4096   float    13.39    1.22    1.22  0e+00    11.85    1.38    1.38  0e+00\n"
    row = parse(old)["ops"]["unknown"]["rows"][0]
    assert (row["redop"], row["root"], row["out_of_place"]["error"], row["in_place"]["busbw_GBps"]) == \
        (None, None, 0.0, 1.38)
    assert "before 2019" in " ".join(parse(old)["ops"]["unknown"]["notes"])
    with_redop = "   268435456      67108864     float     sum   122131    2.20    4.33  2e-06   122165    2.20    4.33  2e-06"
    assert parse(with_redop)["ops"]["unknown"]["rows"][0]["out_of_place"]["error"] == 2e-06
    # eleven or twelve cells that do not fit those layouts are not read as a table
    assert not parse("   32768  4096  float  sum  1.22  1.22  0e+00  11.85  1.38  1.38  0e+00")["ops"]
    assert not parse("   32768  4096  float  13.39  1.22  1.22  0e+00  11.85  1.38  1.38  sum")["ops"]
    prompt = ("# CUDA_VISIBLE_DEVICES=0,1 ./build/all_reduce_perf  -b 8 -e 128M -f 2 -g 2\n"
              "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
              + old.replace("float", "float     sum"))
    assert parse(prompt)["ops"]["all_reduce"]["test"] == "all_reduce_perf"
    assert "all_reduce" not in parse(prompt.replace("  -b 8 -e 128M -f 2 -g 2", " results"))["ops"]  # no option


def test_nccl_1s_device_lines_and_test_name_and_why_a_collective_is_unknown():
    """NCCL 1's test programs (nccl#23, 2016) list devices as 'Rank  0 uses device  0 [0x26] NAME' (no host, no pid)
    and are named <collective>_test: the world size and the test are read from them. A table that nothing names
    stays `unknown`, and its notes say why (redop none and root -1 fit all_gather and alltoall alike)."""
    op = read(str(TABLES / "all_reduce_test_nccl_23_2016_nccl1_uses_device_lines_k10_denormal_res.txt"))["ops"]
    assert list(op) == ["all_reduce"] and op["all_reduce"]["test"] == "all_reduce_test"
    devices = op["all_reduce"]["devices"]
    assert op["all_reduce"]["world_size"] == 4 and [d["bus_id"] for d in devices] == ["0x26", "0x27", "0x2a", "0x2b"]
    assert {(d["host"], d["pid"], d["name"]) for d in devices} == {(None, None, "Tesla K10.G1.8GB")}
    text = (TABLES / "rows_redop_none_deepep_303_h20_zero_size_rows_collective_unnamed_excerpt.txt").read_text()
    unnamed = parse(text)["ops"]["unknown"]
    assert any(n.startswith("collective unknown: no 'Collective test' line") for n in unnamed["notes"])
    named = parse(text, name_hint="alltoall_perf.txt")["ops"]["all_to_all"]
    assert not any(n.startswith("collective unknown") for n in named["notes"])
    # a name that only ends like a test program is not one
    assert list(parse("run my_all_reduce_test_suite first\n" + text)["ops"]) == ["unknown"]


def test_a_command_line_after_a_tables_footer_names_the_next_test_not_that_table():
    """nccl#340: the next test's command ('./broadcast_perf ...') pasted under a footer named the table above it
    broadcast; a command names the run that starts after it."""
    name = "rows_footer_then_next_tests_command_nccl_340_2020_no_redop_error_col_excerpt.txt"
    text = (TABLES / name).read_text()
    ops = parse(text)["ops"]
    assert list(ops) == ["unknown"] and ops["unknown"]["test"] is None and len(ops["unknown"]["rows"]) == 12
    # the broadcast run that follows is named by it
    bcast = "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n" \
            "#       size    count   type   root     time   algbw   busbw  error     time   algbw   busbw  error\n" \
            "           8        2  float      0     5.10    0.00    0.00  0e+00     5.00    0.00    0.00  0e+00\n"
    ops = parse(text + bcast)["ops"]
    assert list(ops) == ["unknown", "broadcast"] and ops["broadcast"]["test"] == "broadcast_perf"
    # a command above its table still names it
    assert list(parse("./broadcast_perf -b 8 -e 8 -g 2\n" + bcast)["ops"]) == ["broadcast"]


def test_a_library_code_too_long_for_int_is_no_version():
    """Found by the fuzz test once the tenth collection changed its draws: a damaged 'nccl-library=' code of 5000
    digits (int() refuses over 4300) crashed the summary that turns the code into NCCL's version."""
    head = "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=" + "9" * 5000 + "\n"
    name = "sendrecv_perf_li_plus_playground_command_line_eight_gpus_one_process.txt"  # (no version line of its own)
    r = parse(head + (TABLES / name).read_text())
    assert r["nccl_version"] is None and r["rows_read"] == ROWS[name]


def test_a_preamble_cut_before_its_header_is_a_run_whose_world_size_is_unknown():
    """nccl#1403's excerpt ends inside the device list (ranks 0-7 of 16) before any column header: it was 'no
    nccl-tests table found' (exit 2), then, read as a run, its 8 listed ranks made a world of 8. A whole preamble is
    a run (no row, not failed, a note says why), and a list the text ends inside gives no world size."""
    r = read(str(TABLES / "all_reduce_perf_nccl_1403_root_prompt_mpirun_line_hosts_alternating_list_cut_at_rank_7.txt"))
    op = r["ops"]["all_reduce"]
    assert (op["rows"], op["world_size"], r["failed"]) == ([], None, False)
    assert any("ends inside the device list" in n for n in op["notes"])
    assert any("no column header after the preamble" in n for n in op["notes"])
    # the same list closed by another line is whole
    text = (TABLES / "all_reduce_perf_nccl_1403_root_prompt_mpirun_line_hosts_alternating_list_cut_at_rank_7.txt").read_text()
    assert parse(text + "#\n")["ops"]["all_reduce"]["world_size"] == 8


def test_old_rccl_tests_parameters_with_colons_behind_a_glued_fence_make_a_run():
    """rccl-tests before 2024 wrote '# nThreads: 1 nGpus: 2 nRanks: 1 minBytes: 8 ... warmupIters: 5 iters: 20'
    (rccl#957, pasted with a markdown fence glued before it): a preamble of its own, its parameters read; the reader
    once found no run in it ("no nccl-tests table found", exit 2)."""
    r = read(str(TABLES / "all_reduce_perf_rccl_957_prose_command_fence_glued_colon_params_two_gpus_info_lines_no_header.txt"))
    op = r["ops"]["all_reduce"]
    assert (op["world_size"], op["rows"], r["iters"], r["warmup"]) == (2, [], 20, 5)
    assert {k: op["params"][k] for k in ("nThread", "nGpus", "nRanks", "minBytes")} == {
        "nThread": 1, "nGpus": 2, "nRanks": 1, "minBytes": 8}
    # the current wording reads as before
    assert parse("# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
                 "validation: 1 graph: 0\n#  Rank  0 Group  0 Pid 1 on h device  0 [0x1b] GPU\n#\n")[
        "ops"]["unknown"]["params"]["warmup_iters"] == 5


def test_a_tab_separated_summary_made_from_rccl_tests_runs_is_not_a_table(capsys):
    """rocm-systems#9409's 'Before' block (size, type, redop, busbw, algo, proto, nchannels): not nccl-tests output,
    refused with exit 2 and one error line naming the file and what was expected, no traceback."""
    from telemetry.__main__ import main

    path = str(TABLES / "not_nccl_tests_rocm_systems_9409_tab_separated_tuning_summary.tsv")
    with pytest.raises(NcclTestsError, match="no nccl-tests table found"):
        read(path)
    assert main(["nccl-tests", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: no nccl-tests table found (expected")




def test_a_table_saved_as_utf16_is_read_and_an_unreadable_one_says_what_is_allowed(tmp_path, monkeypatch):
    from telemetry.analysis.nccl_tests import NcclTestsError
    text = next(TABLES.glob("all_gather_perf_issue1435*.txt")).read_text()
    (tmp_path / "t.txt").write_bytes(text.encode("utf-16"))  # PowerShell's `>`: "no table found" before
    (tmp_path / "u.txt").write_text(text)
    assert read(str(tmp_path / "t.txt"))["rows_read"] == read(str(tmp_path / "u.txt"))["rows_read"] > 0
    import telemetry.input_files

    def denied(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(telemetry.input_files, "read_limited", denied)  # as a file of mode 000 for a user
    with pytest.raises(NcclTestsError, match="not readable by this user .Permission denied.; allowed: an nccl-tests"):
        read(str(tmp_path / "u.txt"))


def test_wrong_counts_printed_in_e_notation_and_a_failed_out_of_bounds_footer():
    """Two RTX 3090 hosts with an in-network-computing RDMA path that corrupted every sum (code index file id
    20801464614, the twelfth collection): #wrong grows with the size and nccl-tests prints it with %g ('1.04858e+06'),
    the footer says 'Out of bounds values : 108 FAILED' (27 sizes x 2 blocks x 2 ranks). Values read by hand."""
    r = read(str(TABLES / INC_TABLE))
    assert list(r["ops"]) == ["all_reduce"] and r["rows_skipped"] == 0 and r["failed"] is False
    op = r["ops"]["all_reduce"]
    assert (len(op["rows"]), op["world_size"], sorted({d["host"] for d in op["devices"]})) == (27, 2, ["worker1", "worker2"])
    assert (op["wrong"], op["avg_busbw_GBps"], op["avg_busbw_source"]) == (108, 3.02663, "footer")
    assert op["rows"][0]["out_of_place"] == {"time_us": 21.33, "algbw_GBps": 0.0, "busbw_GBps": 0.0, "wrong": 4}
    row = op["rows"][18]  # '1.04858e+06' wrong elements, as printed (not the 1048576 it rounds)
    assert row["size"] == 2097152 and row["out_of_place"]["wrong"] == row["in_place"]["wrong"] == 1048580
    assert "108 values out of bounds: nccl-tests found wrong results" in op["notes"]
    # the same report's three-host run: a program's own 'Connect QP' line between the units line and the first row
    r = read(str(TABLES / INC_TABLE_3))
    op = r["ops"]["all_reduce"]
    assert (len(op["rows"]), op["world_size"], op["wrong"], op["avg_busbw_GBps"], r["rows_skipped"]) == (27, 3, 162, 4.00344, 0)
    assert op["rows"][0]["in_place"]["wrong"] == 6 and op["rows"][-1]["out_of_place"]["wrong"] == 402653000

