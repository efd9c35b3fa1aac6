"""Raw link test results: perftest tables and --out_json files, iperf3 -J reports, as numbers.

perftest prints one table per run: bandwidth tests (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`)
    #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]
(MB/sec in old releases, MiB/sec in new ones; both are 2^20 bytes per second: perftest divides by
0x100000), latency tests (`ib_send_lat`, `ib_write_lat`)
    #bytes  #iterations  t_min[usec]  t_max[usec]  t_typical[usec]  t_avg[usec]  t_stdev[usec]
    99% percentile[usec]  99.9% percentile[usec]
and, with -D (a duration), `t_avg[usec]  tps average`. Latency columns are printed with "%.2f" and no
guaranteed space, so wide values run together ("2465.901216.65"): they are split at two decimals.
Every bandwidth figure here is in Gb/s (10^9 bits per second), so lines of different units compare.
A bidirectional run (-b, title "... Bidirectional BW Test") reports both directions added: 'bidirectional'
says so, and such a figure is compared with twice the line rate.

No torch here: analysis modules run where only the run directory is.
"""
from __future__ import annotations

import json
import math
import re
from telemetry.errors import InputError

MIB_PER_S_IN_GBPS = 2**20 * 8 / 1e9  # perftest's MB/sec and MiB/sec are both 2^20 bytes per second

# multi-word column names in perftest's headers, made single tokens
_HEADER_WORDS = (("BW peak", "BW_peak"), ("BW average", "BW_average"), ("99.9% percentile", "p99.9"),
                 ("99% percentile", "p99"), ("tps average", "tps_average"), ("BW Port", "BW_Port"),
                 ("MsgRate Port", "MsgRate_Port"))
_TITLE = re.compile(r"^\s*(\S.*?(?:BW|Latency) Test)\s*$")
# a setting's name; the setting is read in code ("Name : value" up to a tab, the value without a colon): the
# pattern it replaced, a lazy name then "\s*:", backtracked quadratically over a long run of blanks
_FIELD_NAME = re.compile(r"[A-Za-z][\w.* ]*")
# two settings on one line are separated by a tab, or by 3+ blanks before a capital (from a run's first blank only:
# tried at every blank of a long run, the split took time quadratic in the run)
_SETTINGS_SPLIT = re.compile(r"\t+|(?<! ) {3,}(?=[A-Z])")
_TWO_DECIMALS = re.compile(r"-?\d+\.\d{2}")
_QUOTE = re.compile(r"^(?:[ \t]*>)+ ?")
# a terminal's colour codes ("\x1b[32m...\x1b[0m"; tput sgr0's "\x1b(B\x1b[m" chooses a character set first)
_ANSI = re.compile(r"\x1b(?:\[[0-9;:?]*[A-Za-z]|[()][0-9A-Za-z])")
# what perftest prints when a run fails ("Couldn't connect to ...", "Failed to modify QP ... to RTR",
# "Unable to Connect the HCA's through the link", "ethernet_read_keys: Couldn't read remote address")
_FAILURE = re.compile(r"couldn'?t|unable|failed|failure|error|cannot|can't|not supported|invalid", re.I)


class ParseError(InputError, ValueError):
    """Input that is not the tool's output; the message says what was expected."""


def _columns(header: str) -> list[tuple[str, str | None]]:
    for words, token in _HEADER_WORDS:
        header = header.replace(words, token)
    out = []
    for tok in header.split():
        m = re.match(r"^#?([^\[]+)(?:\[([^\]]*)\])?$", tok)
        out.append((m.group(1), m.group(2)) if m else (tok, None))
    return out


def _row_values(line: str, ncols: int, latency: bool) -> list[float] | None:
    tokens = [t.strip("*`") for t in line.split()]  # a figure pasted with markdown emphasis (**5544.28**)
    tokens = [t for t in tokens if t]
    if len(tokens) < 2 or not tokens[0].isdigit():
        return None
    if len(tokens) == ncols:
        try:
            return [float(t) for t in tokens]
        except ValueError:
            return None
    if latency:  # columns that ran together: every latency figure has exactly two decimals
        rest = _TWO_DECIMALS.findall(" ".join(tokens[2:]))
        if len(rest) + 2 == ncols:
            try:  # the pattern checks the figures, not the iteration count: a mangled one is no row
                return [float(tokens[0]), float(tokens[1]), *map(float, rest)]
            except ValueError:
                return None
    return None


