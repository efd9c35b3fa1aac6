"""The projection model against hand-computed values."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry.analysis.projection import (DEFAULT_EFFICIENCY, ProjectionError, busbw_at, load_busbw_table,
                                  measured_profile, negligible_above_bps, project)
from telemetry.analysis.runs import load_run

from ...conftest import REPO
from ..recorded import write_run


def profile(**kw):
    base = {"step_time_s": 0.2, "comm_time_s": 0.01, "exposed_s": 0.01, "world_size": 2, "link_bps": None,
            "burst_bytes": 0, "label": "x",
            "ops": {"all_reduce": {"bytes": 1_000_000, "time_s": 0.01, "calls": 1}}}
    return {**base, **kw}


def test_bytes_over_rate_plus_compute():
    # 1 MB all-reduce on 2 ranks puts 1 MB x 2(n-1)/n = 1 MB on the link; 8 Mbit/s = 1 MB/s at efficiency 1.
    # The measured links were unshaped: its 10 ms were the transfer at the host's speed, which the slower
    # link's 1 s overlaps rather than follows
    p = project(profile(), 8e6, efficiency=1.0)
    assert p["by_op"]["all_reduce"]["predicted_s"] == pytest.approx(1.0)
    assert p["step_time_s"] == pytest.approx(0.19 + 1.0)
    # onto a slower link a shaped run's part beyond its wire time is per-call cost: it adds (1.01 s measured at
    # 1 MB/s -> 10 ms)
    shaped = profile(link_bps=8e6, comm_time_s=1.01, exposed_s=1.01, step_time_s=1.2,
                     ops={"all_reduce": {"bytes": 1_000_000, "time_s": 1.01, "calls": 1}})
    assert project(shaped, 4e6, efficiency=1.0)["by_op"]["all_reduce"]["predicted_s"] == pytest.approx(0.01 + 2.0)


def test_token_bucket_credit_and_latency():
    # the link idles 0.19 s: a 0.5 MB bucket refills to 190 kB at 1 MB/s, so 810 kB wait for the rate
    p = project(profile(), 8e6, efficiency=1.0, burst_bytes=500_000, latency_s=0.002)
    assert p["step_time_s"] == pytest.approx(0.19 + 0.81 + 0.002)


def test_overlapped_communication_stays_hidden_up_to_what_was_hidden():
    # 8 ms of the 10 ms were overlapped with compute: only what exceeds it is exposed at the new rate
    # (and at least the exposed 20% of it: the last bucket's share, stretched with the rest)
    p = project(profile(exposed_s=0.002), 8e6, efficiency=1.0)
    assert p["hidden_s"] == pytest.approx(0.008)
    assert p["step_time_s"] == pytest.approx((0.2 - 0.002) + (1.0 - 0.008))
    # with compute enough to hide it all (a 0.15 s window), 0.1 s at 80 Mbit/s still exposes the last
    # bucket's share: 20% of it, as measured
    p = project(profile(exposed_s=0.002, overlap_window_s=0.15), 80e6, efficiency=1.0)
    assert p["step_time_s"] == pytest.approx((0.2 - 0.002) + 0.2 * 0.1)


def test_communication_hides_behind_the_overlap_window():
    # DDP buckets went out during 0.15 s of backward compute; on a fast link 8 of 10 ms hid. At 8 Mbit/s
    # the 1 s of communication can hide behind all 0.15 s of that compute, not only the 8 ms
    p = project(profile(exposed_s=0.002, overlap_window_s=0.15), 8e6, efficiency=1.0)
    assert p["hidden_s"] == pytest.approx(0.15)
    assert p["step_time_s"] == pytest.approx((0.2 - 0.002) + (1.0 - 0.15))
    # on twice the nodes each rank computes half: half the window
    p4 = project(profile(exposed_s=0.002, overlap_window_s=0.15), 8e6, efficiency=1.0, nodes=4)
    assert p4["hidden_s"] == pytest.approx(0.075)


def test_from_a_shaped_run_to_a_faster_link():
    # 1.01 s for 1 s of wire at efficiency 1.0: an efficiency of 0.99, within the range collectives reach
    # (85-100%): the 10 ms scale with the wire, 0.1 s at 80 Mbit/s taking 0.101 s, no per-call part
    measured = profile(link_bps=8e6, comm_time_s=1.01, exposed_s=1.01, step_time_s=1.2,
                       ops={"all_reduce": {"bytes": 1_000_000, "time_s": 1.01, "calls": 1}})
    p = project(measured, 80e6, efficiency=1.0)
    assert p["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.0)
    assert p["step_time_s"] == pytest.approx(0.19 + 0.101)
    # the interval's slow end holds the other reading (10 ms per call) with the wire at 85%
    assert p["interval_s"][1] == pytest.approx(0.19 + 0.01 + 0.1 / 0.85)
    # 1.3 s: past what 85% explains (1 / 0.85 = 1.176 s): per-call cost, all 0.3 s, as before
    slow = profile(link_bps=8e6, comm_time_s=1.3, exposed_s=1.3, step_time_s=1.49,
                   ops={"all_reduce": {"bytes": 1_000_000, "time_s": 1.3, "calls": 1}})
    p = project(slow, 80e6, efficiency=1.0)
    assert p["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.3)
    assert p["step_time_s"] == pytest.approx(0.19 + 0.3 + 0.1)


def test_a_slow_runs_efficiency_shortfall_is_not_taken_for_per_call_cost():
    # 2 lab nodes x 3 ranks at 5mbit, 2026-11-29 (bench/results/lab_configs.md, fourth round): the dp all_reduce
    # of 149,544 bytes over 6 ranks puts x 2(6-1)/6 on the link, less the 16 KiB bucket: 0.414 s at 90% of the
    # rate, 0.4365 s measured (85.3%). Before, the 22.6 ms went onto 50mbit as per-call cost: 0.064 s against
    # 0.0444 s measured there
    p = profile(link_bps=5e6, burst_bytes=16384, world_size=6, step_time_s=0.5201, comm_time_s=0.4365,
                exposed_s=0.4365, ops={"all_reduce": {"bytes": 149_544, "time_s": 0.4365, "calls": 2}})
    got = project(p, 50e6, efficiency=0.9, burst_bytes=16384)
    wire_measured = (149_544 * 10 / 6 - 16384) / (5e6 / 8 * 0.9)
    assert got["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.0)
    base = (149_544 * 10 / 6 - 16384) / (50e6 / 8 * 0.9)
    assert got["comm_time_s"] == pytest.approx(base * 0.4365 / wire_measured)
    assert 0.043 < got["comm_time_s"] < 0.045  # the measured 0.0444 s
    # downward (onto 2mbit) the same shortfall stays per-call cost: amplified as efficiency it would read 1.06x
    down = project(p, 2e6, efficiency=0.9, burst_bytes=16384)
    assert down["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.4365 - wire_measured)


def test_profile_from_a_recorded_run(tmp_path):
    prof = measured_profile(load_run(str(write_run(tmp_path / "r", rate_bps=1e8))))
    assert prof["step_time_s"] == 1.0 and prof["ops"]["all_reduce"] == {"bytes": 1_000_000, "time_s": 0.25,
                                                                       "calls": 1}
    # every step's estimate (0.1 s) rather than the profiled windows' 20% (with the profiler's overhead)
    assert prof["exposed_s"] == pytest.approx(0.1) and prof["exposed_from"] == "estimate"
    assert prof["link_bps"] == 1e8


def test_concurrent_calls_count_once_and_a_late_peer_is_not_communication(tmp_path):
    run = load_run(str(write_run(tmp_path / "r", comm_time=0.25, exposed_time=0.2)))
    for r in run.metrics:
        # two buckets in flight at once: their durations add to 0.4 s while 0.25 s had a call in flight;
        # the rank that waited least had a call in flight for 0.2 s (rank 0 waited 0.05 s for it)
        r["comm"]["all_reduce"]["time_s"] = 0.4
        r["ranks"]["comm_time_s_by_op"]["all_reduce"]["min"] = 0.4
        r["ranks"]["comm_time_s"] = {"min": 0.2}
        r["overlap_window_s"] = 0.3
    prof = measured_profile(run)
    assert prof["comm_time_s"] == pytest.approx(0.2) and prof["ops"]["all_reduce"]["time_s"] == pytest.approx(0.2)
    # rank 0 waited 0.05 s for the late peer, exposed or hidden it cannot say: its exposed 0.2 s is at most the
    # least-waiting rank's 0.2 s of communication (the projection) and at least 0.2 - 0.05 (the interval's low end)
    assert prof["exposed_s"] == pytest.approx(0.2) and prof["exposed_low_s"] == pytest.approx(0.15)
    assert prof["overlap_window_s"] == pytest.approx(0.3)


def test_a_late_peers_wait_hidden_behind_compute_does_not_hide_the_fabric():
    # tp 2 x dp 3 in the lab: rank 0's item-count all-reduce waited for late peers while rank 0 computed its
    # forward, so rank 0 recorded 0.049 s exposed of 0.09 s in flight; the least-waiting rank had 0.049 s.
    # The projection takes all 0.049 s as exposed (the dp all-reduce after backward has nothing to hide
    # behind); the old reading (0.049 - 0.041 wait = 0.008 s) let 0.3 s of tp's backward calls hide it
    p = profile(step_time_s=1.0, comm_time_s=0.049, exposed_s=0.049, exposed_low_s=0.008, overlap_window_s=0.3,
                ops={"all_reduce": {"bytes": 100_000, "time_s": 0.049, "calls": 3}})
    got = project(p, 2e6, efficiency=1.0)  # 100 kB at 250 kB/s: 0.4 s, all exposed
    assert got["step_time_s"] == pytest.approx(1.0 - 0.049 + 0.4)
    # the interval's low end holds the other reading: 0.008/0.049 of the 0.4 s exposed past the 0.3 s window
    low = (1.0 - 0.008) + max(0.4 - 0.3, 0.4 * 0.008 / 0.049)
    assert got["interval_s"][0] == pytest.approx(low)


def test_a_partial_measurement_makes_a_partial_projection(tmp_path):
    untimed = {"all_to_all": {"count": 1, "bytes": 2048, "time_s": None, "untimed": 1, "untimed_bytes": 2048,
                              "busbw_GBps": None, "untimed_reason": "functional collectives are timed on NCCL only"}}
    prof = measured_profile(load_run(str(write_run(tmp_path / "p", extra_comm=untimed))))
    assert prof["partial"] is True and prof["untimed_bytes"] == 2048
    p = project(prof, 8e6)
    assert p["partial"] is True and p["untimed_bytes"] == 2048
    whole = measured_profile(load_run(str(write_run(tmp_path / "w"))))
    assert whole["partial"] is False and project(whole, 8e6)["partial"] is False


# ------------------------------------------------------------ node counts, tables, intervals (issue 11 part 6)

def test_more_nodes_changes_the_bus_factor_and_each_ranks_share():
    # 2 -> 4 ranks: all_reduce puts 1 MB x 2(4-1)/4 = 1.5 MB on each link (1.5 s at 1 MB/s) and the kept
    # global batch halves each rank's forward and backward
    p = project(profile(), 8e6, efficiency=1.0, nodes=4)
    assert p["world_size"] == 4 and p["by_op"]["all_reduce"]["wire_bytes"] == pytest.approx(1.5e6)
    assert p["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.01)
    assert p["compute_s"] == pytest.approx(0.19 / 2)
    assert p["step_time_s"] == pytest.approx(0.095 + 1.5)
    # a replicated optimizer step (40 ms of the 190) costs the same on every rank whatever its share
    p = project(profile(optimizer_s=0.04), 8e6, efficiency=1.0, nodes=4)
    assert p["compute_s"] == pytest.approx(0.15 / 2 + 0.04)
    assert project(profile(optimizer_s=0.04), 8e6, efficiency=1.0)["compute_s"] == pytest.approx(0.19)


def test_lab_nodes_sharing_the_hosts_cores():
    # the lab's 4 ranks on a 2-core host: each core time-shares two ranks, so the halved compute takes 2x;
    # the interval's low end is the halved compute not slowed
    p = project(profile(host_cpus=2, step_spread=(1.0, 1.0)), 8e6, efficiency=1.0, nodes=4)
    assert p["compute_s"] == pytest.approx(0.19) and any("host's 2 cores" in n for n in p["notes"])
    assert p["interval_s"][0] == pytest.approx(0.095 + 1.5)
    assert p["interval_s"][1] == pytest.approx(0.19 + 1.5 / 0.85)
    roomy = project(profile(host_cpus=16, step_spread=(1.0, 1.0)), 8e6, efficiency=1.0, nodes=4)
    assert roomy["compute_s"] == pytest.approx(0.095)
    assert roomy["interval_s"][1] == pytest.approx(0.095 + 1.5 / 0.85)


def test_fewer_lab_ranks_on_the_hosts_cores_keep_the_intervals_low_end():
    # 4 lab ranks on a 2-core host projected onto 2: each computes twice the samples on a core of its own, so
    # the compute stays 0.19 s. The low end took the doubled compute unshared (0.38 s x 0.9) and was clipped to
    # the point: from 5 lab nodes onto 3, 0.4858 s [0.4858, 0.5404] against 0.475 s measured (2026-11-29)
    p = project(profile(host_cpus=2, world_size=4, step_spread=(0.9, 1.2)), 8e6, efficiency=1.0, nodes=2)
    assert p["compute_s"] == pytest.approx(0.19) and any("where 4 did" in n for n in p["notes"])
    assert p["interval_s"][0] == pytest.approx(p["step_time_s"] - 0.19 * 0.1)
    assert p["interval_s"][1] == pytest.approx(0.19 * 1.2 + p["comm_time_s"] / 0.85)


def test_interval_from_the_step_spread_and_the_efficiency_range():
    # compute 0.19 s varies as the measured steps did (-10%/+20%); the 1 MB on the wire at 85-100% of the rate
    p = project(profile(step_spread=(0.9, 1.2)), 8e6, efficiency=1.0)
    low, high = p["interval_s"]
    assert low == pytest.approx(0.19 * 0.9 + 1.0 / 1.0)
    assert high == pytest.approx(0.19 * 1.2 + 1.0 / 0.85)
    assert low < p["step_time_s"] < high


def test_negligible_communication_is_said_and_where_it_starts():
    slow, fast, faster = (project(profile(), r) for r in (8e6, 100e9, 400e9))
    assert not slow["negligible"] and fast["negligible"] and faster["negligible"]
    # the rate where 1 MB on the wire takes 5% of the 0.2 s step, at the default efficiency
    assert negligible_above_bps(profile()) == pytest.approx(1e6 * 8 / (0.05 * 0.2) / DEFAULT_EFFICIENCY)
    assert fast["step_time_s"] == pytest.approx(faster["step_time_s"], rel=1e-3)


TABLE = str(Path(__file__).parent.parent / "nccl_tests_tables" / "all_reduce_perf_h100_16ranks.txt")


def test_busbw_table_from_real_nccl_tests_output():
    # that table's out-of-place row at 1 MiB: busbw 9.68 GB/s; at 2 ranks the all-reduce puts 1 MiB on the link
    table = load_busbw_table(TABLE)
    prof = profile(ops={"all_reduce": {"bytes": 1048576, "time_s": 0.0, "calls": 1}}, comm_time_s=0.0, exposed_s=0.0)
    p = project(prof, None, busbw_table=table)
    assert p["by_op"]["all_reduce"]["wire_s"] == pytest.approx(1048576 / 9.68e9)
    # between its 1 MiB and 2 MiB rows the call time is linear in size
    mid = 1048576 * 1.5
    bw, t = busbw_at(table["all_reduce"], mid)
    t1, t2 = 1048576 / 9.68e9, 2097152 / 15.48e9
    assert t == pytest.approx((t1 + t2) / 2) and bw == pytest.approx(mid / t / 1e9)
    # a flat table at a nominal rate's busbw projects what the rate does
    flat = {"all_reduce": [(1.0, 1e8 / 8 * DEFAULT_EFFICIENCY / 1e9), (1e9, 1e8 / 8 * DEFAULT_EFFICIENCY / 1e9)]}
    assert project(profile(), None, busbw_table=flat)["step_time_s"] == pytest.approx(
        project(profile(), 1e8)["step_time_s"])


# the head of a 3-node lab sweep at 5 Mbit/s (round 5 of the lab): two decimals of GB/s read 0.00 in every row
SLOW_SWEEP = """# fabric-harness collective sweep: 3 ranks on 3 host(s), float32, 65536 to 131072 bytes +65536, warm-up 1, iters 3, time avg
#
# Collective test starting: all_reduce_perf
# fabric-harness test: all_reduce
# nThread 1 nGpus 1 minBytes 65536 maxBytes 131072 step: 65536(bytes) warmup iters: 1 iters: 3 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  22621 on  lab-node0 device -1 [cpu] CPU x86_64
#  Rank  1 Group  0 Pid  22623 on  lab-node1 device -1 [cpu] CPU x86_64
#  Rank  2 Group  0 Pid  22622 on  lab-node2 device -1 [cpu] CPU x86_64
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
       65536         16384     float     sum      -1      N/A     N/A     N/A     N/A   150634    0.00    0.00       0
      131072         32768     float     sum      -1      N/A     N/A     N/A     N/A   297795    0.00    0.00       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.000575137
