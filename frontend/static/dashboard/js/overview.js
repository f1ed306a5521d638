// Cluster overview: headline figures, live WAF chart with failure/transition markers, device grid.
import { $, $$, api, apiList, badge, clear, debounce, el, empty, errorBox, fmtAgo, fmtFlops, fmtPct, fmtSecs, parseTime } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { legendNote, timeChart } from "./charts.js";
import { DOM_LIMIT, loadDeviceMap, renderGrid } from "./grid.js";

let rangeS = 3600;
let chart = null;
let failures = [];
let transitions = [];
let cluster = null;

const DAY = 86400;

// ---- WAF chart ----------------------------------------------------------------------------------
async function loadSeries(kind, since, until) {
  // the same since/until for both series so their buckets share timestamps
  const data = await api(EP.clusterSeries, { params: { kind, since: since.toISOString(), until: until.toISOString(), max_points: 240 } });
  const points = Array.isArray(data) ? data : data.points || [];
  return points.map((p) => [parseTime(p.at).getTime() / 1000, p.value]);
}

function mergeSeries(a, b) {
  // union of timestamps; each series keeps its own values (null where it has no point)
  const m = new Map();
  for (const [t, v] of a) m.set(t, [v, null]);
  for (const [t, v] of b) { const e = m.get(t) || [null, null]; e[1] = v; m.set(t, e); }
  const xs = [...m.keys()].sort((x, y) => x - y);
  return [xs, [xs.map((t) => m.get(t)[0]), xs.map((t) => m.get(t)[1])]];
}

async function refreshChart() {
  const box = $("#waf-chart");
  const until = new Date();
  const since = new Date(until.getTime() - rangeS * 1000);
  try {
    const [achieved, optimum] = await Promise.all([loadSeries("cluster_waf", since, until), loadSeries("optimal_waf", since, until)]);
    if (!chart) {
      chart = timeChart(box, {
        series: [
          { label: "achieved WAF", stroke: "#2f5fd0", fill: "rgba(47,95,208,.10)" },
          { label: "healthy-cluster optimum", stroke: "#1f9d55", dash: [6, 4] },
        ],
        yLabel: "FLOP/s", yFormat: (v) => fmtFlops(v).replace("FLOP/s", "").trim(),
      });
      clear($("#waf-note"), legendNote());
    }
    const [xs, ys] = mergeSeries(achieved, optimum);
    chart.setData(xs, ys);
    updateMarkers();
    if (!xs.length) { if (!$("#waf-empty")) $("#waf-note").append(el("div", { class: "empty", id: "waf-empty" }, "No WAF samples in this range yet: the sampler writes one every few seconds.")); }
    else $("#waf-empty")?.remove();
  } catch (e) {
    chart = null;
    clear(box, errorBox(e));
  }
}

function updateMarkers() {
  if (!chart) return;
  const since = Date.now() / 1000 - rangeS;
  const m = [
    ...failures.map((f) => ({ t: parseTime(f.detected_at)?.getTime() / 1000, kind: "failure", label: f.kind })),
    ...transitions.map((t) => ({ t: parseTime(t.started_at || t.created_at)?.getTime() / 1000, kind: "transition" })),
  ].filter((x) => x.t && x.t >= since);
  chart.setMarkers(m);
}

function onWafSample(p) {
  // metrics.sample_cluster_waf's tick: {at, achieved, optimum, goodput}
  if (!chart) return;
  chart.append(parseTime(p.at).getTime() / 1000, [p.achieved, p.optimum]);
  $("#waf-empty")?.remove();
  showWaf(p.achieved, p.optimum);
  summarySoon();
}

