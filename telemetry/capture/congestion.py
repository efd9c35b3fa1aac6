"""Congestion and loss counters by what they mean, with names from the real drivers (docs/evidence.md).

Three kinds, kept apart in the verdict:
- loss: something was dropped or had to be sent again (discards, errors, sequence-error NAKs,
  retransmission timeouts);
- reordering: mlx5 `out_of_sequence` counts packets that arrived out of order. Under adaptive routing or
  packet spraying that is the fabric working as designed (ConnectX places them), not loss;
- congestion signals: PFC pause frames and pause time per priority, ECN-marked packets, CNPs sent and
  handled. They say the fabric pushed back, not that it lost anything.

Sources:
- RDMA hw_counters (/sys/class/infiniband/<dev>/ports/<p>/hw_counters), names from the kernel's
  drivers/infiniband/hw/mlx5/counters.c (q counters, congestion counters, op counters) and
  drivers/infiniband/hw/bnxt_re/hw_counters.c (the ECN/CNP names came with newer kernels).
- `ethtool -S <if>`: mlx5_core per-priority PFC (`rx_prio3_pause`, `tx_prio3_pause_duration`...,
  `rx_discards_phy`, `tx_pause_storm_*`) and bnxt_en (`rx_pfc_ena_frames_pri3`, `pfc_pri3_rx_duration_us`...);
  pause durations are in microseconds on both. Intel ice and i40e count pause frames as XOFF frames
  (`rx_priority_3_xoff.nic`, `port.link_xoff_rx`) and keep no pause time. mlx5's `rx_pause_ctrl_phy` is left
  out: it counts every pause control frame, PFC and global alike, so it would count them twice.
- EFA (hw_counters: `rx_drops`, `retrans_*`, `rdma_*_wr_err`; traffic in `tx_bytes`/`rx_bytes`, EFA has no
  port_xmit_data) and irdma (`cnpSent`, `cnpHandled`, `RxECNMrkd`, `ip4InDiscards`) from their kernel drivers.
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess

# hw_counters files read on every RDMA port that has them
HW_LOSS = ("packet_seq_err", "out_of_buffer", "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err",
           "req_transport_retries_exceeded", "req_rnr_retries_exceeded", "roce_adp_retrans_to",
           # bnxt_re
           "to_retransmits", "seq_err_naks_rcvd", "max_retry_exceeded", "missing_resp", "oos_drop_count",
           "rx_roce_discards", "rx_roce_errors", "rx_out_of_buffer",
           # efa (drivers/infiniband/hw/efa/efa_verbs.c): drops, SRD retransmissions, failed RDMA work requests
           "rx_drops", "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events",
           "rdma_read_wr_err", "rdma_write_wr_err",
           # irdma (drivers/infiniband/hw/irdma/verbs.c)
           "ip4InDiscards", "ip6InDiscards", "tcpRetransSegs")
HW_REORDER = ("out_of_sequence",)
HW_CONGESTION = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored",
                 "cc_rx_ce_pkts", "cc_rx_cnp_pkts", "cc_tx_cnp_pkts",
                 # bnxt_re
                 "rx_ecn_marked_pkts", "rx_cnp_pkts", "tx_cnp_pkts",
                 # irdma
                 "RxECNMrkd", "cnpSent", "cnpHandled", "cnpIgnored")
HW_OTHER = ("duplicate_request", "roce_adp_retrans", "roce_slow_restart", "roce_slow_restart_cnps",
            "roce_slow_restart_trans", "rx_icrc_encapsulated", "rnr_naks_rcvd", "dup_req",
            # efa: its traffic (EFA ports have no port_xmit_data/port_rcv_data) and remote-side trouble
            "tx_bytes", "rx_bytes", "tx_pkts", "rx_pkts", "send_bytes", "recv_bytes", "rdma_read_bytes",
            "rdma_write_bytes", "retrans_bytes", "impaired_remote_conn_events")
HW_COUNTERS = HW_LOSS + HW_REORDER + HW_CONGESTION + HW_OTHER

# ECN marks seen by the notification point, CNPs it sent, CNPs the reaction point acted on (all drivers)
ECN_MARKED = ("np_ecn_marked_roce_packets", "cc_rx_ce_pkts", "rx_ecn_marked_pkts", "RxECNMrkd")
CNP_SENT = ("np_cnp_sent", "cc_tx_cnp_pkts", "tx_cnp_pkts", "cnpSent")
CNP_RECEIVED = ("rp_cnp_handled", "cc_rx_cnp_pkts", "rx_cnp_pkts", "cnpHandled")

# ethtool -S names: (pattern, kind); a pattern's first group, where it has one, is the priority
ETHTOOL = (
    (re.compile(r"^rx_prio(\d)_pause$"), "rx_pause"), (re.compile(r"^tx_prio(\d)_pause$"), "tx_pause"),
    (re.compile(r"^rx_prio(\d)_pause_duration$"), "rx_pause_duration"),
    (re.compile(r"^tx_prio(\d)_pause_duration$"), "tx_pause_duration"),
    (re.compile(r"^rx_pfc_ena_frames_pri(\d)$"), "rx_pause"), (re.compile(r"^tx_pfc_ena_frames_pri(\d)$"), "tx_pause"),
    (re.compile(r"^pfc_pri(\d)_rx_duration_us$"), "rx_pause_duration"),
    (re.compile(r"^pfc_pri(\d)_tx_duration_us$"), "tx_pause_duration"),
    # ice (".nic" port counters) and i40e ("port." prefix): pause frames are XOFF frames, per priority or not
    (re.compile(r"^(?:port\.)?rx_priority_(\d)_xoff(?:\.nic)?$"), "rx_pause"),
    (re.compile(r"^(?:port\.)?tx_priority_(\d)_xoff(?:\.nic)?$"), "tx_pause"),
    (re.compile(r"^rx_pause_frames$|^rx_global_pause$|^(?:port\.)?link_xoff_rx(?:\.nic)?$"), "rx_pause_global"),
    (re.compile(r"^tx_pause_frames$|^tx_global_pause$|^(?:port\.)?link_xoff_tx(?:\.nic)?$"), "tx_pause_global"),
    (re.compile(r"^rx_global_pause_duration$"), "rx_pause_duration"),
    (re.compile(r"^tx_global_pause_duration$"), "tx_pause_duration"),
    (re.compile(r"^tx_pause_storm_warning_events$|^continuous_(?:roce_)?pause_events$"), "pause_storm_warning"),
    (re.compile(r"^tx_pause_storm_error_events$"), "loss"),
    (re.compile(r"^rx_discards_phy$|^tx_discards_phy$|^rx_prio\d_(buf|cong)_discard$|^rx_discard_packets_cos\d$"),
     "loss"),
    # frames the port dropped or could not check: mlx5 CRC, bnxt_en port and host-ring discards and FCS,
    # ice/i40e port drops and CRC
    (re.compile(r"^rx_crc_errors_phy$|^rx_fcs_err_frames$|^(rx|tx)_stat_discard$|^rx_total_(ring|oom)_discards$"),
     "loss"),
    (re.compile(r"^port\.(rx_dropped|rx_crc_errors|tx_dropped_link_down)$|"
                r"^(rx_dropped|rx_crc_errors|tx_dropped_link_down)\.nic$"), "loss"),
)
CONGESTION_KINDS = ("rx_pause", "tx_pause", "rx_pause_duration", "tx_pause_duration", "rx_pause_global",
                    "tx_pause_global", "pause_storm_warning")


@functools.lru_cache(maxsize=8192)  # an ethtool -S has ~750 names, read every sample: match each name once
def classify(name: str) -> tuple[str, int | None] | None:
    """('loss' | 'reorder' | a congestion kind, priority or None) for a counter name, None if not ours."""
    if name in HW_LOSS:
        return "loss", None
    if name in HW_REORDER:
        return "reorder", None
    for pattern, kind in ETHTOOL:
        m = pattern.match(name)
        if m:
            prio = m.group(1) if m.groups() and m.group(1) and m.group(1).isdigit() else None
            return kind, int(prio) if prio is not None else None
    return None


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`ethtool -S` output: 'NIC statistics:' then one 'name: value' a line."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        if sep and name and value.strip().lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


class EthtoolReader:
    """The congestion and loss counters `ethtool -S` shows for each interface. An interface whose driver
    has none of them (veth, lo, most virtual NICs) is dropped after the first read, so it costs nothing."""

    def __init__(self, interfaces: list[str], run=None):
        self.exe = shutil.which("ethtool")
        self._run = run or self._ethtool
        self.interfaces = list(interfaces) if (self.exe or run) else []
        self.reason = None if (self.exe or run) else "ethtool is not installed (apt-get install ethtool)"
        first = {i: self._wanted(i) for i in self.interfaces}
        self.interfaces = [i for i, v in first.items() if v]

    def _ethtool(self, iface: str) -> str:
        proc = subprocess.run([self.exe, "-S", iface], capture_output=True, text=True, timeout=5)
        return proc.stdout if proc.returncode == 0 else ""

    def _wanted(self, iface: str) -> dict[str, int]:
        stats = parse_ethtool_stats(self._run(iface))
        return {k: v for k, v in stats.items() if classify(k) is not None}

    def read(self) -> dict[str, dict[str, int]]:
        return {f"eth:{i}": self._wanted(i) for i in self.interfaces}


def summarize(step: dict[str, dict[str, int]]) -> dict:
    """One step's (or a run's) counter deltas as congestion figures: PFC pause frames and pause time per
    priority and direction, ECN marks, CNPs sent and received; None where no device reports the counter."""
    pause: dict[str, dict[str, int]] = {}
    totals: dict[str, int | None] = {"ecn_marked": None, "cnp_sent": None, "cnp_received": None}
    for dev, values in step.items():
        for name, v in values.items():
            for key, names in (("ecn_marked", ECN_MARKED), ("cnp_sent", CNP_SENT), ("cnp_received", CNP_RECEIVED)):
                if name in names:
                    totals[key] = (totals[key] or 0) + v
            c = classify(name)
            if c and c[0] in CONGESTION_KINDS:
                kind, prio = c
                slot = pause.setdefault(kind, {})
                label = f"prio{prio}" if prio is not None else "global"
                slot[label] = slot.get(label, 0) + v
    return {"pfc": pause or None, **totals}
