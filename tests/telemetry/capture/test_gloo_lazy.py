"""gloo's lazy connections probed by behaviour, and what telemetry does on a torch without them."""
from __future__ import annotations

import pytest

from telemetry.capture.gloo_lazy import gloo_connects_lazily


def test_the_installed_torch_connects_lazily_and_the_variable_is_restored(monkeypatch):
    import os

    monkeypatch.delenv("TORCH_GLOO_LAZY_INIT", raising=False)
    assert gloo_connects_lazily(0.5) and "TORCH_GLOO_LAZY_INIT" not in os.environ
    monkeypatch.setenv("TORCH_GLOO_LAZY_INIT", "0")
    assert gloo_connects_lazily(0.5) and os.environ["TORCH_GLOO_LAZY_INIT"] == "0"


def test_an_eager_gloo_gets_no_job_wide_side_group(tmp_path, monkeypatch):
    """torch < 2.8 connects a gloo group's every pair at creation: telemetry then makes no side group (the
    trainer refuses such a torch; an adapter's loop may run on one) and says why. Fakes: a 2-rank world
    reported by torch.distributed, and the probe's answer."""
    import torch.distributed as dist

    from telemetry.capture import gloo_lazy, session
    from telemetry.capture.session import Telemetry, TelemetrySettings

    monkeypatch.setattr(gloo_lazy, "_known", False)
    monkeypatch.setattr(session, "gloo_connects_lazily", gloo_lazy.gloo_connects_lazily)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "new_group", lambda *a, **k: pytest.fail("a job-wide gloo group was made"))
    tel = Telemetry(TelemetrySettings(link_probe_every=0, sysfs=str(tmp_path), ethtool=False, interfaces=[]))
    tel.start()
    info = tel.summary()["cross_rank"]
    tel.close()
    assert tel._group is None and info["every"] is None and "connects gloo groups eagerly" in info["reason"]
