"""Which transport NCCL really used, read from NCCL's own INFO log.

Needs NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS including INIT,NET. The parser is line-oriented and
tolerant: unknown lines are skipped, every pattern is searched anywhere in a line (launcher prefixes such
as `[1,0]<stdout>:`, `0: `, timestamps, or no `host:pid:tid [dev] NCCL INFO` prefix at all), so it works on
whole multi-rank logs, on excerpts and on partial logs of crashed jobs. It reads the formats of NCCL 2.2 to
2.30 (see docs/telemetry.md for the lines it relies on and the corpus it is checked against).

A field the log does not establish is None, and `unknown[field]` says why: a wrong value is worse than none.
"""
from __future__ import annotations

import glob
import os
import re
from collections import Counter
from functools import lru_cache

from telemetry.capture.nccl_ras import RasTable
from telemetry.capture.nccl_warnings import Warnings
from telemetry.capture.torch_nccl_errors import TorchErrors

# NCCL prints the version as an INFO line, or (older releases, NCCL_DEBUG=VERSION/WARN) bare on stdout. ("compiled
# with NCCL version X" is the headers a program was built against; "NCCL version X compiled with CUDA Y", the RAS
# report's, is the running library.)
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
# AMD's RCCL (NCCL ported to ROCm, its version that of the NCCL release it follows) prints "RCCL version :
# 2.21.5-HEAD:9a0e6a1" in a banner of its own (older: "RCCL version 2.6.4+hip3.5"), and loads librccl-net.so; with
# no banner, a WARN from its hipified sources or its ROCm SMI line names it (legacy-rocm-build#6074, rccl#957)
_RCCL_VERSION = re.compile(r"RCCL version :? ?(\d+\.\d+\.\d+)")
_RCCL_SIGNS = ("/hipify/src/", "alternative rsmi functionality")  # not "/rccl/": any path may hold it
# aws-ofi-nccl's own test binary (nccl_message_transfer) names the network and each process's host (aws-ofi-nccl#22)
_OFI_TEST_NET = re.compile(r"NCCLNet device used on ([\w.\-]+) is (\S.*)")
# Plugin names may contain spaces ("AWS Libfabric"): take the rest of the line, not the first word.
_USING_NETWORK = re.compile(r"Using network (\S+(?: \S+)*)")
# 2.27+: "Assigned NET plugin IB to comm" names the same network (ncclNet->name) before "Using network IB"
_ASSIGNED_NET = re.compile(r"Assigned NET plugin (\S+(?: \S+)*) to comm")
_USING_NETWORK_23 = re.compile(r"Using (internal|external) Network (\S+(?: \S+)*)")  # NCCL 2.3
# (the name is the rest of the line less its " (v8)": cut in code, as a lazy group before "\s*$" backtracks
# quadratically over a long run of blanks)
_LOADED_PLUGIN = re.compile(r"Loaded net plugin (\S.*)")
_PLUGIN_VERSION = re.compile(r" \(v\d+\)$")
# Other ways plugins name themselves: the SHARP/IBext plugin ("P2P plugin v8 IBext_v8"), AWS OFI ("NET/OFI
# Initializing aws-ofi-nccl 1.9.1-aws", older "NET/OFI Using aws-ofi-nccl 1.3.0aws"), Google's gIB and TCPX
_PLUGIN_NAMES = (re.compile(r"P2P plugin (?:v\d+ )?(\S+)"),
                 re.compile(r"NET/OFI (?:Initializing|Using) (aws-ofi-nccl \S+)"),
                 re.compile(r"NET/gIB : Initializing (gIB \S+)"),
                 re.compile(r"NET/(GPUDirectTCPX\w*) ver\. (\S+?)\.?\s*$"))
_PROVIDER = re.compile(r"Selected [Pp]rovider is ([\w;:+\-]+)")
# "[0]mlx5_0:1/IB", "[1] mlx5_3:1/RoCE" inside merged devices "[0]={...}", "[2]mlx5_0:1/IB/SHARP"
_IB_DEVICE = re.compile(r"\[(\d+)\] ?([\w.\-]+):(\d+)/(RoCE|IB)(/SHARP)?")
_MERGED = re.compile(r"\[(\d+)\]=\{([^{}]*)\}")  # (no "{" inside: many unclosed "[0]={" stay linear)
# "; OOB eth0:10.0.0.1<0>"; NCCL 2.4 printed "; OOB :" when it had no interface (then none is known)
_OOB = re.compile(r"; OOB ([^\s:<]\S*)")
# "[0]eth0:10.0.0.1<0>"; NCCL 2.4 may print an interface with no address ("[0]enp41s0f1:<0>")
_SOCKET_DEVICE = re.compile(r"\[(\d+)\]([^:\s\[]+):(\S*?)<\d+>")
# NCCL 2.2-2.3 list each interface on a line of its own ("NET : Using interface eth0:172.17.0.2<0>", then "NET/Socket
# : 1 interfaces found")
_SOCKET_IF_23 = re.compile(r"NET : Using interface ([^:\s]+):(\S*?)<\d+>")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for (.*)")
_GDR_HCA = re.compile(r"HCA (\d+) '([^']+)'")
# A connection: "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA", "Ring 00 : 3 -> 4 via P2P/IPC", ...
_CONNECTION = re.compile(r"\d+(?:/\d+)? : (\d+)(?:\[[^\]]*\])? -> (\d+)(?:\[[^\]]*\])?"
                         r"(?: \[(?:send|receive)\])? via (.+)$")
