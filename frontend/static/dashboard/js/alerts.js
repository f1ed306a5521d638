// Alerts: open / acknowledged / resolved, filters, acknowledge and resolve with a comment (operator),
// the failure event behind each alert with its evidence and captured stack, and where each alert was
// sent (its deliveries to the alert routes; "alert.delivery" live events refresh them).
import { $, $$, api, apiList, badge, canOperate, clear, confirmAction, debounce, el, empty, errorBox, fmtAgo, fmtSecs, fmtTime, secondsBetween, toast } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";

let stateFilter = "open,acknowledged";
let alerts = [];
const fresh = new Set();

function params() {
  const p = { ordering: "-created_at" };
  if (stateFilter) p.state = stateFilter.split(",");
  if ($("#sev-filter").value) p.severity = $("#sev-filter").value;
  if ($("#node-filter").value) p.node = $("#node-filter").value;
  return p;
}

async function loadNodes() {
  try {
    const nodes = await apiList(EP.nodes);
    const sel = $("#node-filter");
    for (const n of nodes) sel.append(el("option", { value: n.id }, n.name));
  } catch { /* the filter just stays short */ }
}

async function refresh() {
  try {
    alerts = await apiList(EP.alerts, params(), 500);
    render();
  } catch (e) { clear($("#alert-list"), errorBox(e)); }
}

function who(name, at, comment) {
  if (!at) return null;
  return el("div", { class: "muted" }, `${name || "system"} · ${fmtAgo(at)}`, comment ? el("div", { style: { color: "#1c2330" } }, `“${comment}”`) : null);
}

function render() {
  const box = $("#alert-list");
  if (!alerts.length) {
    clear(box, empty(stateFilter.includes("open") ? "No active alerts. The cluster is quiet." : "No alerts match these filters."));
    return;
  }
  const op = canOperate();
  clear(box, el("table", { class: "table" },
    el("thead", {}, el("tr", {}, el("th", {}, "Raised"), el("th", {}, "Severity"), el("th", {}, "State"), el("th", {}, "Alert"), el("th", {}, "Node"), el("th", {}, "Acknowledged"), el("th", {}, "Resolved"), el("th", { class: "num" }, ""))),
    el("tbody", {}, alerts.map((a) => el("tr", { id: `alert-${a.id}`, "data-testid": "alert-row", "data-alert": a.id, "data-state": a.state, class: fresh.has(a.id) ? "flash" : "" },
      el("td", { title: a.created_at }, fmtAgo(a.created_at)),
      el("td", {}, badge(a.severity, "sev")),
      el("td", { "data-testid": "alert-state" }, badge(a.state)),
      el("td", {}, a.message, deliveriesLine(a)),
      el("td", {}, a.node_name || "—"),
      el("td", {}, who(a.acknowledged_by, a.acknowledged_at, a.acknowledge_comment) || "—"),
      el("td", {}, who(a.resolved_by, a.resolved_at, a.resolve_comment) || "—"),
      el("td", {}, el("div", { class: "row-actions" },
        a.source_event ? el("button", { class: "btn btn-sm", type: "button", onclick: () => showEvent(a.source_event), "data-testid": "show-event" }, "Evidence") : null,
        op && a.state === "open" ? el("button", { class: "btn btn-sm btn-primary", type: "button", onclick: () => acknowledge(a), "data-testid": "ack-alert" }, "Acknowledge") : null,
        op && a.state !== "resolved" ? el("button", { class: "btn btn-sm", type: "button", onclick: () => resolve(a), "data-testid": "resolve-alert" }, "Resolve") : null)))))));
  fresh.clear();
}

// Where the alert was sent (the alert routes): route, state, attempts and, unless sent, why.
function deliveriesLine(a) {
  const ds = a.deliveries || [];
  if (!ds.length) return null;
  return el("div", { class: "muted", "data-testid": "alert-deliveries" }, "Deliveries: ",
    ds.map((d, i) => el("span", { "data-testid": "alert-delivery", "data-route": d.route, "data-state": d.state, title: d.last_error || "" },
      i ? " · " : "",
      `${d.route}${d.event === "resolved" ? " (resolution)" : ""} `,
      badge(d.state),
      ` ${d.attempts} attempt${d.attempts === 1 ? "" : "s"}`,
      d.last_error && d.state !== "sent" ? ` — ${d.last_error}` : "")));
}

