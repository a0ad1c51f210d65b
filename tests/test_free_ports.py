"""The suite's free ports: never the same one twice, whatever worker asks."""

from __future__ import annotations

import pytest

from tests.support import ports


def test_a_port_is_handed_out_once_and_only_from_the_worker_s_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    monkeypatch.setattr(ports, "_handed_out", set())
    runs = [ports.free_port_run(3) for _ in range(50)]
    taken = ports.free_ports(200) + [run + i for run in runs for i in range(3)]
    assert len(set(taken)) == len(taken)
    share = range(
        ports.LOWEST + (ports.HIGHEST - ports.LOWEST) // 3, ports.LOWEST + 2 * (ports.HIGHEST - ports.LOWEST) // 3
    )
    assert all(port in share for port in taken)
