"""Raw link tests between two nodes, every NIC at once: perftest for RDMA, iperf3 for socket fabrics.

    python -m launch.linktest --tool ib_write_bw --server nodeA --client nodeB --server-addr 10.0.0.1 \
        --devices mlx5_0,mlx5_1,...  --exec "ssh {host}" --output runs/link_ab
    python -m launch.linktest --tool iperf3 --server nodeA --client nodeB --server-addr 10.0.0.1 \
        --line-rate 100gbit --output runs/link_ab_tcp

One server/client pair per NIC, each on its own TCP port (`-d mlx5_N -p PORT+N --report_gbits`), all
started together so the NICs are loaded at the same time, as an evaluation's "all 8 NICs at once" table
is. `--exec` is how a command reaches a node: `ssh {host}` (default: run here), or `ip netns exec {host}`
in the fabric lab. Results go to OUTPUT/linktest.json with the raw outputs beside it; each link's rate is
compared with its line rate: the HCA's own (/sys/class/infiniband/<dev>/ports/<p>/rate on the client)
or --line-rate; with neither, the percentage is null, never a guess.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone

from launch import link_counters as lc
from telemetry.analysis import rates
from telemetry.analysis import link_tests as lt
from telemetry.errors import InputError, OneLineParser, output_dir_problem, print_errors
from telemetry.work_progress import WorkProgress

PERFTEST = ("ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_send_lat", "ib_write_lat", "ib_read_lat")
TOOLS = PERFTEST + ("iperf3",)
PACKAGE = {**{t: "perftest" for t in PERFTEST}, "iperf3": "iperf3"}
DEFAULT_PORT = {"perftest": 18515, "iperf3": 5201}
# Before the clients start, each server must listen on its port: checked with `ss` on the server node
# (through --exec), for up to SERVER_READY_S (eight ssh sessions opened at once on a busy head node can
# take seconds); a node without `ss` gets the fixed SERVER_WAIT_S instead.
SERVER_READY_S = 30.0
SERVER_WAIT_S = 1.0


class LinkTestError(InputError):
    """Bad input or a missing tool: one `error:` line, exit 2."""


def _prefix(exec_tpl: str | None, host: str) -> list[str]:
    return shlex.split(exec_tpl.format(host=host)) if exec_tpl else []


def _check_reachable(host: str, exec_tpl: str) -> None:
    """`true` on the node through --exec: a node that cannot be reached (no such host or namespace, ssh
    refused) is named as such, not as a missing tool."""
    cmd = _prefix(exec_tpl, host) + ["true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise LinkTestError(f"cannot run `{cmd[0]}` to reach {host} (--exec {exec_tpl!r})") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LinkTestError(f"cannot reach {host} with `{' '.join(cmd[:-1])}`: {exc}") from None
    if proc.returncode != 0:
        said = next((line.strip() for line in proc.stderr.splitlines() if line.strip()), f"exit {proc.returncode}")
        raise LinkTestError(f"cannot reach {host} with `{' '.join(cmd[:-1])}`: {said}; allowed: a node --exec "
                            "reaches (--server, --client)")


def check_tool(tool: str, hosts: list[str], exec_tpl: str | None) -> None:
    """`TOOL --version` on each node: a plain argument list, so it reads the same through ssh (which joins
    and re-parses it) and run directly; 127 or 'No such file' means the tool is not there."""
    for host in dict.fromkeys(hosts):
        if exec_tpl:
            _check_reachable(host, exec_tpl)
        cmd = _prefix(exec_tpl, host) + [tool, "--version"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            missing = proc.returncode == 127 or (proc.returncode != 0 and "No such file" in proc.stderr)
        except FileNotFoundError:
            missing = not _prefix(exec_tpl, host)  # the tool itself, run here
            if not missing:
                raise LinkTestError(f"cannot run `{cmd[0]}` to reach {host} (--exec {exec_tpl!r})") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LinkTestError(f"cannot reach {host} with `{' '.join(cmd[:-2]) or 'a local run'}`: {exc}") from None
        if missing:
            pkg = PACKAGE[tool]
            raise LinkTestError(f"{tool} is not installed on {host}; install {pkg} (Debian/Ubuntu: apt-get install "
                                f"{pkg}; RHEL: dnf install {pkg})")


def commands(args, index: int, device: str | None) -> tuple[list[str], list[str]]:
    """(server, client) argument lists for link `index`."""
    port = args.port + index
    if args.tool == "iperf3":
        server = ["iperf3", "-s", "-1", "-p", str(port), "-J"]
        client = ["iperf3", "-c", args.server_addr, "-p", str(port), "-J", "-t", str(args.duration),
                  "-P", str(args.streams)]
        if args.bidir:
            client.append("--bidir")
        if args.udp_rate:
            client += ["-u", "-b", args.udp_rate]
        return server, client
    common = [args.tool, "-p", str(port), "-F"]
    if device:
        common += ["-d", device, "-i", str(args.ib_port)]
    if args.gid_index is not None:
        common += ["-x", str(args.gid_index)]
    if args.tool.endswith("_bw"):
        common += ["--report_gbits", "-D", str(args.duration)]
        if args.qps > 1:
            common += ["-q", str(args.qps)]
    if args.size:
        common += ["-s", str(args.size)]
    return common, common + [args.server_addr]


def line_rate_gbps(args, device: str | None) -> tuple[float | None, str]:
    if args.line_rate:
        return rates.parse_rate(args.line_rate) / 1e9, f"--line-rate {args.line_rate}"
    if device:
        path = f"/sys/class/infiniband/{device}/ports/{args.ib_port}/rate"
        proc = subprocess.run(_prefix(args.exec, args.client) + ["cat", path], capture_output=True, text=True,
                              timeout=30)
        g = lt.ib_rate_gbps(proc.stdout) if proc.returncode == 0 else None
        if g:
            return g, f"{args.client}:{path} ({proc.stdout.strip()})"
    return None, "unknown: no --line-rate and no HCA rate to read"


def run_links(args) -> dict:
    devices = [d for d in (args.devices or "").split(",") if d] or [None]
    if args.tool == "iperf3" and devices != [None]:
        devices = [None] * len(devices)  # iperf3 streams go wherever routing sends them; one pair per entry
    os.makedirs(os.path.join(args.output, "raw"), exist_ok=True)
    # host counters on both nodes and the switch exporter, before and after: the run's verdict and figures
    nodes = {"server": args.server, "client": args.client} if args.counters else {}
    before = {role: lc.snapshot(_prefix(args.exec, host)) for role, host in nodes.items()}
    switch = None
    if args.switch_metrics:
        from telemetry.capture.switch_metrics import SwitchWatch
        switch = SwitchWatch(args.switch_metrics)
    servers, links = [], []
    for i, dev in enumerate(devices):
        s_cmd, c_cmd = commands(args, i, dev)
        servers.append(subprocess.Popen(_prefix(args.exec, args.server) + s_cmd, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True))
        links.append({"index": i, "device": dev, "port": args.port + i, "server_cmd": s_cmd, "client_cmd": c_cmd})
    ready = wait_for_servers(args, links, servers)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clients = [subprocess.Popen(_prefix(args.exec, args.client) + link["client_cmd"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True) for link in links]
    limit = args.duration + args.timeout_s
    # a bar over the test's seconds on a terminal (the tools print only at the end); no lines otherwise
    progress = WorkProgress("linktest", int(args.duration), "s", enabled=sys.stdout.isatty()).start().tick_every(1.0)
    for link, client, server in zip(links, clients, servers):
        for role, proc in (("client", client), ("server", server)):
            try:
                out, err = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                out, err = proc.communicate()
                link.setdefault("problems", []).append(f"{role} did not finish within {limit} s")
            link[f"{role}_rc"] = proc.returncode
            name = f"link{link['index']}_{role}." + ("json" if args.tool == "iperf3" else "txt")
            with open(os.path.join(args.output, "raw", name), "w", encoding="utf-8") as f:
                f.write(out)
            if err.strip():
                link[f"{role}_stderr"] = err.strip()[-400:]
            if role == "client":
                link["result"], link["parse_error"] = _parse(args.tool, out)
        progress.close()  # the first client's end is the test's (a second close does nothing)
        gbps = _link_gbps(link.get("result"))
        link["line_rate_gbps"], link["line_rate_source"] = line_rate_gbps(args, link["device"])
        link["gbps"] = gbps
        both_ways = 2 if (link.get("result") or {}).get("bidirectional") else 1  # -b adds the two directions
        link["bidirectional"] = both_ways == 2
        link["percent_of_line"] = lt.percent_of_line(gbps, link["line_rate_gbps"] and link["line_rate_gbps"] * both_ways)
    after = {role: lc.snapshot(_prefix(args.exec, host)) for role, host in nodes.items()}
    counters = {role: {"node": host, **lc.node_result(before[role][0], after[role][0],
                                                       before[role][1] or after[role][1])}
                for role, host in nodes.items()}
    total = [link["gbps"] for link in links if link["gbps"] is not None]
    return {"counters": counters or None, "switch": switch.finish() if switch else None, "servers_ready": ready,
            "tool": args.tool, "server": args.server, "client": args.client, "server_addr": args.server_addr,
            "started": started, "duration_s": args.duration, "links": links,
            "aggregate_gbps": sum(total) if len(total) == len(links) else None,
            "aggregate_reason": None if len(total) == len(links) else "a link has no result"}


def listening_ports(ss_output: str) -> set[int]:
    """TCP ports in LISTEN state from `ss -Htln` (local address column: 0.0.0.0:5201, [::]:5201, *:5201,
    10.0.0.1%eth0:18515)."""
    ports = set()
    for line in ss_output.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[3].rpartition(":")[2].isdigit():
            ports.add(int(cols[3].rpartition(":")[2]))
    return ports


def wait_for_servers(args, links: list[dict], servers: list) -> dict:
    """Wait until every server still running listens on its port on the server node (a server that exited
    is not waited for: its link records why). Returns how the start was judged, for linktest.json. A poll
    that fails (ssh refused while the servers' own sessions open, a slow `srun` step) is polled again, every
    0.1 s at first and at most every second; only a node without `ss` gets the fixed wait."""
    t0 = time.monotonic()
    cmd = _prefix(args.exec, args.server) + ["ss", "-Htln"]
    pause, why = 0.1, "no poll answered"
    while True:
        waiting = [link["port"] for link, server in zip(links, servers) if server.poll() is None]
        waited = round(time.monotonic() - t0, 3)
        if not waiting:
            return {"how": "no server still running to wait for (each link records how its server ended)",
                    "waited_s": waited}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=max(1.0, min(10.0, SERVER_READY_S - waited)))
            no_ss = proc.returncode == 127 or (proc.returncode != 0 and "No such file" in proc.stderr)
            seen = listening_ports(proc.stdout) if proc.returncode == 0 else None
            if seen is None:
                why = f"`{' '.join(cmd)}` exit {proc.returncode}"
        except FileNotFoundError:  # run here, or the --exec program itself, is missing
            no_ss, seen = True, None
        except (OSError, subprocess.TimeoutExpired) as exc:
            no_ss, seen, why = False, None, f"`{' '.join(cmd)}`: {exc}"
        if no_ss:
            time.sleep(SERVER_WAIT_S)
            return {"how": f"fixed wait of {SERVER_WAIT_S} s (no `ss` on {args.server})",
                    "waited_s": round(time.monotonic() - t0, 3)}
        missing = sorted(set(waiting) - seen) if seen is not None else sorted(waiting)
        waited = round(time.monotonic() - t0, 3)
        if not missing:
            return {"how": "every running server listened on its port (ss)", "waited_s": waited}
        if waited >= SERVER_READY_S:
            said = "not listening" if seen is not None else f"not seen listening ({why})"
            for link in links:
                if link["port"] in missing:
                    link.setdefault("problems", []).append(
                        f"server {said} on port {link['port']} after {SERVER_READY_S:.0f} s; client started anyway")
            return {"how": f"ports {missing} {said} after {SERVER_READY_S:.0f} s", "waited_s": waited}
        time.sleep(pause)
        pause = min(1.0, pause * 2)


def _parse(tool: str, out: str) -> tuple[dict | None, str | None]:
    try:
        return (lt.parse_iperf3(out) if tool == "iperf3" else lt.parse_perftest(out)), None
    except (lt.ParseError, ValueError) as exc:
        return None, str(exc)


def _link_gbps(result: dict | None) -> float | None:
    """The figure a link test reports: bandwidth the receiver saw (iperf3), the average of the largest
    message size (perftest bandwidth tests); None for latency tests."""
    if not result:
        return None
    if result.get("tool") == "iperf3":
        return result["received_bps"] / 1e9 if result.get("received_bps") is not None else None
    if result.get("kind") == "bandwidth" and result.get("rows"):
        return result["rows"][-1].get("bw_avg_gbps")
    return None


def parse_args(argv):
    p = OneLineParser(prog="python -m launch.linktest", description=__doc__.split("\n")[0])
    p.add_argument("--tool", required=True, help=f"one of {', '.join(TOOLS)}")
    p.add_argument("--server", required=True, help="the node that runs the servers (a host for --exec)")
    p.add_argument("--client", required=True, help="the node that runs the clients")
    p.add_argument("--server-addr", required=True, help="the server's address on the fabric under test")
    p.add_argument("--devices", help="RDMA devices, comma-separated (mlx5_0,mlx5_1,...); one pair per device")
    p.add_argument("--exec", help="how to run on a node, with {host}: 'ssh {host}', 'ip netns exec {host}'")
    p.add_argument("--port", type=int, help="first TCP port (perftest 18515, iperf3 5201); link i uses port+i")
    p.add_argument("--duration", type=int, default=5, help="seconds per test (default 5)")
    p.add_argument("--size", type=int, help="message size in bytes (perftest -s)")
    p.add_argument("--qps", type=int, default=1, help="queue pairs per link (perftest -q)")
    p.add_argument("--ib-port", type=int, default=1,
                   help="the HCA port (perftest -i, default 1); its rate is the default line rate")
    p.add_argument("--gid-index", type=int, help="RoCE GID index (perftest -x)")
    p.add_argument("--streams", type=int, default=1, help="iperf3 -P")
    p.add_argument("--bidir", action="store_true", help="iperf3 --bidir")
    p.add_argument("--udp-rate", help="iperf3 UDP at this rate (-u -b RATE: 100M, 1G; or tc units: 100mbit): loss "
                   "and jitter")
    p.add_argument("--line-rate", help="the link's line rate (100mbit, 400gbit...); default: the HCA's rate")
    p.add_argument("--timeout-s", type=int, default=60, help="grace beyond --duration before a side is killed")
    p.add_argument("--output", required=True, help="directory for linktest.json and the raw outputs")
    p.add_argument("--no-counters", dest="counters", action="store_false",
                   help="do not read the nodes' NIC/RDMA counters before and after the test")
    p.add_argument("--switch-metrics", help="a switch exporter's Prometheus URL, read before and after the test")
    args = p.parse_args(argv)
    if args.tool not in TOOLS:
        import difflib
        close = difflib.get_close_matches(str(args.tool).lower(), list(TOOLS), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise LinkTestError(f"--tool: got {args.tool!r}; {hint}allowed: {', '.join(TOOLS)}")
    if args.port is None:
        args.port = DEFAULT_PORT[PACKAGE[args.tool]]
    for name in ("duration", "qps", "streams", "timeout_s", "ib_port", "size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise LinkTestError(f"--{name.replace('_', '-')}: got {getattr(args, name)}; expected 1 or more")
    if not args.server_addr.strip() or any(c.isspace() for c in args.server_addr):
        raise LinkTestError(f"--server-addr: got {args.server_addr!r}; expected the server's address or host name on "
                            "the fabric under test (10.0.0.1, fe80::1%eth0, node1-ib), no spaces")
    parts = args.server_addr.split(".")
    if len(parts) == 4 and all(x.isdigit() and x.isascii() for x in parts) and any(int(x) > 255 for x in parts):
        raise LinkTestError(f"--server-addr: got {args.server_addr!r}; an IPv4 address has four numbers from 0 to 255 "
                            "(10.0.0.1); allowed: the server's address or host name on the fabric under test")
    if args.exec and args.server == args.client:  # without --exec both sides run here, whatever the names
        raise LinkTestError(f"--client: {args.client!r} is also --server, through --exec; allowed: another node "
                            "(the test measures the link between two nodes), or no --exec to run both sides here")
    if args.gid_index is not None and args.gid_index < 0:
        raise LinkTestError(f"--gid-index: got {args.gid_index}; expected 0 or more")
    if args.devices is not None and not all(d.strip() for d in args.devices.split(",")):
        raise LinkTestError(f"--devices: got {args.devices!r}; expected RDMA device names separated by commas "
                            "(mlx5_0,mlx5_1), or no --devices for the node's default")
    links = max(1, len([d for d in (args.devices or "").split(",") if d]))
    if not 1 <= args.port <= 65536 - links:
        raise LinkTestError(f"--port: got {args.port}; expected a TCP port from 1 to {65536 - links} (link i uses "
                            f"port+i, {links} link(s))")
    if args.udp_rate:
        args.udp_rate = _iperf3_rate(args.udp_rate)
    if args.line_rate:
        try:
            if rates.parse_rate(args.line_rate) is None:
                raise rates.RateError(f"--line-rate: got {args.line_rate!r}; expected a rate such as 100mbit")
        except rates.RateError as exc:
            raise LinkTestError(str(exc).replace("--rate", "--line-rate")) from None
    if args.switch_metrics and not re.match(r"^https?://", args.switch_metrics):
        raise LinkTestError(f"--switch-metrics: got {args.switch_metrics!r}; expected an http:// or https:// URL "
                            "of a Prometheus text endpoint")
    if args.exec and "{host}" not in args.exec:
        raise LinkTestError(f"--exec: got {args.exec!r}; it must name the node as {{host}}, e.g. 'ssh {{host}}'")
    if problem := output_dir_problem(args.output, "--output"):
        raise LinkTestError(problem)
    return args


_IPERF3_RATE = re.compile(r"^\d+(?:\.\d+)?[KMGTkmgt]?(?:/\d+)?$")  # iperf3 -b: bits/s, k/m/g/t, /burst


def _iperf3_rate(text: str) -> str:
    """--udp-rate as iperf3 -b takes it: iperf3's own notation (100M, 1G) as given, tc units (100mbit) in bits/s.
    iperf3 itself reads '10gibt' as 10G and '0mbit' as unlimited; both are refused here."""
    try:
        bps = rates.parse_rate(text)
    except rates.RateError:
        own = text.strip()
        if _IPERF3_RATE.match(own) and float(own.split("/")[0].rstrip("KMGTkmgt")) > 0:
            return own
        bps = None
    if bps is None:
        raise LinkTestError(f"--udp-rate: got {text!r}; expected a rate above 0 such as 100M or 1G (iperf3 -b, "
                            "bits/s) or 100mbit (tc units)")
    return str(int(bps))


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        check_tool(args.tool, [args.server, args.client], args.exec)
    except LinkTestError as exc:
        print_errors(exc)
        return 2
    result = run_links(args)
    where = os.path.join(args.output, "linktest.json")
    try:
        with open(where, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    except OSError as exc:  # a full disk: the probe before the tests fitted, the result did not
        if os.path.isfile(where):  # no half-written file for a reader to take as whole
            with contextlib.suppress(OSError):
                os.remove(where)
        return print_errors(f"--output: {where!r} could not be written ({exc.strerror or exc}); allowed: a "
                            "directory on a filesystem with free space that this user can write")
    for link in result["links"]:
        pct = link["percent_of_line"]
        rows = (link.get("result") or {}).get("rows") or []
        if link["gbps"] is not None:
            of = (f"2 x {link['line_rate_gbps']:g} Gb/s, both directions" if link.get("bidirectional")
                  else f"{link['line_rate_gbps']:g} Gb/s")
            figure = f"{link['gbps']:.3f} Gb/s" + (f" ({pct:.1f}% of {of})" if pct is not None else " (line rate unknown)")
        elif rows and rows[-1].get("t_typical_us") is not None:  # a latency test
            figure = f"{rows[-1]['bytes']} B: typical {rows[-1]['t_typical_us']} us, 99.9% {rows[-1].get('p99_9_us')} us"
        elif rows and rows[-1].get("t_avg_us") is not None:  # a latency test run for a duration (-D)
            figure = f"{rows[-1]['bytes']} B: average {rows[-1]['t_avg_us']} us (run for a duration: no percentiles)"
        else:
            why = ((link.get("result") or {}).get("reasons") or {}).get("received_bps")
            said = (link.get("result") or {}).get("error")  # the tool's own words (iperf3 -J: "unable to connect ...")
            figure = link.get("parse_error") or (f"no rate: {why}" if why else f"no result: {said}" if said
                                                 else "no result")
        print(f"link {link['index']} {link['device'] or args.server_addr}:{link['port']}: {figure}")
    if result["aggregate_gbps"] is not None and len(result["links"]) > 1:
        print(f"all links at once: {result['aggregate_gbps']:.3f} Gb/s")
    for role, r in (result["counters"] or {}).items():
        print(lc.verdict_line(r["node"], role, r))
    if result["switch"]:
        print(lc.switch_line(result["switch"]))
    # a link whose tool reported an error measured nothing: a failed test, not exit 0
    failed = [link for link in result["links"]
              if link.get("result") is None or (link["result"].get("error") and link["gbps"] is None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
