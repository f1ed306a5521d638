// Reconfiguration history: every plan with its trigger, the per-task before/after allocation, the
// planner's explanation, and each transition's phases, lost work and migration sources.
import { $, api, apiList, badge, clear, debounce, el, empty, errorBox, fmtFlops, fmtNum, fmtSecs, fmtTime, taskColour } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { lostWorkText, phaseBar, sourcesText, transitionSeconds } from "./transitions.js";

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
  const given = plan.explanation || (plan.input_snapshot && (plan.input_snapshot.explanation || plan.input_snapshot.explain));
  if (given) return String(given);
  const lines = [`${plan.trigger.replace(/_/g, " ")}: expected WAF ${fmtFlops(plan.expected_waf)}, transition cost ${fmtNum(plan.transition_cost)} FLOP (weighted), D_running ${fmtSecs(plan.d_running_s)}.`];
  for (const d of plan.decisions || []) {
    if (d.old_workers === d.new_workers) continue;
    lines.push(`${taskLabel(d.task)}: ${d.old_workers} → ${d.new_workers} workers`);
  }
  return lines.join("\n");
}

function renderTransition(t) {
  const ev = t.failure_event ? events.get(t.failure_event) : null;
  return el("div", { class: "panel", style: { margin: "6px 0", padding: "8px 10px" }, "data-transition": t.id },
    el("div", { class: "tl-head" },
      el("strong", {}, el("a", { href: `/tasks/${t.task}/` }, t.task_name || taskLabel(t.task))), badge(t.state), t.kind ? badge(t.kind) : null,
      el("span", { class: "muted" }, `epoch ${t.previous_epoch ?? Math.max(t.epoch - 1, 0)} → ${t.epoch} · ${t.old_workers} → ${t.new_workers} workers · ${fmtSecs(transitionSeconds(t))} total`)),
    phaseBar(t),
    el("dl", { class: "kv" },
      ev ? [el("dt", {}, "Recovers from"), el("dd", {}, badge(ev.severity, "sev"), " ", el("a", { href: `/alerts/?event=${ev.id}` }, ev.kind), ev.node_name ? ` on ${ev.node_name}` : "", t.detection_latency_s !== null && t.detection_latency_s !== undefined ? `, detected in ${fmtSecs(t.detection_latency_s)}` : "")] : null,
      el("dt", {}, "Lost work"), el("dd", { "data-testid": "lost-work" }, lostWorkText(t)),
      el("dt", {}, "State from"), el("dd", { "data-testid": "migration-sources" }, sourcesText(t.migration_sources)),
      t.resume_iteration !== null && t.resume_iteration !== undefined ? [el("dt", {}, "Resumed at"), el("dd", {}, `iteration ${t.resume_iteration}`)] : null,
      t.error ? [el("dt", {}, "Error"), el("dd", { class: "field-error" }, t.error)] : null));
}

function renderPlan(p) {
  const ev = p.failure_event ? events.get(p.failure_event) : null;
  const ts = transitions.filter((t) => t.plan === p.id);
  const decisions = p.decisions || [];
  return el("li", { id: `plan-${p.id}`, class: p.trigger === "failure" ? "trigger-failure" : "", "data-testid": "plan-item" },
    el("div", { class: "tl-head" },
      el("strong", {}, `Plan #${p.id}`), badge(p.trigger), p.lookup ? el("span", { class: "badge", title: "decided by a lookup of a precomputed plan" }, "precomputed") : null, el("span", { class: "tl-time", title: p.created_at }, fmtTime(p.created_at)),
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
    const need = [...new Set([...plans, ...transitions].map((x) => x.failure_event).filter((x) => x && !events.has(x)))];
    await Promise.all(need.map(async (id) => { try { events.set(id, await api(EP.failureEvent(id))); } catch { /* shown without link */ } }));
    render();
  } catch (e) { clear($("#timeline"), el("li", {}, errorBox(e))); }
}

$("#trigger-filter").addEventListener("change", render);
onLive(["plan.", "transition.", "live.reconnected"], debounce(refresh, 200));
refresh();