#
# Collective test concluded: all_reduce_perf
"""


def test_a_slow_labs_own_sweep_is_a_busbw_table_and_its_run_directory_too(tmp_path):
    """`project RUN --busbw-table SWEEP/collectives.txt` of a lab sweep at 5 Mbit/s was refused: 'has no rows with a
    size and a busbw' (each row prints 0.00 GB/s). Each row's busbw is its size over its time x 2(n-1)/n."""
    (tmp_path / "collectives.txt").write_text(SLOW_SWEEP)
    table = load_busbw_table(str(tmp_path / "collectives.txt"))
    assert table["all_reduce"] == [(65536.0, pytest.approx(65536 / 0.150634 * 4 / 3 / 1e9)),
                                   (131072.0, pytest.approx(131072 / 0.297795 * 4 / 3 / 1e9))]
    assert load_busbw_table(str(tmp_path)) == table  # the sweep's run directory names its table
    (tmp_path / "collectives.txt").unlink()
    with pytest.raises(ProjectionError, match=r"a directory without collectives.txt \(not a collective sweep's run "
                                              r"directory\); allowed: .*its run directory$"):
        load_busbw_table(str(tmp_path))
    # a row of 0.00 whose time is unknown is left out, never taken as a bandwidth of 0
    (tmp_path / "t.txt").write_text(SLOW_SWEEP.replace("297795", "   N/A"))
    assert len(load_busbw_table(str(tmp_path / "t.txt"))["all_reduce"]) == 1


def test_a_labs_own_sweep_as_a_table_keeps_the_labs_token_bucket(tmp_path):
    """The lab's own sweep runs its calls back to back, its tc bucket empty; a training step's compute refills it.
    Projected onto its lab's sweep, a 2-node 5mbit run (0.3218 s measured) read 0.3524 s, outside its interval;
    with the bucket, as a --rate target has it, 0.3237 s (bench/results/lab_configs.md)."""
    import json

    (tmp_path / "collectives.txt").write_text(SLOW_SWEEP)
    plain = load_busbw_table(str(tmp_path))
    assert plain.lab_link is None  # no run.json: no lab known, no bucket (a NIC has none)
    (tmp_path / "run.json").write_text(json.dumps({"fabric": {"lab": {"rate": "5mbit", "rate_bps": 5e6,
                                                                       "burst_bytes": 16384}}}))
    lab = load_busbw_table(str(tmp_path))
    assert lab == plain and lab.lab_link == (5e6, 16384.0)
    # 0.09 s of compute a step: the bucket refills whole (16 KiB in 26 ms at 5 Mbit/s)
    prof = profile(ops={"all_reduce": {"bytes": 149544, "time_s": 0.23, "calls": 1}}, step_time_s=0.3218,
                   comm_time_s=0.23, exposed_s=0.23)
    without, with_bucket = project(prof, None, busbw_table=plain), project(prof, None, busbw_table=lab)
    bw, _ = busbw_at(plain["all_reduce"], 149544)
    assert without["by_op"]["all_reduce"]["wire_s"] == pytest.approx(149544 / (bw * 1e9))
    assert with_bucket["by_op"]["all_reduce"]["wire_s"] == pytest.approx((149544 - 16384) / (bw * 1e9))
    assert any("its tc bucket (16384 bytes at 5 Mbit/s)" in n for n in with_bucket["notes"])
    # a table file that is not a sweep's own collectives.txt carries no lab, whatever sits beside it
    (tmp_path / "t.txt").write_text(SLOW_SWEEP)
    assert load_busbw_table(str(tmp_path / "t.txt")).lab_link is None


def test_ops_a_table_lacks_use_its_all_reduce_busbw():
    table = {"all_reduce": [(1.0, 1.0), (1e9, 1.0)]}
    p = project(profile(ops={"broadcast": {"bytes": 1e6, "time_s": 0.0, "calls": 1}}), None, busbw_table=table)
    assert p["by_op"]["broadcast"]["wire_s"] == pytest.approx(1e-3)
    assert any("broadcast: not in the table" in n for n in p["notes"])
    with pytest.raises(ProjectionError, match="no sendrecv or all_reduce table"):
        project(profile(ops={"send": {"bytes": 1e6, "time_s": 0.0, "calls": 1}}), None,
                busbw_table={"all_gather": [(1.0, 1.0)]})


def cli(*args):
    return subprocess.run([sys.executable, "-m", "telemetry", "project", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.integration
def test_cli_says_why_fast_rates_give_the_same_time(tmp_path):
    run = str(write_run(tmp_path / "r"))
    out = tmp_path / "p.json"
    proc = cli(run, "--rate", "100gbit", "--rate", "400gbit", "--rate", "5mbit", "--nodes", "2", "--nodes", "4",
               "--busbw-table", TABLE, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "links were not shaped" in proc.stdout
    assert proc.stdout.count("communication is negligible here") == 6  # 100g and 400g, and the H100 table, x2
    assert "5mbit, 4 node(s): predicted" in proc.stdout
    got = json.loads(out.read_text())["projections"]
    assert len(got) == 8 and all(p["interval_s"][0] <= p["step_time_s"] <= p["interval_s"][1] for p in got)


@pytest.mark.integration
@pytest.mark.parametrize("args, message", [
    ((), "error: project: give the target fabric: --rate RATE"),
    (("--rate", "fast"), "error: --rate: got 'fast'"),
    (("--rate", "1gbit", "--nodes", "0"), "error: --nodes: got '0'"),
    (("--busbw-table", "/no/such.txt"), "error: --busbw-table: "),
    (("--rate", "1gbit", "--efficiency", "1.5"), "error: --efficiency: got 1.5"),
])
def test_cli_bad_input_is_one_line(tmp_path, args, message):
    proc = cli(str(write_run(tmp_path / "r")), *args)
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_lab_runs_take_the_efficiency_measured_for_their_frames():
    from telemetry.analysis.projection import LAB_EFFICIENCY, efficiency_for

    assert efficiency_for(profile()) == DEFAULT_EFFICIENCY  # not a lab run
    assert efficiency_for(profile(mtu=1500)) == LAB_EFFICIENCY[1500] == 0.90
    assert efficiency_for(profile(mtu=9000)) == 0.95 and efficiency_for(profile(mtu=8000)) == 0.95
    assert efficiency_for(profile(mtu=576)) == 0.85  # the lab's smallest frames, measured at 10mbit
    # 1 MB at 8 Mbit/s x 0.90 from an unshaped lab run with 1500-byte frames
    assert project(profile(mtu=1500), 8e6)["by_op"]["all_reduce"]["wire_s"] == pytest.approx(1.0 / 0.9)


def test_repeats_combine_into_medians_and_a_spread_that_holds_every_run():
    from telemetry.analysis.projection import combine_profiles

    runs = [profile(step_time_s=t, comm_time_s=c, exposed_s=c / 2, step_spread=(0.95, 1.05), steps=19, label=f"r{i}",
                    ops={"all_reduce": {"bytes": 1_000_000, "time_s": c, "calls": 1}})
            for i, (t, c) in enumerate([(0.20, 0.010), (0.24, 0.012), (0.18, 0.011)])]
    both = combine_profiles(runs)
    assert both["step_time_s"] == 0.20 and both["comm_time_s"] == 0.011 and both["exposed_s"] == 0.0055
    assert both["ops"]["all_reduce"]["time_s"] == 0.011 and both["steps"] == 57 and both["repeats"] == 3
    # the 10th percentile of the fastest run and the 90th of the slowest, around the median run
    assert both["step_spread"] == pytest.approx((0.18 * 0.95 / 0.20, 0.24 * 1.05 / 0.20))
    assert both["repeat_step_times_s"] == [0.20, 0.24, 0.18] and both["label"] == "r0 (+2 repeats)"
    # the interval of a projection from the repeats holds each run's own projection
    one = [project(r, 8e6, efficiency=1.0)["step_time_s"] for r in runs]
    lo, hi = project(both, 8e6, efficiency=1.0)["interval_s"]
    assert lo <= min(one) and max(one) <= hi
    assert combine_profiles(runs[:1]) is runs[0]


@pytest.mark.parametrize("change, message", [
    ({"world_size": 4}, "world_size differs (r0: 2, r1: 4)"),
    ({"link_bps": 1e8}, "link_bps differs"),
    ({"ops": {"all_gather": {"bytes": 1, "time_s": 0.01, "calls": 1}}}, "their collectives differ"),
])
def test_runs_that_are_not_repeats_of_one_configuration_are_refused(change, message):
    from telemetry.analysis.projection import combine_profiles

    with pytest.raises(ProjectionError, match="not repeats of one configuration") as err:
        combine_profiles([profile(label="r0", step_spread=(1, 1), steps=5),
                          profile(label="r1", step_spread=(1, 1), steps=5, **change)])
    assert message in str(err.value)


@pytest.mark.integration
def test_cli_projects_from_repeats_and_refuses_mixed_runs(tmp_path):
    a, b = str(write_run(tmp_path / "a", step_time=1.0)), str(write_run(tmp_path / "b", step_time=1.2))
    proc = cli(a, b, "--rate", "5mbit")
    assert proc.returncode == 0, proc.stderr
    assert "2 repeats: median step times 1.0000, 1.2000 s" in proc.stdout
    proc = cli(a, str(write_run(tmp_path / "c", rate_bps=1e8)), "--rate", "5mbit")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "not repeats of one configuration: link_bps differs" in proc.stderr


def test_a_start_up_broadcast_the_timeout_cannot_hold_is_named():
    """gloo's broadcast tree delivers the model to the last of n ranks after about n-1 transfers: 1.9 MB to 2 peers at
    1 Mbit/s (efficiency 0.9) is 2 x 1.9e6 x 8 / 0.9e6 = 33.6 s, over half of a 60 s timeout; to 4 peers,
    67 s, over it. Measured in the lab: 1.9 MB to 1 peer at 100kbit failed at start-up after 60 s."""
    lab = profile(startup_bytes=1_892_992, timeout_s=60, backend="gloo")
    (note,) = startup(project(lab, 1e6, efficiency=0.9, nodes=3))
    # round 9: it said "node 0 sends the model over its link 2 time(s)"; gloo's tree forwards it from other ranks
    assert note == ("start-up: the model (1.9 MB) reaches the last rank after 2 transfer(s) over one link (gloo's "
                    "broadcast tree: node 0 sends it to several ranks at once and each forwards it whole), about 34 s "
                    "at this rate: at least half of distributed.timeout_s (60 s)")
    assert startup(project(lab, 1e6, efficiency=0.9, nodes=5))[0].endswith(
        "4 transfer(s) over one link (gloo's broadcast tree: node 0 sends it to several ranks at once and each "
        "forwards it whole), about 67 s at this rate: over distributed.timeout_s, so the run would fail at start-up: raise "
        "it (60 s)")
    assert startup(project(lab, 1e5, efficiency=0.9))  # 2 nodes at 100kbit: 168 s
    assert startup(project(lab, 10e6, efficiency=0.9, nodes=5)) == []  # 6.7 s: nothing to say
    # NCCL pipelines a broadcast along its ring: node 0's link carries the model once
    assert "after 1 transfer(s) over one link, about 17 s" in " ".join(
        project({**lab, "backend": "nccl", "timeout_s": 30}, 1e6, efficiency=0.9, nodes=5)["notes"])
    # a run recorded before the start-up broadcast was counted, or an unshaped target: no note
    assert startup(project(profile(), 1e5, efficiency=0.9)) == [] == startup(project(lab, None))


def startup(projection: dict) -> list[str]:
    return [n for n in projection["notes"] if n.startswith("start-up")]


def test_a_node_count_the_recipes_global_batch_does_not_divide_over_is_said():
    """tiny_llama_lora with global batch 12 on 3 lab nodes (micro-batch 4): the trainer refuses 2 or 4 nodes
    (12 is no multiple of 4 x 2 or 4 x 4), so the projection there is a what-if and says so."""
    three = profile(world_size=3, dp=3, nodes=3, global_batch=12, micro_batch=4)
    (note,) = [n for n in project(three, 8e6, nodes=2)["notes"] if "does not divide" in n]
    assert note == ("the recipe's global batch 12 does not divide over micro-batch 4 x dp 2: a run on 2 ranks needs "
                    "another (train.global_batch_size, a multiple of 8); projected as if 12 samples divided evenly")
    assert not [n for n in project({**three, "global_batch": 24}, 8e6, nodes=2)["notes"] if "does not divide" in n]


def _grouped(world: int, groups: dict) -> dict:
    """A run measured on one node whose process groups were all inside it (telemetry's comm_groups)."""
    ops = {"all_reduce": {"bytes": sum(g["bytes"] for g in groups.values()), "time_s": 0.01, "calls": len(groups)}}
    return profile(world_size=world, nodes=1, dp=groups.get("dp", {}).get("size", 1), ops=ops, groups={
        dim: {"dim": dim, "scope": "intra", "size": g["size"],
              "ops": {"all_reduce": {"bytes": g["bytes"], "time_s": 0.005, "calls": 1}}} for dim, g in groups.items()})


def test_a_one_node_run_projected_onto_more_nodes_puts_the_groups_that_span_them_on_the_link():
    """Measured on one node, every group was inside it. On 2 nodes of as many ranks the dp group (the mesh's
    middle dimension, grown to twice its size) spans them and its all-reduce goes over the link; tp (innermost,
    2 of the node's 4 ranks) stays inside. It predicted nothing on the wire before."""
    p = _grouped(4, {"tp": {"size": 2, "bytes": 4_000_000}, "dp": {"size": 2, "bytes": 1_000_000}})
    got = project(p, 100e6, nodes=2, efficiency=1.0)
    dp, tp = got["by_group"]["dp"], got["by_group"]["tp"]
    assert (dp["size_new"], dp["on_target_link"]) == (4, True)
    assert dp["wire_bytes"] == 1_000_000 * 2 * 3 / 4  # ring all-reduce over 4 ranks: 2 (n-1)/n of the bytes
    assert dp["wire_s"] == pytest.approx(1_500_000 * 8 / 100e6)  # 0.12 s at 100 Mbit/s
    assert dp["predicted_s"] == pytest.approx(max(0.005, 0.12))  # replaces the on-node transfer, not added to it
    assert (tp["size_new"], tp["on_target_link"], tp["predicted_s"]) == (2, False, 0.005)
    assert any("the dp group (size 2, inside the one node measured) spans nodes" in n for n in got["notes"])
    # the same run projected onto its own one node: nothing on a link, as before
    same = project(p, 100e6, efficiency=1.0)
    assert not any(g["on_target_link"] for g in same["by_group"].values()) and same["wire_s"] == 0.0


def test_a_one_node_run_onto_nodes_of_fewer_ranks_keeps_its_world_and_puts_dp_on_the_link():
    """2 ranks measured on one node onto 2 nodes x 1 rank (the lab's 2-node layout): the same world, so compute
    and dp stay; dp now spans the nodes and its all-reduce (2 (n-1)/n = 1x its bytes) goes over the link.
    `nodes=2` alone keeps 2 ranks a node (4 ranks, compute halved): the one-node run could not be projected onto
    the layout it is compared with in bench/lab_projection_one_node.py."""
    p = _grouped(2, {"dp": {"size": 2, "bytes": 150_000}})
    got = project(p, 10e6, nodes=2, ranks_per_node=1, efficiency=1.0)
    dp = got["by_group"]["dp"]
    assert (got["world_size"], dp["size_new"], dp["on_target_link"]) == (2, 2, True)
    assert dp["wire_s"] == pytest.approx(150_000 * 8 / 10e6)  # 0.12 s at 10 Mbit/s
    assert got["compute_s"] == pytest.approx(0.2 - 0.01)  # each rank's share of the batch is unchanged
    assert got["step_time_s"] == pytest.approx(0.19 + 0.12)
    assert not any("global batch kept" in n for n in got["notes"])
    # 1 rank a node on 1 node: nothing spans a node, nothing goes on a link
    assert project(p, 10e6, nodes=1, ranks_per_node=1, efficiency=1.0)["wire_s"] == 0.0
    # the measured ranks per node, as before
    assert project(p, 10e6, nodes=2, efficiency=1.0)["world_size"] == 4


def test_a_one_node_run_s_group_on_the_target_link_gets_the_token_bucket_s_credit():
    """The target's tbf bucket lets `burst` bytes of each step through at once, spread over the collectives on
    its link by their bytes. That spread was taken from the bytes on the MEASURED run's links, none for a group
    inside the one node measured: its share was 0 and the credit never applied (the lab's 16 KiB bucket left
    out of 150 kB: +11% on the wire time at 10 Mbit/s, bench/lab_projection_one_node.py)."""
    p = _grouped(2, {"dp": {"size": 2, "bytes": 150_000}})
    # the link idles 0.19 s a step, so the 15 kB bucket is full: 135 kB wait for the rate
    got = project(p, 10e6, nodes=2, ranks_per_node=1, efficiency=1.0, burst_bytes=15_000)
    assert got["by_group"]["dp"]["wire_s"] == pytest.approx(135_000 * 8 / 10e6)
    # onto 2 nodes of 2 ranks (4 ranks, dp 4: 1.5x the bytes on the link), the same credit
    got = project(p, 10e6, nodes=2, efficiency=1.0, burst_bytes=15_000)
    assert got["by_group"]["dp"]["wire_s"] == pytest.approx((225_000 - 15_000) * 8 / 10e6)


def test_another_count_per_node_is_refused_from_a_run_on_more_than_one_node():
    two = profile(nodes=2)  # 2 nodes x 1 rank
    assert project(two, 10e6, nodes=4, ranks_per_node=1)["world_size"] == 4
    with pytest.raises(ProjectionError, match=r"--ranks-per-node 2: the run was measured on 2 nodes of 1 rank\(s\); "
                                              r"allowed: 1 \(another count per node only from a run measured on "
                                              r"one node\)"):
        project(two, 10e6, nodes=2, ranks_per_node=2)


def test_only_the_groups_wider_than_a_node_on_the_target_span_nodes():
    """tp 4 x dp 2 measured on one node of 8 ranks, onto 2 nodes of 8: tp (stride 1, 4 ranks) stays inside a
    node; dp (stride 4, 4 ranks on the target) spans both."""
    p = _grouped(8, {"tp": {"size": 4, "bytes": 1_000_000}, "dp": {"size": 2, "bytes": 1_000_000}})
    got = project(p, 100e6, nodes=2, efficiency=1.0)
    assert got["by_group"]["tp"]["on_target_link"] is False and got["by_group"]["dp"]["on_target_link"] is True
    assert got["by_group"]["dp"]["size_new"] == 4


# ------------------------------------------------------------ upward from a link-bound run (lab, fourth round)

# tiny_llama_lora, 2 lab nodes at 2 Mbit/s, 2026-11-29 (bench/results/lab_configs.md, fourth round): per step
# (step, step time, least-waiting rank's communication, rank 0's communication, rank 0's exposed estimate)
LINK_BOUND_2MBIT = [(1, 3.4584, 0.6655, 3.4239, 0.6757), (2, 0.6482, 0.596, 0.5987, 0.5987),
                    (3, 0.6474, 0.6049, 0.6049, 0.6049), (4, 0.6536, 0.6117, 0.6126, 0.6126),
                    (5, 0.6453, 0.604, 0.6046, 0.6046), (6, 0.6653, 0.5798, 0.5798, 0.5798),
                    (7, 0.6729, 0.5803, 0.5861, 0.5861), (8, 0.655, 0.5742, 0.5816, 0.5816)]


def _link_bound_run(tmp_path, steps=LINK_BOUND_2MBIT, name="r"):
    run = load_run(str(write_run(tmp_path / name, rate_bps=2e6, comm_time=0.6, exposed_time=0.6)))
    template = {k: v for k, v in run.metrics[1].items() if k != "profiled"}
    run.metrics = []
    for step, t, c_min, c_own, exposed in steps:
        run.metrics.append({**template, "step": step, "step_time_s": t, "comm_time_s": c_own, "exposed_comm_s": exposed,
                            "comm": {"all_reduce": {"count": 2, "bytes": 149_544, "time_s": c_own, "untimed": 0}},
                            "ranks": {"step_time_s": {"min": t, "max": t}, "comm_time_s": {"min": c_min},
                                      "comm_time_s_by_op": {"all_reduce": {"min": c_min}}}})
    return run


def test_a_link_bound_runs_compute_is_read_step_by_step(tmp_path):
    from telemetry.analysis.runs import percentile

    prof = measured_profile(_link_bound_run(tmp_path))
    # median step 0.6536 s less median communication 0.596 s read 0.0576 s of compute; the steps' own remainders
    # (step time less the exposed part, capped at the least-waiting rank's communication) have a median of 0.0522
    assert prof["step_time_s"] - prof["exposed_s"] == pytest.approx(0.0576)
    per = [t - min(e, c) for _, t, c, _, e in LINK_BOUND_2MBIT[1:]]
    # weighted by the link's share of the step (0.596 / 0.6536 = 91%): mostly the steps' own remainders
    share = prof["exposed_s"] / prof["step_time_s"]
    assert share == pytest.approx(0.912, abs=1e-3)
    assert prof["compute_s"] == pytest.approx(share * 0.0522 + (1 - share) * 0.0576) == pytest.approx(0.0527, abs=1e-4)
    # the compute's own spread (0.041-0.093 s over the steps), not the step time's -1%/+2%
    assert prof["compute_spread"] == pytest.approx((percentile(per, 0.1) / 0.0522, percentile(per, 0.9) / 0.0522))
    assert prof["step_spread"][1] < 1.03 < prof["compute_spread"][1]


def test_upward_from_a_link_bound_run_projects_its_compute_with_its_own_spread(tmp_path):
    prof = measured_profile(_link_bound_run(tmp_path))
    got = project(prof, 100e6, efficiency=0.9)
    wire = 149_544 / (100e6 / 8 * 0.9)
    # before: 0.0576 + 0.0133 = 0.0709 s with the interval [0.0689, 0.0729]; the 100mbit run measured 0.0558 s
    compute = prof["compute_s"]  # 0.0527 s (the test above)
    assert got["step_time_s"] == pytest.approx(compute + wire)
    lo, hi = got["interval_s"]
    assert lo == pytest.approx(compute * prof["compute_spread"][0] + wire * 0.9)  # the wire at 100% of the rate
    assert hi == pytest.approx(compute * prof["compute_spread"][1] + wire / (0.85 / 0.9))
    assert lo < 0.0558 < hi
    assert any("link-bound (91% of it on the link)" in n for n in got["notes"])
    # downward (onto a slower link) the note is not given: the step is then mostly the link
    assert not any("link-bound" in n for n in project(prof, 1e6, efficiency=0.9)["notes"])


def test_repeats_combine_their_compute_and_its_spread(tmp_path):
    from telemetry.analysis.projection import combine_profiles

    slower = [(s, t + 0.03, c, o, e) for s, t, c, o, e in LINK_BOUND_2MBIT]  # the host busier: 0.03 s more compute
    runs = [measured_profile(_link_bound_run(tmp_path, LINK_BOUND_2MBIT, "a")),
            measured_profile(_link_bound_run(tmp_path, slower, "b")),
            measured_profile(_link_bound_run(tmp_path, LINK_BOUND_2MBIT, "c"))]
    both = combine_profiles(runs)
    mid = runs[0]["compute_s"]  # the median of the three runs' compute: a and c's
    assert both["compute_s"] == pytest.approx(mid) and runs[1]["compute_s"] > mid
    assert both["compute_spread"][1] == pytest.approx(runs[1]["compute_spread"][1] * runs[1]["compute_s"] / mid)
    assert both["compute_spread"][0] == pytest.approx(runs[0]["compute_spread"][0])
    # a run recorded without per-step figures leaves the combined compute unknown: T - E is taken
    assert combine_profiles([runs[0], {**runs[1], "compute_s": None}])["compute_s"] is None


@pytest.mark.integration
def test_cli_projects_a_lab_run_onto_the_lab_at_each_rate_with_its_bucket(tmp_path):
    # the fourth round (bench/results/lab_configs.md): from a 100mbit lab run onto 2mbit the CLI put all 150 kB
    # on the wire (0.665 s); the lab's tbf at 2mbit passes its 16 KiB at once (0.592 s; measured 0.582-0.596 s)
    mtu = {"fabric_extra": {"lab": {"rate": "100mbit", "rate_bps": 1e8, "burst_bytes": 25000, "mtu": 1500}}}
    # its 1 MB all_reduce took its wire time at 100mbit (less the 25 kB bucket) at efficiency 1.0
    run = str(write_run(tmp_path / "lab", comm_time=(1e6 - 25000) / 12.5e6, exposed_time=(1e6 - 25000) / 12.5e6, **mtu))
    out = tmp_path / "p.json"
    proc = cli(run, "--rate", "2mbit", "--efficiency", "1.0", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "each --rate target is the fabric lab at that rate, its tc bucket included" in proc.stdout
    wire = json.loads(out.read_text())["projections"][0]["wire_s"]
    # 1 MB all_reduce of 2 ranks; the step's 0.75 s of compute refill the whole 16 KiB bucket at 250 kB/s
    assert wire == pytest.approx((1_000_000 - 16384) / 250_000)
    # a run off the lab: a NIC, no bucket
    plain = cli(str(write_run(tmp_path / "nic")), "--rate", "2mbit", "--efficiency", "1.0", "--json", str(out))
    assert "tc bucket" not in plain.stdout
    assert json.loads(out.read_text())["projections"][0]["wire_s"] == pytest.approx(1_000_000 / 250_000)


def test_a_lab_run_recorded_before_the_lab_kept_its_mtu_is_projected_onto_the_lab(tmp_path, capsys):
    # lab runs of 2026-11-21..23 recorded their rate and tbf burst but no mtu (launch/lab.py added it with --mtu):
    # their --rate targets are the lab at that rate too, its bucket included, not a NIC
    from telemetry.__main__ import main

    lab = {"fabric_extra": {"lab": {"rate": "100mbit", "rate_bps": 1e8, "burst_bytes": 25000}}}
    run = str(write_run(tmp_path / "lab", comm_time=(1e6 - 25000) / 12.5e6, exposed_time=(1e6 - 25000) / 12.5e6,
                        **lab))
    out = tmp_path / "p.json"
    assert main(["project", run, "--rate", "2mbit", "--efficiency", "1.0", "--json", str(out)]) == 0
    assert "each --rate target is the fabric lab at that rate, its tc bucket included" in capsys.readouterr().out
    assert json.loads(out.read_text())["projections"][0]["wire_s"] == pytest.approx((1_000_000 - 16384) / 250_000)


def test_untimed_bytes_across_the_link_withhold_the_negligible_verdict():
    """Lab round 7: tiny Llama tp 2 x pp 2 on 2 nodes with node 1's egress at 5mbit, 1.98 s a step against 0.51 s at
    50mbit everywhere; its pipeline send/recv (1 MB a step, gloo: untimed) sat inside the step's compute and the
    projection onto 50mbit said 'communication is negligible ... any link above 1.44 kbit/s'."""
    groups = {"pp": {"dim": "pp", "scope": "inter", "size": 2, "untimed_bytes": 1_048_576,
                     "ops": {"all_reduce": {"bytes": 8, "time_s": 0.0007, "calls": 2}}}}
    p = profile(step_time_s=1.98, comm_time_s=0.0007, exposed_s=0.0007, nodes=2, groups=groups,
                ops={"all_reduce": {"bytes": 8, "time_s": 0.0007, "calls": 2}}, partial=True, untimed_bytes=1_048_576)
    got = project(p, 50e6, efficiency=0.9)
    assert not got["negligible"]
    assert any(n.startswith("1048576 bytes a step on inter-node groups had no time (sends and receives each counted, "
                            "up to 0.1864 s on this link's wire)") and n.endswith("whether the fabric matters is not "
                                                                                  "judged") for n in got["notes"])
    timed = {**groups, "pp": {**groups["pp"], "untimed_bytes": 0}}
    assert project(profile(step_time_s=1.98, nodes=2, groups=timed, ops=p["ops"]), 50e6)["negligible"]
