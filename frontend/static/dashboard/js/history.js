// Reconfiguration history: every plan with its trigger, the per-task before/after allocation, the
// planner's explanation, and each transition's phases, lost work and migration sources.
import { $, api, apiList, badge, clear, debounce, el, empty, errorBox, fmtFlops, fmtNum, fmtSecs, fmtTime, parseTime, taskColour } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";

const PHASE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7"];
let plans = [], transitions = [], tasks = new Map(), events = new Map();

const cfg = (c) => {
  if (!c) return "—";
  if (typeof c === "string") return c;
  const parts = ["tp", "pp", "dp"].filter((k) => c[k] !== undefined).map((k) => `${k}${c[k]}`);
  if (c.micro_batch !== undefined) parts.push(`mb${c.micro_batch}`);
  if (c.recompute) parts.push("recompute");
  return parts.join(" ") || JSON.stringify(c);
};

function taskLabel(id) {
  const t = tasks.get(Number(id));
  return t ? t.name : `task ${id}`;
}

function explanation(plan) {
  const given = plan.input_snapshot && (plan.input_snapshot.explanation || plan.input_snapshot.explain);
  if (given) return String(given);
  const lines = [`${plan.trigger.replace(/_/g, " ")}: expected WAF ${fmtFlops(plan.expected_waf)}, transition cost ${fmtNum(plan.transition_cost)} FLOP (weighted), D_running ${fmtSecs(plan.d_running_s)}.`];
  for (const d of plan.decisions || []) {
    if (d.old_workers === d.new_workers) continue;
    lines.push(`${taskLabel(d.task)}: ${d.old_workers} → ${d.new_workers} workers`);
  }
  return lines.join("\n");
}

function phaseBar(steps) {
  const timed = steps.map((s) => ({ ...s, dur: s.started_at && s.finished_at ? (parseTime(s.finished_at) - parseTime(s.started_at)) / 1000 : 0 }));
  const total = timed.reduce((a, s) => a + s.dur, 0);
  if (!total) return el("div", { class: "muted" }, steps.map((s) => `${s.name} (${s.state})`).join(" → ") || "no steps");
  return [
    el("div", { class: "phase-bar", title: "time per phase" }, timed.map((s, i) => el("span", { title: `${s.name}: ${fmtSecs(s.dur)}`, style: { width: `${(100 * s.dur) / total}%`, background: PHASE_COLOURS[i % PHASE_COLOURS.length] } }))),
    el("div", { class: "grid-legend" }, timed.map((s, i) => el("span", {}, el("span", { class: "sw", style: { background: PHASE_COLOURS[i % PHASE_COLOURS.length] } }), `${s.name.replace(/_/g, " ")} ${fmtSecs(s.dur)}`, s.state !== "done" ? [" ", badge(s.state)] : null))),
  ];
}

function sourcesText(ms) {
  const counts = {};
  for (const v of Object.values(ms || {})) { const k = typeof v === "string" ? v : v && v.source ? v.source : JSON.stringify(v); counts[k] = (counts[k] || 0) + 1; }
  const e = Object.entries(counts);
  return e.length ? e.map(([k, n]) => `${k.replace(/_/g, " ")} ×${n}`).join(", ") : "—";
}

function renderTransition(t) {
  const dur = t.started_at && t.finished_at ? (parseTime(t.finished_at) - parseTime(t.started_at)) / 1000 : null;
  return el("div", { class: "panel", style: { margin: "6px 0", padding: "8px 10px" }, "data-transition": t.id },
    el("div", { class: "tl-head" },
      el("strong", {}, el("a", { href: `/tasks/${t.task}/` }, t.task_name || taskLabel(t.task))), badge(t.state),
      el("span", { class: "muted" }, `epoch ${t.epoch} · ${t.old_workers} → ${t.new_workers} workers · ${fmtSecs(dur)} total`)),
    phaseBar(t.steps || []),
    el("dl", { class: "kv" },
      el("dt", {}, "Lost work"), el("dd", {}, `${t.lost_microbatches} micro-batches · ${fmtSecs(t.lost_work_s)} recompute`),
      el("dt", {}, "State from"), el("dd", {}, sourcesText(t.migration_sources)),
      t.error ? [el("dt", {}, "Error"), el("dd", { class: "field-error" }, t.error)] : null));
}

