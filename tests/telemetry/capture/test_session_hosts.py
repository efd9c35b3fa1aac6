"""The session's host count from torchrun's LOCAL_WORLD_SIZE: unknown (None) where it does not divide the world
(hosts holding different rank counts), never a wrong count."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from telemetry.capture import session


@pytest.mark.parametrize("world,local,hosts", [(8, "4", 2), (4, "4", 1), (6, "4", None), (4, "3", None),
                                               (4, "", None), (2, None, None)])
def test_host_count_is_unknown_where_hosts_hold_different_rank_counts(monkeypatch, world, local, hosts):
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert session.Telemetry._host_count(SimpleNamespace(world=world)) == hosts
