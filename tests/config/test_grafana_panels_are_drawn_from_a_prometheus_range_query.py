"""bench/metrics_panels.py: the dashboard's main panels are found by title, a Prometheus
``query_range`` answer becomes legend-named series (Grafana's ``{{label}}`` format, NaN dropped), and the
panels are drawn into a PNG; its throwaway Prometheus configuration is valid (promtool, where
installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.image import imread

from bench.metrics_panels import (
    DASHBOARD,
    MAIN_PANELS,
    PanelData,
    draw_panels,
    panel_queries,
    prometheus_config,
    series_from_response,
)

T0 = 1_800_000_000.0


def _matrix(*results: tuple[dict[str, str], list[str]]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": metric, "values": [[T0 + 5 * i, v] for i, v in enumerate(values)]}
                for metric, values in results
            ],
        },
    }


def test_a_range_answer_is_drawn_as_the_dashboards_panels(tmp_path: Path) -> None:
    queries = panel_queries(json.loads(DASHBOARD.read_text()), MAIN_PANELS)
    assert [title for title, _, _ in queries] == list(MAIN_PANELS)
    title, unit, targets = queries[0]
    assert unit == "flops"
    assert [expr for expr, _ in targets] == ["unicron_cluster_waf_flops", "unicron_cluster_optimal_waf_flops"]

    waf = series_from_response(
        _matrix(({"__name__": "unicron_cluster_waf_flops"}, ["1e12", "2e12", "NaN", "3e12"])), "achieved WAF"
    )
    tasks = series_from_response(
        _matrix(({"state": "running"}, ["2", "2", "1"]), ({"state": "reconfiguring"}, ["0", "0", "1"])),
        "{{state}}",
    )
    assert [s.legend for s in tasks] == ["running", "reconfiguring"]
    assert waf[0].values == [1e12, 2e12, 3e12]  # NaN dropped
    assert waf[0].times[1].timestamp() == T0 + 5
    assert (
        series_from_response(_matrix(({"job": "j", "__name__": "up"}, ["1"])), "")[0].legend == 'up{job="j"}'
    )

    out = draw_panels(
        [
            PanelData(title, unit, waf),
            PanelData("Tasks by state", "short", tasks),
            PanelData("Empty", "s", []),
        ],
        tmp_path / "panels.png",
        span=(waf[0].times[0], waf[0].times[-1]),
    )
    image = imread(out)
    assert image.shape[0] > 200
    assert image.shape[1] > 1000
    assert image[..., :3].std() > 0.01  # not a blank canvas


def test_an_error_answer_or_an_unknown_panel_is_refused() -> None:
    with pytest.raises(ValueError, match="bad_data"):
        series_from_response({"status": "error", "error": "bad_data: parse error"}, "")
    with pytest.raises(ValueError, match="Nope"):
        panel_queries(json.loads(DASHBOARD.read_text()), ("Nope",))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_the_throwaway_prometheus_configuration_is_valid(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config("http://127.0.0.1:8000", token, ["127.0.0.1:9101"], 5.0))
    done = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = json.loads(config.read_text())["scrape_configs"]
    assert jobs[0]["metrics_path"] == "/metrics"
    assert jobs[0]["static_configs"] == [{"targets": ["127.0.0.1:8000"]}]
