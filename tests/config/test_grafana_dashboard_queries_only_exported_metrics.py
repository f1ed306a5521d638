"""docker/grafana/dashboards/unicron.json loads, every panel queries the provisioned Prometheus data
source, and every metric its PromQL names is one the control plane's /metrics or a node agent's
endpoint exports (the names are taken from parsing both expositions); the figures operators watch
each have a panel; every expression is valid PromQL (promtool, where installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.metrics import AgentMetrics
from controlplane.apps.metrics.exposition import render_exposition

DOCKER = Path(__file__).resolve().parents[2] / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "unicron.json"
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
WATCHED = {
    "unicron_cluster_waf_flops",
    "unicron_cluster_optimal_waf_flops",
    "unicron_cluster_goodput_ratio",
    "unicron_tasks",
    "unicron_nodes",
    "unicron_devices",
    "unicron_failure_events_total",
    "unicron_failure_detection_latency_seconds_bucket",
    "unicron_transition_duration_seconds_bucket",
    "unicron_lost_work_seconds_total",
    "unicron_agent_links_open",
    "unicron_agent_commands",
    "unicron_agent_command_oldest_pending_age_seconds",
    "unicron_celery_task_queue_delay_seconds_bucket",
    "unicron_task_achieved_flops",
    "unicron_task_tokens_per_second",
    "unicron_task_iteration_seconds",
    "unicron_agent_warm_spares_ready",
    "unicron_agent_snapshot_bytes",
    "unicron_agent_hook_report_delay_seconds_bucket",
    "unicron_agent_workers_running",
    "unicron_agent_heartbeat_send_lag_seconds_bucket",
}


def _series_names(exposition: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in _panels(dashboard) for t in p["targets"]]


def test_every_panel_queries_metrics_that_are_exported(db: None) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = _series_names(render_exposition().decode())
    exported |= _series_names(generate_latest(AgentMetrics("node-a").registry).decode())
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]

    panels = _panels(dashboard)
    assert len(panels) >= len(WATCHED) // 2
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\bunicron_[a-zA-Z0-9_]+", target["expr"]))
            assert names, (panel["title"], target["expr"])
            assert names <= exported, (panel["title"], sorted(names - exported))
            used |= names
    assert sorted(WATCHED - used) == []
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_every_panel_expression_is_valid_promql(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:expr_{i}", "expr": expr.replace("$__rate_interval", "1m")}
                    for i, expr in enumerate(_exprs(dashboard))
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
