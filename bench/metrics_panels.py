"""The Grafana dashboard's main panels, drawn from a throwaway Prometheus that scraped a live control plane.

    .venv/bin/python bench/metrics_panels.py --url http://127.0.0.1:8000 --token-file TOKEN \\
        [--agent 127.0.0.1:9101 ...] [--minutes 10] [--out docs/screenshots/metrics-panels.png]

Starts ``prometheus`` (``--prometheus``, default the one on ``PATH``) with a temporary configuration and
storage that scrape ``URL/metrics`` with the bearer token (``--token``, ``--token-file`` or
``UNICRON_METRICS_TOKEN``) and the given agents every ``--scrape-interval`` seconds, waits
``--minutes``, then asks its HTTP API (``/api/v1/query_range``) for the expressions of the panels of
``docker/grafana/dashboards/unicron.json`` named in :data:`MAIN_PANELS` (Grafana's ``$__rate_interval``
becomes four scrape intervals) and draws them with matplotlib into ``--out``. Prometheus and its
storage are removed afterwards. Point it at a demo (``make demo`` with ``UNICRON_METRICS_TOKEN`` set),
not at anything heavy: it scrapes every few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "docker" / "grafana" / "dashboards" / "unicron.json"
MAIN_PANELS = (
    "Cluster WAF vs healthy-cluster optimum",
    "Goodput (trailing minute)",
    "Tasks by state",
    "Nodes by state",
    "Failure events by kind and severity (per 5 min)",
    "Detection latency p50 / p95 by detector",
    "Transition duration p50 / p95 by kind",
    "Agent command queue",
    "Celery publish-to-start delay p95 by task",
    "Achieved FLOP/s per task",
    "Iteration time per task",
    "Hook report delay p95 per node",
)


@dataclass(frozen=True)
class Series:
    legend: str
    times: list[datetime]
    values: list[float]


@dataclass(frozen=True)
class PanelData:
    title: str
    unit: str
    series: list[Series]


def panel_queries(
    dashboard: dict[str, Any], titles: tuple[str, ...]
) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """``(title, unit, [(expr, legendFormat)])`` of the named panels, in the order named; an unknown
    title is an error naming it."""
    panels = {p["title"]: p for p in dashboard["panels"] if p.get("type") != "row"}
    missing = [t for t in titles if t not in panels]
    if missing:
        raise ValueError(f"panels not in the dashboard: {missing}")
    return [
        (
            t,
            panels[t].get("fieldConfig", {}).get("defaults", {}).get("unit", "short"),
            [(target["expr"], target.get("legendFormat", "")) for target in panels[t]["targets"]],
        )
        for t in titles
    ]


def legend_of(metric: dict[str, str], legend_format: str) -> str:
    """Grafana's ``{{label}}`` substitution; without a format, the labels as PromQL writes them."""
    if legend_format:
        out = legend_format
        for key, value in metric.items():
            out = out.replace("{{" + key + "}}", value)
        return out
    labels = {k: v for k, v in metric.items() if k != "__name__"}
    return metric.get("__name__", "") + (
        "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    )


def series_from_response(response: dict[str, Any], legend_format: str) -> list[Series]:
    """The series of a ``/api/v1/query_range`` answer (``resultType: matrix``); NaN points dropped."""
    if response.get("status") != "success":
        raise ValueError(f"Prometheus answered {response.get('status')}: {response.get('error', '')}")
    data = response["data"]
    if data["resultType"] != "matrix":
        raise ValueError(f"expected a matrix, got {data['resultType']}")
    out = []
    for result in data["result"]:
        points = [(float(t), float(v)) for t, v in result["values"] if v not in ("NaN", "+Inf", "-Inf")]
        out.append(
            Series(
                legend_of(result["metric"], legend_format),
                [datetime.fromtimestamp(t, UTC) for t, _ in points],
                [v for _, v in points],
            )
        )
    return out


_SCALE = {"flops": (1e12, "TFLOP/s"), "bytes": (2**20, "MiB"), "percentunit": (0.01, "%"), "s": (1.0, "s")}


def draw_panels(
    panels: list[PanelData],
    out: Path,
    title: str = "Unicron metrics",
    span: tuple[datetime, datetime] | None = None,
) -> Path:
    """A grid of line charts, one per panel (all over ``span`` when given), written as PNG to ``out``;
    series without a point are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    cols = 3
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        scale, label = _SCALE.get(panel.unit, (1.0, ""))
        drawn = [s for s in panel.series if s.values]
        for s in drawn:
            ax.plot(s.times, [v / scale for v in s.values], label=s.legend, linewidth=1.2)
        ax.set_title(panel.title, fontsize=10)
        if label:
            ax.set_ylabel(label, fontsize=8)
        short = span is not None and (span[1] - span[0]).total_seconds() < 600
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S" if short else "%H:%M"))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if span is not None:
            ax.set_xlim(*span)
        if not drawn:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
        elif len(drawn) <= 8:
            ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# --- the throwaway Prometheus ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def prometheus_config(url: str, token_file: Path, agents: list[str], interval_s: float) -> str:
    parts = urlsplit(url)
    job = {
        "job_name": "unicron-controlplane",
        "scheme": parts.scheme or "http",
        "metrics_path": (parts.path.rstrip("/") or "") + "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "static_configs": [{"targets": [parts.netloc]}],
    }
    jobs = [job]
    if agents:
        jobs.append({"job_name": "unicron-agents", "static_configs": [{"targets": agents}]})
    config = {"global": {"scrape_interval": f"{interval_s:g}s"}, "scrape_configs": jobs}
    return json.dumps(config, indent=2)  # JSON is YAML


def run(args: argparse.Namespace) -> Path:
    token = args.token or (args.token_file.read_text().strip() if args.token_file else None)
    token = token or os.environ.get("UNICRON_METRICS_TOKEN")
    if not token:
        raise SystemExit("no token: pass --token, --token-file or set UNICRON_METRICS_TOKEN")
    binary = args.prometheus or shutil.which("prometheus")
    if not binary:
        raise SystemExit("prometheus is not installed (pass --prometheus PATH)")
    queries = panel_queries(json.loads(DASHBOARD.read_text()), MAIN_PANELS)
    work = Path(tempfile.mkdtemp(prefix="unicron-prom-"))
    token_file = work / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    (work / "prometheus.yml").write_text(
        prometheus_config(args.url, token_file, args.agent, args.scrape_interval)
    )
    port = _free_port()
    api = f"http://127.0.0.1:{port}"
    with open(work / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=log,
        )
    try:
        with httpx.Client(timeout=30) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if http.get(f"{api}/-/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"prometheus did not start: see {work / 'prometheus.log'}")
                time.sleep(0.5)
            start = time.time()
            print(f"prometheus on {api} scraping {args.url} for {args.minutes:g} min", flush=True)
            while (left := start + args.minutes * 60 - time.time()) > 0:
                time.sleep(min(left, 30))
                targets = http.get(f"{api}/api/v1/targets").json()["data"]["activeTargets"]
                health = ", ".join(f"{t['scrapeUrl']}: {t['health']} {t['lastError']}" for t in targets)
                print(f"  {time.time() - start:5.0f} s  {health}", flush=True)
            end = time.time()
            step = max(args.scrape_interval, (end - start) / 400)
            rate = f"{4 * args.scrape_interval:g}s"
            panels = []
            for title, unit, targets in queries:
                series: list[Series] = []
                for expr, legend in targets:
                    answer = http.get(
                        f"{api}/api/v1/query_range",
                        params={
                            "query": expr.replace("$__rate_interval", rate),
                            "start": start,
                            "end": end,
                            "step": step,
                        },
                    ).json()
                    series += series_from_response(answer, legend)
                panels.append(PanelData(title, unit, series))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    stamp = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:%M UTC")
    span = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    return draw_panels(
        panels, args.out, f"Unicron metrics: {args.url}, {args.minutes:g} min from {stamp}", span
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--url", required=True, help="control-plane base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--token", help="metrics bearer token (default: --token-file or $UNICRON_METRICS_TOKEN)")
    p.add_argument("--token-file", type=Path)
    p.add_argument("--agent", action="append", default=[], help="host:port of an agent's metrics (repeat)")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--scrape-interval", type=float, default=5.0, help="seconds")
    p.add_argument("--prometheus", help="prometheus binary (default: on PATH)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots" / "metrics-panels.png")
    p.add_argument("--keep", action="store_true", help="keep the temporary Prometheus directory")
    args = p.parse_args(argv)
    print(f"wrote {run(args)}")


if __name__ == "__main__":
    sys.exit(main())
