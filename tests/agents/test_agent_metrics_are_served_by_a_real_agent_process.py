"""A real agent process with ``UNICRON_AGENT_METRICS_PORT`` set serves its own Prometheus metrics on
``UNICRON_AGENT_METRICS_ADDR``: the link is up, the workers of a started task count as running and are
listed by task, epoch, rank and device (and neither, once stopped), every hook event's report delay
and every heartbeat's send lag are observed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agents.settings import ENV_METRICS_ADDR, ENV_METRICS_PORT, ENV_SPARES
from agents.testing import TaskDriver, TestCoordinator, spares, spawn_agent
from tests.agents.helpers import free_port, launch


async def _scrape(url: str) -> dict[str, Sample]:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url)
    response.raise_for_status()
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        s.name + str(sorted((k, v) for k, v in s.labels.items() if k != "node")): s
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def _until(url: str, check: Callable[[dict[str, Sample]], bool], timeout: float) -> dict[str, Sample]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = await _scrape(url)
            if check(samples):
                return samples
        except httpx.TransportError:
            pass  # not listening yet
        assert time.monotonic() < deadline, f"{url}: condition not met within {timeout} s"
        await asyncio.sleep(0.25)


def _v(samples: dict[str, Sample], name: str) -> float:
    return samples[name + "[]"].value


async def test_a_real_agent_serves_its_metrics(coordinator: TestCoordinator, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = await spawn_agent(
        coordinator.url,
        "m1",
        2,
        tmp_path,
        worker="sim",
        extra_env={ENV_METRICS_PORT: str(port), ENV_METRICS_ADDR: "127.0.0.1"},
    )
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "m1"), 60)
        idle = await _until(url, lambda s: _v(s, "unicron_agent_link_connected") == 1.0, 60)
        assert all(s.labels["node"] == "m1" for s in idle.values())
        assert _v(idle, "unicron_agent_workers_running") == 0.0
        assert _v(idle, "unicron_agent_warm_spares_ready") == 0.0  # simulated workers keep no spares
        assert _v(idle, "unicron_agent_snapshot_bytes") == 0.0

        d = TaskDriver(coordinator)
        await d.start("m1", 1, launch(dp=2, iterations=10**6))
        await d.wait_iteration(3, timeout=60)
        busy = await _until(
            url,
            lambda s: _v(s, "unicron_agent_workers_running") == 2.0
            and _v(s, "unicron_agent_hook_report_delay_seconds_count") > 0
            and _v(s, "unicron_agent_heartbeat_send_lag_seconds_count") >= 2,
            30,
        )
        delays = _v(busy, "unicron_agent_hook_report_delay_seconds_count")
        within_1s = busy["unicron_agent_hook_report_delay_seconds_bucket[('le', '1.0')]"].value
        assert within_1s >= 0.9 * delays  # in-process simulated ranks report at once
        listed = sorted(
            (s.labels["task"], s.labels["epoch"], s.labels["rank"], s.labels["device"])
            for s in busy.values()
            if s.name == "unicron_agent_worker_info" and s.value == 1.0
        )
        assert listed == [(d.task_id, "1", "0", "0"), (d.task_id, "1", "1", "1")]
        rtt = _v(busy, "unicron_agent_heartbeat_round_trip_seconds_count")
        assert rtt == _v(busy, "unicron_agent_heartbeat_send_lag_seconds_count")

        await d.stop("m1", 1, grace_s=1.0)
        idle = await _until(url, lambda s: _v(s, "unicron_agent_workers_running") == 0.0, 30)
        assert not [s for s in idle.values() if s.name == "unicron_agent_worker_info"]
    finally:
        proc.kill()
        await proc.wait()


@pytest.mark.slow
async def test_a_real_agent_counts_its_warm_spare_once_ready(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = await spawn_agent(
        coordinator.url, "m3", 1, tmp_path, extra_env={ENV_METRICS_PORT: str(port), ENV_SPARES: "1"}
    )  # real Megatron-Core workers: the spare imports torch before it is ready
    try:
        starting = await _until(url, lambda s: _v(s, "unicron_agent_warm_spares") == 1.0, 60)
        ready = await _until(url, lambda s: _v(s, "unicron_agent_warm_spares_ready") == 1.0, 180)
        assert _v(ready, "unicron_agent_warm_spares") == 1.0
        assert _v(starting, "unicron_agent_workers_running") == 0.0  # a spare is not a worker
        listed = [s for s in spares(tmp_path) if s["ready"]]
        assert len(listed) == 1
    finally:
        proc.kill()
        await proc.wait()