def _without_log_prefix(lines: list[str]) -> list[str]:
    """perftest's lines as a test harness or log shipper logged them ("2019-07-16 03:43:24,134 process  L0458
    DEBUG| [stdout]  #bytes ..."): the text before the result header's '#bytes' is taken as the prefix, its digit
    runs and blank runs as any, and taken off every line that starts with it. Lines are unchanged when the header
    has nothing but blanks before it (or there is no header)."""
    head = next((line for line in lines if "#bytes" in line), None)
    prefix = head[:head.index("#bytes")].rstrip() if head else ""
    if not prefix or _QUOTE.fullmatch(prefix + " "):
        return lines
    pattern = re.compile("".join(r"\d+" if part.isdigit() else r"\s+" if part.isspace() else re.escape(part)
                                 for part in re.findall(r"\d+|\s+|[^\d\s]+", prefix)) + " ?")
    return [line[m.end():] if (m := pattern.match(line)) else line for line in lines]


def parse_perftest(text: str) -> dict:
    """The test's title, settings (device, link type...) and its result rows; raises ParseError when
    the text holds no perftest result table."""
    title, settings, rows, columns, latency = None, {}, [], None, False
    if "\x1b" in text:  # colour codes around lines or prefixes, kept by a log shipper: not perftest's text
        text = _ANSI.sub("", text)
    for line in _without_log_prefix(text.splitlines()):
        line = _QUOTE.sub("", line)  # output quoted in an e-mail or issue reply ("> ")
        if columns is None:
            m = _TITLE.match(line)
            if m and title is None:
                title = m.group(1)
                latency = "Latency" in title
                continue
            if line.lstrip().startswith("#bytes") and _columns(line)[0][0] == "bytes":
                columns = _columns(line)
                latency = latency or any(name.startswith("t_") for name, _ in columns)
                continue
            if title is not None:
                for part in _SETTINGS_SPLIT.split(line):
                    for f in _fields(part):
                        settings.setdefault(*f)
            continue
        if line.strip().startswith("---") or (rows and line.lstrip().startswith("#bytes")):
            if rows:
                break  # the table ends at its closing line, or where another run's table begins
            continue
        values = _row_values(line, len(columns), latency)
        if values is not None and (row := _row(columns, values)) is not None:
            rows.append(row)
    if columns is None:
        where = (f"; the {title} settings are here but no table: perftest prints some results (ib_read_*) on the "
                 "client only, read the client's output" if title and not _said(text) else "")
        raise ParseError("no perftest result table (a line starting '#bytes') in the text" + where + _said(text))
    if not rows:
        raise ParseError("perftest printed a result header but no result rows (did the test fail?)" + _said(text))
    units = {name: unit for name, unit in columns if unit}
    return {"tool": "perftest", "test": title, "kind": "latency" if latency else "bandwidth",
            "device": settings.get("Device"), "link_type": settings.get("Link type"),
            "connection": settings.get("Connection type"), "mtu": _mtu(settings.get("Mtu")),
            "qps": _int(settings.get("Number of qps")), "bidirectional": "Bidirectional" in (title or ""),
            "bw_unit": units.get("BW_average"), "rows": rows}


def _field(part: str) -> tuple[str, str] | None:
    """('Mtu', '4096[B]') of ' Mtu             : 4096[B]'; None for a part that is not one setting."""
    name, colon, value = part.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not value or ":" in value or not _FIELD_NAME.fullmatch(name):
        return None
    return name, value


def _fields(part: str) -> list[tuple[str, str]]:
    """The settings in one part of a settings line: one, or two where a copy collapsed the blanks between perftest's
    two columns to one ('Number of qps : 1 Transport type : IB'; the left column's values are one word; the left
    setting is kept where its name is one: 'Dual-port' is not, 'Device' after it still is); none else."""
    if f := _field(part):
        return [f]
    name, colon, value = part.partition(":")
    first, _, rest = value.strip().partition(" ")
    right = _field(rest) if colon and first else None
    return [f for f in (_field(f"{name}:{first}"), right) if f] if right else []


def _said(text: str) -> str:
    """perftest's own failure lines, for the error message: '; perftest said: ...' or ''."""
    lines = [ln.strip() for ln in text.splitlines() if _FAILURE.search(ln) and not ln.lstrip().startswith("#")]
    said = " | ".join(dict.fromkeys(lines))
    return f"; perftest said: {said[:300]}" if said else ""


