"""The NCCL log parser on NCCL's own formats: short synthetic cases, then a corpus of real logs.

tests/telemetry/nccl_logs/ holds excerpts of real NCCL_DEBUG=INFO logs from public issue threads and
repositories, one .log each, with a .json next to it: the source, what was kept, and the field values read
by hand ("truth"); a field the excerpt does not establish is null there, with the reason in null_because.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.capture.nccl_log import FIELDS, parse_dir, parse_files, parse_lines

CORPUS = Path(__file__).parent.parent / "nccl_logs"
TRUTH_FILES = sorted(CORPUS.glob("*.json"))

ROCE_GDR = """\
gpu-node-01:12345:12345 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-node-01:12345:12345 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)
gpu-node-01:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
gpu-node-01:12345:12345 [0] NCCL INFO Using network IB
gpu-node-01:12345:12400 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-node-01:12345:12400 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
gpu-node-01:12345:12400 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
gpu-node-01:12345:12400 [0] NCCL INFO Channel 01/0 : 15[7] -> 0[0] [receive] via NET/IB/1/GDRDMA
"""

IB_NO_GDR = """\
n1:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.2
n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ib0:192.168.1.5<0>
n1:1:1 [0] NCCL INFO Using network IB
n1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
n1:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
"""

SOCKET_FALLBACK = """\
n1:7:7 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
n1:7:7 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
n1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>
n1:7:7 [0] NCCL INFO Using network Socket
n1:7:9 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
n1:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""

SINGLE_NODE = """\
h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
h:1:1 [0] NCCL INFO NET/IB : No device found.
h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
h:1:1 [0] NCCL INFO Using network Socket
h:1:3 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer
"""
SINGLE_NODE_SIZE = "h:1:3 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"

PLUGIN = """\
n:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v8)
n:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB bond0:10.1.0.1<0>
n:1:1 [0] NCCL INFO Using network IBext_v8
n:1:2 [0] NCCL INFO Channel 02/0 : 3[3] -> 4[0] [send] via NET/IBext_v8/0/GDRDMA
"""

# The known bug: a network plugin whose name has spaces was read as its first word ("AWS"), and its
# connections "via NET/AWS Libfabric/0/GDRDMA" were cut at the space, so GDR read as off.
AWS_LIBFABRIC = """\
n:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
n:1:1 [0] NCCL INFO Using network AWS Libfabric
n:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [send] via NET/AWS Libfabric/1/GDRDMA
n:1:2 [0] NCCL INFO Channel 00/0 : 9[1] -> 1[1] [receive] via NET/AWS Libfabric/1(3)/GDRDMA/Shared
"""


def test_roce_with_gpudirect_rdma():
    out = parse_lines(ROCE_GDR.splitlines())
    assert out["transport"] == "roce" and out["network"] == "IB" and out["nccl_version"] == "2.21.5"
    assert [d["device"] for d in out["ib_devices"]] == ["mlx5_0", "mlx5_1"]
    assert out["ib_devices"][0]["link_layer"] == "RoCE" and out["oob_interface"] == "eth0:10.0.0.1<0>"
    assert out["gpudirect_rdma"] is True and out["gdr_by_hca"] == {"mlx5_0": True}
    assert out["channels"] == {"P2P": 1, "NET/IB": 2}


def test_infiniband_without_gdr_and_shm_inside_the_node():
    out = parse_lines(IB_NO_GDR.splitlines())
    assert out["transport"] == "infiniband" and out["gpudirect_rdma"] is False
    assert out["channels"] == {"NET/IB": 1, "SHM": 1}


def test_silent_fallback_to_tcp_sockets():
    out = parse_lines(SOCKET_FALLBACK.splitlines())
    assert out["transport"] == "tcp" and out["network"] == "Socket"
    assert [d["interface"] for d in out["socket_devices"]] == ["eth0", "eth1"]
    assert out["gpudirect_rdma"] is False


def test_p2p_only_is_intra_node_only_when_the_log_shows_every_rank_on_one_node():
    out = parse_lines(SINGLE_NODE.splitlines())
    # ranks 0 and 1 talk over P2P, but nothing says there is no rank 2 on another host
    assert out["transport"] is None and "transport" in out["unknown"]
    out = parse_lines((SINGLE_NODE + SINGLE_NODE_SIZE).splitlines())
    assert out["transport"] == "intra-node" and out["ib_absent"] is True and out["nranks"] == 2
    assert out["channels"] == {"P2P": 2} and out["gpudirect_rdma"] is None
    assert "does not apply" in out["unknown"]["gpudirect_rdma"]


def test_net_plugin_counts_as_rdma():
    out = parse_lines(PLUGIN.splitlines())
    assert out["transport"] == "roce" and out["network"] == "IBext_v8"
    assert out["net_plugin"] == "NCCL RDMA Plugin" and out["gpudirect_rdma"] is True


def test_plugin_name_with_spaces_is_read_whole_and_gdr_stays_on():
    out = parse_lines(AWS_LIBFABRIC.splitlines())
    assert out["network"] == "AWS Libfabric"
    assert out["channels"] == {"NET/AWS Libfabric": 2}
    assert out["gpudirect_rdma"] is True and out["gdr_connections"] == {"with_gdr": 2, "without_gdr": 0}
    assert out["provider"] == "efa" and out["transport"] == "efa"


# Constructed from the lines Google's and SkyPilot's guides quote (no full TCPX log with a source was found):
# the plugin's version line and its network name; the connection line follows NCCL's own format.
TCPX = """\
a3:1:1 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.8.
a3:1:1 [0] NCCL INFO Using network GPUDirectTCPX_v7
a3:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/GPUDirectTCPX_v7/3
"""


def test_google_tcpx_plugin_is_its_own_transport():
    out = parse_lines(TCPX.splitlines())
    assert out["network"] == "GPUDirectTCPX_v7" and out["transport"] == "tcpx"
    assert out["net_plugin"] == "GPUDirectTCPX 3.1.8" and out["hosts"] == ["a3"]


