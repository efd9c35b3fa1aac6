"""tc rate units: bits (`mbit`) and bytes per second (`mbps`), and the warning for the bytes units."""
from __future__ import annotations

import pytest

from telemetry.analysis.rates import RateError, bytes_unit_warning, parse_rate


def test_tc_units_bits_and_bytes():
    # tc(8): "mbit" is megabits per second, "mbps" megabytes per second
    assert parse_rate("100mbit") == 1e8 and parse_rate("10mbps") == 8e7 and parse_rate("1.5gbit") == 1.5e9
    assert parse_rate("none") is None
    with pytest.raises(RateError, match="--rate: got '10 Mb/s'"):
        parse_rate("10 Mb/s")


def test_a_negative_rate_is_named_as_negative():
    # `--rate=-5gbit` (argparse reads `--rate -5gbit` as an option) got the generic "expected a tc rate" line
    with pytest.raises(RateError, match=r"--rate: got '-5gbit', a negative rate; expected a tc rate of at least 1bit"):
        parse_rate("-5gbit")
    with pytest.raises(RateError, match=r"--slow-rate: got '-1.5mbps', a negative rate; expected a tc rate of at least 8bit"):
        parse_rate("-1.5mbps", "--slow-rate", min_bps=8)
    with pytest.raises(RateError, match="expected a tc rate such as"):  # not a rate at all: the generic line
        parse_rate("-fast")


def test_a_rate_in_bytes_per_second_is_named_with_its_bit_rate():
    assert bytes_unit_warning("10mbps") == ("warning: --rate 10mbps: in tc units 'mbps' is bytes per second, so "
                                            "this is 80 Mbit/s; for 10 Mbit/s write 10mbit")
    assert "so this is 12 Gbit/s; for 1.5 Gbit/s write 1.5gbit" in bytes_unit_warning("1.5GBPS")
    assert bytes_unit_warning("10mbit") is None and bytes_unit_warning("none") is None
    assert bytes_unit_warning("10GBps", "--slow-rate").startswith("warning: --slow-rate 10GBps: in tc units 'gbps' "
                                                                  "is bytes per second, so this is 80 Gbit/s")


def test_lab_uses_the_shared_parser():
    from launch.lab import LabError, parse_rate as lab_parse_rate
    assert lab_parse_rate("125mbps") == 1e9
    with pytest.raises(LabError, match="expected a tc rate"):
        lab_parse_rate("fast")


def test_tcs_binary_prefixes_are_rates_too():
    """tc takes kibit/mibit/gibit/tibit and kibps ... tibps, 1024-based, in any case (iproute2 tc_util.c's
    suffix table; `tc qdisc add ... rate 1Mibit` shows 1048Kbit): the lab refused `--rate 1Mibit`."""
    from telemetry.analysis.rates import misreadable
    assert parse_rate("1Mibit") == 2 ** 20 and parse_rate("2gibit") == 2 * 2 ** 30 and parse_rate("1kibit") == 1024
    assert parse_rate("1KiBps") == 8192 and parse_rate("1.5MiBps") == 1.5 * 8 * 2 ** 20
    assert "so this is 8.192 kbit/s; for 1.024 kbit/s write 1kibit" in bytes_unit_warning("1kibps")
    assert bytes_unit_warning("1mibit") is None
    assert misreadable("1Mibit") and misreadable("1mbps") and not misreadable("10mbit") and not misreadable("none")


@pytest.mark.parametrize("rate", ["10bit", "8BIT", "1.5bit", "100kbit", "1Gbit"])
def test_plain_bit_rates_are_not_misreadable(rate):
    """`bit` has an 'i' in its first two letters but no binary prefix: '10bit' was shown as '10bit (10 bit/s)'."""
    from telemetry.analysis.rates import misreadable
    assert not misreadable(rate)


@pytest.mark.parametrize("rate", ["1kibit", "1KiBps", "2.5MIBIT", "1tibps", "10bps", "3GBPS"])
def test_binary_and_bytes_rates_are_misreadable(rate):
    from telemetry.analysis.rates import misreadable
    assert misreadable(rate)


@pytest.mark.parametrize("written, hint", [
    ("10G", "for 10 Gbit/s write 10gbit"), ("100GbE", "for 100 Gbit/s write 100gbit"),
    ("25GbE", "for 25 Gbit/s write 25gbit"), ("1Gb", "for 1 Gbit/s write 1gbit"), ("10Gb/s", "for 10 Gbit/s write 10gbit"),
    ("10 gbit", "for 10 Gbit/s write 10gbit"), ("10gbit/s", "for 10 Gbit/s write 10gbit"), ("100M", "for 100 Mbit/s write 100mbit"),
    ("1.5G", "for 1.5 Gbit/s write 1.5gbit"), ("1e9bit", "for 1 Gbit/s write 1gbit"), ("1e3mbit", "for 1 Gbit/s write 1gbit"),
    ("1e9", "a number without a unit is bits per second to tc: for 1 Gbit/s write 1gbit"),
    ("25GB/s", "for 25 GB/s (200 Gbit/s) write 25gbps (tc's bytes per second), for 25 Gbit/s 25gbit"),
    ("10Mibit/s", "for 10.49 Mbit/s write 10mibit"),
])
def test_rates_as_people_write_them_are_told_how_tc_writes_them(written, hint):
    """Round 8 of the lab: `--rate 10G`, `100GbE`, `1e9` were refused with the generic line alone (and the lab
    named them lowercased, `got '10g'`): now the line ends with what to write for the rate they most likely mean."""
    with pytest.raises(RateError) as err:
        parse_rate(written)
    assert str(err.value).startswith(f"--rate: got {written!r}; expected a tc rate such as 10gbit")
    assert str(err.value).endswith(f"; {hint}")


@pytest.mark.parametrize("text", ["fast", "8bytes", "10ibit", "inf", "0", "ten gbit"])
def test_no_hint_where_the_text_is_no_rate(text):
    from telemetry.analysis.rates import suggestion
    assert suggestion(text) is None


def test_the_lab_names_a_rate_as_written():
    from launch.lab import Lab, LabError
    with pytest.raises(LabError, match=r"--rate: got '10G'; .*; for 10 Gbit/s write 10gbit$"):
        Lab(2, "10G")
    with pytest.raises(LabError, match=r"--slow-rate: got '100M'; .*; for 100 Mbit/s write 100mbit$"):
        Lab(2, "1gbit", slow_node=1, slow_rate="100M")
