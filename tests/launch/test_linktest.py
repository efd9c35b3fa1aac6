"""Raw link tests: bad input and missing tools (one error line, exit 2), and iperf3 for real across the
fabric lab's shaped link, reported as a percentage of the shaped rate."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from launch.lab import Lab
from launch.linktest import main

needs_lab = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None
                               or shutil.which("iperf3") is None,
                               reason="the fabric lab needs root, iproute2 and iperf3 (apt-get install iperf3)")


@pytest.mark.parametrize("argv,message", [
    (["--tool", "nc"], "--tool: got 'nc'; allowed: ib_write_bw"),
    (["--tool", "iprf3"], "--tool: got 'iprf3'; did you mean 'iperf3'? allowed: ib_write_bw"),
    (["--tool", "iperf3", "--line-rate", "fast"], "--line-rate: got 'fast'"),
    (["--tool", "iperf3", "--exec", "ssh"], "--exec: got 'ssh'; it must name the node as {host}"),
    (["--tool", "iperf3", "--duration", "0"], "--duration: got 0; expected 1 or more"),
    (["--tool", "iperf3", "--port", "0"], "--port: got 0; expected a TCP port from 1 to 65535"),
    (["--tool", "iperf3", "--port", "65535", "--devices", "a,b"], "--port: got 65535; expected a TCP port from 1 to 65534 "
     "(link i uses port+i, 2 link(s))"),
    (["--tool", "iperf3", "--udp-rate", "0mbit"], "--udp-rate: got '0mbit'; expected a rate above 0 such as 100M"),
    (["--tool", "iperf3", "--udp-rate", "10gibt"], "--udp-rate: got '10gibt'; expected a rate above 0"),
    (["--tool", "iperf3", "--line-rate", "0gbit"], "--line-rate: got '0gbit'; expected a rate of at least 1bit"),
    (["--tool", "ib_write_bw", "--size", "0"], "--size: got 0; expected 1 or more"),
    (["--tool", "ib_write_bw", "--gid-index", "-1"], "--gid-index: got -1; expected 0 or more"),
    (["--tool", "ib_write_bw", "--devices", ","], "--devices: got ','; expected RDMA device names separated by commas"),
    (["--tool", "ib_write_bw", "--devices", "mlx5_0,,mlx5_1"], "--devices: got 'mlx5_0,,mlx5_1'; expected RDMA"),
    (["--tool", "iperf3", "--timeout-s", "0"], "--timeout-s: got 0; expected 1 or more"),
    (["--tool", "iperf3", "--exec", "/no/such/launcher {host}"], "cannot run `/no/such/launcher` to reach a"),
])
def test_bad_input_is_one_error_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--server", "a", "--client", "b", "--server-addr", "10.0.0.1", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_udp_rate_in_either_notation_reaches_iperf3_as_bits():
    from launch.linktest import parse_args
    base = ["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1", "--output", "o"]
    assert parse_args([*base, "--udp-rate", "100mbit"]).udp_rate == "100000000"
    assert parse_args([*base, "--udp-rate", "100M"]).udp_rate == "100M"
    assert parse_args([*base, "--udp-rate", "100M/64"]).udp_rate == "100M/64"  # iperf3's RATE/BURST


def test_output_that_is_a_file(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("x")
    assert main(["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
                 "--output", str(out)]) == 2
    assert capsys.readouterr().err == f"error: --output: {str(out)!r} is a file, not a directory; allowed: a new or " \
                                      "existing directory\n"


def test_a_missing_tool_names_its_package(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no perftest here
    assert main(["--tool", "ib_read_bw", "--server", "a", "--client", "a", "--server-addr", "10.0.0.1",
                 "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "ib_read_bw is not installed" in err and "apt-get install perftest" in err and "dnf install perftest" in err


@pytest.mark.integration
@needs_lab
def test_iperf3_across_a_100mbit_lab_link(tmp_path, capsys):
    with Lab(2, "100mbit", lab_id="fhlink") as lab:
        # through `ip netns exec`, a missing tool is found missing on that node
        assert main(["--tool", "ib_write_bw", "--server", lab.namespaces[0], "--client", lab.namespaces[1],
                     "--server-addr", lab.address(0), "--exec", "ip netns exec {host}", "--output",
                     str(tmp_path / "none")]) == (2 if shutil.which("ib_write_bw") is None else 0)
        if shutil.which("ib_write_bw") is None:
            assert f"ib_write_bw is not installed on {lab.namespaces[0]}" in capsys.readouterr().err
        out = tmp_path / "one"
        rc = main(["--tool", "iperf3", "--server", lab.namespaces[0], "--client", lab.namespaces[1],
                   "--server-addr", lab.address(0), "--exec", "ip netns exec {host}", "--duration", "3",
                   "--line-rate", "100mbit", "--output", str(out)])
        assert rc == 0
        res = json.loads((out / "linktest.json").read_text())
        (link,) = res["links"]
        assert link["result"]["protocol"] == "TCP" and link["line_rate_gbps"] == 0.1
        # tbf holds the link to its rate: TCP payload is below it (headers, ACKs), never above
        assert 0 < link["percent_of_line"] <= 100.5
        assert link["percent_of_line"] == pytest.approx(100 * link["result"]["received_bps"] / 1e8)
        assert (out / "raw" / "link0_client.json").exists()
        # two pairs at once share the one link: together they still fit in it
        out2 = tmp_path / "two"
        assert main(["--tool", "iperf3", "--server", lab.namespaces[0], "--client", lab.namespaces[1],
                     "--server-addr", lab.address(0), "--exec", "ip netns exec {host}", "--duration", "3",
                     "--devices", "a,b", "--line-rate", "100mbit", "--output", str(out2)]) == 0
        two = json.loads((out2 / "linktest.json").read_text())
        assert [lk["port"] for lk in two["links"]] == [5201, 5202]
        assert 0 < sum(lk["percent_of_line"] for lk in two["links"]) <= 100.5
    print(f"\nmeasured: one TCP stream {link['percent_of_line']:.1f}% of 100 Mbit/s; two at once "
          f"{sum(lk['percent_of_line'] for lk in two['links']):.1f}%")


def test_perftest_on_every_nic_at_once_with_a_replayed_table(tmp_path, monkeypatch):
    """No RDMA device here: ib_write_bw is a script that logs its arguments and prints a published perftest
    table (tests/telemetry/evidence_fixtures). What is checked is the runner: one pair per device, each on
    its own port, all started, parsed, and set against the line rate."""
    table = os.path.join(os.path.dirname(__file__), "..", "telemetry", "evidence_fixtures",
                         "perftest_write_bw_gbits_issue273.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    stub = bin_dir / "ib_write_bw"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\ncat {table}\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "out"
    assert main(["--tool", "ib_write_bw", "--server", "n1", "--client", "n2", "--server-addr", "10.0.0.1",
                 "--devices", "mlx5_0,mlx5_1", "--gid-index", "3", "--duration", "1", "--line-rate", "400gbit",
                 "--no-counters", "--output", str(out)]) == 0
    res = json.loads((out / "linktest.json").read_text())
    calls = sorted(c for c in log.read_text().splitlines() if c != "--version")  # the check that it is installed
    assert len(calls) == 4  # a server and a client per device
    assert "-p 18515 -F -d mlx5_0 -i 1 -x 3 --report_gbits -D 1 10.0.0.1" in calls
    assert "-p 18516 -F -d mlx5_1 -i 1 -x 3 --report_gbits -D 1" in calls
    assert [lk["device"] for lk in res["links"]] == ["mlx5_0", "mlx5_1"]
    assert all(lk["gbps"] == 0.48 and lk["percent_of_line"] == 0.12 for lk in res["links"])
    assert res["aggregate_gbps"] == 0.96 and (out / "raw" / "link1_client.txt").exists()


def test_latency_test_replayed(tmp_path, monkeypatch, capsys):
    table = os.path.join(os.path.dirname(__file__), "..", "telemetry", "evidence_fixtures", "perftest_write_lat.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_send_lat").write_text(f"#!/bin/sh\ncat {table}\n")
    (bin_dir / "ib_send_lat").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "out"
    assert main(["--tool", "ib_send_lat", "--server", "n1", "--client", "n2", "--server-addr", "10.0.0.1",
                 "--devices", "mlx5_0", "--no-counters", "--output", str(out)]) == 0
    (link,) = json.loads((out / "linktest.json").read_text())["links"]
    assert link["gbps"] is None and link["result"]["kind"] == "latency" and link["result"]["rows"][0]["t_typical_us"] == 0.98
    assert "8388608 B: typical 2302.01 us, 99.9% 2335.48 us" in capsys.readouterr().out
    assert "--report_gbits" not in link["client_cmd"]


SNAP_BEFORE = """/sys/class/net/eth0/statistics/rx_packets 1000
/sys/class/net/eth0/statistics/rx_dropped 0
/sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data 100
/sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence 5
/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent 10
/sys/class/infiniband/mlx5_0/ports/1/hw_counters/packet_seq_err 0
ethtool:eth0 NIC statistics:
ethtool:eth0      rx_prio3_pause: 7
ethtool:eth0      rx_prio3_pause_duration: 70
ethtool:eth0      rx_bytes: 123
"""


def test_node_snapshots_give_the_runs_verdict_and_figures():
    from launch import link_counters as lc
    before = lc.parse_snapshot(SNAP_BEFORE)
    assert before["eth:eth0"] == {"rx_prio3_pause": 7, "rx_prio3_pause_duration": 70}  # only what classify knows
    after = lc.parse_snapshot(SNAP_BEFORE.replace("rx_prio3_pause: 7", "rx_prio3_pause: 19").replace(
        "np_cnp_sent 10", "np_cnp_sent 14").replace("packet_seq_err 0", "packet_seq_err 2").replace(
        "port_rcv_data 100", "port_rcv_data 350"))
    r = lc.node_result(before, after, None)
    assert r["verdict"] == "loss" and r["deltas"]["rdma:mlx5_0/1"]["port_rcv_bytes"] == 1000
    assert r["congestion"]["pfc"]["rx_pause"] == {"prio3": 12} and r["congestion"]["cnp_sent"] == 4
    line = lc.verdict_line("n2", "client", r)
    assert line.startswith("counters n2 (client): loss: drops, errors or retransmissions seen: "
                           "rdma:mlx5_0/1:packet_seq_err")
    assert "PFC pause frames received 12 / sent n/a, ECN-marked n/a, CNPs sent 4 / handled n/a" in line
    assert lc.verdict_line("n1", "server", lc.node_result(None, None, "ssh refused")) == \
        "counters n1 (server): not read: ssh refused"


@pytest.mark.integration
def test_link_test_reads_this_hosts_counters_and_a_real_switch_exporter(tmp_path, monkeypatch, capsys):
    """The replayed perftest run with counters read here (this machine's sysfs, through sh) and a
    Prometheus exporter on loopback (the switch_metrics tests' server) read before and after."""
    from ..telemetry.capture.test_switch_metrics import Exporter
    table = os.path.join(os.path.dirname(__file__), "..", "telemetry", "evidence_fixtures",
                         "perftest_write_bw_gbits_issue273.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "ib_write_bw"
    stub.write_text(f"#!/bin/sh\ncat {table}\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    exporter = Exporter()
    try:
        import launch.linktest as linktest
        real, calls = linktest.lc.snapshot, []

        def snapshot(prefix):  # the switch counted discards during the test: seen by the reads after it
            calls.append(prefix)
            if len(calls) == 3:
                exporter.values.update(discards="17")
            return real(prefix)
        monkeypatch.setattr(linktest.lc, "snapshot", snapshot)
        out = tmp_path / "out"
        assert main(["--tool", "ib_write_bw", "--server", "n1", "--client", "n2", "--server-addr", "10.0.0.1",
                     "--duration", "1", "--line-rate", "400gbit", "--switch-metrics", exporter.url,
                     "--output", str(out)]) == 0
    finally:
        exporter.close()
    lines = capsys.readouterr().out.splitlines()
    res = json.loads((out / "linktest.json").read_text())
    assert set(res["counters"]) == {"server", "client"}
    assert res["counters"]["client"]["verdict"] in ("clean", "loss")  # this VM's NICs, whatever they did
    assert any(line.startswith("counters n2 (client): ") for line in lines)
    assert res["switch"]["deltas"]["counters"]['ifInDiscards{ifIndex="1",ifName="Ethernet0"}'] == 7
    assert f"switch {exporter.url}: drops/discards 7, PFC/pause n/a, ECN/WRED n/a, errors n/a" in "\n".join(lines)
    assert main(["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
                 "--switch-metrics", "switch:9100", "--output", str(tmp_path / "x")]) == 2


SS_LINES = """LISTEN 0      128    0.0.0.0:2024 0.0.0.0:*
LISTEN 0      5            [::]:5201          [::]:*
LISTEN 0      4096   *:18515 *:*
LISTEN 0      128    10.0.0.1%eth0:18516 0.0.0.0:*
"""


def test_listening_ports_read_from_ss():
    from launch.linktest import listening_ports
    assert listening_ports(SS_LINES) == {2024, 5201, 18515, 18516}
    assert listening_ports("") == set()


SLOW_SERVER = """#!{python}
import socket, sys, time
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
table = open({table!r}).read()
if args[-1] != "127.0.0.1":  # the server: listens only after 1.5 s (a slow ssh start), serves one client
    time.sleep(1.5)
    s = socket.create_server(("127.0.0.1", port))
    s.settimeout(30)
    conn, _ = s.accept()
    conn.recv(1)
    print(table)
else:  # the client: refused if the server is not listening yet, as perftest's would be
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).sendall(b"x")
    except OSError as exc:
        sys.exit(f"Couldn't connect to 127.0.0.1:{{port}}: {{exc}}")
    print(table)
"""


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to see the servers listen")
def test_clients_start_once_every_server_listens(tmp_path, monkeypatch):
    """Servers that take 1.5 s to listen (the fixed one-second wait started the clients too early): the
    clients start once `ss` shows both ports listening, and both links measure."""
    import socket
    import sys

    table = os.path.join(os.path.dirname(__file__), "..", "telemetry", "evidence_fixtures",
                         "perftest_write_bw_gbits_issue273.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "ib_write_bw"
    stub.write_text(SLOW_SERVER.format(python=sys.executable, table=table))
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with socket.socket() as s:  # a free pair of ports, most likely
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1] if s.getsockname()[1] < 65000 else 40000
    out = tmp_path / "out"
    assert main(["--tool", "ib_write_bw", "--server", "n1", "--client", "n2", "--server-addr", "127.0.0.1",
                 "--devices", "mlx5_0,mlx5_1", "--port", str(port), "--duration", "1", "--line-rate", "400gbit",
                 "--no-counters", "--output", str(out)]) == 0
    res = json.loads((out / "linktest.json").read_text())
    assert res["servers_ready"]["how"] == "every running server listened on its port (ss)"
    assert res["servers_ready"]["waited_s"] >= 1.4
    assert [lk["gbps"] for lk in res["links"]] == [0.48, 0.48] and all(lk["client_rc"] == 0 for lk in res["links"])


class _Running:
    """A server process that is still running (never listens)."""

    def poll(self):
        return None


@pytest.mark.integration
def test_a_node_without_ss_gets_the_fixed_wait():
    import types

    from launch import linktest
    args = types.SimpleNamespace(exec="env PATH=/nonexistent", server="n1")  # env: 'ss': not found, exit 127
    links = [{"port": 18515}]
    ready = linktest.wait_for_servers(args, links, [_Running()])
    assert ready["how"] == "fixed wait of 1.0 s (no `ss` on n1)" and ready["waited_s"] >= 1.0
    assert "problems" not in links[0]


@pytest.mark.integration
def test_polls_that_fail_are_retried_until_the_deadline_then_named(monkeypatch):
    """ssh refusing while the servers' own sessions open (exit 255) is not a missing `ss`: polled again."""
    import types

    from launch import linktest
    monkeypatch.setattr(linktest, "SERVER_READY_S", 0.6)
    args = types.SimpleNamespace(exec="sh -c 'exit 255'", server="n1")
    links = [{"port": 18515}, {"port": 18516}]
    ready = linktest.wait_for_servers(args, links, [_Running(), types.SimpleNamespace(poll=lambda: 0)])
    assert ready["how"].startswith("ports [18515] not seen listening (`sh -c exit 255 ss -Htln` exit 255)")
    assert links[0]["problems"] == ["server not seen listening (`sh -c exit 255 ss -Htln` exit 255) on port 18515 "
                                    "after 1 s; client started anyway"]
    assert "problems" not in links[1]  # its server had exited: not waited for


def test_a_link_whose_tool_reported_an_error_fails(tmp_path, capsys, monkeypatch):
    """iperf3 -J that could not connect gives a JSON result with `error`: the run said "no result" and exited 0."""
    import launch.linktest as lt
    said = {"tool": "iperf3", "error": "unable to connect to server: Connection refused", "received_bps": None,
            "reasons": {}}
    link = {"index": 0, "device": None, "port": 5201, "result": said, "parse_error": None, "gbps": None,
            "percent_of_line": None}
    monkeypatch.setattr(lt, "check_tool", lambda *a: None)
    monkeypatch.setattr(lt, "run_links", lambda args: {"links": [link], "aggregate_gbps": None, "counters": {},
                                                        "switch": None})
    assert lt.main(["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.9",
                    "--output", str(tmp_path)]) == 1
    assert "link 0 10.0.0.9:5201: no result: unable to connect to server: Connection refused" in capsys.readouterr().out


@pytest.mark.parametrize("addr", ["10.0.0.1 10.0.0.2", "", "not an ip"])
def test_a_server_address_with_spaces_is_refused(addr, tmp_path, capsys):
    """'not an ip' reached iperf3 -c, which failed after the 65 s server wait; the run then exited 0."""
    assert main(["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", addr,
                 "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: --server-addr: got {addr!r}; expected the server's address or host "
                                       "name on the fabric under test (10.0.0.1, fe80::1%eth0, node1-ib), no spaces\n")


def test_one_node_on_both_sides_or_an_impossible_ipv4_is_one_line(tmp_path, capsys):
    """Each ran the test before (exit 1, a failed measurement, or a reading of the node against itself)."""
    base = ["--tool", "iperf3", "--exec", "true {host}", "--output", str(tmp_path / "o")]
    assert main([*base, "--server", "a", "--client", "a", "--server-addr", "10.0.0.1"]) == 2
    assert capsys.readouterr().err.startswith("error: --client: 'a' is also --server, through --exec; allowed: ")
    assert main([*base, "--server", "a", "--client", "b", "--server-addr", "10.0.0.300"]) == 2
    assert capsys.readouterr().err.startswith("error: --server-addr: got '10.0.0.300'; an IPv4 address has four "
                                              "numbers from 0 to 255")
    assert not (tmp_path / "o").exists()


def test_a_result_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    """A full disk after the tests ran (the probe before them fitted) was an OSError traceback."""
    from launch import linktest

    monkeypatch.setattr(linktest, "check_tool", lambda *args: None)
    monkeypatch.setattr(linktest, "run_links", lambda args: {"links": []})
    (tmp_path / "linktest.json").mkdir()  # what open() refuses as a full disk would
    assert main(["--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
                 "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "linktest.json' could not be written (Is a directory); allowed: a directory" in err
    assert (tmp_path / "linktest.json").is_dir()  # only a half-written regular file is removed