def test_google_gib_is_roce_and_fast_socket_is_tcp():
    # constructed from the lines Google's NCCL/gIB troubleshooting page quotes ("a3ultra-vm-0:606:642 [ 6 ] NCCL
    # INFO Using network gIB", "NET/gIB : Initializing gIB v1.0.2"), plus a connection line in NCCL's format
    gib = ["a3ultra-vm-0:606:642 [ 6 ] NCCL INFO NET/gIB : Initializing gIB v1.0.2",
           "a3ultra-vm-0:606:642 [ 6 ] NCCL INFO Using network gIB",
           "a3ultra-vm-0:606:650 [ 6 ] NCCL INFO Channel 03/0 : 6[6] -> 14[6] [send] via NET/gIB/3/GDRDMA"]
    out = parse_lines(gib)
    assert out["transport"] == "roce" and out["net_plugin"] == "gIB v1.0.2" and out["gpudirect_rdma"] is True
    assert out["transport_basis"] == "per-connection lines (via NET/gIB); gIB runs on RoCE NICs"
    assert out["hosts"] == ["a3ultra-vm-0"]
    # with a device list, its link layer decides as for NCCL's own IB network
    listed = parse_lines(gib[:2] + ["a3ultra-vm-0:606:642 [ 6 ] NCCL INFO NET/gIB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.2<0>"])
    assert listed["transport"] == "infiniband"
    assert parse_lines(["h:1:1 [0] NCCL INFO Using network FastSocket"])["transport"] == "tcp"


def test_multi_node_nvlink_is_one_node_to_nccl():
    # constructed in NCCL's 2.2x format: two GB200 trays of one NVLink domain (NCCL says nNodes 1, MNNVL 1)
    lines = ["trayA:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 1",
             "trayA:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] via P2P/MNNVL",
             "trayB:3:4 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] via P2P/MNNVL"]
    out = parse_lines(lines)
    assert out["transport"] == "intra-node" and out["mnnvl"] is True and out["hosts"] == ["trayA", "trayB"]
    assert parse_lines(lines[:1])["mnnvl"] is True and parse_lines(["h:1:1 [0] NCCL INFO x"])["mnnvl"] is None
    assert parse_lines([lines[0].replace("MNNVL 1", "MNNVL 0")])["mnnvl"] is False
    # NCCL's own MNNVL line (src/mnnvl.cc's format); the fabric probe line "MNNVL busId ..." (nccl_1769) decides nothing
    clique = "trayA:1:2 [0] NCCL INFO MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 2 nvlDomainSize 8"
    assert parse_lines([clique])["mnnvl"] is True
    assert parse_lines([clique.replace("MNNVL 1", "MNNVL 0")])["mnnvl"] is False
    assert parse_lines(["gb:1:2 [1] NCCL INFO MNNVL busId 0x901000 fabric UUID 3143b15bc2cd192b.28cc9b5473fb5b93 "
                        "cliqueId 0x7ffe state 3 healthMask 0xaa"])["mnnvl"] is None


def test_records_glued_on_one_line_and_collnet_given_up():
    glued = ("h1:1:2 [0] NCCL INFO Using network IB      h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] "
             "via NET/IB/0/GDRDMA     h2:3:4 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA")
    out = parse_lines([glued])
    assert out["network"] == "IB" and out["channels"] == {"NET/IB": 2} and out["hosts"] == ["h1", "h2"]
    lines = ["h:1:2 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0/GDRDMA",
             "h:1:2 [0] transport.cc:384 NCCL WARN Cannot initialize CollNet, using point-to-point network instead"]
    assert parse_lines(lines[:1])["channels"] == {"COLLNET/SHARP": 1}
    out = parse_lines(lines)
    assert out["channels"] is None and out["collnet_refused"] and out["gpudirect_rdma"] is None


def test_unknown_when_nothing_was_logged(tmp_path):
    out = parse_lines(["some unrelated line"])
    assert out["transport"] is None and out["network"] is None
    assert set(out["unknown"]) == set(FIELDS)  # every field null, each with a reason
    assert parse_dir(str(tmp_path)) is None
    (tmp_path / "nccl.h.1.log").write_text(ROCE_GDR)
    (tmp_path / "nccl.h.2.log").write_text(SOCKET_FALLBACK)
    mixed = parse_dir(str(tmp_path))
    assert mixed["log_files"] == 2 and mixed["channels"]["NET/Socket"] == 2
    # two hosts disagree on the network: say so rather than pick one
    assert mixed["network"] is None and "IB, Socket" in mixed["unknown"]["network"]


def test_ring_listing_gives_the_size_only_when_complete():
    line = "h:1:1 [0] NCCL INFO Channel 00/02 :    0   1   2   3"
    assert parse_lines([line])["nranks"] == 4
    # NCCL prints at most 20 ranks of a ring: a 20-entry line may be a longer ring cut short
    cut = "h:1:1 [0] NCCL INFO Channel 00/16 :" + "".join(f" {r:3d}" for r in range(20))
    assert parse_lines([cut])["nranks"] is None


# ---------------------------------------------------------------- the corpus of real logs

def _devices(devices):
    return None if devices is None else sorted((d["device"], d["port"], d["link_layer"]) for d in devices)


@pytest.mark.parametrize("truth_file", TRUTH_FILES, ids=lambda p: p.stem)
def test_every_field_right_on_real_logs(truth_file):
    spec = json.loads(truth_file.read_text())
    truth = spec["truth"]
    out = parse_files([str(truth_file.with_suffix(".log"))])
    got = {"nccl_version": out["nccl_version"], "network": out["network"], "devices": _devices(out["devices"]),
           "gpudirect_rdma": out["gpudirect_rdma"], "nranks": out["nranks"], "transport": out["transport"],
           "channel_transports": None if out["channels"] is None else sorted(out["channels"])}
    want = dict(truth, devices=_devices(truth["devices"]),
                channel_transports=None if truth["channel_transports"] is None else sorted(truth["channel_transports"]))
    assert got == want
    for field, value in truth.items():  # an unknown is null with a reason, never a guess
        if value is None:
            assert out["unknown"].get("channels" if field == "channel_transports" else field)
    for field, value in spec.get("also", {}).items():
        assert out[field] == value