function renderPlan(p) {
  const ev = p.failure_event ? events.get(p.failure_event) : null;
  const ts = transitions.filter((t) => t.plan === p.id);
  const decisions = p.decisions || [];
  return el("li", { id: `plan-${p.id}`, class: p.trigger === "failure" ? "trigger-failure" : "", "data-testid": "plan-item" },
    el("div", { class: "tl-head" },
      el("strong", {}, `Plan #${p.id}`), badge(p.trigger), el("span", { class: "tl-time", title: p.created_at }, fmtTime(p.created_at)),
      ev ? el("span", {}, "after ", badge(ev.severity, "sev"), " ", el("a", { href: `/alerts/?event=${ev.id}` }, ev.kind), ev.node_name ? ` on ${ev.node_name}` : "") : null,
      el("span", { class: "muted" }, `computed in ${fmtNum(p.compute_time_ms, 2)} ms`)),
    el("div", { class: "tl-body" },
      el("div", {},
        el("h3", {}, "Allocation per task"),
        decisions.length ? el("table", { class: "table" },
          el("thead", {}, el("tr", {}, el("th", {}, "Task"), el("th", { class: "num" }, "Before"), el("th", { class: "num" }, "After"), el("th", {}, "Parallel config"))),
          el("tbody", {}, decisions.map((d) => {
            const delta = d.new_workers - d.old_workers;
            return el("tr", {},
              el("td", {}, el("span", { class: "sw", style: { display: "inline-block", width: "10px", height: "10px", borderRadius: "2px", marginRight: "6px", background: taskColour(d.task) } }), taskLabel(d.task)),
              el("td", { class: "num" }, String(d.old_workers)),
              el("td", { class: "num" }, String(d.new_workers), delta ? el("span", { class: delta > 0 ? "delta-up" : "delta-down" }, ` (${delta > 0 ? "+" : ""}${delta})`) : null),
              el("td", { class: "mono" }, d.old_config && cfg(d.old_config) !== cfg(d.new_config) ? `${cfg(d.old_config)} → ${cfg(d.new_config)}` : cfg(d.new_config)));
          }))) : empty("No per-task decisions recorded."),
        ts.length ? [el("h3", { style: { marginTop: "10px" } }, "Transitions"), ts.map(renderTransition)] : el("p", { class: "muted" }, "No transitions recorded for this plan (tasks started fresh or kept their allocation).")),
      el("div", {},
        el("h3", {}, "Planner's explanation"),
        el("pre", { class: "explain mono", style: { background: "#f6f8fb", color: "#1c2330" } }, explanation(p)),
        el("dl", { class: "kv", style: { marginTop: "8px" } },
          el("dt", {}, "Expected WAF"), el("dd", {}, fmtFlops(p.expected_waf)),
          el("dt", {}, "Transition cost"), el("dd", {}, `${fmtNum(p.transition_cost)} FLOP (weighted)`),
          el("dt", {}, "D_running"), el("dd", {}, fmtSecs(p.d_running_s))))));
}

function render() {
  const box = $("#timeline");
  const f = $("#trigger-filter").value;
  const list = f ? plans.filter((p) => p.trigger === f) : plans;
  if (!list.length) { clear(box, el("li", { class: "empty", style: { border: 0 } }, plans.length ? "No plans with this trigger." : "No reconfigurations yet. Plans appear here when a failure, a new task or a weight change makes the planner act.")); return; }
  clear(box, list.map(renderPlan));
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

async function refresh() {
  try {
    const [p, t, ts] = await Promise.all([
      apiList(EP.plans, { ordering: "-created_at" }, 100),
      apiList(EP.transitions, { ordering: "-created_at" }, 1000),
      apiList(EP.tasks),
    ]);
    plans = p; transitions = t; tasks = new Map(ts.map((x) => [x.id, x]));
    const need = [...new Set(plans.map((x) => x.failure_event).filter((x) => x && !events.has(x)))];
    await Promise.all(need.map(async (id) => { try { events.set(id, await api(EP.failureEvent(id))); } catch { /* shown without link */ } }));
    render();
  } catch (e) { clear($("#timeline"), el("li", {}, errorBox(e))); }
}

$("#trigger-filter").addEventListener("change", render);
onLive(["plan.", "transition.", "live.reconnected"], debounce(refresh, 200));
refresh();
