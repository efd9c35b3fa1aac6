"""The environment captured into run.json: fabric settings kept, secrets never written."""
from __future__ import annotations

import pytest

from telemetry.capture.environment import REDACTED, redacted_env

from ...conftest import FAST, run_cli


def test_only_fabric_settings_are_recorded_and_secrets_are_redacted():
    env = {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "veth0",
           "HOME": "/root", "HF_TOKEN": "hf_abcdefghijklmnop", "NCCL_API_KEY": "x",
           "UCX_NET_DEVICES": "mlx5_0:1", "NCCL_PROXY_URL": "http://user:pw@proxy:3128",
           "NCCL_ODD": "Bearer abc.def"}
    out = redacted_env(env)
    assert out == {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "veth0",
                   "NCCL_API_KEY": REDACTED, "UCX_NET_DEVICES": "mlx5_0:1", "NCCL_PROXY_URL": REDACTED,
                   "NCCL_ODD": REDACTED}


@pytest.mark.integration
def test_planted_secret_never_reaches_the_run_directory(tmp_path):
    secret = "hf_PLANTEDsecretVALUE1234567890"
    res = run_cli(tmp_path / "run", *FAST, "max_steps=2",
                  env={"HF_TOKEN": secret, "NCCL_IB_PASSWORD": secret, "GLOO_DEBUG_TOKEN": secret,
                       "NCCL_SOCKET_IFNAME": "lo", "AWS_SECRET_ACCESS_KEY": secret})
    assert res.returncode == 0, res.stderr[-2000:]
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(files) > 3
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    env = res.run_json()["environment"]
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["NCCL_IB_PASSWORD"] == REDACTED


def test_the_harness_version_comes_from_the_checkout_where_it_is_not_installed(monkeypatch):
    """bench/gpu/run.sh imports the project from its checkout where the image's site-packages is read-only: run.json's
    software.fabric_harness was null with no reason there; it reads pyproject.toml's version instead."""
    from importlib import metadata

    from telemetry.capture import environment

    want = metadata.version("fabric-harness")  # the test command installs the checkout (pip install -e)
    monkeypatch.setattr(environment, "_version", lambda dist: None)
    assert environment._harness_version() == want