def test_corpus_covers_what_the_issue_asks_for():
    specs = [json.loads(p.read_text()) for p in TRUTH_FILES]
    assert len(specs) >= 192 and all(s["source"].startswith("https://github.com/") for s in specs)
    assert all((p.with_suffix(".log")).exists() for p in TRUTH_FILES)
    cats = {c for s in specs for c in s["categories"]}
    assert {"infiniband", "roce", "sockets", "efa", "ibext-sharp-plugin", "plugin-name-with-spaces", "gdr-on",
            "gdr-off", "p2p", "shm", "nvls", "collnet", "ring-lines", "version-line-without-info",
            "no-using-network-line", "launcher-prefix", "interleaved-ranks", "nccl-2.3",
            # added with the second collection (2025-26 logs from other clusters)
            "collnet-refused-after-connect", "merged-lines", "libfabric-cxi", "torch-warnings",
            "nccl-tests-interleaved", "plugin-failed-fallback", "timestamp-prefix",
            # the third collection (NCCL 2.4-2.5 and 2.2x-2.29 formats, pdsh prefixes, redacted host names)
            "nccl-tests-rank-list", "socket-interface-without-address", "empty-oob", "gin-plugin-lines",
            "pdsh-prefix", "channel-without-slash", "no-libibverbs", "one-rank", "mnnvl", "redacted",
            # the fourth collection (AMD RCCL, Google's GPUDirect-TCPX warnings, ncclCommInitAll)
            "rccl", "gpudirect-tcpx", "init-all", "comm-nranks-suffix", "glued-without-blanks",
            "timestamp-glued-to-host",
            # the fifth collection (IPv6 socket addresses, RAS and ECE lines, Ray actor and markdown quote prefixes,
            # a cut line glued to the next, several communicators in one log)
            "ipv6-socket-address", "ib-disabled-by-env", "ras-lines", "qp-ece-lines", "ray-actor-prefix",
            "nccl-timestamp-prefix", "iwarp-device", "several-communicators", "assigned-net-plugin",
            "cut-line-glued-to-next", "markdown-quote-prefix", "ring-gdr-of-another-communicator", "nccl-2.2",
            "prefix-without-nccl-word", "socket-interface-line-per-interface",
            # the seventh collection (a host-only prefix behind kubectl timestamps, a code fence glued to the host,
            # viewer line numbers between lines, an interface alias with a colon, 2.3's per-device IB lines)
            "host-only-prefix", "code-fence-glued-to-host", "line-number-lines", "interface-alias-with-colon",
            "ib-device-line-per-device", "mnnvl-probe-no-fabric",
            # the eighth collection (k9s pane bars, markdown inline code, a redacted pid:tid, GIN/RMA plugin lines,
            # libfabric's tcp provider, aws-ofi-nccl's own test binary, NCCL 2.28)
            "k9s-pane-bars", "inline-code-backticks", "redacted-pid-tid", "rma-plugin-line", "libfabric-tcp-provider",
            "plugin-test-binary", "nccl-2.28",
            # the ninth collection (torch's error messages without NCCL's prefix, a refused bootstrap, a KubeVirt VM,
            # Proxy Service lines of two pods, 2.8's bus ids in connection lines, an rccl-tests list with full BDFs)
            "torch-dist-backend-error", "bootstrap-connect-retrying", "kubevirt-vm", "proxy-service-lines",
            "bus-id-in-rank-connections", "rank-pid-layout-full-bdf",
            # the tenth collection (NCCL RAS client reports, torch's watchdog lines, NCCL_DEBUG_FILE output, a
            # topology dump without NCCL's prefix, NCCL 2.0's WARN line)
            "ras-client-report", "ras-incomplete", "torch-watchdog-timeout", "nccl-debug-file",
            "topology-dump-without-prefix", "nccl-2.0",
            # the twelfth collection (Ray's dedup suffix and double launcher prefixes, soft RoCE, NVLS comm lines,
            # torchrun's rank prefix before torch's watchdog lines, the profiler plugin's line)
            "ray-dedup-suffix", "double-launcher-prefix", "soft-roce-rxe", "nvls-comm-lines", "torchrun-rank-prefix",
            "profiler-plugin-line"} <= cats
    versions = {s["truth"]["nccl_version"] for s in specs} - {None}
    assert min(versions, key=lambda v: tuple(map(int, v.split(".")))) == "2.2.12"


HEADER_ROCE = """\
n1:5:5 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
n1:5:5 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
n1:5:5 [0] NCCL INFO Using network IB
"""


def test_transport_from_the_network_line_and_device_link_layer_when_no_connection_is_logged():
    out = parse_lines(HEADER_ROCE.splitlines())
    assert out["transport"] == "roce" and out["channels"] is None
    assert out["transport_basis"] == ("network line (Using network IB); no per-connection lines; devices "
                                      "mlx5_0:1/RoCE mlx5_1:1/RoCE")
    ib = parse_lines(HEADER_ROCE.replace("/RoCE", "/IB").replace("network IB", "network IBext_v8").splitlines())
    assert ib["transport"] == "infiniband" and "Using network IBext_v8" in ib["transport_basis"]
    sock = parse_lines(SOCKET_FALLBACK.splitlines()[:4])  # header only: the Socket network line
    assert sock["transport"] == "tcp" and sock["transport_basis"].startswith("network line (Using network Socket)")
    # connections, when logged, decide, and say so
    assert parse_lines(ROCE_GDR.splitlines())["transport_basis"].startswith("per-connection lines (via NET/IB)")
    # neither a network line nor a device list: null with the reason
    bare = parse_lines(["n1:5:5 [0] NCCL INFO NCCL version 2.18.5+cuda12.2"])
    assert bare["transport"] is None and bare["transport_basis"] is None
    assert "no network line" in bare["unknown"]["transport"]


def test_node_count_from_older_init_lines_with_host_prefixes():
    """NCCL < 2.19 logs "rank R nranks N" per rank (no nNodes): every rank's line with its host prefix
    gives the node count; a missing rank leaves it unknown."""
    lines = [f"node{r // 4}:1{r}:1{r} [{r % 4}] NCCL INFO comm 0x7f rank {r} nranks 8 cudaDev {r % 4} busId 1000 - "
             "Init COMPLETE" for r in range(8)]
    assert parse_lines(lines)["nnodes"] == 2
    part = parse_lines(lines[:7])
    assert part["nnodes"] is None and "7 of 8 ranks" in part["unknown"]["nnodes"]
    # an explicit nNodes line wins
    assert parse_lines(lines + ["node0:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 3 localRanks 4"])["nnodes"] == 3


def test_the_corpus_readme_names_every_log_and_its_source():
    readme = (CORPUS / "README.md").read_text()
    for p in TRUTH_FILES:
        assert f"`{p.stem}.log` | {json.loads(p.read_text())['source']} |" in readme, p.stem


