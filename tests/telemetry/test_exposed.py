"""Exposed communication = communication time not covered by compute, on hand-made timelines."""
from __future__ import annotations

import pytest

from telemetry.exposed import analyse, collective_type


def ev(name, start, end, thread=1, device="cpu"):
    return {"name": name, "start": start, "end": end, "thread": thread, "device": device}


def test_cpu_timeline():
    events = [
        ev("aten::mm", 0.0, 4.0, thread=1),          # compute on the main thread
        ev("aten::add", 1.0, 2.0, thread=1),         # nested: counted once
        ev("gloo:all_reduce", 3.0, 6.0, thread=9),   # 1 s overlapped, 2 s exposed
        ev("gloo:broadcast", 7.0, 8.0, thread=9),    # fully exposed
        ev("aten::copy_", 5.5, 5.6, thread=9),       # on the comm thread: not compute
    ]
    out = analyse(events, (0.0, 10.0), on_gpu=False)
    assert out["compute_s"] == pytest.approx(4.0) and out["comm_s"] == pytest.approx(4.0)
    assert out["exposed_s"] == pytest.approx(3.0) and out["exposed_share"] == pytest.approx(0.3)
    assert out["by_op"]["all_reduce"]["exposed_s"] == pytest.approx(2.0)
    assert out["by_op"]["broadcast"]["exposed_share"] == pytest.approx(0.1)


def test_send_recv_on_the_main_thread_do_not_hide_its_compute():
    events = [ev("aten::mm", 0.0, 2.0, thread=1), ev("gloo:send", 2.0, 3.0, thread=1),
              ev("aten::mm", 3.0, 4.0, thread=1)]
    out = analyse(events, (0.0, 4.0), on_gpu=False)
    assert out["compute_s"] == pytest.approx(3.0) and out["exposed_s"] == pytest.approx(1.0)


def test_gpu_timeline_uses_kernels_only():
    events = [
        ev("nccl:all_reduce", 0.0, 0.1),  # CPU-side enqueue: ignored on GPU
        ev("ampere_sgemm", 0.0, 5.0, device="cuda"),
        ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4.0, 6.0, device="cuda"),
        ev("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 6.0, 7.0, device="cuda"),
    ]
    out = analyse(events, (0.0, 10.0), on_gpu=True)
    assert out["exposed_s"] == pytest.approx(2.0)
    assert out["by_op"]["all_reduce"]["exposed_s"] == pytest.approx(1.0)
    assert out["by_op"]["reduce_scatter"]["exposed_s"] == pytest.approx(1.0)


def test_collective_names():
    assert collective_type("gloo:all_gather") == "all_gather"
    assert collective_type("nccl:_reduce_scatter_base") == "reduce_scatter"
    assert collective_type("ncclDevKernel_SendRecv") == "send"
    assert collective_type("aten::mm") is None