# NET/<name>/<dev>[(<proxy rank>)][/GDRDMA][(PCI)][/Shared]; the name may hold spaces, never "/<digits>"
_VIA_NET = re.compile(r"NET/(.+?)/(\d+)(?:\(\d+\))?(/GDRDMA)?")
_COLLNET = re.compile(r"Coll(?:Net)? \d+(?:/\d+)? : \d+ \[(?:send|receive)\] via COLLNET/(.+?)/(\d+)(/GDRDMA)?")
# NCCL gave CollNet up after connecting it (SHARP job refused...): its connections carry nothing
_COLLNET_REFUSED = "Cannot initialize CollNet"
# (an editor that turned runs of blanks into tabs leaves "Channel 00/02 :\t0   1")
_RING_LISTING = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? :((?:[ \t]+\d+)+)[ \t]*$")
_NRANKS = re.compile(r"\brank (\d+) n[Rr]anks (\d+)")
# some releases (RCCL among them) end connection and "Connected all rings" lines with "comm 0x.. nRanks 08"
_COMM_NRANKS = re.compile(r"\bcomm 0x[0-9a-fA-F]+ nRanks (\d+)")
# ncclCommInitAll (RCCL: ncclCommInitAll_impl) makes every rank in one process, so on one node
_INIT_ALL = re.compile(r"\bncclCommInitAll(?:_impl)? comm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks (\d+)")
# NCCL <= 2.4 logs ncclCommInitAll as "NCCL INFO nranks 10", alone on its line
_INIT_ALL_24 = re.compile(r"NCCL INFO nranks (\d+)\s*$")
_NNODES = re.compile(r"\bnNodes (\d+)")
# 2.20+: "comm 0x.. rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 1": one NVLink domain across trays
_MNNVL = re.compile(r"\bMNNVL ([01])\b")
# src/mnnvl.cc: "MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d [nvlDomainSize %d]" (2.20+, a line of its own)
_MNNVL_CLIQUE = re.compile(r"\bMNNVL ([01]) cliqueId ")
# aws-ofi-nccl, when it cannot stop libfabric from calling CUDA: it then reports no GPUDirect support to NCCL
_OFI_GDR_OFF = "HMEM, disabling GDR"
_RING_GDR = re.compile(r"Connected all rings, use ring PXN \d+ GDR (\d)")
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
# NCCL's own prefix "host:pid:tid [dev] NCCL INFO" (the device may be padded: "[ 6 ]"); a WARN line has NCCL's source
# position, and from 2.2x its function, before "NCCL WARN" ("[0] transport/net_ib/gdaki/gin_host_gdaki.cc:431 (f) ")
# A log shipper's timestamp may be glued to the host ("...208-07:00ip-10-36-29-253:79:79 [0]"): the host starts
# after the time zone, not inside it. A line quoted in markdown inline code starts with a backtick ("`host:1:2 [0]
# ... NCCL WARN ...`", NVIDIA/nccl#733), or a code fence glued to it ("```host:1:2 [0] NCCL INFO", NVIDIA/nccl#857)
_PREFIX_HOST = re.compile(r"(?:^|[\s>:|\]`]|(?<=\d[+-]\d\d:\d\d))(?<![+-]\d\d:)"
                          r"([A-Za-z0-9][\w.\-]*):\d+:\d+ \[ ?\d+ ?\] (?:[\w./\-]+:\d+ (?:\(\w+\) )?)?"
                          r"NCCL (?:INFO|WARN)")
# Host and device only, no pid:tid ("gpu-server320 [5] NCCL INFO", nccl#1920): a word of its own, from a letter
_PREFIX_HOST_ONLY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w.\-]*) \[ ?\d+ ?\] (?:[\w./\-]+:\d+ (?:\(\w+\) )?)?"
                               r"NCCL (?:INFO|WARN)")
# NCCL <= 2.2 printed its prefix without the word NCCL: "host:1:2 [0] INFO ...", "host:1:2 [0] misc/ibvwrap.cu:61 WARN"
_PREFIX_HOST_22 = re.compile(r"(?:^|[\s>:|\]`])([A-Za-z0-9][\w.\-]*):\d+:\d+ \[ ?\d+ ?\] (?:[\w./\-]+:\d+ )?(?:INFO|WARN) ")
# nccl-tests' device list names every rank of its world (a host name may hold blanks: "on NODE A  device")
# (the host grows a word at a time: a lazy "\S.*?" before "\s+device" backtracks quadratically over long blank runs)
_RANK_HOST = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+(?:\s+\S+)*?)\s+device\s+-?\d")
# Lost line breaks put several records on one line: split before each prefix (at a run's first blank only: linear)
_RECORD_START = re.compile(r"(?<!\s)\s{2,}(?=[A-Za-z0-9][\w.\-]*:\d+:\d+ \[ ?\d+ ?\] NCCL )")
_NO_IB = re.compile(r"NET/IB ?: ?No device found|Failed to open libibverbs")  # (no verbs library: 2.4's only WARN)
# IB switched off by the user (NCCL <= 2.5 then logs no "Using network" line, only NET/Socket's list)
_IB_DISABLED = "NCCL_IB_DISABLE set by environment to 1"
# A failed work completion reported by NCCL's IB transport (or a plugin built on it: "NET/IB", "NET/gIB"): that network
# carried traffic; its GIDs "::ffff:a.b.c.d" are IPv4-mapped, which only RoCE v2 uses. (From the HPC-X plugin's own
# source, "ib_plugin.c:1615 NCCL WARN NET/IB : Got completion ...", it is the plugin's network, which it does not name.)
_NET_ERROR = re.compile(r"NET/(\w+) ?: Got completion")
_V4_GID = re.compile(r"(?:local|remote)Gids? ?::ffff:")
# GPUDirect-TCPX warns from its own functions ("tcpxCommProgress(tcpxComm*):1231 NCCL WARN ..."): it was the network
_TCPX_WARN = re.compile(r"\btcpx\w*\([^)]*\):\d+ NCCL WARN")
# a terminal's colour codes ("\x1b[32m..\x1b[0m"; tput sgr0's "\x1b(B\x1b[m" picks a charset first): not the log's
_ANSI = re.compile(r"\x1b(?:\[[0-9;:?]*[A-Za-z]|[()][0-9A-Za-z])")
_RING_LISTING_MAX = 20  # NCCL prints at most this many ranks of a ring (graph/rings.cc MAXWIDTH): more are cut
# Lines saying a network plugin (not NCCL's internal IB or Socket) was loaded
_PLUGIN_SIGNS = ("Loaded net plugin", "P2P plugin ", "NET/OFI ", "Plugin Path :", "Using external Network")
_KEYS = ("NCCL", "RCCL", "Rank ", "libibverbs", "NET/", "NET : ", " via ", "Ring ", "Channel ", "anks ", "GPU Direct", "etwork", "lugin", "rovider",
         "NVLS", "nvls", "nNodes", "Status")

