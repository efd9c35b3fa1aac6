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


@pytest.mark.parametrize("fn,value,text", [(time_text, 999.7, "1 ms"), (time_text, 999.4, "999 us"),
                                           (rate_text, 0.9996, "1 GB/s"), (rate_text, 0.0009996, "1 MB/s"),
                                           (time_text, 999_800.0, "1 s")])
def test_a_value_that_rounds_up_to_the_next_unit_is_written_in_it(fn, value, text):
    # review56: 999.7 us read "1e+03 us" (3 significant digits of 999.7 in exponent notation)
    assert fn(value) == text


def test_svg_figures_carry_no_timestamp(tmp_path):
    """Same inputs, same files: the SVG's <dc:date> made compare.html differ on every render (review56)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from telemetry.analysis.compare_figures import figure_style, save
    texts = []
    for i in range(2):
        out = tmp_path / str(i)
        out.mkdir()
        with figure_style():  # as compare draws: its hash salt keeps the SVG's ids the same
            fig, ax = plt.subplots()
            ax.plot([1, 2], [3, 4])
            save(plt, fig, str(out), "f.png")
        texts.append((out / "f.svg").read_text())
    assert "dc:date" not in texts[0] and texts[0] == texts[1]
