"""The lab's tbf bucket and queue: --burst and --limit (round 8 of the lab configurations), and the bucket tc can
hold at a rate. tc keeps a tbf bucket as the time it takes to fill at the rate, in 32 bits of 64 ns ticks (274.9
s); a longer one wraps silently (iproute2 6.1 on the development VM: `rate 476bit burst 16384` showed `burst 166b`,
`rate 1kbit burst 65549` `burst 31189b`): less than a frame, so no frame of the MTU ever passed and the lab ran
until its timeout. Those are refused now, and below 480 bit/s the default 16 KiB is cut to what tc holds."""
from __future__ import annotations

import pytest

from launch import lab_options
from launch.lab import Lab, LabError, burst_bytes, main


@pytest.mark.parametrize("text, size", [("65536", 65536), ("64k", 65536), ("64KB", 65536), ("2m", 2 ** 21),
                                        ("2MiB", 2 ** 21), ("512kbit", 65536), ("1514b", 1514), ("1.5k", 1536)])
def test_sizes_as_tc_writes_them(text, size):
    assert lab_options.parse_size(text, "--burst", 1500) == size


@pytest.mark.parametrize("text, message", [
    ("big", "--burst: got 'big'; expected a size in bytes as tc writes it: 65536, 64k (KiB), 2m (MiB), 512kbit"),
    ("1k", "--burst: got '1k' (1024 bytes); tbf drops a frame larger than its bucket: expected at least one frame, "
           "1514 bytes at MTU 1500"),
    ("5g", "--burst: got '5g' (5.36871e+09 bytes); expected at most 4294967295 bytes (4 GiB: tc keeps it in 32 bits)"),
])
def test_sizes_the_lab_refuses(text, message):
    with pytest.raises(lab_options.SizeError) as err:
        lab_options.parse_size(text, "--burst", 1500)
    assert str(err.value) == message


def test_burst_and_limit_size_every_shaped_link():
    lab = Lab(3, "1gbit", burst="64k", limit="1m", slow_node=2, slow_rate="100mbit")
    info = lab.describe()
    assert (info["burst_bytes"], info["queue_bytes"], info["slow_burst_bytes"]) == (65536, 2 ** 20, 65536)
    assert info["burst_given"] and info["limit_given"]
    # without them the lab's own rule: 2 ms at the rate (250 kB at 1 Gbit/s), a queue of 20 ms at least 256 KiB
    plain = Lab(3, "1gbit").describe()
    assert (plain["burst_bytes"], plain["queue_bytes"], plain["burst_given"]) == (250000, 2500000, False)


def test_a_queue_shorter_than_a_frame_and_a_burst_without_a_shaped_link_are_refused():
    with pytest.raises(LabError, match=r"^--limit: got '1000' \(1000 bytes\); a queue shorter than one frame drops "
                                       r"every frame that waits: expected at least one frame, 9014 bytes at MTU 9000"):
        Lab(2, "1gbit", mtu=9000, limit="1000")
    with pytest.raises(LabError, match=r"^--burst: got '64k', but --rate none shapes no link"):
        Lab(2, "none", burst="64k")
    Lab(2, "none", burst="64k", slow_node=1, slow_rate="10mbit")  # the slow egress is shaped: it has a bucket


def test_a_bucket_tc_would_wrap_is_refused():
    # tc 6.1: `rate 1mbit burst 100000000` showed `burst 31280523b`
    with pytest.raises(LabError, match=r"^--burst: got '100mb' \(104857600 bytes\), which takes 838.9 s to fill at 1 "
                                       r"Mbit/s; tc holds a tbf bucket of at most 274 s .*allowed: at most 34250000 "
                                       r"bytes at this rate$"):
        Lab(2, "1mbit", burst="100mb")
    # one frame of MTU 65535 at 1 kbit/s takes 524 s: every frame would have been dropped
    with pytest.raises(LabError, match=r"^--rate: got '1kbit'; one frame at MTU 65535 \(65549 bytes\) takes 524.4 s "
                                       r".*allowed: at least 1920bit at MTU 65535"):
        Lab(2, "1kbit", mtu=65535)
    # tc shapes whole bytes per second: 47bit is 5 bytes/s (40 bit/s), and 1514 bytes take 302.8 s
    with pytest.raises(LabError, match=r"^--slow-rate: got '47bit'; .* takes 302.8 s at 47 bit/s \(40 bit/s in tc's "
                                       r"whole bytes per second\)"):
        Lab(2, "1gbit", slow_node=1, slow_rate="47bit")


def test_below_480_bit_per_second_the_default_burst_is_what_tc_holds():
    # 16 KiB at 100bit (12 bytes/s) would take 1365 s: the burst is 274 s of 12 bytes/s, still above one frame
    assert burst_bytes(100, 1500) == 3288 and burst_bytes(48, 1500) == 1644
    assert burst_bytes(480, 1500) == 16384 and burst_bytes(478, 1500) == 16166 and burst_bytes(1e9, 1500) == 250000
    assert Lab(2, "48bit").describe()["burst_bytes"] == 1644


def test_the_command_line_takes_burst_and_limit(capsys):
    assert main(["--nodes", "2", "--rate", "1gbit", "--burst", "1k", "--limit", "abc", "--",
                 "recipes/tiny_llama_lora.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --burst: got '1k' (1024 bytes); tbf drops a frame larger than its bucket: expected at least "
                   "one frame, 1514 bytes at MTU 1500"], err