FIELDS = ("nccl_version", "network", "devices", "gpudirect_rdma", "channels", "nranks", "nnodes", "transport", "hosts")


@lru_cache(maxsize=4096)  # a job repeats the same few "via ..." strings on every channel
def _connection_kind(via: str) -> tuple[str, str | None, int | None, bool]:
    """'NET/IB/0/GDRDMA' -> ('NET/IB', 'IB', 0, True); 'P2P/IPC/read' -> ('P2P', None, None, False)."""
    if via.startswith("NET/") and (m := _VIA_NET.match(via)):
        return f"NET/{m.group(1)}", m.group(1), int(m.group(2)), bool(m.group(3))
    if via.startswith("direct shared memory"):  # NCCL <= 2.8 wording of SHM
        return "SHM", None, None, False
    return re.split(r"[/ ]", via, maxsplit=1)[0], None, None, False


class _State:
    def __init__(self):
        self.versions: set[str] = set()
        self.rccl = False  # RCCL's version banner or its librccl plugin lines
        self.init_all_nranks = None  # size of a communicator made by ncclCommInitAll (one process)
        self.networks: list[str] = []
        self.plugin = self.provider = self.oob = None
        self.plugin_signs = self.internal_net = self.no_ib = self.collnet_refused = False
        self.ib_devices: dict[tuple, dict] = {}
        self.dev_by_index: dict[int, set] = {}  # NET device index -> device names (merged devices: several)
        self.socket_devices: dict[str, dict] = {}
        self.socket_if_23: dict[str, dict] = {}  # NCCL 2.2-2.3's one-interface-per-line list
        self.gdr_hca: dict[str, bool] = {}  # per HCA: can it do GPUDirect RDMA (NCCL >= 2.19 wording)
        self.gdr_plugin_off = False  # the network plugin said it disabled GPUDirect RDMA
        self.gdr_gpu = Counter()  # per GPU/HCA pair: did NCCL decide to use it (NCCL 2.3-2.18 wording)
        # "GDR 0/1" of each ring line, with its thread's host:pid:tid [dev] (the init thread of one communicator)
        self.ring_gdr: list[tuple[int, str]] = []
        self.nnodes_by_thread: dict[str, int] = {}  # nNodes as each init thread logged it
        self.kinds = Counter()
        self.net_names, self.net_dev_used = set(), set()  # the networks and NET device indexes connections name
        self.gdr_conn = Counter()  # network connections with / without GDRDMA
        self.local_edges: set[tuple[str, str]] = set()  # P2P/SHM connections: both ends on one node
        self.nranks = self.nnodes = self.listing_nranks = None
        self.rank_hosts: dict[tuple[int, int], str] = {}  # (nranks, rank) -> host, from per-rank init lines
        self.basis = ""  # what the transport verdict rests on (set by _transport)
        self.network_line = ""  # where the network came from when no "Using network" line named it
        self.nvls_channels = self.nvls_lines = 0
        self.collnet = Counter()  # CollNet connections per kind, kept apart: NCCL may give CollNet up later
        self.collnet_gdr = Counter()
        self.collnet_dev: set[int] = set()
        self.hosts: set[str] = set()
        self.host_heads = Counter()  # per host: how many distinct host:pid:tid [dev] prefixes named it
        self.mnnvl: bool | None = None
        self.test_lists: list[dict[int, str]] = []  # nccl-tests' "# Rank N ... on HOST device D" lists
        self.test_list_open = False  # the last list may continue (or be cut where the excerpt ends)
        self.test_list_mixed = False  # a rank listed twice: several worlds' lists mixed
        self.error_nets: set[str] = set()  # networks named by their error lines (NCCL_DEBUG=WARN logs)
        self.v4_gid = False  # an error line with IPv4-mapped GIDs: RoCE v2
        self.no_verbs = False  # IB unusable because libibverbs could not be opened (NCCL <= 2.4 says only that)
        self.ib_disabled = False  # NCCL_IB_DISABLE=1: NCCL does not try IB at all
        self.warnings = Warnings()  # NCCL's WARN lines, grouped by message
        self.torch = TorchErrors()  # torch's ProcessGroupNCCL errors: collectives timed out, NCCL errors raised
        self.ras = RasTable()  # the NCCL RAS client report's communicators table (its rows hold none of _KEYS)


def _feed_connection(st: _State, line: str) -> bool:
    """A connection line (`Channel 00/0 : 0[0] -> 1[1] via NET/IB/0`) or a CollNet one; True when it was."""
    # match at the word Channel/Ring rather than searching the whole line: most lines are these
    at = max(line.rfind("Channel "), line.rfind("Ring "))
    if at >= 0 and (m := _CONNECTION.match(line, at + (8 if line.startswith("Channel ", at) else 5))):
        kind, net, dev, gdr = _connection_kind(m.group(3))
        st.kinds[kind] += 1
        if net is not None:
            st.net_names.add(net)
            st.net_dev_used.add(dev)
            st.gdr_conn[gdr] += 1
        elif kind in ("P2P", "SHM"):
            st.local_edges.add((m.group(1), m.group(2)))
            if kind == "P2P" and m.group(3).startswith("P2P/MNNVL"):
                st.mnnvl = True
        return True
    if m := _COLLNET.search(line):
        st.collnet[f"COLLNET/{m.group(1)}"] += 1
        st.collnet_gdr[bool(m.group(3))] += 1
        st.collnet_dev.add(int(m.group(2)))
        return True
    return False


