"""The projection model against hand-computed values."""
from __future__ import annotations

import pytest

from telemetry.projection import measured_profile, project
from telemetry.runs import load_run

from .recorded import write_run


def profile(**kw):
    base = {"step_time_s": 0.2, "comm_time_s": 0.01, "exposed_s": 0.01, "world_size": 2, "link_bps": None,
            "burst_bytes": 0, "label": "x",
            "ops": {"all_reduce": {"bytes": 1_000_000, "time_s": 0.01, "calls": 1}}}
    return {**base, **kw}


def test_bytes_over_rate_plus_compute():
    # 1 MB all-reduce on 2 ranks puts 1 MB x 2(n-1)/n = 1 MB on the link; 8 Mbit/s = 1 MB/s at efficiency 1
    p = project(profile(), 8e6, efficiency=1.0)
    assert p["by_op"]["all_reduce"]["predicted_s"] == pytest.approx(0.01 + 1.0)  # fixed cost + wire
    assert p["step_time_s"] == pytest.approx(0.19 + 1.01)


def test_token_bucket_credit_and_latency():
    # the link idles 0.19 s: a 0.5 MB bucket refills to 190 kB at 1 MB/s, so 810 kB wait for the rate
    p = project(profile(), 8e6, efficiency=1.0, burst_bytes=500_000, latency_s=0.002)
    assert p["step_time_s"] == pytest.approx(0.19 + 0.01 + 0.81 + 0.002)


def test_overlapped_communication_stays_hidden_up_to_what_was_hidden():
    # 8 ms of the 10 ms were overlapped with compute: only what exceeds it is exposed at the new rate
    p = project(profile(exposed_s=0.002), 8e6, efficiency=1.0)
    assert p["hidden_s"] == pytest.approx(0.008)
    assert p["step_time_s"] == pytest.approx((0.2 - 0.002) + (1.01 - 0.008))


def test_from_a_shaped_run_to_a_faster_link():
    measured = profile(link_bps=8e6, comm_time_s=1.01, exposed_s=1.01, step_time_s=1.2,
                       ops={"all_reduce": {"bytes": 1_000_000, "time_s": 1.01, "calls": 1}})
    p = project(measured, 80e6, efficiency=1.0)
    assert p["by_op"]["all_reduce"]["fixed_s"] == pytest.approx(0.01)
    assert p["step_time_s"] == pytest.approx(0.19 + 0.01 + 0.1)


def test_profile_from_a_recorded_run(tmp_path):
    prof = measured_profile(load_run(str(write_run(tmp_path / "r", rate_bps=1e8))))
    assert prof["step_time_s"] == 1.0 and prof["ops"]["all_reduce"] == {"bytes": 1_000_000, "time_s": 0.25,
                                                                       "calls": 1}
    assert prof["exposed_s"] == pytest.approx(0.2) and prof["link_bps"] == 1e8


def test_a_partial_measurement_makes_a_partial_projection(tmp_path):
    untimed = {"all_to_all": {"count": 1, "bytes": 2048, "time_s": None, "untimed": 1, "untimed_bytes": 2048,
                              "busbw_gbps": None, "untimed_reason": "functional collectives are timed on NCCL only"}}
    prof = measured_profile(load_run(str(write_run(tmp_path / "p", extra_comm=untimed))))
    assert prof["partial"] is True and prof["untimed_bytes"] == 2048
    p = project(prof, 8e6)
    assert p["partial"] is True and p["untimed_bytes"] == 2048
    whole = measured_profile(load_run(str(write_run(tmp_path / "w"))))
    assert whole["partial"] is False and project(whole, 8e6)["partial"] is False