def _int(value) -> int | None:
    """A count from a setting; None for anything else (and for digits no count has: int() refuses 4,300 of them, and
    str.isdigit() takes '²' for a digit that int() refuses)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _mtu(value) -> int | None:
    """Mtu as bytes: '4096[B]' in the table's settings, 4096 in --out_json."""
    if isinstance(value, int):
        return value
    m = re.match(r"\s*(\d{1,18})(?!\d)", str(value or ""))
    return int(m.group(1)) if m else None


def _row(columns: list[tuple[str, str | None]], values: list[float]) -> dict | None:
    """One result row; None when its size or iteration count is not a whole number (not a row perftest printed).
    A figure that is not finite ("nan", "inf", as a failed run prints) is unknown: None."""
    row: dict = {}
    for (name, unit), v in zip(columns, values):
        if name in ("bytes", "iterations"):
            if not math.isfinite(v) or v != int(v) or v < 0:
                return None
            row[name] = int(v)
            continue
        key, bandwidth = _row_key(name, unit)
        row[key] = None if not math.isfinite(v) else to_gbps(v, unit) if bandwidth else v
    if row.get("bw_peak_gbps") == 0.0:  # perftest prints 0.00 when it did not measure the peak (-D, -N)
        row["bw_peak_gbps"] = None
    return row


def _row_key(name: str, unit: str | None) -> tuple[str, bool]:
    """The row's key for a column, and whether the column is a bandwidth (converted to Gb/s)."""
    if name in ("BW_peak", "BW_average") or name.startswith("BW_Port"):
        return {"BW_peak": "bw_peak_gbps", "BW_average": "bw_avg_gbps"}.get(name, name.lower() + "_gbps"), True
    if name.startswith("MsgRate"):
        return ("msg_rate_mpps" if name == "MsgRate" else name.lower() + "_mpps"), False
    if unit == "usec" or name in ("p99", "p99.9"):
        return {"p99": "p99_us", "p99.9": "p99_9_us"}.get(name, name + "_us"), False
    return name, False


def to_gbps(value: float, unit: str | None) -> float:
    if unit in ("Gb/sec", "Gb/s"):
        return value
    if unit in ("MB/sec", "MiB/sec"):
        return value * MIB_PER_S_IN_GBPS
    raise ParseError(f"unknown perftest bandwidth unit {unit!r}; expected Gb/sec, MB/sec or MiB/sec")


def parse_perftest_json(text: str, report_gbits: bool) -> dict:
    """perftest's --out_json file. It does not say its unit: Gb/s with --report_gbits, else MiB/s."""
    try:
        data = json.loads(text)
    except ValueError as exc:  # not JSON, or a number of over 4,300 digits (int() refuses it)
        raise ParseError(f"perftest --out_json file is not JSON perftest wrote: {exc}") from None
    except RecursionError:
        raise ParseError("perftest --out_json file nests too deeply to read; expected perftest's object of "
                         "'test_info' and 'results'") from None
    if not isinstance(data, dict):
        raise ParseError(f"perftest --out_json file holds {_kind(data)}; expected an object with 'test_info' and "
                         "'results'")
    res = _object(data, "results", "perftest --out_json") or {}
    info = _object(data, "test_info", "perftest --out_json") or {}
    if not res:
        raise ParseError("perftest --out_json file has no 'results'")
    for key in ("MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99",
                "percentile_99.9", "tps_average", "avg_lat", "BW_peak", "BW_average", "bw_avg", "MsgRate", "msgRate_avg"):
        _number(res, key, "perftest --out_json 'results'")
    unit = "Gb/sec" if report_gbits else "MiB/sec"
    row: dict = {"bytes": res.get("MsgSize"), "iterations": res.get("n_iterations")}
    latency = "t_avg" in res or "avg_lat" in res
    if latency:
        for k in ("t_min", "t_max", "t_typical", "t_avg", "t_stdev"):
            if k in res:
                row[k + "_us"] = res[k]
        row["p99_us"], row["p99_9_us"] = res.get("percentile_99"), res.get("percentile_99.9")
        if "tps_average" in res:
            row["tps_average"] = res["tps_average"]
        if "avg_lat" in res:
            row["t_avg_us"] = res["avg_lat"]
    else:
        for src, dst in (("BW_peak", "bw_peak_gbps"), ("BW_average", "bw_avg_gbps"), ("bw_avg", "bw_avg_gbps")):
            if src in res:
                row[dst] = to_gbps(res[src], unit)
        row["msg_rate_mpps"] = res.get("MsgRate", res.get("msgRate_avg"))
        if row.get("bw_peak_gbps") == 0.0:
            row["bw_peak_gbps"] = None
    return {"tool": "perftest", "test": info.get("test"), "kind": "latency" if latency else "bandwidth",
            "device": info.get("Device"), "link_type": info.get("Link_type"),
            "connection": info.get("Connection_type"), "mtu": _mtu(info.get("Mtu")),
            "qps": _int(info.get("Number_of_qps")), "bidirectional": "Bidirectional" in str(info.get("test") or ""),
            "bw_unit": None if latency else unit, "rows": [row]}