function onSamples(p) {
  // cluster samples written through metrics.services.do_record_samples (imports, backfills)
  if (!chart) return;
  const byTime = new Map();
  for (const s of p.samples || []) {
    if (s.task !== null && s.task !== undefined) continue;
    const k = s.kind === "cluster_waf" ? 0 : s.kind === "optimal_waf" ? 1 : -1;
    if (k < 0) continue;
    const t = parseTime(s.at).getTime() / 1000;
    const e = byTime.get(t) || [undefined, undefined];
    e[k] = s.value;
    byTime.set(t, e);
  }
  for (const [t, vals] of byTime) chart.append(t, vals);
  if (byTime.size) {
    $("#waf-empty")?.remove();
    const last = [...byTime.entries()].sort((a, b) => a[0] - b[0]).at(-1)[1];
    if (last[0] !== undefined) showWaf(last[0], last[1]);
    summarySoon();
  }
}

// ---- headline figures: GET /api/v1/summary/ (computed in SQL) ---------------------------------------
let summary = null;

// Which throughput the optimum rests on: measured (calibrated from iteration times) or modelled.
function optimumBasis() {
  if (!summary || !summary.optimum_tasks) return "";
  const n = summary.optimum_tasks, m = summary.optimum_tasks_measured;
  if (m === n) return " · measured throughput";
  if (m === 0) return " · modelled throughput (no task measured yet)";
  return ` · measured for ${m} of ${n} tasks, modelled for the rest`;
}

function showWaf(achieved, optimum) {
  $("#fig-waf").textContent = fmtFlops(achieved);
  const best = optimum ?? summary?.optimum?.value ?? null;
  $("#fig-waf-share").textContent = achieved !== null && achieved !== undefined && best
    ? `${fmtPct(achieved / best)} of optimum (${fmtFlops(best)})${optimumBasis()}` : "optimum unknown";
  $("#fig-waf-share").title = "Cluster WAF is measured (the workers' achieved FLOP/s). The optimum is the " +
    "planner's best plan for a healthy cluster: measured throughput for tasks that have run in a layout, " +
    "modelled for the others.";
}

function renderSummary(s) {
  summary = s;
  if (s.waf) {
    showWaf(s.waf.value, s.optimum ? s.optimum.value : null);
    const age = (Date.now() - parseTime(s.waf.at).getTime()) / 1000;
    if (age > 60) $("#fig-waf-share").textContent += ` · as of ${fmtAgo(s.waf.at)}`;
  } else {
    $("#fig-waf").textContent = "—";
    $("#fig-waf-share").textContent = "no WAF sample yet";
  }
  $("#fig-goodput").textContent = s.goodput_1h === null ? "—" : fmtPct(s.goodput_1h);
  $("#fig-goodput-sub").textContent = s.goodput_1h === null
    ? "no task scheduled in the last hour"
    : `${fmtSecs(s.goodput_useful_s)} useful of ${fmtSecs(s.goodput_scheduled_s)} task time`;
  $("#fig-failures").textContent = `${s.failures_1h} / ${s.failures_24h}`;
  const bySev = s.failures_24h_by_severity || {};
  $("#fig-failures-sub").textContent = Object.keys(bySev).sort().map((k) => `${k}: ${bySev[k]}`).join(" · ") || "none in 24 h";
  $("#fig-detect").textContent = fmtSecs(s.mean_detection_latency_s);
  $("#fig-detect-sub").textContent = s.detection_samples ? `occurred → detected, ${s.detection_samples} in 24 h` : "occurred → detected, 24 h";
  $("#fig-transition").textContent = fmtSecs(s.mean_transition_s);
  $("#fig-transition-sub").textContent = s.transitions_24h ? `started → finished, ${s.transitions_24h} in 24 h` : "started → finished, 24 h";
}

async function refreshSummary() {
  try {
    renderSummary(await api(EP.summary));
    $("#figures").dataset.loaded = "true";
  } catch (e) {
    $("#fig-waf-share").textContent = `summary unavailable: ${e.message}`;
  }
}
const summarySoon = debounce(refreshSummary, 300);