def _feed_net_devices(st: _State, line: str) -> bool:
    """NCCL's NET/Socket or NET/IB device list; True when the line was one."""
    if "NET/Socket" in line and "Using" in line:
        for idx, ifname, addr in _SOCKET_DEVICE.findall(line):
            st.socket_devices[ifname] = {"index": int(idx), "interface": ifname, "address": addr}
        return True
    devices = _IB_DEVICE.findall(line)
    if devices:
        merged = {int(i): set(re.findall(r"\] ?([\w.\-]+):\d+/", body)) for i, body in _MERGED.findall(line)}
        for idx, dev, port, link, sharp in devices:
            st.ib_devices[(dev, int(port))] = {"index": int(idx), "device": dev, "port": int(port),
                                               "link_layer": "RoCE" if link == "RoCE" else "InfiniBand",
                                               "sharp": bool(sharp)}
            if not merged:
                st.dev_by_index.setdefault(int(idx), set()).add(dev)
        for idx, names in merged.items():
            st.dev_by_index.setdefault(idx, set()).update(names)
        if m := _OOB.search(line):
            st.oob = m.group(1)
        return True
    return False


def _feed_network(st: _State, line: str) -> bool:
    """A line naming the network NCCL uses ("Using network IB", 2.3's "Using internal Network IB", 2.27+'s
    "Assigned NET plugin IB to comm", the OFI plugin's test binary's "NCCLNet device used"); True when it was one."""
    if m := _USING_NETWORK.search(line):
        st.networks.append(m.group(1))
    elif m := _ASSIGNED_NET.search(line):
        st.networks.append(m.group(1))
    elif m := _USING_NETWORK_23.search(line):
        st.networks.append(m.group(2))
        if m.group(1) == "external":
            st.plugin, st.plugin_signs = m.group(2), True
    elif m := _OFI_TEST_NET.search(line):
        st.hosts.add(m.group(1))
        st.networks.append(name := m.group(2).rstrip().rstrip("."))
        st.network_line = f"no Using network line: the OFI plugin's test names it (NCCLNet device ... is {name})"
    return m is not None


def _thread(line: str) -> str:
    """The text before NCCL's level word: host:pid:tid [dev] and any launcher prefix, '' when there is none."""
    k = line.find(" NCCL ")
    return line[:k] if k > 0 else ""


def _feed(st: _State, line: str) -> None:
    if "via " in line and _feed_connection(st, line):
        return
    if "WARN" in line:
        st.warnings.add(line)
    if "NCCL version" in line and (m := _VERSION.search(line)) and "compiled with" not in line[:m.start()]:
        st.versions.add(m.group(1))
        return
    if "RCCL version" in line and (m := _RCCL_VERSION.search(line)):
        st.versions.add(m.group(1))
        st.rccl = True
        return
    if "librccl" in line or any(sign in line for sign in _RCCL_SIGNS):
        st.rccl = True
    if ("etwork" in line or "Assigned NET" in line or "NCCLNet device" in line) and _feed_network(st, line):
        return
    if _COLLNET_REFUSED in line:
        st.collnet_refused = True
        return
    if "lugin" in line or "NET/" in line:
        if m := _LOADED_PLUGIN.search(line):
            st.plugin = _PLUGIN_VERSION.sub("", m.group(1).rstrip())
        elif st.plugin is None:
            for pattern in _PLUGIN_NAMES:
                if m := pattern.search(line):
                    st.plugin = " ".join(m.groups())
                    st.plugin_signs = True
                    break
        if any(s in line for s in _PLUGIN_SIGNS):
            st.plugin_signs = True
        if "internal implementation" in line or "internal network plugin" in line:
            st.internal_net = True
    if _OFI_GDR_OFF in line:
        st.gdr_plugin_off = True
        return
    if "rovider" in line and (m := _PROVIDER.search(line)):
        st.provider = m.group(1)
    if "GPU Direct RDMA" in line and (m := _GDR.search(line)):
        on, what = m.group(1) == "Enabled", m.group(2)
        if "GPU" in what:  # a decision for one GPU/NIC pair
            st.gdr_gpu[on] += 1
        elif h := _GDR_HCA.search(what):  # what one HCA supports
            st.gdr_hca[h.group(2)] = on
        return
    if "NET/" in line and _feed_net_devices(st, line):
        return
    if "NET : Using interface" in line and (m := _SOCKET_IF_23.search(line)):
        st.socket_if_23.setdefault(m.group(1), {"index": len(st.socket_if_23), "interface": m.group(1),
                                                "address": m.group(2)})
        return
    if "Got completion" in line and (m := _NET_ERROR.search(line)):
        st.error_nets.add("a plugin's" if "_plugin.c:" in line else m.group(1))
        st.v4_gid = st.v4_gid or bool(_V4_GID.search(line))
        return
    if "tcpx" in line and _TCPX_WARN.search(line):
        st.error_nets.add("GPUDirectTCPX")
        return
    if _IB_DISABLED in line:
        st.ib_disabled = True
        return
    if "libibverbs" in line or "No device" in line:
        if _NO_IB.search(line):
            st.no_ib = True
            if "libibverbs" in line:
                st.no_verbs = True
            return
    if "anks " in line:
        for r, n in _NRANKS.findall(line):
            st.nranks = max(st.nranks or 0, int(n))
            # NCCL < 2.19 logs no nNodes: each rank's "rank R nranks N" line and its host:pid:tid prefix
            # give the node count once every rank's line is there
            if m := _PREFIX_HOST.search(line):
                st.rank_hosts[(int(n), int(r))] = m.group(1)
        for n in _COMM_NRANKS.findall(line):
            st.nranks = max(st.nranks or 0, int(n))
        if ("InitAll" in line and (m := _INIT_ALL.search(line))) or (m := _INIT_ALL_24.search(line)):
            st.init_all_nranks = max(st.init_all_nranks or 0, int(m.group(1)))
            st.nranks = max(st.nranks or 0, int(m.group(1)))
    if "cliqueId" in line and (m := _MNNVL_CLIQUE.search(line)):
        st.mnnvl = st.mnnvl or m.group(1) == "1"
        return
    if "nNodes" in line and (m := _NNODES.search(line)):
        st.nnodes = max(st.nnodes or 0, int(m.group(1)))
        st.nnodes_by_thread[_thread(line)] = int(m.group(1))
        if (mn := _MNNVL.search(line)) and not st.mnnvl:
            st.mnnvl = mn.group(1) == "1"
    if "GDR " in line and (m := _RING_GDR.search(line)):
        st.ring_gdr.append((int(m.group(1)), _thread(line)))
        return
    if "nvls" in line or "NVLS" in line:
        if m := _NVLS_CHANNELS.search(line):
            st.nvls_channels = max(st.nvls_channels, int(m.group(1)))
        elif "NVLS comm 0x" in line or "Connected NVLS tree" in line:
            st.nvls_lines += 1
        return
    if m := _RING_LISTING.search(line):
        ranks = [int(x) for x in m.group(1).split()]
        # a complete ring holds every rank once; NCCL cuts rings longer than 20 ranks
        if len(ranks) < _RING_LISTING_MAX and sorted(ranks) == list(range(len(ranks))):
            st.listing_nranks = max(st.listing_nranks or 0, len(ranks))