def test_nccl_24_lists_without_addresses_and_an_empty_oob():
    """NCCL 2.4 printed an interface with no address ("[0]enp41s0f1:<0>", nccl-tests#29) and "; OOB :" when it
    had no out-of-band interface (NVIDIA/nccl#224): the interface is kept, the OOB is unknown, not ":"."""
    out = parse_lines(["s:1:1 [0] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0> [1]virbr0:<0>",
                       "s:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB :"])
    assert [(d["interface"], d["address"]) for d in out["socket_devices"]] == [("enp41s0f1", ""), ("virbr0", "")]
    assert out["oob_interface"] is None and out["transport"] == "roce"


RANK_LIST = ["# Using devices",
             "#  Rank  0 Group  0 Pid  1 on NODE A device  0 [0000:04:00] NVIDIA H100 80GB HBM3",
             "#  Rank  1 Group  0 Pid  2 on NODE A  device  1 [0000:23:00] NVIDIA H100 80GB HBM3",
             "#   Rank  2 Pid   3 on     hostb device  0 [0x00] Tesla V100-SXM2-32GB"]
NET = ["hostb:3:3 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>", "hostb:3:3 [0] NCCL INFO Using network Socket"]


def test_world_size_from_a_whole_nccl_tests_device_list():
    """nccl-tests lists every rank of its world before NCCL's lines: a whole list (ranks 0..n-1, followed by
    another line) gives the size and the node count; a list cut where an excerpt ends, or with a rank missing,
    gives neither. A one-rank world then sends nothing between ranks (not "tcp")."""
    out = parse_lines(RANK_LIST + NET)
    assert (out["nranks"], out["nnodes"]) == (3, 2) and out["hosts"] == ["NODE A", "hostb"]
    assert out["transport"] == "tcp"
    assert parse_lines(NET + RANK_LIST)["nranks"] is None  # the list may go on past the excerpt
    # two processes each listing itself as rank 0 (nccl-tests without MPI, nccl-tests#107): no world size
    twice = parse_lines(RANK_LIST[:2] + [RANK_LIST[1].replace("NODE A", "hostc")] + NET)
    assert twice["nranks"] is None and twice["nnodes"] is None
    assert parse_lines(RANK_LIST[:2] + RANK_LIST[3:] + NET)["nranks"] is None  # rank 1 missing
    one = parse_lines(RANK_LIST[:2] + NET)
    assert one["nranks"] == 1 and one["transport"] is None and "one-rank" in one["unknown"]["transport"]
    # NCCL's own count wins over the list
    assert parse_lines(RANK_LIST + NET + ["hostb:3:4 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 1000 "
                                          "- Init COMPLETE"])["nranks"] == 4


# Launchers and log shippers of other clusters put their own text before NCCL's prefix: Open MPI's tags, srun
# --label, ISO timestamps (CloudWatch, Loki), torchrun's [rankN]:, Ray's actor tag (with its colour codes),
# pdsh, kubectl logs --prefix.
LAUNCHER_PREFIXES = ["[1,3]<stdout>:", "12: ", "2025-06-01T10:00:00.123Z ", "[rank3]:", "(RayWorkerWrapper pid=1000) ",
                     "worker-1: ", "[pod/trainer-0/main] ", "\x1b[36m(Worker pid=7)\x1b[0m "]


@pytest.mark.parametrize("prefix", LAUNCHER_PREFIXES)
def test_every_real_log_reads_the_same_behind_another_launchers_prefix(prefix):
    keys = ("nccl_version", "network", "devices", "gpudirect_rdma", "channels", "nranks", "nnodes", "transport",
            "transport_basis", "hosts", "mnnvl", "net_plugin", "provider", "oob_interface")
    for p in TRUTH_FILES:
        lines = p.with_suffix(".log").read_text().splitlines()
        plain, prefixed = parse_lines(lines), parse_lines([prefix + line for line in lines])
        assert {k: prefixed[k] for k in keys} == {k: plain[k] for k in keys}, p.stem


