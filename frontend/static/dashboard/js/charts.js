// Time-series charts on the vendored uPlot (static/vendor/uplot, pinned in frontend/package.json).
// A chart owns its data arrays; `markers` draws vertical lines for failures and transitions.
import { el } from "./core.js";

const MARKER_STYLE = {
  failure: { color: "#d23c3c", dash: [] },
  transition: { color: "#8b5cf6", dash: [4, 3] },
};

function markersPlugin(chart) {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx } = u;
          const { top, height, left, width } = u.bbox;
          ctx.save();
          for (const m of chart.markers) {
            const x = Math.round(u.valToPos(m.t, "x", true));
            if (x < left || x > left + width) continue;
            const st = MARKER_STYLE[m.kind] || MARKER_STYLE.transition;
            ctx.strokeStyle = st.color;
            ctx.lineWidth = 1.5 * devicePixelRatio;
            ctx.setLineDash(st.dash.map((d) => d * devicePixelRatio));
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, top + height);
            ctx.stroke();
            ctx.fillStyle = st.color;
            ctx.beginPath();
            const r = 3.5 * devicePixelRatio;
            if (m.kind === "failure") { ctx.moveTo(x - r, top); ctx.lineTo(x + r, top); ctx.lineTo(x, top + 1.6 * r); }
            else ctx.arc(x, top + r, r, 0, 2 * Math.PI);
            ctx.fill();
          }
          ctx.restore();
        },
      ],
    },
  };
}

/**
 * timeChart(container, {series: [{label, stroke, fill, dash}], yLabel, yFormat, height})
 * returns {setData(xs, ys[]), setMarkers(markers), append(t, values[]), data, markers}
 */
export function timeChart(container, { series, yLabel = "", yFormat = (v) => String(v), height = 240, maxPoints = 2000 }) {
  const chart = { data: [[], ...series.map(() => [])], markers: [], plot: null };
  const host = el("div", { class: "chart" });
  container.replaceChildren(host);
  if (!window.uPlot) {
    host.append(el("div", { class: "error-box" }, "Chart library failed to load."));
    return { ...chart, setData() {}, setMarkers() {}, append() {} };
  }
  const opts = {
    width: Math.max(300, host.clientWidth || container.clientWidth || 600),
    height,
    cursor: { drag: { x: true, y: false } },
    legend: { live: true },
    scales: {
      // explicit ranges so an empty series (no samples yet) still draws axes
      x: { time: true, range: (u, min, max) => (min == null || max == null ? [Date.now() / 1000 - 3600, Date.now() / 1000] : min === max ? [min - 60, max + 60] : [min, max]) },
      y: { range: (u, min, max) => (min == null || max == null ? [0, 1] : window.uPlot.rangeNum(min === max ? min * 0.9 : min, min === max ? max * 1.1 || 1 : max, 0.1, true)) },
    },
    axes: [
      { stroke: "#667085", grid: { stroke: "#eef0f3" } },
      { stroke: "#667085", grid: { stroke: "#eef0f3" }, label: yLabel, size: 64, values: (u, vals) => (vals || []).map(yFormat) },
    ],
    series: [
      {},
      ...series.map((s) => ({
        label: s.label, stroke: s.stroke, width: 2, fill: s.fill, dash: s.dash, spanGaps: true,
        value: (u, v) => (v === null || v === undefined ? "—" : yFormat(v)),
        points: { show: false },
      })),
    ],
    plugins: [markersPlugin(chart)],
  };
  chart.plot = new window.uPlot(opts, chart.data, host);
  new ResizeObserver(() => {
    const w = host.clientWidth;
    if (w && chart.plot && Math.abs(w - chart.plot.width) > 2) chart.plot.setSize({ width: w, height });
  }).observe(host);
  host.dataset.points = "0";
  host.dataset.markers = "0";
  // per series: how many points hold a value (tests and screenshots wait on it)
  const countValues = () => { host.dataset.values = chart.data.slice(1).map((a) => a.filter((v) => v !== null && v !== undefined).length).join(","); };
  countValues();

  chart.setData = (xs, ys) => {
    chart.data = [xs, ...ys];
    chart.plot.setData(chart.data);
    host.dataset.points = String(xs.length);
    countValues();
  };
  chart.append = (t, values) => {
    const [xs, ...ys] = chart.data;
    // keep x sorted: insert in place (samples can arrive slightly out of order)
    let i = xs.length;
    while (i > 0 && xs[i - 1] > t) i--;
    xs.splice(i, 0, t);
    ys.forEach((arr, k) => arr.splice(i, 0, values[k] === undefined ? null : values[k]));
    if (xs.length > maxPoints) { xs.shift(); ys.forEach((a) => a.shift()); }
    chart.plot.setData(chart.data);
    host.dataset.points = String(xs.length);
    countValues();
  };
  chart.setMarkers = (markers) => {
    chart.markers = markers;
    host.dataset.markers = String(markers.length);
    chart.plot.redraw(false);
  };
  chart.host = host;
  return chart;
}

export function legendNote() {
  return el("div", { class: "chart-legend-note" },
    el("span", { style: { color: MARKER_STYLE.failure.color } }, "▼ failure"), "  ",
    el("span", { style: { color: MARKER_STYLE.transition.color } }, "● transition"));
}
