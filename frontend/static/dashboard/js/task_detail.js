// Task detail: figures, iteration-time, throughput and loss charts (live), spec, recipe, checkpoints, allocation and its history.
import { $, api, apiList, badge, canOperate, clear, debounce, el, empty, errorBox, fmtAgo, fmtNum, fmtSecs, fmtTime, parseTime } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { legendNote, timeChart } from "./charts.js";
import { cancelTask, changeWeight } from "./task_actions.js";
import { lostWorkText, phases, sourcesText, transitionSeconds } from "./transitions.js";

const taskId = Number($("#task-root").dataset.taskId);
let task = null;
let charts = {};
let transitions = [];

async function loadSeries(kind) {
  // the last 3 hours, or since the task was submitted: buckets stay a few seconds wide for a new task
  const since = Math.max(Date.now() - 3 * 3600 * 1000, task ? parseTime(task.created_at).getTime() : 0);
  const s = await api(EP.taskSeries(taskId), { params: { kind, since: new Date(since).toISOString(), max_points: 400 } });
  return (s.points || []).map((p) => [parseTime(p.at).getTime() / 1000, p.value]);
}

// train and validation points on one time axis (a series without a value at a time holds null there)
function mergeSeries(a, b) {
  const xs = [...new Set([...a.map((p) => p[0]), ...b.map((p) => p[0])])].sort((x, y) => x - y);
  const at = (pts) => { const m = new Map(pts); return xs.map((x) => (m.has(x) ? m.get(x) : null)); };
  return [xs, [at(a), at(b)]];
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

async function refreshCheckpoints() {
  const box = $("#task-checkpoints");
  try {
    const rows = await api(EP.taskCheckpoints(taskId));
    clear(box, rows.length
      ? el("table", { class: "table", "data-testid": "checkpoints" },
        el("thead", {}, el("tr", {}, ["Iteration", "Saved", "Size", "Validation loss", "Path"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.map((c) => el("tr", {},
          el("td", {}, Number(c.iteration).toLocaleString()),
          el("td", { title: c.saved_at }, fmtTime(c.saved_at)),
          el("td", {}, fmtBytes(c.size_bytes)),
          el("td", {}, c.validation_loss === null ? "—" : fmtNum(c.validation_loss, 3)),
          el("td", { class: "muted" }, c.path)))))
      : empty("No checkpoint reported yet (a recipe without a checkpoint section saves none)."));
  } catch (e) { clear(box, errorBox(e)); }
}

function figure(label, value, sub) {
  return el("div", { class: "figure" }, el("div", { class: "label" }, label), el("div", { class: "value" }, value), sub ? el("div", { class: "sub" }, sub) : null);
}

function renderTask() {
  $("#task-title").textContent = `${task.name}`;
  clear($("#task-state"), badge(task.state));
  document.title = `${task.name} · Unicron`;
  const workers = (task.allocations || []).length;
  const lastIter = charts.iter ? charts.iter.data[1].filter((v) => v !== null).at(-1) : null;
  const lastTput = charts.tput ? charts.tput.data[1].filter((v) => v !== null).at(-1) : null;
  const lastLoss = charts.loss ? charts.loss.data[1].filter((v) => v !== null).at(-1) : null;
  clear($("#task-figures"),
    figure("Workers", `${workers}`, `range ${task.min_workers}–${task.max_workers}, unit ${task.allocation_unit}`),
    figure("Weight w(t)", fmtNum(task.weight, 2), "priority in the cluster WAF"),
    figure("Iteration", Number(task.iteration).toLocaleString(), `epoch ${task.epoch}`),
    figure("Iteration time", fmtSecs(lastIter), "latest, measured"),
    figure("Throughput", lastTput === null || lastTput === undefined ? "—" : `${fmtNum(lastTput)} tok/s`, "latest, measured"),
    figure("Training loss", lastLoss === null || lastLoss === undefined ? "—" : fmtNum(lastLoss, 3), task.recipe && task.recipe.data ? "latest, on the recipe's data" : "latest, on synthetic tokens"),
    figure("Submitted", fmtAgo(task.created_at), task.owner ? `by ${task.owner}` : ""));
  const spec = [
    ["Layers", task.num_layers], ["Hidden size", task.hidden_size], ["Attention heads", task.num_attention_heads],
    ["Sequence length", task.seq_length], ["Vocabulary", task.vocab_size], ["Global batch", task.global_batch_size],
    ["Micro-batch", task.micro_batch_size], ["Activation recomputation", task.activation_recomputation ? "yes" : "no"],
    ["Workers (min–max, unit)", `${task.min_workers}–${task.max_workers}, unit ${task.allocation_unit}`],
    ["Finished", task.finished_at ? fmtTime(task.finished_at) : "—"],
  ];
  clear($("#task-spec"), el("dl", { class: "kv" }, spec.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])));
  $("#task-recipe").textContent = JSON.stringify(task.recipe || {}, null, 2);
  const allocs = task.allocations || [];
  clear($("#task-alloc"), allocs.length
    ? el("table", { class: "table" },
      el("thead", {}, el("tr", {}, ["Rank", "Node", "Device", "Role", "TP", "PP", "DP", "Epoch"].map((h) => el("th", {}, h)))),
      el("tbody", {}, allocs.map((a) => el("tr", {}, [a.rank, a.node, a.device_index, a.role.replace(/_/g, " "), a.tp_rank, a.pp_rank, a.dp_rank, a.epoch].map((v) => el("td", {}, String(v)))))))
    : empty(task.state === "pending" ? "Waiting for the planner to assign devices." : "No devices allocated."));
  const actions = $("#task-actions");
  if (actions && canOperate()) {
    const terminal = ["completed", "failed", "cancelled"].includes(task.state);
    clear(actions, terminal ? null : [
      el("button", { class: "btn", type: "button", onclick: () => changeWeight(task, refreshTask) }, "Change weight…"),
      el("button", { class: "btn btn-danger", type: "button", onclick: () => cancelTask(task, refreshTask) }, "Cancel task")]);
  }
}

function renderHistory() {
  const box = $("#task-history");
  if (!transitions.length) { clear(box, empty("No reconfigurations yet: the task has kept its first allocation.")); return; }
  clear(box, el("table", { class: "table", "data-testid": "allocation-history" },
    el("thead", {}, el("tr", {}, ["When", "Kind", "Epoch", "Workers", "State", "Time", "Per phase", "Lost work", "State from", "Plan"].map((h) => el("th", {}, h)))),
    el("tbody", {}, transitions.map((t) => {
      const d = t.new_workers - t.old_workers;
      const ph = phases(t).filter((p) => p.s > 0).map((p) => `${p.name.replace(/_/g, " ")} ${fmtSecs(p.s)}`).join(" · ");
      return el("tr", { "data-transition": t.id },
        el("td", { title: t.created_at }, fmtTime(t.created_at)),
        el("td", {}, t.kind ? badge(t.kind) : "—"),
        el("td", {}, `${t.previous_epoch ?? Math.max(t.epoch - 1, 0)} → ${t.epoch}`),
        el("td", {}, `${t.old_workers} → ${t.new_workers} `, d ? el("span", { class: d > 0 ? "delta-up" : "delta-down" }, `(${d > 0 ? "+" : ""}${d})`) : null),
        el("td", {}, badge(t.state)),
        el("td", {}, fmtSecs(transitionSeconds(t))),
        el("td", { class: "muted" }, ph || "—"),
        el("td", {}, lostWorkText(t)),
        el("td", {}, sourcesText(t.migration_sources)),
        el("td", {}, el("a", { href: `/history/#plan-${t.plan}` }, `plan #${t.plan}`)));
    }))));
}

async function refreshTask() {
  try {
    task = await api(EP.task(taskId));
    renderTask();
  } catch (e) {
    clear($("#task-figures"), errorBox(e.status === 404 ? new Error(`Task #${taskId} does not exist.`) : e));
  }
}

async function refreshCharts() {
  try {
    const [iter, tput, loss, vloss] = await Promise.all([loadSeries("iteration_time"), loadSeries("tokens_per_s"), loadSeries("training_loss"), loadSeries("validation_loss")]);
    if (!charts.iter) {
      charts.iter = timeChart($("#chart-iter"), { series: [{ label: "iteration time", stroke: "#f28e2b" }], yLabel: "seconds", yFormat: (v) => fmtSecs(v) });
      charts.tput = timeChart($("#chart-tput"), { series: [{ label: "tokens/s", stroke: "#2f5fd0", fill: "rgba(47,95,208,.10)" }], yLabel: "tokens/s", yFormat: (v) => fmtNum(v) });
      $("#chart-tput").append(legendNote());
      charts.loss = timeChart($("#chart-loss"), { series: [{ label: "training loss", stroke: "#59a14f" }, { label: "validation loss", stroke: "#e15759", dash: [6, 4] }], yLabel: "loss", yFormat: (v) => fmtNum(v, 3) });
      $("#chart-loss").append(legendNote());
    }
    charts.iter.setData(iter.map((p) => p[0]), [iter.map((p) => p[1])]);
    charts.tput.setData(tput.map((p) => p[0]), [tput.map((p) => p[1])]);
    charts.loss.setData(...mergeSeries(loss, vloss));
    const marks = transitions.map((t) => ({ t: parseTime(t.started_at || t.created_at).getTime() / 1000, kind: "transition" }));
    charts.iter.setMarkers(marks);
    charts.tput.setMarkers(marks);
    charts.loss.setMarkers(marks);
    if (task) renderTask();
  } catch (e) {
    clear($("#chart-iter"), errorBox(e));
  }
}

async function refreshTransitions() {
  try {
    transitions = await apiList(EP.transitions, { task: taskId, ordering: "-created_at" }, 500);
    renderHistory();
  } catch (e) { clear($("#task-history"), errorBox(e)); }
}

onLive("metrics.samples", (p) => {
  for (const s of p.samples || []) {
    if (s.task !== taskId) continue;
    const t = parseTime(s.at).getTime() / 1000;
    if (s.kind === "iteration_time" && charts.iter) charts.iter.append(t, [s.value]);
    if (s.kind === "tokens_per_s" && charts.tput) charts.tput.append(t, [s.value]);
    if (s.kind === "training_loss" && charts.loss) charts.loss.append(t, [s.value, null]);
    if (s.kind === "validation_loss" && charts.loss) charts.loss.append(t, [null, s.value]);
  }
});
const soon = debounce(refreshTask, 150);
onLive(["task.", "live.reconnected"], (p) => { if (!p.id || p.id === taskId) soon(); });
onLive(["metrics.samples", "live.reconnected"], debounce(refreshCheckpoints, 5000));
onLive(["transition.", "live.reconnected"], debounce(() => refreshTransitions().then(refreshCharts), 200));

Promise.all([refreshTask(), refreshTransitions()]).then(refreshCharts);
refreshCheckpoints();