def _glued(line: str, k: int) -> list[str] | None:
    """A pasted log that lost its line breaks holds several records on one line (a second record follows a
    run of blanks, or a first one was cut and a record starts mid-line): the records, else None."""
    parts = _RECORD_START.split(line)
    if len(parts) > 1:
        return parts
    # records glued with no blank at all ("...cudaDriverVersion 12080h100-st-316:17:17 [1] NCCL INFO ...", or
    # " | " between a log console's two copies of a record): split where the first record's own prefix recurs
    if (m := _PREFIX_HOST.search(line, 0, k + 11)) is None:
        return None
    parts = [p.rstrip(" |") for p in _same_host_start(m.group(1)).split(line) if p]
    return parts if len(parts) > 1 else None


@lru_cache(maxsize=256)
def _same_host_start(host: str) -> re.Pattern:
    return re.compile(rf"(?={re.escape(host)}:\d+:\d+ \[ ?\d+ ?\] NCCL )")


def _note_host(st: _State, record: str, k: int, seen: set) -> None:
    if k > 0:
        head = record[:k]  # "host:pid:tid [dev]" repeats on every line of a thread: look each one up once
        if head not in seen:
            seen.add(head)
            if m := _PREFIX_HOST.search(record, 0, k + 11) or _PREFIX_HOST_ONLY.search(record, 0, k + 11):
                st.hosts.add(m.group(1))
                st.host_heads[m.group(1)] += 1
    elif "Rank" in record and (m := _RANK_HOST.search(record)):
        st.hosts.add(m.group(2))
        if not st.test_list_open:  # a new device list (a log may hold several nccl-tests runs)
            st.test_lists.append({})
            st.test_list_open = True
        rank = int(m.group(1))
        if rank in st.test_lists[-1]:  # processes each listing their own world (nccl-tests without MPI)
            st.test_list_mixed = True
        st.test_lists[-1][rank] = m.group(2)
        return
    st.test_list_open = False  # any other line after the list closes it: the list is whole


def _note_host_22(st: _State, line: str, seen: set) -> None:
    """The host of a line of NCCL <= 2.2, whose prefix has no word NCCL ("host:1:2 [0] INFO ...")."""
    if (m := _PREFIX_HOST_22.search(line)) and m.group(0) not in seen:
        seen.add(m.group(0))
        st.hosts.add(m.group(1))
        st.host_heads[m.group(1)] += 1


def parse_lines(lines) -> dict:
    st = _State()
    seen: set[str] = set()
    for line in lines:
        if st.ras.open or "via " in line or any(k in line for k in _KEYS):
            try:
                _read_line(st, (_ANSI.sub("", line) if "\x1b" in line else line).rstrip("\r\n"), seen)
            except ValueError:  # a number of over 4,300 digits (int() refuses it): not a line NCCL wrote
                continue
    return _summarize(st)


def _read_line(st: _State, line: str, seen: set) -> None:
    if (st.ras.open or "Status" in line) and st.ras.feed(line):  # the RAS report's communicators table
        st.nranks = max(st.nranks or 0, st.ras.nranks() or 0) or None
        return
    k = line.find(" NCCL ")
    if (k < 0 or not line.startswith(("INFO", "WARN"), k + 6)) and \
            ("WorkNCCL(" in line or "atchdog" in line or "CCL error in: " in line):  # torch_nccl_errors.relevant
        st.torch.add(line)  # torch's ProcessGroupNCCL errors (not NCCL's own lines: those pay one startswith)
    if k > 0:  # the common case first: this runs once per line of every rank's log
        st.test_list_open = False
        if (line.find("  ", 0, k) >= 0 or line.find(" NCCL ", k + 6) > 0) and \
                (parts := _glued(line, k)) is not None:
            for record in parts:
                _note_host(st, record, record.find(" NCCL "), seen)
                _feed(st, record)
            return
        if line[:k] not in seen:
            _note_host(st, line, k, seen)
    elif "Rank" in line:
        _note_host(st, line, k, seen)
    elif " INFO " in line or " WARN " in line:
        _note_host_22(st, line, seen)
    _feed(st, line)