async function acknowledge(a) {
  const { ok, comment } = await confirmAction({ title: "Acknowledge alert", body: a.message, confirmText: "Acknowledge", comment: "optional" });
  if (!ok) return;
  try {
    await api(EP.alertAcknowledge(a.id), { method: "POST", body: { comment } });
    toast("Alert acknowledged.", { kind: "ok" });
    refresh();
  } catch (e) { toast(e.message, { kind: "error" }); }
}

async function resolve(a) {
  const { ok, comment } = await confirmAction({ title: "Resolve alert", body: `${a.message} — say what was done.`, confirmText: "Resolve", comment: "required" });
  if (!ok) return;
  try {
    await api(EP.alertResolve(a.id), { method: "POST", body: { comment } });
    toast("Alert resolved.", { kind: "ok" });
    refresh();
  } catch (e) { toast(e.message, { kind: "error" }); }
}

function stackOf(evidence, depth = 0) {
  // top level (seeded / coordinator evidence) or inside the agent's report (report.event.stack)
  if (!evidence || typeof evidence !== "object" || depth > 3) return null;
  for (const k of ["stack", "py_stack", "traceback", "stacks", "stack_dump", "py_spy"]) {
    const v = evidence[k];
    if (v) return typeof v === "string" ? v : JSON.stringify(v, null, 2);
  }
  for (const k of ["report", "event", "exception"]) {
    const found = stackOf(evidence[k], depth + 1);
    if (found) return found;
  }
  return null;
}

async function showEvent(id) {
  const panel = $("#event-panel");
  panel.hidden = false;
  const box = $("#event-detail");
  clear(box, el("div", { class: "loading" }, "Loading failure event…"));
  try {
    const f = await api(EP.failureEvent(id));
    $("#event-title").textContent = `Failure event #${f.id}: ${f.kind}`;
    const stack = stackOf(f.evidence);
    const rest = { ...(f.evidence || {}) };
    for (const k of ["stack", "py_stack", "traceback", "stacks", "stack_dump", "py_spy"]) delete rest[k];
    clear(box,
      el("div", { class: "cols" },
        el("dl", { class: "kv" },
          el("dt", {}, "Severity"), el("dd", {}, badge(f.severity, "sev")),
          el("dt", {}, "Detector"), el("dd", {}, f.detector.replace(/_/g, " ")),
          el("dt", {}, "Action"), el("dd", {}, (f.action || "").replace(/_/g, " ")),
          el("dt", {}, "Where"), el("dd", {}, [f.node_name || "—", f.device ? ` · device #${f.device}` : "", f.task ? [" · ", el("a", { href: `/tasks/${f.task}/` }, `task #${f.task}`)] : ""]),
          el("dt", {}, "Occurred"), el("dd", {}, fmtTime(f.occurred_at)),
          el("dt", {}, "Detected"), el("dd", {}, `${fmtTime(f.detected_at)} (latency ${fmtSecs(secondsBetween(f.occurred_at, f.detected_at))})`),
          el("dt", {}, "Resolved"), el("dd", {}, f.resolved_at ? fmtTime(f.resolved_at) : "not yet"),
          f.escalated_from ? [el("dt", {}, "Escalated from"), el("dd", {}, el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); showEvent(f.escalated_from); } }, `event #${f.escalated_from}`))] : null,
          el("dt", {}, "Summary"), el("dd", {}, f.summary || "—")),
        el("div", {}, el("h3", {}, "Evidence"), el("pre", { "data-testid": "evidence" }, JSON.stringify(rest, null, 2)))),
      el("h3", {}, "Captured stack"),
      stack ? el("pre", { "data-testid": "stack" }, stack) : empty("No stack was captured for this event."));
    panel.scrollIntoView({ behavior: "smooth", block: "start" });
  } catch (e) { clear(box, errorBox(e)); }
}

for (const b of $$("#state-tabs button")) {
  b.addEventListener("click", () => {
    for (const o of $$("#state-tabs button")) o.setAttribute("aria-pressed", String(o === b));
    stateFilter = b.dataset.state;
    refresh();
  });
}
$("#sev-filter").addEventListener("change", refresh);
$("#node-filter").addEventListener("change", refresh);
$("#event-close").addEventListener("click", () => { $("#event-panel").hidden = true; });

onLive("alert.raised", (p) => fresh.add(p.id));
onLive(["alert.", "live.reconnected"], debounce(refresh, 100));

loadNodes();
refresh().then(() => {
  const ev = new URLSearchParams(location.search).get("event");
  if (ev) showEvent(Number(ev));
});
