// Tasks: list with state, weight, workers and throughput; submit (operator); change weight and cancel.
import { $, ApiError, api, askValue, apiList, badge, canOperate, clear, confirmAction, debounce, el, empty, errorBox, fmtAgo, fmtNum, parseTime, toast } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { clearErrors, formJson, requiredErrors, showErrors } from "./forms.js";
import { cancelTask as cancelT, changeWeight as changeW } from "./task_actions.js";

const changeWeight = (t) => changeW(t, refresh);
const cancelTask = (t) => cancelT(t, refresh);

const ACTIVE = new Set(["pending", "running", "reconfiguring", "suspended"]);
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const PRESETS = {
  "gpt-350m": { num_layers: 24, hidden_size: 1024, num_attention_heads: 16, seq_length: 2048, vocab_size: 50257, global_batch_size: 256, micro_batch_size: 4, min_workers: 1, max_workers: 8 },
  "gpt-1.3b": { num_layers: 24, hidden_size: 2048, num_attention_heads: 16, seq_length: 2048, vocab_size: 50257, global_batch_size: 512, micro_batch_size: 4, min_workers: 2, max_workers: 16 },
  "gpt-7b": { num_layers: 32, hidden_size: 4096, num_attention_heads: 32, seq_length: 4096, vocab_size: 50257, global_batch_size: 1024, micro_batch_size: 1, min_workers: 8, max_workers: 32, allocation_unit: 8 },
};

let tasks = [];
let workers = new Map();
const throughput = new Map(); // task id -> latest tokens/s

async function loadThroughput(ids) {
  const since = new Date(Date.now() - 600 * 1000).toISOString();
  await Promise.all(ids.map(async (id) => {
    try {
      const s = await api(EP.taskSeries(id), { params: { kind: "tokens_per_s", since, max_points: 20 } });
      const pts = Array.isArray(s) ? s : s.points || [];
      if (pts.length) throughput.set(id, pts[pts.length - 1].value);
    } catch { /* the cell shows — */ }
  }));
}

async function refresh() {
  const box = $("#task-list");
  try {
    tasks = await apiList(EP.tasks);
    workers = new Map(tasks.map((t) => [t.id, (t.allocations || []).length]));
    await loadThroughput(tasks.filter((t) => t.state === "running" || t.state === "reconfiguring").map((t) => t.id));
    render();
  } catch (e) {
    clear(box, errorBox(e));
  }
}

function visible() {
  const f = $("#state-filter").value;
  if (f === "active") return tasks.filter((t) => ACTIVE.has(t.state));
  return f ? tasks.filter((t) => t.state === f) : tasks;
}

function render() {
  const box = $("#task-list");
  const list = visible();
  if (!list.length) {
    clear(box, empty(tasks.length ? "No tasks match this filter." : canOperate() ? "No tasks yet. Submit one to get started." : "No tasks yet."));
    return;
  }
  const op = canOperate();
  clear(box, el("table", { class: "table" },
    el("thead", {}, el("tr", {},
      el("th", {}, "Task"), el("th", {}, "State"), el("th", { class: "num" }, "Weight"), el("th", { class: "num" }, "Workers"),
      el("th", { class: "num" }, "Throughput"), el("th", { class: "num" }, "Iteration"), el("th", {}, "Owner"), el("th", {}, "Submitted"),
      op ? el("th", { class: "num" }, "Actions") : null)),
    el("tbody", {}, list.map((t) => el("tr", { "data-task-row": t.id, "data-testid": "task-row" },
      el("td", {}, el("a", { href: `/tasks/${t.id}/` }, t.name), el("div", { class: "muted" }, `#${t.id} · ${t.num_layers}L × ${t.hidden_size}`)),
      el("td", { "data-testid": "task-state" }, badge(t.state)),
      el("td", { class: "num" }, fmtNum(t.weight, 2)),
      el("td", { class: "num", "data-testid": "task-workers" }, `${workers.get(t.id) ?? 0}`, el("span", { class: "muted" }, ` / ${t.min_workers}–${t.max_workers}`)),
      el("td", { class: "num", "data-throughput": t.id }, throughput.has(t.id) ? `${fmtNum(throughput.get(t.id))} tok/s` : "—"),
      el("td", { class: "num" }, Number(t.iteration).toLocaleString()),
      el("td", {}, t.owner || "—"),
      el("td", { title: t.created_at }, fmtAgo(t.created_at)),
      op ? el("td", {}, el("div", { class: "row-actions" },
        TERMINAL.has(t.state) ? null : el("button", { class: "btn btn-sm", type: "button", onclick: () => changeWeight(t), "data-testid": "change-weight" }, "Weight…"),
        TERMINAL.has(t.state) ? null : el("button", { class: "btn btn-sm btn-danger", type: "button", onclick: () => cancelTask(t), "data-testid": "cancel-task" }, "Cancel"))) : null)))));
}

function wireSubmit() {
  const panel = $("#submit-panel");
  const form = $("#submit-form");
  if (!form) return;
  $("#show-submit").addEventListener("click", () => { panel.hidden = false; form.elements.namedItem("name").focus(); });
  $("#cancel-submit").addEventListener("click", () => { panel.hidden = true; clearErrors(form); });
  $("#preset").addEventListener("change", (ev) => {
    const p = PRESETS[ev.target.value];
    if (!p) return;
    for (const [k, v] of Object.entries({ allocation_unit: 1, ...p })) form.elements.namedItem(k).value = v;
    if (!form.elements.namedItem("name").value) form.elements.namedItem("name").value = `${ev.target.value}-${Date.now() % 10000}`;
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const local = requiredErrors(form);
    if (Object.keys(local).length) { showErrors(form, local); return; }
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    button.textContent = "Submitting…";
    try {
      const task = await api(EP.tasks, { method: "POST", body: formJson(form) });
      clearErrors(form);
      form.reset();
      panel.hidden = true;
      toast(`Submitted ${task.name} (#${task.id}).`, { kind: "ok", link: `/tasks/${task.id}/`, linkText: "Open" });
      refresh();
    } catch (e) {
      if (e instanceof ApiError && e.status === 400) showErrors(form, e.fieldErrors, e.message);
      else showErrors(form, {}, e.message);
    } finally {
      button.disabled = false;
      button.textContent = "Submit";
    }
  });
}

function onSamples(p) {
  let changed = false;
  for (const s of p.samples || []) {
    if (s.kind === "tokens_per_s" && s.task !== null) {
      const prev = throughput.get(s.task);
      const at = parseTime(s.at);
      if (prev === undefined || at) { throughput.set(s.task, s.value); changed = true; }
      const cell = document.querySelector(`[data-throughput="${s.task}"]`);
      if (cell) cell.textContent = `${fmtNum(s.value)} tok/s`;
    }
  }
  return changed;
}

$("#state-filter").addEventListener("change", render);
wireSubmit();
onLive(["task.", "live.reconnected"], debounce(refresh, 150));
onLive("metrics.samples", onSamples);
refresh();