def _network(st: _State, unknown: dict) -> str | None:
    """What NCCL said it uses, else what the connections went through, else (NCCL < 2.6, which logs no
    "Using network") what its init found, unless a plugin was loaded."""
    network = None
    named = set(st.networks)
    if len(named) == 1:
        network = next(iter(named))
    elif len(named) > 1:
        unknown["network"] = f"ranks report different networks: {', '.join(sorted(named))}"
    elif len(st.net_names) == 1:
        network = next(iter(st.net_names))
    elif len(st.net_names) > 1:
        unknown["network"] = f"connections use different networks: {', '.join(sorted(st.net_names))}"
    elif st.plugin_signs and not st.internal_net:
        unknown["network"] = "a network plugin was loaded and the log does not say which network NCCL used"
    elif st.ib_devices:
        network, st.network_line = "IB", "no Using network line (NCCL < 2.6): NET/IB's device list"
    elif (st.socket_devices or st.socket_if_23) and (st.no_ib or st.ib_disabled):
        why = ("NCCL_IB_DISABLE=1" if st.ib_disabled else
               "libibverbs could not be opened" if st.no_verbs else "NET/IB found no device")
        network, st.network_line = "Socket", f"no Using network line: {why}, NET/Socket's list"
    elif st.error_nets == {"a plugin's"}:
        unknown["network"] = ("NET/IB's error lines come from a network plugin's own source (ib_plugin.c): the "
                              "plugin's network carried traffic, its name is not in the log")
    elif len(st.error_nets) == 1:
        network = next(iter(st.error_nets))
        what = "its plugin's warning lines" if network == "GPUDirectTCPX" else f"NET/{network}'s error line"
        st.network_line = f"no Using network line: {what} (that network carried traffic)"
    else:
        unknown["network"] = "no network line and no network connection in the log"
    return network


def _devices(st: _State, network: str | None, ib_devices: list, socket_devices: list, unknown: dict) -> list | None:
    """The devices of that network, as the log lists them."""
    devices = None
    if network is None:
        unknown["devices"] = "the network is unknown"
    elif network == "Socket":
        if socket_devices:
            devices = [{"device": d["interface"], "port": None, "link_layer": None, "address": d["address"]}
                       for d in socket_devices]
        else:
            unknown["devices"] = "no NET/Socket interface list in the log"
    elif ib_devices:
        devices = [{k: d[k] for k in ("device", "port", "link_layer", "sharp")} for d in ib_devices]
    elif st.provider or network in ("AWS Libfabric", "OFI", "Libfabric"):
        unknown["devices"] = (f"the {network} plugin logs its provider ({st.provider or 'not named here'}), "
                              "not device names or ports")
    else:
        unknown["devices"] = "no device list in the log"
    return devices


def _summarize(st: _State) -> dict:
    unknown: dict[str, str] = {}
    if st.collnet and not st.collnet_refused:
        st.kinds.update(st.collnet)
        st.gdr_conn.update(st.collnet_gdr)

    version = None
    if len(st.versions) == 1:
        version = next(iter(st.versions))
    elif st.versions:
        unknown["nccl_version"] = f"ranks report different versions: {', '.join(sorted(st.versions))}"
    else:
        unknown["nccl_version"] = "no NCCL version line in the log"

    network = _network(st, unknown)
    ib_devices = sorted(st.ib_devices.values(), key=lambda d: (d["index"], d["device"]))
    socket_devices = sorted((st.socket_devices or st.socket_if_23).values(), key=lambda d: d["index"])
    devices = _devices(st, network, ib_devices, socket_devices, unknown)

    # which transports the connections used
    channels = dict(st.kinds)
    nvls = st.nvls_channels or st.nvls_lines
    if nvls:
        channels["NVLS"] = nvls
    if not channels:
        channels = None
        unknown["channels"] = ("a one-rank communicator connects no channels" if st.nranks == 1
                               else "no connection line in the log")

    # ranks
    listed = _listed_world(st)
    nranks = st.nranks or st.listing_nranks or listed
    if nranks is None:
        unknown["nranks"] = "no line gives the communicator size"
    if st.nnodes is None and listed and nranks == listed:
        st.nnodes = len({h for ranks in st.test_lists for h in ranks.values()})
    if st.nnodes is None and nranks:
        by_rank = {r: h for (n, r), h in st.rank_hosts.items() if n == nranks}
        if len(by_rank) == nranks:
            st.nnodes = len(set(by_rank.values()))
    if st.nnodes is None and nranks and nranks == st.init_all_nranks and len(st.hosts) <= 1:
        st.nnodes = 1  # one process made every rank (ncclCommInitAll)
    if st.nnodes is None and nranks and st.ras.holds(nranks):
        st.nnodes = st.ras.nnodes(nranks)
    if st.nnodes is None:
        if nranks and st.ras.holds(nranks):
            unknown["nnodes"] = st.ras.why_no_nnodes(nranks)
        elif not nranks:
            unknown["nnodes"] = "no nNodes line, and the communicator size is unknown"
        else:
            named = len({r for (n, r) in st.rank_hosts if n == nranks})
            newer = version is not None and tuple(map(int, version.split("."))) >= (2, 19)
            why = "not in this part of the log" if newer else "NCCL < 2.19 logs none"
            unknown["nnodes"] = (f"no nNodes line ({why}), and {named} of {nranks} ranks' init lines "
                                 "name their host (every rank's log is needed)")

    gdr = _gdr_verdict(st, nranks, unknown)
    transport = _transport(st, network, nranks, unknown)
    hosts = sorted(_uncut_hosts(st)) or None
    if hosts is None:
        unknown["hosts"] = "no line carries NCCL's host:pid:tid prefix or an nccl-tests rank line"
    return {
        "nccl_version": version,
        # RCCL's version is that of the NCCL release it follows; None: no version line and no librccl line
        "library": "RCCL" if st.rccl else ("NCCL" if st.versions else None),
        "network": network,
        "net_plugin": st.plugin,
        "provider": st.provider,
        "devices": devices,
        "ib_devices": ib_devices,
        "ib_absent": st.no_ib,
        "socket_devices": socket_devices,
        "oob_interface": st.oob,
        "gpudirect_rdma": gdr,
        "gdr_connections": {"with_gdr": st.gdr_conn[True], "without_gdr": st.gdr_conn[False]},
        "gdr_by_hca": dict(st.gdr_hca),
        "channels": channels,
        "nranks": nranks,
        "nnodes": st.nnodes,
        "hosts": hosts,
        # NCCL counts the trays of one NVLink domain (GB200 NVL72) as one node: "intra-node" then spans hosts
        "mnnvl": st.mnnvl,
        "collnet_refused": st.collnet_refused,
        "transport": transport,
        "transport_basis": st.basis or None,
        "warnings": st.warnings.summary(),
        "torch_errors": st.torch.summary(),
        "unknown": {k: unknown[k] for k in FIELDS if k in unknown},
    }


