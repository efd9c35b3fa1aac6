"""telemetry.analysis.compare_figures' text and tick helpers (pure functions): units a reader reads."""
from __future__ import annotations

import pytest

from telemetry.analysis.compare_figures import _log_ticks, plain, rate_text, size_text, time_text


@pytest.mark.parametrize("n,text", [(4, "4 B"), (1024, "1 KB"), (1536, "1.5 KB"), (64 * 2 ** 20, "64 MB"),
                                    (16 * 2 ** 30, "16 GB"), (None, "n/a")])
def test_sizes_in_binary_units(n, text):
    assert size_text(n) == text


@pytest.mark.parametrize("us,text", [(12.3, "12.3 us"), (4500, "4.5 ms"), (2e6, "2 s"), (0.5, "500 ns"),
                                     (None, "n/a")])
def test_times_from_microseconds(us, text):
    assert time_text(us) == text


@pytest.mark.parametrize("gbps,text", [(24, "24 GB/s"), (0.0123, "12.3 MB/s"), (5e-10, "0.5 B/s"), (None, "n/a"),
                                       (0, "0.00 GB/s (under 5 MB/s as printed)")])
def test_rates_in_decimal_units(gbps, text):
    assert rate_text(gbps) == text


def test_user_text_keeps_dollar_signs_literal():
    assert plain("fabric $A") == r"fabric \$A" and plain(3) == "3"


def test_log_ticks_are_1_2_5_over_narrow_ranges_and_decades_over_wide_ones():
    assert _log_ticks(1, 10) == [1.0, 2.0, 5.0, 10.0]
    assert _log_ticks(1, 1e6) == [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
    assert _log_ticks(3, 3.5) == [3, 3.5]  # inside one step: its two ends