def _iperf3_json(report: str | dict) -> dict:
    """The report as a dict. Text before the JSON object is skipped: captured terminals leave escape
    sequences there ("^[[F{"), some builds a warning line."""
    if isinstance(report, dict):
        return report
    start = report.find("{")
    if start < 0:
        # iperf3's own text report ("[ ID] Interval  Transfer  Bandwidth/Bitrate ...", esnet/iperf#703) is not read
        said = ("; this is iperf3's text report, which is not read: run iperf3 with -J (--json)"
                if "[ ID] Interval" in report or "Connecting to host" in report else "")
        raise ParseError("not an iperf3 -J report: no JSON object in the text" + said)
    try:
        data, _ = json.JSONDecoder().raw_decode(report[start:])
    except ValueError as exc:  # not JSON, or a number of over 4,300 digits (int() refuses it)
        raise ParseError(f"iperf3 -J output is not JSON: {exc}") from None
    except RecursionError:
        raise ParseError("iperf3 -J output nests too deeply to read; expected iperf3's report (an object of "
                         "'start', 'intervals' and 'end')") from None
    return data


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number")


def _object(parent: dict, key: str, where: str) -> dict | None:
    """parent[key] when it is an object, None when absent or null; ParseError naming it otherwise."""
    value = parent.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise ParseError(f"{where}: '{key}' is {_kind(value)}; expected an object")


def _number(parent: dict, key: str, where: str) -> float | int | None:
    """parent[key] when it is a number, None when absent or null; ParseError naming it otherwise."""
    value = parent.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise ParseError(f"{where}: '{key}' is {_kind(value)}; expected a number")


