"""docker/: Prometheus scrapes the control plane's /metrics with the bearer token file the web
service reads as UNICRON_METRICS_TOKEN_FILE, and the agent at its UNICRON_AGENT_METRICS_PORT; compose
runs prometheus and grafana beside the existing services, Grafana provisioned with the data source
and the dashboard folder; the scrape config is valid (promtool, where installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_compose_wires_prometheus_and_grafana_to_the_control_plane_and_agents() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    prometheus = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "web", "worker", "beat", "agent", "prometheus", "grafana"} <= set(
        services
    )

    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    cp = jobs["unicron-controlplane"]
    assert cp["metrics_path"] == "/metrics"
    assert cp["authorization"]["type"] == "Bearer"
    token_file = cp["authorization"]["credentials_file"]
    assert services["web"]["environment"]["UNICRON_METRICS_TOKEN_FILE"] == token_file
    secret = Path(token_file).name
    assert secret in services["web"]["secrets"]
    assert secret in services["prometheus"]["secrets"]
    assert secret in compose["secrets"]
    (target,) = cp["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in services["web"]["environment"]["ALLOWED_HOSTS"].split(":-")[-1].rstrip("}").split(",")
    assert f"{port}:{port}" in services["web"]["ports"]

    agent_env = services["agent"]["environment"]
    (agent_target,) = jobs["unicron-agents"]["static_configs"][0]["targets"]
    assert agent_target == f"agent:{agent_env['UNICRON_AGENT_METRICS_PORT']}"
    assert agent_env["UNICRON_AGENT_METRICS_ADDR"] == "0.0.0.0"

    mounts = services["grafana"]["volumes"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/unicron.yaml").read_text())
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert f"./grafana/dashboards:{dashboards_dir}:ro" in mounts
    source = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_the_scrape_config_is_valid(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    text = (DOCKER / "prometheus" / "prometheus.yml").read_text()
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace("/run/secrets/unicron_metrics_token", str(token)))
    done = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