def _uncut_hosts(st: _State) -> set[str]:
    """The hosts, less those made by a line cut short and run into the next one when two processes wrote to one
    stream ("adp-u" + "adp-us-llm-...:235:235 [1] NCCL INFO ..."): a name seen once that is the start of a
    known host followed by that host."""
    cut = set()
    lengths = {len(h) for h in st.hosts}  # the tails worth looking up (each slice of a long name costs its length)
    for glued in st.hosts:
        if st.host_heads[glued] == 1 and any(n < len(glued) and glued[-n:] in st.hosts and
                                             glued[-n:].startswith(glued[:-n]) for n in lengths):
            cut.add(glued)
    return st.hosts - cut


def _listed_world(st: _State) -> int | None:
    """The world size nccl-tests printed before its NCCL lines ("# Using devices", one line per rank): only when
    every list is whole (ranks 0..n-1, closed by a later line, not cut where an excerpt ends) and all agree."""
    if st.test_list_mixed:
        return None
    sizes = set()
    for i, ranks in enumerate(st.test_lists):
        if (st.test_list_open and i == len(st.test_lists) - 1) or sorted(ranks) != list(range(len(ranks))):
            return None
        sizes.add(len(ranks))
    return sizes.pop() if len(sizes) == 1 else None


def _gdr_verdict(st: _State, nranks, unknown: dict) -> bool | None:
    """GPUDirect RDMA in use: the connection lines decide (/GDRDMA on any network connection); older or
    partial logs fall back to NCCL's own GDR decisions, then to what the HCAs support."""
    if st.gdr_conn[True]:
        return True
    if st.gdr_conn[False]:
        return False
    if st.gdr_plugin_off:  # the plugin offers NCCL no GPU memory to register
        return False
    if any(g == 0 for g, _ in st.ring_gdr):  # NCCL >= 2.24: some ring network connection did not use GDR
        return False
    if any(_multi_node_thread(st, thread) for _, thread in st.ring_gdr):  # "GDR 1" on a multi-node communicator
        return True
    if st.gdr_gpu[True]:
        return True
    if st.gdr_gpu[False]:
        return False
    if st.gdr_hca and not any(st.gdr_hca.values()):
        return False  # no HCA can do it
    if st.gdr_hca:
        unknown["gpudirect_rdma"] = "the HCAs support GPUDirect RDMA, but no connection line shows it was used"
    elif st.kinds or st.nvls_channels or st.nvls_lines:
        unknown["gpudirect_rdma"] = "no network connection in the log: GPUDirect RDMA does not apply"
    elif nranks == 1:
        unknown["gpudirect_rdma"] = "a one-rank communicator has no peers"
    else:
        unknown["gpudirect_rdma"] = "no connection or GPU Direct RDMA line in the log"
    return None


def _multi_node_thread(st: _State, thread: str) -> bool:
    """Whether the communicator whose init thread printed a ring line spans nodes: that thread's own nNodes line,
    else (no thread logged one: lines without NCCL's prefix) the log's. A log of several communicators (one
    process per GPU, each making several) may show one communicator's rings and another's node count."""
    if st.nnodes_by_thread:
        return st.nnodes_by_thread.get(thread, 0) > 1
    return (st.nnodes or 0) > 1


def _single_node(st: _State, nranks) -> bool:
    """All ranks on one node: NCCL says nNodes 1, or P2P/SHM connections (which only join ranks of one
    node) link every rank of the communicator."""
    if st.nnodes == 1:
        return True
    if not nranks or nranks < 2 or not st.local_edges:
        return False
    parent = list(range(nranks))

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in st.local_edges:  # (rank numbers as written: a damaged one may be too long for int())
        if len(a) > 9 or len(b) > 9:
            continue
        a, b = int(a), int(b)
        if a < nranks and b < nranks:
            parent[root(a)] = root(b)
    return len({root(r) for r in range(nranks)}) == 1