def test_a_warn_only_log_names_its_network_and_ipv4_mapped_gids_mean_roce():
    """NCCL_DEBUG=WARN logs hold only the error: NET/IB's failed completion shows the IB network carried traffic
    (nccl-tests#24 in the corpus); its GIDs, when printed, tell RoCE v2 (IPv4-mapped) apart. The line is the one
    in the title of NVIDIA/nccl#1814."""
    line = ("hostname-test:987:1260 [7] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            "xxx.xxx.xxx.xxx<55921> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:29.87.4.221 "
            "remoteGids::ffff:29.87.88.182")
    out = parse_lines([line])
    assert out["network"] == "IB" and out["transport"] == "roce"
    assert out["transport_basis"] == ("no Using network line: NET/IB's error line (that network carried traffic); no "
                                      "per-connection lines; IPv4-mapped GIDs (::ffff:) in its error lines")
    # a named network or listed devices still decide
    listed = parse_lines(["h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                          "h:1:1 [0] NCCL INFO Using network IB", line])
    assert listed["transport"] == "infiniband"


def test_host_names_from_warn_lines():
    """NCCL_DEBUG=WARN logs: the source position (and function) between the device and NCCL WARN. Lines quoted in
    eth-cscs/cscs-docs#75 (an OFI plugin not found) and NVIDIA/nccl#2237 (GIN on 2.30.7)."""
    out = parse_lines(["nid006352:34157:34217 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.",
                       "worker-0:862519:862553 [0] transport/net_ib/gdaki/gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL "
                       "WARN DOCA failure 21"])
    assert out["hosts"] == ["nid006352", "worker-0"]
    assert out["network"] is None  # "network AWS Libfabric not found" is not the network NCCL used


def test_rccl_logs_say_so_and_give_the_nccl_release_they_follow():
    """RCCL prints its version in a banner of its own (rccl-tests#163 in the corpus), or as an INFO line in
    older releases; the version is that of the NCCL release RCCL follows, and `library` says it is RCCL."""
    banner = parse_lines(["RCCL version : 2.21.5-HEAD:9a0e6a1", "HIP version  : 6.3.42134-a9a80e791"])
    assert banner["nccl_version"] == "2.21.5" and banner["library"] == "RCCL"
    old = parse_lines(["n:1:1 [0] NCCL INFO RCCL version 2.6.4+hip3.5"])
    assert old["nccl_version"] == "2.6.4" and old["library"] == "RCCL"
    plugin_only = parse_lines(["n:1:1 [0] NCCL INFO NET/Plugin: No plugin found (librccl-net.so)"])
    assert plugin_only["library"] == "RCCL" and plugin_only["nccl_version"] is None
    assert parse_lines(ROCE_GDR.splitlines())["library"] == "NCCL"
    assert parse_lines([])["library"] is None


def test_comm_nranks_suffix_and_init_all_give_the_size_and_one_node():
    """'comm 0x.. nRanks 08' at the end of connection lines (rccl#1026) gives the communicator size;
    ncclCommInitAll makes every rank in one process, so its communicator is on one node (rccl-tests#162),
    unless the log names other hosts."""
    suffix = parse_lines(["a:1:2 [1] NCCL INFO Connected all rings comm 0xa5bff40 nRanks 08 busId c6000"])
    assert suffix["nranks"] == 8
    init_all = ["h:1:2 [0] NCCL INFO ncclCommInitAll comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x5 "
                "- Init START", "h:1:2 [0] NCCL INFO Using network Socket"]
    out = parse_lines(init_all)
    assert out["nnodes"] == 1 and out["transport"] == "intra-node"
    assert out["transport_basis"].startswith("ncclCommInitAll: one process")
    two_hosts = parse_lines(init_all + ["g:7:8 [0] NCCL INFO Using network Socket"])
    assert two_hosts["nnodes"] is None and two_hosts["transport"] == "tcp"


def test_gpudirect_tcpx_warnings_name_the_tcpx_network():
    """A log holding only the GPUDirect-TCPX plugin's warnings (nccl-plugin-gpudirecttcpx#1): its connections
    existed, so the network is TCPX; nothing else is known."""
    out = parse_lines(["tcpxResult_t tcpxCommProgress(tcpxComm*):1231 NCCL WARN 0x1:0x2, nic 0, enp12s0, "
                       "172.16.0.11<39187><-172.16.0.95<46723> rx rx ctrl timeout cnt 7, nanos 10000000585"])
    assert out["network"] == "GPUDirectTCPX" and out["transport"] == "tcpx"
    assert out["transport_basis"].startswith("no Using network line: its plugin's warning lines")


def test_records_glued_with_no_blank_and_a_timestamp_glued_to_the_host():
    """aws-ofi-nccl#990's log glues records with no blank ('...(v10)h100-st-...:17:17 [1] NCCL INFO'), which made
    the plugin name swallow the next record; #889's CloudWatch copy glues the timestamp to the host
    ('-07:00ip-10-...'), which made a host '00ip-10-...'. Records split where the first one's prefix recurs."""
    glued = parse_lines(["h:1:2 [1] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v10)h:1:2 [1] NCCL INFO "
                         "NET/Plugin: Failed to find ncclCollNetPlugin_v10 symbol."])
    assert glued["net_plugin"] == "Libfabric"
    stamped = parse_lines(["  | 2025-05-16T16:39:51.208-07:00ip-10-1-2-3:79:79 [0] NCCL INFO Using network Socket | "
                           "ip-10-1-2-3:79:79 [0] NCCL INFO Using network Socket"])
    assert stamped["hosts"] == ["ip-10-1-2-3"] and stamped["network"] == "Socket"


def test_ib_switched_off_by_the_environment_leaves_sockets():
    """NCCL 2.5 logs no 'Using network' line (nccl#529): with NCCL_IB_DISABLE=1 and NET/Socket's list the network
    is Socket; NCCL_IB_DISABLE=0 says nothing about it."""
    lines = ["h:97:221 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
             "h:97:221 [0] NCCL INFO NET/Socket : Using [0]ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0<0>"]
    out = parse_lines(lines)
    assert (out["network"], out["transport"]) == ("Socket", "tcp")
    assert out["transport_basis"].startswith("no Using network line: NCCL_IB_DISABLE=1, NET/Socket's list")
    assert out["socket_devices"][0]["address"] == "fe80::e866:19ff:fe1e:a688%ip6tnl0"
    assert parse_lines([lines[0].replace("to 1.", "to 0."), lines[1]])["network"] is None


def test_a_line_cut_short_and_run_into_the_next_adds_no_host():
    """Two processes writing to one stream (sglang#8974): 'adp-u' + 'adp-us-llm-...:235:235 [1] NCCL INFO' is not a
    host of its own; two hosts where one name ends with the other are both kept."""
    host = "adp-us-llm-1-00001-deployment-6f47c67945-s59dl"
    out = parse_lines([f"{host}:234:234 [0] NCCL INFO Using network Socket",
                       f"adp-u{host}:235:235 [1] NCCL INFO cudaDriverVersion 12090"])
    assert out["hosts"] == [host]
    both = parse_lines(["node1:1:1 [0] NCCL INFO Using network IB", "gpu-node1:2:2 [0] NCCL INFO Using network IB"])
    assert both["hosts"] == ["gpu-node1", "node1"]


def test_ring_gdr_counts_with_its_own_communicators_node_count():
    """'Connected all rings, use ring PXN 0 GDR 1' says GPUDirect RDMA only for a communicator spanning nodes, and
    the nNodes line that says so must come from the same init thread (ms-swift#6107 shows one communicator's rings
    and the next one's 'nNodes 2'). 'Assigned NET plugin IB to comm' (2.27+) names the network."""
    rings = "n:1:10 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1"
    other = "n:1:20 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0"
    assert parse_lines([rings, other])["gpudirect_rdma"] is None
    assert parse_lines([rings, other.replace(":20 ", ":10 ")])["gpudirect_rdma"] is True
    bare = [line[line.find("NCCL INFO"):] for line in (rings, other)]  # no host prefix (nccl#1584): the log's count
    assert parse_lines(bare)["gpudirect_rdma"] is True
    assigned = parse_lines(["n:1:1 [0] NCCL INFO Assigned NET plugin IB to comm",
                            "n:1:1 [0] NCCL INFO Assigned GIN plugin GIN_IB_GDAKI to comm"])
    assert assigned["network"] == "IB"


def test_the_ofi_plugin_disabling_gdr_means_no_gpudirect_rdma():
    """aws-ofi-nccl says 'Could not disable CUDA API usage for HMEM, disabling GDR' (nccl-tests#245) and then offers
    NCCL no GPU memory: GPUDirect RDMA is off even though no connection line is logged; a connection with
    /GDRDMA would still decide."""
    off = "[0] NCCL INFO NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR"
    assert parse_lines([off])["gpudirect_rdma"] is False
    conn = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA"
    assert parse_lines([off, conn])["gpudirect_rdma"] is True


def test_nccl_24s_bare_nranks_line_is_init_all():
    """NCCL <= 2.4's ncclCommInitAll logs 'NCCL INFO nranks 10' alone (nccl#241): the communicator size, made by
    one process, so on one node; 'rank 3 nranks 10' lines are not that line."""
    out = parse_lines(["node05:192642:192642 [9] NCCL INFO nranks 10", "node05:1:1 [0] NCCL INFO Using network Socket"])
    assert (out["nranks"], out["nnodes"], out["transport"]) == (10, 1, "intra-node")
    other = parse_lines(["n:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 10 cudaDev 3 busId 1000 - Init COMPLETE"])
    assert other["nranks"] == 10 and other["nnodes"] is None


def test_nccl_22_and_23_prefixes_and_socket_interface_lines():
    """NCCL 2.2 printed 'host:pid:tid [dev] INFO' with no word NCCL (horovod#288): the host is read; NCCL 2.2-2.3
    list each socket interface on a line of its own ('NET : Using interface ib0:192.168.11.1<0>'): the socket
    devices when no NET/Socket list is logged. A SHARP library line ('[node:0:174 - context.c:857][..] INFO') is
    not NCCL's and names no host."""
    out = parse_lines(["C4140-V100-1:24:201 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]",
                       "C4140-V100-1:24:201 [0] INFO Using internal Network Socket",
                       "C4140-V100-1:24:201 [0] INFO NET : Using interface ib0:192.168.11.1<0>"])
    assert out["hosts"] == ["C4140-V100-1"] and out["network"] == "Socket" and out["transport"] == "tcp"
    assert [(d["device"], d["address"]) for d in out["devices"]] == [("ib0", "192.168.11.1")]
    sharp = parse_lines(["[node:0:174 - context.c:857][2024-05-30 12:26:47] INFO sharp_job_id:692 tree_idx:0"])
    assert sharp["hosts"] is None


CHANGES = {"crlf": lambda line: line + "\r\n", "tabs": lambda line: line.replace("    ", "\t"),
           # a terminal's colour codes kept by a log shipper: around each line, and around a launcher's prefix
           "colour": lambda line: f"\x1b[32m{line}\x1b[0m",
           "coloured-prefix": lambda line: f"\x1b[36m(RayWorkerWrapper pid=581, ip=10.0.0.1)\x1b[0m {line}",
           # review65: a script's `tput setaf 2` ... `tput sgr0` (xterm's sgr0 is ESC ( B ESC [ m: a character-set
           # choice before the reset); its ESC ( B was left, and 'Using network IB' read as the network 'IB\x1b(B'
           "tput": lambda line: f"\x1b[32m{line}\x1b(B\x1b[m"}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_real_log_reads_the_same_with_windows_line_ends_or_tabs(change):
    """A log saved on Windows (CRLF), passed through an editor that turns runs of four blanks into tabs (the ring
    listing 'Channel 00/02 :    0   1' became 'Channel 00/02 :\t0   1'), or kept with a terminal's colour codes (the
    twelfth collection: 'Using network IB\x1b[0m' read as the network 'IB\x1b[0m', a device list and a ring listing
    as none) reads as it does unchanged."""
    keys = ("nccl_version", "network", "devices", "gpudirect_rdma", "channels", "nranks", "nnodes", "transport",
            "hosts", "socket_devices", "oob_interface", "warnings", "torch_errors")
    for p in TRUTH_FILES:
        lines = p.with_suffix(".log").read_text().splitlines()
        changed = [CHANGES[change](line) for line in lines]
        plain, other = parse_lines(lines), parse_lines(changed)
        assert {k: other[k] for k in keys} == {k: plain[k] for k in keys}, p.stem


def test_2_27_and_2_28_lines_written_from_nccls_format_strings():
    """No public 2.28 log with these lines has a source this corpus can cite, so they are NCCL's format strings
    (src/transport/net_ib.cc, src/plugin/net.cc, src/transport/net.cc at v2.28.9-1) filled in: 2.28's per-port
    discovery line numbers physical ports (`[3] roceP2p1s0f1:uverbs3:1/RoCE`), not the virtual devices of the
    `Using` line and the connections; the GIN plugin line is not the network; 2.27's `/GDRDMA(PCI)` is GDR on."""
    p = "h1:7:7 [0] NCCL INFO "
    q = "h2:8:8 [0] NCCL INFO "
    lines = [p + "NCCL version 2.28.9+cuda13.0",
             p + "NET/IB: [3] roceP2p1s0f1:uverbs3:1/RoCE provider=Mlx5 speed=200000 context=0x1 pciPath=/sys/x ar=0",
             p + "NET/IB : Made virtual device [1] name=roceP2p1s0f1 speed=200000 ndevs=1",
             p + "NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.100.15<0>",
             p + "Assigned NET plugin IB to comm",
             p + "Assigned GIN plugin GIN_IB_GDAKI to comm",
             p + "comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
             p + "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1/GDRDMA(PCI)",
             q + "Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/1/GDRDMA(PCI)/Shared"]
    r = parse_lines(lines)
    assert r["network"] == "IB" and r["transport"] == "roce" and r["gpudirect_rdma"] is True
    assert [(d["device"], d["port"], d["link_layer"]) for d in r["devices"]] == [
        ("rocep1s0f1", 1, "RoCE"), ("roceP2p1s0f1", 1, "RoCE")]
    assert r["channels"] == {"NET/IB": 2} and r["nnodes"] == 2


def test_ranks_on_several_nodes_with_only_intra_node_connection_lines_take_the_network_line():
    """An excerpt that keeps rank 0's P2P connections but none of its network ones (deduplicated across ranks,
    or cut) while NCCL says nNodes 4: what crosses nodes uses the network NCCL chose. Before, the transport was
    null ('nothing shows that every rank shares one node'). Lines are NCCL 2.28's format strings filled in, with
    aws-ofi-nccl's provider line as the corpus's aws_ofi_nccl_801 log prints it."""
    head = ["NCCL INFO NCCL version 2.28.3+cuda12.9", "NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)",
            "NCCL INFO NET/OFI Selected Provider is cxi (found 2 nics)", "NCCL INFO Using network AWS Libfabric",
            "NCCL INFO comm 0x79ec210 rank 0 nRanks 16 nNodes 4 localRanks 4 localRank 0 MNNVL 0",
            "NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read"]
    r = parse_lines(head)
    assert r["transport"] == "libfabric/cxi" and "nNodes 4 but only intra-node" in r["transport_basis"]
    one_node = parse_lines([line.replace("nNodes 4", "nNodes 1") for line in head])
    assert one_node["transport"] == "intra-node"
    no_network = parse_lines([line for line in head if "Using network" not in line and "plugin" not in line])
    assert no_network["transport"] is None and no_network["unknown"]["transport"]


def test_rccl_warnings_with_source_paths_and_a_bracketed_timestamp():
    """RCCL's WARN lines carry the full path of the hipified source (rccl#908: '.../hipify/src/init.cc:125 NCCL WARN
    Missing "iommu=pt" ...'): each is one warning under its message, the library is RCCL and its version the NCCL
    release it follows; NCCL's own '[2025-07-21 19:05:29] ' prefix (nccl#1788) leaves the host readable."""
    rccl = parse_files([str(CORPUS / "rccl_908_rccl2.18.3_gtest_iommu_warns_hip_ipc.log")])
    assert rccl["library"] == "RCCL" and rccl["nccl_version"] == "2.18.3"
    assert rccl["warnings"]["total"] == 4
    assert rccl["warnings"]["messages"][-1]["message"] == "hipIpcGetMemHandle failed : invalid argument"
    nvls = parse_files([str(CORPUS / "nccl_1788_bracket_timestamp_nvls_cuda_warn.log")])
    assert nvls["hosts"] == ["node004"] and nvls["warnings"]["by_kind"] == {"cuda": 1}


def test_a_prefix_with_the_host_and_no_pid_or_thread():
    """NVIDIA/nccl#1920's Kubernetes log prints 'gpu-server320 [5] NCCL INFO' (no ':pid:tid') behind kubectl's
    timestamp: the host was not read. A word of its own before '[dev] NCCL' is the host; a timestamp's tail
    ('...10:00:00.123Z [0] NCCL INFO') or a launcher's tag before a device-only prefix is not."""
    out = parse_files([str(CORPUS / "nccl_1920_k8s_timestamp_host_only_prefix_socket_warn.log")])
    assert out["hosts"] == ["gpu-server320"] and out["warnings"]["total"] == 1
    for line in ("2025-06-01T10:00:00.123Z [0] NCCL INFO Using network IB", "[1,3]<stdout>:[0] NCCL INFO Using network IB",
                 "(RayWorkerWrapper pid=1000) [0] NCCL INFO Using network IB", "12: [0] NCCL INFO Using network IB"):
        assert parse_lines([line])["hosts"] is None, line


# ---- found by mutation fuzzing (inputs minimised): no exception, and no time quadratic in a long line

BLANKS = " " * 100_000  # a pattern that backtracked over this run took minutes; read in linear time it is instant


def test_rank_list_host_before_a_long_run_of_blanks():
    r = parse_lines([f"#  Rank  0 Group  0 Pid 1 on node-a{BLANKS}device  0 [0x1b] NVIDIA H100"])
    assert r["hosts"] == ["node-a"]


def test_plugin_name_and_warning_with_long_runs_of_blanks():
    r = parse_lines([f"h:1:2 [0] NCCL INFO Loaded net plugin NCCL RDMA Plugin (v8){BLANKS}",
                     f"h:1:2 [0] NCCL INFO Loaded net plugin a{BLANKS}b",
                     f"h:1:2 [0] misc/socket.cc:1 NCCL WARN x{BLANKS}y{BLANKS}"])
    assert r["net_plugin"] == f"a{BLANKS}b"
    assert [w["message"] for w in r["warnings"]["messages"]] == [f"x{BLANKS}y"]
    assert parse_lines(["h:1:2 [0] NCCL INFO Loaded net plugin NCCL RDMA Plugin (v8)  "])["net_plugin"] == \
        "NCCL RDMA Plugin"


def test_glued_records_split_at_a_long_run_of_blanks_and_unclosed_merged_devices():
    r = parse_lines([f"h:1:2 [0] NCCL INFO x{BLANKS}y NCCL INFO z",
                     "h:1:2 [0] NCCL INFO NET/IB : Using " + "[0]={" * 20_000])
    assert r["hosts"] == ["h"]


def test_a_number_python_will_not_convert_leaves_its_line_unread():
    big = "9" * 5000  # int() refuses strings of over 4,300 digits (ValueError)
    r = parse_lines([f"h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks {big} cudaDev 0",
                     f"#  Rank {big} Group  0 Pid 1 on h device  0 [0x1] X",
                     "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0"])
    assert r["nranks"] == 2


def test_a_very_long_host_name():
    # every tail of each host name was sliced and looked up (quadratic in the name's length)
    host = "rdma-gpu-tr" + "." * 60_000 + "ain-worker-0"
    assert parse_lines([f"{host}:19485:21058 [1] NCCL INFO Using network IB"])["hosts"] == [host]


def test_a_line_quoted_in_markdown_inline_code_or_behind_a_fence_names_its_host():
    """NVIDIA/nccl#733 quotes its one WARN line in backticks; #857 glued a code fence to the first line."""
    warn = ("problem 1: `task-646--1-mhpnk:91:123 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion "
            "from peer 172.17.127.143<49577> with error 12, opcode 1, len 0, vendor err 129`")
    out = parse_lines([warn])
    assert out["hosts"] == ["task-646--1-mhpnk"] and out["network"] == "IB"
    assert parse_lines(["```ai:480850:480850 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"])["hosts"] == ["ai"]
    assert parse_lines(["`old:1:2 [0] INFO NET : Using interface eth0:10.0.0.1<0>`"])["hosts"] == ["old"]


RAS_REPORT = """\
NCCL version 2.26.2 compiled with CUDA 12.6
CUDA runtime version 12060, driver version 12060

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4         8        32        32   RUNNING  MISMATCH
    1         8         1         4         4        32   RUNNING      OK

Errors
======
"""


def test_the_nccl_ras_clients_report_gives_version_communicator_size_and_nodes():
    """ncclras prints the job's NCCL as 'NCCL version X compiled with CUDA Y' (a line the parser once skipped for
    its 'compiled with') and a communicators table whose rows hold none of NCCL's words: the largest 'ranks per
    comm' is the size, its 'nodes per comm' the node count when every rank of the group answered."""
    out = parse_lines(RAS_REPORT.splitlines())
    assert (out["nccl_version"], out["nranks"], out["nnodes"]) == ("2.26.2", 32, 4)
    assert out["network"] is None and out["transport"] is None and out["unknown"]["transport"]
    # behind a launcher's prefix, and with tabs for runs of blanks
    assert parse_lines(["12: " + line for line in RAS_REPORT.splitlines()])["nranks"] == 32
    assert parse_lines([line.replace("    ", "\t") for line in RAS_REPORT.splitlines()])["nnodes"] == 4
    # INCOMPLETE: the group's rows count fewer ranks than its communicators hold, so no node count
    short = parse_lines(RAS_REPORT.replace("32   RUNNING  MISMATCH", "31   RUNNING  INCOMPLETE").splitlines())
    assert short["nranks"] == 32 and short["nnodes"] is None and "did not answer" in short["unknown"]["nnodes"]


def test_a_ras_table_without_the_logs_communicator_size_is_not_its_nnodes_reason():
    """The INFO lines give a 16-rank communicator; the RAS table holds only a whole 8-rank group: it says nothing of
    the 16-rank communicator's nodes, and the reason was untrue ('the RAS report's rows of the 16-rank
    communicators count fewer ranks than they hold')."""
    table = RAS_REPORT.split("Errors\n======")[0].replace(
        "    0         1         4         8        32        32   RUNNING  MISMATCH\n", "").replace(
        "    1         8         1         4         4        32", "    1         1         2         4         8         8")
    out = parse_lines(["host1:123:130 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 "
                       "commId 0x1 - Init COMPLETE", *table.splitlines()])
    assert out["nranks"] == 16 and out["nnodes"] is None
    assert "RAS" not in out["unknown"]["nnodes"] and "1 of 16 ranks' init lines" in out["unknown"]["nnodes"]
    # a program's build-time 'compiled with NCCL version' is not the library it runs
    built = parse_lines(["nccl-tests compiled with NCCL version 2.18.1", "h:1:1 [0] NCCL INFO NCCL version 2.21.5"])
    assert built["nccl_version"] == "2.21.5"
    # a row-like line outside the table is not a communicator
    assert parse_lines(["    0         1         4         8        32        32   RUNNING  OK"])["nranks"] is None


def test_a_rank_number_too_long_for_int_in_a_p2p_line_is_skipped():
    """Found by the fuzz test: a damaged P2P connection line with a 5000-digit rank (int() refuses over 4300
    digits) crashed the check of whether every rank is on one node."""
    lines = ["h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
             f"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> {'9' * 5000}[1] via P2P/IPC",
             "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"]
    assert parse_lines(lines)["transport"] == "intra-node"



def test_an_ib_error_line_from_the_hpcx_plugins_own_source_does_not_name_the_network_ib():
    """nccl#1405: 'ib_plugin.c:1615 NCCL WARN NET/IB : Got completion ...' is printed by the HPC-X SHARP plugin's
    own code (IBext), so it was read as NCCL's own IB network; the plugin's network name is not in the line."""
    line = ("w:1:2 [4] {} NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5> with status=12 opcode=0 len=0 "
            "vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2")
    plugin = parse_lines([line.format("ib_plugin.c:1615")])
    assert plugin["network"] is None and "plugin's own source" in plugin["unknown"]["network"]
    own = parse_lines([line.format("transport/net_ib.cc:1295")])
    assert own["network"] == "IB" and own["transport"] == "roce"


def test_the_ofi_plugins_own_test_binary_names_its_network_hosts_and_warnings():
    """aws-ofi-nccl's nccl_message_transfer (aws-ofi-nccl#22, 2019) prints no NCCL prefix: 'NCCLNet device used on HOST
    is AWS Libfabric.' names the network and each process's host, and its 'WARN: Function: f Line: n:' lines are
    warnings (they were not counted: the report said the log had none)."""
    out = parse_files([str(CORPUS / "aws_ofi_nccl_22_2019_plugin_test_binary_two_hosts_efa_av_warn.log")])
    assert (out["network"], out["provider"], out["transport"]) == ("AWS Libfabric", "efa", "efa")
    assert out["transport_basis"].startswith("no Using network line: the OFI plugin's test names it")
    assert out["hosts"] == ["ip-172-0-1-161", "ip-172-0-1-23"]
    assert out["warnings"] == {"total": 2, "by_kind": {"plugin": 2}, "messages": [
        {"kind": "plugin", "message": "NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument", "count": 2}]}
    older = parse_files([str(CORPUS / "aws_ofi_nccl_67_plugin_test_binary_function_line_format_no_provider.log")])
    assert older["network"] is None and older["warnings"]["total"] == 2  # behind DeepSpeed's host prefix too


def test_rccl_without_its_banner_is_named_by_its_sources_and_rsmi_line():
    """An RCCL log excerpt without the 'RCCL version' banner (legacy-rocm-build#6074: a WARN from
    .../rccl/build/hipify/src/..., 'initialized internal alternative rsmi functionality') is RCCL's, its version
    unknown; NVIDIA's NCCL prints neither."""
    out = parse_files([str(CORPUS / "rocm_build_6074_rccl2.27.7_bracket_timestamp_rccl_source_warn_comm_init_all_impl_"
                                    "rank_tag.log")])
    assert (out["library"], out["nccl_version"], out["nranks"], out["nnodes"]) == ("RCCL", None, 2, 1)
    assert parse_lines(["h:1:2 [0] NCCL INFO initialized internal alternative rsmi functionality"])["library"] == "RCCL"
    nvidia = parse_lines(["h:1:2 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed"])
    assert nvidia["library"] is None


def test_an_nccl_log_naming_a_path_with_rccl_in_it_is_not_rccls():
    """review58: any line holding '/rccl/' made the library RCCL; an NVIDIA log whose topology file (or debug
    file, or plugin) lives under such a directory was called RCCL. RCCL's own source paths are its hipified
    ones ('.../rccl/build/hipify/src/...'), which stay a sign."""
    nvidia = parse_lines(["h:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
                          "h:1:2 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /shared/rccl/topo.xml"])
    assert nvidia["library"] == "NCCL", nvidia["library"]
    rccl = parse_lines(["h:1:2 [0] /src/rccl/build/hipify/src/init.cc:122 NCCL WARN Missing \"iommu=pt\""])
    assert rccl["library"] == "RCCL"