// ---- failures, transitions, figures --------------------------------------------------------------
async function refreshEvents() {
  const since = new Date(Date.now() - DAY * 1000).toISOString();
  try {
    [failures, transitions] = await Promise.all([
      apiList(EP.failureEvents, { since }, 2000),
      apiList(EP.transitions, { ordering: "-created_at" }, 500),
    ]);
  } catch (e) {
    clear($("#recent-failures"), errorBox(e));
    return;
  }
  renderRecentFailures(failures.slice(0, 8));
  updateMarkers();
}

function whereOf(f) {
  const d = f.device && cluster ? cluster.devices.find((x) => x.id === f.device) : null;
  return [f.node_name || "—", d ? ` / device ${d.index}` : ""].join("");
}

function renderRecentFailures(list) {
  const box = $("#recent-failures");
  if (!list.length) { clear(box, empty("No failures in the last 24 hours.")); return; }
  clear(box, el("table", { class: "table", "data-testid": "recent-failures" },
    el("thead", {}, el("tr", {}, el("th", {}, "When"), el("th", {}, "Severity"), el("th", {}, "What"), el("th", {}, "Where"), el("th", {}, "Action"))),
    el("tbody", {}, list.map((f) => el("tr", {},
      el("td", { title: f.detected_at }, fmtAgo(f.detected_at)),
      el("td", {}, badge(f.severity, "sev")),
      el("td", {}, el("a", { href: `/alerts/?event=${f.id}` }, f.kind)),
      el("td", {}, whereOf(f)),
      el("td", {}, (f.action || "").replace(/_/g, " ")))))));
}

// ---- grid -----------------------------------------------------------------------------------------
async function refreshGrid() {
  try {
    cluster = await loadDeviceMap();
    renderGrid($("#node-grid"), $("#grid-legend"), cluster);
    const count = (st) => cluster.taskStates[st] || 0;
    $("#fig-tasks").textContent = String(count("running"));
    const busy = cluster.allocByDevice.size, total = cluster.devices.length;
    const others = [["reconfiguring", count("reconfiguring")], ["pending", count("pending")]].filter(([, n]) => n).map(([k, n]) => `${n} ${k}`);
    $("#fig-devices").textContent = [...others, `${busy} / ${total} devices allocated`].join(" · ");
  } catch (e) {
    clear($("#node-grid"), errorBox(e));
  }
}

// ---- wiring ----------------------------------------------------------------------------------------
for (const b of $$("#waf-range button")) {
  b.addEventListener("click", () => {
    for (const o of $$("#waf-range button")) o.setAttribute("aria-pressed", String(o === b));
    rangeS = Number(b.dataset.range);
    refreshChart();
  });
}
for (const b of $$("#grid-mode button")) {
  b.addEventListener("click", () => {
    for (const o of $$("#grid-mode button")) o.setAttribute("aria-pressed", String(o === b));
    $("#node-grid").dataset.mode = b.dataset.mode;
  });
}

// A fleet of thousands of nodes changes every second: the map is fetched at most every 2 s then
// (a debounce would never fire under a steady stream of events), within 150 ms on a small cluster.
let gridTimer = null, gridLast = 0;
function gridSoon() {
  if (gridTimer !== null) return;
  const every = cluster && cluster.devices.length > DOM_LIMIT ? 2000 : 150;
  const wait = Math.max(150, every - (Date.now() - gridLast));
  gridTimer = setTimeout(() => { gridTimer = null; gridLast = Date.now(); refreshGrid(); }, wait);
}
const eventsSoon = debounce(refreshEvents, 150);
onLive(["node.", "device.", "task.", "live.reconnected"], gridSoon);
onLive(["failure_event.", "transition.", "plan.", "live.reconnected"], eventsSoon);
onLive(["failure_event.", "transition.", "live.reconnected"], summarySoon);
onLive("metrics.samples", onSamples);
onLive("waf.sample", onWafSample);
onLive("live.reconnected", refreshChart);

refreshGrid();
refreshSummary();
refreshEvents().then(refreshChart);