def _transport(st: _State, network, nranks, unknown: dict) -> str | None:
    """One word for the inter-node transport: roce, infiniband, roce+infiniband, tcp, tcpx, efa,
    libfabric/<provider>, intra-node; st.basis says what it rests on."""
    if st.net_names:
        names = st.net_names if len(st.net_names) == 1 else set()
        name = next(iter(names)) if names else None
        if name is None:
            unknown["transport"] = f"connections use different networks: {', '.join(sorted(st.net_names))}"
            return None
        st.basis = f"per-connection lines (via NET/{name})"
        return _of_network(st, name, st.net_dev_used, unknown)
    if any(k.startswith("COLLNET/") for k in st.kinds) and not _single_node(st, nranks):
        # CollNet (SHARP) runs on the HCAs NCCL listed: their link layer is the transport between nodes
        links = _links_used(st, st.collnet_dev) if st.ib_devices else set()
        st.basis = "CollNet connection lines and the device list's link layer"
        if links == {"RoCE"}:
            return "roce"
        if links == {"InfiniBand"}:
            return "infiniband"
        st.basis = ""
        unknown["transport"] = ("only CollNet connections in the log, and no device list with one link layer "
                                "shows the network under them")
        return None
    if (st.kinds or st.nvls_channels or st.nvls_lines) and _single_node(st, nranks):
        st.basis = "nNodes 1" if st.nnodes == 1 else "P2P/SHM connections join every rank on one node"
        return "intra-node"
    if nranks == 1:
        unknown["transport"] = "a one-rank communicator sends nothing between ranks"
    elif (st.kinds or st.nvls_channels or st.nvls_lines) and (st.nnodes or 0) > 1 and network is not None:
        # NCCL says the ranks span nodes, yet the log shows only P2P/SHM/NVLS connections (an excerpt
        # deduplicated or cut before the network ones): what crosses nodes goes over the network NCCL chose
        said = st.network_line or f"network line (Using network {network})"
        st.basis = f"{said}; nNodes {st.nnodes} but only intra-node connection lines"
        return _of_network(st, network, set(), unknown)
    elif st.kinds or st.nvls_channels or st.nvls_lines:
        unknown["transport"] = ("no network connection in the log, and nothing shows that every rank "
                                "shares one node")
    elif st.nnodes == 1:
        st.basis = ("ncclCommInitAll: one process holds every rank" if nranks == st.init_all_nranks
                    else "nNodes 1: every rank on one node") + ", no connection lines"
        return "intra-node"
    elif network is not None:
        # no per-connection line at all (NCCL logs them at INFO only for some subsystems and versions, and an
        # excerpt may stop before them): the network NCCL chose for inter-node traffic, and the link layer of
        # the devices it listed, name it
        said = st.network_line or f"network line (Using network {network})"
        st.basis = f"{said}; no per-connection lines"
        return _of_network(st, network, set(), unknown)
    else:
        unknown["transport"] = "no connection line and no network line: nothing shows which transport carried traffic"
    return None


def _of_network(st: _State, name: str, used: set, unknown: dict) -> str | None:
    """The transport of NCCL network `name` (Socket, IB, IBext_v8, a plugin's name), from its devices' link
    layers (those of the NET device indexes in `used`, else every listed one) or the plugin's provider."""
    if name == "Socket" or name.startswith("FastSocket"):
        return "tcp"  # NCCL's sockets, or Google's Fast Socket plugin (TCP with more streams, not GPUDirect)
    if "TCPX" in name or name.startswith("FasTrak"):
        return "tcpx"  # Google's GPUDirect-TCPX/TCPXO plugins: TCP on the wire, payload DMA'd to GPU memory
    if st.provider or name in ("AWS Libfabric", "OFI", "Libfabric"):
        if st.provider == "efa":
            return "efa"
        if st.provider:
            return f"libfabric/{st.provider}"
        st.basis = ""
        unknown["transport"] = "the libfabric provider (efa or another) is not named in the log"
        return None
    if not st.ib_devices:
        links = set()
    elif used:
        links = _links_used(st, used)
    else:  # no connection names a device index: every device NCCL listed for this network
        links = {d["link_layer"] for d in st.ib_devices.values()}
    if links:
        listed = " ".join(f"{d['device']}:{d['port']}/{'RoCE' if d['link_layer'] == 'RoCE' else 'IB'}"
                          for d in sorted(st.ib_devices.values(), key=lambda d: (d["index"], d["device"])))
        st.basis += f"; devices {listed}"
    if links == {"RoCE"}:
        return "roce"
    if links == {"InfiniBand"}:
        return "infiniband"
    if links:
        return "roce+infiniband"
    if st.v4_gid:
        st.basis += "; IPv4-mapped GIDs (::ffff:) in its error lines"
        return "roce"
    if name.startswith("gIB"):
        # Google's gIB plugin (A3 Ultra, A4, A4X) drives the VMs' CX-7 NICs as RDMA over Converged Ethernet
        st.basis += "; gIB runs on RoCE NICs"
        return "roce"
    st.basis = ""
    unknown["transport"] = "the log names no device link layer, so InfiniBand and RoCE cannot be told apart"
    return None


def _links_used(st: _State, used: set) -> set:
    """Link layers of the devices the network connections used (their NET device index), or of every
    listed device when an index is not known or names different devices on different hosts."""
    by_name = {}
    for d in st.ib_devices.values():
        by_name.setdefault(d["device"], set()).add(d["link_layer"])
    links = set()
    for idx in used:
        names = st.dev_by_index.get(idx)
        if not names or any(n not in by_name for n in names):
            return {link for s in by_name.values() for link in s}
        for n in names:
            links |= by_name[n]
    return links


def _lines(paths):
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from f


def parse_files(paths) -> dict:
    out = parse_lines(_lines(paths))  # streamed: a 1,024-rank job's logs need not fit in memory at once
    out["log_files"] = len(paths)
    return out


def parse_dir(log_dir: str, pattern: str = "nccl.*.log") -> dict | None:
    paths = sorted(glob.glob(os.path.join(log_dir, pattern)))
    return parse_files(paths) if paths else None