def parse_iperf3(report: str | dict) -> dict:
    """iperf3 -J: throughput the receiver saw (what a link test reports), the sender's, TCP
    retransmissions, and for --bidir the reverse direction; UDP adds loss and jitter. An iperf3 that
    failed writes {"error": ...}: that comes back as the 'error' field, with the rates None. A figure
    that is None while the report has a section for it says why in 'reasons'."""
    data = _iperf3_json(report)
    if not isinstance(data, dict) or ("end" not in data and "error" not in data):
        raise ParseError("not an iperf3 -J report: no 'end' or 'error' member")
    start = _object(data, "start", "iperf3 -J report") or {}
    test = _object(start, "test_start", "iperf3 -J report 'start'") or {}
    end = _object(data, "end", "iperf3 -J report") or {}
    sums = {key: _sum(end, key) for key in ("sum_sent", "sum_received", "sum", "sum_sent_bidir_reverse",
                                            "sum_received_bidir_reverse")}
    protocol = test.get("protocol")
    out = {"tool": "iperf3", "version": start.get("version"), "protocol": protocol,
           "streams": test.get("num_streams"), "duration_s": test.get("duration"),
           "reverse": bool(test.get("reverse")),
           # test_start.bidir appeared after 3.12; the reverse sums are there whenever --bidir ran
           "bidir": bool(test.get("bidir")) or "sum_received_bidir_reverse" in end,
           "error": data.get("error")}
    reasons: dict[str, str] = {}
    if not out["duration_s"] and (test.get("bytes") or test.get("blocks")):
        out["duration_s"] = None  # iperf3 writes 0 when the test ran to an amount (-n, -k), not for a time
        reasons["duration_s"] = (f"the test ran to a byte count (-n {test['bytes']})" if test.get("bytes") else
                                 f"the test ran to a block count (-k {test['blocks']})")
    sent, received = sums["sum_sent"], sums["sum_received"]
    old_udp = protocol == "UDP" and received is None and sent is None and sums["sum"] is not None
    if old_udp:
        # iperf3 before 3.10 ends a UDP test with one 'sum': its loss and jitter are the receiver's counts, but its
        # bytes and rate are what the client's streams moved (-k 10000 blocks of 8192 B: 81920000
        # bytes with 69 of 9996 datagrams lost, 0-complexity/selfhealing): the rate the receiver saw is not in it
        loss = sums["sum"]
        if not out["reverse"]:
            sent = sums["sum"]
        else:
            reasons["sent_bps"] = "iperf3 before 3.10 reports one UDP 'sum'; with -R it does not say whose bytes it holds"
        reasons["received_bps"] = ("iperf3 before 3.10 reports one UDP 'sum' of the bytes sent, with the receiver's "
                                   f"loss ({loss.get('lost_packets')} of {loss.get('packets')} datagrams lost); the "
                                   "rate the receiver saw is not in the report")
    out["received_bps"] = _bps(received)
    out["sent_bps"] = _bps(sent)
    if protocol == "TCP" and _zero_of_sent(received, sent):
        # a receiver total of 0 under bytes sent: the server's report did not cover the transfer (seen with -n
        # on short tests), or the link died after connecting (sent counts what the socket buffer took). Not
        # knowing which, the received rate is unknown, not 0
        out["received_bps"] = None
        why = ("its totals did not cover the transfer (the test ran to a byte or block count)"
               if test.get("bytes") or test.get("blocks") else
               "either its totals did not cover the transfer or nothing arrived (a link that died after connecting)")
        reasons["received_bps"] = (f"the server reported 0 bytes received of the {sent['bytes']} bytes sent: {why}; "
                                   "sent_bps is the sender's rate")
    out["retransmits"] = (sent or {}).get("retransmits") if protocol == "TCP" else None
    if protocol == "TCP" and sent and out["retransmits"] is None:
        reasons["retransmits"] = "the sending side's iperf3 reported no retransmission count (none on macOS or BSD)"
    out["seconds"] = (received or sent or {}).get("seconds")
    if protocol == "UDP":
        loss_src = received or (sums["sum"] if old_udp else None) or {}
        out["lost_packets"] = loss_src.get("lost_packets")
        out["packets"] = loss_src.get("packets")
        out["lost_percent"] = loss_src.get("lost_percent")
        out["jitter_ms"] = loss_src.get("jitter_ms")
    if out["bidir"]:
        out["reverse_received_bps"] = _bps(sums["sum_received_bidir_reverse"])
        out["reverse_sent_bps"] = _bps(sums["sum_sent_bidir_reverse"])
        out["reverse_retransmits"] = (sums["sum_sent_bidir_reverse"] or {}).get("retransmits")
        if protocol == "TCP" and _zero_of_sent(sums["sum_received_bidir_reverse"], sums["sum_sent_bidir_reverse"]):
            out["reverse_received_bps"] = None
            reasons["reverse_received_bps"] = "the reverse receiver reported 0 bytes of the bytes sent to it"
    out["reasons"] = reasons
    return out


def _sum(end: dict, key: str) -> dict | None:
    """One of the report's totals ('sum_sent', ...): an object whose figures are numbers; ParseError naming the
    figure that is not."""
    section = _object(end, key, "iperf3 -J report 'end'")
    for figure in ("bits_per_second", "bytes", "seconds", "retransmits", "lost_packets", "packets", "lost_percent",
                   "jitter_ms"):
        if section is not None:
            _number(section, figure, f"iperf3 -J report 'end.{key}'")
    return section


def _zero_of_sent(received: dict | None, sent: dict | None) -> bool:
    return bool(received and sent and received.get("bytes") == 0 and (sent.get("bytes") or 0) > 0)


def _bps(section: dict | None) -> float | None:
    return None if not section or section.get("bits_per_second") is None else float(section["bits_per_second"])


def percent_of_line(gbps: float | None, line_gbps: float | None) -> float | None:
    """Measured / line rate in percent; None when either is unknown (never a made-up line rate)."""
    if gbps is None or not line_gbps:
        return None
    return 100.0 * gbps / line_gbps


def ib_rate_gbps(rate_text: str | None) -> float | None:
    """/sys/class/infiniband/<dev>/ports/<p>/rate, e.g. '400 Gb/sec (4X NDR)' -> 400.0."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate_text or "")
    return float(m.group(1)) if m else None
